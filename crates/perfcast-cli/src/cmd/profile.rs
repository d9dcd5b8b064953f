//! `perfcast profile`: measure a sweep of module configurations into a dataset.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;
use clap::Args;
use perfcast_core::{CpuTopology, ModuleKind, Phase, slugify};
use perfcast_data::Outcome;
use perfcast_profile::run::{Event, RunOptions, run as run_sweep};
use perfcast_profile::sweep::{Param, Value};
use perfcast_profile::{Backend, Sweep, probe};

use crate::Ui;
use crate::output::{Format, emit, emit_json, fmt_ms, progress};
use crate::render;

/// Arguments of `perfcast profile`.
#[derive(Debug, Args)]
pub struct ProfileArgs {
    /// Module kinds, comma-separated (default: conv2d,linear,maxpool2d,batchnorm2d,relu)
    #[arg(long, value_delimiter = ',')]
    modules: Vec<ModuleKind>,
    /// Configurations per module kind (each measured in every phase)
    #[arg(long)]
    samples: Option<usize>,
    /// Sweep TOML overriding the built-in ranges and timing (format: docs/profiling.md, "Sweep files")
    #[arg(long)]
    sweep: Option<PathBuf>,
    /// Dataset directory (default: datasets/<this device>)
    #[arg(long)]
    out: Option<PathBuf>,
    /// Backend to measure on
    #[arg(long, default_value = "flex")]
    backend: Backend,
    /// Skip rows the dataset already holds (continue a killed run)
    #[arg(long)]
    resume: bool,
    /// RNG seed of the sampler
    #[arg(long)]
    seed: Option<u64>,
    /// Phases, comma-separated: inference, training
    #[arg(long, value_delimiter = ',')]
    phases: Vec<Phase>,
    /// Batch sizes to draw from, comma-separated
    #[arg(long, value_delimiter = ',')]
    batch: Vec<usize>,
    /// Compute thread counts to draw from, comma-separated (default 1: the most repeatable)
    #[arg(long, value_delimiter = ',')]
    threads: Vec<usize>,
    /// Background utilisation shares in [0, 1) to draw from, comma-separated
    #[arg(long, value_delimiter = ',')]
    utilisation: Vec<f64>,
    /// Cap on the timed samples of one configuration, seconds (the sweep's
    /// `timing.max_time_s`, default 0.6); lower is faster and noisier for small ops
    #[arg(long)]
    max_time_s: Option<f64>,
    /// Visits per configuration, in separate passes over blocks of 48 rows; each row keeps the
    /// median of its visits (the sweep's `timing.rounds`, default 1). Guards against a single
    /// slow visit, for N times the time; a slow phase longer than a block still shows
    #[arg(long)]
    rounds: Option<u32>,
    /// Output format of the summary
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

fn choice<T: Into<f64> + Copy>(values: &[T]) -> Param {
    Param::Choice(values.iter().map(|&v| Value::Num(v.into())).collect())
}

/// The sweep from the file (or built-in) with command-line overrides on top.
fn build_sweep(args: &ProfileArgs) -> anyhow::Result<Sweep> {
    let mut sweep = match &args.sweep {
        Some(path) => Sweep::from_file(path)?,
        None => Sweep::default(),
    };
    if !args.modules.is_empty() {
        let mut kinds = args.modules.clone();
        kinds.dedup();
        sweep.modules = kinds;
    }
    if let Some(n) = args.samples {
        let most = perfcast_profile::sweep::MAX_SAMPLES;
        anyhow::ensure!(
            (1..=most).contains(&n),
            "`--samples` must be in [1, {most}], got {n}"
        );
        sweep.samples = n;
    }
    if let Some(seed) = args.seed {
        sweep.seed = seed;
    }
    if !args.phases.is_empty() {
        sweep.phases = args.phases.clone();
    }
    if !args.batch.is_empty() {
        sweep.batch = choice(&args.batch.iter().map(|&b| b as f64).collect::<Vec<_>>());
    }
    if !args.threads.is_empty() {
        sweep.threads = choice(&args.threads.iter().map(|&t| t as f64).collect::<Vec<_>>());
    }
    if !args.utilisation.is_empty() {
        sweep.utilisation = choice(&args.utilisation);
    }
    if let Some(t) = args.max_time_s {
        sweep.timing.max_time_s = t;
    }
    if let Some(r) = args.rounds {
        sweep.timing.rounds = r;
    }
    sweep
        .validate()
        .map_err(|message| perfcast_profile::Error::Sweep {
            path: args
                .sweep
                .clone()
                .unwrap_or_else(perfcast_profile::sweep::builtin_path),
            message: format!("after command-line overrides: {message}"),
        })?;
    Ok(sweep)
}

/// Warns when other processes keep cores busy: every timing taken now would come out inflated.
pub fn warn_if_busy(ui: &Ui) {
    if let Some(warning) = probe::busy_warning() {
        ui.info(warning);
    }
}

pub fn run(args: ProfileArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    let sweep = build_sweep(&args)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("datasets").join(slugify(&CpuTopology::detect().model)));
    profile(&sweep, &out, args.backend, args.resume, args.format, ui)
}

/// Measures `sweep` into the dataset at `out` (this device's spec probed first) with a
/// progress bar; Ctrl-C stops after the row in flight. Prints the summary.
pub fn profile(
    sweep: &Sweep,
    out: &Path,
    backend: Backend,
    resume: bool,
    format: Format,
    ui: &Ui,
) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        backend.available(),
        "backend `{}` is not in this build\n\nhint: rebuild with `cargo build --release --features wgpu`",
        backend
    );
    ui.info(format!(
        "measuring this device's peaks for `{}`...",
        out.join("device.json").display()
    ));
    let (device, _) = probe::local_cpu(Backend::Flex)?;
    warn_if_busy(ui);
    let memory = device.memory_gb * 1e9;
    let options = RunOptions {
        backend,
        out: out.to_path_buf(),
        device,
        resume,
        max_bytes: (sweep.max_mib * 1048576.0).min(0.5 * memory),
    };

    let interrupted = Arc::new(AtomicBool::new(false));
    {
        let flag = Arc::clone(&interrupted);
        // A second Ctrl-C after the first kills the process the usual way.
        let _ = ctrlc::set_handler(move || {
            if flag.swap(true, Ordering::SeqCst) {
                std::process::exit(130);
            }
        });
    }
    let bar = progress(ui, 0, "profile");
    let verbose = ui.verbose > 0 && !ui.quiet;
    // A hidden bar swallows println: log lines go straight to stderr then.
    let log = |line: String| {
        if bar.is_hidden() {
            eprintln!("{line}");
        } else {
            bar.println(line);
        }
    };
    let mut on_event = |event: Event<'_>| match event {
        Event::Planned { total, skipped } => {
            bar.set_length(total as u64);
            if skipped > 0 {
                log(format!(
                    "resuming: {skipped} rows already measured, {total} to go"
                ));
            }
        }
        Event::Started { job } => {
            bar.set_message(format!("{} ({})", job.sample.spec.describe(), job.phase))
        }
        Event::Finished { record, .. } => {
            bar.inc(1);
            if verbose {
                let what = match &record.outcome {
                    Outcome::Ok(t) => fmt_ms(t.median_ms),
                    Outcome::Failed { reason } => format!("failed: {reason}"),
                };
                log(format!(
                    "{} b{} {}: {what}",
                    record.spec.describe(),
                    record.context.batch,
                    record.context.phase
                ));
            }
        }
    };
    let summary = run_sweep(sweep, &options, &mut on_event, &interrupted);
    bar.finish_and_clear();
    let summary = summary.with_context(|| format!("profiling into `{}`", out.display()))?;

    match format {
        Format::Json => emit_json(&summary)?,
        Format::Text => emit(&render::profile::summary(&sweep.modules, &summary))?,
    }
    Ok(ExitCode::SUCCESS)
}
