//! Residual stacking, after linfa's `composing` (one model fitted on what another misses):
//! a base estimate of each row, and a model of the rest. Latencies are positive and span
//! decades, so the rest is a ratio, a difference in log space: the residual model is fitted
//! on `latency / base` ([`ratios`]) and the stack predicts `base * residual` ([`compose`]).
//!
//! Three families stack this way, each with its own base:
//! - the cross-device wrapper (`device_features`): the base is the row's roofline time on its
//!   device, and the inner model learns the inverse of the achieved efficiency;
//! - `ridge-trees` (`stack`): per-algorithm ridge corrections learn the ratio to the shared
//!   ridge, and the trees the ratio to the corrected ridge;
//! - `trees` with a baseline (`trees`): boosting starts each row from `ln base` and adds one
//!   leaf per tree, the same composition in log space ([`log_start`]); its sums stay in log
//!   space, as saved ensembles were fitted and are predicted.
//!
//! The saved forms keep their own fields (bundles stay byte-compatible); what they share is
//! this arithmetic, so fitting and prediction cannot drift apart.

/// The residual of `latency` over `base`: what the residual model is fitted on.
#[inline]
pub fn ratio(latency: f64, base: f64) -> f64 {
    latency / base
}

/// Every latency of `y` over its row's `base`.
pub fn ratios(y: &[f64], base: &[f64]) -> Vec<f64> {
    y.iter().zip(base).map(|(y, b)| ratio(*y, *b)).collect()
}

/// A prediction of the stack: the base times the residual model's ratio.
#[inline]
pub fn compose(base: f64, residual: f64) -> f64 {
    base * residual
}

/// Where boosting starts a row in log space: `ln base` (the trees then add `ln residual`).
#[inline]
pub fn log_start(base: f64) -> f64 {
    base.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ratio_composed_with_its_base_is_the_latency() {
        for (y, b) in [(3.0, 1.5), (0.02, 0.5), (1e-3, 1e-3)] {
            assert!((compose(b, ratio(y, b)) / y - 1.0).abs() < 1e-15);
            assert!(((log_start(b) + ratio(y, b).ln()).exp() / y - 1.0).abs() < 1e-12);
        }
        assert_eq!(ratios(&[2.0, 9.0], &[4.0, 3.0]), [0.5, 3.0]);
    }
}
