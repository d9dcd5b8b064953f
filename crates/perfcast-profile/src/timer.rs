//! The timing harness: warm-up, adaptive repetitions until the median is stable, robust stats.
//!
//! Calls shorter than [`TimingConfig::min_sample`] are grouped so one sample lasts at least that
//! long (timer resolution and loop overhead then stay negligible); a sample's value is the mean
//! call time of its group. Repetitions stop when the median's relative standard error falls
//! below the target, or at the time or repetition cap.

use std::time::{Duration, Instant};

use perfcast_data::Timing;
use perfcast_data::summary::quantile;
use serde::{Deserialize, Serialize};

/// How long and how often to time one configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TimingConfig {
    /// Untimed warm-up, seconds; default 0.05 (at least two calls are always made).
    pub warmup_s: f64,
    /// Samples before the stopping rule is consulted; default 7.
    pub min_samples: u32,
    /// Most samples; default 1000.
    pub max_samples: u32,
    /// Stop when the median's relative standard error is below this; default 0.005.
    pub target_rel_error: f64,
    /// Time cap for the timed samples, seconds; default 0.6.
    pub max_time_s: f64,
    /// Shortest sample, seconds: shorter calls are grouped; default 0.0005.
    pub min_sample_s: f64,
    /// Separate visits per configuration, each timed as above; the row keeps the median of the
    /// visits' medians. Default 1. Repetitions within one visit agree closely, but on a shared
    /// machine whole visits come out slow now and then (slow phases, memory placement), and
    /// separated visits with fresh tensors outvote a single slow one. Phases that last longer
    /// than the gap between visits (a block, see `run::ROUND_BLOCK`) still show.
    pub rounds: u32,
}

impl Default for TimingConfig {
    fn default() -> Self {
        TimingConfig {
            warmup_s: 0.05,
            min_samples: 7,
            max_samples: 1000,
            target_rel_error: 0.005,
            max_time_s: 0.6,
            min_sample_s: 0.0005,
            rounds: 1,
        }
    }
}

impl TimingConfig {
    /// Checks the values; the message names the field.
    pub fn validate(&self) -> std::result::Result<(), String> {
        let checks = [
            ("warmup_s", self.warmup_s, 0.0),
            ("max_time_s", self.max_time_s, 1e-6),
            ("min_sample_s", self.min_sample_s, 0.0),
            ("target_rel_error", self.target_rel_error, 1e-9),
        ];
        for (name, v, min) in checks {
            if !(v.is_finite() && v >= min) {
                return Err(format!("`timing.{name}` must be at least {min}, got {v}"));
            }
        }
        if !(1..=MAX_ROUNDS).contains(&self.rounds) {
            return Err(format!(
                "`timing.rounds` must be between 1 and {MAX_ROUNDS}, got {}",
                self.rounds
            ));
        }
        if self.min_samples < 3 || self.max_samples < self.min_samples {
            return Err(format!(
                "`timing.min_samples` {} must be at least 3 and at most `max_samples` {}",
                self.min_samples, self.max_samples
            ));
        }
        Ok(())
    }
}

/// Most visits per configuration (`timing.rounds`).
pub const MAX_ROUNDS: u32 = 15;

pub use perfcast_data::merge::combine_rounds;

/// Robust statistics of per-call times in seconds (sorted in place).
pub fn statistics(samples: &mut [f64], calls: u32) -> Timing {
    samples.sort_by(f64::total_cmp);
    let median = quantile(samples, 0.5);
    let mut dev: Vec<f64> = samples.iter().map(|s| (s - median).abs()).collect();
    dev.sort_by(f64::total_cmp);
    let ms = 1e3;
    Timing {
        median_ms: median * ms,
        min_ms: Some(samples[0] * ms),
        mad_ms: Some(quantile(&dev, 0.5) * ms),
        p10_ms: Some(quantile(samples, 0.1) * ms),
        p90_ms: Some(quantile(samples, 0.9) * ms),
        repetitions: Some(calls),
    }
}

/// Relative standard error of the median, from the MAD (normal approximation).
fn median_rel_error(samples: &[f64]) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = quantile(&sorted, 0.5);
    let mut dev: Vec<f64> = sorted.iter().map(|s| (s - median).abs()).collect();
    dev.sort_by(f64::total_cmp);
    let sigma = 1.4826 * quantile(&dev, 0.5);
    // Standard error of the median is about 1.2533 sigma / sqrt(n).
    1.2533 * sigma / (samples.len() as f64).sqrt() / median.max(f64::MIN_POSITIVE)
}

/// Times `call` (which must finish its work, device synchronised, before returning).
///
/// Returns the statistics per call, or the first error `call` returns.
pub fn measure<E>(
    call: &mut dyn FnMut() -> std::result::Result<(), E>,
    config: &TimingConfig,
) -> std::result::Result<Timing, E> {
    // Warm-up: at least two calls (first-touch allocation, kernel caches), then until warmup_s.
    let start = Instant::now();
    let mut warm_calls = 0u32;
    let mut last = Duration::ZERO;
    while warm_calls < 2 || start.elapsed().as_secs_f64() < config.warmup_s {
        let t = Instant::now();
        call()?;
        last = t.elapsed();
        warm_calls += 1;
    }
    // Group short calls so one sample lasts at least min_sample_s.
    let per_call = last.as_secs_f64().max(1e-9);
    let group = ((config.min_sample_s / per_call).ceil() as u32).clamp(1, 10_000);

    let mut samples: Vec<f64> = Vec::with_capacity(config.min_samples as usize * 4);
    let timed_start = Instant::now();
    loop {
        let t = Instant::now();
        for _ in 0..group {
            call()?;
        }
        samples.push(t.elapsed().as_secs_f64() / f64::from(group));
        let n = samples.len() as u32;
        if n >= config.max_samples {
            break;
        }
        if n >= config.min_samples {
            if timed_start.elapsed().as_secs_f64() >= config.max_time_s {
                break;
            }
            if median_rel_error(&samples) <= config.target_rel_error {
                break;
            }
        }
    }
    let calls = samples.len() as u32 * group;
    Ok(statistics(&mut samples, calls))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_of_known_samples() {
        let mut s = vec![0.003, 0.001, 0.002, 0.004, 0.005];
        let t = statistics(&mut s, 5);
        assert!((t.median_ms - 3.0).abs() < 1e-9);
        assert!((t.min_ms.unwrap() - 1.0).abs() < 1e-9);
        assert!((t.mad_ms.unwrap() - 1.0).abs() < 1e-9);
        assert!((t.p10_ms.unwrap() - 1.4).abs() < 1e-9);
        assert_eq!(t.repetitions, Some(5));
    }

    #[test]
    fn measure_stops_early_on_constant_work_and_reports_errors() {
        let config = TimingConfig {
            warmup_s: 0.0,
            ..TimingConfig::default()
        };
        let mut n = 0u64;
        let mut call = || -> Result<(), String> {
            // Deterministic busy work of a few microseconds.
            let mut x = 1u64;
            for i in 0..2000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
            }
            n = n.wrapping_add(std::hint::black_box(x) | 1);
            Ok(())
        };
        let t = measure(&mut call, &config).unwrap();
        assert!(t.median_ms > 0.0);
        assert!(t.min_ms.unwrap() <= t.median_ms && t.median_ms <= t.p90_ms.unwrap());
        assert!(t.repetitions.unwrap() >= config.min_samples);

        let mut fails = 0;
        let mut failing = || -> Result<(), String> {
            fails += 1;
            if fails > 3 {
                Err("boom".into())
            } else {
                Ok(())
            }
        };
        assert_eq!(measure(&mut failing, &config).unwrap_err(), "boom");
    }

    #[test]
    fn config_validation_names_the_field() {
        let bad = TimingConfig {
            max_time_s: -1.0,
            ..TimingConfig::default()
        };
        assert!(bad.validate().unwrap_err().contains("timing.max_time_s"));
        for rounds in [0, MAX_ROUNDS + 1] {
            let bad = TimingConfig {
                rounds,
                ..TimingConfig::default()
            };
            assert!(bad.validate().unwrap_err().contains("timing.rounds"));
        }
    }
}
