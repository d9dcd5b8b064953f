//! Errors of perfcast-profile.

use std::path::PathBuf;

/// What can go wrong preparing or running a profile.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A sweep file that does not parse or holds impossible values.
    #[error("invalid sweep `{path}`: {message}")]
    Sweep {
        /// The sweep file (or `<built-in>`).
        path: PathBuf,
        /// What is wrong, with line and column when known.
        message: String,
    },
    /// The backend is not compiled in or could not start.
    #[error("backend `{name}` is not available: {reason}")]
    Backend {
        /// Backend name.
        name: String,
        /// Why.
        reason: String,
    },
    /// A spec or context that core rejects.
    #[error(transparent)]
    Core(#[from] perfcast_core::Error),
    /// Dataset I/O.
    #[error(transparent)]
    Data(#[from] perfcast_data::Error),
    /// Inputs that cannot be used as given (no rows to measure, mixed backends); the message
    /// names the value.
    #[error("{0}")]
    Input(String),
    /// The run was interrupted (Ctrl-C); finished rows are saved.
    #[error(
        "interrupted after {done} measurements; finished rows are saved (rerun with `--resume`)"
    )]
    Interrupted {
        /// Measurements finished before the interruption.
        done: usize,
    },
}

/// Result with perfcast-profile's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
