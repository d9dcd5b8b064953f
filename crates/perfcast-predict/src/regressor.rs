//! The one interface every fitted model implements, and the saved form of every fitted model.
//!
//! Fitted models are used through `Box<dyn Regressor>`, so the predictor, evaluation and
//! auto-selection treat them all alike; fitting them (hyper-parameters and the `Fit` trait) is
//! perfcast-models' work. Every model predicts milliseconds and works in log space internally,
//! so predictions are positive.

use perfcast_core::Phase;
use serde::{Deserialize, Serialize};

pub use crate::registry::{SavedForm, SavedModel};

use crate::error::{Error, Result};
use crate::features::{FeatureSchema, row_in_phase};
use crate::matrix::Matrix;

/// A fitted latency model.
///
/// `Any` lets the predictor recognise a family it batches specially (a MEDN shared by several
/// kinds runs once for all of their rows) behind `&dyn Regressor`.
pub trait Regressor: std::any::Any + Send + Sync + std::fmt::Debug {
    /// Model family name: `ridge`, `knn`, `trees`, `roofline`, ...
    fn name(&self) -> &'static str;

    /// The schema the model was fitted on (row width and meaning).
    fn schema(&self) -> &FeatureSchema;

    /// Predicted latency (ms) of one raw feature row in schema order.
    ///
    /// Must not allocate on the hot path: single-row prediction is timed in microseconds.
    fn predict_row(&self, x: &[f64]) -> Result<f64>;

    /// Predicted latencies (ms) of every row.
    fn predict(&self, x: &Matrix) -> Result<Vec<f64>> {
        check_width(self.schema(), x.cols())?;
        x.iter_rows().map(|r| self.predict_row(r)).collect()
    }

    /// Predicted latencies (ms) of rows held one after another in `rows` (schema order) into
    /// `out`, one per row: the batch entry of the prediction path. The default predicts row
    /// by row; a model whose single row is latency-bound (trees walk one node after another)
    /// interleaves rows. Results equal [`Regressor::predict_row`]'s.
    fn predict_rows(&self, rows: &[f64], out: &mut [f64]) -> Result<()> {
        let width = self.schema().len();
        check_rows(width, rows, out)?;
        for (x, o) in rows.chunks_exact(width).zip(out.iter_mut()) {
            *o = self.predict_row(x)?;
        }
        Ok(())
    }

    /// Whether the model's own answer holds outside its trained ranges, so the predictor
    /// asks it directly instead of scaling the nearest trained configuration by the work
    /// ratio: a model of the efficiency below the spec roofline (the GPU utilisation model)
    /// counts the extra work through the roofline itself, and scaling its whole answer would
    /// scale its launch floor too. Default false.
    fn extrapolates(&self) -> bool {
        false
    }

    /// Devices whose training-step rows a cross-device model learned from. On a device far
    /// beyond them the predictor answers a training step as the forward pass on that device
    /// times the training/forward ratio the model gives on these: a backward kernel's cost
    /// relative to its forward follows the algorithm (nearly the same on DeepBench's GPUs and
    /// the H100), where its absolute efficiency on a GPU newer than every training-step row
    /// does not. Default none (answer as given).
    fn phase_devices(&self) -> &[perfcast_core::DeviceSpec] {
        &[]
    }

    /// Whether the model reads every query in its training-phase form and picks its output by
    /// phase, so [`Regressor::predict_tasks`] is its fast path (multi-task MEDN). Default false.
    fn multi_task(&self) -> bool {
        false
    }

    /// Predicted latencies (ms) of training-phase rows (`rows` holds them one after another,
    /// each in schema order), row `i` asked for in `phases[i]`, into `out[i]`.
    ///
    /// Every row carries everything its other phase's row is computed from, so any model
    /// answers: the default rewrites a row into its `phases[i]` form and predicts it.
    /// Multi-task models answer from the training-phase form directly, many rows per pass.
    fn predict_tasks(&self, rows: &[f64], phases: &[Phase], out: &mut [f64]) -> Result<()> {
        let width = check_tasks(self.schema(), rows.len(), phases.len(), out.len())?;
        for ((x, phase), o) in rows.chunks_exact(width).zip(phases).zip(out.iter_mut()) {
            *o = match phase {
                Phase::Training => self.predict_row(x)?,
                Phase::Inference => self.predict_row(&row_in_phase(self.schema(), x, *phase)?)?,
            };
        }
        Ok(())
    }

    /// Memory the fitted parameters take, in bytes (what a bundle would store).
    fn size_bytes(&self) -> usize;

    /// The saved form of the model.
    fn to_saved(&self) -> SavedModel;
}

/// The row width of [`Regressor::predict_tasks`] arguments, or an error unless `rows` values
/// hold `phases` whole rows of `schema` and `out` has room for them.
pub fn check_tasks(
    schema: &FeatureSchema,
    rows: usize,
    phases: usize,
    out: usize,
) -> Result<usize> {
    let width = schema.len();
    if rows != width * phases || out != phases {
        return Err(Error::InvalidData(format!(
            "{rows} values for {phases} rows of {width} features into {out} outputs"
        )));
    }
    Ok(width)
}

/// Errors unless a row of `width` fits `schema`.
pub fn check_width(schema: &FeatureSchema, width: usize) -> Result<()> {
    if width != schema.len() {
        return Err(Error::FeatureWidth {
            expected: schema.len(),
            got: width,
        });
    }
    Ok(())
}

/// Checks that `rows` holds exactly `out.len()` rows of `width` values (the batch entry's
/// contract, shared by every model's [`Regressor::predict_rows`]).
pub fn check_rows(width: usize, rows: &[f64], out: &[f64]) -> Result<()> {
    if rows.len() != width * out.len() {
        return Err(Error::InvalidData(format!(
            "{} values for {} rows of {width} features",
            rows.len(),
            out.len()
        )));
    }
    Ok(())
}

/// Per-feature standardisation of `ln(1 + x)`, fitted on the training rows.
///
/// Constant columns get scale 1 so they contribute nothing instead of dividing by zero.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogStandardiser {
    /// Mean of each transformed column.
    pub mean: Vec<f64>,
    /// Reciprocal standard deviation of each transformed column.
    pub inv_std: Vec<f64>,
}

impl LogStandardiser {
    /// Transforms one row into `out` (same width), without allocating.
    #[inline]
    pub fn transform_into(&self, row: &[f64], out: &mut [f64]) {
        for (((o, v), m), s) in out.iter_mut().zip(row).zip(&self.mean).zip(&self.inv_std) {
            *o = (crate::features::log1p_pos(*v) - m) * s;
        }
    }

    /// Transforms every row.
    pub fn transform(&self, x: &Matrix) -> Matrix {
        let mut out = Matrix::with_cols(x.cols());
        let mut buf = vec![0.0; x.cols()];
        for r in x.iter_rows() {
            self.transform_into(r, &mut buf);
            out.push_row(&buf);
        }
        out
    }
}
