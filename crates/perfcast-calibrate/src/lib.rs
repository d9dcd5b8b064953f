//! perfcast-calibrate: a written bundle set against measurements and put to work beyond single
//! queries. [`calibrate`] fits the network host-cost terms ([`compose`]) to measured networks and
//! stores them in the bundle (`perfcast calibrate`), and sets measured runs beside predictions
//! (`perfcast eval networks`); [`score`] scores a bundle's answers on any device's measured rows
//! (`perfcast eval bundle`); [`step_map`] carries a step timed on one GPU to others
//! (`perfcast map --measured-ms`); [`overhead`] turns layer timings measured through a
//! framework into kernel rows (`perfcast datasets strip-overhead`); [`layer_costs`] turns a
//! bundle's per-layer predictions into perfcast-scale's compute costs (`scale predict`,
//! `plan`); [`bench`] times the predictor (`perfcast bundle bench`).
//!
//! It sits above perfcast-predict (which loads bundles and answers queries) and beside
//! perfcast-select (which trains and writes bundles): it reads bundles and never fits module
//! models; of perfcast-models it uses only the splitter (`split`), so that calibration's
//! leave-one-network-out folds are the same code every model is validated with.
//!
//! ```no_run
//! use perfcast_calibrate::calibrate::{calibrate, labelled};
//! use perfcast_calibrate::{Bundle, Predictor};
//!
//! let predictor = Predictor::new(Bundle::load("checkpoints/local".as_ref())?);
//! let runs = labelled(perfcast_data::networks::read_networks("runs.jsonl".as_ref())?);
//! let costs = calibrate(&predictor, &runs, None)?;
//! println!("{} networks", costs.networks.len());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod bench;
pub mod calibrate;
pub mod compose;
mod error;
pub mod layer_costs;
pub mod overhead;
pub mod score;
pub mod step_map;

pub use compose::{Composed, HostCosts, PhaseCosts, RunShape};
pub use error::{Error, Result};
pub use perfcast_predict::bundle::{Bundle, Manifest};
pub use perfcast_predict::predictor::{self, NetworkPrediction, Predictor};
pub use score::{
    DeviceScores, KindScore, ScoredRow, score_datasets, score_records, score_records_with_rows,
};
