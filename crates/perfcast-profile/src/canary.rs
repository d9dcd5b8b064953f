//! Interference detection: a fixed canary op re-timed every few seconds of a run.
//!
//! On a shared machine whole stretches of a run come out 8-40% slow (another tenant, a busy
//! core, memory placement). Interference only ever adds time, so a stretch whose canary came out
//! slower than the fastest canary of the run was disturbed: its rows are measured again later,
//! each visit bracketed by canaries again, and every row keeps its fastest clean visit (the
//! fastest visit of all when none was clean).

use perfcast_core::{Context, ModuleSpec, Phase};
use perfcast_data::Timing;
use serde::{Deserialize, Serialize};

use crate::backend::Backend;
use crate::ops::prepare;
use crate::pool::with_threads;
use crate::timer::{TimingConfig, measure};

/// How often the canary runs and how much slower than its best a reading may be.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CanaryConfig {
    /// Seconds of measuring between two canary readings.
    pub every_s: f64,
    /// A stretch is slow when a canary bracketing it reads above `best * (1 + tolerance)`.
    /// The canary itself repeats within 1-3% here; slow phases are 8-40%.
    pub tolerance: f64,
    /// Extra visits a disturbed row gets at most.
    pub retries: u32,
    /// Re-measuring stops after this share of the run's measuring time (the most disturbed
    /// stretches go first), so a machine that stays noisy cannot stretch a run without end.
    pub budget_share: f64,
}

impl Default for CanaryConfig {
    fn default() -> Self {
        CanaryConfig {
            every_s: 8.0,
            tolerance: 0.07,
            retries: 2,
            budget_share: 0.3,
        }
    }
}

impl CanaryConfig {
    /// Checks the values; the message names the field.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if !(self.every_s.is_finite() && self.every_s > 0.0) {
            return Err(format!(
                "`canary.every_s` must be above 0, got {}",
                self.every_s
            ));
        }
        if !(self.tolerance.is_finite() && self.tolerance > 0.0) {
            return Err(format!(
                "`canary.tolerance` must be above 0, got {}",
                self.tolerance
            ));
        }
        if !(self.budget_share.is_finite() && self.budget_share >= 0.0) {
            return Err(format!(
                "`canary.budget_share` must be at least 0, got {}",
                self.budget_share
            ));
        }
        if self.retries > 10 {
            return Err(format!(
                "`canary.retries` must be at most 10, got {}",
                self.retries
            ));
        }
        Ok(())
    }
}

/// The canary: one fixed GEMM (512 x 512 weights, 128 rows: 67 MFLOP, a few milliseconds on
/// one core) timed on one thread, short enough to cost about 2% of a run at one reading per
/// 8 seconds, long enough to repeat within a few percent.
pub struct Canary {
    backend: Backend,
    spec: ModuleSpec,
    timing: TimingConfig,
}

impl Canary {
    /// A canary on `backend`.
    pub fn new(backend: Backend) -> Canary {
        Canary {
            backend,
            spec: ModuleSpec::Linear(perfcast_core::Linear {
                in_features: 512,
                out_features: 512,
                bias: true,
                tokens: 1,
            }),
            timing: TimingConfig {
                warmup_s: 0.01,
                min_samples: 7,
                max_time_s: 0.08,
                ..TimingConfig::default()
            },
        }
    }

    /// One reading: the canary's median call time, ms (`None` when the backend failed, which
    /// then judges nothing).
    pub fn read(&self) -> Option<f64> {
        let context = Context {
            batch: 128,
            phase: Phase::Inference,
            threads: 1,
            utilisation: 0.0,
        };
        let device = self.backend.device().ok()?;
        with_threads(1, || {
            crate::ops::catch(|| -> std::result::Result<f64, String> {
                let mut call = prepare(&self.spec, &context, &device)?;
                Ok(measure(&mut call, &self.timing)?.median_ms)
            })
            .ok()?
            .ok()
        })
    }
}

/// Which stretches were disturbed. Stretch `i` lies between readings `i` and `i + 1`; it is
/// slow when either reading is above the fastest reading of all times `1 + tolerance`. Missing
/// readings (`None`) judge nothing.
pub fn slow_stretches(readings: &[Option<f64>], tolerance: f64) -> Vec<bool> {
    let Some(best) = readings.iter().flatten().copied().reduce(f64::min) else {
        return vec![false; readings.len().saturating_sub(1)];
    };
    let slow = |r: Option<f64>| r.is_some_and(|ms| ms > best * (1.0 + tolerance));
    readings
        .windows(2)
        .map(|w| slow(w[0]) || slow(w[1]))
        .collect()
}

/// The timing a row keeps from its visits (`clean` tells which were undisturbed): the clean
/// visit with the lowest median, else the visit with the lowest median.
pub fn fastest_clean(visits: &[(Timing, bool)]) -> Option<Timing> {
    let fastest = |clean_only: bool| {
        visits
            .iter()
            .filter(|(_, clean)| *clean || !clean_only)
            .min_by(|a, b| a.0.median_ms.total_cmp(&b.0.median_ms))
            .map(|(t, _)| t.clone())
    };
    fastest(true).or_else(|| fastest(false))
}

/// What the canary saw over a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CanaryReport {
    /// Readings taken, ms, in order (re-measurement readings included).
    pub readings_ms: Vec<f64>,
    /// The fastest reading, ms: the machine's undisturbed speed during the run.
    pub best_ms: Option<f64>,
    /// Rows measured in a disturbed stretch.
    pub disturbed: usize,
    /// Of those, rows measured again (the rest ran out of the re-measuring budget).
    pub remeasured: usize,
    /// Disturbed rows with no clean visit in the end (they keep their fastest visit).
    pub still_disturbed: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(ms: f64) -> Timing {
        Timing {
            median_ms: ms,
            min_ms: Some(ms * 0.9),
            mad_ms: None,
            p10_ms: None,
            p90_ms: None,
            repetitions: Some(7),
        }
    }

    #[test]
    fn stretches_next_to_a_slow_reading_are_slow() {
        let r = [
            Some(10.0),
            Some(10.3),
            Some(12.0),
            Some(10.1),
            None,
            Some(10.2),
        ];
        assert_eq!(slow_stretches(&r, 0.07), [false, true, true, false, false]);
        // A best found late still judges the early readings.
        let late = [Some(12.0), Some(12.1), Some(10.0)];
        assert_eq!(slow_stretches(&late, 0.07), [true, true]);
        assert!(slow_stretches(&[None, None], 0.07) == [false]);
        assert!(slow_stretches(&[], 0.07).is_empty());
    }

    #[test]
    fn a_row_keeps_its_fastest_clean_visit() {
        // The disturbed visit is fastest by chance; the clean one wins anyway.
        let kept = fastest_clean(&[
            (timing(9.0), false),
            (timing(11.0), true),
            (timing(10.5), true),
        ]);
        assert_eq!(kept.unwrap().median_ms, 10.5);
        let none_clean = fastest_clean(&[(timing(13.0), false), (timing(12.0), false)]);
        assert_eq!(none_clean.unwrap().median_ms, 12.0);
        assert_eq!(fastest_clean(&[]), None);
    }

    #[test]
    fn the_canary_reads_a_positive_time_and_bad_configs_are_named() {
        let ms = Canary::new(Backend::Flex).read().unwrap();
        assert!(ms > 0.0 && ms.is_finite(), "{ms}");
        let bad = CanaryConfig {
            tolerance: f64::NAN,
            ..CanaryConfig::default()
        };
        assert!(bad.validate().unwrap_err().contains("canary.tolerance"));
        assert!(CanaryConfig::default().validate().is_ok());
    }
}
