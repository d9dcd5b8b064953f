//! Fitting: hyper-parameters that fit into a [`Regressor`], and the checks every fit runs.
//!
//! Hyper-parameters (a `*Params` struct, validated before fitting) are separate from fitted
//! models, as in linfa. The fitted models, their interface and their saved forms are the
//! predictor's (`perfcast_predict::regressor`), re-exported here.

pub use perfcast_predict::regressor::{
    LogStandardiser, Regressor, SavedModel, check_rows, check_tasks, check_width,
};

use crate::error::{Error, Result};
use crate::features::TrainSet;
use crate::matrix::Matrix;

/// Hyper-parameters that fit into a [`Regressor`].
pub trait Fit {
    /// The fitted model.
    type Fitted: Regressor + 'static;

    /// Checks the hyper-parameters; errors carry the bad value.
    fn validate(&self) -> Result<()>;

    /// Fits on a training set (validating first).
    fn fit(&self, data: &TrainSet) -> Result<Self::Fitted>;
}

/// Checks the invariants every fit needs: rows, finite features, positive finite targets.
pub fn check_train_set(data: &TrainSet, min_rows: usize) -> Result<()> {
    if data.len() < min_rows {
        return Err(Error::InvalidData(format!(
            "{} `{}` rows, need at least {min_rows}",
            data.len(),
            data.schema.kind
        )));
    }
    check_width(&data.schema, data.x.cols())?;
    for (i, row) in data.x.iter_rows().enumerate() {
        if let Some(j) = row.iter().position(|v| !v.is_finite()) {
            return Err(Error::InvalidData(format!(
                "row {i}: feature `{}` is {}",
                data.schema.names[j], row[j]
            )));
        }
    }
    if let Some((i, y)) = data
        .y
        .iter()
        .enumerate()
        .find(|(_, y)| !(y.is_finite() && **y > 0.0))
    {
        return Err(Error::InvalidData(format!(
            "row {i}: latency must be positive, got {y}"
        )));
    }
    Ok(())
}

/// Fitting a [`LogStandardiser`] on training rows (the standardiser itself is the predictor's).
pub trait FitStandardiser {
    /// Fits on the rows of `x`.
    fn fit(x: &Matrix) -> Self;
}

impl FitStandardiser for LogStandardiser {
    fn fit(x: &Matrix) -> LogStandardiser {
        let n = x.rows().max(1) as f64;
        let cols = x.cols();
        let mut mean = vec![0.0; cols];
        for r in x.iter_rows() {
            for (m, v) in mean.iter_mut().zip(r) {
                *m += crate::features::log1p_pos(*v) / n;
            }
        }
        let mut var = vec![0.0; cols];
        for r in x.iter_rows() {
            for ((s, m), v) in var.iter_mut().zip(&mean).zip(r) {
                *s += (crate::features::log1p_pos(*v) - m).powi(2) / n;
            }
        }
        let inv_std = var
            .iter()
            .map(|v| if *v > 1e-12 { 1.0 / v.sqrt() } else { 1.0 })
            .collect();
        LogStandardiser { mean, inv_std }
    }
}
