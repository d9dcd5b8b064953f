//! Errors of perfcast-scale: every message names the bad value, and the file where there is one.

use std::path::PathBuf;

/// What can go wrong modelling or fitting training time.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A runs CSV that cannot be used: a missing column, a bad cell, a non-positive time.
    #[error("runs file `{path}`: {message}", path = path.display())]
    Runs {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the line and the value.
        message: String,
    },
    /// A collectives file (measured timings or fitted parameters) that cannot be used.
    #[error("collectives file `{path}`: {message}", path = path.display())]
    Collectives {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the line, the column and the value.
        message: String,
    },
    /// A file that cannot be read.
    #[error("reading `{path}`", path = path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A parameter out of range or a name perfcast does not know; the message names it.
    #[error("invalid {what}: {message}")]
    Invalid {
        /// What was being checked (`link`, `strategy`, `term`, ...).
        what: &'static str,
        /// What is wrong, with the value.
        message: String,
    },
    /// Inputs that cannot be used as given (no thread counts, no run measured); the message
    /// names the value.
    #[error("{0}")]
    Input(String),
    /// A runs file that cannot be written.
    #[error("writing the runs `{path}`", path = path.display())]
    WriteRuns {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// An error with what was being done when it happened (`fitting `runs.csv``).
    #[error("{context}")]
    Context {
        /// What was being done, naming the file.
        context: String,
        /// The error.
        #[source]
        source: Box<Error>,
    },
    /// A parallel strategy the model has a place for but does not cover yet.
    #[error("{0} parallelism is not modelled yet by `scale predict`{hint}", hint = perfcast_core::Hint::new(NOT_YET_HINT))]
    NotYet(&'static str),
    /// An error the user can fix, with what to do about it kept apart ([`Error::hint`]).
    #[error("{error}{hint}")]
    Hinted {
        /// The error.
        error: Box<Error>,
        /// What the user can do about it.
        hint: perfcast_core::Hint,
    },
    /// A compute-time source (a bundle's predictor, a measurement) failed.
    #[error("compute time at per-device batch {batch}: {message}")]
    Compute {
        /// Per-device batch that was asked for.
        batch: usize,
        /// The source's error.
        message: String,
    },
}

/// Where `scale predict` sends a strategy it does not model.
const NOT_YET_HINT: &str =
    "`data` parallelism is; `perfcast plan` models tensor and pipeline parallelism";

impl Error {
    /// This error with `hint`, what the user can do about it.
    pub fn with_hint(self, hint: impl Into<String>) -> Error {
        Error::Hinted {
            error: Box::new(self),
            hint: perfcast_core::Hint::new(hint),
        }
    }

    /// What the user can do about this error, where perfcast knows.
    pub fn hint(&self) -> Option<&str> {
        match self {
            Error::NotYet(_) => Some(NOT_YET_HINT),
            Error::Hinted { hint, .. } => hint.text(),
            Error::Context { source, .. } => source.hint(),
            _ => None,
        }
    }

    /// An [`Error::Invalid`].
    pub(crate) fn invalid(what: &'static str, message: impl Into<String>) -> Error {
        Error::Invalid {
            what,
            message: message.into(),
        }
    }
}

/// Result with perfcast-scale's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
