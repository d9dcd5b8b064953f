//! Layer timings measured through a framework (TensorFlow running one layer per session call,
//! say) turned into kernel rows a GPU bundle can learn from (`perfcast datasets
//! strip-overhead`).
//!
//! Such a timing is the kernels plus a per-call floor plus the framework's own work around
//! them (layout transposes, bias and activation kernels, the optimizer's update). On devices
//! that kernel-level sources also measured (the references), the bundle's answer stands for
//! the kernels: per kind and phase, the framework's factor is the median of (time - floor) /
//! answer over a reference's rows, and the geometric mean over the references is the factor
//! used. Every other device's rows become (time - floor) / factor. A device's floor is a low
//! quantile of its own rows, and only rows well above it are kept, so the subtraction never
//! decides a row. What survives is what the framework cannot explain: the device's own level,
//! which is why a device measured only this way is worth learning from.

use std::collections::BTreeMap;
use std::path::Path;

use perfcast_core::canonical::least_time_s;
use perfcast_core::rng::SplitMix64;
use perfcast_core::{ModuleKind, Phase};
use perfcast_data::DatasetDir;
use perfcast_data::import::{DeviceRows, Import};
use perfcast_data::summary::quantile;
use perfcast_data::{Outcome, Record, Timing};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::{Bundle, Predictor};

/// The file of an output folder that records the factors and floors ([`StripReport`]).
pub const REPORT_FILE: &str = "overhead.json";

/// The suffix added to a stripped row's backend.
pub const STRIPPED: &str = "overhead removed";

/// How rows are selected and stripped.
#[derive(Clone, Debug, PartialEq)]
pub struct StripSettings {
    /// The quantile of a device's times (per kind and phase) taken as its per-call floor.
    pub floor_quantile: f64,
    /// Rows are kept when their time is at least this multiple of the floor.
    pub min_floor_multiple: f64,
    /// At most this many rows per device, kind and phase (a seeded sample), so that one
    /// framework's devices do not outweigh the kernel-level sources in training.
    pub max_rows: Option<usize>,
    /// A reference's factor for a kind and phase counts only with at least this many rows
    /// above the floor (a median of a handful of rows is not the framework's).
    pub min_reference_rows: usize,
    /// Seed of the sample.
    pub seed: u64,
}

impl Default for StripSettings {
    fn default() -> StripSettings {
        StripSettings {
            floor_quantile: 0.02,
            min_floor_multiple: 3.0,
            max_rows: Some(1000),
            min_reference_rows: 20,
            seed: 0,
        }
    }
}

/// One reference device's factor for a kind and phase.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReferenceFactor {
    /// The reference (its dataset's device name).
    pub device: String,
    /// Median of (time - floor) / the bundle's answer.
    pub factor: f64,
    /// Its floor, ms.
    pub floor_ms: f64,
    /// Rows behind the median.
    pub rows: usize,
}

/// The framework's factor for one kind and phase.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FrameworkFactor {
    /// Module kind.
    pub kind: ModuleKind,
    /// Phase.
    pub phase: Phase,
    /// Geometric mean of the references' factors: what stripped rows are divided by.
    pub factor: f64,
    /// Each reference's factor (their spread says how much the factor is the framework's).
    pub references: Vec<ReferenceFactor>,
}

/// One stripped device, kind and phase.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StrippedTable {
    /// The device's name.
    pub device: String,
    /// Module kind.
    pub kind: ModuleKind,
    /// Phase.
    pub phase: Phase,
    /// The device's floor, ms.
    pub floor_ms: f64,
    /// Measured rows read.
    pub rows_read: usize,
    /// Rows at least `min_floor_multiple` times the floor.
    pub rows_above_floor: usize,
    /// Of those, rows that would fall below the spec's least time once stripped (dropped).
    pub below_bound: usize,
    /// Rows written.
    pub rows_written: usize,
}

/// What a strip did.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StripReport {
    /// The bundle whose answers stand for the kernels.
    pub bundle: String,
    /// The settings' floor quantile.
    pub floor_quantile: f64,
    /// The settings' floor multiple.
    pub min_floor_multiple: f64,
    /// The settings' row cap.
    pub max_rows: Option<usize>,
    /// Per kind and phase.
    pub factors: Vec<FrameworkFactor>,
    /// Per stripped device, kind and phase.
    pub tables: Vec<StrippedTable>,
}

/// The measured rows of one dataset, grouped by kind and phase.
struct DeviceData {
    device: perfcast_core::DeviceSpec,
    groups: BTreeMap<(ModuleKind, Phase), Vec<Record>>,
}

fn read(dir: &DatasetDir, modules: &[ModuleKind]) -> Result<DeviceData> {
    let device = dir.device()?;
    let mut groups: BTreeMap<(ModuleKind, Phase), Vec<Record>> = BTreeMap::new();
    for kind in dir.kinds() {
        if !modules.is_empty() && !modules.contains(&kind) {
            continue;
        }
        for r in dir.read(kind)? {
            if r.timing().is_some() {
                groups.entry((kind, r.context.phase)).or_default().push(r);
            }
        }
    }
    Ok(DeviceData { device, groups })
}

fn time(r: &Record) -> f64 {
    r.timing().map_or(f64::NAN, |t| t.median_ms)
}

impl StripSettings {
    /// Whether a row of `t` ms stands far enough above its device's floor to be stripped.
    fn above_floor(&self, t: f64, floor: f64) -> bool {
        t > floor && t >= self.min_floor_multiple * floor
    }
}

fn floor_ms(rows: &[Record], q: f64) -> f64 {
    let mut times: Vec<f64> = rows.iter().map(time).collect();
    times.sort_by(f64::total_cmp);
    quantile(&times, q)
}

/// Strips the framework's overhead from the rows of every dataset in `dirs` that is not one
/// of `references` (dataset folder names, `tesla-p100-pcie-16gb`), using the bundle at
/// `bundle` on the references. `modules` empty: every kind the references measured. Returns
/// the report and the stripped rows, ready for [`Import::write`].
pub fn strip_overhead(
    bundle: &Path,
    dirs: &[DatasetDir],
    references: &[String],
    modules: &[ModuleKind],
    settings: &StripSettings,
) -> Result<(StripReport, Import)> {
    if !(settings.floor_quantile >= 0.0 && settings.floor_quantile < 1.0) {
        return Err(Error::Input(format!(
            "floor quantile {} is not in [0, 1)",
            settings.floor_quantile
        )));
    }
    if !(settings.min_floor_multiple.is_finite() && settings.min_floor_multiple >= 1.0) {
        return Err(Error::Input(format!(
            "floor multiple {} is below 1",
            settings.min_floor_multiple
        )));
    }
    let name = |d: &DatasetDir| {
        d.root()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    for r in references {
        if !dirs.iter().any(|d| &name(d) == r) {
            return Err(Error::Input(format!(
                "reference `{r}` is not one of the datasets given (`--data`)"
            )));
        }
    }
    let (refs, others): (Vec<&DatasetDir>, Vec<&DatasetDir>) =
        dirs.iter().partition(|d| references.contains(&name(d)));
    if others.is_empty() {
        return Err(Error::Input(
            "every dataset given is a reference: nothing to strip".into(),
        ));
    }
    let q = settings.floor_quantile;
    let mut per_key: BTreeMap<(ModuleKind, Phase), Vec<ReferenceFactor>> = BTreeMap::new();
    for dir in refs {
        let data = read(dir, modules)?;
        let predictor = Predictor::new(Bundle::load_for_device(bundle, &data.device)?);
        for (&key, rows) in &data.groups {
            let floor = floor_ms(rows, q);
            let mut ratios = Vec::new();
            for r in rows {
                let t = time(r);
                if settings.above_floor(t, floor) {
                    let p = predictor.predict_module(&r.spec, &r.context)?.ms;
                    ratios.push((t - floor) / p);
                }
            }
            if ratios.is_empty() || ratios.len() < settings.min_reference_rows {
                continue;
            }
            ratios.sort_by(f64::total_cmp);
            per_key.entry(key).or_default().push(ReferenceFactor {
                device: data.device.name.clone(),
                factor: quantile(&ratios, 0.5),
                floor_ms: floor,
                rows: ratios.len(),
            });
        }
    }
    let factors: Vec<FrameworkFactor> = per_key
        .into_iter()
        .map(|((kind, phase), references)| {
            let mean_ln =
                references.iter().map(|r| r.factor.ln()).sum::<f64>() / references.len() as f64;
            FrameworkFactor {
                kind,
                phase,
                factor: mean_ln.exp(),
                references,
            }
        })
        .collect();
    let mut import = Import::new(
        &format!("framework overhead removed ({})", bundle.display()),
        others.first().map_or(Path::new("."), |d| d.root()),
    );
    let mut tables = Vec::new();
    let mut rng = SplitMix64::new(settings.seed);
    for dir in others {
        let data = read(dir, modules)?;
        let mut rows_out = DeviceRows::new(&name(dir), Some(data.device.clone()));
        for (&(kind, phase), rows) in &data.groups {
            let Some(factor) = factors.iter().find(|f| f.kind == kind && f.phase == phase) else {
                rows_out.skip(
                    kind,
                    format!("no reference measured {} {phase}", kind.name()),
                );
                continue;
            };
            let floor = floor_ms(rows, q);
            let mut kept: Vec<Record> = Vec::new();
            let (mut above, mut below) = (0, 0);
            for r in rows {
                let t = time(r);
                if !settings.above_floor(t, floor) {
                    continue;
                }
                above += 1;
                let stripped = (t - floor) / factor.factor;
                if stripped < least_time_s(&r.spec, &r.context, &data.device) * 1e3 {
                    below += 1;
                    continue;
                }
                let mut out = r.clone();
                out.outcome = Outcome::Ok(Timing::median_only(stripped));
                out.backend = format!("{} ({STRIPPED})", r.backend);
                kept.push(out);
            }
            if let Some(cap) = settings.max_rows.filter(|&cap| kept.len() > cap) {
                rng.shuffle(&mut kept);
                kept.truncate(cap);
            }
            tables.push(StrippedTable {
                device: data.device.name.clone(),
                kind,
                phase,
                floor_ms: floor,
                rows_read: rows.len(),
                rows_above_floor: above,
                below_bound: below,
                rows_written: kept.len(),
            });
            for r in kept {
                rows_out.push(r);
            }
        }
        import.devices.push(rows_out);
    }
    let report = StripReport {
        bundle: bundle.display().to_string(),
        floor_quantile: q,
        min_floor_multiple: settings.min_floor_multiple,
        max_rows: settings.max_rows,
        factors,
        tables,
    };
    Ok((report, import))
}

/// Writes `rows` as datasets under `out` (replacing an earlier output only with `force`), with
/// `report` beside them in [`REPORT_FILE`], all in one staged directory.
pub fn write_stripped(out: &Path, force: bool, report: &StripReport, rows: &Import) -> Result<()> {
    let notes = serde_json::to_string_pretty(report)
        .map_err(|e| Error::Input(format!("`{}`: {e}", out.display())))?;
    rows.write_with(out, force, &[(REPORT_FILE, notes.as_bytes())])?;
    Ok(())
}
