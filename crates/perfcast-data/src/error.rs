//! Errors of perfcast-data: each names the file, and the column or value when there is one.

use std::path::PathBuf;

/// What can go wrong reading or writing datasets.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be read or written.
    #[error("failed to {action} `{path}`: {source}")]
    Io {
        /// What was attempted (read, write, create, rename).
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not a readable Parquet/JSON file.
    #[error("unreadable dataset `{path}`: {message}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// The decoder's message.
        message: String,
    },
    /// The file reads, but a column is missing, mistyped, or holds an impossible value.
    #[error("invalid dataset `{path}`: {message}")]
    Schema {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the column and value.
        message: String,
    },
    /// An output directory that must not be written or replaced.
    #[error("cannot write `{path}`: {message}")]
    Destination {
        /// The destination.
        path: PathBuf,
        /// Why, naming what it holds.
        message: String,
    },
    /// Inputs that cannot be used together or as given (a path that holds no dataset, sessions
    /// of two devices); the message names the value.
    #[error("{0}")]
    Input(String),
    /// No dataset where one was expected.
    #[error("no dataset at `{path}`\n\nhint: create one with `perfcast profile --out {path}`", path = .0.display())]
    Missing(PathBuf),
}

/// Result with perfcast-data's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn schema(path: &std::path::Path, message: impl Into<String>) -> Error {
        Error::Schema {
            path: path.to_path_buf(),
            message: message.into(),
        }
    }

    pub(crate) fn unreadable(path: &std::path::Path, message: impl ToString) -> Error {
        Error::Unreadable {
            path: path.to_path_buf(),
            message: message.to_string(),
        }
    }
}
