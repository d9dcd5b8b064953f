//! perfcast-models: fitting latency regressors behind one interface, and the evaluation that
//! judges them.
//!
//! Every model implements [`Regressor`] (predict one row or a batch, report its size, save as a
//! [`SavedModel`]) and predicts milliseconds from the same raw feature rows ([`features`]); the
//! fitted models, their saved forms and prediction paths are the light predictor's
//! (perfcast-predict, no burn), and this crate fits them: hyper-parameters validated before
//! fitting and the [`Fit`] trait, one row per family in the [`registry`] (name, parameters,
//! fit, saved form, cross-device form; everything that picks a family by name reads it, and
//! [`registry::register`] adds one from outside the crate). [`eval`] scores any
//! `&dyn Regressor` the same way: k-fold cross-validation, accuracy metrics and measured
//! prediction time, on the splits of [`split`] (random, by configuration group, k-fold,
//! early-stopping validation, leave-one-device-out), which every model and command splits
//! data with.
//!
//! Models: [`ridge`] (ridge regression on log features, optional squares and pairwise products),
//! [`knn`] (k nearest neighbours on standardised log features, k-d tree index), [`trees`]
//! (gradient-boosted regression trees), [`stack`] (`ridge-trees`: trees on a degree-2 ridge's
//! residuals, with conv2d call features), [`roofline`] (max of compute and memory time with
//! efficiencies fitted per kind), [`medn`] (the multi-task encoder-decoder network in burn, and
//! the single-task MLP baseline), the cross-device wrapper [`device_features`] and PROFET-style
//! [`anchor`] mapping.

pub mod anchor;
pub mod device_features;
pub mod devices_eval;
mod error;
pub mod eval;
pub mod features;
pub mod knn;
pub mod medn;
mod params;
pub mod registry;
pub mod regressor;
pub mod ridge;
pub mod roofline;
pub mod source;
pub mod split;
pub mod stack;
pub mod trees;

pub use error::{Error, Result};
pub use features::{FeatureSchema, TrainSet};
pub use params::{FamilyParams, ModelParams};
pub use perfcast_predict::matrix::Matrix;
pub use perfcast_predict::{gpu_util, matrix};
pub use regressor::{Fit, Regressor, SavedModel};
