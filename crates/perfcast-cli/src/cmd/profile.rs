//! `perfcast profile`: measure a sweep of module configurations into a dataset.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;

use anyhow::Context as _;
use clap::Args;
use perfcast_core::{CpuTopology, Hinted, ModuleKind, Phase, slugify};
use perfcast_profile::overrides::SweepOverrides;
use perfcast_profile::run::{RunOptions, jobs_of, plan, run_jobs};
use perfcast_profile::{Backend, Sweep, probe};
use perfcast_select::active::{ActivePlan, choose_round};

use crate::Ui;
use crate::output::{Format, emit, emit_json, progress};
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
    /// Choose each kind's `--samples` configurations where a bootstrap ensemble fitted on the
    /// dataset's rows disagrees most, from a pool of 8x as many draws (docs/profiling.md)
    #[arg(long)]
    active: bool,
    /// With `--active`: rank by disagreement alone, not per expected second of measuring
    #[arg(long, hide = true)]
    active_spread_only: bool,
    /// Output format of the summary
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

/// The sweep from the file (or built-in) with command-line overrides on top.
fn build_sweep(args: &ProfileArgs) -> anyhow::Result<Sweep> {
    Ok(Sweep::with_overrides(
        args.sweep.as_deref(),
        &SweepOverrides {
            modules: args.modules.clone(),
            samples: args.samples,
            seed: args.seed,
            phases: args.phases.clone(),
            batch: args.batch.clone(),
            threads: args.threads.clone(),
            utilisation: args.utilisation.clone(),
            max_time_s: args.max_time_s,
            rounds: args.rounds,
        },
    )?)
}

pub fn run(args: ProfileArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    let sweep = build_sweep(&args)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("datasets").join(slugify(&CpuTopology::detect().model)));
    if !args.backend.available() {
        return Err(Hinted::new(
            format!("backend `{}` is not in this build", args.backend),
            "rebuild with `cargo build --release --features wgpu`",
        )
        .into());
    }
    let options = RunOptions::for_sweep(
        &sweep,
        &out,
        args.backend,
        probe_device(&out, ui)?,
        args.resume,
    );
    let active = args.active.then(|| ActivePlan {
        per_second: !args.active_spread_only,
        ..ActivePlan::default()
    });
    profile(&sweep, &options, active.as_ref(), args.format, ui)
}

/// The process's one interrupt token ([`perfcast_core::interrupt`]), with the Ctrl-C handler
/// installed once: `ctrlc` keeps the first handler and refuses a second, so a handler per
/// sweep would leave every sweep after the first deaf to Ctrl-C. Once set the token stays set:
/// the process is stopping. A second Ctrl-C exits at once.
pub fn interrupt_flag() -> &'static AtomicBool {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let _ = ctrlc::set_handler(|| {
            if perfcast_core::interrupt::requested() {
                eprintln!("interrupted twice: stopped at once");
                std::process::exit(130);
            }
            perfcast_core::interrupt::request();
        });
    });
    perfcast_core::interrupt::token()
}

/// Measures `sweep` as `options` say, or the configurations `active` selection chooses from
/// its ranges, with a progress bar; Ctrl-C stops after the row in flight. Prints the summary.
pub fn profile(
    sweep: &Sweep,
    options: &RunOptions,
    active: Option<&ActivePlan>,
    format: Format,
    ui: &Ui,
) -> anyhow::Result<ExitCode> {
    let out = &options.out;
    let interrupted = interrupt_flag();
    let jobs = match active {
        Some(plan) => {
            let choices = choose_round(sweep, out, &options.device, plan)?;
            ui.info(render::profile::active_round(&choices).trim_end());
            let chosen: Vec<_> = choices.into_iter().flat_map(|c| c.chosen).collect();
            jobs_of(&chosen, &sweep.phases)
        }
        None => plan(sweep)?,
    };
    let bar = progress(ui, 0, "profile");
    let mut on_event = crate::progress::profile_events(&bar, ui);
    let summary = run_jobs(sweep, jobs, options, &mut on_event, interrupted);
    bar.finish_and_clear();
    let summary = summary.with_context(|| format!("profiling into `{}`", out.display()))?;
    match format {
        Format::Json => emit_json(&summary)?,
        Format::Text => emit(&render::profile::summary(&sweep.modules, &summary))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// This device's spec with measured peaks (a few seconds), warning when other processes keep
/// cores busy.
pub fn probe_device(out: &Path, ui: &Ui) -> anyhow::Result<perfcast_core::DeviceSpec> {
    ui.info(format!(
        "measuring this device's peaks for `{}`...",
        out.join("device.json").display()
    ));
    let (device, _) = probe::local_cpu(Backend::Flex)?;
    if let Some(warning) = probe::busy_warning() {
        ui.info(warning);
    }
    Ok(device)
}
