//! Evaluation shared by every model: splits, k-fold cross-validation, accuracy and cost.
//!
//! All models are judged by the same code on the same splits: the splits are [`crate::split`]'s
//! (at random or by configuration group: every row of one layer configuration on one side, so
//! a model cannot score by having seen the same layer at another batch size),
//! [`cross_validate`] fits and scores a family over its k folds, [`score`] computes
//! [`Metrics`], and [`prediction_cost`] measures prediction time and size.

use std::time::Instant;

use perfcast_core::{Metrics, Phase};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::features::{TrainSet, row_in_phase};
pub use crate::params::ModelParams;
use crate::regressor::Regressor;
pub use crate::split::Split;
use crate::split::kfold;

/// Accuracy of a fitted model on a data set.
pub fn score(model: &dyn Regressor, data: &TrainSet) -> Result<Metrics> {
    let pred = model.predict(&data.x)?;
    Metrics::compute(&pred, &data.y).ok_or_else(|| Error::InvalidData("no rows to score".into()))
}

/// What predicting costs: time for one row, per row in a batch, and the model's size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PredictionCost {
    /// Median time of one single-row prediction, µs.
    pub one_row_us: f64,
    /// Time per row when predicting a batch of 10,000 rows, µs.
    pub batch_row_us: f64,
    /// Stored size of the fitted parameters, bytes.
    pub size_bytes: usize,
}

/// Measures prediction time on rows of `data` (warm-up, then medians of repeated runs), through
/// the entries the predictor calls: a multi-task model (MEDN) answers every query from its
/// training-phase row with the phase asked for ([`Regressor::predict_tasks`], one row or a
/// batch), any other model one row through [`Regressor::predict_row`] and a batch through
/// [`Regressor::predict_rows`]. Rows are put in that form before the clock starts, as the
/// predictor builds them.
pub fn prediction_cost(model: &dyn Regressor, data: &TrainSet) -> Result<PredictionCost> {
    if data.is_empty() {
        return Err(Error::InvalidData("no rows to time predictions on".into()));
    }
    let rows = data.len();
    let schema = model.schema();
    let multi = model.multi_task();
    let training = schema.index("training");
    // Each distinct row once, in the form the model is handed, with the phase it asks for.
    let distinct = rows.min(10_000);
    let width = schema.len();
    let mut forms = Vec::with_capacity(distinct * width);
    let mut phases = Vec::with_capacity(distinct);
    for i in 0..distinct {
        let x = data.x.row(i);
        let phase = match training {
            Some(c) if x[c] > 0.5 => Phase::Training,
            _ => Phase::Inference,
        };
        if multi {
            forms.extend(row_in_phase(schema, x, Phase::Training)?);
        } else {
            forms.extend_from_slice(x);
        }
        phases.push(phase);
    }
    let one = |i: usize| -> Result<f64> {
        let x = &forms[i * width..(i + 1) * width];
        if multi {
            let mut out = [0.0];
            model.predict_tasks(x, &phases[i..=i], &mut out)?;
            Ok(out[0])
        } else {
            Ok(model.predict_row(x)?)
        }
    };
    // One row: 31 samples of 200 predictions each, cycling through the rows.
    let mut samples = Vec::with_capacity(31);
    let mut sink = 0.0;
    for s in 0..33 {
        let t = Instant::now();
        for i in 0..200 {
            sink += one((s * 200 + i) % distinct)?;
        }
        if s >= 2 {
            samples.push(t.elapsed().as_secs_f64() / 200.0);
        }
    }
    samples.sort_by(f64::total_cmp);
    let one_row_us = samples[samples.len() / 2] * 1e6;
    // Batch: 10,000 rows tiled from the data, best of 3.
    let mut batch = Vec::with_capacity(10_000 * width);
    let mut batch_phases = Vec::with_capacity(10_000);
    for i in 0..10_000 {
        let j = i % distinct;
        batch.extend_from_slice(&forms[j * width..(j + 1) * width]);
        batch_phases.push(phases[j]);
    }
    let mut out = vec![0.0; 10_000];
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t = Instant::now();
        if multi {
            model.predict_tasks(&batch, &batch_phases, &mut out)?;
        } else {
            model.predict_rows(&batch, &mut out)?;
        }
        best = best.min(t.elapsed().as_secs_f64());
        sink += out[0];
    }
    std::hint::black_box(sink);
    Ok(PredictionCost {
        one_row_us,
        batch_row_us: best / 10_000.0 * 1e6,
        size_bytes: model.size_bytes(),
    })
}

/// Cross-validated accuracy: pooled over all held-out rows, and per fold.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CvReport {
    /// Model family.
    pub model: String,
    /// Folds.
    pub k: usize,
    /// Split kind.
    pub split: Split,
    /// Metrics over every held-out prediction.
    pub pooled: Metrics,
    /// MAPE of each fold, percent.
    pub fold_mape: Vec<f64>,
    /// Held-out predictions, ms, in row order (for plots).
    pub predictions: Vec<f64>,
}

/// k-fold cross-validation of a model family on `data`.
pub fn cross_validate(
    params: &ModelParams,
    data: &TrainSet,
    k: usize,
    split: Split,
    seed: u64,
) -> Result<CvReport> {
    params.validate()?;
    let mut predictions = vec![f64::NAN; data.len()];
    let mut fold_mape = Vec::with_capacity(k);
    for (train, test) in kfold(data, k, split, seed)? {
        let model = params.fit(&data.select(&train))?;
        let test_set = data.select(&test);
        let pred = model.predict(&test_set.x)?;
        if let Some(m) = Metrics::compute(&pred, &test_set.y) {
            fold_mape.push(m.mape);
        }
        for (&i, p) in test.iter().zip(pred) {
            predictions[i] = p;
        }
    }
    let pooled = Metrics::compute(&predictions, &data.y)
        .ok_or_else(|| Error::InvalidData("no held-out predictions".into()))?;
    Ok(CvReport {
        model: params.name().to_string(),
        k,
        split,
        pooled,
        fold_mape,
        predictions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::split::tests::data;

    #[test]
    fn cross_validated_ridge_on_a_power_law_is_nearly_exact() {
        let d = data(50, 50);
        let params = ModelParams::new(crate::ridge::RidgeParams {
            lambda: 0.0,
            degree: 1,
        });
        let report = cross_validate(&params, &d, 5, Split::Random, 0).unwrap();
        assert!(report.pooled.mape < 1e-6, "{:?}", report.pooled);
        assert_eq!(report.fold_mape.len(), 5);
    }
}
