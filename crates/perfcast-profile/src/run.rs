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
use perfcast_data::{DatasetDir, Outcome, Record, measurement_key};
use serde::Serialize;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::load::LoadGenerator;
use crate::ops::{catch, estimated_bytes, prepare};
use crate::pool::with_threads;
use crate::sweep::{Sample, Sweep};
use crate::timer::measure;

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
    /// Rows skipped because they were already stored.
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
    for (i, job) in todo.iter().enumerate() {
        if interrupted.load(Ordering::Relaxed) {
            outcome = Err(Error::Interrupted { done: i });
            break;
        }
        let u = job.sample.utilisation;
        if load.as_ref().map(LoadGenerator::utilisation) != Some(u) {
            drop(load.take());
            load = Some(LoadGenerator::start(u, cores));
        }
        on_event(Event::Started { job });
        let result = measure_job(job, options.backend, sweep, options.max_bytes);
        let record = Record {
            spec: job.sample.spec.clone(),
            context: job.sample.context(job.phase),
            backend: backend.to_string(),
            outcome: result,
            perfcast_version: perfcast_core::VERSION.to_string(),
            timestamp: now(),
        };
        let kind = record.spec.kind();
        if let Err(e) = dataset.append(kind, std::slice::from_ref(&record)) {
            outcome = Err(e.into());
            break;
        }
        let counts = kinds.entry(kind.name().to_string()).or_default();
        match &record.outcome {
            Outcome::Ok(_) => counts.measured += 1,
            Outcome::Failed { reason } => {
                counts.failed += 1;
                if failures.len() < 20 {
                    failures.push(format!(
                        "{} ({}): {reason}",
                        record.spec.describe(),
                        job.phase
                    ));
                }
            }
        }
        on_event(Event::Finished {
            record: &record,
            done: i + 1,
        });
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
