//! perfcast-models: latency regressors behind one interface, and the evaluation that judges them.
//!
//! Every model implements [`Regressor`] (fit from a [`TrainSet`], predict one row or a batch,
//! report its size, save and load) and predicts milliseconds from the same raw feature rows
//! ([`features`]). [`eval`] scores any `&dyn Regressor` the same way: k-fold cross-validation,
//! held-out splits (random or by configuration group), accuracy metrics and measured prediction
//! time.
//!
//! Models: [`ridge`] (ridge regression on log features, optional squares and pairwise products),
//! [`knn`] (k nearest neighbours on standardised log features, k-d tree index), [`trees`]
//! (gradient-boosted regression trees), [`stack`] (`ridge-trees`: trees on a degree-2 ridge's
//! residuals, with conv2d call features), [`roofline`] (max of compute and memory time with
//! efficiencies fitted per kind), [`medn`] (the multi-task encoder-decoder network in burn, and
//! the single-task MLP baseline, with a fast `f32` inference path).

pub mod anchor;
pub mod device_features;
pub mod devices_eval;
mod error;
pub mod eval;
pub mod features;
pub mod gpu_util;
pub mod knn;
mod matrix;
pub mod medn;
pub mod regressor;
pub mod ridge;
pub mod roofline;
pub mod source;
pub mod stack;
pub mod trees;

pub use error::{Error, Result};
pub use features::{FeatureSchema, TrainSet};
pub use matrix::Matrix;
pub use regressor::{Fit, Regressor, SavedModel};
