//! perfcast-select: the application over the models. The train -> cross-validate -> select ->
//! bundle pipeline ([`pipeline`]), host-cost calibration and networks measured against
//! predictions ([`calibrate`]), a bundle's layer costs for perfcast-scale ([`layer_costs`]);
//! MEDN's time- and space-efficient auto-selection and writing checkpoint bundles.
//!
//! [`select`] ranks each module kind's trained candidates by cross-validated accuracy under
//! prediction-time and size budgets (or picks one family for every kind, for comparison) and
//! reports the Pareto front; [`bundle`] writes `checkpoints/<name>/` (manifest plus the chosen
//! models) atomically; [`compose`] fits the network host-cost terms `perfcast calibrate` stores;
//! [`score`] scores a bundle's answers on measured rows. Loading a bundle and answering queries
//! is perfcast-predict's (the light predictor, without burn or polars); its [`Bundle`],
//! [`Predictor`] and their types are re-exported here.
//!
//! ```no_run
//! use perfcast_core::{Context, Phase, zoo};
//! use perfcast_select::{Bundle, Predictor};
//!
//! let predictor = Predictor::new(Bundle::load("checkpoints/local".as_ref())?);
//! let net = zoo::build("resnet18", None)?;
//! let context = Context { batch: 8, phase: Phase::Inference, threads: 1, utilisation: 0.0 };
//! let p = predictor.predict_network(&net, &context)?;
//! println!("{} ms", p.total_ms);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod active;
pub mod bench;
pub mod blend;
pub mod bundle;
pub mod calibrate;
pub mod compose;
mod error;
pub mod layer_costs;
pub mod pipeline;
pub mod score;
pub mod select;
pub mod step_map;
#[doc(hidden)]
pub mod testing;

pub use bundle::{Bundle, Manifest};
pub use compose::{Composed, HostCosts, PhaseCosts, RunShape};
pub use error::{Error, Result};
pub use perfcast_predict::predictor::{
    self, ModulePrediction, NetworkPrediction, Predictor, PreparedNetwork, ZERO_COST_MODEL,
};
pub use score::{
    DeviceScores, KindScore, ScoredRow, score_datasets, score_records, score_records_with_rows,
};
pub use select::{Budget, Candidate, Selection};

#[cfg(test)]
mod predictor_tests;
#[cfg(test)]
mod tests;
