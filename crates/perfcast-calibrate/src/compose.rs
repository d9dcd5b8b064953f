//! Fitting the network host-cost terms (PerfNetV2's pre + Σ + post) from measured networks.
//!
//! The composition itself (the terms, [`PhaseCosts::compose`], a run's [`RunShape`]) is the
//! predictor's (`perfcast_predict::compose`), re-exported here. The terms are fitted per phase
//! from measured networks ([`fit_phase`]) by least squares on relative error, pulled gently
//! towards the plain sum (scale 1, other terms 0) so a few calibration runs cannot produce wild
//! constants.

use perfcast_core::Phase;
pub use perfcast_predict::compose::{
    Composed, FRESH_TENSOR_UPDATE_BYTES, HostCosts, PhaseCosts, RunShape, param_tensors, plain,
    update_terms_ms,
};

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
    fit_phase_with(phase, runs, lambda, None)
}

/// The optimiser update's cost, measured directly: per million parameters in tensors below
/// and at or above a size (the allocator's fresh-mapping size, see `FRESH_TENSOR_UPDATE_BYTES`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct UpdateCosts {
    /// ms per million parameters in tensors below the threshold.
    pub small_ms_per_mparam: f64,
    /// ms per million parameters in tensors at or above it.
    pub large_ms_per_mparam: f64,
    /// ms per million parameters in convolution weights below it (`None`: the small rate).
    pub conv_ms_per_mparam: Option<f64>,
    /// The size threshold, bytes streamed per tensor update.
    pub large_tensor_bytes: f64,
}

impl UpdateCosts {
    /// The update's predicted duration for a run, with the per-sample weight gradients it
    /// prices at the same rates ([`RunShape::with_per_sample_grads`]), ms.
    pub fn ms(&self, run: &RunShape) -> f64 {
        let rates = [
            self.small_ms_per_mparam,
            self.conv_ms_per_mparam.unwrap_or(self.small_ms_per_mparam),
            self.large_ms_per_mparam,
        ];
        let (update, grads) = update_terms_ms(run, rates, self.large_tensor_bytes);
        update + grads
    }
}

/// Fits [`UpdateCosts`] to measured update durations `(run, update ms, step ms)`: least squares
/// on the error relative to the whole step (what a network prediction feels), every rate
/// non-negative. Three rates (other small tensors, small convolution weights, large tensors)
/// where the runs determine them, else two (small, large), else one. `None` without usable
/// rows.
pub fn fit_update(rows: &[(RunShape, f64, f64)], large_tensor_bytes: f64) -> Option<UpdateCosts> {
    // Per row: millions of parameters in (other small, small conv, large) tensors, update, step.
    let rows: Vec<([f64; 3], f64, f64)> = rows
        .iter()
        .filter(|(r, u, t)| r.params > 0 && u.is_finite() && *u > 0.0 && t.is_finite() && *t > 0.0)
        .map(|(r, u, t)| (r.update_split(large_tensor_bytes), *u, *t))
        .collect();
    if rows.is_empty() {
        return None;
    }
    // Least squares over the columns `groups` merges (each group one rate), rows weighted by
    // 1 / step²; `None` when singular or a rate comes out negative.
    let fit = |groups: &[&[usize]]| -> Option<Vec<f64>> {
        let k = groups.len();
        let mut ata = [[0.0; 4]; 4];
        let mut atb = [0.0; 4];
        for (x, u, t) in &rows {
            let w = 1.0 / (t * t);
            let col: Vec<f64> = groups
                .iter()
                .map(|g| g.iter().map(|&j| x[j]).sum())
                .collect();
            for i in 0..k {
                atb[i] += w * col[i] * u;
                for j in 0..k {
                    ata[i][j] += w * col[i] * col[j];
                }
            }
        }
        if (0..k).any(|i| ata[i][i] <= 0.0) {
            return None;
        }
        // Scaled to a unit diagonal, the system must not be near singular: columns the runs
        // mix in fixed proportions do not determine separate rates.
        let d: Vec<f64> = (0..k).map(|i| ata[i][i].sqrt()).collect();
        let mut scaled = [[0.0; 4]; 4];
        let mut rhs = [0.0; 4];
        for i in 0..k {
            rhs[i] = atb[i] / d[i];
            for j in 0..k {
                scaled[i][j] = ata[i][j] / (d[i] * d[j]);
            }
        }
        if det(&scaled, k) < 1e-6 {
            return None;
        }
        let theta = solve(&scaled, &rhs, k)?;
        let rates: Vec<f64> = (0..k).map(|i| theta[i] / d[i]).collect();
        rates
            .iter()
            .all(|v| v.is_finite() && *v >= 0.0)
            .then_some(rates)
    };
    let costs = |small: f64, conv: Option<f64>, large: f64| UpdateCosts {
        small_ms_per_mparam: small,
        large_ms_per_mparam: large,
        conv_ms_per_mparam: conv,
        large_tensor_bytes,
    };
    if let Some(t) = fit(&[&[0], &[1], &[2]]) {
        return Some(costs(t[0], Some(t[1]), t[2]));
    }
    if let Some(t) = fit(&[&[0, 1], &[2]]) {
        return Some(costs(t[0], None, t[1]));
    }
    let t = fit(&[&[0, 1, 2]])?;
    Some(costs(t[0], None, t[0]))
}

/// [`fit_phase`] with the update term fixed when given (measured directly, see
/// [`fit_update`]), so only the other terms are fitted.
pub fn fit_phase_with(
    phase: Phase,
    runs: &[(RunShape, f64)],
    lambda: f64,
    update: Option<&UpdateCosts>,
) -> Result<PhaseCosts, String> {
    let fixed_update = if phase == Phase::Training {
        update
    } else {
        None
    };
    let with_update = phase == Phase::Training && fixed_update.is_none();
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
        // Target: the measured share the fitted terms must explain (all of it, or what the
        // fixed update term leaves).
        let target = 1.0 - fixed_update.map_or(0.0, |u| u.ms(r)) / m;
        for i in 0..terms {
            let ai = column(r, i) / m;
            atb[i] += ai * target;
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
        update_ms_per_mparam: match (with_update, fixed_update) {
            (true, _) => theta[3],
            (false, Some(u)) => u.small_ms_per_mparam,
            (false, None) => 0.0,
        },
        update_large_ms_per_mparam: match (with_update, fixed_update) {
            (true, _) => theta[3],
            (false, Some(u)) => u.large_ms_per_mparam,
            (false, None) => 0.0,
        },
        update_conv_ms_per_mparam: fixed_update.and_then(|u| u.conv_ms_per_mparam),
        large_tensor_bytes: fixed_update
            .map(|u| u.large_tensor_bytes)
            .filter(|b| b.is_finite()),
        input_gbs: None,
        host_floor: None,
        runs: runs.len(),
        plain_mape: 0.0,
        fit_mape: 0.0,
        lambda,
        cv_mape: None,
        cv_plain_mape: None,
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

/// Prior strengths [`fit_phase_cv`] chooses from; the last is, in effect, the plain sum.
pub const LAMBDAS: [f64; 7] = [1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0, 1e6];

/// Fits one phase's terms with the prior strength chosen by leave-one-network-out
/// cross-validation (the folds of [`perfcast_models::split::leave_one_out`]): for each strength in `lambdas`, every network (`groups[i]` names run `i`'s)
/// is predicted by terms fitted on the other networks' runs; the strength with the lowest MAPE
/// wins (ties go to the stronger prior), and the terms are refitted on every run with it.
///
/// With fewer than three networks there is nothing to cross-validate: `fallback` is used.
pub fn fit_phase_cv(
    phase: Phase,
    runs: &[(RunShape, f64)],
    groups: &[String],
    lambdas: &[f64],
    fallback: f64,
    update: Option<&UpdateCosts>,
) -> Result<PhaseCosts, String> {
    let fit = |runs: &[(RunShape, f64)], lambda: f64| fit_phase_with(phase, runs, lambda, update);
    let mut names: Vec<&String> = groups.iter().collect();
    names.sort();
    names.dedup();
    if names.len() < 3 || lambdas.is_empty() {
        return fit(runs, fallback);
    }
    let measured: Vec<f64> = runs.iter().map(|(_, m)| *m).collect();
    let plain_pred: Vec<f64> = runs.iter().map(|(r, _)| r.layer_sum_ms).collect();
    let cv_plain = mape(&plain_pred, &measured);
    // One fold per network, in name order (the pooled MAPE sums in that order).
    let mut folds = perfcast_models::split::leave_one_out(groups);
    folds.sort_by(|a, b| groups[a.1[0]].cmp(&groups[b.1[0]]));
    let mut best: Option<(f64, f64)> = None; // (cv MAPE, lambda)
    for &lambda in lambdas {
        let mut pred = Vec::with_capacity(runs.len());
        let mut truth = Vec::with_capacity(runs.len());
        for (train, test) in &folds {
            let train: Vec<(RunShape, f64)> = train.iter().map(|&i| runs[i].clone()).collect();
            // Too few runs left to fit this strength: it cannot be judged, skip it.
            let Ok(costs) = fit(&train, lambda) else {
                pred.clear();
                break;
            };
            for &i in test {
                let (r, m) = &runs[i];
                pred.push(costs.compose(r).total_ms);
                truth.push(*m);
            }
        }
        if pred.is_empty() {
            continue;
        }
        let cv = mape(&pred, &truth);
        if best.is_none_or(|(b, _)| cv <= b) {
            best = Some((cv, lambda));
        }
    }
    let Some((cv, lambda)) = best else {
        return fit(runs, fallback);
    };
    let costs = fit(runs, lambda)?;
    Ok(PhaseCosts {
        cv_mape: Some(cv),
        cv_plain_mape: Some(cv_plain),
        ..costs
    })
}

/// Determinant of the leading `n x n` block of `a` (`n` up to 3).
fn det(a: &[[f64; 4]; 4], n: usize) -> f64 {
    match n {
        1 => a[0][0],
        2 => a[0][0] * a[1][1] - a[0][1] * a[1][0],
        _ => {
            a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1])
                - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
                + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0])
        }
    }
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
            tensors: vec![params],
            conv_tensors: Vec::new(),
            input_elems: 0,
            batch: 1,
            linears: Vec::new(),
            per_sample_grads: Vec::new(),
        }
    }

    #[test]
    fn fit_recovers_known_terms_from_exact_runs() {
        let truth = PhaseCosts {
            per_run_ms: 0.4,
            per_layer_ms: 0.02,
            layer_scale: 1.1,
            update_ms_per_mparam: 3.0,
            input_gbs: None,
            host_floor: None,
            runs: 0,
            plain_mape: 0.0,
            fit_mape: 0.0,
            update_large_ms_per_mparam: 0.0,
            update_conv_ms_per_mparam: None,
            large_tensor_bytes: None,
            lambda: 0.0,
            cv_mape: None,
            cv_plain_mape: None,
        };
        let mut runs = Vec::new();
        for (i, layers) in [8usize, 21, 54, 140].into_iter().enumerate() {
            for sum in [1.0, 5.0, 40.0] {
                let s = shape(sum * (1.0 + i as f64), layers, 100_000 * (i + 1) * (i + 1));
                let total = truth.compose(&s).total_ms;
                runs.push((s, total));
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
            input_gbs: None,
            host_floor: None,
            runs: 1,
            plain_mape: 0.0,
            fit_mape: 0.0,
            update_large_ms_per_mparam: 0.0,
            update_conv_ms_per_mparam: None,
            large_tensor_bytes: None,
            lambda: 0.0,
            cv_mape: None,
            cv_plain_mape: None,
        };
        let c = costs.compose(&shape(10.0, 4, 2_000_000));
        assert_eq!(c.dispatch_ms, -2.0);
        assert_eq!(c.update_ms, 4.0);
        assert!((c.total_ms - 13.0).abs() < 1e-12);
        let floor = costs.compose(&shape(10.0, 100, 0));
        assert_eq!(floor.total_ms, 5.0);
    }

    #[test]
    fn cross_validation_prefers_the_plain_sum_when_terms_do_not_generalise() {
        // Each network has its own unrelated offset: terms fitted on some do not carry over,
        // so the strongest prior (the plain sum) predicts held-out networks best.
        let mut runs = Vec::new();
        let mut groups = Vec::new();
        for (g, factor) in [(0, 1.3), (1, 0.75), (2, 1.2), (3, 0.8)] {
            for sum in [1.0, 2.0, 4.0] {
                runs.push((shape(sum, 10 + 7 * g, 1000), sum * factor));
                groups.push(format!("net{g}"));
            }
        }
        let fit = fit_phase_cv(Phase::Inference, &runs, &groups, &LAMBDAS, 0.01, None).unwrap();
        assert_eq!(fit.lambda, 1e6, "{fit:?}");
        assert!(
            fit.cv_mape.unwrap() <= fit.cv_plain_mape.unwrap() + 0.5,
            "{fit:?}"
        );

        // A shared per-run cost does generalise: a weak prior wins and the CV error is small.
        let runs: Vec<_> = runs
            .iter()
            .map(|(r, _)| (r.clone(), r.layer_sum_ms + 0.5))
            .collect();
        let fit = fit_phase_cv(Phase::Inference, &runs, &groups, &LAMBDAS, 0.01, None).unwrap();
        assert!(fit.lambda <= 0.1, "{fit:?}");
        assert!(
            fit.cv_mape.unwrap() < 1.0 && fit.cv_plain_mape.unwrap() > 10.0,
            "{fit:?}"
        );
    }

    #[test]
    fn a_measured_update_term_is_kept_and_the_rest_is_fitted() {
        // Tensors of 1M parameters (12 MB per update) and 0.1M: large above 4 MB.
        let run = |big: usize, small: usize| RunShape {
            layer_sum_ms: 10.0,
            layers: 10,
            params: big * 1_000_000 + small * 100_000,
            tensors: [vec![1_000_000; big], vec![100_000; small]].concat(),
            conv_tensors: Vec::new(),
            input_elems: 0,
            batch: 1,
            linears: Vec::new(),
            per_sample_grads: Vec::new(),
        };
        let truth = |r: &RunShape| {
            let large = r.large_params(4e6) as f64 / 1e6;
            3.0 * large + 1.0 * (r.params as f64 / 1e6 - large)
        };
        let rows: Vec<_> = [(2, 5), (10, 1), (1, 30), (0, 8)]
            .iter()
            .map(|&(b, s)| {
                let r = run(b, s);
                let u = truth(&r);
                (r, u, 100.0)
            })
            .collect();
        let u = fit_update(&rows, 4e6).unwrap();
        assert!((u.large_ms_per_mparam - 3.0).abs() < 1e-9, "{u:?}");
        assert!((u.small_ms_per_mparam - 1.0).abs() < 1e-9, "{u:?}");
        assert_eq!(fit_update(&[], 4e6), None);

        let runs: Vec<_> = (1..=6)
            .map(|i| {
                let s = shape(10.0 * i as f64, 20, 1_000_000 * i);
                let total = 1.1 * s.layer_sum_ms + u.ms(&s);
                (s, total)
            })
            .collect();
        let fit = fit_phase_with(Phase::Training, &runs, 1e-9, Some(&u)).unwrap();
        assert_eq!(fit.update_large_ms_per_mparam, u.large_ms_per_mparam);
        assert!((fit.layer_scale - 1.1).abs() < 1e-3, "{fit:?}");
        assert!(fit.fit_mape < 0.1, "{fit:?}");
    }

    #[test]
    fn convolution_weights_get_their_own_rate_where_the_runs_separate_them() {
        // Linear tensors of 0.1M parameters, conv weights of 0.2M, large ones of 1M (large
        // above 4 MB of update bytes); 0.8, 3.0 and 2.5 ms per million.
        let run = |lin: usize, conv: usize, big: usize| RunShape {
            layer_sum_ms: 10.0,
            layers: 10,
            params: lin * 100_000 + conv * 200_000 + big * 1_000_000,
            tensors: [
                vec![100_000; lin],
                vec![200_000; conv],
                vec![1_000_000; big],
            ]
            .concat(),
            conv_tensors: vec![200_000; conv],
            input_elems: 0,
            batch: 1,
            linears: Vec::new(),
            per_sample_grads: Vec::new(),
        };
        let truth = UpdateCosts {
            small_ms_per_mparam: 0.8,
            large_ms_per_mparam: 2.5,
            conv_ms_per_mparam: Some(3.0),
            large_tensor_bytes: 4e6,
        };
        let measured = |nets: &[(usize, usize, usize)]| -> Vec<(RunShape, f64, f64)> {
            nets.iter()
                .map(|&(l, c, b)| {
                    let r = run(l, c, b);
                    let u = truth.ms(&r);
                    (r, u, 100.0)
                })
                .collect()
        };
        // A transformer, a ResNet, a VGG and a small net, as the calibration networks mix them.
        let rows = measured(&[(40, 0, 0), (5, 50, 0), (20, 30, 10), (2, 1, 0)]);
        let u = fit_update(&rows, 4e6).unwrap();
        assert!((u.small_ms_per_mparam - 0.8).abs() < 1e-9, "{u:?}");
        assert!((u.conv_ms_per_mparam.unwrap() - 3.0).abs() < 1e-9, "{u:?}");
        assert!((u.large_ms_per_mparam - 2.5).abs() < 1e-9, "{u:?}");
        // Runs that hold conv and other small tensors in one proportion cannot tell them
        // apart: two rates, the conv weights at the small one.
        let u = fit_update(&measured(&[(2, 1, 0), (4, 2, 3), (6, 3, 1)]), 4e6).unwrap();
        assert_eq!(u.conv_ms_per_mparam, None, "{u:?}");
        let composed = PhaseCosts {
            update_ms_per_mparam: 0.8,
            update_large_ms_per_mparam: 2.5,
            update_conv_ms_per_mparam: Some(3.0),
            large_tensor_bytes: Some(4e6),
            ..PhaseCosts::gpu_defaults(&perfcast_core::testing::cpu_device())
        };
        for (r, u, _) in &rows {
            assert!((composed.update_ms(r) - u).abs() < 1e-9);
        }
    }
}
