//! The analytic roofline model: `latency = max(work / (e_c · peak), bytes / (e_m · bandwidth)) + overhead`.
//!
//! Peak FLOP/s and bandwidth come from the device spec (features `dev_peak_gflops`,
//! `dev_bandwidth_gbs`); the compute and memory efficiencies `e_c`, `e_m` and the fixed
//! per-call overhead are fitted per module kind and per phase (perfcast-models'
//! `RooflineParams`). Three numbers per phase: tiny, interpretable, and the fallback for kinds
//! or devices no data covers.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::features::FeatureSchema;
use crate::regressor::{Regressor, SavedModel, check_width};

/// Fitted efficiencies of one phase.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Efficiencies {
    /// Share of peak FLOP/s reached.
    pub compute: f64,
    /// Share of peak bandwidth reached.
    pub memory: f64,
    /// Fixed cost per call, ms.
    pub overhead_ms: f64,
}

/// Fitted roofline model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FittedRoofline {
    schema: FeatureSchema,
    /// Indices of work_flops, work_bytes, dev_peak_gflops, dev_bandwidth_gbs, training.
    idx: [usize; 5],
    /// Efficiencies for inference rows.
    pub inference: Efficiencies,
    /// Efficiencies for training rows.
    pub training: Efficiencies,
}

/// Where `work_flops`, `work_bytes`, `dev_peak_gflops`, `dev_bandwidth_gbs` and `training`
/// sit in `schema`.
pub fn indices(schema: &FeatureSchema) -> Result<[usize; 5]> {
    let mut idx = [0; 5];
    for (slot, name) in idx.iter_mut().zip([
        "work_flops",
        "work_bytes",
        "dev_peak_gflops",
        "dev_bandwidth_gbs",
        "training",
    ]) {
        *slot = schema.index(name).ok_or_else(|| {
            Error::InvalidData(format!("the roofline model needs feature `{name}`"))
        })?;
    }
    Ok(idx)
}

/// The roofline time (ms) of `flops` and `bytes` on a device of `peak_gflops` and `bw_gbs`.
pub fn predict(e: &Efficiencies, flops: f64, bytes: f64, peak_gflops: f64, bw_gbs: f64) -> f64 {
    let compute_ms = flops / (e.compute * peak_gflops * 1e6);
    let memory_ms = bytes / (e.memory * bw_gbs * 1e6);
    compute_ms.max(memory_ms) + e.overhead_ms
}

impl FittedRoofline {
    /// Column indices inside the schema, and finite, non-negative efficiencies and overheads.
    pub fn check(&self) -> Result<()> {
        if self.idx.iter().any(|&i| i >= self.schema.len()) {
            return Err(Error::InvalidData(
                "roofline column index outside its schema".into(),
            ));
        }
        for e in [&self.inference, &self.training] {
            if [e.compute, e.memory, e.overhead_ms]
                .iter()
                .any(|v| !v.is_finite() || *v < 0.0)
            {
                return Err(Error::InvalidData(format!(
                    "roofline efficiencies must be finite and non-negative, got {e:?}"
                )));
            }
        }
        Ok(())
    }

    /// The model of `schema`'s rows with these efficiencies; errors when the schema lacks a
    /// column the roofline reads.
    pub fn new(
        schema: FeatureSchema,
        inference: Efficiencies,
        training: Efficiencies,
    ) -> Result<FittedRoofline> {
        Ok(FittedRoofline {
            idx: indices(&schema)?,
            schema,
            inference,
            training,
        })
    }
}

impl Regressor for FittedRoofline {
    fn name(&self) -> &'static str {
        "roofline"
    }

    fn schema(&self) -> &FeatureSchema {
        &self.schema
    }

    fn predict_row(&self, x: &[f64]) -> Result<f64> {
        check_width(&self.schema, x.len())?;
        let e = if x[self.idx[4]] > 0.5 {
            &self.training
        } else {
            &self.inference
        };
        Ok(predict(
            e,
            x[self.idx[0]],
            x[self.idx[1]],
            x[self.idx[2]],
            x[self.idx[3]],
        ))
    }

    fn size_bytes(&self) -> usize {
        6 * 8 + 5 * 8
    }

    fn to_saved(&self) -> SavedModel {
        SavedModel::new("roofline", self.clone())
    }
}

impl crate::regressor::SavedForm for FittedRoofline {
    fn check_form(&self) -> Result<()> {
        FittedRoofline::check(self)
    }

    fn into_regressor(self) -> Box<dyn Regressor> {
        Box::new(self)
    }
}
