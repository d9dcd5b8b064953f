//! Errors of calibrating, scoring and using a bundle.

use std::path::PathBuf;

/// What went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A bundle that cannot be read or rewritten.
    #[error("bundle `{path}`: {message}")]
    Bundle {
        /// File or directory.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Inputs that cannot be used as given; the message names the value.
    #[error("{0}")]
    Input(String),
    /// From the predictor (loading a bundle, answering a query).
    #[error(transparent)]
    Predict(#[from] perfcast_predict::Error),
    /// From the data crate (measured rows and networks).
    #[error(transparent)]
    Data(#[from] perfcast_data::Error),
    /// From the scale crate (plans).
    #[error(transparent)]
    Scale(#[from] perfcast_scale::Error),
    /// From the core crate.
    #[error(transparent)]
    Core(#[from] perfcast_core::Error),
}

/// Result with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
