//! perfcast-profile: measures DNN modules on burn backends and stores them as datasets.
//!
//! The pieces, in the order a profile run uses them: [`Sweep`] draws configurations (defaults per
//! module kind, a TOML file to override them, Latin-hypercube sampling under a seed);
//! [`run::run`] measures each on a [`Backend`] with the [`timer`] harness (warm-up, adaptive
//! repetitions, robust statistics) inside a rayon pool of a fixed thread count ([`pool`]), with
//! an optional background [`load`]; rows go to a perfcast-data dataset as they finish.
//! [`probe`] measures the local CPU's peak GFLOP/s and bandwidth for its [`perfcast_core::DeviceSpec`].
//!
//! ```no_run
//! use perfcast_core::{Context, ModuleSpec, Phase};
//! use perfcast_profile::{Backend, ops, timer};
//!
//! let spec = ModuleSpec::from_json(r#"{"kind":"linear","in_features":512,"out_features":512}"#)?;
//! let ctx = Context { batch: 8, phase: Phase::Inference, threads: 1, utilisation: 0.0 };
//! let device = Backend::Flex.device()?;
//! let mut call = ops::prepare(&spec, &ctx, &device).map_err(|e| anyhow::anyhow!(e))?;
//! let timing = timer::measure(&mut call, &timer::TimingConfig::default()).map_err(|e| anyhow::anyhow!(e))?;
//! println!("{:.3} ms", timing.median_ms);
//! # Ok::<(), anyhow::Error>(())
//! ```

mod backend;
pub mod backends;
pub mod canary;
mod error;
mod heap;
pub mod load;
pub mod network;
pub mod network_runs;
pub mod ops;
pub mod overrides;
pub mod pool;
pub mod probe;
pub mod remeasure;
pub mod run;
pub mod sweep;
pub mod timer;

pub use backend::Backend;
pub use error::{Error, Result};
pub use sweep::Sweep;
