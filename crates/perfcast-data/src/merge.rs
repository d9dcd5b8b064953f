//! Measuring sessions of the same rows merged into one dataset: each row keeps the median of
//! its sessions (or the fastest session), so one slow session on a shared machine is outvoted.
//! Also the small pieces other session tools share: a new output directory that must not hold
//! a dataset yet, and records of any kinds written as one dataset.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use perfcast_core::{DeviceSpec, ModuleKind};
use serde::Serialize;

use crate::dataset::{DEVICE_FILE, DatasetDir};
use crate::error::{Error, Result};
use crate::record::{Outcome, Record, Timing};
use crate::summary::quantile;

/// One timing from several visits of the same configuration: the median of their medians (the
/// lower middle one for an even count, since slow visits are the failure mode), the fastest
/// call, the widest p10-p90, the median MAD, and every repetition counted.
pub fn combine_rounds(visits: &[Timing]) -> Option<Timing> {
    let mut medians: Vec<f64> = visits.iter().map(|t| t.median_ms).collect();
    medians.sort_by(f64::total_cmp);
    let median_ms = *medians.get(medians.len().checked_sub(1)? / 2)?;
    let fold = |f: fn(&Timing) -> Option<f64>, pick: fn(f64, f64) -> f64| {
        visits.iter().filter_map(f).reduce(pick)
    };
    let mut mads: Vec<f64> = visits.iter().filter_map(|t| t.mad_ms).collect();
    mads.sort_by(f64::total_cmp);
    Some(Timing {
        median_ms,
        min_ms: fold(|t| t.min_ms, f64::min),
        mad_ms: mads.get(mads.len().saturating_sub(1) / 2).copied(),
        p10_ms: fold(|t| t.p10_ms, f64::min),
        p90_ms: fold(|t| t.p90_ms, f64::max),
        repetitions: visits.iter().map(|t| t.repetitions).sum(),
    })
}

/// How a row's session timings become its one timing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Combine {
    /// The median of the sessions' medians (the faster of two), every repetition counted.
    #[default]
    Median,
    /// The session with the fastest median, kept whole: nothing makes a run faster than the
    /// undisturbed machine, so with several slow sessions the median would take a slow one.
    Fastest,
}

impl Combine {
    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Combine::Median => "median",
            Combine::Fastest => "fastest",
        }
    }

    /// One timing of a row from its sessions' timings (`None` for none).
    pub fn apply(self, timings: &[Timing]) -> Option<Timing> {
        match self {
            Combine::Median => combine_rounds(timings),
            Combine::Fastest => timings
                .iter()
                .min_by(|a, b| a.median_ms.total_cmp(&b.median_ms))
                .cloned(),
        }
    }
}

/// What merging did to one kind.
#[derive(Clone, Debug, Serialize)]
pub struct MergedKind {
    /// The kind's name.
    pub kind: String,
    /// Rows written.
    pub rows: usize,
    /// Rows found more than once within one input (merged into one row).
    pub duplicates: usize,
    /// Rows by how many sessions measured them (index 0: one session).
    pub by_sessions: Vec<usize>,
    /// Median relative change of the label against the first input's, over rows it has.
    pub median_rel_change: f64,
    /// 90th percentile of that change.
    pub p90_rel_change: f64,
}

/// What [`merge_sessions`] wrote.
#[derive(Clone, Debug, Serialize)]
pub struct MergeReport {
    /// The merged dataset.
    pub out: PathBuf,
    /// How rows were combined.
    pub combine: Combine,
    /// Sessions merged.
    pub sessions: usize,
    /// Per kind, in [`ModuleKind::ALL`] order.
    pub kinds: Vec<MergedKind>,
}

/// Refuses an output directory that already holds a dataset, so no session is overwritten.
pub fn check_new_dir(out: &Path) -> Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(out) else {
        return Ok(());
    };
    if !meta.is_dir() {
        return Err(Error::Input(format!(
            "`{}` exists and is not a directory; choose a new directory",
            out.display()
        )));
    }
    // Any file there may be a user's (a dataset's parquet without its device.json among them).
    let first = std::fs::read_dir(out)
        .map_err(|e| crate::import::cannot_read(out, &e))?
        .flatten()
        .next();
    if let Some(entry) = first {
        let what = if out.join(DEVICE_FILE).exists() {
            "a dataset".to_string()
        } else {
            format!("`{}`", entry.file_name().to_string_lossy())
        };
        return Err(Error::Input(format!(
            "`{}` already holds {what}; choose a new directory",
            out.display()
        )));
    }
    Ok(())
}

/// Writes `records` (any kinds) as a dataset of `device` in `out`, one atomic file per kind.
pub fn write_dataset(out: &Path, device: &DeviceSpec, records: &[Record]) -> Result<()> {
    let dir = DatasetDir::create_or_open(out, device)?;
    for kind in ModuleKind::ALL {
        let rows: Vec<Record> = records
            .iter()
            .filter(|r| r.spec.kind() == kind)
            .cloned()
            .collect();
        if !rows.is_empty() {
            dir.write(kind, &rows)?;
        }
    }
    Ok(())
}

/// Merges the sessions in `dirs` (datasets of one device; the first is the original) into a
/// new dataset at `out`. Rows are matched by configuration, context and backend; a row keeps
/// `combine` of the sessions that measured it, and rows only one input has are kept as they
/// are.
pub fn merge_sessions(dirs: &[PathBuf], out: &Path, combine: Combine) -> Result<MergeReport> {
    check_new_dir(out)?;
    let mut seen = HashSet::new();
    for d in dirs {
        let real = std::fs::canonicalize(d).unwrap_or_else(|_| d.clone());
        if !seen.insert(real) {
            return Err(Error::Input(format!(
                "`{}` is named twice; each session counts once",
                d.display()
            )));
        }
    }
    let opened = dirs
        .iter()
        .map(DatasetDir::open)
        .collect::<Result<Vec<_>>>()?;
    let Some(first) = opened.first() else {
        return Err(Error::Input("no session to merge".into()));
    };
    let device = first.device()?;
    for (d, path) in opened.iter().zip(dirs).skip(1) {
        let other = d.device()?;
        if other.name != device.name {
            return Err(Error::Input(format!(
                "`{}` was measured on `{}`, `{}` on `{}`: only sessions of one device merge",
                path.display(),
                other.name,
                dirs[0].display(),
                device.name
            )));
        }
    }
    let mut merged: Vec<Record> = Vec::new();
    let mut kinds = Vec::new();
    for kind in ModuleKind::ALL {
        // Rows in first-seen order, each with the timings of every session that has it.
        let mut order: Vec<String> = Vec::new();
        // Per row: the record, every timing, the first input's label, the sessions that have it.
        type Merging = (Record, Vec<Timing>, Option<f64>, Vec<usize>);
        let mut rows: HashMap<String, Merging> = HashMap::new();
        // Rows stored twice in one session (two writers before datasets were locked): their
        // timings all count, the row once (this used to index out of bounds).
        let mut duplicates = 0;
        for (i, d) in opened.iter().enumerate() {
            for r in d.read(kind)? {
                let key = r.key();
                let entry = rows.entry(key.clone()).or_insert_with(|| {
                    order.push(key);
                    (r.clone(), Vec::new(), None, Vec::new())
                });
                if entry.3.last() == Some(&i) {
                    duplicates += 1;
                } else {
                    entry.3.push(i);
                }
                if let Some(t) = r.timing() {
                    entry.1.push(t.clone());
                    if i == 0 {
                        entry.2 = Some(t.median_ms);
                    }
                }
            }
        }
        if order.is_empty() {
            continue;
        }
        let mut by_sessions = vec![0; opened.len()];
        let mut changes = Vec::new();
        for key in &order {
            let Some((mut record, timings, first, sessions)) = rows.remove(key) else {
                continue;
            };
            if let Some(t) = combine.apply(&timings) {
                if let Some(first) = first {
                    changes.push((t.median_ms - first).abs() / first);
                }
                record.outcome = Outcome::Ok(t);
                by_sessions[sessions.len() - 1] += 1;
            }
            merged.push(record);
        }
        changes.sort_by(f64::total_cmp);
        kinds.push(MergedKind {
            kind: kind.name().into(),
            rows: order.len(),
            duplicates,
            by_sessions,
            median_rel_change: quantile(&changes, 0.5),
            p90_rel_change: quantile(&changes, 0.9),
        });
    }
    write_dataset(out, &device, &merged)?;
    Ok(MergeReport {
        out: out.to_path_buf(),
        combine,
        sessions: opened.len(),
        kinds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfcast_core::{Context, ModuleSpec, Phase};

    fn visit(median: f64, min: f64, p90: f64) -> Timing {
        Timing {
            median_ms: median,
            min_ms: Some(min),
            mad_ms: Some(median / 100.0),
            p10_ms: Some(min),
            p90_ms: Some(p90),
            repetitions: Some(10),
        }
    }

    #[test]
    fn combined_rounds_ignore_one_slow_visit() {
        // The second visit ran in a slow phase: twice the time.
        let t = combine_rounds(&[
            visit(10.0, 9.9, 10.2),
            visit(20.0, 19.0, 21.0),
            visit(10.4, 10.1, 10.6),
        ])
        .expect("three visits");
        assert_eq!(t.median_ms, 10.4);
        assert_eq!(t.min_ms, Some(9.9));
        assert_eq!(t.p90_ms, Some(21.0));
        assert_eq!(t.mad_ms, Some(10.4 / 100.0));
        assert_eq!(t.repetitions, Some(30));
        // Two visits: the faster one, since noise only ever adds time.
        let two =
            combine_rounds(&[visit(20.0, 19.0, 21.0), visit(10.0, 9.9, 10.2)]).expect("two visits");
        assert_eq!(two.median_ms, 10.0);
        let one = visit(3.0, 2.9, 3.1);
        assert_eq!(combine_rounds(std::slice::from_ref(&one)), Some(one));
        assert_eq!(combine_rounds(&[]), None);
        assert_eq!(
            Combine::Fastest
                .apply(&[visit(20.0, 19.0, 21.0), visit(12.0, 9.0, 30.0)])
                .map(|t| t.median_ms),
            Some(12.0)
        );
    }

    fn record(features: usize, ms: f64) -> Record {
        Record {
            spec: ModuleSpec::from_json(&format!(r#"{{"kind":"relu","shape":[1,1,{features}]}}"#))
                .expect("spec"),
            context: Context {
                batch: 1,
                phase: Phase::Inference,
                threads: 1,
                utilisation: 0.0,
            },
            backend: "flex".into(),
            outcome: Outcome::Ok(visit(ms, ms, ms)),
            perfcast_version: "test".into(),
            timestamp: 0,
        }
    }

    #[test]
    fn sessions_merge_row_by_row_and_refuse_mixed_devices() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let device = perfcast_core::testing::cpu_device();
        let kind = ModuleKind::Relu;
        let a = tmp.path().join("a");
        let b = tmp.path().join("b");
        let c = tmp.path().join("c");
        write_dataset(&a, &device, &[record(8, 1.0), record(16, 2.0)]).expect("a");
        write_dataset(&b, &device, &[record(8, 3.0)]).expect("b");
        write_dataset(&c, &device, &[record(8, 2.0)]).expect("c");
        let out = tmp.path().join("merged");
        let report = merge_sessions(&[a.clone(), b.clone(), c.clone()], &out, Combine::Median)
            .expect("merge");
        assert_eq!(report.sessions, 3);
        let k = &report.kinds[0];
        assert_eq!((k.kind.as_str(), k.rows, k.duplicates), ("relu", 2, 0));
        // One row measured by all three sessions, one by the first alone.
        assert_eq!(k.by_sessions, [1, 0, 1]);
        let merged = DatasetDir::open(&out)
            .expect("merged")
            .read(kind)
            .expect("rows");
        let ms: Vec<f64> = merged
            .iter()
            .filter_map(|r| r.timing().map(|t| t.median_ms))
            .collect();
        assert_eq!(ms, [2.0, 2.0]);
        // The output now holds a dataset: a second merge into it is refused.
        let err = merge_sessions(&[a.clone(), b.clone()], &out, Combine::Fastest)
            .expect_err("existing output")
            .to_string();
        assert!(err.contains("already holds a dataset"), "{err}");
        // A folder holding any file (a user's parquet without its device.json) is refused and
        // left as it was.
        let user = tmp.path().join("user");
        std::fs::create_dir_all(&user).unwrap();
        std::fs::write(user.join("conv2d.parquet"), b"mine").unwrap();
        let err = merge_sessions(&[a.clone(), b.clone()], &user, Combine::Median)
            .expect_err("a folder with a file")
            .to_string();
        assert!(err.contains("already holds `conv2d.parquet`"), "{err}");
        assert_eq!(std::fs::read(user.join("conv2d.parquet")).unwrap(), b"mine");
        let err = merge_sessions(
            &[a.clone(), a.clone()],
            &tmp.path().join("x"),
            Combine::Median,
        )
        .expect_err("named twice")
        .to_string();
        assert!(err.contains("is named twice"), "{err}");
        let other = tmp.path().join("other");
        let elsewhere = DeviceSpec {
            name: "another cpu".into(),
            ..device
        };
        write_dataset(&other, &elsewhere, &[record(8, 1.0)]).expect("other");
        let err = merge_sessions(&[a, other], &tmp.path().join("y"), Combine::Median)
            .expect_err("two devices")
            .to_string();
        assert!(err.contains("only sessions of one device merge"), "{err}");
    }
}
