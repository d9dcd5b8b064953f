//! Errors of perfcast-models.

/// What can go wrong fitting, predicting, saving or loading a model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A hyper-parameter out of range, named with its value.
    #[error("invalid {model} parameters: {message}")]
    InvalidParams {
        /// Model name.
        model: &'static str,
        /// What is wrong.
        message: String,
    },
    /// Training data unusable (too few rows, NaN, non-positive targets).
    #[error("invalid training data: {0}")]
    InvalidData(String),
    /// A saved model that does not load.
    #[error("cannot load model `{path}`: {message}")]
    Load {
        /// File.
        path: std::path::PathBuf,
        /// Why.
        message: String,
    },
    /// Inputs that cannot be used as given (no dataset named, a device left out that is not
    /// in the data); the message names the value.
    #[error("{0}")]
    Input(String),
    /// An error with what was being done when it happened (`splitting `conv2d.parquet``).
    #[error("{context}")]
    Context {
        /// What was being done, naming the file or the model.
        context: String,
        /// The error.
        #[source]
        source: Box<Error>,
    },
    /// Dataset I/O.
    #[error(transparent)]
    Data(#[from] perfcast_data::Error),
    /// Unknown model name.
    #[error("unknown model `{name}` (known: {known})")]
    UnknownModel {
        /// The name given.
        name: String,
        /// The names the table of families knows, filled in by it.
        known: String,
    },
    /// From a fitted model's prediction path (perfcast-predict): a row of the wrong width, a
    /// phase the model was not trained on, a saved model whose parts do not fit together.
    #[error(transparent)]
    Predict(#[from] perfcast_predict::Error),
}

impl Error {
    /// This error with what was being done when it happened.
    pub fn context(self, context: impl Into<String>) -> Error {
        Error::Context {
            context: context.into(),
            source: Box::new(self),
        }
    }
}

/// Result with perfcast-models' [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
