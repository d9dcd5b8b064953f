//! Running a sweep: measure every (configuration, phase), append each row as it finishes.
//!
//! Each row is appended atomically the moment it is measured, so killing a run loses at most
//! the row in flight; `resume` skips rows already stored. A configuration that fails (a backend
//! panic, a footprint above the memory limit) is recorded with its reason and the run goes on.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use perfcast_core::{DeviceSpec, ModuleKind, Phase};
use perfcast_data::{DatasetDir, Outcome, Record, Timing, measurement_key};
use serde::Serialize;

use crate::backend::Backend;
use crate::canary::{
    Canary, CanaryConfig, CanaryReport, MIN_CORRECTION_PAIRS, mean_gap, settle, slow_stretches,
    visit_pairs,
};
use crate::error::{Error, Result};
use crate::load::LoadGenerator;
use crate::ops::{catch, estimated_bytes, prepare};
use crate::pool::with_threads;
use crate::sweep::{Sample, Sweep};
use crate::timer::{combine_rounds, measure};

/// Where and how to run a sweep.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Backend to measure on.
    pub backend: Backend,
    /// Dataset directory.
    pub out: PathBuf,
    /// The device being measured (written to `device.json`).
    pub device: DeviceSpec,
    /// Skip rows already in the dataset instead of refusing to duplicate them.
    pub resume: bool,
    /// Refuse configurations whose estimated footprint exceeds this many bytes.
    pub max_bytes: f64,
    /// Re-measuring disturbed rows stops here even within the canary's budget share (a caller
    /// with a wall-time budget, such as the quickstart); `None`: no such limit.
    pub remeasure_until: Option<Instant>,
}

impl RunOptions {
    /// Options for measuring `sweep` on `device` into `out`: configurations above the sweep's
    /// `max_mib` or half the device's memory, the lower, are refused.
    pub fn for_sweep(
        sweep: &Sweep,
        out: &std::path::Path,
        backend: Backend,
        device: DeviceSpec,
        resume: bool,
    ) -> RunOptions {
        RunOptions {
            backend,
            out: out.to_path_buf(),
            max_bytes: (sweep.max_mib * 1048576.0).min(0.5 * device.memory_gb * 1e9),
            device,
            resume,
            remeasure_until: None,
        }
    }
}

/// One row to measure.
#[derive(Clone, Debug)]
pub struct Job {
    /// Configuration.
    pub sample: Sample,
    /// Phase.
    pub phase: Phase,
}

/// Progress reports, in order.
#[derive(Debug)]
pub enum Event<'a> {
    /// The plan: rows to measure now, rows skipped because they are stored.
    Planned {
        /// Rows to measure.
        total: usize,
        /// Rows already in the dataset.
        skipped: usize,
    },
    /// A row is about to be measured.
    Started {
        /// The row.
        job: &'a Job,
    },
    /// A row finished (measured or failed) and is saved.
    Finished {
        /// The saved row.
        record: &'a Record,
        /// Rows done so far.
        done: usize,
    },
    /// The canary found disturbed stretches: their rows are measured again.
    Remeasuring {
        /// Rows to measure again.
        rows: usize,
    },
    /// One more row was measured again.
    Remeasured {
        /// Re-measurement visits so far.
        done: usize,
    },
}

/// Counts per module kind.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct KindCounts {
    /// Rows measured in this run.
    pub measured: usize,
    /// Rows that failed in this run.
    pub failed: usize,
    /// Rows skipped because they were already stored (before the run, or by a concurrent
    /// writer while this run measured them).
    pub skipped: usize,
    /// Rows in the dataset after the run.
    pub total_rows: usize,
}

/// What a run did.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunSummary {
    /// Dataset directory.
    pub dataset: PathBuf,
    /// Backend.
    pub backend: String,
    /// Per kind counts.
    pub kinds: BTreeMap<String, KindCounts>,
    /// Wall time, seconds.
    pub elapsed_s: f64,
    /// Failures: kind, configuration and reason (first 20).
    pub failures: Vec<String>,
    /// What the interference canary saw and what was measured again (absent when it was off).
    pub canary: Option<CanaryReport>,
}

/// A row stored by this run with the stretch (between two canary readings) it was measured in.
struct Measured {
    job: Job,
    timing: Timing,
    stretch: usize,
}

/// Expands a sweep into jobs, grouped by background load so the load generator restarts rarely.
pub fn plan(sweep: &Sweep) -> Result<Vec<Job>> {
    let mut samples = Vec::new();
    for &kind in &sweep.modules {
        samples.extend(sweep.sample(kind).map_err(|message| Error::Sweep {
            path: sweep.source.clone(),
            message,
        })?);
    }
    Ok(jobs_of(&samples, &sweep.phases))
}

/// Every (sample, phase) of `samples`, grouped by background load.
pub fn jobs_of(samples: &[Sample], phases: &[Phase]) -> Vec<Job> {
    let mut jobs: Vec<Job> = samples
        .iter()
        .flat_map(|sample| {
            phases.iter().map(|&phase| Job {
                sample: sample.clone(),
                phase,
            })
        })
        .collect();
    jobs.sort_by(|a, b| a.sample.utilisation.total_cmp(&b.sample.utilisation));
    jobs
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Measures one job on `backend` (no dataset I/O).
pub fn measure_job(job: &Job, backend: Backend, sweep: &Sweep, max_bytes: f64) -> Outcome {
    let context = job.sample.context(job.phase);
    let need = estimated_bytes(&job.sample.spec, &context);
    if need > max_bytes {
        return Outcome::Failed {
            reason: format!(
                "needs about {:.0} MiB, above the limit of {:.0} MiB",
                need / 1048576.0,
                max_bytes / 1048576.0
            ),
        };
    }
    let device = match backend.device() {
        Ok(d) => d,
        Err(e) => {
            return Outcome::Failed {
                reason: e.to_string(),
            };
        }
    };
    let result = with_threads(job.sample.threads, || {
        catch(|| -> std::result::Result<_, String> {
            let mut call = prepare(&job.sample.spec, &context, &device)?;
            measure(&mut call, &sweep.timing)
        })
        .and_then(|r| r)
    });
    match result {
        Ok(timing) => Outcome::Ok(timing),
        Err(reason) => Outcome::Failed {
            reason: reason.lines().next().unwrap_or("failed").to_string(),
        },
    }
}

/// Jobs per block when `timing.rounds` > 1: about half a minute to a minute of conv2d per round,
/// long enough for a shared machine's slow phases (seconds to tens of seconds) to pass between
/// visits.
pub const ROUND_BLOCK: usize = 48;

/// Measures `jobs` in `sweep.timing.rounds` passes over the block, every visit preparing fresh
/// tensors, and combines each job's visits with [`combine_rounds`]. A job that fails once is
/// not visited again. `set_load` is called with a job's utilisation before each visit, and
/// `started` before each visit. Returns `None` when `interrupted` is set mid-block.
pub fn measure_block(
    jobs: &[Job],
    backend: Backend,
    sweep: &Sweep,
    max_bytes: f64,
    set_load: &mut dyn FnMut(f64),
    started: &mut dyn FnMut(&Job),
    interrupted: &AtomicBool,
) -> Option<Vec<Outcome>> {
    let mut visits: Vec<Vec<Timing>> = vec![Vec::new(); jobs.len()];
    let mut failed: Vec<Option<String>> = vec![None; jobs.len()];
    for round in 0..sweep.timing.rounds.max(1) {
        for (i, job) in jobs.iter().enumerate() {
            if failed[i].is_some() {
                continue;
            }
            if round > 0 && interrupted.load(Ordering::Relaxed) {
                return None;
            }
            set_load(job.sample.utilisation);
            started(job);
            match measure_job(job, backend, sweep, max_bytes) {
                Outcome::Ok(t) => visits[i].push(t),
                Outcome::Failed { reason } => failed[i] = Some(reason),
            }
        }
    }
    Some(
        visits
            .iter()
            .zip(failed)
            .map(|(v, f)| match (f, combine_rounds(v)) {
                (Some(reason), _) => Outcome::Failed { reason },
                (None, Some(t)) => Outcome::Ok(t),
                (None, None) => Outcome::Failed {
                    reason: "no visit was measured".into(),
                },
            })
            .collect(),
    )
}

/// Runs a sweep into the dataset at `options.out`.
///
/// `interrupted` is polled between rows: when set, the run stops with
/// [`Error::Interrupted`] after the row in flight is saved.
pub fn run(
    sweep: &Sweep,
    options: &RunOptions,
    on_event: &mut dyn FnMut(Event<'_>),
    interrupted: &AtomicBool,
) -> Result<RunSummary> {
    run_jobs(sweep, plan(sweep)?, options, on_event, interrupted)
}

/// Runs `jobs` (chosen elsewhere, e.g. by active selection) with `sweep`'s timing, canary and
/// kinds, as [`run`] runs the sweep's own draws.
pub fn run_jobs(
    sweep: &Sweep,
    jobs: Vec<Job>,
    options: &RunOptions,
    on_event: &mut dyn FnMut(Event<'_>),
    interrupted: &AtomicBool,
) -> Result<RunSummary> {
    let started = Instant::now();
    let dataset = DatasetDir::create_or_open(&options.out, &options.device)?;
    let backend = options.backend.name();

    let mut kinds: BTreeMap<String, KindCounts> = BTreeMap::new();
    let mut stored: BTreeMap<ModuleKind, HashSet<String>> = BTreeMap::new();
    for &kind in &sweep.modules {
        stored.insert(kind, dataset.measured_keys(kind)?);
        kinds.entry(kind.name().to_string()).or_default();
    }
    let mut todo = Vec::new();
    for job in jobs {
        let kind = job.sample.spec.kind();
        let key = measurement_key(&job.sample.spec, &job.sample.context(job.phase), backend);
        if stored.get(&kind).is_some_and(|keys| keys.contains(&key)) {
            if !options.resume {
                return Err(Error::Sweep {
                    path: options.out.clone(),
                    message: format!(
                        "the dataset already holds `{kind}` rows of this sweep; pass `--resume` to skip them, or choose another `--out`"
                    ),
                });
            }
            kinds.entry(kind.name().to_string()).or_default().skipped += 1;
        } else {
            todo.push(job);
        }
    }
    let skipped = kinds.values().map(|k| k.skipped).sum();
    on_event(Event::Planned {
        total: todo.len(),
        skipped,
    });

    // Backend panics become failed rows; keep their default report off the progress bar.
    let previous_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let cores = options.device.cores.max(1) as usize;
    let mut load: Option<LoadGenerator> = None;
    let mut failures = Vec::new();
    let mut outcome = Ok(());
    let mut done = 0;
    // One round visits every job once; with several rounds the jobs go in blocks so the visits
    // of one job are a block's time apart, and a killed run loses at most the block in flight.
    let block = if sweep.timing.rounds > 1 {
        ROUND_BLOCK
    } else {
        1
    };
    let canary = sweep.canary.map(|c| (c, Canary::new(options.backend)));
    let mut readings: Vec<Option<f64>> = Vec::new();
    let mut measured: Vec<Measured> = Vec::new();
    let mut last_reading = Instant::now();
    if let Some((_, c)) = &canary
        && !todo.is_empty()
    {
        readings.push(c.read());
    }
    for jobs in todo.chunks(block) {
        if interrupted.load(Ordering::Relaxed) {
            outcome = Err(Error::Interrupted { done });
            break;
        }
        let outcomes = measure_block(
            jobs,
            options.backend,
            sweep,
            options.max_bytes,
            &mut |u| {
                if load.as_ref().map(LoadGenerator::utilisation) != Some(u) {
                    drop(load.take());
                    load = Some(LoadGenerator::start(u, cores));
                }
            },
            &mut |job| on_event(Event::Started { job }),
            interrupted,
        );
        let Some(outcomes) = outcomes else {
            outcome = Err(Error::Interrupted { done });
            break;
        };
        let records: Vec<Record> = jobs
            .iter()
            .zip(outcomes)
            .map(|(job, result)| Record {
                spec: job.sample.spec.clone(),
                context: job.sample.context(job.phase),
                backend: backend.to_string(),
                outcome: result,
                perfcast_version: perfcast_core::VERSION.to_string(),
                timestamp: now(),
            })
            .collect();
        let mut saved = Ok(());
        for (job, record) in jobs.iter().zip(&records) {
            let kind = record.spec.kind();
            let stored = match dataset.append(kind, std::slice::from_ref(record)) {
                Ok(n) => n,
                Err(e) => {
                    saved = Err(e);
                    break;
                }
            };
            let counts = kinds.entry(kind.name().to_string()).or_default();
            match &record.outcome {
                // Another writer (a concurrent `--resume` run) stored this row first.
                _ if stored == 0 => counts.skipped += 1,
                Outcome::Ok(timing) => {
                    counts.measured += 1;
                    measured.push(Measured {
                        job: job.clone(),
                        timing: timing.clone(),
                        stretch: readings.len().saturating_sub(1),
                    });
                }
                Outcome::Failed { reason } => {
                    counts.failed += 1;
                    if failures.len() < 20 {
                        failures.push(format!(
                            "{} ({}): {reason}",
                            record.spec.describe(),
                            record.context.phase
                        ));
                    }
                }
            }
            done += 1;
            on_event(Event::Finished { record, done });
        }
        if let Err(e) = saved {
            outcome = Err(e.into());
            break;
        }
        if let Some((config, c)) = &canary
            && last_reading.elapsed().as_secs_f64() >= config.every_s
        {
            // Our own background load would read as interference.
            drop(load.take());
            readings.push(c.read());
            last_reading = Instant::now();
        }
    }
    drop(load);
    let mut canary_report = None;
    if let (Ok(()), Some((config, c))) = (&outcome, &canary) {
        if measured
            .last()
            .is_some_and(|m| m.stretch + 1 == readings.len())
        {
            readings.push(c.read());
        }
        let revisit = Revisit {
            dataset: &dataset,
            backend: options.backend,
            sweep,
            max_bytes: options.max_bytes,
            config: *config,
            canary: c,
            budget_s: config
                .remeasure_budget_s(started.elapsed().as_secs_f64(), options.remeasure_until),
        };
        match revisit.run(measured, readings, on_event, interrupted) {
            Ok(report) => canary_report = Some(report),
            Err(e) => outcome = Err(e),
        }
    }
    std::panic::set_hook(previous_hook);
    outcome?;

    for (name, counts) in kinds.iter_mut() {
        let kind: ModuleKind = name.parse()?;
        counts.total_rows = dataset.read(kind)?.len();
    }
    Ok(RunSummary {
        dataset: options.out.clone(),
        backend: backend.to_string(),
        kinds,
        elapsed_s: started.elapsed().as_secs_f64(),
        failures,
        canary: canary_report,
    })
}

/// Measuring again the rows of disturbed stretches.
struct Revisit<'a> {
    dataset: &'a DatasetDir,
    backend: Backend,
    sweep: &'a Sweep,
    max_bytes: f64,
    config: CanaryConfig,
    canary: &'a Canary,
    /// Seconds re-measuring may take.
    budget_s: f64,
}

impl Revisit<'_> {
    /// Finds the rows measured in disturbed stretches, visits each up to `retries` more times in
    /// stretches bracketed by canary readings, and stores each row's fastest clean visit.
    /// Rows measured under background load (utilisation > 0) are left alone: the load they
    /// were meant to see is not re-created here. An interrupt stops the visits and stores what
    /// they found.
    fn run(
        &self,
        measured: Vec<Measured>,
        mut readings: Vec<Option<f64>>,
        on_event: &mut dyn FnMut(Event<'_>),
        interrupted: &AtomicBool,
    ) -> Result<CanaryReport> {
        let tolerance = self.config.tolerance;
        let slow = slow_stretches(&readings, tolerance);
        // Per row: its visits as (timing, stretch).
        let mut disturbed: Vec<Measured> = measured
            .into_iter()
            .filter(|m| slow.get(m.stretch) == Some(&true) && m.job.sample.utilisation == 0.0)
            .collect();
        // The most disturbed stretches first, in case the budget runs out.
        let worst = |m: &Measured| {
            let at = |i: usize| readings.get(i).copied().flatten().unwrap_or(0.0);
            at(m.stretch).max(at(m.stretch + 1))
        };
        disturbed.sort_by(|a, b| worst(b).total_cmp(&worst(a)));
        let mut rows: Vec<(Job, Vec<(Timing, usize)>)> = disturbed
            .into_iter()
            .map(|m| (m.job, vec![(m.timing, m.stretch)]))
            .collect();
        let started = Instant::now();
        if !rows.is_empty() {
            on_event(Event::Remeasuring { rows: rows.len() });
        }
        let mut done = 0;
        let mut stopped_early = false;
        'retries: for _ in 0..self.config.retries {
            let slow = slow_stretches(&readings, tolerance);
            let pending: Vec<usize> = (0..rows.len())
                .filter(|&i| rows[i].1.iter().all(|(_, s)| slow[*s]))
                .collect();
            let mut next = 0;
            while next < pending.len() {
                if interrupted.load(Ordering::Relaxed)
                    || started.elapsed().as_secs_f64() > self.budget_s
                {
                    break 'retries;
                }
                readings.push(self.canary.read());
                let stretch = readings.len() - 1;
                let stretch_started = Instant::now();
                while next < pending.len()
                    && stretch_started.elapsed().as_secs_f64() < self.config.every_s
                {
                    let (job, visits) = &mut rows[pending[next]];
                    on_event(Event::Started { job });
                    if let Outcome::Ok(t) =
                        measure_job(job, self.backend, self.sweep, self.max_bytes)
                    {
                        visits.push((t, stretch));
                    }
                    next += 1;
                    done += 1;
                    on_event(Event::Remeasured { done });
                }
                readings.push(self.canary.read());
                // Rows seen both disturbed and clean that barely differ: what the canary saw
                // did not reach the rows, and the rest of the budget is better left unspent.
                let visits: Vec<&[(Timing, usize)]> =
                    rows.iter().map(|(_, v)| v.as_slice()).collect();
                let pairs = visit_pairs(&visits, &readings, tolerance);
                if pairs.len() >= MIN_CORRECTION_PAIRS && mean_gap(&pairs) < tolerance / 2.0 {
                    stopped_early = true;
                    break 'retries;
                }
            }
        }
        // Judge every visit against the fastest reading of the whole run.
        let visits: Vec<&[(Timing, usize)]> = rows.iter().map(|(_, v)| v.as_slice()).collect();
        let settled = settle(&visits, &readings, tolerance);
        let report = CanaryReport::of(
            &readings,
            &settled,
            rows.len(),
            rows.iter().filter(|(_, visits)| visits.len() > 1).count(),
            stopped_early,
        );
        let mut kept: BTreeMap<ModuleKind, Vec<(String, Timing)>> = BTreeMap::new();
        for ((job, _), best) in rows.iter().zip(settled.kept) {
            if let Some(best) = best {
                let key = measurement_key(
                    &job.sample.spec,
                    &job.sample.context(job.phase),
                    self.backend.name(),
                );
                kept.entry(job.sample.spec.kind())
                    .or_default()
                    .push((key, best));
            }
        }
        for (kind, timings) in kept {
            let timings: std::collections::HashMap<String, Timing> = timings.into_iter().collect();
            self.dataset.replace_timings(kind, &timings)?;
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::Sample;

    fn job(spec_json: &str, phase: Phase) -> Job {
        Job {
            sample: Sample {
                spec: perfcast_core::ModuleSpec::from_json(spec_json).unwrap(),
                batch: 2,
                threads: 1,
                utilisation: 0.0,
            },
            phase,
        }
    }

    #[test]
    fn every_kind_measures_in_both_phases() {
        let sweep = Sweep {
            timing: crate::timer::TimingConfig {
                warmup_s: 0.0,
                min_samples: 3,
                max_time_s: 0.001,
                ..Default::default()
            },
            ..Sweep::default()
        };
        for spec in perfcast_core::testing::one_of_each_kind() {
            for phase in [Phase::Inference, Phase::Training] {
                let json = serde_json::to_string(&spec).unwrap();
                match measure_job(&job(&json, phase), Backend::Flex, &sweep, f64::INFINITY) {
                    Outcome::Ok(t) => assert!(t.median_ms > 0.0, "{json} {phase}"),
                    Outcome::Failed { reason } => panic!("{json} {phase}: {reason}"),
                }
            }
        }
    }

    #[test]
    fn a_configuration_over_the_memory_limit_fails_with_its_reason() {
        let j = job(
            r#"{"kind":"linear","in_features":1024,"out_features":1024}"#,
            Phase::Training,
        );
        match measure_job(&j, Backend::Flex, &Sweep::default(), 1024.0) {
            Outcome::Failed { reason } => assert!(reason.contains("above the limit"), "{reason}"),
            Outcome::Ok(_) => panic!("measured despite the limit"),
        }
    }

    #[test]
    fn rounds_visit_each_job_again_and_skip_failed_ones() {
        let sweep = Sweep {
            timing: crate::timer::TimingConfig {
                warmup_s: 0.0,
                min_samples: 3,
                max_samples: 3,
                min_sample_s: 0.0,
                rounds: 3,
                ..Default::default()
            },
            ..Sweep::default()
        };
        let small = job(r#"{"kind":"relu","shape":[4,6,8]}"#, Phase::Inference);
        let big = job(
            r#"{"kind":"linear","in_features":4096,"out_features":4096}"#,
            Phase::Training,
        );
        let jobs = [small.clone(), big, small];
        let mut visits = Vec::new();
        let never = AtomicBool::new(false);
        let outcomes = measure_block(
            &jobs,
            Backend::Flex,
            &sweep,
            16.0 * 1048576.0,
            &mut |_| {},
            &mut |j| visits.push(j.sample.spec.kind()),
            &never,
        )
        .unwrap();
        // Round-robin over the block: the over-limit linear is visited once, the relus 3 times.
        assert_eq!(visits.len(), 7);
        assert_eq!(
            visits[..3],
            [ModuleKind::Relu, ModuleKind::Linear, ModuleKind::Relu]
        );
        match &outcomes[0] {
            Outcome::Ok(t) => assert_eq!(t.repetitions, Some(9)),
            other => panic!("{other:?}"),
        }
        assert!(matches!(&outcomes[1], Outcome::Failed { reason } if reason.contains("limit")));
        let stop = AtomicBool::new(true);
        let cut = measure_block(
            &jobs,
            Backend::Flex,
            &sweep,
            f64::INFINITY,
            &mut |_| {},
            &mut |_| {},
            &stop,
        );
        assert!(
            cut.is_none(),
            "an interrupt mid-block must not produce rows"
        );
    }

    #[test]
    fn rows_of_disturbed_stretches_keep_their_fastest_clean_visit() {
        let tmp = tempfile::tempdir().unwrap();
        let dataset =
            DatasetDir::create_or_open(tmp.path(), &perfcast_core::testing::cpu_device()).unwrap();
        let sweep = Sweep {
            timing: crate::timer::TimingConfig {
                warmup_s: 0.0,
                min_samples: 3,
                max_time_s: 0.001,
                ..Default::default()
            },
            ..Sweep::default()
        };
        let calm = job(r#"{"kind":"relu","shape":[4,6,8]}"#, Phase::Inference);
        let hit = job(r#"{"kind":"relu","shape":[4,6,9]}"#, Phase::Inference);
        // Stored timings no real relu takes: the disturbed one must be replaced, the calm one kept.
        let fake = Timing::median_only(1e6);
        let records: Vec<Record> = [&calm, &hit]
            .iter()
            .map(|j| Record {
                spec: j.sample.spec.clone(),
                context: j.sample.context(j.phase),
                backend: Backend::Flex.name().into(),
                outcome: Outcome::Ok(fake.clone()),
                perfcast_version: "test".into(),
                timestamp: 0,
            })
            .collect();
        dataset.append(ModuleKind::Relu, &records).unwrap();
        let measured = vec![
            Measured {
                job: calm.clone(),
                timing: fake.clone(),
                stretch: 0,
            },
            Measured {
                job: hit.clone(),
                timing: fake.clone(),
                stretch: 1,
            },
        ];
        // Stretch 0 lies between two equal readings, stretch 1 ends at one five times slower.
        let readings = vec![Some(1000.0), Some(1000.0), Some(5000.0)];
        let canary = Canary::new(Backend::Flex);
        let revisit = Revisit {
            dataset: &dataset,
            backend: Backend::Flex,
            sweep: &sweep,
            max_bytes: f64::INFINITY,
            config: CanaryConfig::default(),
            canary: &canary,
            budget_s: 60.0,
        };
        let mut events = Vec::new();
        let report = revisit
            .run(
                measured,
                readings,
                &mut |e| {
                    if let Event::Remeasuring { rows } = e {
                        events.push(rows)
                    }
                },
                &AtomicBool::new(false),
            )
            .unwrap();
        assert_eq!((report.disturbed, report.remeasured), (1, 1));
        assert_eq!(events, [1]);
        assert!(report.readings_ms.len() >= 5, "{report:?}");
        let stored = dataset.read(ModuleKind::Relu).unwrap();
        let ms = |j: &Job| {
            stored
                .iter()
                .find(|r| r.spec == j.sample.spec)
                .and_then(|r| r.timing())
                .unwrap()
                .median_ms
        };
        assert_eq!(ms(&calm), 1e6, "a calm stretch's row is not touched");
        assert!(
            ms(&hit) < 1e3,
            "the disturbed row keeps its new visit: {}",
            ms(&hit)
        );
        assert_eq!(stored.len(), 2);
    }

    #[test]
    fn plan_expands_samples_into_phases() {
        let sweep = Sweep {
            samples: 3,
            modules: vec![ModuleKind::Relu, ModuleKind::Linear],
            ..Sweep::default()
        };
        let jobs = plan(&sweep).unwrap();
        assert_eq!(jobs.len(), 3 * 2 * 2);
    }
}
