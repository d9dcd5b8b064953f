//! perfcast-scale: training time beyond one device.
//!
//! Two models, after the two works perfcast follows here:
//!
//! - [`analytic`]: an iteration on `P` devices as computation (a bundle's per-layer
//!   prediction or a measurement, at the per-device batch) plus gradient communication under
//!   a [`Strategy`] over a [`Link`] ([`collective`]: parameter server, ring, tree and
//!   hierarchical all-reduce), overlapped with the backward pass in buckets, plus the
//!   optimiser update: time per iteration, throughput and scaling efficiency.
//! - [`expression`] and [`fit`]: a generic expression `T(p, b, n)`, a sum of named terms
//!   (intrinsic costs times extrinsic scaling factors: processors, batch size, samples), whose
//!   constants are fitted to measured runs ([`runs`]) by differential evolution ([`de`]) on a
//!   regularised relative-error cost, and judged on runs held out.
//!
//! It sits beside perfcast-select, above perfcast-core, and uses neither burn nor polars: the
//! compute time of the analytical model comes in through [`ComputeModel`], so the CLI plugs a
//! bundle's predictor in without this crate depending on it.
//!
//! ```
//! use perfcast_scale::{DataParallelModel, LayerCost, Link, Overlap, Parallelism, Result, Strategy};
//!
//! // A 100 MB model whose step takes 1 ms per sample forward and 2 ms backward.
//! let compute = |batch: usize| -> Result<Vec<LayerCost>> {
//!     Ok(vec![LayerCost {
//!         name: "all".into(),
//!         forward_s: 1e-3 * batch as f64,
//!         backward_s: 2e-3 * batch as f64,
//!         grad_bytes: 1e8,
//!     }])
//! };
//! let model = DataParallelModel {
//!     parallelism: Parallelism::Data,
//!     strategy: Strategy::Ring,
//!     link: Link::parse("nvlink")?,
//!     overlap: Overlap::None,
//!     update_s: 0.0,
//! };
//! let rows = model.scaling(&[1, 2, 4, 8], 256, &compute)?;
//! assert!(rows[3].efficiency < 1.0 && rows[3].throughput > rows[2].throughput);
//! # Ok::<(), perfcast_scale::Error>(())
//! ```

pub mod analytic;
pub mod collective;
pub mod de;
mod error;
pub mod expression;
pub mod fit;
pub mod fit_report;
pub mod link;
pub mod measure;
pub mod measured;
pub mod memory;
pub mod parallel;
pub mod plan;
pub mod runs;
pub mod scaling;

pub use analytic::{
    ComputeModel, DataParallelModel, IterationEstimate, LayerCost, Optimizer, Overlap, Parallelism,
};
pub use collective::{InterNode, Strategy};
pub use de::{DeConfig, DeResult};
pub use error::{Error, Result};
pub use expression::{Expression, Point, Term};
pub use fit::{FitConfig, FittedExpression, Holdout, HoldoutReport};
pub use link::Link;
pub use measured::Collectives;
pub use runs::{Run, read_runs, write_runs};
