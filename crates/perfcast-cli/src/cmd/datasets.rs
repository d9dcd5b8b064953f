//! `perfcast datasets`: summaries of a dataset, a repeatability check by re-measuring, and
//! framework timings stripped to kernel rows.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use perfcast_data::summary::{KindSummary, summarize};
use perfcast_data::{DatasetDir, merge};
use perfcast_profile::remeasure::{RemeasurePlan, remeasure as remeasure_rows};

use crate::Ui;
use crate::output::{Format, emit, emit_json};
use crate::progress::Bars;
use crate::render;

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
    /// slow at once); sessions taken hours apart (`remeasure --all --write`) and merged
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
    /// Turn layer timings measured through a framework into kernel rows a GPU bundle can learn
    ///
    /// Such timings hold the kernels plus a per-call floor plus the framework's own work
    /// around them (TensorFlow's layout transposes, bias and activation kernels, the update
    /// step). On the reference devices, which kernel-level sources also measured, the bundle's
    /// answer stands for the kernels: per kind and phase the framework's factor is the median
    /// of (time - floor) / answer there, averaged (geometric mean) over the references. Every
    /// other device's rows at least `--min-floor-multiple` times its floor are written as
    /// (time - floor) / factor, at most `--max-rows` per device, kind and phase; the factors
    /// go to `overhead.json` in the output.
    ///
    /// Example: `perfcast datasets strip-overhead --data datasets/justus --bundle
    /// target/gpu-kernels --reference geforce-gtx-1080-ti,tesla-p100-pcie-16gb,
    /// tesla-v100-pcie-16gb --modules conv2d --out datasets/justus-kernels`
    StripOverhead(StripArgs),
}

/// Arguments of `perfcast datasets strip-overhead`.
#[derive(Debug, Args)]
pub struct StripArgs {
    /// Dataset directories, one per device, or folders of them (`datasets/justus`)
    #[arg(long, required = true, num_args = 1..)]
    data: Vec<PathBuf>,
    /// The bundle whose answers stand for the kernels on the references
    #[arg(long)]
    bundle: PathBuf,
    /// Dataset folder names of the devices kernel-level sources also measured
    #[arg(long, required = true, value_delimiter = ',')]
    reference: Vec<String>,
    /// Module kinds (default: every kind of the datasets)
    #[arg(long, value_delimiter = ',')]
    modules: Vec<perfcast_core::ModuleKind>,
    /// Where to write the stripped datasets (one per non-reference device)
    #[arg(long)]
    out: PathBuf,
    /// Replace an earlier output at `--out`
    #[arg(long)]
    force: bool,
    /// At most this many rows per device, kind and phase (a seeded sample; 0: all)
    #[arg(long, default_value_t = 1000)]
    max_rows: usize,
    /// Quantile of a device's times taken as its per-call floor
    #[arg(long, default_value_t = 0.02)]
    floor_quantile: f64,
    /// Keep rows whose time is at least this multiple of the floor
    #[arg(long, default_value_t = 3.0)]
    min_floor_multiple: f64,
    /// A reference counts for a kind and phase only with at least this many rows above its
    /// floor
    #[arg(long, default_value_t = 20)]
    min_reference_rows: usize,
    /// Seed of the sample
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    format: Format,
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

impl From<Combine> for merge::Combine {
    fn from(c: Combine) -> merge::Combine {
        match c {
            Combine::Median => merge::Combine::Median,
            Combine::Fastest => merge::Combine::Fastest,
        }
    }
}

pub fn run(command: DatasetsCommand, ui: &Ui) -> anyhow::Result<ExitCode> {
    match command {
        DatasetsCommand::Show(args) => show(args),
        DatasetsCommand::Remeasure(args) => remeasure(args, ui),
        DatasetsCommand::Merge(args) => merge(args),
        DatasetsCommand::Check(args) => check(args),
        DatasetsCommand::StripOverhead(args) => strip(args),
    }
}

/// Strips a framework's overhead ([`perfcast_calibrate::overhead::strip_overhead`]).
fn strip(args: StripArgs) -> anyhow::Result<ExitCode> {
    use perfcast_calibrate::overhead::{StripSettings, strip_overhead};
    perfcast_data::import::refuse_existing(&args.out, args.force)?;
    let dirs = perfcast_data::resolve_datasets(&args.data)?;
    let settings = StripSettings {
        floor_quantile: args.floor_quantile,
        min_floor_multiple: args.min_floor_multiple,
        max_rows: (args.max_rows > 0).then_some(args.max_rows),
        min_reference_rows: args.min_reference_rows,
        seed: args.seed,
    };
    let (report, rows) = strip_overhead(
        &args.bundle,
        &dirs,
        &args.reference,
        &args.modules,
        &settings,
    )?;
    perfcast_calibrate::overhead::write_stripped(&args.out, args.force, &report, &rows)?;
    match args.format {
        Format::Json => emit_json(&report)?,
        Format::Text => emit(&render::datasets::strip(&report, &args.out))?,
    }
    Ok(ExitCode::SUCCESS)
}

fn check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let dirs = perfcast_data::resolve_datasets(&args.dirs)?;
    let report = perfcast_data::consistency::gemm_consistency(&dirs)?;
    let flagged = report.iter().filter(|c| c.flagged).count();
    match args.format {
        Format::Json => emit_json(&serde_json::json!({ "gemm": report, "flagged": flagged }))?,
        Format::Text => emit(&render::datasets::check(&report))?,
    }
    Ok(if flagged > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn show(args: ShowArgs) -> anyhow::Result<ExitCode> {
    let dir = DatasetDir::open(&args.dir)?;
    let device = dir.device()?;
    let summaries: Vec<KindSummary> = dir
        .kinds()
        .into_iter()
        .map(|k| Ok(summarize(k, &dir.read(k)?)))
        .collect::<anyhow::Result<_>>()?;
    match args.format {
        Format::Json => emit_json(
            &serde_json::json!({ "dataset": args.dir, "device": device, "kinds": summaries }),
        )?,
        Format::Text => emit(&render::datasets::show(&args.dir, &device, &summaries))?,
    }
    Ok(ExitCode::SUCCESS)
}

fn remeasure(args: RemeasureArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    let plan = RemeasurePlan {
        rows: args.rows,
        seed: args.seed,
        max_diff_large: args.max_diff_large,
        max_diff_small: args.max_diff_small,
        rounds: args.rounds,
        all: args.all,
        write: args.write.clone(),
    };
    let r = remeasure_rows(&args.dir, &plan, Bars::new(ui).as_ref())?;
    match args.format {
        Format::Json => emit_json(&serde_json::json!({
            "dataset": r.dataset, "rows": r.rows, "at_least_1ms": r.at_least_1ms,
            "under_1ms": r.under_1ms, "pass": r.pass
        }))?,
        Format::Text => emit(&render::datasets::remeasure(&r))?,
    }
    Ok(if r.pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Merges sessions ([`perfcast_data::merge::merge_sessions`]).
fn merge(args: MergeArgs) -> anyhow::Result<ExitCode> {
    let report = merge::merge_sessions(&args.dirs, &args.out, args.combine.into())?;
    match args.format {
        Format::Json => emit_json(&serde_json::json!({
            "out": report.out,
            "combine": report.combine.name(),
            "kinds": report.kinds,
        }))?,
        Format::Text => emit(&render::datasets::merge(&report))?,
    }
    Ok(ExitCode::SUCCESS)
}
