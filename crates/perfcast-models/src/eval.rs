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
use crate::knn::KnnParams;
use crate::medn::MednParams;
use crate::regressor::{Fit, Regressor};
use crate::ridge::RidgeParams;
use crate::roofline::RooflineParams;
use crate::split::{Split, kfold};
use crate::trees::TreeParams;

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

/// A model family with its hyper-parameters: fits into a `Box<dyn Regressor>`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "model", rename_all = "lowercase")]
pub enum ModelParams {
    /// Ridge regression.
    Ridge(RidgeParams),
    /// k nearest neighbours.
    Knn(KnnParams),
    /// Gradient-boosted trees.
    Trees(TreeParams),
    /// Gradient-boosted trees on a degree-2 ridge's residuals.
    #[serde(rename = "ridge-trees")]
    RidgeTrees(crate::stack::RidgeTreesParams),
    /// Roofline.
    Roofline(RooflineParams),
    /// Multi-task encoder-decoder network (or, with `multi_task = false`, the MLP baseline).
    Medn(MednParams),
    /// Any other family fitted across devices (`trees-xdev`, ...): see [`crate::device_features`].
    #[serde(rename = "xdev")]
    CrossDevice(Box<crate::device_features::CrossDeviceParams>),
}

impl ModelParams {
    /// Defaults of a family by name.
    pub fn by_name(name: &str) -> Result<ModelParams> {
        match name.trim() {
            "ridge" => Ok(ModelParams::Ridge(RidgeParams::default())),
            "knn" => Ok(ModelParams::Knn(KnnParams::default())),
            "trees" | "gbdt" => Ok(ModelParams::Trees(TreeParams::default())),
            "ridge-trees" => Ok(ModelParams::RidgeTrees(Default::default())),
            "roofline" => Ok(ModelParams::Roofline(RooflineParams::default())),
            "medn" => Ok(ModelParams::Medn(MednParams::default())),
            "mlp" => Ok(ModelParams::Medn(MednParams::mlp())),
            crate::device_features::UTIL => Ok(ModelParams::CrossDevice(Box::new(
                crate::device_features::CrossDeviceParams::utilisation(&[]),
            ))),
            other if other.ends_with("-xdev") => {
                Ok(crate::device_features::CrossDeviceParams::wrap(
                    ModelParams::by_name(other.trim_end_matches("-xdev"))?,
                ))
            }
            other => Err(Error::UnknownModel(other.to_string())),
        }
    }

    /// Family name.
    pub fn name(&self) -> &'static str {
        match self {
            ModelParams::Ridge(_) => "ridge",
            ModelParams::Knn(_) => "knn",
            ModelParams::Trees(_) => "trees",
            ModelParams::RidgeTrees(_) => "ridge-trees",
            ModelParams::Roofline(_) => "roofline",
            ModelParams::Medn(p) if !p.multi_task => "mlp",
            ModelParams::Medn(_) => "medn",
            ModelParams::CrossDevice(p) => p.name(),
        }
    }

    /// Hands an observer to the families that train for long (MEDN and the MLP), which report
    /// their epochs to it (stage [`crate::medn::EPOCHS`]).
    pub fn set_observer(
        &mut self,
        observer: std::sync::Arc<dyn perfcast_core::progress::Observer>,
    ) {
        match self {
            ModelParams::Medn(p) => p.progress = crate::medn::Progress(Some(observer)),
            ModelParams::CrossDevice(p) => p.inner.set_observer(observer),
            _ => {}
        }
    }

    /// These parameters with the `model.field=value` settings addressed to this family applied
    /// (`--set trees.n_trees=600`; settings for other families are skipped, after checking
    /// that they name a family), through the serde form, so unknown fields and bad values are
    /// refused by the same checks as a config file; a value is a JSON literal (number, bool)
    /// when it parses as one, a string otherwise.
    pub fn with_sets(&self, sets: &[String]) -> Result<ModelParams> {
        let bad = |message: String| Error::InvalidParams {
            model: "--set",
            message,
        };
        let name = self.name();
        let mut value = serde_json::to_value(self).map_err(|e| bad(e.to_string()))?;
        for set in sets {
            let shape = || bad(format!("`--set {set}` must look like `model.field=value`"));
            let (key, raw) = set.split_once('=').ok_or_else(shape)?;
            let (model, field) = key.split_once('.').ok_or_else(shape)?;
            ModelParams::by_name(model)?;
            if model != name {
                continue;
            }
            value[field] = serde_json::from_str(raw)
                .unwrap_or_else(|_| serde_json::Value::String(raw.to_string()));
        }
        let updated: ModelParams = serde_json::from_value(value)
            .map_err(|e| bad(format!("invalid `--set` for `{name}`: {e}")))?;
        updated.validate()?;
        Ok(updated)
    }

    /// Checks the hyper-parameters.
    pub fn validate(&self) -> Result<()> {
        match self {
            ModelParams::Ridge(p) => p.validate(),
            ModelParams::Knn(p) => p.validate(),
            ModelParams::Trees(p) => p.validate(),
            ModelParams::RidgeTrees(p) => p.validate(),
            ModelParams::Roofline(p) => p.validate(),
            ModelParams::Medn(p) => p.validate(),
            ModelParams::CrossDevice(p) => p.validate(),
        }
    }

    /// Fits on `data`.
    pub fn fit(&self, data: &TrainSet) -> Result<Box<dyn Regressor>> {
        Ok(match self {
            ModelParams::Ridge(p) => Box::new(p.fit(data)?),
            ModelParams::Knn(p) => Box::new(p.fit(data)?),
            ModelParams::Trees(p) => Box::new(p.fit(data)?),
            ModelParams::RidgeTrees(p) => Box::new(p.fit(data)?),
            ModelParams::Roofline(p) => Box::new(p.fit(data)?),
            ModelParams::Medn(p) => Box::new(p.fit(data)?),
            ModelParams::CrossDevice(p) => Box::new(p.fit(data)?),
        })
    }
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
    use crate::features::FeatureSchema;
    use crate::matrix::Matrix;
    use perfcast_core::ModuleKind;

    fn data(n: usize, groups: u64) -> TrainSet {
        TrainSet {
            schema: FeatureSchema {
                kind: ModuleKind::Linear,
                names: vec!["a".into()],
            },
            x: Matrix::from_vec(n, 1, (0..n).map(|i| i as f64).collect()),
            y: (0..n).map(|i| 1.0 + i as f64).collect(),
            groups: (0..n as u64).map(|i| i % groups).collect(),
        }
    }

    #[test]
    fn cross_validated_ridge_on_a_power_law_is_nearly_exact() {
        let d = data(50, 50);
        let params = ModelParams::Ridge(RidgeParams {
            lambda: 0.0,
            degree: 1,
        });
        let report = cross_validate(&params, &d, 5, Split::Random, 0).unwrap();
        assert!(report.pooled.mape < 1e-6, "{:?}", report.pooled);
        assert_eq!(report.fold_mape.len(), 5);
    }
}
