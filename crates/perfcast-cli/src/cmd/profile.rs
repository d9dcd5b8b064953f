//! `perfcast profile`: arguments -> a [`ProfilePlan`] -> [`perfcast_workflow::profile`] -> the
//! summary; progress, the active round's choice and (`-v`) each row drawn from the observer.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use perfcast_core::{CpuTopology, ModuleKind, Phase, slugify};
use perfcast_profile::overrides::SweepOverrides;
use perfcast_profile::{Backend, Sweep};
use perfcast_select::active::ActivePlan;
use perfcast_workflow::profile::{self, ProfilePlan};

use crate::Ui;
use crate::output::{Format, emit, emit_json};
use crate::progress::{Steps, interrupt_flag};
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
    let plan = ProfilePlan {
        sweep: build_sweep(&args)?,
        out: args.out.clone().unwrap_or_else(|| {
            PathBuf::from("datasets").join(slugify(&CpuTopology::detect().model))
        }),
        backend: args.backend,
        device: None,
        resume: args.resume,
        active: args.active.then(|| ActivePlan {
            per_second: !args.active_spread_only,
            ..ActivePlan::default()
        }),
    };
    let summary = profile::run(&plan, Steps::new(ui, false).as_ref(), interrupt_flag())?;
    match args.format {
        Format::Json => emit_json(&summary)?,
        Format::Text => emit(&render::profile::summary(&plan.sweep.modules, &summary))?,
    }
    Ok(ExitCode::SUCCESS)
}
