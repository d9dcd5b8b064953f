//! `blend`: a weighted geometric mean of two or more fitted models of one kind,
//! `exp(sum w_i ln p_i)` with weights summing to one.
//!
//! Models of different families err differently on the same rows (a smooth ridge in log space
//! misses steps a network fits, and the reverse), and in log space an average of two errors that do
//! not move together is smaller than either (docs/accuracy.md#blends). Which parts, and their
//! weights, are chosen by auto-selection from the parts' out-of-fold predictions (perfcast-select),
//! so a blend competes like any other candidate and wins only where it cross-validates better. The
//! geometric mean is the natural mean of positive quantities: it is the arithmetic mean of the log
//! latencies every model predicts in, and scaling every part by the same factor scales the blend by
//! it.

use perfcast_core::Phase;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::features::{FeatureSchema, inference_row_from_training};
use crate::matrix::Matrix;
use crate::regressor::{Regressor, SavedForm, SavedModel, check_tasks};

const MODEL: &str = "blend";

/// Rows a part that is not multi-task predicts together in [`Blend::add_part_logs`] (their
/// rewritten rows stay a small buffer: one of a whole batch would be mapped and faulted in
/// afresh by every call).
const BLOCK: usize = 64;

/// Most parts of a blend: each part adds its prediction time.
pub const MAX_PARTS: usize = 4;

/// The saved form: the parts' own saved forms and their weights.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavedBlend {
    /// Weight of each part's log prediction; positive, summing to one.
    pub weights: Vec<f64>,
    /// The parts, each a model of the blend's kind (none of them a blend).
    pub parts: Vec<SavedModel>,
}

impl SavedForm for SavedBlend {
    fn check_form(&self) -> Result<()> {
        if !(2..=MAX_PARTS).contains(&self.parts.len()) {
            return Err(Error::InvalidData(format!(
                "a blend has 2 to {MAX_PARTS} parts, got {}",
                self.parts.len()
            )));
        }
        if self.weights.len() != self.parts.len() {
            return Err(Error::InvalidData(format!(
                "a blend of {} parts has {} weights",
                self.parts.len(),
                self.weights.len()
            )));
        }
        if let Some(w) = self.weights.iter().find(|w| !(w.is_finite() && **w > 0.0)) {
            return Err(Error::InvalidData(format!(
                "blend weights must be positive, got {w}"
            )));
        }
        let sum: f64 = self.weights.iter().sum();
        if (sum - 1.0).abs() > 1e-9 {
            return Err(Error::InvalidData(format!(
                "blend weights must sum to 1, got {sum}"
            )));
        }
        for part in &self.parts {
            if part.tag() == MODEL {
                return Err(Error::InvalidData(
                    "a blend's part is itself a blend".into(),
                ));
            }
            part.check()?;
        }
        Ok(())
    }

    fn into_regressor(self) -> Box<dyn Regressor> {
        let parts: Vec<Box<dyn Regressor>> = self
            .parts
            .into_iter()
            .map(SavedModel::into_regressor)
            .collect();
        Box::new(Blend {
            weights: self.weights,
            multi_task: parts.iter().any(|p| p.multi_task()),
            extended: crate::device_features::is_extended(parts[0].schema()),
            parts,
        })
    }
}

/// A fitted blend: [`SavedBlend`] with its parts ready to predict.
#[derive(Debug)]
pub struct Blend {
    weights: Vec<f64>,
    parts: Vec<Box<dyn Regressor>>,
    /// Any part reads the training-phase row whatever the phase: the blend then answers
    /// through [`Regressor::predict_tasks`], which every part takes.
    multi_task: bool,
    /// The parts read cross-device rows (decided once: the check builds schemas).
    extended: bool,
}

impl Blend {
    /// The blend of `parts` under `weights` (positive, summing to one), every part fitted on
    /// the same schema.
    pub fn new(parts: Vec<Box<dyn Regressor>>, weights: Vec<f64>) -> Result<Blend> {
        let saved = SavedBlend {
            weights,
            parts: parts.iter().map(|p| p.to_saved()).collect(),
        };
        saved.check_form()?;
        let schema = parts[0].schema();
        if let Some(p) = parts.iter().find(|p| p.schema() != schema) {
            return Err(Error::InvalidData(format!(
                "blend parts disagree on the schema: {} and {} read different `{}` rows",
                parts[0].name(),
                p.name(),
                schema.kind
            )));
        }
        Ok(Blend {
            weights: saved.weights,
            multi_task: parts.iter().any(|p| p.multi_task()),
            extended: crate::device_features::is_extended(schema),
            parts,
        })
    }

    /// The parts and their weights, in order.
    pub fn parts_dyn(&self) -> impl Iterator<Item = (&dyn Regressor, f64)> + '_ {
        self.parts
            .iter()
            .zip(&self.weights)
            .map(|(p, w)| (p.as_ref(), *w))
    }

    /// The first part that is a `T`: its index, the part and its weight.
    pub fn first_part<T: 'static>(&self) -> Option<(usize, &T, f64)> {
        self.parts_dyn().enumerate().find_map(|(i, (p, w))| {
            let any: &dyn std::any::Any = p;
            Some((i, any.downcast_ref::<T>()?, w))
        })
    }

    /// Adds `w ln p` of every part but `skip` to `logs`, one per row of `rows` (training-phase
    /// rows asked for in `phases`, as [`Regressor::predict_tasks`] takes them), in part order:
    /// multi-task parts read the rows as given; the others each row in its own phase, rewritten
    /// from the training-phase row ([`inference_row_from_training`]: the same bits as building
    /// it, at a fraction of the cost of [`crate::features::row_in_phase`]) [`BLOCK`] rows at a time.
    pub fn add_part_logs(
        &self,
        rows: &[f64],
        phases: &[Phase],
        skip: Option<usize>,
        logs: &mut [f64],
    ) -> Result<()> {
        let width = check_tasks(self.schema(), rows.len(), phases.len(), logs.len())?;
        let extended = self.extended;
        let kind = self.schema().kind;
        let (mut own, mut scratch) = (Vec::new(), Vec::new());
        for (j, (part, w)) in self.parts_dyn().enumerate() {
            if Some(j) == skip {
                continue;
            }
            for (b, (block, ph)) in rows
                .chunks(BLOCK * width)
                .zip(phases.chunks(BLOCK))
                .enumerate()
            {
                scratch.clear();
                scratch.resize(ph.len(), 0.0);
                if part.multi_task() || extended {
                    // (An extended row's rewrite needs the whole device block: the default.)
                    part.predict_tasks(block, ph, &mut scratch)?;
                } else {
                    own.clear();
                    for (x, phase) in block.chunks_exact(width).zip(ph) {
                        match phase {
                            Phase::Training => own.extend_from_slice(x),
                            Phase::Inference => inference_row_from_training(kind, x, &mut own),
                        }
                    }
                    part.predict_rows(&own, &mut scratch)?;
                }
                for (l, p) in logs[b * BLOCK..].iter_mut().zip(&scratch) {
                    *l += w * p.ln();
                }
            }
        }
        Ok(())
    }

    /// The parts' family names and weights, in order.
    pub fn parts(&self) -> impl Iterator<Item = (&'static str, f64)> + '_ {
        self.parts
            .iter()
            .zip(&self.weights)
            .map(|(p, w)| (p.name(), *w))
    }

    /// `out[i] = exp(sum_j w_j ln p_j[i])`, each part's predictions written by `each` into a
    /// scratch buffer (the first straight into `out`'s logs).
    fn combine(
        &self,
        out: &mut [f64],
        mut each: impl FnMut(&dyn Regressor, &mut [f64]) -> Result<()>,
    ) -> Result<()> {
        let mut scratch = vec![0.0; out.len()];
        for (j, (part, w)) in self.parts.iter().zip(&self.weights).enumerate() {
            let dst: &mut [f64] = if j == 0 { out } else { &mut scratch };
            each(part.as_ref(), dst)?;
            if j == 0 {
                dst.iter_mut().for_each(|v| *v = w * v.ln());
            } else {
                out.iter_mut()
                    .zip(&scratch)
                    .for_each(|(o, v)| *o += w * v.ln());
            }
        }
        out.iter_mut().for_each(|v| *v = v.exp());
        Ok(())
    }
}

impl Regressor for Blend {
    fn name(&self) -> &'static str {
        MODEL
    }

    fn schema(&self) -> &FeatureSchema {
        self.parts[0].schema()
    }

    fn predict_row(&self, x: &[f64]) -> Result<f64> {
        let mut log = 0.0;
        for (part, w) in self.parts.iter().zip(&self.weights) {
            log += w * part.predict_row(x)?.ln();
        }
        Ok(log.exp())
    }

    fn predict(&self, x: &Matrix) -> Result<Vec<f64>> {
        let mut out = vec![0.0; x.rows()];
        self.combine(&mut out, |part, dst| {
            dst.copy_from_slice(&part.predict(x)?);
            Ok(())
        })?;
        Ok(out)
    }

    fn predict_rows(&self, rows: &[f64], out: &mut [f64]) -> Result<()> {
        self.combine(out, |part, dst| part.predict_rows(rows, dst))
    }

    fn multi_task(&self) -> bool {
        self.multi_task
    }

    fn predict_tasks(&self, rows: &[f64], phases: &[Phase], out: &mut [f64]) -> Result<()> {
        out.fill(0.0);
        self.add_part_logs(rows, phases, None, out)?;
        out.iter_mut().for_each(|v| *v = v.exp());
        Ok(())
    }

    fn size_bytes(&self) -> usize {
        self.parts.iter().map(|p| p.size_bytes()).sum()
    }

    fn to_saved(&self) -> SavedModel {
        SavedModel::new(
            MODEL,
            SavedBlend {
                weights: self.weights.clone(),
                parts: self.parts.iter().map(|p| p.to_saved()).collect(),
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ridge::FittedRidge;

    /// A degree-1 ridge on the first column alone: `exp(b + a ln(1 + x0))` ms.
    fn ridge(schema: &FeatureSchema, a: f64, b: f64) -> Box<dyn Regressor> {
        Box::new(FittedRidge {
            schema: schema.clone(),
            scaler: crate::regressor::LogStandardiser {
                mean: vec![0.0; schema.len()],
                inv_std: vec![1.0; schema.len()],
            },
            active: vec![0],
            degree: 1,
            intercept: b,
            weights: vec![a],
            log_bounds: None,
        })
    }

    #[test]
    fn a_blend_is_the_weighted_geometric_mean_of_its_parts_on_every_path() {
        let schema = FeatureSchema::for_kind(perfcast_core::ModuleKind::Relu);
        let a = ridge(&schema, 0.5, 0.0);
        let b = ridge(&schema, 1.5, 1.0);
        let rows: Vec<Vec<f64>> = (0..5)
            .map(|i| {
                let mut r = vec![1.0; schema.len()];
                r[0] = 10f64.powi(i);
                r
            })
            .collect();
        let x = Matrix::from_vec(rows.len(), schema.len(), rows.concat());
        let (pa, pb) = (a.predict(&x).unwrap(), b.predict(&x).unwrap());
        let blend = Blend::new(vec![a, b], vec![0.25, 0.75]).unwrap();
        let want: Vec<f64> = pa
            .iter()
            .zip(&pb)
            .map(|(a, b)| (0.25 * a.ln() + 0.75 * b.ln()).exp())
            .collect();
        let flat: Vec<f64> = rows.concat();
        let mut batch = vec![0.0; rows.len()];
        blend.predict_rows(&flat, &mut batch).unwrap();
        for (i, w) in want.iter().enumerate() {
            let one = blend.predict_row(&rows[i]).unwrap();
            assert!((one / w - 1.0).abs() < 1e-12, "row {i}: {one} vs {w}");
            assert!(
                (batch[i] / w - 1.0).abs() < 1e-12,
                "row {i}: {} vs {w}",
                batch[i]
            );
        }
        // Between its parts, and the saved form predicts the same after a round trip.
        assert!(
            want.iter()
                .zip(pa.iter().zip(&pb))
                .all(|(w, (a, b))| { w >= &a.min(*b) && w <= &a.max(*b) })
        );
        let json = serde_json::to_string(&blend.to_saved()).unwrap();
        let back: SavedModel = serde_json::from_str(&json).unwrap();
        back.check().unwrap();
        let back = back.into_regressor();
        assert_eq!(back.name(), "blend");
        assert_eq!(back.predict(&x).unwrap(), blend.predict(&x).unwrap());
    }

    #[test]
    fn malformed_blends_are_refused_naming_the_fault() {
        let schema = FeatureSchema::for_kind(perfcast_core::ModuleKind::Relu);
        let parts = || vec![ridge(&schema, 1.0, 0.0), ridge(&schema, 2.0, 0.0)];
        let err = |r: Result<Blend>| r.unwrap_err().to_string();
        assert!(err(Blend::new(parts(), vec![0.5, 0.6])).contains("sum to 1, got 1.1"));
        assert!(err(Blend::new(parts(), vec![1.5, -0.5])).contains("positive, got -0.5"));
        assert!(err(Blend::new(parts(), vec![1.0])).contains("2 parts has 1 weights"));
        let one = parts().into_iter().take(1).collect();
        assert!(err(Blend::new(one, vec![1.0])).contains("2 to 4 parts, got 1"));
        let other = FeatureSchema::for_kind(perfcast_core::ModuleKind::Gelu);
        let mixed = vec![ridge(&schema, 1.0, 0.0), ridge(&other, 1.0, 0.0)];
        assert!(err(Blend::new(mixed, vec![0.5, 0.5])).contains("disagree on the schema"));
        // A nested blend in a file is refused at load.
        let inner = Blend::new(parts(), vec![0.5, 0.5]).unwrap().to_saved();
        let nested = SavedBlend {
            weights: vec![0.5, 0.5],
            parts: vec![inner, ridge(&schema, 1.0, 0.0).to_saved()],
        };
        assert!(
            nested
                .check_form()
                .unwrap_err()
                .to_string()
                .contains("itself a blend")
        );
    }
}
