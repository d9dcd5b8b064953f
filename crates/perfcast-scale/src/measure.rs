//! Measuring the runs `scale fit` reads: training steps over a grid of thread counts `p`,
//! batch sizes `b` and sample counts `n`, each repeated in rounds over the whole grid in a
//! shuffled order, so load that drifts while measuring spreads over the repeats of every run
//! alike instead of biasing the runs measured last. The timing itself comes in as a function
//! (burn's training steps, in perfcast-profile), so this crate stays free of burn.

use perfcast_core::progress::Observer;
use perfcast_core::rng::shuffled;
use serde::Serialize;

use crate::error::{Error, Result};

/// The progress stage of [`measure_runs`].
pub const STAGE: &str = "measure";

/// The runs to measure.
#[derive(Clone, Debug)]
pub struct RunGrid {
    /// The network's label, for messages.
    pub label: String,
    /// Thread counts p.
    pub threads: Vec<usize>,
    /// Batch sizes b.
    pub batch: Vec<usize>,
    /// Samples n per run: ceil(n / b) training steps.
    pub samples: Vec<usize>,
    /// Timed repetitions per run; a run's time is their median.
    pub repeats: usize,
}

impl RunGrid {
    /// Checks that every list has values of at least 1 and that runs are repeated.
    pub fn validate(&self) -> Result<()> {
        for (flag, values) in [
            ("--threads", &self.threads),
            ("--batch", &self.batch),
            ("--samples", &self.samples),
        ] {
            if values.is_empty() {
                return Err(Error::Input(format!("`{flag}` needs at least one value")));
            }
            if !values.iter().all(|&v| v >= 1) {
                return Err(Error::Input(format!(
                    "`{flag}` values must be at least 1, got {}",
                    values
                        .iter()
                        .map(usize::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                )));
            }
        }
        if self.repeats < 1 {
            return Err(Error::Input(format!(
                "`--repeats` must be at least 1, got {}",
                self.repeats
            )));
        }
        Ok(())
    }
}

/// One measured run, as written to the runs CSV.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MeasuredRun {
    /// Threads.
    pub p: usize,
    /// Batch size.
    pub b: usize,
    /// Samples processed: `steps * b`.
    pub n: usize,
    /// Training steps.
    pub steps: usize,
    /// Median over the repeats, seconds.
    pub time_s: f64,
    /// Fastest repeat, seconds.
    pub min_s: f64,
    /// Slowest repeat, seconds.
    pub max_s: f64,
}

/// A run that could not be measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailedRun {
    /// Threads.
    pub p: usize,
    /// Batch size.
    pub b: usize,
    /// Samples.
    pub n: usize,
    /// Why.
    pub error: String,
}

/// What [`measure_runs`] measured.
#[derive(Debug, Clone)]
pub struct Measured {
    /// Every run measured, grouped by (b, n) then p.
    pub runs: Vec<MeasuredRun>,
    /// Every run that failed.
    pub failed: Vec<FailedRun>,
    /// One-minute load average before measuring (Linux), for the record.
    pub load_start: Option<f64>,
    /// The same after.
    pub load_end: Option<f64>,
}

/// A runs file measured on this machine: the runs and their provenance (what `perfcast scale
/// measure` prints, and [`crate::runs::write_runs`] writes).
#[derive(Debug, Clone, Serialize)]
pub struct RunsReport {
    /// The runs CSV.
    pub out: std::path::PathBuf,
    /// The network's label.
    pub network: String,
    /// Its resolution, for zoo networks given one.
    pub resolution: Option<usize>,
    /// Backend name.
    pub backend: String,
    /// CPU model.
    pub cpu: String,
    /// Physical cores.
    pub cores: u32,
    /// Timed repetitions per run.
    pub repeats: usize,
    /// One-minute load average before and after measuring (Linux), for the record.
    pub load_start: Option<f64>,
    /// The same after.
    pub load_end: Option<f64>,
    /// Every run measured.
    pub runs: Vec<MeasuredRun>,
    /// Every run that failed.
    pub failed: Vec<FailedRun>,
}

/// The one-minute load average, where the system publishes it.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Median of a non-empty slice, which it sorts.
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let m = values.len() / 2;
    if values.len() % 2 == 1 {
        values[m]
    } else {
        0.5 * (values[m - 1] + values[m])
    }
}

/// Measures every run of `grid`: `time(p, b, steps)` builds the network anew, runs one untimed
/// warm-up step and returns the seconds of `steps` timed training steps (or why it failed;
/// a run that fails once is not tried again). Each repeat is a round over all runs: the
/// (b, n) pairs in a fresh shuffled order, the thread counts of a pair one after the other,
/// so they see the same load. Progress (stage [`STAGE`]) is in samples, warm-up included, so
/// the ETA holds across runs of very different sizes; notes say when `n` is not a whole
/// number of batches, when the machine is busy and when a run fails. `cpus`: logical CPUs,
/// for the busy note.
pub fn measure_runs(
    grid: &RunGrid,
    cpus: u32,
    time: &mut dyn FnMut(usize, usize, usize) -> std::result::Result<Vec<f64>, String>,
    observer: &dyn Observer,
) -> Result<Measured> {
    grid.validate()?;
    // The (b, steps) pairs, each measured at every thread count.
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    for &n in &grid.samples {
        for &b in &grid.batch {
            let steps = n.div_ceil(b);
            if steps * b != n {
                observer.note(&format!(
                    "note: n={n} is not a whole number of batches of {b}: {steps} steps, \
                     recorded as n={}",
                    steps * b
                ));
            }
            pairs.push((b, steps));
        }
    }
    let threads = &grid.threads;
    if let Some(&p) = threads.iter().find(|&&p| p > cpus as usize) {
        observer.note(&format!(
            "note: {p} threads on {cpus} logical CPUs oversubscribe them: the runs measure the \
             contention"
        ));
    }
    let load_start = load_average();
    if let Some(load) = load_start.filter(|&l| l >= 0.5) {
        observer.note(&format!(
            "note: the machine is busy (1-minute load average {load:.2} on {cpus} logical CPUs): \
             the runs share it, those with more threads most"
        ));
    }
    let cost = |b: usize, steps: usize| ((steps + 1) * b) as u64;
    let per_round: u64 =
        pairs.iter().map(|&(b, steps)| cost(b, steps)).sum::<u64>() * threads.len() as u64;
    observer.begin(STAGE, per_round * grid.repeats as u64);
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); pairs.len() * threads.len()];
    let mut errors: Vec<Option<String>> = vec![None; times.len()];
    for round in 0..grid.repeats {
        for pair in shuffled(pairs.len(), round as u64) {
            let (b, steps) = pairs[pair];
            for (t, &p) in threads.iter().enumerate() {
                let i = pair * threads.len() + t;
                if errors[i].is_none() {
                    observer.message(
                        STAGE,
                        &format!(
                            "{}: repeat {}/{}, p={p} b={b} n={} ({steps} steps)",
                            grid.label,
                            round + 1,
                            grid.repeats,
                            steps * b
                        ),
                    );
                    match time(p, b, steps) {
                        Ok(d) => times[i].extend(d),
                        Err(error) => {
                            observer.note(&format!(
                                "error: `{}` at p={p} b={b} n={}: {error}",
                                grid.label,
                                steps * b
                            ));
                            errors[i] = Some(error);
                        }
                    }
                }
                observer.advance(STAGE, cost(b, steps));
            }
        }
    }
    let mut runs = Vec::with_capacity(times.len());
    let mut failed = Vec::new();
    for (i, (mut s, error)) in times.into_iter().zip(errors).enumerate() {
        let (b, steps) = pairs[i / threads.len()];
        let p = threads[i % threads.len()];
        let n = steps * b;
        match error {
            Some(error) => failed.push(FailedRun { p, b, n, error }),
            None if s.is_empty() => failed.push(FailedRun {
                p,
                b,
                n,
                error: "no timed step".into(),
            }),
            None => {
                let time_s = median(&mut s);
                runs.push(MeasuredRun {
                    p,
                    b,
                    n,
                    steps,
                    time_s,
                    min_s: s[0],
                    max_s: s[s.len() - 1],
                });
            }
        }
    }
    observer.end(STAGE);
    if runs.is_empty() {
        return Err(Error::Input(format!(
            "no run could be measured (the first error: {})",
            failed.first().map_or("none", |f| f.error.as_str())
        )));
    }
    Ok(Measured {
        runs,
        failed,
        load_start,
        load_end: load_average(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfcast_core::progress::Silent;

    #[test]
    fn shuffled_orders_are_permutations_fixed_by_the_seed() {
        for seed in 0..4 {
            let mut order = shuffled(10, seed);
            assert_eq!(order, shuffled(10, seed));
            order.sort_unstable();
            assert_eq!(order, (0..10).collect::<Vec<_>>());
        }
        assert_ne!(shuffled(10, 0), shuffled(10, 1));
        assert!(shuffled(0, 3).is_empty());
        assert_eq!(shuffled(1, 3), [0]);
    }

    #[test]
    fn medians() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn every_run_gets_the_median_of_its_repeats_and_failures_are_kept_apart() {
        let grid = RunGrid {
            label: "toy".into(),
            threads: vec![1, 2],
            batch: vec![4],
            samples: vec![6, 12],
            repeats: 3,
        };
        let mut calls = Vec::new();
        let mut time = |p: usize, b: usize, steps: usize| {
            calls.push((p, b, steps));
            if p == 2 && steps == 2 {
                return Err("out of memory".to_string());
            }
            // Seconds grow with the work and shrink with threads; each repeat a little slower.
            let repeat = calls.iter().filter(|c| **c == (p, b, steps)).count() as f64;
            Ok(vec![(steps * b) as f64 / p as f64 + 0.01 * repeat])
        };
        let out = measure_runs(&grid, 2, &mut time, &Silent).expect("measured");
        // n=6 is rounded up to 2 batches of 4 (n=8).
        assert_eq!(
            out.failed,
            [FailedRun {
                p: 2,
                b: 4,
                n: 8,
                error: "out of memory".into()
            }]
        );
        let got: Vec<(usize, usize, usize, f64)> = out
            .runs
            .iter()
            .map(|r| (r.p, r.n, r.steps, (r.time_s * 100.0).round() / 100.0))
            .collect();
        assert_eq!(got, [(1, 8, 2, 8.02), (1, 12, 3, 12.02), (2, 12, 3, 6.02)]);
        assert!(out.runs.iter().all(|r| r.max_s - r.min_s > 0.019));
        // A failed run is not tried again after its first failure.
        assert_eq!(calls.iter().filter(|c| **c == (2, 4, 2)).count(), 1);

        let bad = RunGrid {
            threads: vec![0],
            ..grid
        };
        let err = measure_runs(&bad, 2, &mut |_, _, _| Ok(vec![1.0]), &Silent)
            .expect_err("zero threads")
            .to_string();
        assert_eq!(err, "`--threads` values must be at least 1, got 0");
    }
}
