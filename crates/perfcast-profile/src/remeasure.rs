//! Re-measuring stored rows: a repeatability check of a dataset (`perfcast datasets
//! remeasure`). Rows are drawn in a seeded random order, measured again the way `profile`
//! measured them, and each new median is compared with the stored one; optionally the new
//! timings are written as a session of their own, for `perfcast datasets merge`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use perfcast_core::progress::Observer;
use perfcast_data::merge::{check_new_dir, write_dataset};
use perfcast_data::summary::quantile;
use perfcast_data::{DatasetDir, Outcome, Record};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::load::LoadGenerator;
use crate::run::{Job, measure_block};
use crate::sweep::Sample;
use crate::{Backend, Sweep};

/// The progress stage of [`remeasure`].
pub const STAGE: &str = "remeasure";

/// What to re-measure and how strictly to judge it.
#[derive(Clone, Debug)]
pub struct RemeasurePlan {
    /// Rows to re-measure, drawn at random across the kinds.
    pub rows: usize,
    /// Seed of the draw.
    pub seed: u64,
    /// Largest accepted median relative difference for rows of 1 ms or more.
    pub max_diff_large: f64,
    /// Largest accepted median relative difference for rows under 1 ms.
    pub max_diff_small: f64,
    /// Visits per row, in separate passes; each keeps the median of its visits.
    pub rounds: u32,
    /// Re-measure every row (overrides `rows`), in the seeded random order.
    pub all: bool,
    /// Also write the re-measured rows, with their new timings, as a dataset here.
    pub write: Option<PathBuf>,
}

/// One row measured again.
#[derive(Clone, Debug, Serialize)]
pub struct Remeasured {
    /// Module kind.
    pub kind: String,
    /// The module, described.
    pub module: String,
    /// Batch size.
    pub batch: usize,
    /// Phase name.
    pub phase: String,
    /// Stored median, ms.
    pub stored_ms: f64,
    /// New median, ms.
    pub new_ms: f64,
    /// |new - stored| / stored.
    pub rel_diff: f64,
}

/// The verdict on one class of rows (at least 1 ms, or under).
#[derive(Clone, Debug, Serialize)]
pub struct ClassReport {
    /// Rows in the class.
    pub rows: usize,
    /// Median relative difference.
    pub median_rel_diff: f64,
    /// 90th percentile of it.
    pub p90_rel_diff: f64,
    /// The largest accepted median.
    pub limit: f64,
    /// Whether the median is within the limit (an empty class passes).
    pub pass: bool,
}

impl ClassReport {
    fn of(diffs: &[f64], limit: f64) -> ClassReport {
        let mut d = diffs.to_vec();
        d.sort_by(f64::total_cmp);
        let median = quantile(&d, 0.5);
        ClassReport {
            rows: d.len(),
            median_rel_diff: median,
            p90_rel_diff: quantile(&d, 0.9),
            limit,
            pass: d.is_empty() || median <= limit,
        }
    }
}

/// What [`remeasure`] found.
#[derive(Clone, Debug, Serialize)]
pub struct RemeasureReport {
    /// The dataset re-measured.
    pub dataset: PathBuf,
    /// Every row measured both times.
    pub rows: Vec<Remeasured>,
    /// Rows of 1 ms or more.
    pub at_least_1ms: ClassReport,
    /// Rows under 1 ms.
    pub under_1ms: ClassReport,
    /// Both classes pass.
    pub pass: bool,
}

/// Re-measures rows of the dataset at `dir` as `plan` says; notes (rows stored twice) and
/// progress (stage [`STAGE`]) go to `observer`.
pub fn remeasure(
    dir: &Path,
    plan: &RemeasurePlan,
    observer: &dyn Observer,
) -> Result<RemeasureReport> {
    let dataset = DatasetDir::open(dir)?;
    let device = dataset.device()?;
    let mut rows: Vec<Record> = Vec::new();
    for kind in dataset.kinds() {
        rows.extend(
            dataset
                .read(kind)?
                .into_iter()
                .filter(|r| r.timing().is_some()),
        );
    }
    if !plan.all && plan.rows == 0 {
        return Err(Error::Input("`--rows` must be at least 1, got 0".into()));
    }
    if rows.is_empty() {
        return Err(Error::Input(format!(
            "`{}` holds no measured rows",
            dir.display()
        )));
    }
    // A row stored twice (two writers before datasets were locked) is re-measured once.
    let before = rows.len();
    let mut keys = HashSet::new();
    rows.retain(|r| keys.insert(r.key()));
    if rows.len() < before {
        observer.note(&format!(
            "note: `{}` stores {} rows twice; each is re-measured once",
            dir.display(),
            before - rows.len()
        ));
    }
    // Deterministic shuffle so the seed picks the rows (the stream starts one step in, as it
    // always has: the same seed picks the same rows as before).
    let order =
        perfcast_core::rng::shuffled(rows.len(), plan.seed.wrapping_add(0x9e37_79b9_7f4a_7c15));
    let mut slots: Vec<Option<_>> = rows.into_iter().map(Some).collect();
    let mut rows: Vec<Record> = order.iter().filter_map(|&i| slots[i].take()).collect();
    if let Some(out) = &plan.write {
        check_new_dir(out)?;
    }
    if !plan.all {
        rows.truncate(plan.rows);
    }
    let mut sweep = Sweep::default();
    sweep.timing.rounds = plan.rounds;
    sweep
        .timing
        .validate()
        .map_err(|e| Error::Input(format!("`--rounds`: {e}")))?;
    let backend: Backend = rows[0].backend.parse()?;
    if let Some(other) = rows.iter().find(|r| r.backend != rows[0].backend) {
        return Err(Error::Input(format!(
            "`{}` mixes backends `{}` and `{}`; re-measure one backend at a time",
            dir.display(),
            rows[0].backend,
            other.backend
        )));
    }
    let jobs: Vec<Job> = rows
        .iter()
        .map(|r| Job {
            sample: Sample {
                spec: r.spec.clone(),
                batch: r.context.batch,
                threads: r.context.threads,
                utilisation: r.context.utilisation,
            },
            phase: r.context.phase,
        })
        .collect();
    observer.begin(STAGE, rows.len() as u64 * u64::from(sweep.timing.rounds));
    let mut load: Option<LoadGenerator> = None;
    let never = AtomicBool::new(false);
    let outcomes = measure_block(
        &jobs,
        backend,
        &sweep,
        f64::INFINITY,
        &mut |u| {
            if load.as_ref().map(LoadGenerator::utilisation) != Some(u) {
                drop(load.take());
                load = Some(LoadGenerator::start(u, device.cores as usize));
            }
        },
        &mut |job| {
            observer.message(STAGE, &job.sample.spec.describe());
            observer.advance(STAGE, 1);
        },
        &never,
    )
    .unwrap_or_default();
    drop(load);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let mut session: Vec<Record> = Vec::new();
    let mut results = Vec::new();
    for (r, outcome) in rows.iter().zip(outcomes) {
        if plan.write.is_some() {
            session.push(Record {
                outcome: outcome.clone(),
                perfcast_version: perfcast_core::VERSION.to_string(),
                timestamp: now,
                ..r.clone()
            });
        }
        let (Outcome::Ok(new), Some(old)) = (outcome, r.timing()) else {
            continue;
        };
        results.push(Remeasured {
            kind: r.spec.kind().name().into(),
            module: r.spec.describe(),
            batch: r.context.batch,
            phase: r.context.phase.name().into(),
            stored_ms: old.median_ms,
            new_ms: new.median_ms,
            rel_diff: (new.median_ms - old.median_ms).abs() / old.median_ms,
        });
    }
    observer.end(STAGE);
    if let Some(out) = &plan.write {
        write_dataset(out, &device, &session)?;
    }
    let class = |large: bool, limit: f64| {
        let diffs: Vec<f64> = results
            .iter()
            .filter(|r| (r.stored_ms >= 1.0) == large)
            .map(|r| r.rel_diff)
            .collect();
        ClassReport::of(&diffs, limit)
    };
    let at_least_1ms = class(true, plan.max_diff_large);
    let under_1ms = class(false, plan.max_diff_small);
    Ok(RemeasureReport {
        dataset: dir.to_path_buf(),
        pass: at_least_1ms.pass && under_1ms.pass,
        rows: results,
        at_least_1ms,
        under_1ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_class_passes_on_its_median_and_an_empty_class_passes() {
        let c = ClassReport::of(&[0.5, 0.01, 0.02], 0.03);
        assert_eq!(c.rows, 3);
        assert_eq!(c.median_rel_diff, 0.02);
        assert!(c.pass);
        assert!(!ClassReport::of(&[0.05, 0.04], 0.03).pass);
        assert!(ClassReport::of(&[], 0.03).pass);
    }
}
