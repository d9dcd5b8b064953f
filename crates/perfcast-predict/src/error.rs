//! Errors of perfcast-predict.

use std::path::PathBuf;

/// What can go wrong loading a bundle or answering a query.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A feature row of the wrong width.
    #[error("expected {expected} features, got {got}")]
    FeatureWidth {
        /// Width the model was fitted on.
        expected: usize,
        /// Width given.
        got: usize,
    },
    /// Input a model cannot use (rows that do not fill a batch, a phase it was not trained
    /// on), or a saved model whose parts do not fit together.
    #[error("{0}")]
    InvalidData(String),
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
    /// From the core crate (specs, contexts, networks).
    #[error(transparent)]
    Core(#[from] perfcast_core::Error),
}

/// Result with perfcast-predict's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
