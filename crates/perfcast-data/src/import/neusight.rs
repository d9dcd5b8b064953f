//! NeuSight (ASPLOS'25): PyTorch 2.1 fp32 forward latencies on five GPUs.
//!
//! Layout: `linear/<stem>.csv`, `bmm/<stem>.csv`, `conv/<stem>.csv` and
//! `device_configs/<stem>.json`; see the [module docs](super) for the mapping.

use std::path::{Path, PathBuf};

use perfcast_core::{
    Caches, Conv2d, DeviceKind, DeviceSpec, LayerNorm, Linear, Matmul, ModuleSpec, Phase,
};
use perfcast_core::{ModuleKind, SpecSource};
use serde::Deserialize;

use super::read::CsvFile;
use super::{Devices, Import, checked_spec, record};
use crate::error::{Error, Result};
use crate::record::Timing;

/// Backend name of imported rows.
pub const BACKEND: &str = "neusight:pytorch-2.1";

/// Folder of the device specs.
pub const CONFIG_DIR: &str = "device_configs";

/// The layer folders and the kind each holds. The element-wise, `ln` and `softmax` folders
/// hold `B x H` tensors (columns `B,H,Latency`): imported as `[1, 1, H]` per sample at batch
/// `B` (LayerNorm: one token of `H` features), so softmax and LayerNorm reduce over `H`.
const FOLDERS: [(&str, ModuleKind); 16] = [
    ("linear", ModuleKind::Linear),
    ("bmm", ModuleKind::Matmul),
    ("conv", ModuleKind::Conv2d),
    ("add", ModuleKind::Add),
    ("mul", ModuleKind::Mul),
    ("div", ModuleKind::Div),
    ("pow", ModuleKind::Pow),
    ("addu", ModuleKind::AddScalar),
    ("mulu", ModuleKind::MulScalar),
    ("divu", ModuleKind::DivScalar),
    ("powu", ModuleKind::PowScalar),
    ("gelu", ModuleKind::Gelu),
    ("relu", ModuleKind::Relu),
    ("tanh", ModuleKind::Tanh),
    ("ln", ModuleKind::LayerNorm),
    ("softmax", ModuleKind::Softmax),
];

/// A `device_configs/*.json` file as NeuSight publishes it.
#[derive(Debug, Deserialize)]
struct Config {
    #[serde(rename = "Device")]
    device: String,
    /// GB.
    #[serde(rename = "Dev_Mem")]
    dev_mem: f64,
    /// GB/s.
    #[serde(rename = "Mem_Bw")]
    mem_bw: f64,
    #[serde(rename = "Num_Sm")]
    num_sm: u32,
    #[serde(rename = "Core_Per_SM")]
    core_per_sm: u32,
    /// MHz.
    #[serde(rename = "Freq")]
    freq: f64,
    /// fp32 GFLOP/s (NVIDIA files).
    #[serde(rename = "SingleFLOPs")]
    single_flops: Option<f64>,
    /// fp32 vector GFLOP/s (AMD files, which also give a matrix-core figure).
    #[serde(rename = "SingleFLOPsVEC")]
    single_flops_vec: Option<f64>,
    /// MB.
    #[serde(rename = "L2Cache")]
    l2_cache: f64,
}

/// Reads one `device_configs/*.json` as a [`DeviceSpec`].
///
/// `SingleFLOPs` (or, in the AMD files, `SingleFLOPsVEC`: the vector peak, comparable with the
/// NVIDIA files' CUDA-core figure, not the matrix-core `SingleFLOPsMM`) is the peak; `Mem_Bw`
/// the bandwidth; `Num_Sm` the cores; `Num_Sm * Core_Per_SM` the threads (for the AMD files
/// `Core_Per_SM` counts SIMD units, 4 per compute unit, not lanes); `Freq` the clock;
/// `Dev_Mem` the memory; `L2Cache` the cache.
pub fn device_spec(path: &Path) -> Result<DeviceSpec> {
    let text = std::fs::read_to_string(path).map_err(|e| super::cannot_read(path, &e))?;
    let c: Config = serde_json::from_str(&text).map_err(|e| Error::schema(path, e.to_string()))?;
    let peak = c.single_flops.or(c.single_flops_vec).ok_or_else(|| {
        Error::schema(path, "neither `SingleFLOPs` nor `SingleFLOPsVEC` is given")
    })?;
    let spec = DeviceSpec {
        name: c.device.trim().to_string(),
        kind: DeviceKind::Gpu,
        peak_gflops: peak,
        mem_bandwidth_gbs: c.mem_bw,
        cores: c.num_sm,
        threads: c.num_sm.saturating_mul(c.core_per_sm),
        clock_mhz: c.freq,
        memory_gb: c.dev_mem,
        cache_mb: c.l2_cache,
        caches: Caches {
            l1d_kb: None,
            l2_kb: Some(c.l2_cache * 1024.0),
            l3_kb: None,
            uncached_weights: None,
        },
        source: SpecSource::Published,
        software: None,
        launch_us: None,
        tdp_w: None,
        dtype: Default::default(),
        peaks: Default::default(),
        links: Default::default(),
    };
    spec.validate()
        .map_err(|e| Error::schema(path, e.to_string()))?;
    Ok(spec)
}

/// The config folder of a NeuSight data folder (or the folder itself if it is one).
fn config_dir(dir: &Path) -> PathBuf {
    let nested = dir.join(CONFIG_DIR);
    if nested.is_dir() {
        nested
    } else {
        dir.to_path_buf()
    }
}

/// Whether a config file describes one device. `*_TP.json` describes a tensor-parallel pair
/// of H100s (twice the memory and bandwidth, and an FP8 tensor-core peak as `SingleFLOPs`)
/// under the single H100's name: it is not one device's fp32 spec.
fn is_single_device(path: &Path) -> bool {
    !path
        .file_stem()
        .is_some_and(|s| s.to_string_lossy().ends_with("_TP"))
}

fn files_with_extension(dir: &Path, ext: &str) -> Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir).map_err(|e| super::cannot_read(dir, &e))?;
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == ext))
        .collect();
    files.sort();
    Ok(files)
}

/// Every device spec in `device_configs/` (given the NeuSight folder or the config folder),
/// sorted by file name: a table of GPUs with published figures, measured here or not.
///
/// Skips `*_TP.json`: it describes a tensor-parallel pair of H100s (twice the memory and
/// bandwidth, and an FP8 tensor-core peak as `SingleFLOPs`) under the single H100's name.
/// Two other files naming one device are an error.
pub fn load_device_configs(dir: &Path) -> Result<Vec<DeviceSpec>> {
    let dir = config_dir(dir);
    let mut specs: Vec<(PathBuf, DeviceSpec)> = Vec::new();
    for path in files_with_extension(&dir, "json")? {
        if !is_single_device(&path) {
            continue;
        }
        let spec = device_spec(&path)?;
        if let Some((other, _)) = specs.iter().find(|(_, s)| s.name == spec.name) {
            return Err(Error::schema(
                &path,
                format!(
                    "names the device `{}` that `{}` names too",
                    spec.name,
                    other.display()
                ),
            ));
        }
        specs.push((path, spec));
    }
    Ok(specs.into_iter().map(|(_, s)| s).collect())
}

/// Reads a NeuSight data folder (`linear/`, `bmm/`, `conv/`, `device_configs/`).
pub fn import(dir: &Path) -> Result<Import> {
    let present: Vec<(PathBuf, ModuleKind)> = FOLDERS
        .iter()
        .map(|(name, kind)| (dir.join(name), *kind))
        .filter(|(p, _)| p.is_dir())
        .collect();
    if present.is_empty() {
        if !dir.is_dir() {
            return Err(Error::unreadable(dir, "cannot read it: no such folder"));
        }
        return Err(Error::schema(
            dir,
            "the folder holds none of linear/, bmm/, conv/, add/, ln/, softmax/, ... (is it NeuSight's data folder?)",
        ));
    }
    let configs = config_dir(dir);
    let mut devices = Devices::default();
    for (folder, kind) in present {
        for path in files_with_extension(&folder, "csv")? {
            let stem = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let config = configs.join(format!("{stem}.json"));
            if !config.is_file() {
                return Err(Error::schema(
                    &path,
                    format!("no device spec `{}` for it", config.display()),
                ));
            }
            let mut spec = device_spec(&config)?;
            if spec.launch_us.is_none() {
                spec.launch_us = launch_floor_us(dir, &stem)?;
            }
            let rows = devices.get(&stem, || Some(spec.clone()));
            read_file(&path, kind, &spec, rows)?;
        }
    }
    let mut out = Import::new("neusight", dir);
    out.devices = devices.into_vec();
    Ok(out)
}

/// A device's launch floor, microseconds: the [`super::LAUNCH_QUANTILE`] quantile of its `add/`
/// latencies (NeuSight's smallest element-wise ops, which on every GPU it measured take the
/// host's dispatch-and-launch time, not the kernel's); `None` without an `add/` file. This is
/// a measurement of the platform, recorded as the spec's `launch_us`.
fn launch_floor_us(dir: &Path, stem: &str) -> Result<Option<f64>> {
    let path = dir.join("add").join(format!("{stem}.csv"));
    if !path.is_file() {
        return Ok(None);
    }
    let csv = CsvFile::read(&path)?;
    let latency = csv.column("Latency")?;
    let ms = (0..csv.rows())
        .map(|row| latency.time_ms(row, 1.0))
        .collect::<Result<Vec<f64>>>()?;
    Ok(super::launch_floor_us(ms))
}

fn read_file(
    path: &Path,
    kind: ModuleKind,
    spec: &DeviceSpec,
    rows: &mut super::DeviceRows,
) -> Result<()> {
    let csv = CsvFile::read(path)?;
    let latency = csv.column("Latency")?;
    // The file's `Device` column must be the device its spec file describes.
    if csv.has("Device") {
        let device = csv.column("Device")?;
        for row in 0..csv.rows() {
            let name = device.text(row)?;
            if name != spec.name {
                return Err(Error::schema(
                    path,
                    format!(
                        "line {}: column `Device`: `{name}` is not `{}`, the device of its spec file",
                        super::read::line(row),
                        spec.name
                    ),
                ));
            }
        }
    }
    let batch = csv.column("B")?;
    let mut build: Box<dyn FnMut(usize) -> Result<ModuleSpec> + '_> = match kind {
        ModuleKind::Linear => {
            let (m, n, k) = (csv.column("M")?, csv.column("N")?, csv.column("K")?);
            Box::new(move |row| {
                Ok(ModuleSpec::Linear(Linear {
                    tokens: m.count(row)?,
                    in_features: n.count(row)?,
                    out_features: k.count(row)?,
                    bias: true,
                }))
            })
        }
        ModuleKind::Matmul => {
            let (m, n, k) = (csv.column("M")?, csv.column("N")?, csv.column("K")?);
            Box::new(move |row| {
                Ok(ModuleSpec::Matmul(Matmul {
                    heads: 1,
                    m: m.count(row)?,
                    k: n.count(row)?,
                    n: k.count(row)?,
                    trans_a: false,
                    trans_b: false,
                }))
            })
        }
        ModuleKind::LayerNorm => {
            let h = csv.column("H")?;
            Box::new(move |row| {
                Ok(ModuleSpec::LayerNorm(LayerNorm {
                    tokens: 1,
                    features: h.count(row)?,
                }))
            })
        }
        ModuleKind::Conv2d => {
            let cin = csv.column("Input_Channel")?;
            let cout = csv.column("Output_Channel")?;
            // Sic: NeuSight's header spells it `Kernel_Szie`.
            let kernel = csv.column("Kernel_Szie")?;
            let size = csv.column("Input_Size")?;
            let stride = csv.column("Stride")?;
            let padding = csv.column("Padding")?;
            Box::new(move |row| {
                let sq = |c: &super::read::Col<'_>| c.count(row).map(|v| [v, v]);
                Ok(ModuleSpec::Conv2d(Conv2d {
                    in_channels: cin.count(row)?,
                    out_channels: cout.count(row)?,
                    input_hw: sq(&size)?,
                    kernel: sq(&kernel)?,
                    stride: sq(&stride)?,
                    padding: sq(&padding)?,
                    dilation: [1, 1],
                    groups: 1,
                    bias: false,
                }))
            })
        }
        elementwise => {
            let h = csv.column("H")?;
            Box::new(move |row| {
                let shape = [1, 1, h.count(row)?];
                ModuleSpec::from_config(elementwise, &shape.map(|v| v as i64)).map_err(|e| {
                    Error::schema(path, format!("line {}: {e}", super::read::line(row)))
                })
            })
        }
    };
    for row in 0..csv.rows() {
        let spec = build(row)?;
        let b = batch.batch(row)?;
        let ms = latency.time_ms(row, 1.0)?;
        match checked_spec(spec) {
            Ok(spec) => rows.push(record(
                spec,
                b,
                Phase::Inference,
                1,
                BACKEND,
                Timing::median_only(ms),
            )),
            Err(reason) => rows.skip(kind, reason),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_matches_the_published_configs_when_they_are_here() {
        // The shared data sits beside the repository in development; skipped elsewhere.
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/data/neusight/device_configs");
        if !dir.is_dir() {
            return;
        }
        let published = load_device_configs(&dir).unwrap();
        assert_eq!(published.len(), perfcast_core::known::NEUSIGHT.len());
        for p in published {
            let ours = perfcast_core::known::NEUSIGHT
                .iter()
                .find(|n| n.name == p.name)
                .unwrap()
                .spec();
            assert_eq!(ours, p, "{}", p.name);
        }
    }
}
