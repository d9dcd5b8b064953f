//! Errors of selection, writing bundles and scoring.

use std::path::PathBuf;

/// What went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No candidate fits the budgets.
    #[error("no `{kind}` model fits the budgets ({why})")]
    NothingFits {
        /// Module kind.
        kind: String,
        /// Which limits ruled the candidates out.
        why: String,
    },
    /// A bundle that is missing, corrupt, truncated or does not match this build.
    #[error("bundle `{path}`: {message}")]
    Bundle {
        /// File or directory.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A query the bundle cannot answer.
    #[error("{0}")]
    Query(String),
    /// From the predictor (loading a bundle, answering a query).
    #[error(transparent)]
    Predict(#[from] perfcast_predict::Error),
    /// From the models crate.
    #[error(transparent)]
    Models(#[from] perfcast_models::Error),
    /// From the data crate (output directories).
    #[error(transparent)]
    Data(#[from] perfcast_data::Error),
    /// From the core crate.
    #[error(transparent)]
    Core(#[from] perfcast_core::Error),
}

/// Result with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
