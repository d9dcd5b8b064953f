//! Errors of the server and the load generator.

use std::net::SocketAddr;

/// What went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The address could not be bound (in use, not local, no permission).
    #[error("cannot listen on `{addr}`: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A socket or runtime failure.
    #[error("{0}")]
    Io(std::io::Error),
    /// A setting out of range, named with its value.
    #[error("{0}")]
    Config(String),
    /// Preparing the zoo networks or the bundle summary failed.
    #[error(transparent)]
    Predict(#[from] perfcast_predict::Error),
    /// From the core crate.
    #[error(transparent)]
    Core(#[from] perfcast_core::Error),
    /// JSON encoding.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// Result with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
