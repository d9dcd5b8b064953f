//! Errors of training, selection and writing bundles.

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
    /// Stopped by an interrupt ([`perfcast_core::interrupt`]) between two fits.
    #[error("interrupted: training stopped before {0}")]
    Interrupted(String),
    /// From the predictor (loading a bundle, answering a query).
    #[error(transparent)]
    Predict(#[from] perfcast_predict::Error),
    /// Inputs that cannot be used as given (no families named, a kind the data lacks); the
    /// message names the value.
    #[error("{0}")]
    Input(String),
    /// An error with what was being done when it happened (`cross-validating ridge on ...`).
    #[error("{context}")]
    Context {
        /// What was being done, naming the file or the model.
        context: String,
        /// The error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
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

impl Error {
    /// `source` with what was being done when it happened.
    pub fn context(
        context: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Error {
        Error::Context {
            context: context.into(),
            source: source.into(),
        }
    }
}

/// Result with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
