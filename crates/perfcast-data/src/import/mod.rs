//! Importers: published latency measurements and users' own CSVs, as perfcast datasets.
//!
//! Each importer reads its source into an [`Import`] (rows grouped per device, with the rows it
//! skipped counted per reason) and [`Import::write`] turns that into one dataset directory per
//! device under an output folder, built in a temp directory beside it and renamed into place, so
//! an interrupted or failed import leaves nothing behind.
//!
//! ```no_run
//! use std::path::Path;
//! use perfcast_data::import;
//!
//! let rows = import::neusight::import(Path::new("/data/neusight"))?;
//! let summary = rows.write(Path::new("datasets/neusight"), false)?;
//! for device in &summary.devices {
//!     println!("{}: {} rows", device.id, device.kinds.iter().map(|k| k.imported).sum::<usize>());
//! }
//! # Ok::<(), perfcast_data::Error>(())
//! ```
//!
//! # What every importer keeps and what it drops
//!
//! Only a layer's configuration, the batch, the phase and the device's published specification
//! become dataset columns. Columns recorded while measuring (kernel names, grid and block sizes,
//! GPU index, source file, library versions) are never read as features: the importers look up
//! the columns they map by name and ignore every other column. The one exception is DeepBench's
//! library versions, which go into the device spec's `software` (below).
//!
//! Imported timings carry what their authors published: the central latency goes to
//! `median_ms` (for NeuSight it is a mean of the 5 fastest of 25 runs, not a median), Justus'
//! minimum goes to `min_ms`, and every other statistic stays empty. Rows record the perfcast
//! version that imported them and a timestamp of 0: the sources do not publish when each row
//! was measured. The context of GPU rows is `threads = 1`, `utilisation = 0`.
//!
//! # NeuSight (`neusight:pytorch-2.1`)
//!
//! PyTorch 2.1, fp32, TF32 off, forward only (`Phase::Inference`), `Latency` in ms. One dataset
//! per file stem; the device spec comes from `device_configs/<stem>.json` (see
//! [`neusight::device_spec`]).
//! - `linear/<stem>.csv` `B,M,N,K`: `linear` with batch B, tokens M, in_features N,
//!   out_features K, bias.
//! - `bmm/<stem>.csv` `B,M,N,K`: (B, M, N) @ (B, N, K) is `matmul` with batch B, heads 1, m M,
//!   k N, n K.
//! - `conv/<stem>.csv` `B,Input_Channel,Output_Channel,Kernel_Szie,Input_Size,Stride,Padding`:
//!   a square `conv2d`, no bias (the recorded kernel lists hold no bias-add kernel).
//!
//! # Justus et al. (`justus:tensorflow-1`)
//!
//! TensorFlow 1.x, fp32 (rows whose `precision` is not 32 are skipped), `timeUsed_median` ms
//! (median of 5 repeats of 50 runs) and `timeUsed_min` as `min_ms`. One dataset per `device`,
//! with a spec from [`gpus`] (vendor-published figures). `forward_only` True is
//! `Phase::Inference`; False timed forward, backward and the optimizer's update step, and is
//! kept as `Phase::Training` (perfcast's own training rows have no optimizer step).
//! - `conv.csv`: batch `batchsize`, `channels_in`, `channels_out`, square input `matsize`,
//!   square `kernelsize`, `strides`, `use_bias`. `padding_name` VALID is padding 0; SAME is the
//!   symmetric padding floor(total / 2) with total = max((ceil(in / s) - 1) * s + k - in, 0).
//!   TensorFlow puts an odd total's extra row at the bottom and right, which a symmetric
//!   padding cannot state: for those rows the output is one smaller than TensorFlow's.
//!   Rows whose kernel is larger than the padded input are skipped and counted.
//! - `dense.csv`: batch `batchsize`, `dim_input`, `dim_output` as a `linear` with tokens 1 and
//!   bias (the file has no `use_bias`; `tf.layers.dense` adds a bias by default).
//! - `activation_name` and `optimizer_name` are part of the timed op in this data set, but a
//!   [`perfcast_core::ModuleSpec`] cannot state them yet: they are dropped, and rows differing
//!   only in them look alike.
//!
//! # DeepBench (`deepbench:<device>`)
//!
//! cuDNN / cuBLAS / MIOpen / MKL kernel times in ms. Only rows whose `precision` is `Float`
//! (fp32 inputs and fp32 math) are imported; the int8, fp16 and pseudo-fp16 (16-bit inputs,
//! 32-bit math) rows are skipped and counted per precision. `mode` train(ing) or inference.
//! Device specs come from [`gpus`]: `specs.csv` names the hardware but publishes no figures.
//! It does publish each results file's library versions: a device's `software` is the stack
//! (`CUDA x, cuDNN y`; `ROCm x, MIOpen y`; `MKL ...`) of the files its fp32 rows come from
//! (the `file` column), left empty when `specs.csv` is absent or those files disagree.
//! - `conv.csv`: `conv2d` with batch N, in_channels C, out_channels K, input [H, W], kernel
//!   [R_filter_h, S_filter_w], padding [pad_h, pad_w], stride [stride_h, stride_w], no bias.
//!   A training-mode row gives two rows: `Phase::Training` with fwd_ms + bwd_inputs_ms +
//!   bwd_params_ms (skipped and counted when one is not published), and `Phase::Inference`
//!   with fwd_ms. An inference-mode row gives `Phase::Inference` with fwd_ms. The published
//!   output sizes `P_out_w` / `Q_out_h` are outputs, not inputs, and are ignored.
//! - `gemm.csv`: `matmul` with batch 1, heads 1, m M, k K, n N, `Phase::Inference` whatever the
//!   mode (a row times one GEMM, which is a matmul's forward pass; every fp32 GEMM row is in
//!   the training sheets). `A_T` / `B_T` (`N` or `T`) become `trans_a` / `trans_b`: DeepBench
//!   times the same (M, N, K) as `N,N` and `T,N` (and a few as `N,T`), up to 5x apart, and the
//!   layout keeps them distinct rows (see [`perfcast_core::ModuleKind::layout_columns`]).
//!
//! # Vidur (`vidur:sarathi-fp16`)
//!
//! fp16 kernels of one LLM decoder layer (GEMMs, norms, activation, residual add, embedding) on
//! A100 and A40; see [`vidur`] for the mapping. Datasets are named after the device seen in
//! fp16 (`nvidia-a40-fp16`): their specs count the fp16 tensor-core peak.
//!
//! # Users' CSVs
//!
//! See [`csv`]: a TOML mapping names the module kind, the device, the phase, the backend, the
//! latency unit, and which CSV column (or constant) gives each configuration value.

pub mod csv;
pub mod deepbench;
pub mod justus;
pub mod neusight;
pub mod vidur;

/// The published device tables live in perfcast-core (the light predictor needs them too).
pub use perfcast_core::{gpus, known};
mod read;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use perfcast_core::{Context, DeviceSpec, ModuleKind, ModuleSpec, Phase};
use serde::Serialize;

use crate::atomic::write_atomic;
use crate::dataset::DatasetDir;
use crate::error::{Error, Result};
use crate::record::{Outcome, Record, Timing};

pub use crate::outdir::IMPORT_FILE;

/// Rows read from one source, grouped per device, ready to be written as datasets.
#[derive(Clone, Debug, Default)]
pub struct Import {
    /// Source name (`neusight`, `justus`, `deepbench`, `csv`).
    pub source: String,
    /// What was read (a folder or a file).
    pub input: PathBuf,
    /// One entry per device the source names, in the order first seen.
    pub devices: Vec<DeviceRows>,
}

/// The rows of one device.
#[derive(Clone, Debug)]
pub struct DeviceRows {
    /// The source's own name for the device (file stem, `device` column value).
    pub id: String,
    /// Its spec; `None` when perfcast knows no spec for it (then every row is skipped).
    pub device: Option<DeviceSpec>,
    /// Imported rows per kind.
    pub tables: BTreeMap<ModuleKind, Vec<Record>>,
    /// Skipped rows per kind: reason -> count.
    pub skipped: BTreeMap<ModuleKind, BTreeMap<String, usize>>,
}

impl DeviceRows {
    /// No rows yet of the device `id` (`device` its spec).
    pub fn new(id: &str, device: Option<DeviceSpec>) -> DeviceRows {
        DeviceRows {
            id: id.to_string(),
            device,
            tables: BTreeMap::new(),
            skipped: BTreeMap::new(),
        }
    }

    /// Adds an imported row (a row of batch 0 is skipped and counted instead).
    pub fn push(&mut self, record: Record) {
        if record.context.batch == 0 {
            self.skip(record.spec.kind(), "batch 0");
            return;
        }
        self.tables
            .entry(record.spec.kind())
            .or_default()
            .push(record);
    }

    /// Counts a skipped row of `kind` under `reason`.
    pub fn skip(&mut self, kind: ModuleKind, reason: impl Into<String>) {
        *self
            .skipped
            .entry(kind)
            .or_default()
            .entry(reason.into())
            .or_default() += 1;
    }

    /// Rows imported, all kinds together.
    pub fn imported(&self) -> usize {
        self.tables.values().map(Vec::len).sum()
    }

    /// Per-kind counts.
    pub fn summary(&self, dataset: Option<String>) -> DeviceSummary {
        let kinds: Vec<ModuleKind> = ModuleKind::ALL
            .into_iter()
            .filter(|k| self.tables.contains_key(k) || self.skipped.contains_key(k))
            .collect();
        DeviceSummary {
            id: self.id.clone(),
            name: self.device.as_ref().map(|d| d.name.clone()),
            dataset,
            kinds: kinds
                .into_iter()
                .map(|kind| {
                    let rows = self.tables.get(&kind).map(Vec::as_slice).unwrap_or(&[]);
                    let phase = |p: Phase| rows.iter().filter(|r| r.context.phase == p).count();
                    let mut keys = HashSet::with_capacity(rows.len());
                    let duplicates = rows.iter().filter(|r| !keys.insert(r.key())).count();
                    KindCount {
                        kind: kind.name().to_string(),
                        imported: rows.len(),
                        inference: phase(Phase::Inference),
                        training: phase(Phase::Training),
                        duplicates,
                        skipped: self.skipped.get(&kind).cloned().unwrap_or_default(),
                    }
                })
                .collect(),
        }
    }
}

/// What an import wrote (or would write), per device and kind.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ImportSummary {
    /// Source name.
    pub source: String,
    /// What was read.
    pub input: PathBuf,
    /// Output folder.
    pub out: PathBuf,
    /// perfcast version that imported it.
    pub perfcast_version: String,
    /// Rows imported, all devices and kinds.
    pub imported: usize,
    /// Rows skipped, all devices and kinds.
    pub skipped: usize,
    /// Per device.
    pub devices: Vec<DeviceSummary>,
}

/// Counts of one device.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DeviceSummary {
    /// The source's name for the device.
    pub id: String,
    /// The spec's name, when perfcast knows the device.
    pub name: Option<String>,
    /// Dataset directory under the output folder; `None` when nothing was imported.
    pub dataset: Option<String>,
    /// Per kind.
    pub kinds: Vec<KindCount>,
}

/// Counts of one kind on one device.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KindCount {
    /// Module kind.
    pub kind: String,
    /// Rows imported.
    pub imported: usize,
    /// Of which inference rows.
    pub inference: usize,
    /// Of which training rows.
    pub training: usize,
    /// Imported rows whose configuration, context and backend repeat an earlier row's (kept:
    /// they are separate measurements, often of ops differing in something a spec cannot state).
    pub duplicates: usize,
    /// Rows not imported: reason -> count.
    pub skipped: BTreeMap<String, usize>,
}

impl Import {
    /// No devices yet, read by `source` from `input`.
    pub fn new(source: &str, input: &Path) -> Import {
        Import {
            source: source.to_string(),
            input: input.to_path_buf(),
            devices: Vec::new(),
        }
    }

    /// Rows imported, all devices and kinds.
    pub fn imported(&self) -> usize {
        self.devices.iter().map(DeviceRows::imported).sum()
    }

    /// The summary of these rows written to `out`.
    pub fn summary(&self, out: &Path) -> ImportSummary {
        let devices: Vec<DeviceSummary> = self
            .devices
            .iter()
            .map(|d| {
                let dataset = match &d.device {
                    Some(spec) if d.imported() > 0 => Some(spec.slug()),
                    _ => None,
                };
                d.summary(dataset)
            })
            .collect();
        let skipped = devices
            .iter()
            .flat_map(|d| &d.kinds)
            .flat_map(|k| k.skipped.values())
            .sum();
        ImportSummary {
            source: self.source.clone(),
            input: self.input.clone(),
            out: out.to_path_buf(),
            perfcast_version: perfcast_core::VERSION.to_string(),
            imported: self.imported(),
            skipped,
            devices,
        }
    }

    /// Writes one dataset directory per device with rows under `out`, plus [`IMPORT_FILE`].
    ///
    /// Everything is built in a temp directory beside `out` and renamed into place at the end,
    /// so a failed import leaves nothing. An existing `out` is refused unless `force`; then it
    /// must look like an earlier import (only dataset directories and [`IMPORT_FILE`]), and it is
    /// swapped out atomically ([`crate::outdir::replace_with`]) and deleted.
    pub fn write(&self, out: &Path, force: bool) -> Result<ImportSummary> {
        self.write_with(out, force, &[])
    }

    /// [`Import::write`], with `extra` files (name, contents) written beside [`IMPORT_FILE`] in
    /// the same staged directory.
    pub fn write_with(
        &self,
        out: &Path,
        force: bool,
        extra: &[(&str, &[u8])],
    ) -> Result<ImportSummary> {
        check_out(out, force)?;
        let summary = self.summary(out);
        let tmp = crate::outdir::stage_beside(out, "import")?;
        let mut slugs: HashMap<String, &str> = HashMap::new();
        for d in &self.devices {
            let Some(spec) = &d.device else { continue };
            if d.imported() == 0 {
                continue;
            }
            let slug = spec.slug();
            if let Some(other) = slugs.insert(slug.clone(), &d.id) {
                return Err(Error::schema(
                    &self.input,
                    format!(
                        "devices `{other}` and `{}` would share the dataset directory `{slug}`",
                        d.id
                    ),
                ));
            }
            let dir = DatasetDir::create_or_open(tmp.path().join(&slug), spec)?;
            for (kind, rows) in &d.tables {
                dir.write(*kind, rows)?;
            }
        }
        let json = serde_json::to_string_pretty(&summary)
            .map_err(|e| Error::unreadable(&tmp.path().join(IMPORT_FILE), e))?;
        write_atomic(&tmp.path().join(IMPORT_FILE), json.as_bytes())?;
        for (name, contents) in extra {
            write_atomic(&tmp.path().join(name), contents)?;
        }
        crate::outdir::mark(tmp.path(), crate::outdir::OutputKind::Import)?;
        crate::outdir::replace_with(tmp, out)?;
        Ok(summary)
    }
}

/// Refuses an existing `out` before anything is read: without `force` whatever is there, with
/// it anything but an earlier import ([`check_out`]).
pub fn refuse_existing(out: &Path, force: bool) -> Result<()> {
    if !force && std::fs::symlink_metadata(out).is_ok() {
        return Err(Error::Input(format!("`{}` already exists", out.display()))
            .with_hint("pass `--force` to replace an earlier import, or choose another `--out`"));
    }
    check_out(out, force)
}

/// Refuses an existing `out` unless `force`, and even then anything but an earlier import.
pub fn check_out(out: &Path, force: bool) -> Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(out) else {
        return Ok(());
    };
    let refuse = |message: String| Error::schema(out, format!("{message}: not replacing it"));
    if !force {
        return Err(refuse("it already exists (force to replace it)".into()));
    }
    if !meta.is_dir() {
        return Err(refuse("it is not a directory".into()));
    }
    let entries = std::fs::read_dir(out).map_err(|e| cannot_read(out, &e))?;
    // A marked import may hold JSON notes beside its summary ([`Import::write_with`]).
    let marked = out.join(crate::outdir::MARKER).is_file();
    for entry in entries.flatten() {
        let path = entry.path();
        let is_note = marked && path.is_file() && path.extension().is_some_and(|e| e == "json");
        let is_import_file = is_note
            || entry.file_name() == IMPORT_FILE
            || entry.file_name() == crate::outdir::MARKER;
        let is_dataset = path.join(crate::DEVICE_FILE).is_file();
        if !(is_import_file || is_dataset) {
            return Err(refuse(format!(
                "it holds `{}`, which no import writes",
                entry.file_name().to_string_lossy()
            )));
        }
    }
    Ok(())
}

/// An input that cannot be read: one line naming the path and the system's reason.
pub(crate) fn cannot_read(path: &Path, e: &std::io::Error) -> Error {
    Error::unreadable(path, format!("cannot read it: {e}"))
}

/// Checks that `dir` is a folder holding at least one of `files`.
pub(crate) fn source_folder(dir: &Path, files: &[&str]) -> Result<()> {
    if !dir.is_dir() {
        return Err(Error::unreadable(dir, "cannot read it: no such folder"));
    }
    if files.iter().any(|f| dir.join(f).is_file()) {
        return Ok(());
    }
    Err(Error::schema(
        dir,
        format!("the folder holds none of {}", files.join(", ")),
    ))
}

/// Quantile of a device's smallest element-wise latencies taken as its launch floor.
pub(crate) const LAUNCH_QUANTILE: f64 = 0.02;

/// A device's launch floor, microseconds, from its element-wise latencies in ms: their
/// [`LAUNCH_QUANTILE`] quantile, rounded to 0.1 us (a spec figure, not a timing); `None`
/// without any.
pub(crate) fn launch_floor_us(mut ms: Vec<f64>) -> Option<f64> {
    if ms.is_empty() {
        return None;
    }
    ms.sort_by(f64::total_cmp);
    let at = ((ms.len() - 1) as f64 * LAUNCH_QUANTILE).round() as usize;
    Some(((ms[at] * 1e4).round() / 10.0).max(0.1))
}

/// A measured row as every importer builds it.
pub(crate) fn record(
    spec: ModuleSpec,
    batch: usize,
    phase: Phase,
    threads: usize,
    backend: &str,
    timing: Timing,
) -> Record {
    Record {
        spec,
        context: Context {
            batch,
            phase,
            threads,
            utilisation: 0.0,
        },
        backend: backend.to_string(),
        outcome: Outcome::Ok(timing),
        perfcast_version: perfcast_core::VERSION.to_string(),
        timestamp: 0,
    }
}

/// Groups rows per device id, keeping the order devices are first seen.
#[derive(Default)]
pub(crate) struct Devices {
    rows: Vec<DeviceRows>,
    index: HashMap<String, usize>,
}

impl Devices {
    /// The rows of `id`, created with `spec()` on first use.
    pub(crate) fn get(
        &mut self,
        id: &str,
        spec: impl FnOnce() -> Option<DeviceSpec>,
    ) -> &mut DeviceRows {
        let i = match self.index.get(id) {
            Some(&i) => i,
            None => {
                self.rows.push(DeviceRows::new(id, spec()));
                self.index.insert(id.to_string(), self.rows.len() - 1);
                self.rows.len() - 1
            }
        };
        &mut self.rows[i]
    }

    pub(crate) fn into_vec(self) -> Vec<DeviceRows> {
        self.rows
    }
}

/// Builds and validates a spec; an impossible shape becomes a skip reason for published data.
pub(crate) fn checked_spec(spec: ModuleSpec) -> std::result::Result<ModuleSpec, String> {
    match spec.validate() {
        Ok(()) => Ok(spec),
        Err(e) => {
            let message = e.to_string();
            if message.contains("larger than the padded input") {
                Err("impossible shape: kernel larger than the padded input".into())
            } else {
                Err(format!("impossible shape: {message}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_refuses_an_existing_folder_without_force() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        std::fs::create_dir(&out).unwrap();
        let import = Import::new("test", tmp.path());
        let err = import.write(&out, false).unwrap_err().to_string();
        assert!(err.contains("already exists"), "{err}");
        // An empty folder is a harmless thing to replace.
        import.write(&out, true).unwrap();
        assert!(out.join(IMPORT_FILE).is_file());
    }

    #[test]
    fn force_refuses_folders_that_are_not_imports() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("notes.txt"), "keep me").unwrap();
        let err = Import::new("test", tmp.path())
            .write(tmp.path(), true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("notes.txt"), "{err}");
        assert!(tmp.path().join("notes.txt").is_file());
    }
}
