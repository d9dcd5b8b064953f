//! `perfcast datasets`: summaries of a dataset, and a repeatability check by re-measuring.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use perfcast_core::ModuleKind;
use perfcast_data::summary::{KindSummary, quantile, summarize};
use perfcast_data::{DatasetDir, Outcome, Record, Timing};
use perfcast_profile::load::LoadGenerator;
use perfcast_profile::run::{Job, measure_block};
use perfcast_profile::sweep::Sample;
use perfcast_profile::timer::combine_rounds;
use perfcast_profile::{Backend, Sweep};
use serde::Serialize;

use crate::Ui;
use crate::output::{Format, emit, emit_json, fmt_ms, progress, sig3};

/// Subcommands of `perfcast datasets`.
#[derive(Debug, Subcommand)]
pub enum DatasetsCommand {
    /// Rows, ranges and latency distribution per module kind
    Show(ShowArgs),
    /// Re-measure stored rows and report how far the new medians are from the stored ones
    ///
    /// Exits 1 when the median relative difference exceeds `--max-diff-large` for rows of
    /// 1 ms or more, or `--max-diff-small` below that.
    Remeasure(RemeasureArgs),
    /// Merge measuring sessions of the same rows: each row keeps the median of its sessions
    ///
    /// On a shared machine a session's labels drift together (a slow hour makes many rows
    /// 5-30% slow at once); sessions taken hours apart (`remeasure --all --write`) and merged
    /// outvote one slow session. Rows are matched by configuration, context and backend; a row
    /// keeps the median of the sessions that measured it (the faster one of two), and rows only
    /// one input has are kept as they are.
    Merge(MergeArgs),
    /// Find data faults before a model learns them: a device whose GEMM tables disagree
    ///
    /// A linear layer and a bmm of similar size run the same GEMM kernels, so on one device
    /// their efficiency (spec roofline / measured) on compute-bound GEMMs of 1-100 GFLOP
    /// should agree about as well as on the other devices. A device whose linear/bmm ratio is
    /// more than 1.5x off the others' median is flagged (exit 1).
    Check(CheckArgs),
}

/// Arguments of `perfcast datasets check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Dataset directories, or folders of them (`datasets/neusight`)
    #[arg(required = true, num_args = 1..)]
    dirs: Vec<PathBuf>,
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

/// Arguments of `perfcast datasets show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Dataset directory
    dir: PathBuf,
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

/// Arguments of `perfcast datasets remeasure`.
#[derive(Debug, Args)]
pub struct RemeasureArgs {
    /// Dataset directory
    dir: PathBuf,
    /// Rows to re-measure, drawn at random across the kinds
    #[arg(long, default_value_t = 50)]
    rows: usize,
    /// Seed of the draw
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Largest accepted median relative difference for rows of 1 ms or more
    #[arg(long, default_value_t = 0.03)]
    max_diff_large: f64,
    /// Largest accepted median relative difference for rows under 1 ms
    #[arg(long, default_value_t = 0.10)]
    max_diff_small: f64,
    /// Visits per row, in separate passes over the drawn rows; each keeps the median of its
    /// visits (as `perfcast profile --rounds`)
    #[arg(long, default_value_t = 1)]
    rounds: u32,
    /// Re-measure every row (overrides `--rows`), in the seeded random order
    #[arg(long)]
    all: bool,
    /// Also write the re-measured rows, with their new timings, as a dataset here (a new
    /// directory; combine sessions with `perfcast datasets merge`)
    #[arg(long, value_name = "DIR")]
    write: Option<PathBuf>,
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

/// Arguments of `perfcast datasets merge`.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Dataset directories of the same device: the original and its re-measured sessions
    #[arg(required = true, num_args = 2..)]
    dirs: Vec<PathBuf>,
    /// Where to write the merged dataset (a new directory)
    #[arg(long)]
    out: PathBuf,
    /// How a row's sessions become its label
    #[arg(long, value_enum, default_value_t)]
    combine: Combine,
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

/// How `datasets merge` turns a row's session medians into one label.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Combine {
    /// The median of the sessions' medians (the faster of two), every repetition counted
    #[default]
    Median,
    /// The session with the fastest median, kept whole: on a shared machine a whole session
    /// can run slow (other tenants, a lower clock) and nothing makes a run faster than the
    /// undisturbed machine, so with several slow sessions the median would take a slow one
    Fastest,
}

impl Combine {
    /// The name `--combine` takes.
    fn name(self) -> &'static str {
        match self {
            Combine::Median => "median",
            Combine::Fastest => "fastest",
        }
    }

    /// One timing of a row from its sessions' timings (`None` for none).
    fn apply(self, timings: &[Timing]) -> Option<Timing> {
        match self {
            Combine::Median => combine_rounds(timings),
            Combine::Fastest => timings
                .iter()
                .min_by(|a, b| a.median_ms.total_cmp(&b.median_ms))
                .cloned(),
        }
    }
}

pub fn run(command: DatasetsCommand, ui: &Ui) -> anyhow::Result<ExitCode> {
    match command {
        DatasetsCommand::Show(args) => show(args),
        DatasetsCommand::Remeasure(args) => remeasure(args, ui),
        DatasetsCommand::Merge(args) => merge(args),
        DatasetsCommand::Check(args) => check(args),
    }
}

fn check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let dirs = crate::cmd::devices_eval::resolve_datasets(&args.dirs)?;
    let report = perfcast_data::consistency::gemm_consistency(&dirs)?;
    let flagged = report.iter().filter(|c| c.flagged).count();
    if args.format == Format::Json {
        emit_json(&serde_json::json!({ "gemm": report, "flagged": flagged }))?;
    } else {
        let mut t = String::from(
            "linear vs bmm efficiency on compute-bound GEMMs of 1-100 GFLOP (median, spec roofline / measured)\n\
             device                         linear    bmm  ln ratio  others  verdict\n",
        );
        if report.is_empty() {
            t.push_str("(fewer than three devices hold both tables: nothing to compare)\n");
        }
        for c in &report {
            t.push_str(&format!(
                "{:<30} {:>6.3} {:>6.3} {:>+9.2} {:>+7.2}  {}\n",
                c.device,
                c.linear_efficiency,
                c.matmul_efficiency,
                c.log_ratio,
                c.others_log_ratio,
                if c.flagged {
                    "FLAGGED: its linear file disagrees with its bmm file"
                } else {
                    "ok"
                }
            ));
        }
        emit(&t)?;
    }
    Ok(if flagged > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn read_all(dir: &DatasetDir) -> anyhow::Result<Vec<(ModuleKind, Vec<Record>)>> {
    dir.kinds()
        .into_iter()
        .map(|k| Ok((k, dir.read(k)?)))
        .collect()
}

fn show(args: ShowArgs) -> anyhow::Result<ExitCode> {
    let dir = DatasetDir::open(&args.dir)?;
    let device = dir.device()?;
    let summaries: Vec<KindSummary> = read_all(&dir)?
        .iter()
        .map(|(k, rows)| summarize(*k, rows))
        .collect();
    if args.format == Format::Json {
        emit_json(
            &serde_json::json!({ "dataset": args.dir, "device": device, "kinds": summaries }),
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = format!(
        "{}  ({}, {} GFLOP/s, {} GB/s)\n",
        args.dir.display(),
        device.name,
        sig3(device.peak_gflops),
        sig3(device.mem_bandwidth_gbs)
    );
    if summaries.is_empty() {
        t.push_str("\nno module tables yet\n");
    }
    for s in &summaries {
        t.push_str(&format!(
            "\n{}: {} rows ({} failed), backend {}\n",
            s.kind,
            s.rows,
            s.failed,
            s.backends.join(", ")
        ));
        for l in &s.latency {
            t.push_str(&format!(
                "  {:<9} {:>4} rows  min {}  p10 {}  p50 {}  p90 {}  max {}  (median spread {})\n",
                l.phase.name(),
                l.rows,
                fmt_ms(l.min_ms),
                fmt_ms(l.p10_ms),
                fmt_ms(l.p50_ms),
                fmt_ms(l.p90_ms),
                fmt_ms(l.max_ms),
                if l.median_rel_mad.is_nan() {
                    "not published".to_string()
                } else {
                    format!("{}%", sig3(100.0 * l.median_rel_mad))
                }
            ));
            let labels = ["<10us", "<100us", "<1ms", "<10ms", "<100ms", "<1s", ">=1s"];
            let most = l.decades.iter().copied().max().unwrap_or(1).max(1);
            for (label, &count) in labels.iter().zip(&l.decades) {
                if count > 0 {
                    let bar = "#".repeat((count * 30).div_ceil(most));
                    t.push_str(&format!("            {label:>7} {count:>5} {bar}\n"));
                }
            }
        }
        let ranges: Vec<String> = s
            .ranges
            .iter()
            .map(|r| {
                if r.min == r.max {
                    format!("{}={}", r.column, r.min)
                } else {
                    format!("{}={}..{}", r.column, r.min, r.max)
                }
            })
            .collect();
        t.push_str(&format!("  ranges: {}\n", ranges.join(" ")));
    }
    emit(&t)?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Serialize)]
struct Remeasured {
    kind: String,
    module: String,
    batch: usize,
    phase: String,
    stored_ms: f64,
    new_ms: f64,
    rel_diff: f64,
}

#[derive(Debug, Serialize)]
struct ClassReport {
    rows: usize,
    median_rel_diff: f64,
    p90_rel_diff: f64,
    limit: f64,
    pass: bool,
}

fn class(diffs: &[f64], limit: f64) -> ClassReport {
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

fn remeasure(args: RemeasureArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    let dir = DatasetDir::open(&args.dir)?;
    let device = dir.device()?;
    let mut rows: Vec<Record> = read_all(&dir)?
        .into_iter()
        .flat_map(|(_, r)| r)
        .filter(|r| r.timing().is_some())
        .collect();
    anyhow::ensure!(
        args.all || args.rows > 0,
        "`--rows` must be at least 1, got 0"
    );
    anyhow::ensure!(
        !rows.is_empty(),
        "`{}` holds no measured rows",
        args.dir.display()
    );
    // A row stored twice (two writers before datasets were locked) is re-measured once.
    let before = rows.len();
    let mut keys = std::collections::HashSet::new();
    rows.retain(|r| keys.insert(r.key()));
    if rows.len() < before {
        ui.info(format!(
            "note: `{}` stores {} rows twice; each is re-measured once",
            args.dir.display(),
            before - rows.len()
        ));
    }
    // Deterministic shuffle so `--seed` picks the rows (the stream starts one step in, as it
    // always has: the same seed picks the same rows as before).
    let order =
        perfcast_core::rng::shuffled(rows.len(), args.seed.wrapping_add(0x9e37_79b9_7f4a_7c15));
    let mut slots: Vec<Option<_>> = rows.into_iter().map(Some).collect();
    let mut rows: Vec<_> = order.iter().filter_map(|&i| slots[i].take()).collect();
    if let Some(out) = &args.write {
        check_new_dir(out)?;
    }
    if !args.all {
        rows.truncate(args.rows);
    }
    let mut sweep = Sweep::default();
    sweep.timing.rounds = args.rounds;
    sweep
        .timing
        .validate()
        .map_err(|e| anyhow::anyhow!("`--rounds`: {e}"))?;
    let backend: Backend = rows[0].backend.parse()?;
    if let Some(other) = rows.iter().find(|r| r.backend != rows[0].backend) {
        anyhow::bail!(
            "`{}` mixes backends `{}` and `{}`; re-measure one backend at a time",
            args.dir.display(),
            rows[0].backend,
            other.backend
        );
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
    let visits = u64::from(sweep.timing.rounds);
    let bar = progress(ui, rows.len() as u64 * visits, "remeasure");
    let mut load: Option<LoadGenerator> = None;
    let never = std::sync::atomic::AtomicBool::new(false);
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
            bar.set_message(job.sample.spec.describe());
            bar.inc(1);
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
        if args.write.is_some() {
            session.push(Record {
                outcome: outcome.clone(),
                perfcast_version: env!("CARGO_PKG_VERSION").to_string(),
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
    bar.finish_and_clear();
    if let Some(out) = &args.write {
        write_dataset(out, &device, &session)?;
    }
    let large: Vec<f64> = results
        .iter()
        .filter(|r| r.stored_ms >= 1.0)
        .map(|r| r.rel_diff)
        .collect();
    let small: Vec<f64> = results
        .iter()
        .filter(|r| r.stored_ms < 1.0)
        .map(|r| r.rel_diff)
        .collect();
    let large = class(&large, args.max_diff_large);
    let small = class(&small, args.max_diff_small);
    let pass = large.pass && small.pass;
    if args.format == Format::Json {
        emit_json(&serde_json::json!({
            "dataset": args.dir, "rows": results, "at_least_1ms": large, "under_1ms": small, "pass": pass
        }))?;
    } else {
        let mut t = format!(
            "{:<44} {:>5} {:<9} {:>10} {:>10} {:>7}\n",
            "module", "batch", "phase", "stored", "now", "diff"
        );
        for r in &results {
            t.push_str(&format!(
                "{:<44} {:>5} {:<9} {:>10} {:>10} {:>6}%\n",
                r.module,
                r.batch,
                r.phase,
                fmt_ms(r.stored_ms),
                fmt_ms(r.new_ms),
                sig3(100.0 * r.rel_diff)
            ));
        }
        for (name, c) in [(">= 1 ms", &large), ("< 1 ms", &small)] {
            t.push_str(&format!(
                "\n{name:>8}: {} rows, median difference {}% (p90 {}%), limit {}%: {}",
                c.rows,
                sig3(100.0 * c.median_rel_diff),
                sig3(100.0 * c.p90_rel_diff),
                sig3(100.0 * c.limit),
                if c.pass { "pass" } else { "FAIL" }
            ));
        }
        emit(&t)?;
    }
    Ok(if pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Refuses an output directory that already holds a dataset, so no session is overwritten.
fn check_new_dir(out: &std::path::Path) -> anyhow::Result<()> {
    anyhow::ensure!(
        !out.join("device.json").exists(),
        "`{}` already holds a dataset; choose a new directory",
        out.display()
    );
    Ok(())
}

/// Writes `records` (any kinds) as a dataset of `device` in `out`, one atomic file per kind.
fn write_dataset(
    out: &std::path::Path,
    device: &perfcast_core::DeviceSpec,
    records: &[Record],
) -> anyhow::Result<()> {
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

/// What `datasets merge` did to one kind.
#[derive(Debug, Serialize)]
struct MergedKind {
    kind: String,
    rows: usize,
    /// Rows found more than once within one input (merged into one row).
    duplicates: usize,
    /// Rows by how many sessions measured them (index 0: one session).
    by_sessions: Vec<usize>,
    /// Median relative change of the label against the first input's, over rows it has.
    median_rel_change: f64,
    /// 90th percentile of that change.
    p90_rel_change: f64,
}

/// Merges sessions: every row keeps the median of its sessions' medians
/// ([`perfcast_profile::timer::combine_rounds`], the lower middle of an even count), or with
/// `--combine fastest` the session that measured it fastest.
fn merge(args: MergeArgs) -> anyhow::Result<ExitCode> {
    check_new_dir(&args.out)?;
    let mut seen = std::collections::HashSet::new();
    for d in &args.dirs {
        let real = std::fs::canonicalize(d).unwrap_or_else(|_| d.clone());
        anyhow::ensure!(
            seen.insert(real),
            "`{}` is named twice; each session counts once",
            d.display()
        );
    }
    let dirs = args
        .dirs
        .iter()
        .map(DatasetDir::open)
        .collect::<Result<Vec<_>, _>>()?;
    let device = dirs[0].device()?;
    for (d, path) in dirs.iter().zip(&args.dirs).skip(1) {
        let other = d.device()?;
        anyhow::ensure!(
            other.name == device.name,
            "`{}` was measured on `{}`, `{}` on `{}`: only sessions of one device merge",
            path.display(),
            other.name,
            args.dirs[0].display(),
            device.name
        );
    }
    let mut merged: Vec<Record> = Vec::new();
    let mut report = Vec::new();
    for kind in ModuleKind::ALL {
        // Rows in first-seen order, each with the timings of every session that has it.
        let mut order: Vec<String> = Vec::new();
        // Per row: the record, every timing, the first input's label, the sessions that have it.
        type Merging = (Record, Vec<Timing>, Option<f64>, Vec<usize>);
        let mut rows: std::collections::HashMap<String, Merging> = std::collections::HashMap::new();
        // Rows stored twice in one session (two writers before datasets were locked): their
        // timings all count, the row once (issue 21: this used to index out of bounds).
        let mut duplicates = 0;
        for (i, d) in dirs.iter().enumerate() {
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
        let mut by_sessions = vec![0; dirs.len()];
        let mut changes = Vec::new();
        for key in &order {
            let (mut record, timings, first, sessions) =
                rows.remove(key).expect("key was inserted");
            if let Some(t) = args.combine.apply(&timings) {
                if let Some(first) = first {
                    changes.push((t.median_ms - first).abs() / first);
                }
                record.outcome = Outcome::Ok(t);
                by_sessions[sessions.len() - 1] += 1;
            }
            merged.push(record);
        }
        changes.sort_by(f64::total_cmp);
        report.push(MergedKind {
            kind: kind.name().into(),
            rows: order.len(),
            duplicates,
            by_sessions,
            median_rel_change: quantile(&changes, 0.5),
            p90_rel_change: quantile(&changes, 0.9),
        });
    }
    write_dataset(&args.out, &device, &merged)?;
    if args.format == Format::Json {
        emit_json(&serde_json::json!({
            "out": args.out,
            "combine": args.combine.name(),
            "kinds": report,
        }))?;
    } else {
        let mut t = format!(
            "merged {} sessions ({}) into {}\n",
            dirs.len(),
            args.combine.name(),
            args.out.display()
        );
        for k in &report {
            let sessions: Vec<String> = k
                .by_sessions
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(|(i, n)| format!("{n} rows x{}", i + 1))
                .collect();
            t.push_str(&format!(
                "  {}: {} rows ({}), labels moved by a median {}% (p90 {}%) from the first input\n",
                k.kind,
                k.rows,
                sessions.join(", "),
                sig3(100.0 * k.median_rel_change),
                sig3(100.0 * k.p90_rel_change)
            ));
            if k.duplicates > 0 {
                t.push_str(&format!(
                    "    {} duplicate rows within one input merged into their row\n",
                    k.duplicates
                ));
            }
        }
        emit(&t)?;
    }
    Ok(ExitCode::SUCCESS)
}
