//! Whole networks on this machine: `perfcast measure`, `perfcast calibrate` and
//! `perfcast eval networks` (measured and predicted side by side): arguments -> a plan ->
//! [`perfcast_workflow::networks`] -> a table or JSON.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use perfcast_core::Phase;
use perfcast_profile::Backend;
use perfcast_profile::network_runs::MeasurePlan;
use perfcast_workflow::networks::{self, CalibratePlan, EvalPlan, MeasureJob, Runs};

use crate::Ui;
use crate::output::{Format, emit, emit_json};
use crate::progress::Bars;
use crate::render;

/// The networks named by `--network` entries, `--network-file` paths and the model flags.
fn choices(
    names: &[String],
    files: &[PathBuf],
    resolution: Option<usize>,
    model: &crate::cmd::model::ModelArgs,
) -> anyhow::Result<perfcast_graph::Measured> {
    Ok(perfcast_graph::measured_networks(
        &model.source(),
        names,
        files,
        resolution,
    )?)
}

/// Options shared by every command that measures networks.
#[derive(Debug, Args)]
pub struct MeasureOptions {
    /// Batch sizes, comma-separated (default: the batch an `--onnx` file fixes, else 1)
    #[arg(long, value_delimiter = ',')]
    batch: Vec<usize>,
    /// Phases, comma-separated: inference, training (forward, backward, SGD update)
    #[arg(long, value_delimiter = ',', default_value = "inference")]
    phase: Vec<Phase>,
    /// Compute threads (the bundle's modules were measured with 1 by default)
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Backend to run on
    #[arg(long, default_value = "flex")]
    backend: Backend,
    /// Time cap per configuration after warm-up, seconds (at least 5 runs are timed)
    #[arg(long, default_value_t = 2.0)]
    max_time_s: f64,
    /// Append every measurement to this JSON-lines file (e.g. `datasets/<device>/networks.jsonl`)
    #[arg(long)]
    save: Option<PathBuf>,
    /// Also time every distinct layer alone, as `perfcast profile` times modules, and report
    /// their sum beside the whole network (`eval networks`: and the layers furthest from
    /// their prediction)
    #[arg(long)]
    layers: bool,
    /// Append those per-layer timings to this module dataset (implies `--layers`; rows it
    /// already holds are skipped): profiles exactly the layers your networks use
    #[arg(long)]
    layers_into: Option<PathBuf>,
}

/// Arguments of `perfcast measure`.
#[derive(Debug, Args)]
pub struct MeasureArgs {
    /// Zoo networks, comma-separated, each optionally `@resolution` (e.g. `lenet5,vgg16@112`)
    #[arg(long, value_delimiter = ',')]
    network: Vec<String>,
    /// Network JSON files (format: `examples/networks/`), comma-separated
    #[arg(long, value_delimiter = ',')]
    network_file: Vec<PathBuf>,
    /// Input resolution of zoo networks without `@` (tokens for the transformer)
    #[arg(long)]
    resolution: Option<usize>,
    #[command(flatten)]
    model: crate::cmd::model::ModelArgs,
    #[command(flatten)]
    options: MeasureOptions,
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

impl MeasureOptions {
    /// The measuring plan; without `--batch`, at the batch the ONNX file fixes (else 1).
    fn plan(&self, file_batch: Option<usize>, ui: &Ui) -> MeasurePlan {
        let batch = if self.batch.is_empty() {
            vec![crate::cmd::model::batch(None, file_batch, ui)]
        } else {
            for &b in &self.batch {
                crate::cmd::model::batch(Some(b), file_batch, ui);
            }
            self.batch.clone()
        };
        MeasurePlan {
            batch,
            phases: self.phase.clone(),
            threads: self.threads,
            backend: self.backend,
            max_time_s: self.max_time_s,
            save: self.save.clone(),
            layers: self.layers,
            layers_into: self.layers_into.clone(),
        }
    }
}

/// `perfcast measure`.
pub fn run_measure(a: MeasureArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    let measured = choices(&a.network, &a.network_file, a.resolution, &a.model)?;
    let job = MeasureJob {
        plan: a.options.plan(measured.file_batch, ui),
        networks: measured.networks,
    };
    let measured = networks::measure(
        &job,
        &crate::alloc::Counted,
        Bars::new(ui).as_ref(),
        perfcast_core::interrupt::token(),
    )?;
    match a.format {
        Format::Json => emit_json(&measured)?,
        Format::Text => emit(&render::networks::measured(
            &measured,
            a.options.threads,
            a.options.backend,
        ))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Where network runs come from: measured now, or read from a file measured earlier.
#[derive(Debug, Args)]
pub struct RunsSource {
    /// Zoo networks, comma-separated, each optionally `@resolution`
    #[arg(long, value_delimiter = ',')]
    networks: Vec<String>,
    /// Network JSON files, comma-separated
    #[arg(long, value_delimiter = ',')]
    network_file: Vec<PathBuf>,
    /// Read measured runs from this JSON-lines file instead of measuring (`--save` writes one)
    #[arg(long, conflicts_with_all = ["networks", "network_file"])]
    from: Option<PathBuf>,
    #[command(flatten)]
    model: crate::cmd::model::ModelArgs,
    #[command(flatten)]
    options: MeasureOptions,
}

impl RunsSource {
    /// Where the runs come from: the file, or the networks to measure now.
    fn runs(&self, ui: &Ui) -> anyhow::Result<Runs> {
        if let Some(path) = &self.from {
            return Ok(Runs::File(path.clone()));
        }
        let measured = choices(&self.networks, &self.network_file, None, &self.model)?;
        Ok(Runs::Measure(MeasureJob {
            plan: self.options.plan(measured.file_batch, ui),
            networks: measured.networks,
        }))
    }
}

/// Arguments of `perfcast calibrate`.
#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Bundle whose host-cost terms to fit (rewrites its manifest)
    #[arg(long, default_value = "checkpoints/local")]
    bundle: PathBuf,
    #[command(flatten)]
    source: RunsSource,
    /// Strength of the pull towards the plain sum (0: none); default: chosen by
    /// leave-one-network-out cross-validation over the calibration networks
    #[arg(long)]
    lambda: Option<f64>,
    /// Fit and report, but leave the bundle as it is
    #[arg(long)]
    dry_run: bool,
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

/// `perfcast calibrate`: fits the host-cost terms of the bundle to the runs measured or read
/// (after the bundle loads), writes them into its manifest unless `--dry-run`, and prints them.
pub fn calibrate(a: CalibrateArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    let plan = CalibratePlan {
        runs: a.source.runs(ui)?,
        bundle: a.bundle,
        lambda: a.lambda,
        dry_run: a.dry_run,
    };
    let report = networks::calibrate(
        &plan,
        Bars::new(ui).as_ref(),
        perfcast_core::interrupt::token(),
    )?;
    match a.format {
        Format::Json => emit_json(&report.host_costs)?,
        Format::Text => emit(&render::networks::calibrated(
            &report.host_costs,
            report.runs,
            report.written.as_deref(),
        ))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Arguments of `perfcast eval networks`.
#[derive(Debug, Args)]
pub struct EvalNetworksArgs {
    /// Bundle to predict with
    #[arg(long, default_value = "checkpoints/local")]
    bundle: PathBuf,
    #[command(flatten)]
    source: RunsSource,
    /// Write the predicted-vs-measured plot here (`.svg` or `.png`)
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

/// `perfcast eval networks`.
pub fn eval_networks(a: EvalNetworksArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    let plan = EvalPlan {
        runs: a.source.runs(ui)?,
        bundle: a.bundle,
    };
    let report = networks::eval(
        &plan,
        Bars::new(ui).as_ref(),
        perfcast_core::interrupt::token(),
    )?;
    if let Some(path) = &a.plot {
        render::charts::networks(path, &report.eval.runs, &report.device)?;
    }
    match a.format {
        Format::Json => emit_json(&report.eval)?,
        Format::Text => emit(&render::networks::evaluated(&report.eval))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `perfcast eval`: saved models on a dataset, or whole networks measured and predicted.
///
/// `lib.rs` sets `args_conflicts_with_subcommands` and `subcommand_negates_reqs` on the variant.
#[derive(Debug, Args)]
pub struct EvalCommand {
    #[command(subcommand)]
    what: Option<EvalWhat>,
    #[command(flatten)]
    models: crate::cmd::train::EvalArgs,
}

#[derive(Debug, clap::Subcommand)]
enum EvalWhat {
    /// Measure whole networks on this machine and predict them from a bundle, side by side
    ///
    /// Prints per run the measured latency, the plain sum of layer predictions and the composed
    /// prediction (with the bundle's host-cost terms, `perfcast calibrate`), with errors and
    /// the MAPE per phase.
    Networks(EvalNetworksArgs),
    /// Leave one device out: fit across the other devices, score the one never seen
    ///
    /// Per module kind and model family, the MAPE on each held-out device and the mean
    /// (`--format json` for scripts). Families are fitted in cross-device mode (device block,
    /// roofline-normalised target); `<family>-raw` fits the plain family, for comparison.
    Devices(crate::cmd::devices_eval::EvalDevicesArgs),
    /// PROFET-style anchor mapping: predict a device from another device's measured latency
    ///
    /// Each device in turn is the target and left out of training; the mapping learns
    /// t_target / t_anchor from the other devices' pairs and specs. Needs the same
    /// configurations measured on every device (DeepBench).
    Anchor(crate::cmd::devices_eval::EvalAnchorArgs),
    /// Score a bundle's answers on measured rows of any device, as `perfcast predict` gives them
    ///
    /// Each dataset is predicted for its own device's spec (a cross-device bundle answers any
    /// GPU): per kind and phase the MAPE, the median predicted/measured ratio, and how many
    /// answers the physical bound raised or the spec fallback gave.
    Bundle(crate::cmd::bundle_eval::EvalBundleArgs),
}

/// Runs `perfcast eval`.
pub fn eval(c: EvalCommand, ui: &Ui) -> anyhow::Result<ExitCode> {
    match c.what {
        Some(EvalWhat::Networks(a)) => eval_networks(a, ui),
        Some(EvalWhat::Devices(a)) => crate::cmd::devices_eval::eval_devices(a, ui),
        Some(EvalWhat::Anchor(a)) => crate::cmd::devices_eval::eval_anchor(a, ui),
        Some(EvalWhat::Bundle(a)) => crate::cmd::bundle_eval::run(a, ui),
        None => crate::cmd::train::eval(c.models, ui),
    }
}
