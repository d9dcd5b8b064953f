//! perfcast-serve: an HTTP JSON service over a [`perfcast_predict::Predictor`], and a load
//! generator to measure it.
//!
//! It sits on the light predictor alone (core ◄ predict ◄ serve ◄ cli: no burn, no polars).
//! Endpoints:
//!
//! - `POST /v1/predict`: one module (`{"module": {...}}`) or many (`{"modules": [...]}`), each a
//!   module spec as `ModuleSpec` serialises it, with the context (`batch`, `phase`, `threads`)
//!   for all of them or per module: the format of `perfcast predict --modules-file`.
//! - `POST /v1/predict/network`: a zoo network by name or a network in its JSON form, with
//!   `batch`, `resolution`, `phase`, `threads`.
//! - `POST /v1/predict/onnx`: an ONNX file as the body (its own limit, 512 MiB by default),
//!   with `batch`, `phase`, `threads`, `seq`, `input=NAME=DIMS` (repeatable), `strict`,
//!   `fuse_conv_bn` and `name` in the query string; the answer is the network prediction
//!   plus `import`, what the import found (fusions, unmapped ops and their shares).
//! - `GET /v1/bundle`: what is loaded: the device, per kind the chosen model and its scores.
//! - `GET /healthz`.
//!
//! Bad input gets a 4xx with `{"error": "...", "field": "..."}` naming the field at fault
//! (400 for a body that is not JSON, 413 over the body limit, 422 for a wrong field, 404 and
//! 405 for unknown paths and methods). The predictor is shared by every tokio worker behind an
//! `Arc`; predictions are microseconds and run inline in the handler. The server binds
//! loopback by default.
//!
//! No client can hold a connection for free: a request head must arrive whole within the
//! header timeout (10 s by default, from the connection's start or the request's first byte,
//! so a byte a second gains nothing), its body within the body timeout (30 s, else 408), and a
//! keep-alive connection is closed after the idle timeout (60 s). A head hyper cannot parse
//! is answered 400, 414 or 431 with a JSON body too. On SIGINT or SIGTERM the server stops
//! accepting, closes connections waiting for a request, lets requests in flight finish, and
//! after the shutdown timeout (5 s) drops what is left, the process exiting within that bound.
//!
//! No request can hold the CPU for long either: the work too large for a tokio worker (an ONNX
//! import, a network of over a thousand layers, a batch of over a thousand modules) runs on a
//! pool of as many slots as worker threads, and a request whose work is not done within the
//! request timeout (30 s) of its body is answered 503 naming the limit. A panic, which is a
//! bug and never the input's fault, is answered 500. See [`ServeConfig`].
//!
//! ```no_run
//! use std::sync::Arc;
//! use perfcast_predict::{Bundle, Predictor};
//! use perfcast_serve::{ServeConfig, run};
//!
//! let predictor = Arc::new(Predictor::new(Bundle::load("checkpoints/local".as_ref())?));
//! run(predictor, &ServeConfig::default(), |addr| eprintln!("listening on http://{addr}"))?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod api;
mod conn;
mod error;
pub mod loadtest;
mod outbox;
mod server;

pub use error::{Error, Result};
pub use server::{
    AppState, DEFAULT_BODY_LIMIT, DEFAULT_BODY_TIMEOUT, DEFAULT_HEADER_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT, DEFAULT_ONNX_LIMIT, DEFAULT_REQUEST_TIMEOUT, DEFAULT_SHUTDOWN_TIMEOUT,
    ServeConfig, router, run, serve, shutdown_signal,
};
