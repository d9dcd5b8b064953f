//! Blends as candidates: per kind, the pair of fitted families whose weighted geometric mean
//! ([`perfcast_predict::blend`]) cross-validates best, judged on the out-of-fold predictions
//! the families' own cross-validation already made, so a blend costs no extra fitting and is
//! judged on the same folds as its parts.
//!
//! The pair and the weight are picked on those predictions, which makes the blend's CV figure
//! slightly optimistic (a pick among [`WEIGHTS`] x pairs); the weights are few and coarse so
//! the pick has little room to fit the folds' noise, and the held-out rows, which neither the
//! parts nor the pick saw, keep the honest figure.

/// Weights of the first part of a pair tried (the second takes the rest).
pub const WEIGHTS: [f64; 3] = [1.0 / 3.0, 0.5, 2.0 / 3.0];

/// Single-row prediction time (us) under which a candidate counts as cheap: every blend has
/// a cheap part (ridge, roofline), so it costs little more than its dearer part. Two neural
/// parts would double the prediction time of the bundle for a fraction of a point.
pub const CHEAP_US: f64 = 1.0;

/// The best blend of a kind's candidates.
#[derive(Clone, Debug, PartialEq)]
pub struct BlendPick {
    /// Indices of the two parts among the candidates given.
    pub parts: [usize; 2],
    /// Weights of the two parts (summing to one).
    pub weights: [f64; 2],
    /// The blend's out-of-fold predictions, ms, in training-row order.
    pub predictions: Vec<f64>,
    /// Their MAPE against the training rows, percent.
    pub cv_mape: f64,
}

/// The pair of `candidates` (each one family's out-of-fold predictions, ms, in the order of
/// `truth`, and whether it is cheap: [`CHEAP_US`]) with at least one cheap part, and the
/// weight, whose geometric mean scores the lowest MAPE against `truth`; `None` without such a
/// pair of usable candidates (every prediction finite and positive).
pub fn best_pair(candidates: &[(&[f64], bool)], truth: &[f64]) -> Option<BlendPick> {
    let usable: Vec<usize> = (0..candidates.len())
        .filter(|&i| {
            let c = candidates[i].0;
            c.len() == truth.len() && c.iter().all(|v| v.is_finite() && *v > 0.0)
        })
        .collect();
    let logs: Vec<Vec<f64>> = candidates
        .iter()
        .map(|(c, _)| c.iter().map(|v| v.ln()).collect())
        .collect();
    let mut best: Option<(f64, [usize; 2], f64)> = None;
    for (n, &a) in usable.iter().enumerate() {
        for &b in &usable[n + 1..] {
            if !(candidates[a].1 || candidates[b].1) {
                continue;
            }
            for w in WEIGHTS {
                let mape = mape_of(&logs[a], &logs[b], w, truth);
                if best.is_none_or(|(m, _, _)| mape < m) {
                    best = Some((mape, [a, b], w));
                }
            }
        }
    }
    let (cv_mape, parts, w) = best?;
    let predictions: Vec<f64> = logs[parts[0]]
        .iter()
        .zip(&logs[parts[1]])
        .map(|(a, b)| (w * a + (1.0 - w) * b).exp())
        .collect();
    Some(BlendPick {
        parts,
        weights: [w, 1.0 - w],
        predictions,
        cv_mape,
    })
}

/// MAPE (percent) of `exp(w a + (1 - w) b)` against `truth`.
fn mape_of(a: &[f64], b: &[f64], w: f64, truth: &[f64]) -> f64 {
    let sum: f64 = a
        .iter()
        .zip(b)
        .zip(truth)
        .map(|((a, b), t)| ((w * a + (1.0 - w) * b).exp() / t - 1.0).abs())
        .sum();
    100.0 * sum / truth.len().max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_that_cancel_make_the_pair_and_the_weight_that_cancels_them() {
        let truth: Vec<f64> = (1..=60).map(|i| i as f64).collect();
        // `a` is 20% high on even rows, `b` 20% low on them; both exact elsewhere but for a
        // 30% miss of `c` everywhere.
        let a: Vec<f64> = truth
            .iter()
            .enumerate()
            .map(|(i, t)| if i % 2 == 0 { t * 1.2 } else { *t })
            .collect();
        let b: Vec<f64> = truth
            .iter()
            .enumerate()
            .map(|(i, t)| if i % 2 == 0 { t / 1.2 } else { *t })
            .collect();
        let c: Vec<f64> = truth.iter().map(|t| t * 1.3).collect();
        let pick = best_pair(&[(&c, true), (&a, false), (&b, true)], &truth).unwrap();
        assert_eq!(pick.parts, [1, 2]);
        assert_eq!(pick.weights, [0.5, 0.5]);
        assert!(pick.cv_mape < 1e-9, "{}", pick.cv_mape);
        assert!((pick.predictions[0] - truth[0]).abs() < 1e-9);
        // Without a cheap part the pair is not tried, and the next best blend has `c` in it.
        let pick = best_pair(&[(&c, true), (&a, false), (&b, false)], &truth).unwrap();
        assert_eq!(pick.parts[0], 0);
        assert!(pick.cv_mape > 1.0, "{}", pick.cv_mape);
    }

    #[test]
    fn unusable_candidates_are_skipped_and_one_is_not_a_pair() {
        let truth = [1.0, 2.0, 3.0];
        let good = [1.1, 2.1, 2.9];
        let nan = [1.0, f64::NAN, 3.0];
        let short = [1.0, 2.0];
        assert!(best_pair(&[(&good, true), (&nan, true), (&short, true)], &truth).is_none());
        let other = [0.9, 2.2, 3.3];
        let pick = best_pair(&[(&nan, true), (&good, true), (&other, false)], &truth).unwrap();
        assert_eq!(pick.parts, [1, 2]);
        assert!(best_pair(&[(&good, false), (&other, false)], &truth).is_none());
    }
}
