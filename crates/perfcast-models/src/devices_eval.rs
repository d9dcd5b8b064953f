//! Cross-device evaluation: leave one device out (`perfcast eval devices`), PROFET-style anchor
//! mapping scored with devices left out (`perfcast eval anchor`), and an anchor device's
//! profile mapped to a device never measured (`perfcast map`).

use std::collections::BTreeMap;
use std::path::Path;

use perfcast_core::progress::Observer;
use perfcast_core::{DeviceKind, DeviceSpec, ModuleKind, ModuleSpec};
use perfcast_data::{DatasetDir, names_device};
use serde::Serialize;

use crate::anchor::{self, AnchorMode, AnchorModel, DeviceRows, HeldOutTarget};
use crate::device_features::{
    CrossDeviceParams, DEFAULT_FLOOR_MS, DEFAULT_TILE, HeldOutDevice, HoldOut, Scale, concat,
    leave_devices_out, thin,
};
use crate::error::{Error, Result};
use crate::eval::ModelParams;
use crate::features::TrainSet;
use crate::source::{PhaseFilter, device_set, flagged_tables};

/// What `perfcast eval devices` evaluates.
#[derive(Clone, Debug)]
pub struct DevicesPlan {
    /// Family names; each is fitted in cross-device mode, `<family>-raw` on the plain rows.
    pub models: Vec<String>,
    /// Kinds (empty: every kind two devices or more have).
    pub modules: Vec<ModuleKind>,
    /// Rows of which phase.
    pub phase: PhaseFilter,
    /// Devices to hold out, by folder or device name (empty: each in turn).
    pub holdout: Vec<String>,
    /// At most this many rows per device and kind, evenly spaced (0: all).
    pub max_rows: usize,
    /// `model.field=value` settings.
    pub set: Vec<String>,
    /// Spec fields the cross-device models read besides peak GFLOP/s and bandwidth.
    pub device_fields: Vec<String>,
    /// Per-call floor added to the roofline time latencies are normalised by, microseconds.
    pub floor_us: f64,
    /// What latencies are normalised by: `roofline` or `waves`.
    pub scale: String,
    /// Tile side of the `waves` scale.
    pub tile: f64,
    /// Extended-row columns the cross-device models see as zero.
    pub mask: Vec<String>,
    /// Keep every held-out row's prediction ([`DevicesEval::predictions`]).
    pub keep_predictions: bool,
    /// Drop the held-out devices' `launch_us` from their specs, so the util model's launch
    /// floor for them comes from the training devices alone.
    pub no_launch_us: bool,
    /// Leave the tables the GEMM consistency check flags (`perfcast datasets check`) out of
    /// training; a flagged table is still scored when its device is held out.
    pub exclude_flagged: bool,
}

impl Default for DevicesPlan {
    fn default() -> DevicesPlan {
        DevicesPlan {
            models: vec!["ridge".into(), "knn".into(), "trees".into()],
            modules: Vec::new(),
            phase: PhaseFilter::All,
            holdout: Vec::new(),
            max_rows: 0,
            set: Vec::new(),
            device_fields: Vec::new(),
            floor_us: 1e3 * DEFAULT_FLOOR_MS,
            scale: "roofline".into(),
            tile: DEFAULT_TILE,
            mask: Vec::new(),
            keep_predictions: false,
            no_launch_us: false,
            exclude_flagged: false,
        }
    }
}

/// One family's leave-one-device-out result on one kind.
#[derive(Clone, Debug, Serialize)]
pub struct FamilyResult {
    /// Family name as fitted (`ridge-xdev`).
    pub model: String,
    /// Per held-out device.
    pub devices: Vec<HeldOutDevice>,
    /// Mean of their MAPEs, percent.
    pub mean_mape: f64,
}

/// One kind's results.
#[derive(Clone, Debug, Serialize)]
pub struct KindResult {
    /// Kind.
    pub kind: ModuleKind,
    /// Rows of which phase.
    pub phase: PhaseFilter,
    /// Devices with rows of the kind.
    pub devices: Vec<String>,
    /// Devices whose table of the kind the consistency check flagged and training left out
    /// (`--exclude-flagged`).
    pub excluded: Vec<String>,
    /// Per family.
    pub models: Vec<FamilyResult>,
}

/// A held-out row's measured and predicted latency, for error analysis.
#[derive(Clone, Debug)]
pub struct PredictionRow {
    /// Kind.
    pub kind: ModuleKind,
    /// Family as fitted.
    pub model: String,
    /// The device held out.
    pub device: String,
    /// The row's GEMM dimensions M, N, K, its FLOPs and its spec roofline time.
    pub gemm: [f64; 5],
    /// Measured, ms.
    pub measured_ms: f64,
    /// Predicted, ms.
    pub predicted_ms: f64,
}

/// What [`evaluate_devices`] found.
#[derive(Clone, Debug, Default)]
pub struct DevicesEval {
    /// Per kind.
    pub kinds: Vec<KindResult>,
    /// Every held-out row, with [`DevicesPlan::keep_predictions`].
    pub predictions: Vec<PredictionRow>,
}

/// The progress stage of [`evaluate_devices`].
pub const DEVICES_STAGE: &str = "devices";

/// A family by name in cross-device mode (`<family>-raw`: the plain family).
fn cross_device_params(name: &str) -> Result<ModelParams> {
    let name = name.trim();
    if let Some(raw) = name.strip_suffix("-raw") {
        return ModelParams::by_name(raw);
    }
    Ok(CrossDeviceParams::wrap(ModelParams::by_name(name)?))
}

/// A family (named with or without `-xdev`, or `-raw` for the plain family) with `sets`
/// applied to its inner parameters, wrapped for cross-device fitting over `devices`.
pub fn with_overrides(
    name: &str,
    sets: &[String],
    fields: &[String],
    devices: &[DeviceSpec],
) -> Result<ModelParams> {
    let base = name
        .trim()
        .trim_end_matches("-raw")
        .trim_end_matches("-xdev");
    let inner = ModelParams::by_name(base)?.with_sets(sets)?;
    let params = if name.trim().ends_with("-raw") {
        inner
    } else {
        CrossDeviceParams::wrap_with(inner, fields, devices)
    };
    params.validate()?;
    Ok(params)
}

/// A `scale` name.
fn parse_scale(s: &str) -> Result<Scale> {
    match s {
        "roofline" => Ok(Scale::Roofline),
        "waves" => Ok(Scale::Waves),
        other => Err(Error::Input(format!(
            "`--scale {other}` is not `roofline` or `waves`"
        ))),
    }
}

/// Kinds at least two of `dirs` measured.
fn shared_kinds(dirs: &[DatasetDir]) -> Vec<ModuleKind> {
    ModuleKind::ALL
        .iter()
        .copied()
        .filter(|k| dirs.iter().filter(|d| d.kinds().contains(k)).count() >= 2)
        .collect()
}

/// Leave-one-device-out over `dirs` (one dataset per device): per kind and family, each
/// held-out device is predicted by the family fitted on the other devices, GPU predictions
/// raised to the spec roofline as the predictor does. Progress: stage [`DEVICES_STAGE`].
pub fn evaluate_devices(
    dirs: &[DatasetDir],
    plan: &DevicesPlan,
    observer: &dyn Observer,
) -> Result<DevicesEval> {
    if dirs.len() < 2 {
        return Err(Error::Input(format!(
            "leave-one-device-out needs datasets of at least 2 devices, `--data` gives {}",
            dirs.len()
        )));
    }
    for name in &plan.models {
        cross_device_params(name)?;
    }
    let mut devices: Vec<DeviceSpec> = dirs
        .iter()
        .map(DatasetDir::device)
        .collect::<std::result::Result<_, _>>()?;
    if plan.no_launch_us {
        for (dir, device) in dirs.iter().zip(devices.iter_mut()) {
            if plan.holdout.is_empty() || names_device(dir.root(), device, &plan.holdout) {
                device.launch_us = None;
            }
        }
    }
    for w in &plan.holdout {
        if !dirs
            .iter()
            .zip(&devices)
            .any(|(d, s)| names_device(d.root(), s, std::slice::from_ref(w)))
        {
            return Err(Error::Input(format!(
                "`--holdout {w}` names none of the devices in `--data`"
            )));
        }
    }
    let kinds = if plan.modules.is_empty() {
        shared_kinds(dirs)
    } else {
        plan.modules.clone()
    };
    if kinds.is_empty() {
        return Err(Error::Input(
            "no module kind is measured on two devices or more".into(),
        ));
    }
    // (device name, kind) of every table the GEMM consistency check flags.
    let flagged: Vec<(String, ModuleKind)> = if plan.exclude_flagged {
        flagged_tables(dirs)?
            .into_iter()
            .map(|(device, kind, _)| (device, kind))
            .collect()
    } else {
        Vec::new()
    };
    let mut out = DevicesEval::default();
    observer.begin(DEVICES_STAGE, (kinds.len() * plan.models.len()) as u64);
    for kind in kinds {
        let mut sets: Vec<(String, TrainSet)> = Vec::new();
        let mut options = HoldOut::default();
        for (dir, device) in dirs.iter().zip(&devices) {
            if let Some(set) = device_set(dir, device, kind, plan.phase.phase())? {
                sets.push((device.name.clone(), thin(&set, plan.max_rows)));
                options.held.push(
                    plan.holdout.is_empty() || names_device(dir.root(), device, &plan.holdout),
                );
                options.raise.push(device.kind == DeviceKind::Gpu);
                options
                    .trained
                    .push(!flagged.contains(&(device.name.clone(), kind)));
            }
        }
        if sets.len() < 2 {
            return Err(Error::Input(format!(
                "`{kind}` rows exist on {} device(s) of `--data`; leaving one out needs 2",
                sets.len()
            )));
        }
        let mut models = Vec::new();
        for name in &plan.models {
            observer.message(DEVICES_STAGE, &format!("{kind}: {name}"));
            let mut params = with_overrides(name, &plan.set, &plan.device_fields, &devices)?;
            if let Some(p) = params.downcast_mut::<CrossDeviceParams>() {
                // `util` fits its own floor and keeps its own target.
                if p.scale != Scale::Utilisation {
                    p.floor_ms = plan.floor_us / 1e3;
                    p.scale = parse_scale(&plan.scale)?;
                    p.tile = plan.tile;
                }
                p.mask = plan.mask.clone();
                p.validate()?;
            }
            options.label = format!("`{kind}`, {name}");
            let held = leave_devices_out(&params, &sets, &options)?;
            if plan.keep_predictions {
                for (score, pred) in &held {
                    // The device's rows in the order they were scored: its sets in turn.
                    let of_device: Vec<&TrainSet> = sets
                        .iter()
                        .filter(|(d, s)| *d == score.device && !s.is_empty())
                        .map(|(_, s)| s)
                        .collect();
                    if of_device.is_empty() {
                        continue;
                    }
                    let test = concat(&of_device)?;
                    out.predictions.extend(prediction_rows(
                        kind,
                        params.name(),
                        &score.device,
                        &test,
                        pred,
                    )?);
                }
            }
            let scores: Vec<HeldOutDevice> = held.into_iter().map(|(s, _)| s).collect();
            let mean_mape =
                scores.iter().map(|s| s.metrics.mape).sum::<f64>() / scores.len().max(1) as f64;
            models.push(FamilyResult {
                model: params.name().to_string(),
                devices: scores,
                mean_mape,
            });
            observer.advance(DEVICES_STAGE, 1);
        }
        out.kinds.push(KindResult {
            kind,
            phase: plan.phase,
            devices: sets.iter().map(|(n, _)| n.clone()).collect(),
            excluded: flagged
                .iter()
                .filter(|(_, k)| *k == kind)
                .map(|(d, _)| d.clone())
                .collect(),
            models,
        });
    }
    observer.end(DEVICES_STAGE);
    Ok(out)
}

/// A held-out device's rows with their predictions.
fn prediction_rows(
    kind: ModuleKind,
    model: &str,
    device: &str,
    test: &TrainSet,
    pred: &[f64],
) -> Result<Vec<PredictionRow>> {
    let at = |name: &str| {
        test.schema
            .index(name)
            .ok_or_else(|| Error::Input(format!("the `{kind}` schema has no `{name}`")))
    };
    let cols = [
        at("gemm_m")?,
        at("gemm_n")?,
        at("gemm_k")?,
        at("work_flops")?,
        at("roofline_ms")?,
    ];
    Ok(test
        .x
        .iter_rows()
        .zip(&test.y)
        .zip(pred)
        .map(|((r, y), p)| PredictionRow {
            kind,
            model: model.to_string(),
            device: device.to_string(),
            gemm: cols.map(|c| r[c]),
            measured_ms: *y,
            predicted_ms: *p,
        })
        .collect())
}

/// Writes held-out predictions as CSV (kind, model, device, the row's GEMM dimensions, FLOPs
/// and roofline time, measured and predicted ms), atomically.
pub fn write_predictions(path: &Path, rows: &[PredictionRow]) -> Result<()> {
    const HEADER: [&str; 10] = [
        "kind",
        "model",
        "device",
        "gemm_m",
        "gemm_n",
        "gemm_k",
        "flops",
        "roofline_ms",
        "measured_ms",
        "predicted_ms",
    ];
    let mut records = Vec::with_capacity(rows.len());
    for r in rows {
        let mut cells = vec![r.kind.to_string(), r.model.clone(), r.device.clone()];
        cells.extend(r.gemm.iter().map(f64::to_string));
        cells.push(r.measured_ms.to_string());
        cells.push(r.predicted_ms.to_string());
        records.push(cells);
    }
    Ok(perfcast_data::write_csv(path, &HEADER, &records)?)
}

/// What `perfcast eval anchor` evaluates.
#[derive(Clone, Debug, Default)]
pub struct AnchorPlan {
    /// Kinds (empty: every kind two devices or more have).
    pub modules: Vec<ModuleKind>,
    /// Rows of which phase.
    pub phase: PhaseFilter,
    /// `nearest`, `all`, or a device (folder or device name).
    pub anchor: String,
    /// Leave out devices of another kind than the target.
    pub same_kind: bool,
}

/// One kind's anchor-mapping scores.
#[derive(Clone, Debug, Serialize)]
pub struct AnchorKindResult {
    /// Kind.
    pub kind: ModuleKind,
    /// Rows of which phase.
    pub phase: PhaseFilter,
    /// How anchors were chosen.
    pub anchor: String,
    /// Per held-out target.
    pub devices: Vec<HeldOutTarget>,
    /// Mean over held-out devices of each method's MAPE.
    pub mean_mape: BTreeMap<String, f64>,
}

/// The progress stage of [`evaluate_anchor`].
pub const ANCHOR_STAGE: &str = "anchor";

/// The `kind` rows of `phase` of every dataset that has some, keyed for anchor mapping.
pub fn anchor_rows(
    dirs: &[DatasetDir],
    devices: &[DeviceSpec],
    kind: ModuleKind,
    phase: PhaseFilter,
) -> Result<Vec<DeviceRows>> {
    let mut measured = Vec::new();
    for (dir, device) in dirs.iter().zip(devices) {
        let mut records = dir.read(kind)?;
        if let Some(phase) = phase.phase() {
            records.retain(|r| r.context.phase == phase);
        }
        if !records.is_empty() {
            measured.push(DeviceRows::new(device.clone(), &records));
        }
    }
    Ok(measured)
}

/// Anchor mapping with each device in turn as the target, left out of training
/// ([`anchor::leave_one_target_out`]), per kind; progress: stage [`ANCHOR_STAGE`].
pub fn evaluate_anchor(
    dirs: &[DatasetDir],
    plan: &AnchorPlan,
    observer: &dyn Observer,
) -> Result<Vec<AnchorKindResult>> {
    if dirs.len() < 3 {
        return Err(Error::Input(format!(
            "anchor mapping with a device left out needs datasets of at least 3 devices, \
             `--data` gives {}",
            dirs.len()
        )));
    }
    let devices: Vec<DeviceSpec> = dirs
        .iter()
        .map(DatasetDir::device)
        .collect::<std::result::Result<_, _>>()?;
    let mode = match plan.anchor.as_str() {
        "nearest" => AnchorMode::Nearest,
        "all" => AnchorMode::All,
        name => {
            let i = dirs
                .iter()
                .zip(&devices)
                .position(|(d, s)| names_device(d.root(), s, &[name.to_string()]))
                .ok_or_else(|| {
                    Error::Input(format!(
                        "`--anchor {name}` names none of the devices in `--data`"
                    ))
                })?;
            AnchorMode::Device(devices[i].name.clone())
        }
    };
    let kinds = if plan.modules.is_empty() {
        shared_kinds(dirs)
    } else {
        plan.modules.clone()
    };
    observer.begin(ANCHOR_STAGE, kinds.len() as u64);
    let mut results = Vec::new();
    for kind in kinds {
        observer.message(ANCHOR_STAGE, &kind.to_string());
        let measured = anchor_rows(dirs, &devices, kind, plan.phase)?;
        let scores = anchor::leave_one_target_out(kind, &measured, &mode, plan.same_kind)
            .map_err(|e| e.context(format!("anchor mapping of `{kind}`")))?;
        let mut mean_mape = BTreeMap::new();
        for method in anchor::METHODS {
            let v: Vec<f64> = scores
                .iter()
                .filter_map(|s| s.mape.get(*method).copied())
                .collect();
            if !v.is_empty() {
                mean_mape.insert(method.to_string(), v.iter().sum::<f64>() / v.len() as f64);
            }
        }
        results.push(AnchorKindResult {
            kind,
            phase: plan.phase,
            anchor: plan.anchor.clone(),
            devices: scores,
            mean_mape,
        });
        observer.advance(ANCHOR_STAGE, 1);
    }
    observer.end(ANCHOR_STAGE);
    Ok(results)
}

/// One row of an anchor device's profile mapped to the target.
#[derive(Clone, Debug, Serialize)]
pub struct Mapped {
    /// Kind.
    pub kind: ModuleKind,
    /// The module, described.
    pub module: String,
    /// Batch size.
    pub batch: usize,
    /// Phase name.
    pub phase: String,
    /// Measured on the anchor, ms.
    pub anchor_ms: f64,
    /// Mapped to the target, ms.
    pub predicted_ms: f64,
    /// The plain roofline-ratio mapping, ms, for comparison.
    pub roofline_ratio_ms: f64,
}

/// What [`map_profile`] mapped.
#[derive(Clone, Debug)]
pub struct MapReport {
    /// The anchor device.
    pub anchor: String,
    /// The target device.
    pub target: String,
    /// Whether both run the same software stack.
    pub same_software: bool,
    /// Every mapped row.
    pub rows: Vec<Mapped>,
    /// Per (kind, phase): rows, anchor ms and mapped ms summed.
    pub totals: BTreeMap<(String, String), (usize, f64, f64)>,
}

/// The progress stage of [`map_profile`].
pub const MAP_STAGE: &str = "map";

/// Maps the profile in `from` (measured on its device, the anchor) to `target`: per kind, the
/// anchor mapping is fitted on every pair of the `train` devices and each `from` row of
/// `phase` is predicted on the target, with the roofline ratio beside it. `modules` empty:
/// every kind of `from` that two `train` devices measured. Progress: stage [`MAP_STAGE`].
pub fn map_profile(
    from: &DatasetDir,
    train: &[DatasetDir],
    target: &DeviceSpec,
    modules: &[ModuleKind],
    phase: PhaseFilter,
    observer: &dyn Observer,
) -> Result<MapReport> {
    let anchor_spec = from.device()?;
    let devices: Vec<DeviceSpec> = train
        .iter()
        .map(DatasetDir::device)
        .collect::<std::result::Result<_, _>>()?;
    let kinds: Vec<ModuleKind> = if modules.is_empty() {
        from.kinds()
            .into_iter()
            .filter(|k| train.iter().filter(|d| d.kinds().contains(k)).count() >= 2)
            .collect()
    } else {
        modules.to_vec()
    };
    if kinds.is_empty() {
        return Err(Error::Input(format!(
            "`{}` has no module kind that two `--train` devices measured",
            from.root().display()
        )));
    }
    observer.begin(MAP_STAGE, kinds.len() as u64);
    let mut mapped = Vec::new();
    for kind in kinds {
        observer.message(MAP_STAGE, &kind.to_string());
        let measured = anchor_rows(train, &devices, kind, phase)?;
        if measured.len() < 2 {
            return Err(Error::Input(format!(
                "`{kind}`: the mapping needs `--train` datasets of at least 2 devices with such \
                 rows, found {}",
                measured.len()
            )));
        }
        let refs: Vec<&DeviceRows> = measured.iter().collect();
        let model = AnchorModel::fit(kind, &refs)
            .map_err(|e| e.context(format!("fitting the `{kind}` anchor mapping")))?;
        let mut records = from.read(kind)?;
        if let Some(phase) = phase.phase() {
            records.retain(|r| r.context.phase == phase);
        }
        let rows: Vec<(&ModuleSpec, &perfcast_core::Context, f64)> = records
            .iter()
            .filter_map(|r| r.timing().map(|t| (&r.spec, &r.context, t.median_ms)))
            .filter(|(_, _, ms)| ms.is_finite() && *ms > 0.0)
            .collect();
        let predicted = model.predict_rows(&rows, &anchor_spec, target)?;
        for ((spec, context, ms), p) in rows.iter().zip(predicted) {
            mapped.push(Mapped {
                kind,
                module: spec.describe(),
                batch: context.batch,
                phase: context.phase.name().into(),
                anchor_ms: *ms,
                predicted_ms: p,
                roofline_ratio_ms: anchor::roofline_ratio_ms(
                    spec,
                    context,
                    &anchor_spec,
                    target,
                    *ms,
                ),
            });
        }
        observer.advance(MAP_STAGE, 1);
    }
    observer.end(MAP_STAGE);
    // Totals per kind and phase: what a profile of a whole network adds up to.
    let mut totals: BTreeMap<(String, String), (usize, f64, f64)> = BTreeMap::new();
    for m in &mapped {
        let t = totals
            .entry((m.kind.to_string(), m.phase.clone()))
            .or_default();
        t.0 += 1;
        t.1 += m.anchor_ms;
        t.2 += m.predicted_ms;
    }
    Ok(MapReport {
        same_software: anchor::same_software(&anchor_spec, target),
        anchor: anchor_spec.name,
        target: target.name.clone(),
        rows: mapped,
        totals,
    })
}

/// Writes mapped rows as CSV (kind, module, batch, phase, anchor, mapped and roofline-ratio
/// ms), atomically.
pub fn write_mapped(path: &Path, rows: &[Mapped]) -> Result<()> {
    let records: Vec<Vec<String>> = rows
        .iter()
        .map(|m| {
            vec![
                m.kind.to_string(),
                m.module.clone(),
                m.batch.to_string(),
                m.phase.clone(),
                m.anchor_ms.to_string(),
                m.predicted_ms.to_string(),
                m.roofline_ratio_ms.to_string(),
            ]
        })
        .collect();
    Ok(perfcast_data::write_csv(
        path,
        &[
            "kind",
            "module",
            "batch",
            "phase",
            "anchor_ms",
            "predicted_ms",
            "roofline_ratio_ms",
        ],
        &records,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfcast_core::progress::Silent;
    use perfcast_core::{Context, Phase};
    use perfcast_data::{Outcome, Record, Timing};

    /// A GPU whose linear layers run at a fixed share of its roofline.
    fn gpu_dataset(root: &Path, name: &str, peak: f64, bw: f64) -> DatasetDir {
        let device = perfcast_core::testing::gpu(name, peak, bw);
        let dir = DatasetDir::create_or_open(root.join(name), &device).expect("dataset");
        let records: Vec<Record> = (0..30)
            .map(|i| {
                let spec = ModuleSpec::from_json(&format!(
                    r#"{{"kind":"linear","in_features":{},"out_features":{}}}"#,
                    256 + 64 * i,
                    512 + 32 * i
                ))
                .expect("spec");
                let context = Context {
                    batch: 1 + i % 8,
                    phase: Phase::Inference,
                    threads: 1,
                    utilisation: 0.0,
                };
                let f = perfcast_core::features::derive(&spec, context.batch);
                let bytes = f.bytes_read + f.bytes_written;
                let roofline_ms = 1e3 * (f.flops / (peak * 1e9)).max(bytes / (bw * 1e9));
                Record {
                    spec,
                    context,
                    backend: "published".into(),
                    outcome: Outcome::Ok(Timing::median_only(0.01 + 2.0 * roofline_ms)),
                    perfcast_version: "test".into(),
                    timestamp: 0,
                }
            })
            .collect();
        dir.write(ModuleKind::Linear, &records).expect("write");
        dir
    }

    /// A GPU whose linear GEMMs run at `lin` of its peak and bmm at `mm` (16 sizes each, in
    /// the consistency check's work range).
    fn gemm_dataset(root: &Path, name: &str, lin: f64, mm: f64) -> DatasetDir {
        let device = perfcast_core::testing::gpu(name, 10_000.0, 500.0);
        let dir = DatasetDir::create_or_open(root.join(name), &device).expect("dataset");
        let record = |spec: ModuleSpec, efficiency: f64| {
            let flops = perfcast_core::features::derive(&spec, 1).flops;
            Record {
                spec,
                context: Context {
                    batch: 1,
                    phase: Phase::Inference,
                    threads: 1,
                    utilisation: 0.0,
                },
                backend: "published".into(),
                outcome: Outcome::Ok(Timing::median_only(
                    flops / (device.peak_gflops * 1e9) * 1e3 / efficiency,
                )),
                perfcast_version: "test".into(),
                timestamp: 0,
            }
        };
        let sizes = (0..16).map(|i| 1024 + 64 * i);
        let linear: Vec<Record> = sizes
            .clone()
            .map(|s| {
                let spec = format!(
                    r#"{{"kind":"linear","tokens":{s},"in_features":{s},"out_features":{s}}}"#
                );
                record(ModuleSpec::from_json(&spec).expect("spec"), lin)
            })
            .collect();
        let matmul: Vec<Record> = sizes
            .map(|s| {
                let spec = format!(r#"{{"kind":"matmul","m":{s},"k":{s},"n":{s}}}"#);
                record(ModuleSpec::from_json(&spec).expect("spec"), mm)
            })
            .collect();
        dir.write(ModuleKind::Linear, &linear).expect("write");
        dir.write(ModuleKind::Matmul, &matmul).expect("write");
        dir
    }

    #[test]
    fn a_flagged_table_is_left_out_of_training_but_still_scored() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dirs = vec![
            gemm_dataset(tmp.path(), "a", 0.7, 0.6),
            gemm_dataset(tmp.path(), "b", 0.75, 0.65),
            gemm_dataset(tmp.path(), "c", 0.65, 0.55),
            // The P4 pattern: linear far below its own bmm.
            gemm_dataset(tmp.path(), "p4", 0.15, 0.5),
        ];
        let plan = |exclude_flagged| DevicesPlan {
            models: vec!["ridge".into()],
            modules: vec![ModuleKind::Linear, ModuleKind::Matmul],
            exclude_flagged,
            ..DevicesPlan::default()
        };
        let kept = evaluate_devices(&dirs, &plan(false), &Silent).expect("kept");
        let left_out = evaluate_devices(&dirs, &plan(true), &Silent).expect("left out");
        let scores = |out: &DevicesEval, kind: usize| -> Vec<(String, usize, f64)> {
            out.kinds[kind].models[0]
                .devices
                .iter()
                .map(|d| (d.device.clone(), d.train_rows, d.metrics.mape))
                .collect()
        };
        assert!(kept.kinds.iter().all(|k| k.excluded.is_empty()));
        assert_eq!(left_out.kinds[0].excluded, ["p4"]);
        assert!(left_out.kinds[1].excluded.is_empty());
        let (kept_linear, linear) = (scores(&kept, 0), scores(&left_out, 0));
        // Every device is still scored, the flagged one too (trained on the other three).
        assert_eq!(linear.len(), 4);
        assert_eq!(linear[3].0, "p4");
        assert_eq!(linear[3].1, 48);
        // The others train on two devices' linear rows instead of three, and predict better
        // without the P4's slow table.
        assert_eq!((kept_linear[0].1, linear[0].1), (48, 32));
        assert!(linear[0].2 < kept_linear[0].2, "{linear:?} {kept_linear:?}");
        // The bmm tables are not flagged: the same training either way.
        assert_eq!(scores(&kept, 1), scores(&left_out, 1));
    }

    #[test]
    fn each_device_left_out_is_predicted_from_the_others() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dirs = vec![
            gpu_dataset(tmp.path(), "small", 5_000.0, 300.0),
            gpu_dataset(tmp.path(), "mid", 10_000.0, 600.0),
            gpu_dataset(tmp.path(), "large", 20_000.0, 1_200.0),
        ];
        let plan = DevicesPlan {
            models: vec!["ridge".into()],
            holdout: vec!["mid".into()],
            keep_predictions: true,
            ..DevicesPlan::default()
        };
        let out = evaluate_devices(&dirs, &plan, &Silent).expect("evaluated");
        assert_eq!(out.kinds.len(), 1);
        let kind = &out.kinds[0];
        assert_eq!(kind.kind, ModuleKind::Linear);
        assert_eq!(kind.devices, ["small", "mid", "large"]);
        let family = &kind.models[0];
        assert_eq!(family.model, "ridge-xdev");
        // Only the device named by `holdout` is left out, trained on the other two.
        assert_eq!(family.devices.len(), 1);
        assert_eq!(family.devices[0].device, "mid");
        assert_eq!(family.devices[0].train_rows, 60);
        assert_eq!(family.mean_mape, family.devices[0].metrics.mape);
        // Same efficiency on every device: the normalised model transfers closely.
        assert!(family.mean_mape < 10.0, "{}", family.mean_mape);
        assert_eq!(out.predictions.len(), 30);
        let path = tmp.path().join("predictions.csv");
        write_predictions(&path, &out.predictions).expect("csv");
        let csv = std::fs::read_to_string(&path).expect("read");
        assert!(csv.starts_with(
            "kind,model,device,gemm_m,gemm_n,gemm_k,flops,roofline_ms,measured_ms,predicted_ms\n"
        ));
        assert_eq!(csv.lines().count(), 31);

        let err = evaluate_devices(
            &dirs,
            &DevicesPlan {
                holdout: vec!["h100".into()],
                ..plan.clone()
            },
            &Silent,
        )
        .expect_err("unknown device")
        .to_string();
        assert_eq!(
            err,
            "`--holdout h100` names none of the devices in `--data`"
        );
        let err = evaluate_devices(&dirs[..1], &plan, &Silent)
            .expect_err("one device")
            .to_string();
        assert!(
            err.contains("needs datasets of at least 2 devices"),
            "{err}"
        );
    }
}
