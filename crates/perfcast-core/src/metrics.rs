//! Accuracy metrics shared by every model and report.

use serde::{Deserialize, Serialize};

/// Accuracy of predictions against measurements (both positive, same unit).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Number of pairs.
    pub n: usize,
    /// Mean absolute percentage error, in percent.
    pub mape: f64,
    /// Root mean squared error, in the unit of the data (ms).
    pub rmse: f64,
    /// Coefficient of determination on the raw values.
    pub r2: f64,
    /// Coefficient of determination on log10 values (latencies span decades).
    pub r2_log: f64,
    /// Share of predictions within ±10% of the measurement (nn-Meter's accuracy), in percent.
    pub within_10: f64,
    /// Median absolute percentage error, in percent.
    pub p50_ape: f64,
    /// 95th percentile absolute percentage error, in percent.
    pub p95_ape: f64,
}

fn r2(pred: &[f64], truth: &[f64]) -> f64 {
    let n = truth.len() as f64;
    let mean = truth.iter().sum::<f64>() / n;
    let ss_tot: f64 = truth.iter().map(|t| (t - mean).powi(2)).sum();
    let ss_res: f64 = pred.iter().zip(truth).map(|(p, t)| (t - p).powi(2)).sum();
    if ss_tot > 0.0 {
        1.0 - ss_res / ss_tot
    } else {
        f64::NAN
    }
}

fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

impl Metrics {
    /// Metrics of `pred` against `truth`. Returns `None` for empty input or mismatched lengths.
    pub fn compute(pred: &[f64], truth: &[f64]) -> Option<Metrics> {
        if pred.is_empty() || pred.len() != truth.len() {
            return None;
        }
        let n = pred.len();
        let mut ape: Vec<f64> = pred
            .iter()
            .zip(truth)
            .map(|(p, t)| 100.0 * (p - t).abs() / t.abs().max(f64::MIN_POSITIVE))
            .collect();
        let mape = ape.iter().sum::<f64>() / n as f64;
        let within_10 = 100.0 * ape.iter().filter(|&&a| a <= 10.0).count() as f64 / n as f64;
        ape.sort_by(f64::total_cmp);
        let rmse = (pred
            .iter()
            .zip(truth)
            .map(|(p, t)| (p - t).powi(2))
            .sum::<f64>()
            / n as f64)
            .sqrt();
        let lp: Vec<f64> = pred
            .iter()
            .map(|v| v.max(f64::MIN_POSITIVE).log10())
            .collect();
        let lt: Vec<f64> = truth
            .iter()
            .map(|v| v.max(f64::MIN_POSITIVE).log10())
            .collect();
        Some(Metrics {
            n,
            mape,
            rmse,
            r2: r2(pred, truth),
            r2_log: r2(&lp, &lt),
            within_10,
            p50_ape: quantile_sorted(&ape, 0.5),
            p95_ape: quantile_sorted(&ape, 0.95),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perfect_predictions() {
        let t = [1.0, 2.0, 4.0];
        let m = Metrics::compute(&t, &t).unwrap();
        assert_eq!(m.mape, 0.0);
        assert_eq!(m.rmse, 0.0);
        assert_eq!(m.r2, 1.0);
        assert_eq!(m.within_10, 100.0);
    }

    #[test]
    fn known_errors() {
        // 5% over, 20% under, exact.
        let m = Metrics::compute(&[1.05, 1.6, 3.0], &[1.0, 2.0, 3.0]).unwrap();
        assert!((m.mape - 25.0 / 3.0).abs() < 1e-9);
        assert!((m.within_10 - 200.0 / 3.0).abs() < 1e-9);
        assert!((m.p50_ape - 5.0).abs() < 1e-9);
        assert!((m.rmse - ((0.0025 + 0.16) / 3.0f64).sqrt()).abs() < 1e-12);
        assert!(Metrics::compute(&[], &[]).is_none());
        assert!(Metrics::compute(&[1.0], &[1.0, 2.0]).is_none());
    }
}
