//! Baidu DeepBench: cuDNN / cuBLAS / MIOpen / MKL kernel times on the same shapes on many
//! devices.
//!
//! Reads `conv.csv` and `gemm.csv` (either may be absent, not both); `specs.csv` publishes no
//! figures, so device specs come from [`super::gpus`], but it does publish each results file's
//! library versions, which become the spec's `software` ([`software_stacks`]). See the
//! [module docs](super) for the mapping.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use perfcast_core::{Conv2d, DeviceKind, Matmul, ModuleKind, ModuleSpec, Phase};

use super::read::{Col, CsvFile};
use super::{Devices, Import, checked_spec, gpus, record, source_folder};
use crate::error::{Error, Result};
use crate::record::Timing;

/// Backend name of a device's rows: `deepbench:<device>` (the library and its version
/// differ per device).
pub fn backend(device: &str) -> String {
    format!("deepbench:{device}")
}

/// Whether a `precision` value means fp32 inputs and fp32 math. DeepBench writes `Float` for
/// those; the others it publishes are int8, fp16 and 16-bit inputs with 32-bit math.
pub fn is_fp32(precision: &str) -> bool {
    matches!(
        precision.trim().to_ascii_lowercase().as_str(),
        "float" | "fp32" | "float32"
    )
}

/// The phase of a `mode` value.
fn phase(mode: &str) -> Option<Phase> {
    match mode.trim().to_ascii_lowercase().as_str() {
        "train" | "training" => Some(Phase::Training),
        "inference" => Some(Phase::Inference),
        _ => None,
    }
}

/// Reads the folder holding DeepBench's `conv.csv` and `gemm.csv`.
pub fn import(dir: &Path) -> Result<Import> {
    let conv = dir.join("conv.csv");
    let gemm = dir.join("gemm.csv");
    source_folder(dir, &["conv.csv", "gemm.csv"])?;
    let mut devices = Devices::default();
    let mut files = Files::new();
    if conv.is_file() {
        read_file(&conv, ModuleKind::Conv2d, &mut devices, &mut files)?;
    }
    if gemm.is_file() {
        read_file(&gemm, ModuleKind::Matmul, &mut devices, &mut files)?;
    }
    let specs = dir.join("specs.csv");
    let stacks = if specs.is_file() {
        software_stacks(&specs)?
    } else {
        BTreeMap::new()
    };
    let mut out = Import::new("deepbench", dir);
    out.devices = devices.into_vec();
    for d in &mut out.devices {
        let Some(spec) = &mut d.device else { continue };
        // The stack of the results files the device's fp32 rows come from; none when those
        // files publish none or disagree (a device's inference sheets ran other versions than
        // its training sheets, e.g. the GTX 1080 Ti's CUDA 8.0.61 beside 8.0.88).
        let found: BTreeSet<&String> = files
            .get(&d.id)
            .into_iter()
            .flatten()
            .filter_map(|f| stacks.get(f))
            .collect();
        if found.len() == 1 {
            spec.software = found.into_iter().next().cloned();
        }
    }
    Ok(out)
}

/// Per device id, the results files (`file` column) its fp32 rows come from.
type Files = BTreeMap<String, BTreeSet<String>>;

/// The library versions `specs.csv` publishes, in the order they are written into a stack,
/// with the name each is written under.
const LIBRARIES: &[(&str, &str)] = &[
    ("CUDA Version", "CUDA"),
    ("Cudnn Version", "cuDNN"),
    ("ROCm Version", "ROCm"),
    ("MIOpen Version", "MIOpen"),
    ("Intel MKL Version", "MKL"),
];

/// Reads `specs.csv` (`file,device,key,value`): per results file, its software stack, e.g.
/// `CUDA 8.0.88, cuDNN 6.0.21` or `ROCm 1.7.1, MIOpen 1.3`. Files that publish none of
/// [`LIBRARIES`] (or only `-`) are left out.
pub fn software_stacks(path: &Path) -> Result<BTreeMap<String, String>> {
    let csv = CsvFile::read(path)?;
    let file = csv.column("file")?;
    let key = csv.column("key")?;
    let value = csv.column("value")?;
    let mut found: BTreeMap<String, BTreeMap<usize, String>> = BTreeMap::new();
    for row in 0..csv.rows() {
        let (Some(f), Some(k), Some(v)) = (file.raw(row), key.raw(row), value.raw(row)) else {
            continue;
        };
        let Some(order) = LIBRARIES.iter().position(|(name, _)| *name == k) else {
            continue;
        };
        if v == "-" {
            continue;
        }
        let label = LIBRARIES[order].1;
        // `MKL 2017.3, MKLML (2017.0.1)` already names itself.
        let part = if v.starts_with(label) {
            v.to_string()
        } else {
            format!("{label} {v}")
        };
        found.entry(f.to_string()).or_default().insert(order, part);
    }
    Ok(found
        .into_iter()
        .map(|(f, parts)| (f, parts.into_values().collect::<Vec<_>>().join(", ")))
        .collect())
}

/// A time cell that may be unpublished (empty, or DeepBench's `N/A*`).
fn optional_time(col: &Col<'_>, row: usize) -> Result<Option<f64>> {
    match col.raw(row) {
        None => Ok(None),
        Some(s) if s.to_ascii_uppercase().starts_with("N/A") => Ok(None),
        Some(_) => col.time_ms(row, 1.0).map(Some),
    }
}

fn not_published(col: &Col<'_>, row: usize) -> String {
    match col.raw(row) {
        None => format!("`{}` not published", col.name()),
        Some(v) => format!("`{}` not published (`{v}`)", col.name()),
    }
}

fn read_file(
    path: &Path,
    kind: ModuleKind,
    devices: &mut Devices,
    files: &mut Files,
) -> Result<()> {
    let csv = CsvFile::read(path)?;
    // Optional: it only ties rows to the library versions in `specs.csv`.
    let file = csv.has("file").then(|| csv.column("file")).transpose()?;
    let device = csv.column("device")?;
    let mode = csv.column("mode")?;
    let precision = csv.column("precision")?;
    let shape = Shape::new(&csv, kind)?;
    for row in 0..csv.rows() {
        let id = device.text(row)?;
        let rows = devices.get(id, || gpus::deepbench(id).map(gpus::Published::spec));
        let p = precision.text(row)?;
        if !is_fp32(p) {
            rows.skip(kind, format!("precision `{p}` is not fp32"));
            continue;
        }
        let m = mode.text(row)?;
        let Some(mode_phase) = phase(m) else {
            rows.skip(kind, format!("mode `{m}` is neither train nor inference"));
            continue;
        };
        let Some(device) = &rows.device else {
            rows.skip(kind, format!("no published spec for device `{id}`"));
            continue;
        };
        if let Some(f) = file.as_ref().and_then(|c| c.raw(row)) {
            files
                .entry(id.to_string())
                .or_default()
                .insert(f.to_string());
        }
        // DeepBench's CPU runs set no thread count: OpenMP used every hardware thread.
        let threads = match device.kind {
            DeviceKind::Gpu => 1,
            DeviceKind::Cpu => device.threads as usize,
        };
        let backend = backend(id);
        match &shape {
            Shape::Conv {
                cols,
                groups,
                fwd,
                bwd_inputs,
                bwd_params,
            } => {
                let groups = match groups {
                    Some(g) => g.count(row)?,
                    None => 1,
                };
                let (spec, batch) = conv_spec(cols, groups, row)?;
                let Some(fwd_ms) = optional_time(fwd, row)? else {
                    rows.skip(kind, not_published(fwd, row));
                    continue;
                };
                let spec = match checked_spec(spec) {
                    Ok(s) => s,
                    Err(reason) => {
                        rows.skip(kind, reason);
                        continue;
                    }
                };
                if mode_phase == Phase::Training {
                    let bi = optional_time(bwd_inputs, row)?;
                    let bp = optional_time(bwd_params, row)?;
                    match (bi, bp) {
                        (Some(bi), Some(bp)) => rows.push(record(
                            spec.clone(),
                            batch,
                            Phase::Training,
                            threads,
                            &backend,
                            Timing::median_only(fwd_ms + bi + bp),
                        )),
                        (None, _) => rows.skip(
                            kind,
                            format!("training: {}", not_published(bwd_inputs, row)),
                        ),
                        (_, None) => rows.skip(
                            kind,
                            format!("training: {}", not_published(bwd_params, row)),
                        ),
                    }
                }
                rows.push(record(
                    spec,
                    batch,
                    Phase::Inference,
                    threads,
                    &backend,
                    Timing::median_only(fwd_ms),
                ));
            }
            Shape::Gemm {
                m,
                n,
                k,
                a_t,
                b_t,
                time,
            } => {
                let spec = ModuleSpec::Matmul(Matmul {
                    heads: 1,
                    m: m.count(row)?,
                    k: k.count(row)?,
                    n: n.count(row)?,
                    trans_a: a_t.transposed(row)?,
                    trans_b: b_t.transposed(row)?,
                });
                let Some(ms) = optional_time(time, row)? else {
                    rows.skip(kind, not_published(time, row));
                    continue;
                };
                match checked_spec(spec) {
                    Ok(spec) => rows.push(record(
                        spec,
                        1,
                        Phase::Inference,
                        threads,
                        &backend,
                        Timing::median_only(ms),
                    )),
                    Err(reason) => rows.skip(kind, reason),
                }
            }
        }
    }
    Ok(())
}

/// The columns of one file.
enum Shape<'a> {
    Conv {
        /// W, H, C, N, K, S_filter_w, R_filter_h, pad_w, pad_h, stride_w, stride_h.
        cols: Box<[Col<'a>; 11]>,
        /// `G`, groups: not DeepBench's, written by perfcast's own measurements in its layout
        /// (depthwise and grouped convs); 1 where absent.
        groups: Option<Col<'a>>,
        fwd: Col<'a>,
        bwd_inputs: Col<'a>,
        bwd_params: Col<'a>,
    },
    Gemm {
        m: Col<'a>,
        n: Col<'a>,
        k: Col<'a>,
        /// `A_T` / `B_T`: `N` or `T` per operand.
        a_t: Col<'a>,
        b_t: Col<'a>,
        time: Col<'a>,
    },
}

const CONV_COLUMNS: [&str; 11] = [
    "W",
    "H",
    "C",
    "N",
    "K",
    "S_filter_w",
    "R_filter_h",
    "pad_w",
    "pad_h",
    "stride_w",
    "stride_h",
];

impl<'a> Shape<'a> {
    fn new(csv: &'a CsvFile, kind: ModuleKind) -> Result<Shape<'a>> {
        Ok(match kind {
            ModuleKind::Conv2d => {
                let cols: Vec<Col<'a>> = CONV_COLUMNS
                    .iter()
                    .map(|c| csv.column(c))
                    .collect::<Result<_>>()?;
                let cols: Box<[Col<'a>; 11]> = cols
                    .into_boxed_slice()
                    .try_into()
                    .map_err(|_| Error::schema(csv.path(), "internal: column count"))?;
                Shape::Conv {
                    cols,
                    groups: csv.has("G").then(|| csv.column("G")).transpose()?,
                    fwd: csv.column("fwd_ms")?,
                    bwd_inputs: csv.column("bwd_inputs_ms")?,
                    bwd_params: csv.column("bwd_params_ms")?,
                }
            }
            _ => Shape::Gemm {
                m: csv.column("M")?,
                n: csv.column("N")?,
                k: csv.column("K")?,
                a_t: csv.column("A_T")?,
                b_t: csv.column("B_T")?,
                time: csv.column("time_ms")?,
            },
        })
    }
}

/// The conv2d spec and batch of a row.
fn conv_spec(cols: &[Col<'_>; 11], groups: usize, row: usize) -> Result<(ModuleSpec, usize)> {
    let mut v = [0usize; 11];
    for (slot, col) in v.iter_mut().zip(cols.iter()) {
        *slot = col.count(row)?;
    }
    let [w, h, c, _, k, s, r, pad_w, pad_h, stride_w, stride_h] = v;
    // `N` is the batch: bounded as every imported batch is.
    let n = cols[3].batch(row)?;
    Ok((
        ModuleSpec::Conv2d(Conv2d {
            in_channels: c,
            out_channels: k,
            input_hw: [h, w],
            kernel: [r, s],
            stride: [stride_h, stride_w],
            padding: [pad_h, pad_w],
            dilation: [1, 1],
            groups,
            bias: false,
        }),
        n,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_float_is_fp32() {
        assert!(is_fp32("Float"));
        assert!(is_fp32(" fp32 "));
        assert!(!is_fp32(
            "16 bit inputs, 32 bit multiplication, 32 bit addition"
        ));
        assert!(!is_fp32(
            "GEMM, Conv: Int8 multiplication, 32 bit accumulation"
        ));
        assert!(!is_fp32("Int8 inputs 32 bit math"));
    }

    #[test]
    fn modes_map_to_phases() {
        assert_eq!(phase("train"), Some(Phase::Training));
        assert_eq!(phase("Inference"), Some(Phase::Inference));
        assert_eq!(phase("tuning"), None);
    }
}
