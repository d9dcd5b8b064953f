//! Errors of perfcast-core: every message names the bad value.

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
    #[error("unknown zoo network `{0}`\n\nhint: known networks are {names}", names = crate::zoo::names().join(", "))]
    UnknownNetwork(String),
    /// Malformed JSON for a spec.
    #[error("invalid module spec JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A fusion policy name that perfcast does not know.
    #[error(
        "unknown fusion policy `{0}`: expected one of none, epilogue, compile, engine, megatron"
    )]
    UnknownFusion(String),
}

/// Result with perfcast-core's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
