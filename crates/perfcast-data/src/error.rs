//! Errors of perfcast-data: each names the file, and the column or value when there is one.

use std::path::PathBuf;

/// What can go wrong reading or writing datasets.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be read or written. The OS error is the cause ([`std::error::Error::source`]),
    /// not part of the message, so a chain printed with `{:#}` names it once.
    #[error("failed to {action} `{path}`")]
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
    #[error("no dataset at `{path}`{hint}", path = path.display())]
    Missing {
        /// Where one was expected.
        path: PathBuf,
        /// How to make one there.
        hint: perfcast_core::Hint,
    },
    /// An error the user can fix, with what to do about it kept apart ([`Error::hint`]).
    #[error(transparent)]
    Hinted(#[from] perfcast_core::Hinted<Box<Error>>),
}

impl Error {
    /// This error with `hint`, what the user can do about it.
    pub fn with_hint(self, hint: impl Into<String>) -> Error {
        perfcast_core::Hinted::wrap(self, hint).into()
    }

    /// What the user can do about this error, where perfcast knows.
    pub fn hint(&self) -> Option<&str> {
        match self {
            Error::Missing { hint, .. } => hint.text(),
            Error::Hinted(e) => e.hint.text(),
            _ => None,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The cause is printed once through a chain (it was in the message and the source).
    #[test]
    fn io_errors_name_their_cause_once() {
        let err = Error::Io {
            action: "read",
            path: PathBuf::from("data/cpu/linear.parquet"),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
        };
        assert_eq!(err.to_string(), "failed to read `data/cpu/linear.parquet`");
        let source = std::error::Error::source(&err).map(ToString::to_string);
        assert_eq!(source.as_deref(), Some("no such file"));
        let mut chain = err.to_string();
        let mut cause = std::error::Error::source(&err);
        while let Some(c) = cause {
            chain.push_str(&format!(": {c}"));
            cause = c.source();
        }
        assert_eq!(
            chain,
            "failed to read `data/cpu/linear.parquet`: no such file"
        );
    }

    #[test]
    fn a_missing_dataset_names_the_path_and_hints_apart() {
        let err = crate::DatasetDir::open("no/such/ds").unwrap_err();
        assert_eq!(
            err.hint(),
            Some("create one with `perfcast profile --out no/such/ds`")
        );
        assert_eq!(
            err.to_string(),
            "no dataset at `no/such/ds`\n\nhint: create one with `perfcast profile --out no/such/ds`"
        );
    }
}
