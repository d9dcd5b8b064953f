//! Network composition beyond a plain sum of layer predictions (PerfNetV2's pre + Σ + post).
//!
//! Layers timed alone miss costs a whole network pays, and include costs it does not: a network
//! run has per-run setup and a loss, dispatch and allocation between layers, one backward pass
//! over the whole graph instead of one per layer, and in training the optimiser update over every
//! parameter. [`PhaseCosts`] models a run as
//!
//! ```text
//! total = per_run_ms + layer_scale * Σ layer predictions + per_layer_ms * layers
//!         + update_ms_per_mparam * parameters / 1e6          (training only)
//! ```
//!
//! with the terms fitted per phase from measured networks ([`fit_phase`]) by least squares on
//! relative error, pulled gently towards the plain sum (scale 1, other terms 0) so a few
//! calibration runs cannot produce wild constants. The terms are kept apart in the bundle and in
//! every prediction ([`Composed`]), so a user sees what the host costs add.

use perfcast_core::{Network, Phase, features};
use serde::{Deserialize, Serialize};

/// The fitted host-cost terms of one phase.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhaseCosts {
    /// Fixed cost per run (setup, input, loss, output), ms.
    pub per_run_ms: f64,
    /// Cost per layer that isolated layer timings miss (negative when isolated timings carry a
    /// per-call cost a network pays once, such as a backward pass per layer), ms.
    pub per_layer_ms: f64,
    /// Factor on the sum of layer predictions (cache effects between layers).
    pub layer_scale: f64,
    /// Optimiser update per million parameters, ms (training; 0 for inference).
    pub update_ms_per_mparam: f64,
    /// Calibration runs the terms were fitted on.
    pub runs: usize,
    /// MAPE (%) of the plain sum on the calibration runs.
    pub plain_mape: f64,
    /// MAPE (%) of the composed prediction on the calibration runs (in-sample).
    pub fit_mape: f64,
}

/// Host-cost terms per phase, and what they were fitted on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostCosts {
    /// Terms for inference runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inference: Option<PhaseCosts>,
    /// Terms for training steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub training: Option<PhaseCosts>,
    /// Calibration networks (names with resolution), for the record.
    pub networks: Vec<String>,
    /// Threads the calibration runs used.
    pub threads: usize,
}

impl HostCosts {
    /// The terms of a phase, if calibrated.
    pub fn phase(&self, phase: Phase) -> Option<&PhaseCosts> {
        match phase {
            Phase::Inference => self.inference.as_ref(),
            Phase::Training => self.training.as_ref(),
        }
    }
}

/// What a network run is made of, besides its layers' predictions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RunShape {
    /// Sum of the layers' predicted latencies, ms.
    pub layer_sum_ms: f64,
    /// Layers per forward pass.
    pub layers: usize,
    /// Trainable parameters.
    pub params: usize,
}

/// A composed network prediction, term by term.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Composed {
    /// Sum of the layers' predictions, ms.
    pub layer_sum_ms: f64,
    /// Per-run cost, ms.
    pub per_run_ms: f64,
    /// Layer-scale adjustment `(layer_scale - 1) * layer_sum_ms`, ms.
    pub scale_ms: f64,
    /// Per-layer costs `per_layer_ms * layers`, ms.
    pub dispatch_ms: f64,
    /// Optimiser update, ms.
    pub update_ms: f64,
    /// The composed total, ms.
    pub total_ms: f64,
}

/// The composed total never falls below this share of the plain sum: terms fitted on other
/// networks must not cancel a large network's layers.
const FLOOR_SHARE: f64 = 0.5;

impl PhaseCosts {
    /// Composes a run from its layers' sum and shape.
    pub fn compose(&self, run: &RunShape) -> Composed {
        let scale_ms = (self.layer_scale - 1.0) * run.layer_sum_ms;
        let dispatch_ms = self.per_layer_ms * run.layers as f64;
        let update_ms = self.update_ms_per_mparam * run.params as f64 / 1e6;
        let total = run.layer_sum_ms + self.per_run_ms + scale_ms + dispatch_ms + update_ms;
        Composed {
            layer_sum_ms: run.layer_sum_ms,
            per_run_ms: self.per_run_ms,
            scale_ms,
            dispatch_ms,
            update_ms,
            total_ms: total.max(FLOOR_SHARE * run.layer_sum_ms),
        }
    }
}

impl RunShape {
    /// The shape of a run of `network` whose layers' predictions sum to `layer_sum_ms`.
    pub fn of(network: &Network, layer_sum_ms: f64) -> RunShape {
        RunShape {
            layer_sum_ms,
            layers: network.layers.len(),
            params: network
                .layers
                .iter()
                .map(|l| features::derive(&l.spec, 1).params)
                .sum::<f64>() as usize,
        }
    }
}

/// A plain sum, as a [`Composed`] with no host terms.
pub fn plain(run: &RunShape) -> Composed {
    Composed {
        layer_sum_ms: run.layer_sum_ms,
        per_run_ms: 0.0,
        scale_ms: 0.0,
        dispatch_ms: 0.0,
        update_ms: 0.0,
        total_ms: run.layer_sum_ms,
    }
}

/// Mean absolute percentage error of `predicted` against `measured`.
pub fn mape(predicted: &[f64], measured: &[f64]) -> f64 {
    let n = measured.len().max(1) as f64;
    100.0
        * predicted
            .iter()
            .zip(measured)
            .map(|(p, m)| ((p - m) / m).abs())
            .sum::<f64>()
        / n
}

/// Fits one phase's terms to calibration runs `(shape, measured ms)`.
///
/// Minimises `Σ ((prediction - measured) / measured)^2 + λ Σ_j (w_j (θ_j - prior_j))^2`, where
/// the prior is the plain sum and `w_j` makes each term's penalty unit-free (the term's typical
/// size relative to a typical run); the problem is linear in the terms, so it is solved exactly.
/// Inference has no update term. Needs at least one run per free term.
pub fn fit_phase(
    phase: Phase,
    runs: &[(RunShape, f64)],
    lambda: f64,
) -> Result<PhaseCosts, String> {
    let with_update = phase == Phase::Training;
    let terms = if with_update { 4 } else { 3 };
    if runs.len() < terms {
        return Err(format!(
            "{} calibration run(s) for {phase}; fitting the host-cost terms needs at least {terms}",
            runs.len()
        ));
    }
    for (r, m) in runs {
        if !(m.is_finite() && *m > 0.0 && r.layer_sum_ms.is_finite() && r.layer_sum_ms > 0.0) {
            return Err(format!(
                "a calibration run has measured {m} ms and layer sum {} ms; both must be positive",
                r.layer_sum_ms
            ));
        }
    }
    // Columns: per_run, per_layer, layer_scale, update; each row divided by the measurement.
    let column = |r: &RunShape, j: usize| -> f64 {
        match j {
            0 => 1.0,
            1 => r.layers as f64,
            2 => r.layer_sum_ms,
            _ => r.params as f64 / 1e6,
        }
    };
    let prior = [0.0, 0.0, 1.0, 0.0];
    // Typical column magnitude relative to the measurement: the penalty's unit-free weight.
    let mut weight = [0.0; 4];
    for (j, w) in weight.iter_mut().enumerate().take(terms) {
        let mean_sq = runs
            .iter()
            .map(|(r, m)| (column(r, j) / m).powi(2))
            .sum::<f64>()
            / runs.len() as f64;
        *w = mean_sq.sqrt().max(1e-12);
    }
    let mut ata = [[0.0; 4]; 4];
    let mut atb = [0.0; 4];
    for (r, m) in runs {
        for i in 0..terms {
            let ai = column(r, i) / m;
            atb[i] += ai; // target: measured / measured = 1
            for (j, cell) in ata[i].iter_mut().enumerate().take(terms) {
                *cell += ai * column(r, j) / m;
            }
        }
    }
    let n = runs.len() as f64;
    for j in 0..terms {
        let penalty = lambda * n * weight[j] * weight[j];
        ata[j][j] += penalty;
        atb[j] += penalty * prior[j];
    }
    let theta =
        solve(&ata, &atb, terms).ok_or("the calibration runs do not determine the terms")?;
    let costs = PhaseCosts {
        per_run_ms: theta[0],
        per_layer_ms: theta[1],
        layer_scale: theta[2],
        update_ms_per_mparam: if with_update { theta[3] } else { 0.0 },
        runs: runs.len(),
        plain_mape: 0.0,
        fit_mape: 0.0,
    };
    let measured: Vec<f64> = runs.iter().map(|(_, m)| *m).collect();
    let plain_pred: Vec<f64> = runs.iter().map(|(r, _)| r.layer_sum_ms).collect();
    let fit_pred: Vec<f64> = runs
        .iter()
        .map(|(r, _)| costs.compose(r).total_ms)
        .collect();
    Ok(PhaseCosts {
        plain_mape: mape(&plain_pred, &measured),
        fit_mape: mape(&fit_pred, &measured),
        ..costs
    })
}

/// Solves the first `n` rows and columns of `a x = b` by Gaussian elimination with partial
/// pivoting; `None` when singular.
fn solve(a: &[[f64; 4]; 4], b: &[f64; 4], n: usize) -> Option<[f64; 4]> {
    let mut m = *a;
    let mut v = *b;
    for col in 0..n {
        let pivot = (col..n).max_by(|&i, &j| m[i][col].abs().total_cmp(&m[j][col].abs()))?;
        if m[pivot][col].abs() < 1e-300 {
            return None;
        }
        m.swap(col, pivot);
        v.swap(col, pivot);
        let pivot_row = m[col];
        for row in col + 1..n {
            let f = m[row][col] / pivot_row[col];
            for (cell, p) in m[row][col..n].iter_mut().zip(&pivot_row[col..n]) {
                *cell -= f * p;
            }
            v[row] -= f * v[col];
        }
    }
    let mut x = [0.0; 4];
    for row in (0..n).rev() {
        let s: f64 = (row + 1..n).map(|k| m[row][k] * x[k]).sum();
        x[row] = (v[row] - s) / m[row][row];
    }
    x.iter().all(|x| x.is_finite()).then_some(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(sum: f64, layers: usize, params: usize) -> RunShape {
        RunShape {
            layer_sum_ms: sum,
            layers,
            params,
        }
    }

    #[test]
    fn fit_recovers_known_terms_from_exact_runs() {
        let truth = PhaseCosts {
            per_run_ms: 0.4,
            per_layer_ms: 0.02,
            layer_scale: 1.1,
            update_ms_per_mparam: 3.0,
            runs: 0,
            plain_mape: 0.0,
            fit_mape: 0.0,
        };
        let mut runs = Vec::new();
        for (i, layers) in [8usize, 21, 54, 140].into_iter().enumerate() {
            for sum in [1.0, 5.0, 40.0] {
                let s = shape(sum * (1.0 + i as f64), layers, 100_000 * (i + 1) * (i + 1));
                runs.push((s, truth.compose(&s).total_ms));
            }
        }
        let fit = fit_phase(Phase::Training, &runs, 1e-9).unwrap();
        assert!((fit.per_run_ms - 0.4).abs() < 1e-4, "{fit:?}");
        assert!((fit.per_layer_ms - 0.02).abs() < 1e-5, "{fit:?}");
        assert!((fit.layer_scale - 1.1).abs() < 1e-5, "{fit:?}");
        assert!((fit.update_ms_per_mparam - 3.0).abs() < 1e-3, "{fit:?}");
        assert!(fit.fit_mape < 1e-3 && fit.plain_mape > 5.0, "{fit:?}");
    }

    #[test]
    fn inference_has_no_update_term_and_too_few_runs_is_an_error() {
        let runs: Vec<_> = (1..=5)
            .map(|i| (shape(i as f64, 10 * i, 1000), 1.2 * i as f64 + 0.1))
            .collect();
        let fit = fit_phase(Phase::Inference, &runs, 1e-6).unwrap();
        assert_eq!(fit.update_ms_per_mparam, 0.0);
        assert!(fit.fit_mape < fit.plain_mape);
        let err = fit_phase(Phase::Training, &runs[..2], 1e-6).unwrap_err();
        assert!(err.contains("at least 4"), "{err}");
    }

    #[test]
    fn a_strong_prior_keeps_the_plain_sum() {
        let runs: Vec<_> = (1..=6)
            .map(|i| (shape(i as f64, 5 * i, 10), 2.0 * i as f64))
            .collect();
        let fit = fit_phase(Phase::Inference, &runs, 1e6).unwrap();
        assert!((fit.layer_scale - 1.0).abs() < 1e-3, "{fit:?}");
        assert!(fit.per_run_ms.abs() < 1e-3 && fit.per_layer_ms.abs() < 1e-3);
    }

    #[test]
    fn composition_keeps_its_terms_apart_and_has_a_floor() {
        let costs = PhaseCosts {
            per_run_ms: 1.0,
            per_layer_ms: -0.5,
            layer_scale: 1.0,
            update_ms_per_mparam: 2.0,
            runs: 1,
            plain_mape: 0.0,
            fit_mape: 0.0,
        };
        let c = costs.compose(&shape(10.0, 4, 2_000_000));
        assert_eq!(c.dispatch_ms, -2.0);
        assert_eq!(c.update_ms, 4.0);
        assert!((c.total_ms - 13.0).abs() < 1e-12);
        let floor = costs.compose(&shape(10.0, 100, 0));
        assert_eq!(floor.total_ms, 5.0);
    }
}
