//! Checkpoint bundles, the load side: `checkpoints/<name>/manifest.json` plus one model file per
//! module kind.
//!
//! The manifest records the format version, the device, per kind the chosen model, every
//! candidate's accuracy, prediction time and size, the feature-schema hash and the range of
//! every feature in training. Loading refuses a missing, corrupt, truncated or mismatched
//! bundle with a one-line error naming the file, and reads nothing outside the bundle's
//! directory. perfcast-select writes bundles (atomically, after auto-selection).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use perfcast_core::{DeviceSpec, ModuleKind};
use serde::{Deserialize, Serialize};

use crate::compose::HostCosts;
use crate::error::{Error, Result};
use crate::regressor::{Regressor, SavedModel};

/// Manifest format this build writes and reads.
pub const FORMAT: u32 = 1;

/// The range of one feature over the training rows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FeatureRange {
    /// Feature name.
    pub name: String,
    /// Smallest training value.
    pub min: f64,
    /// Largest training value.
    pub max: f64,
}

/// Whether `v` leaves `[lo, hi]` by more than rounding (a NaN does not).
pub fn outside_range(lo: f64, hi: f64, v: f64) -> bool {
    v < lo - 1e-9 * lo.abs() || v > hi + 1e-9 * hi.abs()
}

/// One trained model of one module kind, as selection sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// Model family (`trees`, `medn`, ...).
    pub model: String,
    /// Cross-validated MAPE, percent (the accuracy selection ranks by: held-out rows stay
    /// untouched for reporting).
    pub cv_mape: f64,
    /// Held-out MAPE, percent (reported, not used to choose).
    pub test_mape: f64,
    /// Prediction time of one row, microseconds.
    pub predict_us: f64,
    /// Size of the fitted model, bytes.
    pub size_bytes: usize,
}

/// The cost weight `perfcast train` and the quickstart select with: a family twice as slow
/// must lower the MAPE by this share, enough to keep it from winning on noise and too little
/// to hand a kind a visibly less accurate model (docs/accuracy.md#selection-cost-weight).
pub const DEFAULT_COST_WEIGHT: f64 = 0.03;

/// Limits and the trade-off of selection.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    /// Largest accepted one-row prediction time, microseconds.
    pub max_predict_us: Option<f64>,
    /// Largest accepted model size, KiB.
    pub max_model_kb: Option<f64>,
    /// Weight of cost against accuracy, >= 0: the candidate with the lowest cost score
    /// (perfcast-select's `cost_score`) wins; 0 picks the most accurate candidate within the
    /// budgets.
    pub cost_weight: f64,
    /// Single-selection mode: use this family for every kind (for comparison with
    /// auto-selection), ignoring the other candidates.
    pub only: Option<String>,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            max_predict_us: None,
            max_model_kb: None,
            cost_weight: 0.0,
            only: None,
        }
    }
}

impl Budget {
    /// Rejects negative or non-finite limits, naming the value.
    pub fn validate(&self) -> Result<()> {
        let invalid =
            |message: String| Err(Error::InvalidData(format!("invalid selection: {message}")));
        for (name, v) in [
            ("--max-predict-us", self.max_predict_us),
            ("--max-model-kb", self.max_model_kb),
        ] {
            if let Some(v) = v
                && !(v > 0.0 && v.is_finite())
            {
                return invalid(format!("{name} must be positive, got {v}"));
            }
        }
        if !(self.cost_weight >= 0.0 && self.cost_weight.is_finite()) {
            return invalid(format!(
                "--cost-weight must be finite and non-negative, got {}",
                self.cost_weight
            ));
        }
        Ok(())
    }
}

/// The outcome for one kind: the winner, the Pareto front and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Selection {
    /// Chosen family.
    pub chosen: String,
    /// Families on the Pareto front of (cv MAPE, prediction time, size): no other candidate is
    /// at least as good on all three and better on one.
    pub pareto: Vec<String>,
    /// One line on why the winner won.
    pub why: String,
    /// Families ruled out by a budget, with the limit they broke.
    pub excluded: Vec<(String, String)>,
}

/// What the bundle holds for one module kind.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KindEntry {
    /// Chosen model family.
    pub chosen: String,
    /// The chosen model's file, relative to the bundle.
    pub file: String,
    /// Hash of the feature schema the model reads (hex).
    pub schema_hash: String,
    /// Training rows.
    pub rows: usize,
    /// Every candidate considered.
    pub candidates: Vec<Candidate>,
    /// Why the winner won, and the Pareto front.
    pub selection: Selection,
    /// Range of every feature in training.
    pub ranges: Vec<FeatureRange>,
    /// Whether the chosen model was refitted on every row (training and held-out) after
    /// selection (`perfcast train --refit`, the quickstart): `rows` then counts them all, and
    /// the candidates' figures are those of the fits that selection compared.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub refitted: bool,
    /// The student distilled from the chosen model, when one was tried: with `chosen` then
    /// `student` (kept), its teacher's family is named here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distilled: Option<Distilled>,
}

/// What distilling a kind's chosen model into a student found (`perfcast train --distill`,
/// the quickstart): kept with the kind's entry whether or not the student replaced it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Distilled {
    /// The family the student learnt from.
    pub teacher: String,
    /// The student's settings (`medn.width=32`).
    #[serde(default)]
    pub student: String,
    /// Labelled rows: measured configurations and their neighbours.
    pub rows: usize,
    /// MAPE of the student against its teacher on held-out labelled rows, percent.
    pub from_teacher: f64,
    /// MAPE on the kind's measured rows: teacher, student (percent).
    pub measured_mape: [f64; 2],
    /// One-row prediction time: teacher, student (µs).
    pub predict_us: [f64; 2],
    /// Whether the student replaced its teacher, and if not why.
    pub kept: bool,
    /// Why it was or was not kept.
    pub why: String,
}

/// `manifest.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format version ([`FORMAT`]).
    pub format: u32,
    /// Bundle name.
    pub name: String,
    /// perfcast version that wrote it.
    pub perfcast_version: String,
    /// The device the models predict.
    pub device: DeviceSpec,
    /// Dataset the models were trained on.
    pub data: String,
    /// Budgets selection ran under.
    pub budget: Budget,
    /// Per module kind (by name).
    pub kinds: BTreeMap<String, KindEntry>,
    /// Network host-cost terms (`perfcast calibrate`); absent until calibrated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_costs: Option<HostCosts>,
    /// The devices a cross-device bundle was trained on (empty: a single-device bundle, which
    /// predicts only `device`). A cross-device bundle predicts any device from its spec
    /// ([`Bundle::load_for_device`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trained_devices: Vec<DeviceSpec>,
}

impl Manifest {
    /// Whether the bundle predicts devices from their specs.
    pub fn cross_device(&self) -> bool {
        !self.trained_devices.is_empty()
    }
}

/// A loaded bundle: the manifest and the chosen model of every kind.
#[derive(Debug)]
pub struct Bundle {
    /// Where it was loaded from.
    pub dir: PathBuf,
    /// Its manifest.
    pub manifest: Manifest,
    models: BTreeMap<ModuleKind, Box<dyn Regressor>>,
}

/// Largest model file a bundle may hold (the shipped ones are under 4 MiB).
pub const MAX_MODEL_BYTES: u64 = 256 << 20;
/// Largest manifest a bundle may hold.
pub const MAX_MANIFEST_BYTES: u64 = 16 << 20;

/// Reads the bundle file `file` (as the manifest names it) from inside `dir` only: a relative
/// path without `..`, a regular file once symlinks are resolved, still inside `dir`, and at
/// most `cap` bytes (checked before reading, and bounded while reading). A manifest that names
/// `../elsewhere`, an absolute path or `/dev/zero` is refused, not followed.
fn read_inside(dir: &Path, file: &str, cap: u64) -> Result<Vec<u8>> {
    use std::io::Read;
    use std::path::Component;
    let named = dir.join(file);
    let refuse = |why: String| bundle_err(&named, why);
    let rel = Path::new(file);
    if file.is_empty() || !rel.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(refuse(format!(
            "model file `{file}` must be a path inside the bundle (no `..`, not absolute)"
        )));
    }
    let root = std::fs::canonicalize(dir).map_err(|e| bundle_err(dir, e.to_string()))?;
    let real = std::fs::canonicalize(&named).map_err(|e| refuse(e.to_string()))?;
    if !real.starts_with(&root) {
        return Err(refuse(format!(
            "resolves to `{}`, outside the bundle",
            real.display()
        )));
    }
    let meta = std::fs::metadata(&real).map_err(|e| refuse(e.to_string()))?;
    if !meta.is_file() {
        return Err(refuse("not a regular file".into()));
    }
    if meta.len() > cap {
        return Err(refuse(format!(
            "{} bytes, more than the {cap} a bundle file may hold",
            meta.len()
        )));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    std::fs::File::open(&real)
        .and_then(|f| f.take(cap + 1).read_to_end(&mut bytes))
        .map_err(|e| refuse(e.to_string()))?;
    if bytes.len() as u64 > cap {
        return Err(refuse(format!("grew past {cap} bytes while being read")));
    }
    Ok(bytes)
}

fn bundle_err(path: &Path, message: impl Into<String>) -> Error {
    Error::Bundle {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// How far apart (|ln ratio|, here 25%) a single-device bundle's peaks and a spec of the same
/// name may be and still be the same machine measured again.
const SAME_MACHINE_LN: f64 = 0.223;

impl Bundle {
    /// Reads only the manifest (what `bundle show` prints), checking its format.
    pub fn read_manifest(dir: &Path) -> Result<Manifest> {
        let path = dir.join("manifest.json");
        if !dir.is_dir() {
            return Err(bundle_err(dir, "no such bundle directory"));
        }
        if std::fs::symlink_metadata(&path).is_err() {
            return Err(bundle_err(
                &path,
                "no such file (not a bundle: `perfcast train --bundle` writes one)",
            ));
        }
        let bytes = read_inside(dir, "manifest.json", MAX_MANIFEST_BYTES)?;
        let manifest: Manifest = serde_json::from_slice(&bytes)
            .map_err(|e| bundle_err(&path, format!("corrupt or truncated manifest: {e}")))?;
        if manifest.format != FORMAT {
            return Err(bundle_err(
                &path,
                format!(
                    "format {} (this build reads {FORMAT}); retrain the bundle",
                    manifest.format
                ),
            ));
        }
        manifest
            .device
            .validate()
            .map_err(|e| bundle_err(&path, e.to_string()))?;
        Ok(manifest)
    }

    /// Loads a bundle and every model in it.
    pub fn load(dir: &Path) -> Result<Bundle> {
        Bundle::load_with(dir, None)
    }

    /// Loads a bundle to predict `device`: a cross-device bundle answers for any valid spec
    /// (its models learn it, and the spec roofline of kinds it has no model for uses it); a
    /// single-device bundle only for its own device.
    pub fn load_for_device(dir: &Path, device: &DeviceSpec) -> Result<Bundle> {
        device
            .validate()
            .map_err(|e| bundle_err(dir, e.to_string()))?;
        Bundle::load_with(dir, Some(device))
    }

    fn load_with(dir: &Path, device: Option<&DeviceSpec>) -> Result<Bundle> {
        let mut manifest = Bundle::read_manifest(dir)?;
        if let Some(device) = device {
            let own = &manifest.device;
            let close = |a: f64, b: f64| (a / b).ln().abs() <= SAME_MACHINE_LN;
            // The same machine probed again (another dataset of it, another day) measures its
            // peaks a few percent apart: it is still the device the models learned, with the
            // spec they learned it by.
            let same_machine = device.name == own.name
                && device.kind == own.kind
                && close(device.peak_gflops, own.peak_gflops)
                && close(device.mem_bandwidth_gbs, own.mem_bandwidth_gbs);
            if same_machine && !manifest.cross_device() {
                return Bundle::load_with(dir, None);
            }
            if !manifest.cross_device() {
                return Err(bundle_err(
                    dir,
                    format!(
                        "was trained on `{}` ({:.0} GFLOP/s, {:.0} GB/s) only and cannot predict \
                         `{}` ({:.0} GFLOP/s, {:.0} GB/s); train a cross-device bundle \
                         (`perfcast train --data <datasets of several devices> --bundle ..`)",
                        own.name,
                        own.peak_gflops,
                        own.mem_bandwidth_gbs,
                        device.name,
                        device.peak_gflops,
                        device.mem_bandwidth_gbs
                    ),
                ));
            }
            manifest.device = device.clone();
        }
        let mut models = BTreeMap::new();
        for (name, entry) in &manifest.kinds {
            let kind: ModuleKind = name.parse().map_err(|_| {
                bundle_err(
                    &dir.join("manifest.json"),
                    format!("unknown module kind `{name}`"),
                )
            })?;
            let path = dir.join(&entry.file);
            let bytes = read_inside(dir, &entry.file, MAX_MODEL_BYTES)?;
            let mut saved: SavedModel = serde_json::from_slice(&bytes)
                .map_err(|e| bundle_err(&path, format!("corrupt or truncated model: {e}")))?;
            saved
                .check()
                .map_err(|e| bundle_err(&path, format!("corrupt model: {e}")))?;
            // A GPU model saved before its seen trees recorded the least work they were
            // fitted on: the kind's trained range of it, which the same rows set.
            if let Some(cd) = saved.downcast_mut::<crate::device_features::SavedCrossDevice>()
                && cd.seen.is_some()
                && cd.seen_least_roofline_ms.is_none()
            {
                cd.seen_least_roofline_ms = entry
                    .ranges
                    .iter()
                    .find(|r| r.name == "roofline_ms")
                    .map(|r| r.min)
                    .filter(|v| v.is_finite() && *v > 0.0);
            }
            if let Some(device) = device {
                saved = saved.with_device(device);
            }
            let model = saved.into_regressor();
            let hash = format!("{:016x}", model.schema().hash());
            if hash != entry.schema_hash {
                return Err(bundle_err(
                    &path,
                    format!(
                        "trained on another feature schema (hash {hash}) than the manifest \
                         names ({})",
                        entry.schema_hash
                    ),
                ));
            }
            // A model of an older schema version reads the first columns of today's rows.
            let model = crate::older_schema::on_current_schema(model, kind)
                .map_err(|e| bundle_err(&path, format!("{e}; retrain the bundle")))?;
            models.insert(kind, model);
        }
        Ok(Bundle {
            dir: dir.to_path_buf(),
            manifest,
            models,
        })
    }

    /// The chosen model of a kind, if the bundle has one.
    pub fn model(&self, kind: ModuleKind) -> Option<&dyn Regressor> {
        self.models.get(&kind).map(AsRef::as_ref)
    }

    /// The kinds the bundle covers.
    pub fn kinds(&self) -> impl Iterator<Item = ModuleKind> + '_ {
        self.models.keys().copied()
    }
}
