//! Interference detection: a fixed canary op re-timed every few seconds of a run.
//!
//! On a shared machine whole stretches of a run come out slow (another tenant, a busy core, memory
//! placement; docs/accuracy.md#repeatability-and-measuring-sessions). Interference only ever adds
//! time, so a stretch whose canary came out slower than the fastest canary of the run was
//! disturbed: its rows are measured again later, each visit bracketed by canaries again, and every
//! row keeps its fastest clean visit. A row with no clean visit keeps its fastest visit divided by
//! how much slower its stretch's canary read, to the power this run fitted on the rows that had
//! both kinds of visit (the exponent is 0, no correction, when those rows show no such relation or
//! are too few).

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
    /// Above the canary's own repeatability and below a slow phase's slowdown.
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
    /// Seconds re-measuring may take after `measured_s` of measuring: the budget share of it,
    /// and no later than `until` (a caller's wall-time budget).
    pub fn remeasure_budget_s(&self, measured_s: f64, until: Option<std::time::Instant>) -> f64 {
        let left = until.map_or(f64::INFINITY, |until| {
            until
                .saturating_duration_since(std::time::Instant::now())
                .as_secs_f64()
        });
        (self.budget_share * measured_s).min(left)
    }

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

/// How much slower than the run's best the canary read around stretch `s`: the geometric mean of
/// its two bracketing readings over `best` (one reading when the other is missing; 1 when both
/// are, or when it read faster).
pub fn stretch_slowdown(readings: &[Option<f64>], best: f64, s: usize) -> f64 {
    let at = |i: usize| readings.get(i).copied().flatten();
    let ms = match (at(s), at(s + 1)) {
        (Some(a), Some(b)) => (a * b).sqrt(),
        (Some(a), None) | (None, Some(a)) => a,
        (None, None) => return 1.0,
    };
    if best > 0.0 && ms.is_finite() {
        (ms / best).max(1.0)
    } else {
        1.0
    }
}

/// Fewest (disturbed, clean) visit pairs an exponent is fitted on.
pub const MIN_CORRECTION_PAIRS: usize = 20;

/// How the canary's slowdown carries over to the rows, fitted on pairs of one row's disturbed
/// and clean visits: `(disturbed / clean time, the disturbed stretch's slowdown)`. The exponent
/// `a` in [0, 1] of `disturbed = clean * slowdown^a` with the least mean |ln| residual (a grid
/// of hundredths: robust to the few rows a burst hit harder, and never further from the clean
/// visits than no correction, `a = 0`); `None` with fewer than [`MIN_CORRECTION_PAIRS`] pairs
/// or no slowdown among them.
pub fn fit_slowdown_exponent(pairs: &[(f64, f64)]) -> Option<f64> {
    let logs: Vec<(f64, f64)> = pairs
        .iter()
        .filter(|(r, s)| r.is_finite() && *r > 0.0 && s.is_finite() && *s >= 1.0)
        .map(|(r, s)| (r.ln(), s.ln()))
        .collect();
    if logs.len() < MIN_CORRECTION_PAIRS || logs.iter().all(|(_, s)| *s <= 0.0) {
        return None;
    }
    let residual = |a: f64| logs.iter().map(|(r, s)| (r - a * s).abs()).sum::<f64>();
    (0..=100)
        .map(|i| f64::from(i) / 100.0)
        .min_by(|a, b| residual(*a).total_cmp(&residual(*b)))
}

/// Mean |ln r| over pairs `(r, _)`: how far disturbed visits lie from clean ones.
pub fn mean_gap(pairs: &[(f64, f64)]) -> f64 {
    pairs.iter().map(|(r, _)| r.ln().abs()).sum::<f64>() / pairs.len().max(1) as f64
}

/// The (disturbed / clean time, slowdown) pairs of rows that have both kinds of visit, every
/// visit judged against the fastest of `readings`.
pub fn visit_pairs(
    visits: &[&[(Timing, usize)]],
    readings: &[Option<f64>],
    tolerance: f64,
) -> Vec<(f64, f64)> {
    let slow = slow_stretches(readings, tolerance);
    let is_slow = |s: usize| slow.get(s).copied().unwrap_or(false);
    let best = readings.iter().flatten().copied().reduce(f64::min);
    let slowdown = |s: usize| best.map_or(1.0, |b| stretch_slowdown(readings, b, s));
    let mut pairs = Vec::new();
    for &row in visits {
        let clean = row
            .iter()
            .filter(|(_, s)| !is_slow(*s))
            .map(|(t, _)| t.median_ms)
            .reduce(f64::min);
        if let Some(clean) = clean {
            pairs.extend(
                row.iter()
                    .filter(|(_, s)| is_slow(*s))
                    .map(|(t, s)| (t.median_ms / clean, slowdown(*s))),
            );
        }
    }
    pairs
}

/// `timing` with every statistic divided by `factor` (a disturbed visit brought back to the
/// machine's undisturbed speed).
pub fn deflated(timing: &Timing, factor: f64) -> Timing {
    let f = |v: f64| v / factor;
    Timing {
        median_ms: f(timing.median_ms),
        min_ms: timing.min_ms.map(f),
        mad_ms: timing.mad_ms.map(f),
        p10_ms: timing.p10_ms.map(f),
        p90_ms: timing.p90_ms.map(f),
        repetitions: timing.repetitions,
    }
}

/// What [`settle`] keeps of the visits.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Settled {
    /// Per row: the timing it keeps (`None` without any visit).
    pub kept: Vec<Option<Timing>>,
    /// Rows with no clean visit.
    pub still_disturbed: usize,
    /// See [`CanaryReport::exponent`].
    pub exponent: Option<f64>,
    /// See [`CanaryReport::pairs`].
    pub pairs: usize,
    /// See [`CanaryReport::pair_error`].
    pub pair_error: Option<(f64, f64)>,
}

/// Each row's timing from its visits `(timing, stretch)`, judged against the fastest of
/// `readings`: its fastest clean visit; with none, its fastest visit divided by its stretch's
/// slowdown to the power fitted on the rows that have both kinds of visit.
pub fn settle(visits: &[&[(Timing, usize)]], readings: &[Option<f64>], tolerance: f64) -> Settled {
    let slow = slow_stretches(readings, tolerance);
    let is_slow = |s: usize| slow.get(s).copied().unwrap_or(false);
    let best = readings.iter().flatten().copied().reduce(f64::min);
    let slowdown = |s: usize| best.map_or(1.0, |b| stretch_slowdown(readings, b, s));
    let pairs = visit_pairs(visits, readings, tolerance);
    let exponent = fit_slowdown_exponent(&pairs);
    let pair_error = exponent.map(|a| {
        let corrected: Vec<(f64, f64)> = pairs.iter().map(|(r, s)| (r / s.powf(a), *s)).collect();
        (mean_gap(&pairs), mean_gap(&corrected))
    });
    let mut still_disturbed = 0;
    let kept = visits
        .iter()
        .map(|row| {
            let judged: Vec<(Timing, bool)> = row
                .iter()
                .map(|(t, s)| {
                    if is_slow(*s) {
                        let factor = slowdown(*s).powf(exponent.unwrap_or(0.0));
                        (deflated(t, factor), false)
                    } else {
                        (t.clone(), true)
                    }
                })
                .collect();
            if !judged.is_empty() && judged.iter().all(|(_, clean)| !clean) {
                still_disturbed += 1;
            }
            fastest_clean(&judged)
        })
        .collect();
    Settled {
        kept,
        still_disturbed,
        exponent,
        pairs: pairs.len(),
        pair_error,
    }
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
    /// Disturbed rows with no clean visit in the end (they keep their fastest visit, corrected
    /// by [`CanaryReport::exponent`]).
    pub still_disturbed: usize,
    /// The fitted exponent of the canary's slowdown (see [`fit_slowdown_exponent`]); `None`:
    /// too few rows had both a disturbed and a clean visit, and nothing was corrected.
    pub exponent: Option<f64>,
    /// (disturbed, clean) visit pairs it was fitted on.
    pub pairs: usize,
    /// Mean |ln(disturbed / clean)| over those pairs before and after the correction: how
    /// much closer the correction brings a disturbed visit to the clean one.
    pub pair_error: Option<(f64, f64)>,
    /// Re-measuring stopped early: the rows' disturbed visits already lay within half the
    /// tolerance of their clean ones (mean over at least [`MIN_CORRECTION_PAIRS`] pairs), so
    /// the canary saw noise the rows did not.
    pub stopped_early: bool,
}

impl CanaryReport {
    /// The report of a run whose rows `settled` settled over `readings`; `disturbed` and
    /// `remeasured` count rows.
    pub fn of(
        readings: &[Option<f64>],
        settled: &Settled,
        disturbed: usize,
        remeasured: usize,
        stopped_early: bool,
    ) -> CanaryReport {
        CanaryReport {
            readings_ms: readings.iter().flatten().copied().collect(),
            best_ms: readings.iter().flatten().copied().reduce(f64::min),
            disturbed,
            remeasured,
            still_disturbed: settled.still_disturbed,
            exponent: settled.exponent,
            pairs: settled.pairs,
            pair_error: settled.pair_error,
            stopped_early,
        }
    }
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
    fn the_slowdown_exponent_is_fitted_from_pairs_and_bounded() {
        // Rows slowed by the canary's slowdown to the power 0.6 (with a little noise).
        let pairs: Vec<(f64, f64)> = (0..40)
            .map(|i| {
                let s = 1.1 + 0.02 * i as f64;
                let noise = if i % 2 == 0 { 1.01 } else { 0.99 };
                (s.powf(0.6) * noise, s)
            })
            .collect();
        let a = fit_slowdown_exponent(&pairs).unwrap();
        assert!((a - 0.6).abs() < 0.06, "{a}");
        // A few rows a burst hit far harder do not pull it.
        let mut hit = pairs.clone();
        for p in hit.iter_mut().take(5) {
            p.0 *= 3.0;
        }
        let b = fit_slowdown_exponent(&hit).unwrap();
        assert!((b - 0.6).abs() < 0.1, "{b}");
        // Too few pairs, or none slowed: no exponent.
        assert_eq!(
            fit_slowdown_exponent(&pairs[..MIN_CORRECTION_PAIRS - 1]),
            None
        );
        assert_eq!(fit_slowdown_exponent(&vec![(1.2, 1.0); 30]), None);
        // Rows slowed more than the canary, or sped up: clamped to [0, 1].
        let more: Vec<(f64, f64)> = pairs.iter().map(|(_, s)| (s * s, *s)).collect();
        assert_eq!(fit_slowdown_exponent(&more), Some(1.0));
        let faster: Vec<(f64, f64)> = pairs.iter().map(|(_, s)| (1.0 / s, *s)).collect();
        assert_eq!(fit_slowdown_exponent(&faster), Some(0.0));
    }

    #[test]
    fn rows_without_a_clean_visit_are_brought_back_by_the_fitted_slowdown() {
        // Stretches 0-29 clean (readings 10), 30-59 slow (readings 12.1: slowdown 1.1 to 1.21).
        let mut readings: Vec<Option<f64>> = vec![Some(10.0); 31];
        readings.extend((0..30).map(|i| Some(if i % 2 == 0 { 12.1 } else { 11.0 })));
        let slowdown = |s: usize| stretch_slowdown(&readings, 10.0, s);
        // 30 rows seen both disturbed and clean, slowed by the slowdown to the power 0.5.
        let mut visits: Vec<Vec<(Timing, usize)>> = (0..30)
            .map(|i| {
                let clean = 1.0 + i as f64;
                let s = 30 + i;
                vec![(timing(clean * slowdown(s).sqrt()), s), (timing(clean), i)]
            })
            .collect();
        // One row seen only disturbed, in the slowest stretch.
        visits.push(vec![(timing(2.0 * slowdown(31).sqrt()), 31)]);
        let rows: Vec<&[(Timing, usize)]> = visits.iter().map(Vec::as_slice).collect();
        let settled = settle(&rows, &readings, 0.07);
        let a = settled.exponent.unwrap();
        assert!((a - 0.5).abs() < 1e-9, "{a}");
        assert_eq!((settled.pairs, settled.still_disturbed), (30, 1));
        let (before, after) = settled.pair_error.unwrap();
        assert!(before > 0.04 && after < 1e-9, "{before} {after}");
        assert!((mean_gap(&visit_pairs(&rows, &readings, 0.07)) - before).abs() < 1e-12);
        // Rows with a clean visit keep it; the other is brought back to its undisturbed 2 ms.
        assert_eq!(settled.kept[3].as_ref().unwrap().median_ms, 4.0);
        assert!((settled.kept[30].as_ref().unwrap().median_ms - 2.0).abs() < 1e-9);
        // Too few rows with both visits: nothing is corrected.
        let few = settle(&rows[25..], &readings, 0.07);
        assert_eq!(few.exponent, None);
        assert!((few.kept[5].as_ref().unwrap().median_ms - 2.0 * slowdown(31).sqrt()).abs() < 1e-9);
    }

    #[test]
    fn a_stretch_slowdown_reads_both_brackets() {
        let r = [Some(10.0), Some(12.1), None, None, Some(9.0)];
        assert!((stretch_slowdown(&r, 10.0, 0) - 1.1).abs() < 1e-12);
        assert!((stretch_slowdown(&r, 10.0, 1) - 1.21).abs() < 1e-12);
        assert_eq!(stretch_slowdown(&r, 10.0, 2), 1.0);
        // Faster than the best (a best taken from another run): no slowdown.
        assert_eq!(stretch_slowdown(&r, 10.0, 3), 1.0);
        let t = deflated(&timing(12.0), 1.2);
        assert!((t.median_ms - 10.0).abs() < 1e-12 && (t.min_ms.unwrap() - 9.0).abs() < 1e-12);
        assert_eq!(t.repetitions, Some(7));
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
