//! Errors of perfcast-core: every message names the bad value; what the user can do about it
//! is a separate [`Hint`] field, filled by the code that knows the answer (the zoo its names,
//! the module kinds theirs), so this file depends on nothing it describes.

/// The `hint:` of an error the user can fix, kept apart from the message so a caller can show,
/// move or drop it; displayed after a blank line, as uv does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hint(pub Option<String>);

impl Hint {
    /// A hint saying `text`.
    pub fn new(text: impl Into<String>) -> Hint {
        Hint(Some(text.into()))
    }

    /// The hint's text, if there is one.
    pub fn text(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

impl std::fmt::Display for Hint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(text) => write!(f, "\n\nhint: {text}"),
            None => Ok(()),
        }
    }
}

/// A message and its [`Hint`] as one error: with a `String` (the default), for code that
/// reports through `anyhow` (the CLI, the workflows) and has no error enum of its own to give
/// a hint field; with `Box<Error>`, the `Hinted` variant a crate's error enum shares
/// (`Hinted(#[from] perfcast_core::Hinted<Box<Error>>)`, made by its `with_hint`).
#[derive(Debug, thiserror::Error)]
#[error("{message}{hint}")]
pub struct Hinted<M = String> {
    /// What is wrong, naming the value.
    pub message: M,
    /// What the user can do about it.
    pub hint: Hint,
}

impl Hinted {
    /// `message` with the hint `hint`.
    pub fn new(message: impl Into<String>, hint: impl Into<String>) -> Hinted {
        Hinted {
            message: message.into(),
            hint: Hint::new(hint),
        }
    }
}

impl<E> Hinted<Box<E>> {
    /// `error` with the hint `hint`.
    pub fn wrap(error: E, hint: impl Into<String>) -> Hinted<Box<E>> {
        Hinted {
            message: Box::new(error),
            hint: Hint::new(hint),
        }
    }
}

/// What can go wrong building or validating specs and networks.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A hyper-parameter or shape is impossible; the message names it and its value.
    #[error("invalid {kind} spec: {message}")]
    InvalidSpec {
        /// Module kind being validated.
        kind: &'static str,
        /// What is wrong, with the offending value.
        message: String,
    },
    /// A module kind name that perfcast does not know.
    #[error("unknown module kind `{name}`{hint}")]
    UnknownKind {
        /// The name given.
        name: String,
        /// The known kinds.
        hint: Hint,
    },
    /// A device spec with a missing or absurd field.
    #[error("invalid device spec `{device}`: {message}")]
    InvalidDevice {
        /// Device name.
        device: String,
        /// What is wrong.
        message: String,
    },
    /// A context value (batch, threads, utilisation) out of range.
    #[error("invalid context: {0}")]
    InvalidContext(String),
    /// A network that is not well formed (no layers, duplicate layer names, a bad input shape).
    #[error("invalid network `{network}`: {message}")]
    InvalidNetwork {
        /// Network name.
        network: String,
        /// What is wrong, with the offending value.
        message: String,
    },
    /// One layer of a network is invalid or does not fit the shape it reads.
    #[error("network `{network}`: layer {index} `{layer}`: {message}")]
    InvalidLayer {
        /// Network name.
        network: String,
        /// Position of the layer in the network's `layers` (from 0).
        index: usize,
        /// Layer name.
        layer: String,
        /// What is wrong, with the expected and actual shapes where shapes are at fault.
        message: String,
    },
    /// A device spec file that cannot be read, parsed or checked (the message names the file
    /// and the field).
    #[error("{0}")]
    DeviceFile(String),
    /// A network file that cannot be read, parsed or checked.
    #[error("network file `{path}`: {message}", path = path.display())]
    NetworkFile {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A value from the user that cannot be read (`vgg16@abc`); the message names it.
    #[error("{0}")]
    Input(String),
    /// Malformed JSON for a network.
    #[error("invalid network JSON: {0}")]
    NetworkJson(serde_json::Error),
    /// A network name that the built-in zoo does not know.
    #[error("unknown zoo network `{name}`{hint}")]
    UnknownNetwork {
        /// The name given.
        name: String,
        /// The zoo's names.
        hint: Hint,
    },
    /// A device name that matches no known device.
    #[error("{message}{hint}")]
    UnknownDevice {
        /// What was looked up and the candidates.
        message: String,
        /// How to list the known devices.
        hint: Hint,
    },
    /// Malformed JSON for a spec.
    #[error("invalid module spec JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A fusion policy name that perfcast does not know.
    #[error(
        "unknown fusion policy `{0}`: expected one of none, epilogue, compile, engine, megatron"
    )]
    UnknownFusion(String),
}

impl Error {
    /// What the user can do about this error, where perfcast knows.
    pub fn hint(&self) -> Option<&str> {
        match self {
            Error::UnknownKind { hint, .. }
            | Error::UnknownNetwork { hint, .. }
            | Error::UnknownDevice { hint, .. } => hint.text(),
            _ => None,
        }
    }
}

/// Result with perfcast-core's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
