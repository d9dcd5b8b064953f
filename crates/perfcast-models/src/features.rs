//! Training sets: the feature rows of measured dataset records, with their latencies and
//! configuration groups. The rows themselves ([`row`], [`FeatureSchema`]) are the predictor's
//! (`perfcast_predict::features`), so training and prediction build them with one function.

use perfcast_core::{Context, DeviceSpec, ModuleKind, ModuleSpec};
use perfcast_data::Record;
pub use perfcast_predict::features::{
    ALIGNMENT, COMMON, CONV_EXTRA, FeatureSchema, MAX_ROW, alignment, conv_algorithm_flags,
    conv_backward_features, fnv1a, gemm_dims, gpu_canonical, im2col_mib, log1p_pos, row,
    row_in_phase, row_into,
};

use crate::error::{Error, Result};
use crate::matrix::Matrix;

/// Training data of one kind: features, measured latencies (ms) and configuration groups.
#[derive(Clone, Debug)]
pub struct TrainSet {
    /// Schema of the rows.
    pub schema: FeatureSchema,
    /// Feature rows.
    pub x: Matrix,
    /// Measured median latency per row, ms (positive).
    pub y: Vec<f64>,
    /// Configuration group per row: rows of one layer configuration (any batch, phase or
    /// context) share it, so a group split never puts the same layer on both sides.
    pub groups: Vec<u64>,
}

/// The feature row of `spec` in `context` on `device`, as training sees it. On a GPU the same
/// work gets the same features however it was written down: rows are built from
/// the canonical form, as the predictor's are.
pub fn feature_row(spec: &ModuleSpec, context: &Context, device: &DeviceSpec) -> Vec<f64> {
    match gpu_canonical(spec, context, device) {
        Some((spec, context)) => row(&spec, &context, device),
        None => row(spec, context, device),
    }
}

/// The configuration group of `spec`: rows of one layer configuration share it.
pub fn group_of(spec: &ModuleSpec) -> u64 {
    fnv1a(spec.config().into_iter().flat_map(i64::to_le_bytes))
}

impl TrainSet {
    /// Builds the set of one kind from dataset records (failed rows are left out).
    ///
    /// Every latency must be finite and positive; the error names the offending row.
    pub fn from_records(
        kind: ModuleKind,
        records: &[Record],
        device: &DeviceSpec,
    ) -> Result<TrainSet> {
        let schema = FeatureSchema::for_kind(kind);
        let mut x = Matrix::with_cols(schema.len());
        let mut y = Vec::new();
        let mut groups = Vec::new();
        for (i, r) in records.iter().enumerate() {
            if r.spec.kind() != kind {
                return Err(Error::InvalidData(format!(
                    "row {i} is a `{}`, not a `{kind}`",
                    r.spec.kind()
                )));
            }
            let Some(t) = r.timing() else { continue };
            if !(t.median_ms.is_finite() && t.median_ms > 0.0) {
                return Err(Error::InvalidData(format!(
                    "row {i}: latency must be positive, got {}",
                    t.median_ms
                )));
            }
            x.push_row(&feature_row(&r.spec, &r.context, device));
            y.push(t.median_ms);
            groups.push(group_of(&r.spec));
        }
        Ok(TrainSet {
            schema,
            x,
            y,
            groups,
        })
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.y.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.y.is_empty()
    }

    /// The subset at `indices`.
    pub fn select(&self, indices: &[usize]) -> TrainSet {
        TrainSet {
            schema: self.schema.clone(),
            x: self.x.select(indices),
            y: indices.iter().map(|&i| self.y[i]).collect(),
            groups: indices.iter().map(|&i| self.groups[i]).collect(),
        }
    }
}
