//! perfcast-select: the application over the models. The train -> cross-validate -> select ->
//! bundle pipeline ([`pipeline`]), host-cost calibration and networks measured against
//! predictions ([`calibrate`]), a bundle's layer costs for perfcast-scale ([`layer_costs`]);
//! MEDN's time- and space-efficient auto-selection, checkpoint bundles, and the predictor that
//! answers queries from them.
//!
//! [`select`] ranks each module kind's trained candidates by cross-validated accuracy under
//! prediction-time and size budgets (or picks one family for every kind, for comparison) and
//! reports the Pareto front; [`bundle`] writes and loads `checkpoints/<name>/` (manifest plus
//! the chosen models) atomically and refuses corrupt or mismatched ones; [`predictor`] predicts
//! modules and whole networks from a bundle.
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

pub mod bench;
pub mod bundle;
pub mod calibrate;
pub mod compose;
mod error;
pub mod layer_costs;
pub mod pipeline;
pub mod predictor;
pub mod score;
pub mod select;

pub use bundle::{Bundle, Manifest};
pub use compose::{Composed, HostCosts, PhaseCosts, RunShape};
pub use error::{Error, Result};
pub use predictor::{
    ModulePrediction, NetworkPrediction, Predictor, PreparedNetwork, ZERO_COST_MODEL,
};
pub use score::{DeviceScores, KindScore, score_datasets, score_records};
pub use select::{Budget, Candidate, Selection};

#[cfg(test)]
mod tests;
