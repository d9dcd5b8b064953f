//! Errors of perfcast-core: every message names the bad value.

/// What can go wrong building or validating specs.
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
    #[error("unknown module kind `{0}`\n\nhint: known kinds are {kinds}", kinds = crate::ModuleKind::names().join(", "))]
    UnknownKind(String),
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
    /// Malformed JSON for a spec.
    #[error("invalid module spec JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// Result with perfcast-core's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
