//! Data faults found, not learned: a device's GEMM tables checked against each other and
//! against the same check on the other devices.
//!
//! A linear layer and a bmm of similar size run the same cuBLAS GEMM kernels, so on one device
//! their efficiency (spec roofline time / measured time) on large compute-bound GEMMs should be
//! close, and the ratio between them should look like the other devices' ratio. NeuSight's
//! P4 `linear` file does not: its efficiency falls to 0.17 on long kernels (thermal throttling
//! is the likely cause) while the P4's bmm holds about 0.5. Such a file is flagged and
//! reported, so a user sees it before a model learns it.

use perfcast_core::{Context, DeviceSpec, ModuleKind, Phase, features};
use serde::Serialize;

use crate::dataset::DatasetDir;
use crate::error::Result;

/// Work range of the GEMMs compared, FLOPs: large enough to fill any GPU, short enough that
/// no run is minutes long.
const GEMM_FLOPS: (f64, f64) = (1e9, 1e11);
/// A device's log ratio may differ from the others' median by at most ln(1.5).
pub const MAX_LOG_DEVIATION: f64 = 0.405_465_108_108_164_4;

/// The check of one device.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GemmConsistency {
    /// Device name.
    pub device: String,
    /// Median efficiency of its compute-bound linear rows in the work range.
    pub linear_efficiency: f64,
    /// The same for its matmul rows.
    pub matmul_efficiency: f64,
    /// ln(linear / matmul).
    pub log_ratio: f64,
    /// The median log ratio of the other devices checked.
    pub others_log_ratio: f64,
    /// Whether `|log_ratio - others_log_ratio|` exceeds [`MAX_LOG_DEVIATION`].
    pub flagged: bool,
}

/// Median efficiency (roofline / measured) of `kind`'s inference rows in the work range whose
/// intensity is at or past the device's ridge point; `None` with no such row.
fn median_efficiency(
    dir: &DatasetDir,
    device: &DeviceSpec,
    kind: ModuleKind,
) -> Result<Option<f64>> {
    let ridge = device.peak_gflops / device.mem_bandwidth_gbs;
    let mut eff: Vec<f64> = Vec::new();
    for r in dir.read(kind)? {
        let (Some(t), Phase::Inference) = (r.timing(), r.context.phase) else {
            continue;
        };
        let Context { batch, .. } = r.context;
        let d = features::derive(&r.spec, batch);
        let bytes = d.bytes_read + d.bytes_written;
        if d.flops < GEMM_FLOPS.0 || d.flops > GEMM_FLOPS.1 || d.flops / bytes < ridge {
            continue;
        }
        let roofline_ms = d.flops / (device.peak_gflops * 1e9) * 1e3;
        eff.push(roofline_ms / t.median_ms);
    }
    if eff.is_empty() {
        return Ok(None);
    }
    eff.sort_by(f64::total_cmp);
    Ok(Some(eff[eff.len() / 2]))
}

/// Checks every dataset that holds both linear and matmul rows in the work range against the
/// others. Fewer than three such devices: nothing to compare, an empty result.
pub fn gemm_consistency(dirs: &[DatasetDir]) -> Result<Vec<GemmConsistency>> {
    let mut rows = Vec::new();
    for dir in dirs {
        let device = dir.device()?;
        let lin = median_efficiency(dir, &device, ModuleKind::Linear)?;
        let mm = median_efficiency(dir, &device, ModuleKind::Matmul)?;
        if let (Some(l), Some(m)) = (lin, mm) {
            rows.push((device.name, l, m));
        }
    }
    if rows.len() < 3 {
        return Ok(Vec::new());
    }
    let ratios: Vec<f64> = rows.iter().map(|(_, l, m)| (l / m).ln()).collect();
    Ok(rows
        .iter()
        .enumerate()
        .map(|(i, (name, l, m))| {
            let mut others: Vec<f64> = ratios
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, r)| *r)
                .collect();
            others.sort_by(f64::total_cmp);
            let n = others.len();
            let median = if n % 2 == 1 {
                others[n / 2]
            } else {
                (others[n / 2 - 1] + others[n / 2]) / 2.0
            };
            GemmConsistency {
                device: name.clone(),
                linear_efficiency: *l,
                matmul_efficiency: *m,
                log_ratio: ratios[i],
                others_log_ratio: median,
                flagged: (ratios[i] - median).abs() > MAX_LOG_DEVIATION,
            }
        })
        .collect())
}

impl GemmConsistency {
    /// The table at fault on a flagged device: of linear and matmul, the one whose efficiency
    /// lies further (in log) from the other devices' median for that kind. `None` unflagged.
    pub fn faulty_kind(&self, all: &[GemmConsistency]) -> Option<ModuleKind> {
        if !self.flagged {
            return None;
        }
        let median = |f: fn(&GemmConsistency) -> f64| {
            let mut v: Vec<f64> = all
                .iter()
                .filter(|c| c.device != self.device)
                .map(|c| f(c).ln())
                .collect();
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied().unwrap_or(0.0)
        };
        let lin = (self.linear_efficiency.ln() - median(|c| c.linear_efficiency)).abs();
        let mm = (self.matmul_efficiency.ln() - median(|c| c.matmul_efficiency)).abs();
        Some(if lin >= mm {
            ModuleKind::Linear
        } else {
            ModuleKind::Matmul
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Outcome, Record, Timing};
    use perfcast_core::{Linear, Matmul, ModuleSpec};

    fn gpu(name: &str) -> DeviceSpec {
        DeviceSpec {
            name: name.into(),
            kind: perfcast_core::DeviceKind::Gpu,
            peak_gflops: 10_000.0,
            mem_bandwidth_gbs: 500.0,
            ..perfcast_core::testing::cpu_device()
        }
    }

    fn record(spec: ModuleSpec, ms: f64) -> Record {
        Record {
            spec,
            context: Context {
                batch: 1,
                phase: Phase::Inference,
                threads: 1,
                utilisation: 0.0,
            },
            backend: "test".into(),
            outcome: Outcome::Ok(Timing::median_only(ms)),
            perfcast_version: "0".into(),
            timestamp: 0,
        }
    }

    /// One device whose linear GEMMs run at `lin` of the peak and bmm at `mm`.
    fn device(root: &std::path::Path, name: &str, lin: f64, mm: f64) -> DatasetDir {
        let device = gpu(name);
        let dir = DatasetDir::create_or_open(root.join(name), &device).unwrap();
        let (mut linear, mut matmul) = (Vec::new(), Vec::new());
        for s in [1024, 1536, 2048] {
            let l = ModuleSpec::Linear(Linear {
                tokens: s,
                in_features: s,
                out_features: s,
                bias: false,
            });
            let m = ModuleSpec::Matmul(Matmul {
                heads: 1,
                m: s,
                k: s,
                n: s,
                trans_a: false,
                trans_b: false,
            });
            let roof = |spec: &ModuleSpec| {
                features::derive(spec, 1).flops / (device.peak_gflops * 1e9) * 1e3
            };
            linear.push(record(l.clone(), roof(&l) / lin));
            matmul.push(record(m.clone(), roof(&m) / mm));
        }
        dir.write(ModuleKind::Linear, &linear).unwrap();
        dir.write(ModuleKind::Matmul, &matmul).unwrap();
        dir
    }

    #[test]
    fn a_device_whose_linear_disagrees_with_its_bmm_is_flagged_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let dirs = vec![
            device(tmp.path(), "a", 0.7, 0.6),
            device(tmp.path(), "b", 0.8, 0.7),
            device(tmp.path(), "c", 0.5, 0.45),
            // The P4 pattern: linear far below its own bmm.
            device(tmp.path(), "p4", 0.17, 0.5),
        ];
        let check = gemm_consistency(&dirs).unwrap();
        let flagged: Vec<&str> = check
            .iter()
            .filter(|c| c.flagged)
            .map(|c| c.device.as_str())
            .collect();
        assert_eq!(flagged, ["p4"], "{check:?}");
        assert!((check[3].linear_efficiency - 0.17).abs() < 1e-9);
        // Its linear table is the one at fault: its bmm sits with the others' bmm.
        assert_eq!(check[3].faulty_kind(&check), Some(ModuleKind::Linear));
        assert_eq!(check[0].faulty_kind(&check), None);
        // A device whose bmm is the odd one out has its bmm table blamed.
        let dirs = vec![
            device(tmp.path(), "a2", 0.7, 0.6),
            device(tmp.path(), "b2", 0.8, 0.7),
            device(tmp.path(), "c2", 0.5, 0.45),
            device(tmp.path(), "odd", 0.7, 0.2),
        ];
        let check = gemm_consistency(&dirs).unwrap();
        assert_eq!(check[3].faulty_kind(&check), Some(ModuleKind::Matmul));
    }
}
