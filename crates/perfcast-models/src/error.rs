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
    /// Unknown model name.
    #[error(
        "unknown model `{0}` (known: ridge, knn, trees, ridge-trees, roofline, medn, mlp, util, <family>-xdev)"
    )]
    UnknownModel(String),
    /// From a fitted model's prediction path (perfcast-predict): a row of the wrong width, a
    /// phase the model was not trained on, a saved model whose parts do not fit together.
    #[error(transparent)]
    Predict(#[from] perfcast_predict::Error),
}

/// Result with perfcast-models' [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
