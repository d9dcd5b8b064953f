//! `perfcast datasets`: summaries of a dataset, and a repeatability check by re-measuring.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use perfcast_core::ModuleKind;
use perfcast_data::summary::{KindSummary, quantile, summarize};
use perfcast_data::{DatasetDir, Outcome, Record};
use perfcast_profile::load::LoadGenerator;
use perfcast_profile::run::{Job, measure_block};
use perfcast_profile::sweep::Sample;
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
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

pub fn run(command: DatasetsCommand, ui: &Ui) -> anyhow::Result<ExitCode> {
    match command {
        DatasetsCommand::Show(args) => show(args),
        DatasetsCommand::Remeasure(args) => remeasure(args, ui),
    }
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
        !rows.is_empty(),
        "`{}` holds no measured rows",
        args.dir.display()
    );
    // Deterministic shuffle (Fisher-Yates over a splitmix64 stream) so `--seed` picks the rows.
    let mut state = args.seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    for i in (1..rows.len()).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        rows.swap(i, j);
    }
    rows.truncate(args.rows);
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
    let mut results = Vec::new();
    for (r, outcome) in rows.iter().zip(outcomes) {
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
