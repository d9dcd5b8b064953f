//! A bundle's answers against measurements: the predictor (canonical forms, physical bound,
//! composed training steps, fallbacks) scored on a dataset's rows, as a user would query it.
//!
//! Cross-validation scores the models on rows they were fitted beside; this scores what
//! `perfcast predict` answers, on any device's measurements (a GPU the bundle never saw, or the
//! fwd + bwd conv steps DeepBench published).

use perfcast_core::canonical::least_time_s;
use perfcast_core::{DeviceKind, Metrics, ModuleKind, Phase};
use perfcast_data::Record;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use perfcast_predict::predictor::{Predictor, is_raised};

/// One kind and phase of a bundle scored on measured rows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KindScore {
    /// Module kind.
    pub kind: ModuleKind,
    /// Phase of the rows.
    pub phase: Phase,
    /// Accuracy over the rows.
    pub metrics: Metrics,
    /// The model that answered (`roofline-spec` where the bundle has none).
    pub model: String,
    /// Predictions the spec fallback answered (no model for the kind).
    pub fallback: usize,
    /// Predictions a model put below the spec bound, raised to it by the predictor.
    pub raised: usize,
    /// Answers below the least time the device's spec allows (0 for a GPU bundle, whose
    /// predictor raises them; counted to show it).
    pub below_bound: usize,
    /// Median of predicted / measured (above 1: too slow).
    pub median_ratio: f64,
}

/// Scores `predictor` on `records` (failed rows skipped), one [`KindScore`] per kind and phase
/// present, in kind then phase order. `phase` keeps only rows of that phase.
pub fn score_records(
    predictor: &Predictor,
    records: &[Record],
    phase: Option<Phase>,
) -> Result<Vec<KindScore>> {
    Ok(score_records_with_rows(predictor, records, phase)?.0)
}

/// One measured row and the bundle's answer for it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ScoredRow {
    /// Module kind.
    pub kind: ModuleKind,
    /// Phase.
    pub phase: Phase,
    /// The module ([`perfcast_core::ModuleSpec::describe`]).
    pub module: String,
    /// Batch.
    pub batch: usize,
    /// Measured latency, ms.
    pub measured_ms: f64,
    /// Predicted latency, ms.
    pub predicted_ms: f64,
    /// The least time the device's spec allows, ms.
    pub bound_ms: f64,
}

/// [`score_records`] and every scored row, in the order scored.
pub fn score_records_with_rows(
    predictor: &Predictor,
    records: &[Record],
    phase: Option<Phase>,
) -> Result<(Vec<KindScore>, Vec<ScoredRow>)> {
    let mut scored = Vec::new();
    let device = &predictor.bundle().manifest.device;
    let mut groups: Vec<((ModuleKind, Phase), Vec<&Record>)> = Vec::new();
    for r in records {
        if r.timing().is_none() || phase.is_some_and(|p| p != r.context.phase) {
            continue;
        }
        let key = (r.spec.kind(), r.context.phase);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(r),
            None => groups.push((key, vec![r])),
        }
    }
    groups.sort_by_key(|((kind, phase), _)| (kind.name(), *phase == Phase::Training));
    let mut out = Vec::with_capacity(groups.len());
    for ((kind, phase), rows) in groups {
        let (mut pred, mut truth) = (Vec::new(), Vec::new());
        let (mut fallback, mut raised, mut below) = (0, 0, 0);
        let mut model = String::new();
        for r in rows {
            let Some(t) = r.timing() else { continue };
            let p = predictor.predict_module(&r.spec, &r.context)?;
            let bound_ms = least_time_s(&r.spec, &r.context, device) * 1e3;
            if device.kind == DeviceKind::Gpu && p.ms < bound_ms * (1.0 - 1e-12) {
                below += 1;
            }
            fallback += usize::from(p.fallback);
            raised += usize::from(p.warnings.iter().any(|w| is_raised(w)));
            if model.is_empty() {
                model = p.model.to_string();
            }
            scored.push(ScoredRow {
                kind,
                phase,
                module: r.spec.describe(),
                batch: r.context.batch,
                measured_ms: t.median_ms,
                predicted_ms: p.ms,
                bound_ms,
            });
            pred.push(p.ms);
            truth.push(t.median_ms);
        }
        let Some(metrics) = Metrics::compute(&pred, &truth) else {
            continue;
        };
        let mut ratios: Vec<f64> = pred.iter().zip(&truth).map(|(p, t)| p / t).collect();
        ratios.sort_by(f64::total_cmp);
        out.push(KindScore {
            kind,
            phase,
            metrics,
            model,
            fallback,
            raised,
            below_bound: below,
            median_ratio: ratios[ratios.len() / 2],
        });
    }
    Ok((out, scored))
}

/// One device's dataset scored by a bundle.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceScores {
    /// The dataset's device.
    pub device: String,
    /// The dataset.
    pub dataset: String,
    /// Per kind and phase.
    pub kinds: Vec<KindScore>,
    /// Every scored row (not in the JSON summary; `eval bundle --rows` writes them).
    #[serde(skip)]
    pub rows: Vec<ScoredRow>,
}

/// Scores the bundle at `bundle` on each dataset of `dirs`, predicted for the dataset's own
/// device (a cross-device bundle answers any GPU); `modules` empty: every kind. A line per
/// dataset (device, rows) goes to `observer`.
pub fn score_datasets(
    bundle: &std::path::Path,
    dirs: &[perfcast_data::DatasetDir],
    modules: &[ModuleKind],
    phase: Option<Phase>,
    observer: &dyn perfcast_core::progress::Observer,
) -> Result<Vec<DeviceScores>> {
    let mut out = Vec::new();
    for dir in dirs {
        let device = dir.device()?;
        let predictor = Predictor::new(crate::Bundle::load_for_device(bundle, &device)?);
        let mut records = Vec::new();
        for kind in dir.kinds() {
            if modules.is_empty() || modules.contains(&kind) {
                records.extend(dir.read(kind)?);
            }
        }
        observer.note(&format!(
            "{}: {} rows of {}",
            device.name,
            records.len(),
            dir.root().display()
        ));
        let (kinds, rows) = score_records_with_rows(&predictor, &records, phase)?;
        out.push(DeviceScores {
            device: device.name.clone(),
            dataset: dir.root().display().to_string(),
            kinds,
            rows,
        });
    }
    Ok(out)
}
