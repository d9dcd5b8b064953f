//! Spec-normalised features of the GPU utilisation model (`util`, a cross-device model with
//! [`crate::device_features::Scale::Utilisation`]).
//!
//! The `util` model predicts `floor + roofline / utilisation` with the utilisation in (0, 1]
//! learned from these features alone, so a prediction is never below the spec roofline of the
//! device asked about. Every feature means the same on a small and on a large GPU: times relative
//! to the device's own compute and memory times, work and bytes per SM, and for GEMM-like kinds
//! the waves, tail and quantisation efficiency of the output tiles GEMM libraries use (cuBLAS
//! picks among shapes like these), plus the GEMM's
//! intensity against the device's ridge point. Absolute peaks and bandwidths are left out: with
//! five training GPUs they tell the GPUs apart rather than generalise. So is the L2 cache: the
//! training GPUs have 2-6 MB and every newer one 40-50 MB, a range trees cannot extrapolate
//! into, and leaving it out scored better with one GPU held out.
//!
//! The design was chosen on NeuSight's data by the study in `bench/gpu_util`; its figures are
//! in docs/accuracy.md#the-gpu-utilisation-model-util.

use perfcast_core::{DeviceSpec, ModuleKind};

use crate::error::{Error, Result};
use crate::features::FeatureSchema;

/// Output tile shapes (rows x columns) whose waves the GEMM features count.
const TILES: [(f64, f64); 4] = [(128.0, 128.0), (128.0, 64.0), (64.0, 64.0), (32.0, 128.0)];

/// Elements one thread block of an element-wise kernel handles (counting blocks per SM).
const BLOCK_ELEMS: f64 = 512.0;

/// Resident threads per SM the element-wise features scale by.
const THREADS_PER_SM: f64 = 2048.0;

/// Elements a half-precision row reduction (norm, softmax, sum) retires per SM per clock
/// cycle: each element is widened to fp32, reduced and scaled by instructions the SM issues,
/// while its bytes are half an fp32 element's, so on a GPU with much bandwidth per SM-cycle
/// the SMs, not DRAM, set its pace. fp32 row kernels showed no such pace (both fitted on
/// measured kernels, docs/accuracy.md).
const ROW_ELEMS_PER_SM_CYCLE: f64 = 4.0;

/// Which feature set a kind gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// Linear, matmul, conv2d: one (batched) GEMM.
    Gemm,
    /// Row-wise reductions (LayerNorm, softmax, sum): element-wise traffic in rows.
    Rows,
    /// Everything else: element-wise traffic.
    Elementwise,
}

fn class(kind: ModuleKind) -> Class {
    match kind {
        ModuleKind::Linear | ModuleKind::Matmul | ModuleKind::Conv2d => Class::Gemm,
        ModuleKind::LayerNorm | ModuleKind::RmsNorm | ModuleKind::Softmax | ModuleKind::Sum => {
            Class::Rows
        }
        _ => Class::Elementwise,
    }
}

/// Feature names of a kind, in the order [`UtilCols::fill`] writes them.
pub fn names(kind: ModuleKind) -> Vec<String> {
    let mut out: Vec<String> = ["u_log_roofline_us", "u_log_bytes_per_sm"]
        .iter()
        .map(|s| (*s).to_string())
        .collect();
    match class(kind) {
        Class::Gemm => {
            for n in [
                "u_log_compute_us",
                "u_log_memory_us",
                "u_log_intensity_over_ridge",
                "u_log_batch",
                "u_log_m",
                "u_log_n",
                "u_log_k",
                "u_log_flops_per_sm",
            ] {
                out.push(n.to_string());
            }
            for (tm, tn) in TILES {
                out.push(format!("u_log_waves_{tm}x{tn}"));
                out.push(format!("u_tail_{tm}x{tn}"));
                out.push(format!("u_qeff_{tm}x{tn}"));
            }
            out.push("u_qeff_best".to_string());
            out.push("u_log_k_per_output_per_sm".to_string());
            if kind == ModuleKind::Conv2d {
                for n in ["u_conv_saving", "u_log_kernel_area", "u_conv_stride"] {
                    out.push(n.to_string());
                }
            }
        }
        Class::Rows | Class::Elementwise => {
            for n in [
                "u_log_elements",
                "u_log_elements_per_thread_slot",
                "u_log_blocks_per_sm",
            ] {
                out.push(n.to_string());
            }
            if class(kind) == Class::Rows {
                for n in [
                    "u_log_rows",
                    "u_log_row_len",
                    "u_log_rows_per_sm",
                    "u_row_tail",
                ] {
                    out.push(n.to_string());
                }
            }
        }
    }
    out
}

/// Where the columns the features read sit in a kind's single-device row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UtilCols {
    kind: ModuleKind,
    batch: usize,
    work_flops: usize,
    work_bytes: usize,
    output_elems: usize,
    gemm_m: usize,
    gemm_n: usize,
    gemm_k: usize,
    /// Matmul: heads and per-matrix rows; conv2d: groups; LayerNorm: features; softmax and
    /// sum: the last axis.
    a: Option<usize>,
    b: Option<usize>,
    peak: usize,
    bandwidth: usize,
    /// Conv2d: kernel h, w, stride h, w, dilation h, w.
    conv: Option<[usize; 6]>,
}

impl UtilCols {
    pub(crate) fn of(schema: &FeatureSchema) -> Result<UtilCols> {
        let at = |name: &str| {
            schema.index(name).ok_or_else(|| {
                Error::InvalidData(format!(
                    "the util model needs feature `{name}`, the `{}` schema has none",
                    schema.kind
                ))
            })
        };
        let (a, b) = match schema.kind {
            ModuleKind::Matmul => (Some(at("heads")?), Some(at("m")?)),
            ModuleKind::Conv2d => (Some(at("groups")?), None),
            ModuleKind::LayerNorm | ModuleKind::RmsNorm => (Some(at("features")?), None),
            ModuleKind::Softmax | ModuleKind::Sum => (Some(at("w")?), None),
            _ => (None, None),
        };
        let conv = match schema.kind {
            ModuleKind::Conv2d => Some([
                at("kernel_h")?,
                at("kernel_w")?,
                at("stride_h")?,
                at("stride_w")?,
                at("dilation_h")?,
                at("dilation_w")?,
            ]),
            _ => None,
        };
        Ok(UtilCols {
            kind: schema.kind,
            peak: at("dev_peak_gflops")?,
            bandwidth: at("dev_bandwidth_gbs")?,
            conv,
            batch: at("batch")?,
            work_flops: at("work_flops")?,
            work_bytes: at("work_bytes")?,
            output_elems: at("output_elems")?,
            gemm_m: at("gemm_m")?,
            gemm_n: at("gemm_n")?,
            gemm_k: at("gemm_k")?,
            a,
            b,
        })
    }

    /// How many times fewer multiplies than direct convolution the row's conv needs with the
    /// cheapest library algorithm ([`perfcast_core::canonical::conv_work_saving`]); 1 for other
    /// kinds.
    fn saving(&self, x: &[f64]) -> f64 {
        let (Some([kh, kw, sh, sw, dh, dw]), Some(groups)) = (self.conv, self.a) else {
            return 1.0;
        };
        let r = x[kh];
        if x[groups] == 1.0
            && x[sh] == 1.0
            && x[sw] == 1.0
            && x[dh] == 1.0
            && x[dw] == 1.0
            && r == x[kw]
            && r >= 3.0
        {
            4.0 * r * r / ((r + 1.0) * (r + 1.0))
        } else {
            1.0
        }
    }

    /// The least time the row's device needs for it, ms: its roofline with the least work a
    /// library algorithm needs (Winograd's for the convs it applies to). What the utilisation
    /// divides, so no prediction is below it.
    pub(crate) fn least_ms(&self, x: &[f64]) -> f64 {
        let flops = x[self.work_flops] / self.saving(x);
        let compute = flops / (x[self.peak].max(f64::MIN_POSITIVE) * 1e6);
        let memory = x[self.work_bytes] / (x[self.bandwidth].max(f64::MIN_POSITIVE) * 1e6);
        compute.max(memory).max(1e-9)
    }

    /// The time, ms, a half-precision row reduction's elements take at
    /// [`ROW_ELEMS_PER_SM_CYCLE`] over the device's SMs at its clock, which it spends besides
    /// moving its bytes; 0 for other kinds and for fp32 and TF32 (4-byte) rows.
    pub(crate) fn cycle_ms(&self, x: &[f64], device: &DeviceSpec) -> f64 {
        if class(self.kind) != Class::Rows || device.dtype.bytes() >= 4.0 {
            return 0.0;
        }
        let elems = self.elements(x);
        let per_ms =
            ROW_ELEMS_PER_SM_CYCLE * f64::from(device.cores.max(1)) * device.clock_mhz * 1e3;
        elems / per_ms.max(f64::MIN_POSITIVE)
    }

    /// Elements the row's kernel reads (a sum reads its rows, writes one per row).
    fn elements(&self, x: &[f64]) -> f64 {
        let elems = x[self.output_elems].max(1.0);
        match self.kind {
            ModuleKind::Sum => elems * self.a.map_or(1.0, |c| x[c].max(1.0)),
            _ => elems,
        }
    }

    /// Writes the features of row `x` on `device` into `out` ([`names`] order) and returns how
    /// many it wrote.
    pub(crate) fn fill(&self, x: &[f64], device: &DeviceSpec, out: &mut [f64]) -> usize {
        let sms = f64::from(device.cores.max(1));
        let peak = device.peak_gflops.max(f64::MIN_POSITIVE) * 1e9;
        let bandwidth = device.mem_bandwidth_gbs.max(f64::MIN_POSITIVE) * 1e9;
        let saving = self.saving(x);
        let flops = (x[self.work_flops] / saving).max(1.0);
        let bytes = x[self.work_bytes].max(1.0);
        let roofline_us = (self.least_ms(x) * 1e3).max(1e-6);
        let mut n = 0;
        let mut push = |v: f64| {
            out[n] = if v.is_finite() { v } else { 0.0 };
            n += 1;
        };
        push(roofline_us.log10());
        push(log2(bytes / sms));
        match class(self.kind) {
            Class::Gemm => {
                let (batch, m, n_out, k) = self.gemm(x);
                push((flops / peak * 1e6).max(1e-6).log10());
                push((bytes / bandwidth * 1e6).max(1e-6).log10());
                push(log2(flops / bytes / (peak / bandwidth)));
                push(log2(batch));
                push(log2(m));
                push(log2(n_out));
                push(log2(k));
                push(log2(flops / sms));
                let mut best: f64 = 0.0;
                for (tm, tn) in TILES {
                    let (rows, cols) = ((m / tm).ceil(), (n_out / tn).ceil());
                    let tiles = batch * rows * cols;
                    let waves = (tiles / sms).ceil().max(1.0);
                    let tail = (tiles - (waves - 1.0) * sms) / sms;
                    let padding = m * n_out / (rows * tm * cols * tn);
                    let qeff = padding * tiles / (waves * sms);
                    push(log2(waves));
                    push(tail);
                    push(qeff);
                    best = best.max(qeff);
                }
                push(best);
                push(log2(k / (batch * m * n_out / sms).max(1.0)));
                if let Some([kh, kw, sh, ..]) = self.conv {
                    push(saving);
                    push(log2(x[kh] * x[kw]));
                    push(x[sh]);
                }
            }
            class @ (Class::Rows | Class::Elementwise) => {
                let elems = self.elements(x);
                push(log2(elems));
                push(log2(elems / (sms * THREADS_PER_SM)));
                push(log2((elems / BLOCK_ELEMS).ceil() / sms));
                if class == Class::Rows {
                    let len = self.a.map_or(1.0, |c| x[c].max(1.0));
                    let rows = (elems / len).max(1.0);
                    let waves = (rows / sms).ceil().max(1.0);
                    push(log2(rows));
                    push(log2(len));
                    push(log2(rows / sms));
                    push((rows - (waves - 1.0) * sms) / sms);
                }
            }
        }
        n
    }

    /// The row's GEMM as (batch of independent matrices, rows, output columns, reduction).
    fn gemm(&self, x: &[f64]) -> (f64, f64, f64, f64) {
        let (gm, gn, gk) = (
            x[self.gemm_m].max(1.0),
            x[self.gemm_n].max(1.0),
            x[self.gemm_k].max(1.0),
        );
        let batch = match (self.kind, self.a, self.b) {
            (ModuleKind::Matmul, Some(heads), Some(m)) => {
                (x[self.batch] * x[heads]).max(1.0).min(gm / x[m].max(1.0))
            }
            (ModuleKind::Conv2d, Some(groups), _) => x[groups].max(1.0),
            _ => 1.0,
        };
        (batch, gm / batch, gn, gk)
    }
}

/// A GPU's vendor from its name: launch floors follow it.
pub use perfcast_core::arch::vendor;

fn log2(v: f64) -> f64 {
    v.max(1e-30).log2()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::row;
    use perfcast_core::{Context, DeviceKind, Linear, Matmul, ModuleSpec, Phase};

    fn gpu(sms: u32) -> DeviceSpec {
        let mut d = perfcast_core::testing::cpu_device();
        d.kind = DeviceKind::Gpu;
        (d.peak_gflops, d.mem_bandwidth_gbs) = (19_500.0, 1_555.0);
        d.cores = sms;
        d.cache_mb = 40.0;
        d
    }

    fn features(spec: &ModuleSpec, batch: usize, device: &DeviceSpec) -> Vec<f64> {
        let context = Context {
            batch,
            phase: Phase::Inference,
            threads: 1,
            utilisation: 0.0,
        };
        let schema = FeatureSchema::for_kind(spec.kind());
        let x = row(spec, &context, device);
        let cols = UtilCols::of(&schema).unwrap();
        let mut out = vec![f64::NAN; 64];
        let n = cols.fill(&x, device, &mut out);
        assert_eq!(n, names(spec.kind()).len(), "{}", spec.kind());
        out.truncate(n);
        out
    }

    #[test]
    fn every_kind_fills_its_named_features_with_finite_values() {
        let device = gpu(108);
        for spec in perfcast_core::testing::one_of_each_kind() {
            for v in features(&spec, 4, &device) {
                assert!(v.is_finite(), "{}: {v}", spec.kind());
            }
        }
    }

    #[test]
    fn gemm_waves_follow_the_sms() {
        // 1024 x 1024 output: 64 tiles of 128x128, one partial wave on 108 SMs, 0.6 on 80 SMs...
        let spec = ModuleSpec::Linear(Linear {
            tokens: 1024,
            in_features: 1024,
            out_features: 1024,
            bias: false,
        });
        let names = names(ModuleKind::Linear);
        let at = |f: &[f64], name: &str| f[names.iter().position(|n| n == name).unwrap()];
        let big = features(&spec, 1, &gpu(108));
        let small = features(&spec, 1, &gpu(40));
        assert_eq!(at(&big, "u_log_waves_128x128"), 0.0);
        assert!((at(&big, "u_tail_128x128") - 64.0 / 108.0).abs() < 1e-12);
        // 64 tiles on 40 SMs: two waves, the second 24/40 full.
        assert_eq!(at(&small, "u_log_waves_128x128"), 1.0);
        assert!((at(&small, "u_tail_128x128") - 24.0 / 40.0).abs() < 1e-12);
        assert!((at(&small, "u_qeff_128x128") - 64.0 / 80.0).abs() < 1e-12);
    }

    #[test]
    fn matmul_batches_its_heads() {
        let spec = ModuleSpec::Matmul(Matmul {
            heads: 16,
            m: 512,
            k: 64,
            n: 512,
            trans_a: false,
            trans_b: false,
        });
        let names = names(ModuleKind::Matmul);
        let f = features(&spec, 8, &gpu(108));
        let at = |name: &str| f[names.iter().position(|n| n == name).unwrap()];
        assert_eq!(at("u_log_batch"), 7.0);
        assert_eq!(at("u_log_m"), 9.0);
        assert_eq!(at("u_log_k"), 6.0);
        assert_eq!(at("u_log_n"), 9.0);
    }
}
