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
}

/// Expands a sweep into jobs, grouped by background load so the load generator restarts rarely.
pub fn plan(sweep: &Sweep) -> Result<Vec<Job>> {
    let mut jobs = Vec::new();
    for &kind in &sweep.modules {
        let samples = sweep.sample(kind).map_err(|message| Error::Sweep {
            path: sweep.source.clone(),
            message,
        })?;
        for sample in samples {
            for &phase in &sweep.phases {
                jobs.push(Job {
                    sample: sample.clone(),
                    phase,
                });
            }
        }
    }
    jobs.sort_by(|a, b| a.sample.utilisation.total_cmp(&b.sample.utilisation));
    Ok(jobs)
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
/// long enough for the VM's slow phases (seconds to tens of seconds) to pass between visits.
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
    let started = Instant::now();
    let dataset = DatasetDir::create_or_open(&options.out, &options.device)?;
    let jobs = plan(sweep)?;
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
        for record in &records {
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
                Outcome::Ok(_) => counts.measured += 1,
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
    }
    drop(load);
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
    })
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
