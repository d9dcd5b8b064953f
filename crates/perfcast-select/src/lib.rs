//! perfcast-select: training and auto-selection. The train -> cross-validate -> select ->
//! bundle pipeline ([`pipeline`]) fits every requested family per module kind, scores them on
//! the same folds, adds the best blend of two ([`blend`]), ranks the candidates under
//! prediction-time and size budgets and reports the Pareto front ([`select`]), and writes
//! `checkpoints/<name>/` (manifest plus the chosen models) atomically ([`bundle`]); [`active`]
//! chooses the configurations to measure next where a bootstrap ensemble disagrees most.
//!
//! Loading a bundle and answering queries is perfcast-predict's (the light predictor, without
//! burn or polars); its [`Bundle`], [`Predictor`] and their types are re-exported here.
//! What is done with a written bundle (host-cost calibration, scoring on measured rows, layer
//! costs for perfcast-scale) is perfcast-calibrate's; multi-step jobs such as the quickstart
//! are perfcast-workflow's.
//!
//! ```no_run
//! use perfcast_select::pipeline::{TrainPlan, train_and_select};
//!
//! let plan = TrainPlan {
//!     bundle: Some("local".into()),
//!     ..TrainPlan::new(vec!["datasets/my-cpu".into()], "runs/train".into())
//! };
//! let trained = train_and_select(&plan, std::sync::Arc::new(perfcast_core::progress::Silent))?;
//! let report = trained.write(Vec::new())?;
//! println!("{} kinds", report.kinds.len());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod active;
pub mod blend;
pub mod bundle;
pub mod distill;
mod error;
pub mod pipeline;
pub mod select;
#[doc(hidden)]
pub mod testing;

pub use bundle::{Bundle, Manifest};
pub use error::{Error, Result};
pub use perfcast_predict::predictor::{
    self, ModulePrediction, NetworkPrediction, Predictor, PreparedNetwork, ZERO_COST_MODEL,
};
pub use select::{Budget, Candidate, Selection};

#[cfg(test)]
mod predictor_tests;
#[cfg(test)]
mod tests;
