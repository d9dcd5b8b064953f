//! perfcast-core: the vocabulary every other perfcast crate speaks.
//!
//! Module specs ([`ModuleSpec`]) with validation and shape inference, derived features
//! ([`features::derive`]), the measurement [`Context`], device specs ([`DeviceSpec`]), and whole
//! networks ([`Network`], checked layer by layer; built-in ones in [`zoo`]).
//! No burn, no polars: this crate builds and tests in seconds.
//!
//! ```
//! use perfcast_core::{ModuleSpec, features};
//!
//! let spec = ModuleSpec::from_json(
//!     r#"{"kind":"conv2d","in_channels":3,"out_channels":64,"input_hw":224,"kernel":7,"stride":2,"padding":3}"#,
//! ).unwrap();
//! assert_eq!(spec.output_shape().unwrap(), vec![64, 112, 112]);
//! let derived = features::derive(&spec, 8);
//! assert!(derived.flops > 1e9);
//! ```

pub mod arch;
pub mod atomic;
pub mod canonical;
pub mod catalogue;
mod choice;
mod context;
mod device;
mod device_file;
mod dtype;
mod error;
pub mod features;
pub mod fmt;
pub mod fusion;
pub mod gpus;
pub mod interrupt;
pub mod kinds;
pub mod known;
mod metrics;
pub mod network;
pub mod progress;
mod queries;
pub mod rng;
mod spec;
mod spec_flags;
pub mod testing;
pub mod zoo;

pub use choice::NetworkChoice;
pub use context::{Context, MAX_BATCH, ModuleQuery, Phase};
pub use device::{
    Caches, CpuTopology, DeviceKind, DeviceSpec, SpecSource, UncachedWeights, parse_cache_size,
    parse_cpuinfo, slugify,
};
pub use dtype::{DType, Links, TypePeaks};
pub use error::{Error, Hint, Hinted, Result};
pub use metrics::Metrics;
pub use network::{Layer, LayerShapes, NETWORK_INPUT, Network};
pub use queries::read_queries;
pub use spec::{
    BatchNorm2d, Conv2d, Dims, Elementwise, Embedding, LayerNorm, Linear, MAX_AXIS, MAX_ELEMENTS,
    Matmul, ModuleKind, ModuleSpec, Pool2d, Reads,
};
pub use spec_flags::SpecFlags;

/// perfcast's version, recorded in every dataset row and bundle.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
