//! perfcast-graph: real models into perfcast [`Network`](perfcast_core::Network)s.
//!
//! - [`onnx`]: ONNX graphs (a small protobuf reader, shape inference, constant folding, and a
//!   mapping of ops to module kinds; ops without a kind listed, never dropped).
//! - [`transformer`]: BERT, GPT-2/GPT-3, OPT and Llama-style networks from a Hugging Face style
//!   `config.json` and a sequence length.
//!
//! It sits beside the zoo in the data flow (model -> Network -> predict): it depends on
//! perfcast-core and serde only, so the CLI, the server and tests share one builder.
//!
//! ```
//! use std::path::Path;
//! use perfcast_graph::transformer::{BuildOptions, TransformerConfig};
//!
//! let config = TransformerConfig::from_json(
//!     r#"{"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4,
//!         "vocab_size": 100, "n_positions": 32}"#,
//!     Path::new("tiny-gpt.json"),
//! )?;
//! let net = config.build(&BuildOptions::new(16))?;
//! assert_eq!(net.output_shape()?, vec![16, 100]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod error;
pub mod onnx;
mod source;
pub mod transformer;

pub use error::{Error, Result};
pub use source::{Loaded, Measured, ModelSource, measured_networks, named_dims};
