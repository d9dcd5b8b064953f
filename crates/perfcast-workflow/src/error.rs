//! Errors of the workflows.

use std::path::PathBuf;

/// What went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Stopped by the interrupt token between two units of work; what was measured is saved.
    #[error(
        "quickstart interrupted in {step}; the rows measured so far are saved in `{}`: run the \
         same command again to resume",
        data.display()
    )]
    Interrupted {
        /// The step and how far it got (`step 2/5 (the sweep) after 12 new measurements`).
        step: String,
        /// The dataset the rows are saved in.
        data: PathBuf,
    },
    /// Stopped by the interrupt token before the named step of a workflow that saves nothing
    /// along the way.
    #[error("interrupted before {0}")]
    Stopped(String),
    /// An error the user can fix, with what to do about it kept apart ([`Error::hint`]).
    #[error(transparent)]
    Hinted(#[from] perfcast_core::Hinted),
    /// A plan that cannot run as given; the message names the value.
    #[error("{0}")]
    Input(String),
    /// An error with what was being done when it happened (`profiling into ...`).
    #[error("{context}")]
    Context {
        /// What was being done, naming the directory.
        context: String,
        /// The error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// From measuring.
    #[error(transparent)]
    Profile(#[from] perfcast_profile::Error),
    /// From the models (the anchor mapping).
    #[error(transparent)]
    Models(#[from] perfcast_models::Error),
    /// From training and selection.
    #[error(transparent)]
    Select(#[from] perfcast_select::Error),
    /// From calibration and the closing predictions.
    #[error(transparent)]
    Calibrate(#[from] perfcast_calibrate::Error),
    /// From loading the bundle.
    #[error(transparent)]
    Predict(#[from] perfcast_predict::Error),
    /// From the dataset.
    #[error(transparent)]
    Data(#[from] perfcast_data::Error),
    /// From perfcast-scale (the runs grid, the runs file).
    #[error(transparent)]
    Scale(#[from] perfcast_scale::Error),
    /// From the core crate (network names).
    #[error(transparent)]
    Core(#[from] perfcast_core::Error),
}

impl Error {
    /// What the user can do about this error, where perfcast knows.
    pub fn hint(&self) -> Option<&str> {
        match self {
            Error::Hinted(e) => e.hint.text(),
            Error::Data(e) => e.hint(),
            Error::Core(e) => e.hint(),
            Error::Scale(e) => e.hint(),
            _ => None,
        }
    }
}

/// Result with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
