//! `perfcast plan`: time, memory and cost of a training job per device, GPU count and
//! parallel layout. Arguments -> a [`PlanJob`] -> [`perfcast_workflow::plan`] -> table, JSON
//! or plot.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;

use clap::{Args, ValueEnum};
use perfcast_scale::Optimizer;
use perfcast_scale::memory::Recompute;
use perfcast_scale::plan::{PlanConfig, SortBy};
use perfcast_workflow::plan::{self, PlanJob};

use crate::Ui;
use crate::output::{Format, emit, emit_json};
use crate::progress::Bars;
use crate::render;

/// Optimiser, for its state and update.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum OptimizerArg {
    /// Adam: two fp32 moments per parameter
    Adam,
    /// SGD with momentum: one buffer per parameter
    Momentum,
    /// Plain SGD: no state
    Sgd,
}

/// Recomputation.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum RecomputeArg {
    /// Try none, selective and full; keep the fastest that fits
    Auto,
    /// Keep every activation
    None,
    /// Recompute the attention core (Korthikanti et al.)
    Selective,
    /// Keep segment inputs only and recompute each segment
    Full,
}

/// Sort order.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum SortArg {
    /// Fastest step first
    Time,
    /// Cheapest 1,000 steps first
    Cost,
}

/// Arguments of `perfcast plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// A network from the built-in zoo, optionally `@resolution` (tokens for the transformer)
    #[arg(long, conflicts_with = "network_file")]
    network: Option<String>,
    /// A network from a JSON file (format: `examples/networks/`; GPT-2 large:
    /// `examples/networks/gpt2-large.json`)
    #[arg(long)]
    network_file: Option<PathBuf>,
    /// A Hugging Face transformer config or an ONNX model (`--transformer gpt2.json --seq 1024`)
    #[command(flatten)]
    model: crate::cmd::model::ModelArgs,
    /// Samples per step over all GPUs
    #[arg(long)]
    global_batch: usize,
    /// Devices to plan on, by name (`perfcast predict --list-devices` lists them)
    #[arg(long, value_delimiter = ',', default_value = "a100,h100,l4")]
    devices: Vec<String>,
    /// GPU counts to try
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    gpus: Vec<usize>,
    /// Bundle whose training-step predictions give each layer's compute (a cross-device
    /// bundle answers for every device)
    #[arg(long, default_value = "checkpoints/gpu")]
    bundle: PathBuf,
    /// On-demand prices per GPU-hour (TOML, as `examples/prices.toml`); without it, no costs
    #[arg(long)]
    price_file: Option<PathBuf>,
    /// Share of a GPU's memory a plan may use
    #[arg(long, default_value_t = 0.9)]
    max_memory_fraction: f64,
    /// Link between the GPUs of a node (pcie3, pcie4, pcie5, nvlink, nvlink2, nvlink4, nvlink5,
    /// or GBPS:US); default per device: its published NVLink or xGMI where that joins the
    /// whole node, else its PCIe link (`predict --list-devices` shows both)
    #[arg(long)]
    link: Option<String>,
    /// GPUs per node: tensor and pipeline groups stay inside one
    #[arg(long, default_value_t = 8)]
    gpus_per_node: usize,
    /// Optimiser
    #[arg(long, value_enum, default_value_t = OptimizerArg::Adam)]
    optimizer: OptimizerArg,
    /// Activation recomputation
    #[arg(long, value_enum, default_value_t = RecomputeArg::Auto)]
    recompute: RecomputeArg,
    /// Sequence parallelism with tensor parallelism (shards the norms' and dropouts' kept
    /// activations; same traffic)
    #[arg(long)]
    sequence_parallel: bool,
    /// Collectives fitted to measured timings (`perfcast collectives fit`, e.g.
    /// `examples/collectives/a100-dgx.json`): they price the all-reduces and sends inside a
    /// node they cover, in place of the link formula
    #[arg(long)]
    collectives: Option<PathBuf>,
    /// Micro-batches per replica per step, exactly (1: the serial pipeline schedule, forward
    /// through every stage then backward); default: try powers of two, keep the fastest
    #[arg(long)]
    micro_batches: Option<usize>,
    /// Sort by
    #[arg(long, value_enum, default_value_t = SortArg::Time)]
    sort: SortArg,
    /// Rows to print (text); 0 prints all
    #[arg(long, default_value_t = 0)]
    top: usize,
    /// Kernel fusion: none (eager), epilogue, compile, engine or megatron (docs/networks.md);
    /// compile and engine run attention as one kernel that keeps no score matrix
    #[arg(long, value_name = "POLICY", default_value = "none")]
    fusion: perfcast_core::fusion::Fusion,
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    format: Format,
    /// Write time against cost, the Pareto front marked, as SVG or PNG (by extension)
    #[arg(long)]
    plot: Option<PathBuf>,
}

pub fn run(a: PlanArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    // Everything typed is checked before a bundle loads.
    if let Some(p) = &a.plot {
        crate::plot::is_svg(p)?;
    }
    // A training step: a transformer config builds its dropout layers.
    let network = crate::cmd::model::one_network(
        a.network.as_deref(),
        None,
        a.network_file.as_deref(),
        &a.model,
        perfcast_core::Phase::Training,
        "nothing to plan",
    )?;
    let job = PlanJob {
        network,
        devices: a.devices.clone(),
        bundle: a.bundle.clone(),
        price_file: a.price_file.clone(),
        link: a.link.clone(),
        collectives: a.collectives.clone(),
        config: PlanConfig {
            global_batch: a.global_batch,
            gpus: a.gpus.clone(),
            optimizer: match a.optimizer {
                OptimizerArg::Adam => Optimizer::Adam,
                OptimizerArg::Momentum => Optimizer::Momentum,
                OptimizerArg::Sgd => Optimizer::Sgd,
            },
            max_memory_fraction: a.max_memory_fraction,
            recompute: match a.recompute {
                RecomputeArg::Auto => None,
                RecomputeArg::None => Some(Recompute::None),
                RecomputeArg::Selective => Some(Recompute::Selective),
                RecomputeArg::Full => Some(Recompute::Full),
            },
            sequence_parallel: a.sequence_parallel,
            gpus_per_node: a.gpus_per_node,
            sort: match a.sort {
                SortArg::Time => SortBy::Time,
                SortArg::Cost => SortBy::Cost,
            },
            micro_batches: a.micro_batches,
            fusion: a.fusion,
            // The host's dispatch was measured for eager PyTorch; fused graphs launch less.
            host: (a.fusion == perfcast_core::fusion::Fusion::None).then(|| {
                let h = perfcast_predict::compose::GPU_HOST_FLOOR;
                perfcast_scale::plan::HostDispatch {
                    per_step_s: h.per_step_ms / 1e3,
                    per_layer_s: h.per_layer_ms / 1e3,
                }
            }),
            ..PlanConfig::default()
        },
    };
    let outcome = plan::run(&job, Bars::new(ui).as_ref(), &AtomicBool::new(false))?;
    if let Some(path) = &a.plot {
        render::charts::plan(path, &outcome.report)?;
        ui.info(format!("wrote `{}`", path.display()));
    }
    match a.format {
        Format::Json => emit_json(&outcome)?,
        Format::Text => emit(&render::plan::plan(
            &outcome.report,
            &outcome.links,
            &outcome.dtypes,
            outcome.prices.as_ref(),
            &outcome.bundle,
            a.top,
        ))?,
    }
    Ok(ExitCode::SUCCESS)
}
