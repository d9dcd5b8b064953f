//! perfcast-predict: the light predictor. It loads a checkpoint bundle and answers how long
//! modules and whole networks take, and does nothing else: no fitting, no datasets, no burn,
//! no polars, no async runtime (perfcast-core, serde and a SIMD dispatcher), so a NAS loop, the
//! HTTP server, the CLI's `predict` and the Python package get microsecond predictions from a
//! small build.
//!
//! [`Bundle`] reads `checkpoints/<name>/` (the manifest and the chosen model of every kind,
//! refusing corrupt or mismatched files); [`Predictor`] answers one module, many modules or a
//! network ([`Predictor::prepare`] once, then [`Predictor::predict_prepared`] per context), with
//! GPU queries in their canonical form and never below the device's roofline, training steps of
//! forward-only kinds composed from forward kernels, warnings outside the trained ranges, and a
//! calibrated bundle's host costs composed into the network total ([`compose`]). Every model
//! family's saved form and prediction path lives here ([`regressor::SavedModel`], read through
//! the table of saved forms [`registry`]: [`ridge`],
//! [`knn`], [`trees`], [`stack`], [`roofline`], [`medn`], the cross-device wrapper
//! [`device_features`], the GPU utilisation model's features [`gpu_util`] and [`blend`], the
//! geometric mean of other families' models), built from the
//! same feature rows training used ([`features`]); the one composer of base-times-residual
//! stacks three of them fit and predict through is [`residual::StackWith`]; perfcast-models
//! fits them.
//!
//! ```
//! use perfcast_core::{Context, Phase, zoo};
//! use perfcast_predict::{Bundle, Predictor};
//!
//! # let checkpoints = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../checkpoints");
//! // The shipped cross-device GPU bundle, answering for the GPU its manifest names.
//! let predictor = Predictor::new(Bundle::load(&checkpoints.join("gpu"))?);
//! let context = Context { batch: 8, phase: Phase::Inference, threads: 1, utilisation: 0.0 };
//! let net = predictor.prepare(&zoo::build("resnet18", None)?)?;
//! let p = predictor.predict_prepared(&net, &context)?;
//! assert_eq!(p.layers.len(), net.len());
//! println!("{}: {:.3} ms", predictor.bundle().manifest.device.name, p.total_ms);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod bench_queries;
pub mod blend;
pub mod bundle;
pub mod compose;
pub mod device_features;
mod error;
pub mod features;
pub mod fused;
mod fusion_report;
pub mod gpu_util;
pub mod knn;
pub mod matrix;
pub mod medn;
pub mod older_schema;
pub mod predictor;
pub mod registry;
pub mod regressor;
pub mod residual;
pub mod ridge;
pub mod roofline;
pub mod stack;
#[doc(hidden)]
pub mod testing;
pub mod trees;

pub use bundle::{Bundle, Manifest};
pub use compose::{Composed, HostCosts, PhaseCosts, RunShape};
pub use error::{Error, Result};
pub use features::FeatureSchema;
pub use fused::FusionReport;
pub use matrix::Matrix;
pub use predictor::{
    LayerPrediction, ModulePrediction, NetworkPrediction, Predictor, PreparedNetwork,
    ZERO_COST_MODEL,
};
pub use regressor::{Regressor, SavedModel};
