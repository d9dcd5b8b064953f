//! Cross-device evaluation: `perfcast eval devices` (leave one device out; also
//! `perfcast eval --leave-one-device-out`) and `perfcast eval anchor` (PROFET-style mapping
//! from an anchor device's measured latency). The evaluation is
//! [`perfcast_models::devices_eval`].

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use perfcast_core::ModuleKind;
use perfcast_data::resolve_datasets;
use perfcast_models::devices_eval::{
    AnchorPlan, DevicesPlan, evaluate_anchor, evaluate_devices, write_predictions,
};
use perfcast_models::source::PhaseFilter;

use crate::Ui;
use crate::output::{Format, emit, emit_json};
use crate::progress::Bars;
use crate::render;

/// Which phase's rows to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum PhaseChoice {
    /// Both phases
    #[default]
    All,
    /// Forward rows only
    Inference,
    /// Training-step rows only
    Training,
}

impl PhaseChoice {
    /// The library's filter.
    pub fn filter(self) -> PhaseFilter {
        match self {
            PhaseChoice::All => PhaseFilter::All,
            PhaseChoice::Inference => PhaseFilter::Inference,
            PhaseChoice::Training => PhaseFilter::Training,
        }
    }
}

/// Arguments of `perfcast eval devices`.
#[derive(Debug, Args)]
pub struct EvalDevicesArgs {
    /// Dataset directories, one per device, or folders of them (`datasets/neusight`)
    #[arg(long, required = true, num_args = 1..)]
    pub data: Vec<PathBuf>,
    /// Model families, comma-separated, each fitted across devices (`--help` lists them);
    /// `<family>-raw` fits a family on the plain rows, for comparison
    #[arg(long, value_delimiter = ',', default_value = "ridge,knn,trees",
          long_help = perfcast_models::registry::help_cross_device())]
    pub models: Vec<String>,
    /// Module kinds (default: every kind two devices or more have)
    #[arg(long, value_delimiter = ',')]
    pub modules: Vec<ModuleKind>,
    /// Rows of which phase
    #[arg(long, value_enum, default_value_t)]
    pub phase: PhaseChoice,
    /// Hold out only these devices (dataset folder names or device names; default: each in turn)
    #[arg(long, value_delimiter = ',')]
    pub holdout: Vec<String>,
    /// Use at most this many rows per device and kind (evenly spaced; 0: all), to bound time
    #[arg(long, default_value_t = 0)]
    pub max_rows: usize,
    /// Set a hyper-parameter, e.g. `--set trees.n_trees=600` (repeatable)
    #[arg(long = "set", value_name = "MODEL.FIELD=VALUE")]
    pub set: Vec<String>,
    /// Spec fields the cross-device models read besides peak GFLOP/s and bandwidth: sms,
    /// shaders, clock, memory, cache, waves (default: none)
    #[arg(long, value_delimiter = ',')]
    pub device_fields: Vec<String>,
    /// Per-call floor added to the roofline time latencies are normalised by, microseconds
    /// (not for `util`, which fits its own launch floor)
    #[arg(long, default_value_t = 1e3 * perfcast_models::device_features::DEFAULT_FLOOR_MS)]
    pub floor_us: f64,
    /// What cross-device models normalise latencies by: `roofline`, or `waves` (the roofline
    /// with the compute time of whole waves of `--tile` square output tiles over the SMs)
    #[arg(long, default_value = "roofline")]
    pub scale: String,
    /// Tile side of `--scale waves`
    #[arg(long, default_value_t = perfcast_models::device_features::DEFAULT_TILE)]
    pub tile: f64,
    /// Extended-row columns the cross-device models see as zero (e.g. dev_peak_gflops)
    #[arg(long, value_delimiter = ',')]
    pub mask: Vec<String>,
    /// Also write each held-out row's measured and predicted latency to this CSV, for analysis
    #[arg(long, value_name = "CSV")]
    pub predictions: Option<PathBuf>,
    /// Drop held-out devices' `launch_us` (measured launch floor): `util` uses training floors
    #[arg(long)]
    pub no_launch_us: bool,
    /// Leave the tables `perfcast datasets check` flags out of training (still scored when
    /// their device is held out), as `train --exclude-flagged` does
    #[arg(long)]
    pub exclude_flagged: bool,
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

/// Arguments of `perfcast eval anchor`.
#[derive(Debug, Args)]
pub struct EvalAnchorArgs {
    /// Dataset directories of devices that measured the same configurations (DeepBench), or
    /// a folder of them
    #[arg(long, required = true, num_args = 1..)]
    pub data: Vec<PathBuf>,
    /// Module kinds (default: every kind two devices or more have)
    #[arg(long, value_delimiter = ',')]
    pub modules: Vec<ModuleKind>,
    /// Rows of which phase (DeepBench's training rows are forward + both backward kernels)
    #[arg(long, value_enum, default_value_t)]
    pub phase: PhaseChoice,
    /// Which measured device each prediction starts from: `nearest` (the other device closest
    /// in peak GFLOP/s and bandwidth), `all` (every other device, each scored), or a device name;
    /// `nearest` and `all` choose among devices on the target's software stack (`software` in
    /// `device.json`) when any is
    #[arg(long, default_value = "nearest")]
    pub anchor: String,
    /// Leave out devices of another kind than the target (a CPU as anchor for GPUs)
    #[arg(long)]
    pub same_kind: bool,
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

/// Runs `perfcast eval devices`.
pub fn eval_devices(a: EvalDevicesArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    let plan = DevicesPlan {
        models: a.models,
        modules: a.modules,
        phase: a.phase.filter(),
        holdout: a.holdout,
        max_rows: a.max_rows,
        set: a.set,
        device_fields: a.device_fields,
        floor_us: a.floor_us,
        scale: a.scale,
        tile: a.tile,
        mask: a.mask,
        keep_predictions: a.predictions.is_some(),
        no_launch_us: a.no_launch_us,
        exclude_flagged: a.exclude_flagged,
    };
    run_devices(&a.data, &plan, a.predictions.as_deref(), a.format, ui)
}

/// Leave-one-device-out over the datasets `data` names, as `plan` says.
fn run_devices(
    data: &[PathBuf],
    plan: &DevicesPlan,
    predictions: Option<&Path>,
    format: Format,
    ui: &Ui,
) -> anyhow::Result<ExitCode> {
    let dirs = resolve_datasets(data)?;
    let results = evaluate_devices(&dirs, plan, Bars::new(ui).as_ref())?;
    if let Some(path) = predictions {
        write_predictions(path, &results.predictions)?;
    }
    match format {
        Format::Json => emit_json(&results.kinds)?,
        Format::Text => emit(&render::devices::devices(&results.kinds))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `perfcast eval anchor`.
pub fn eval_anchor(a: EvalAnchorArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    let dirs = resolve_datasets(&a.data)?;
    let plan = AnchorPlan {
        modules: a.modules,
        phase: a.phase.filter(),
        anchor: a.anchor,
        same_kind: a.same_kind,
    };
    let results = evaluate_anchor(&dirs, &plan, Bars::new(ui).as_ref())?;
    match a.format {
        Format::Json => emit_json(&results)?,
        Format::Text => emit(&render::devices::anchor(&results))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `perfcast eval --leave-one-device-out --data <datasets> --models ridge,knn,...`: the flag
/// form of [`eval_devices`], where `--models` lists families instead of a trained directory.
pub fn eval_flag_form(
    models: &Path,
    data: &[PathBuf],
    format: Format,
    ui: &Ui,
) -> anyhow::Result<ExitCode> {
    let plan = DevicesPlan {
        models: models
            .to_string_lossy()
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
        ..DevicesPlan::default()
    };
    run_devices(data, &plan, None, format, ui)
}
