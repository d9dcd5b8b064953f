//! Errors of perfcast-graph: every message names the file and the field or node at fault.

use std::path::PathBuf;

/// What can go wrong turning a config or an ONNX graph into a network.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A transformer config that cannot be read, or lacks or misstates a field.
    #[error("transformer config `{path}`: {message}", path = path.display())]
    Config {
        /// The config file (`<inline>` for text given directly).
        path: PathBuf,
        /// What is wrong, naming the field.
        message: String,
    },
    /// An ONNX file that cannot be read or decoded.
    #[error("ONNX file `{path}`: {message}", path = path.display())]
    Onnx {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// One node of an ONNX graph that cannot be imported (an unresolvable shape, a bad
    /// attribute, an op without a kind under `strict`).
    #[error("ONNX file `{path}`: node `{node}` ({op}): {message}", path = path.display())]
    OnnxNode {
        /// The file.
        path: PathBuf,
        /// The node's name (or its first output when it has none).
        node: String,
        /// Its op type.
        op: String,
        /// What is wrong.
        message: String,
    },
    /// The built network does not check (a bug in a builder, reported rather than hidden).
    #[error(transparent)]
    Core(#[from] perfcast_core::Error),
    /// A flag value that cannot be used (`--onnx-input ids`); the message names it.
    #[error("{0}")]
    Input(String),
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
            Error::Hinted(e) => e.hint.text(),
            Error::Core(e) => e.hint(),
            _ => None,
        }
    }
}

/// Result with perfcast-graph's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
