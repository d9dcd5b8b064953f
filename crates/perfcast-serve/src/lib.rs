//! perfcast-serve: an HTTP JSON service over a [`perfcast_select::Predictor`], and a load
//! generator to measure it.
//!
//! It sits above perfcast-select (core ◄ data ◄ models ◄ select ◄ serve ◄ cli). Endpoints:
//!
//! - `POST /v1/predict`: one module (`{"module": {...}}`) or many (`{"modules": [...]}`), each a
//!   module spec as `ModuleSpec` serialises it, with the context (`batch`, `phase`, `threads`)
//!   for all of them or per module: the format of `perfcast predict --modules-file`.
//! - `POST /v1/predict/network`: a zoo network by name or a network in its JSON form, with
//!   `batch`, `resolution`, `phase`, `threads`.
//! - `GET /v1/bundle`: what is loaded: the device, per kind the chosen model and its scores.
//! - `GET /healthz`.
//!
//! Bad input gets a 4xx with `{"error": "...", "field": "..."}` naming the field at fault
//! (400 for a body that is not JSON, 413 over the body limit, 422 for a wrong field, 404 and
//! 405 for unknown paths and methods). The predictor is shared by every tokio worker behind an
//! `Arc`; predictions are microseconds and run inline in the handler. The server binds
//! loopback by default and shuts down gracefully on SIGINT and SIGTERM.
//!
//! ```no_run
//! use std::sync::Arc;
//! use perfcast_select::{Bundle, Predictor};
//! use perfcast_serve::{ServeConfig, run};
//!
//! let predictor = Arc::new(Predictor::new(Bundle::load("checkpoints/local".as_ref())?));
//! run(predictor, &ServeConfig::default(), |addr| eprintln!("listening on http://{addr}"))?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod api;
mod error;
pub mod loadtest;
mod server;

pub use error::{Error, Result};
pub use server::{AppState, DEFAULT_BODY_LIMIT, ServeConfig, router, run, serve, shutdown_signal};
