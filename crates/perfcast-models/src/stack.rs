//! `ridge-trees`: gradient-boosted trees fitted on what a degree-2 ridge regression misses,
//! both reading the row plus a few conv2d features of the call the CPU backend makes.
//!
//! Ridge in log space captures the smooth power-law scaling of latency with the work and the
//! shapes; the trees then fit the steps a smooth model cannot (dispatch thresholds, padding of
//! SIMD tiles). `trees` alone boosts from a degree-1 ridge, which leaves the curvature to the
//! trees; the degree-2 base and the call features are what make it beat both on CPU conv2d
//! (docs/accuracy.md#cpu-conv2d-ridge-trees).
//!
//! The conv2d features describe the GEMM burn-flex actually calls, which the row's whole-layer
//! GEMM (`gemm_m` = batch x positions x groups) hides: a 1x1 conv is one GEMM per image and
//! group on the NCHW input (`M = c_out/g`, `N = positions`, `K = c_in/g`); the im2col path
//! converts the input to NHWC, then per image, group and 512-position tile unfolds a column
//! buffer and calls a GEMM with `N <= 512`. The `gemm` crate switches kernels on these
//! per-call shapes (a horizontal kernel for `M x N <= 256`, GEMV for `M = 1`, GEVV for
//! `K <= 2`) and pads `M` and `N` to its register tiles. They are computed from the row's own
//! configuration columns inside the model, so the feature schema (and its hash) is unchanged.
//!
//! burn-flex runs four conv2d algorithms (im2col + GEMM, the 1x1 GEMM, depthwise and
//! small-channel direct loops) whose costs scale differently, and one quadratic in the log
//! features bends to serve them all: a second degree-2 ridge per algorithm fits what the
//! shared one misses on that algorithm's rows ([`RidgeTreesParams::path_lambda`]), and the
//! trees boost from the product.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::features::TrainSet;
use crate::matrix::Matrix;
use crate::regressor::{Fit, Regressor};
use crate::ridge::RidgeParams;
use crate::trees::{FittedTrees, TreeParams};
use perfcast_predict::residual::StackWith;
pub use perfcast_predict::stack::{
    Bagged, CONV_CALL, CallColumns, FittedRidgeTrees, MAX_BAGS, MAX_EXTENDED, PATHS,
    PathCorrection, extend_into, extend_rows, extended_schema, path_of,
};

const MODEL: &str = "ridge-trees";

/// Hyper-parameters of [`FittedRidgeTrees`]: the ridge base, then the trees on its residuals
/// (the fields not listed take [`TreeParams`]' defaults).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RidgeTreesParams {
    /// Ridge L2 penalty on the standardised coefficients; default 1e-4.
    pub lambda: f64,
    /// Ridge polynomial degree, 1 or 2; default 2.
    pub degree: u8,
    /// Add the conv2d call features ([`CONV_CALL`]); default true.
    pub call_features: bool,
    /// Most trees; early stopping may keep fewer. Default 600.
    pub n_trees: usize,
    /// Shrinkage of each tree, in (0, 1]. Default 0.05.
    pub learning_rate: f64,
    /// Most leaves per tree, 2 to 4096. Default 31.
    pub max_leaves: usize,
    /// Most levels below the root, at least 1. Default 8.
    pub max_depth: usize,
    /// Fewest training rows in a leaf, at least 1. Default 5.
    pub min_samples_leaf: usize,
    /// Seed of the trees' sampling. Default 0.
    pub seed: u64,
    /// L2 penalty on leaf values, in rows. Default 1.
    pub l2: f64,
    /// Share of the training rows each tree sees, in (0, 1]. Default 0.8.
    pub subsample: f64,
    /// Share of the features each tree may split on, in (0, 1]. Default 1.
    pub colsample: f64,
    /// Share of configuration groups held out for early stopping, in [0, 0.5]. Default 0.1.
    pub validation_fraction: f64,
    /// Trees without a better held-out error before boosting stops. Default 30.
    pub early_stopping_rounds: usize,
    /// Tree ensembles fitted under seeds `seed..seed + bags` and averaged in log space,
    /// 1 to 16. Default 1.
    pub bags: usize,
    /// Largest `|ln(measured / predicted)|` a row keeps when refitting: rows further off are
    /// pulled to this distance (Huber-style pseudo-targets), 0 turns it off. Default 0.1, the
    /// best of the values cross-validated (docs/accuracy.md#cpu-conv2d-ridge-trees).
    pub clip_log: f64,
    /// Refits on the clipped targets (ridge and trees each), when `clip_log` > 0. Default 2.
    pub robust_rounds: usize,
    /// L2 penalty of one more degree-2 ridge per conv2d algorithm (im2col, 1x1, depthwise,
    /// small-channel), fitted on what the shared ridge misses on that algorithm's rows;
    /// 0 turns them off. Default 0.1, the best of the values cross-validated
    /// (docs/accuracy.md#cpu-conv2d-ridge-trees).
    pub path_lambda: f64,
}

impl Default for RidgeTreesParams {
    fn default() -> Self {
        RidgeTreesParams {
            lambda: 1e-4,
            degree: 2,
            call_features: true,
            n_trees: 600,
            learning_rate: 0.05,
            max_leaves: 31,
            max_depth: 8,
            min_samples_leaf: 5,
            seed: 0,
            l2: 1.0,
            subsample: 0.8,
            colsample: 1.0,
            validation_fraction: 0.1,
            early_stopping_rounds: 30,
            bags: 1,
            clip_log: 0.1,
            robust_rounds: 2,
            path_lambda: 0.1,
        }
    }
}

impl RidgeTreesParams {
    fn ridge(&self) -> RidgeParams {
        RidgeParams {
            lambda: self.lambda,
            degree: self.degree,
        }
    }

    fn trees(&self) -> TreeParams {
        TreeParams {
            n_trees: self.n_trees,
            learning_rate: self.learning_rate,
            max_leaves: self.max_leaves,
            max_depth: self.max_depth,
            min_samples_leaf: self.min_samples_leaf,
            seed: self.seed,
            l2: self.l2,
            subsample: self.subsample,
            colsample: self.colsample,
            validation_fraction: self.validation_fraction,
            early_stopping_rounds: self.early_stopping_rounds,
            baseline: false,
            ..TreeParams::default()
        }
    }
}

/// Renames the inner families' parameter errors to this family.
fn renamed(e: Error) -> Error {
    match e {
        Error::InvalidParams { message, .. } => Error::InvalidParams {
            model: MODEL,
            message,
        },
        other => other,
    }
}

impl crate::params::FamilyParams for RidgeTreesParams {
    fn name(&self) -> &'static str {
        MODEL
    }
}

impl Fit for RidgeTreesParams {
    type Fitted = FittedRidgeTrees;

    fn validate(&self) -> Result<()> {
        self.ridge().validate().map_err(renamed)?;
        self.trees().validate().map_err(renamed)?;
        let invalid = |message: String| Error::InvalidParams {
            model: MODEL,
            message,
        };
        if !(1..=MAX_BAGS).contains(&self.bags) {
            return Err(invalid(format!(
                "bags must be in 1..={MAX_BAGS}, got {}",
                self.bags
            )));
        }
        if !(self.clip_log >= 0.0 && self.clip_log.is_finite()) {
            return Err(invalid(format!(
                "clip_log must be finite and non-negative, got {}",
                self.clip_log
            )));
        }
        if !(self.path_lambda >= 0.0 && self.path_lambda.is_finite()) {
            return Err(invalid(format!(
                "path_lambda must be finite and non-negative, got {}",
                self.path_lambda
            )));
        }
        if self.robust_rounds > MAX_ROBUST_ROUNDS {
            return Err(invalid(format!(
                "robust_rounds must be at most {MAX_ROBUST_ROUNDS}, got {}",
                self.robust_rounds
            )));
        }
        Ok(())
    }

    fn fit(&self, data: &TrainSet) -> Result<FittedRidgeTrees> {
        self.validate()?;
        crate::regressor::check_train_set(data, 2)?;
        let calls = if self.call_features {
            CallColumns::of(&data.schema)
        } else {
            None
        };
        let schema = extended_schema(&data.schema, calls.as_ref());
        let width = schema.len();
        if width > MAX_EXTENDED {
            return Err(Error::InvalidData(format!(
                "{width} features with the call features, `{MODEL}` handles at most {MAX_EXTENDED}"
            )));
        }
        let mut extended = TrainSet {
            schema,
            x: extend_rows(&data.x, calls.as_ref(), width),
            y: data.y.clone(),
            groups: data.groups.clone(),
        };
        let rounds = if self.clip_log > 0.0 {
            self.robust_rounds
        } else {
            0
        };
        let mut ridge = self.ridge().fit(&extended)?;
        for _ in 0..rounds {
            let pred = ridge.predict(&extended.x)?;
            extended.y = clipped(&data.y, &pred, self.clip_log);
            ridge = self.ridge().fit(&extended)?;
        }
        let paths = match &calls {
            Some(c) if self.path_lambda > 0.0 => fit_paths(&extended, &ridge, c, self.path_lambda)?,
            _ => Vec::new(),
        };
        // The trees boost from the shared ridge on targets divided by the path correction,
        // so that ridge, correction and trees multiply back to the latency.
        let on_paths = StackWith::on(PathCorrection {
            paths: &paths,
            calls: calls.as_ref(),
        });
        let measured = on_paths.targets(extended.x.iter_rows(), &data.y)?;
        extended.y = on_paths.targets(extended.x.iter_rows(), &extended.y)?;
        let fit_bags = |set: &TrainSet| -> Result<Vec<FittedTrees>> {
            (0..self.bags as u64)
                .map(|b| {
                    TreeParams {
                        seed: self.seed.wrapping_add(b),
                        ..self.trees()
                    }
                    .fit_on_baseline(set, ridge.clone())
                })
                .collect()
        };
        let mut bags = fit_bags(&extended)?;
        for _ in 0..rounds {
            let pred = bag_mean(&bags, &extended.x)?;
            extended.y = clipped(&measured, &pred, self.clip_log);
            bags = fit_bags(&extended)?;
        }
        let trees = bags.remove(0);
        Ok(FittedRidgeTrees::from_parts(
            data.schema.clone(),
            calls,
            trees,
            bags,
            paths,
        ))
    }
}

/// Fewest rows of one algorithm for its own correction.
const MIN_PATH_ROWS: usize = 40;

/// One ridge per algorithm with enough rows, fitted on the ratio of `set`'s targets to the
/// shared `ridge`. The shared quadratic must serve four algorithms whose costs scale
/// differently; each correction only sees its own rows.
fn fit_paths(
    set: &TrainSet,
    ridge: &crate::ridge::FittedRidge,
    calls: &CallColumns,
    lambda: f64,
) -> Result<Vec<Option<crate::ridge::FittedRidge>>> {
    let path: Vec<usize> = set.x.iter_rows().map(|r| path_of(calls, r)).collect();
    (0..PATHS)
        .map(|k| {
            let rows: Vec<usize> = (0..set.len()).filter(|&i| path[i] == k).collect();
            if rows.len() < MIN_PATH_ROWS {
                return Ok(None);
            }
            let mut sub = set.select(&rows);
            sub.y = StackWith::on(ridge).targets(sub.x.iter_rows(), &sub.y)?;
            RidgeParams { lambda, degree: 2 }.fit(&sub).map(Some)
        })
        .collect()
}

/// Most robust refits.
const MAX_ROBUST_ROUNDS: usize = 10;

/// Targets `y` pulled to within `clip` of `pred` in log space: one step of Huber's
/// pseudo-observation algorithm, so a timing taken while the machine was slow weighs on the
/// fit like a row `clip` off, not like a real step in the latency.
fn clipped(y: &[f64], pred: &[f64], clip: f64) -> Vec<f64> {
    y.iter()
        .zip(pred)
        .map(|(&y, &p)| p * (y / p).ln().clamp(-clip, clip).exp())
        .collect()
}

/// Geometric mean of the ensembles' predictions of each row of `x`.
fn bag_mean(bags: &[FittedTrees], x: &Matrix) -> Result<Vec<f64>> {
    let mut log_sum = vec![0.0; x.rows()];
    for b in bags {
        for (s, p) in log_sum.iter_mut().zip(b.predict(x)?) {
            *s += p.ln();
        }
    }
    let n = bags.len() as f64;
    Ok(log_sum.into_iter().map(|s| (s / n).exp()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::FeatureSchema;
    use crate::regressor::{Regressor, SavedModel};
    use perfcast_core::testing::conv;
    use perfcast_core::{Context, ModuleKind, Phase};

    /// Conv2d rows whose latency is a known function with a step no power law has: calls of
    /// the im2col path cost a fixed 2 us each on top of the work.
    fn conv_set(n: usize) -> TrainSet {
        let device = perfcast_core::testing::cpu_device();
        let schema = FeatureSchema::for_kind(ModuleKind::Conv2d);
        let calls = CallColumns::of(&schema).unwrap();
        let mut x = Matrix::with_cols(schema.len());
        let mut y = Vec::new();
        for i in 0..n {
            let k = [1, 3, 5][i % 3];
            let spec = conv(
                1 + (i * 7) % 60,
                1 + (i * 13) % 70,
                4 + (i * 11) % 60,
                k,
                1 + (i / 3) % 2,
                1,
            );
            let ctx = Context {
                batch: 1 << (i % 4),
                phase: if i % 5 == 0 {
                    Phase::Training
                } else {
                    Phase::Inference
                },
                threads: 1,
                utilisation: 0.0,
            };
            let row = crate::features::row(&spec, &ctx, &device);
            let mut call = vec![0.0; CONV_CALL.len()];
            calls.fill(&row, &mut call);
            let flops = row[schema.index("work_flops").unwrap()];
            y.push(1e-3 + flops / 5e7 + 2e-3 * call[0]);
            x.push_row(&row);
        }
        TrainSet {
            schema,
            x,
            y,
            groups: (0..n as u64).collect(),
        }
    }

    #[test]
    fn fit_recovers_a_per_call_cost_the_row_alone_hides() {
        let train = conv_set(900);
        let test = conv_set(1200);
        let test = test.select(&(900..1200).collect::<Vec<_>>());
        let m = RidgeTreesParams::default().fit(&train).unwrap();
        let pred = m.predict(&test.x).unwrap();
        let mape = pred
            .iter()
            .zip(&test.y)
            .map(|(p, y)| (p / y - 1.0).abs())
            .sum::<f64>()
            / test.len() as f64;
        assert!(mape < 0.05, "held-out MAPE {mape}");
        assert!(m.trees().n_trees() >= 1);
    }

    /// Rows of two algorithms whose costs scale with different powers of the work: the
    /// path corrections fit each, where one shared quadratic in the log features bends to
    /// serve both.
    #[test]
    fn path_corrections_fit_algorithms_that_scale_apart() {
        let mut data = conv_set(1200);
        let calls = CallColumns::of(&data.schema).unwrap();
        let flops = data.schema.index("work_flops").unwrap();
        for (y, r) in data.y.iter_mut().zip(data.x.iter_rows()) {
            if path_of(&calls, r) == 1 {
                *y = 2e-3 * (r[flops] / 1e6).powf(0.6);
            }
        }
        let (train, test) = (
            data.select(&(0..900).collect::<Vec<_>>()),
            data.select(&(900..1200).collect::<Vec<_>>()),
        );
        let mape = |path_lambda: f64| {
            let m = RidgeTreesParams {
                path_lambda,
                ..RidgeTreesParams::default()
            }
            .fit(&train)
            .unwrap();
            let pred = m.predict(&test.x).unwrap();
            let paths = m.paths().iter().flatten().count();
            let e = pred
                .iter()
                .zip(&test.y)
                .map(|(p, y)| (p / y - 1.0).abs())
                .sum::<f64>()
                / test.len() as f64;
            (e, paths)
        };
        let (with, paths) = mape(0.1);
        let (without, none) = mape(0.0);
        assert!(paths >= 2, "{paths} path corrections");
        assert_eq!(none, 0);
        assert!(with < 0.05, "held-out MAPE with the corrections {with}");
        assert!(with <= without, "with {with}, without {without}");
    }

    #[test]
    fn save_load_round_trip_is_identical() {
        let train = conv_set(300);
        for call_features in [true, false] {
            let m = RidgeTreesParams {
                call_features,
                n_trees: 40,
                ..RidgeTreesParams::default()
            }
            .fit(&train)
            .unwrap();
            let json = serde_json::to_string(&m.to_saved()).unwrap();
            assert!(json.contains("\"model\":\"ridge-trees\""));
            let back = serde_json::from_str::<SavedModel>(&json)
                .unwrap()
                .into_regressor();
            assert_eq!(back.name(), "ridge-trees");
            for r in train.x.iter_rows() {
                assert_eq!(back.predict_row(r).unwrap(), m.predict_row(r).unwrap());
            }
            assert_eq!(back.size_bytes(), m.size_bytes());
        }
        let m = RidgeTreesParams {
            n_trees: 5,
            ..RidgeTreesParams::default()
        }
        .fit(&train)
        .unwrap();
        assert!(matches!(
            m.predict_row(&[1.0, 2.0]),
            Err(perfcast_predict::Error::FeatureWidth { got: 2, .. })
        ));
        // A file whose inner model reads another width is refused.
        let mut value = serde_json::to_value(m.to_saved()).unwrap();
        value["call_features"] = serde_json::Value::Bool(false);
        let err = serde_json::from_value::<SavedModel>(value)
            .unwrap_err()
            .to_string();
        assert!(err.contains("inner model reads"), "{err}");
    }

    #[test]
    fn clipping_pulls_only_far_targets() {
        let got = clipped(&[1.0, 2.0, 0.5, 1.05], &[1.0, 1.0, 1.0, 1.0], 0.1);
        assert_eq!(got[0], 1.0);
        assert!((got[1] - 0.1f64.exp()).abs() < 1e-12);
        assert!((got[2] - (-0.1f64).exp()).abs() < 1e-12);
        assert_eq!(got[3], 1.05);
    }

    /// A few timings taken in a slow phase of the machine (here 3x the true latency)
    /// must not drag the fit of their neighbours; the clipped refits keep held-out rows close.
    #[test]
    fn clipped_refits_resist_slow_outliers() {
        let clean = conv_set(1200);
        let mut train = clean.select(&(0..900).collect::<Vec<_>>());
        for i in (0..train.len()).step_by(7) {
            train.y[i] *= 3.0;
        }
        let test = clean.select(&(900..1200).collect::<Vec<_>>());
        let mape = |clip_log: f64| {
            let m = RidgeTreesParams {
                clip_log,
                ..RidgeTreesParams::default()
            }
            .fit(&train)
            .unwrap();
            let pred = m.predict(&test.x).unwrap();
            pred.iter()
                .zip(&test.y)
                .map(|(p, y)| (p / y - 1.0).abs())
                .sum::<f64>()
                / test.len() as f64
        };
        let (plain, robust) = (mape(0.0), mape(0.1));
        assert!(robust < 0.85 * plain, "robust {robust}, plain {plain}");
    }

    #[test]
    fn bags_average_in_log_space_and_round_trip() {
        let train = conv_set(300);
        let fit = |bags: usize, seed: u64| {
            RidgeTreesParams {
                bags,
                seed,
                n_trees: 30,
                // Without the clipped refits, which read the average of all bags.
                clip_log: 0.0,
                ..RidgeTreesParams::default()
            }
            .fit(&train)
            .unwrap()
        };
        let (a, b, both) = (fit(1, 0), fit(1, 1), fit(2, 0));
        assert_eq!(both.bags().len(), 1);
        for r in train.x.iter_rows().take(50) {
            let want = (a.predict_row(r).unwrap() * b.predict_row(r).unwrap()).sqrt();
            let got = both.predict_row(r).unwrap();
            assert!((got / want - 1.0).abs() < 1e-12, "{got} vs {want}");
        }
        let json = serde_json::to_string(&both.to_saved()).unwrap();
        let back = serde_json::from_str::<SavedModel>(&json)
            .unwrap()
            .into_regressor();
        for r in train.x.iter_rows() {
            assert_eq!(back.predict_row(r).unwrap(), both.predict_row(r).unwrap());
        }
        assert_eq!(back.size_bytes(), both.size_bytes());
    }

    #[test]
    fn bad_params_are_named() {
        let cases: [(RidgeTreesParams, &str); 7] = [
            (
                RidgeTreesParams {
                    bags: 0,
                    ..Default::default()
                },
                "bags must be in 1..=16, got 0",
            ),
            (
                RidgeTreesParams {
                    clip_log: f64::NAN,
                    ..Default::default()
                },
                "clip_log must be finite and non-negative, got NaN",
            ),
            (
                RidgeTreesParams {
                    robust_rounds: 11,
                    ..Default::default()
                },
                "robust_rounds must be at most 10, got 11",
            ),
            (
                RidgeTreesParams {
                    lambda: -1.0,
                    ..Default::default()
                },
                "lambda must be non-negative, got -1",
            ),
            (
                RidgeTreesParams {
                    degree: 3,
                    ..Default::default()
                },
                "degree must be 1 or 2, got 3",
            ),
            (
                RidgeTreesParams {
                    learning_rate: 0.0,
                    ..Default::default()
                },
                "learning_rate must be in (0, 1], got 0",
            ),
            (
                RidgeTreesParams {
                    max_leaves: 1,
                    ..Default::default()
                },
                "max_leaves must be in 2..=4096, got 1",
            ),
        ];
        for (p, want) in cases {
            let err = p.validate().unwrap_err();
            assert!(
                matches!(
                    &err,
                    Error::InvalidParams {
                        model: "ridge-trees",
                        ..
                    }
                ),
                "{err:?}"
            );
            assert!(err.to_string().contains(want), "{err}");
        }
    }
}
