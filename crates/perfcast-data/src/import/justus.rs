//! Justus et al. (IEEE BigData 2018): TensorFlow 1.x conv2d and dense timings on six GPUs.
//!
//! Reads `conv.csv` and `dense.csv` (either may be absent, not both); see the
//! [module docs](super) for the mapping.

use std::path::Path;

use perfcast_core::{Conv2d, Linear, ModuleKind, ModuleSpec, Phase};

use super::read::{Col, CsvFile};
use super::{DeviceRows, Devices, Import, checked_spec, gpus, record, source_folder};
use crate::error::{Error, Result};
use crate::record::Timing;

/// Backend name of imported rows.
pub const BACKEND: &str = "justus:tensorflow-1";

/// TensorFlow's SAME padding made symmetric: floor(total / 2) per side, where
/// total = max((ceil(in / stride) - 1) * stride + kernel - in, 0).
///
/// TensorFlow pads `total - floor(total / 2)` at the bottom/right, one more than the top/left
/// when `total` is odd; a symmetric padding cannot state that.
pub fn same_padding(input: usize, kernel: usize, stride: usize) -> usize {
    let out = input.div_ceil(stride.max(1));
    let total = (out.saturating_sub(1) * stride + kernel).saturating_sub(input);
    total / 2
}

/// Reads the folder holding Justus' `conv.csv` and `dense.csv`.
pub fn import(dir: &Path) -> Result<Import> {
    let conv = dir.join("conv.csv");
    let dense = dir.join("dense.csv");
    source_folder(dir, &["conv.csv", "dense.csv"])?;
    let mut devices = Devices::default();
    if conv.is_file() {
        read_file(&conv, ModuleKind::Conv2d, &mut devices)?;
    }
    if dense.is_file() {
        read_file(&dense, ModuleKind::Linear, &mut devices)?;
    }
    let mut out = Import::new("justus", dir);
    out.devices = devices.into_vec();
    Ok(out)
}

fn read_file(path: &Path, kind: ModuleKind, devices: &mut Devices) -> Result<()> {
    let csv = CsvFile::read(path)?;
    let device = csv.column("device")?;
    let batch = csv.column("batchsize")?;
    let forward_only = csv.column("forward_only")?;
    let median = csv.column("timeUsed_median")?;
    let min = csv.column("timeUsed_min")?;
    let precision = if csv.has("precision") {
        Some(csv.column("precision")?)
    } else {
        None
    };
    let shape = Shape::new(&csv, kind)?;
    for row in 0..csv.rows() {
        let id = device.text(row)?;
        let rows = devices.get(id, || gpus::justus(id).map(gpus::Published::spec));
        // Parse everything first: a malformed cell is an error even on a skipped row.
        let spec = shape.spec(row)?;
        let b = batch.batch(row)?;
        let phase = if forward_only.flag(row)? {
            Phase::Inference
        } else {
            Phase::Training
        };
        let median_ms = median.time_ms(row, 1.0)?;
        let min_ms = min.time_ms(row, 1.0)?;
        if let Some(p) = &precision {
            let bits = p.text(row)?;
            if bits != "32" {
                rows.skip(kind, format!("precision `{bits}` is not fp32"));
                continue;
            }
        }
        if rows.device.is_none() {
            rows.skip(kind, format!("no published spec for device `{id}`"));
            continue;
        }
        push(rows, kind, spec, b, phase, median_ms, min_ms);
    }
    Ok(())
}

fn push(
    rows: &mut DeviceRows,
    kind: ModuleKind,
    spec: ModuleSpec,
    batch: usize,
    phase: Phase,
    median_ms: f64,
    min_ms: f64,
) {
    match checked_spec(spec) {
        Ok(spec) => {
            let mut timing = Timing::median_only(median_ms);
            timing.min_ms = Some(min_ms);
            rows.push(record(spec, batch, phase, 1, BACKEND, timing));
        }
        Err(reason) => rows.skip(kind, reason),
    }
}

/// The configuration columns of one file.
enum Shape<'a> {
    Conv(Box<ConvCols<'a>>),
    Dense { input: Col<'a>, output: Col<'a> },
}

struct ConvCols<'a> {
    cin: Col<'a>,
    cout: Col<'a>,
    size: Col<'a>,
    kernel: Col<'a>,
    stride: Col<'a>,
    padding: Col<'a>,
    bias: Col<'a>,
}

impl<'a> Shape<'a> {
    fn new(csv: &'a CsvFile, kind: ModuleKind) -> Result<Shape<'a>> {
        Ok(match kind {
            ModuleKind::Conv2d => Shape::Conv(Box::new(ConvCols {
                cin: csv.column("channels_in")?,
                cout: csv.column("channels_out")?,
                size: csv.column("matsize")?,
                kernel: csv.column("kernelsize")?,
                stride: csv.column("strides")?,
                padding: csv.column("padding_name")?,
                bias: csv.column("use_bias")?,
            })),
            _ => Shape::Dense {
                input: csv.column("dim_input")?,
                output: csv.column("dim_output")?,
            },
        })
    }

    fn spec(&self, row: usize) -> Result<ModuleSpec> {
        Ok(match self {
            Shape::Conv(c) => {
                let ConvCols {
                    cin,
                    cout,
                    size,
                    kernel,
                    stride,
                    padding,
                    bias,
                } = c.as_ref();
                let (n, k, s) = (size.count(row)?, kernel.count(row)?, stride.count(row)?);
                let pad = match padding.text(row)? {
                    p if p.eq_ignore_ascii_case("same") => same_padding(n, k, s),
                    p if p.eq_ignore_ascii_case("valid") => 0,
                    other => {
                        return Err(Error::schema(
                            padding.path(),
                            format!(
                                "line {}: column `{}`: `{other}` is neither SAME nor VALID",
                                super::read::line(row),
                                padding.name()
                            ),
                        ));
                    }
                };
                ModuleSpec::Conv2d(Conv2d {
                    in_channels: cin.count(row)?,
                    out_channels: cout.count(row)?,
                    input_hw: [n, n],
                    kernel: [k, k],
                    stride: [s, s],
                    padding: [pad, pad],
                    dilation: [1, 1],
                    groups: 1,
                    bias: bias.flag(row)?,
                })
            }
            Shape::Dense { input, output } => ModuleSpec::Linear(Linear {
                tokens: 1,
                in_features: input.count(row)?,
                out_features: output.count(row)?,
                bias: true,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_padding_follows_tensorflow_halved_down() {
        // in 5, k 3, s 1: out 5, total 2 -> 1 each side.
        assert_eq!(same_padding(5, 3, 1), 1);
        // in 6, k 3, s 2: out 3, total (2*2 + 3 - 6) = 1 -> 0 (TF puts the 1 at the bottom).
        assert_eq!(same_padding(6, 3, 2), 0);
        // in 7, k 7, s 4: out 2, total (4 + 7 - 7) = 4 -> 2.
        assert_eq!(same_padding(7, 7, 4), 2);
        // in 10, k 1, s 3: total max(9 + 1 - 10, 0) = 0.
        assert_eq!(same_padding(10, 1, 3), 0);
        // in 1, k 4, s 1: total 3 -> 1, so the padded input 3 is smaller than the kernel.
        assert_eq!(same_padding(1, 4, 1), 1);
    }
}
