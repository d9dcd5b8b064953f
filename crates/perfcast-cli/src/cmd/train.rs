//! `perfcast train` and `perfcast eval --models`: arguments -> a [`TrainPlan`] ->
//! [`perfcast_workflow::train`] (the charts drawn by the observer) -> the report.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;

use clap::Args;
use perfcast_core::ModuleKind;
use perfcast_models::split::Split;
use perfcast_select::pipeline::{TrainPlan, score_saved};

use crate::Ui;
use crate::output::{Format, emit, emit_json};
use crate::progress::Steps;
use crate::render;

/// Arguments of `perfcast train`.
#[derive(Debug, Args)]
pub struct TrainArgs {
    /// Dataset directory (one device: `device.json` + `<module>.parquet`); several, or a
    /// folder of them (`datasets/neusight`), train across devices: every family reads the
    /// device's spec and learns the roofline-normalised latency (`<family>-xdev`)
    #[arg(long, required = true, num_args = 1..)]
    data: Vec<PathBuf>,
    /// Model families, comma-separated (`--help` lists them)
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "ridge,knn,trees,roofline",
        long_help = perfcast_models::registry::help()
    )]
    models: Vec<String>,
    /// Output directory for the fitted models and the report
    #[arg(long)]
    out: PathBuf,
    /// Module kinds to train (default: every kind in the dataset)
    #[arg(long, value_delimiter = ',')]
    modules: Vec<ModuleKind>,
    /// Folds of the cross-validation on the training part
    #[arg(long, default_value_t = 5)]
    folds: usize,
    /// How rows are split: `random` rows, or whole configuration `group`s
    #[arg(long, default_value = "random")]
    split: Split,
    /// Share of rows (or groups) held out for the final test
    #[arg(long, default_value_t = 0.2)]
    test_share: f64,
    /// Seed of the splits
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Set a hyper-parameter, e.g. `--set trees.n_trees=600 --set ridge.degree=1` (repeatable)
    #[arg(long = "set", value_name = "MODEL.FIELD=VALUE")]
    set: Vec<String>,
    /// Replace an existing output directory
    #[arg(long)]
    force: bool,
    /// Auto-select a model per kind and write a bundle: a name (`checkpoints/<name>/`) or a
    /// directory path
    #[arg(long, value_name = "NAME|DIR")]
    bundle: Option<String>,
    /// Selection: largest one-row prediction time accepted, microseconds
    #[arg(long, value_name = "US")]
    max_predict_us: Option<f64>,
    /// Selection: largest model size accepted, KiB
    #[arg(long, value_name = "KB")]
    max_model_kb: Option<f64>,
    /// Selection: weight of prediction cost against accuracy; 0 picks the most accurate within
    /// the budgets; at weight w each doubling of prediction time must buy a share w lower MAPE
    #[arg(long, default_value_t = perfcast_predict::bundle::DEFAULT_COST_WEIGHT)]
    cost_weight: f64,
    /// Selection: use this model family for every kind (single selection, for comparison)
    #[arg(long, value_name = "MODEL")]
    select_only: Option<String>,
    /// Rows of which phase to train on: `inference` trains forward models only, and a GPU
    /// bundle then composes training steps from forward kernels (as NeuSight does)
    #[arg(long, value_enum, default_value_t)]
    phase: crate::cmd::devices_eval::PhaseChoice,
    /// Leave out the tables `perfcast datasets check` flags (a device whose linear and bmm
    /// GEMM efficiencies disagree beyond what the other devices show); by default they are
    /// reported and kept, since leaving a flagged table out can make other devices' models
    /// worse (docs/accuracy.md#data-faults-found-by-datasets-check)
    #[arg(long)]
    exclude_flagged: bool,
    /// With `--bundle`: refit each kind's chosen model on all its rows (the held-out ones
    /// too) before writing the bundle, as the quickstart does; the report's figures stay those
    /// of the fits selection compared
    #[arg(long, requires = "bundle")]
    refit: bool,
    /// With `--bundle`: where a kind's choice is a blend, forest or neighbour model, teach a
    /// small MEDN (a student) its answers on the kind's configurations and jittered
    /// neighbours of them, and answer with the student where it stays close to its teacher
    /// and is faster, as the quickstart does (single-device data; the limits:
    /// docs/training.md)
    #[arg(long, requires = "bundle")]
    distill: bool,
    /// Output format of the report
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

impl TrainArgs {
    /// The plan these arguments describe.
    pub fn plan(&self) -> TrainPlan {
        TrainPlan {
            data: self.data.clone(),
            models: self.models.clone(),
            out: self.out.clone(),
            modules: self.modules.clone(),
            folds: self.folds,
            split: self.split,
            test_share: self.test_share,
            seed: self.seed,
            set: self.set.clone(),
            force: self.force,
            bundle: self.bundle.clone(),
            budget: perfcast_select::Budget {
                max_predict_us: self.max_predict_us,
                max_model_kb: self.max_model_kb,
                cost_weight: self.cost_weight,
                only: self.select_only.clone(),
            },
            phase: self.phase.filter().phase(),
            exclude_flagged: self.exclude_flagged,
            refit: self.refit,
            distill: self
                .distill
                .then(perfcast_select::distill::DistillPlan::default),
        }
    }
}

pub fn train(args: TrainArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    let plan = args.plan();
    // No Ctrl-C handler: a first Ctrl-C ends training at once, as it always has.
    let report =
        perfcast_workflow::train::run(&plan, Steps::new(ui, false), &AtomicBool::new(false))?;
    match args.format {
        Format::Json => emit_json(&report)?,
        Format::Text => emit(&render::train::train(&report, &plan.out))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Arguments of `perfcast eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    // Options so `perfcast eval networks` can parse without them (clap extracts flattened
    // args even when a subcommand ran); `required` keeps them mandatory otherwise.
    /// Directory written by `perfcast train`
    #[arg(long, required = true)]
    models: Option<PathBuf>,
    /// Dataset to score the saved models on (with `--leave-one-device-out`: datasets of
    /// several devices, or a folder of them)
    #[arg(long, required = true, num_args = 1..)]
    data: Vec<PathBuf>,
    /// Leave one device out instead: `--models` lists model families (`ridge,knn,trees,medn`)
    /// fitted across the other devices of `--data`; same as `perfcast eval devices`
    #[arg(long)]
    leave_one_device_out: bool,
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

pub fn eval(args: EvalArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    if args.leave_one_device_out
        && let Some(models) = &args.models
    {
        return crate::cmd::devices_eval::eval_flag_form(models, &args.data, args.format, ui);
    }
    let (Some(models), [data]) = (&args.models, args.data.as_slice()) else {
        anyhow::bail!("`perfcast eval` needs `--models <dir>` and one `--data <dataset>`");
    };
    let rows = score_saved(models, data)?;
    match args.format {
        Format::Json => emit_json(&rows)?,
        Format::Text => emit(&render::train::saved_scores(&rows))?,
    }
    Ok(ExitCode::SUCCESS)
}
