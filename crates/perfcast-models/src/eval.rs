//! Evaluation shared by every model: splits, k-fold cross-validation, accuracy and cost.
//!
//! All models are judged by the same code on the same splits: the splits are [`crate::split`]'s
//! (at random or by configuration group: every row of one layer configuration on one side, so
//! a model cannot score by having seen the same layer at another batch size),
//! [`cross_validate`] fits and scores a family over its k folds, [`score`] computes
//! [`Metrics`], and [`prediction_cost`] measures prediction time and size.

use std::time::Instant;

use perfcast_core::Metrics;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::features::TrainSet;
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

/// Measures prediction time on rows of `data` (warm-up, then medians of repeated runs).
pub fn prediction_cost(model: &dyn Regressor, data: &TrainSet) -> Result<PredictionCost> {
    if data.is_empty() {
        return Err(Error::InvalidData("no rows to time predictions on".into()));
    }
    let rows = data.len();
    // One row: 31 samples of 200 predictions each, cycling through the rows.
    let mut samples = Vec::with_capacity(31);
    let mut sink = 0.0;
    for s in 0..33 {
        let t = Instant::now();
        for i in 0..200 {
            sink += model.predict_row(data.x.row((s * 200 + i) % rows))?;
        }
        if s >= 2 {
            samples.push(t.elapsed().as_secs_f64() / 200.0);
        }
    }
    samples.sort_by(f64::total_cmp);
    let one_row_us = samples[samples.len() / 2] * 1e6;
    // Batch: 10,000 rows tiled from the data, best of 3.
    let idx: Vec<usize> = (0..10_000).map(|i| i % rows).collect();
    let batch = data.x.select(&idx);
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t = Instant::now();
        let out = model.predict(&batch)?;
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
