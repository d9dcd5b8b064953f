//! `perfcast scale predict` (the analytical multi-device model), `perfcast scale fit` (the
//! generic expression fitted to measured runs) and `perfcast scale measure` (the runs, on this
//! machine): arguments -> perfcast-scale ([`perfcast_scale::scaling`],
//! [`perfcast_scale::fit_report`]) or the runs workflow ([`perfcast_workflow::scale`]) -> text,
//! JSON or a plot.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Subcommand, ValueEnum};
use perfcast_calibrate::layer_costs::BundleCompute;
use perfcast_core::Phase;
use perfcast_profile::Backend;
use perfcast_scale::fit::Filter;
use perfcast_scale::fit_report::fit_runs;
use perfcast_scale::scaling::{Compute, bucketed, check_split, check_update_ms, predict_scaling};
use perfcast_scale::{
    DataParallelModel, DeConfig, Expression, FitConfig, Holdout, InterNode, Link, Optimizer,
    Overlap, Parallelism, Point, Strategy,
};
use perfcast_select::Predictor;
use perfcast_workflow::scale::NetworkSource;

use crate::Ui;
use crate::output::{Format, emit, emit_json};
use crate::progress::Bars;
use crate::render;

/// `perfcast scale ...`.
#[derive(Debug, Subcommand)]
pub enum ScaleCommand {
    /// Predict data-parallel training time, throughput and scaling efficiency on P devices
    ///
    /// Iteration time = forward + backward at the per-device batch + the gradient all-reduce
    /// not hidden behind the backward pass + the optimiser update. `--batch` is the global
    /// batch: each of P devices runs ceil(batch / P) samples. Compute comes from a bundle's
    /// training-phase prediction at the per-device batch, or from `--compute-ms`. Gradients
    /// are 4 bytes per parameter of the network.
    Predict(Box<PredictArgs>),
    /// Fit the generic expression T(p, b, n) to measured runs by differential evolution
    ///
    /// The runs CSV has the columns p (processors or threads), b (batch size), n (samples
    /// processed) and time_s (seconds); other columns are ignored. Prints each constant with
    /// its meaning, the fit's MAPE, the MAPE on runs held out (`--holdout`,
    /// `--holdout-runs`) and predictions at other points (`--predict`).
    Fit(FitArgs),
    /// Measure training runs on this machine for `scale fit`: real burn training steps over
    /// threads, batch sizes and sample counts
    ///
    /// For every (p threads, b batch, n samples): one untimed warm-up step, then ceil(n / b)
    /// training steps (forward, backward, SGD update) of the network on the CPU backend in a
    /// pool of exactly p threads; time_s is the median wall time over `--repeats`. n is
    /// rounded up to a whole number of batches (steps * b, recorded as such). The repeats are
    /// rounds over every run in a shuffled order, so load that drifts while measuring does not
    /// bias the runs measured last. Writes the runs CSV `scale fit --runs` reads. Threads
    /// beyond the cores oversubscribe them: contention, measured as it is.
    Measure(MeasureArgs),
}

/// Gradient exchange, on the command line.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum StrategyArg {
    /// Ring all-reduce: 2(P-1)/P S/B + 2(P-1) latency
    Ring,
    /// Pipelined binary-tree all-reduce
    Tree,
    /// Parameter servers (`--servers`)
    Ps,
    /// Ring inside nodes of `--gpus-per-node` over `--link`, ring or tree between nodes over
    /// `--inter-link`
    Hierarchical,
}

/// Algorithm between nodes.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum InterArg {
    /// Ring
    Ring,
    /// Pipelined binary tree
    Tree,
}

/// Overlap of communication with the backward pass.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum OverlapArg {
    /// Buckets all-reduced as soon as their gradients are ready (PyTorch DDP, Horovod)
    Bucketed,
    /// Ideal: max(backward, communication)
    Full,
    /// Communication after the backward pass
    None,
}

/// Optimiser, for the update's memory traffic.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum OptimizerArg {
    /// Plain SGD (12 bytes per parameter)
    Sgd,
    /// SGD with momentum (20 bytes per parameter)
    Momentum,
    /// Adam (28 bytes per parameter)
    Adam,
}

/// How work is split over devices.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ParallelArg {
    /// Data parallel
    Data,
    /// Model parallel (not modelled yet)
    Model,
    /// Pipeline parallel (not modelled yet)
    Pipeline,
}

/// Arguments of `perfcast scale predict`.
#[derive(Debug, Args)]
pub struct PredictArgs {
    /// A network from the built-in zoo (lenet5, alexnet, vgg11, vgg16, resnet18, resnet50,
    /// mobilenetv2, transformer, squeezenet1_1, densenet121, efficientnet_b0, vit_b_16,
    /// llama_block)
    #[arg(long, conflicts_with = "network_file")]
    network: Option<String>,
    /// A network from a JSON file (format: `examples/networks/`)
    #[arg(long)]
    network_file: Option<PathBuf>,
    /// Input resolution of a zoo network (tokens for the transformer)
    #[arg(long)]
    resolution: Option<usize>,
    /// A Hugging Face transformer config or an ONNX model (`--transformer gpt2.json --seq 1024`)
    #[command(flatten)]
    model: crate::cmd::model::ModelArgs,
    /// Global batch: samples per iteration over all devices; each device runs ceil(batch / P)
    #[arg(long)]
    batch: usize,
    /// Device counts to predict (efficiency is always against 1 device)
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    gpus: Vec<usize>,
    /// The devices' spec (JSON, as `perfcast devices --format json`, an import's `device.json`
    /// or a NeuSight config): a cross-device bundle predicts compute for it, and its memory
    /// bandwidth times the optimiser update
    #[arg(long)]
    device_spec: Option<PathBuf>,
    /// The devices by name (`h100`, `a100`, `l4`; `perfcast predict --list-devices`), as
    /// `--device-spec`
    #[arg(long, conflicts_with = "device_spec")]
    device: Option<String>,
    /// Link between devices: pcie3, pcie4, pcie5, nvlink, nvlink2, nvlink4, nvlink5, infiniband,
    /// ethernet, or GBPS:US (bandwidth per direction in GB/s, latency in microseconds)
    #[arg(long, default_value = "nvlink")]
    link: String,
    /// Gradient exchange
    #[arg(long, value_enum, default_value_t = StrategyArg::Ring)]
    strategy: StrategyArg,
    /// Collectives fitted to measured timings (`perfcast collectives fit`): they price the
    /// all-reduce on as many devices as they were fitted on (one node), `--strategy` beyond
    #[arg(long)]
    collectives: Option<PathBuf>,
    /// Parameter servers (`--strategy ps`)
    #[arg(long, default_value_t = 1)]
    servers: usize,
    /// Devices per node (`--strategy hierarchical`)
    #[arg(long, default_value_t = 8)]
    gpus_per_node: usize,
    /// Link between nodes, shared by a node's devices (`--strategy hierarchical`)
    #[arg(long, default_value = "infiniband")]
    inter_link: String,
    /// Algorithm between nodes (`--strategy hierarchical`)
    #[arg(long, value_enum, default_value_t = InterArg::Ring)]
    inter_strategy: InterArg,
    /// Overlap of gradient communication with the backward pass
    #[arg(long, value_enum, default_value_t = OverlapArg::Bucketed)]
    overlap: OverlapArg,
    /// Bucket size in MiB (`--overlap bucketed`; PyTorch DDP's default)
    #[arg(long, default_value_t = 25.0)]
    bucket_mb: f64,
    /// Optimiser, for the update time (memory-bound: bytes per parameter over the device
    /// spec's bandwidth)
    #[arg(long, value_enum, default_value_t = OptimizerArg::Momentum)]
    optimizer: OptimizerArg,
    /// Optimiser update in ms, instead of deriving it from the device spec
    #[arg(long)]
    update_ms: Option<f64>,
    /// How work is split over devices
    #[arg(long, value_enum, default_value_t = ParallelArg::Data)]
    parallel: ParallelArg,
    /// Bundle whose training-phase predictions give the compute time
    #[arg(long, default_value = "checkpoints/local")]
    bundle: PathBuf,
    /// Measured ms of one training step (forward + backward) of the whole `--batch` on one
    /// device, instead of a bundle; scaled per sample to the per-device batch and spread
    /// over the layers by FLOPs
    #[arg(long)]
    compute_ms: Option<f64>,
    /// With `--compute-ms`: the backward pass's share of the step (backward is about twice
    /// the forward pass)
    #[arg(long, default_value_t = 2.0 / 3.0)]
    backward_share: f64,
    /// Compute threads of the bundle's prediction context
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    format: Format,
    /// Write the predicted scaling curve (throughput against devices) as SVG or PNG, by the
    /// file's extension
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// Arguments of `perfcast scale fit`.
#[derive(Debug, Args)]
pub struct FitArgs {
    /// Runs CSV: columns p, b, n, time_s
    #[arg(long)]
    runs: PathBuf,
    /// Terms of the expression, comma-separated: startup, compute, serial, step, sync, comm,
    /// contention; `default` is all but comm
    #[arg(long, default_value = "default")]
    terms: String,
    /// Hold out this share of the runs at random, fit the rest, report the error on them
    #[arg(long, conflicts_with = "holdout_runs")]
    holdout: Option<f64>,
    /// Hold out the runs matching COLUMN OP VALUE (e.g. `p>=4`: fit small, predict large)
    #[arg(long)]
    holdout_runs: Option<String>,
    /// Seed of differential evolution and of the random holdout
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Weight of the ridge penalty on the constants (scaled by their bounds)
    #[arg(long, default_value_t = 1e-4)]
    lambda: f64,
    /// Differential evolution: generations at most
    #[arg(long, default_value_t = 3000)]
    generations: usize,
    /// Differential evolution: population (0: 10 per constant, at least 20)
    #[arg(long, default_value_t = 0)]
    population: usize,
    /// Predict the time at p=..,b=..,n=.. (repeatable)
    #[arg(long)]
    predict: Vec<String>,
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    format: Format,
    /// Write predicted scaling curves (time against p) as SVG or PNG, by the file's
    /// extension, and measured against predicted beside it (`<name>-fit.<ext>`)
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// Arguments of `perfcast scale measure`.
#[derive(Debug, Args)]
pub struct MeasureArgs {
    /// A network from the built-in zoo, optionally `@resolution` (e.g. `lenet5`,
    /// `mobilenetv2@32`); the default grid takes about 2 minutes of resnet18@32 on 2 cores
    #[arg(long, default_value = "resnet18@32", conflicts_with = "network_file")]
    network: String,
    /// A network from a JSON file (format: `examples/networks/`)
    #[arg(long)]
    network_file: Option<PathBuf>,
    /// Thread counts p, comma-separated
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    threads: Vec<usize>,
    /// Batch sizes b, comma-separated
    #[arg(long, value_delimiter = ',', default_value = "4,8,16,32")]
    batch: Vec<usize>,
    /// Samples n per run, comma-separated: ceil(n / b) training steps
    #[arg(long, value_delimiter = ',', default_value = "64,256")]
    samples: Vec<usize>,
    /// Timed repetitions per run; time_s is their median
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Backend to run on (a CPU backend: the threads are its compute threads)
    #[arg(long, default_value = "flex")]
    backend: Backend,
    /// Runs CSV to write (replaced atomically): columns p, b, n, time_s and provenance
    #[arg(long)]
    out: PathBuf,
    /// Output format of the summary on stdout
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

pub fn run(c: ScaleCommand, ui: &Ui) -> anyhow::Result<ExitCode> {
    match c {
        ScaleCommand::Predict(a) => predict(*a, ui),
        ScaleCommand::Fit(a) => fit(a, ui),
        ScaleCommand::Measure(a) => measure(a, ui),
    }
}

fn predict(a: PredictArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    // Everything the user typed is checked before the bundle is loaded.
    if let Some(path) = &a.plot {
        crate::plot::is_svg(path)?;
    }
    let net = crate::cmd::model::one_network(
        a.network.as_deref(),
        a.resolution,
        a.network_file.as_deref(),
        &a.model,
        Phase::Training,
        "nothing to predict",
    )?;
    check_split(a.batch, &a.gpus)?;
    let link = Link::parse(&a.link).context("`--link`")?;
    let strategy = match a.strategy {
        StrategyArg::Ring => Strategy::Ring,
        StrategyArg::Tree => Strategy::Tree,
        StrategyArg::Ps => Strategy::ParameterServer { servers: a.servers },
        StrategyArg::Hierarchical => Strategy::Hierarchical {
            gpus_per_node: a.gpus_per_node,
            inter_link: Link::parse(&a.inter_link).context("`--inter-link`")?,
            inter: match a.inter_strategy {
                InterArg::Ring => InterNode::Ring,
                InterArg::Tree => InterNode::Tree,
            },
        },
    };
    let strategy = match &a.collectives {
        Some(path) => Strategy::Fitted {
            fits: Box::new(perfcast_scale::Collectives::from_file(path)?),
            beyond: Box::new(strategy),
        },
        None => strategy,
    };
    let overlap = match a.overlap {
        OverlapArg::Bucketed => bucketed(a.bucket_mb)?,
        OverlapArg::Full => Overlap::Full,
        OverlapArg::None => Overlap::None,
    };
    let parallelism = match a.parallel {
        ParallelArg::Data => Parallelism::Data,
        ParallelArg::Model => Parallelism::Model,
        ParallelArg::Pipeline => Parallelism::Pipeline,
    };
    let optimizer = match a.optimizer {
        OptimizerArg::Sgd => Optimizer::Sgd,
        OptimizerArg::Momentum => Optimizer::Momentum,
        OptimizerArg::Adam => Optimizer::Adam,
    };
    check_update_ms(a.update_ms)?;
    // The reader `predict --device-spec` uses: perfcast's format or a NeuSight config.
    let device_spec =
        perfcast_core::known::target_device(a.device_spec.as_deref(), a.device.as_deref())?;
    // The model's own checks (model and pipeline parallelism are not modelled yet) come
    // before the bundle loads; the update time is filled in by the prediction.
    let model = DataParallelModel {
        parallelism,
        strategy,
        link,
        overlap,
        update_s: 0.0,
    };
    model.validate()?;
    let bars = Bars::new(ui);
    let predictor;
    let bundle_compute;
    let compute = match a.compute_ms {
        Some(compute_ms) => Compute::Measured {
            compute_ms,
            backward_share: a.backward_share,
        },
        None => {
            // With a spec, compute is predicted for that device: a cross-device bundle answers
            // for any spec, a one-device bundle only for its own device (else a clear error).
            predictor = Predictor::new(match &device_spec {
                Some(spec) => perfcast_predict::Bundle::load_for_device(&a.bundle, spec)?,
                None => crate::cmd::predict::load_bundle(&a.bundle)?,
            });
            let device = predictor.bundle().manifest.device.clone();
            bundle_compute = BundleCompute::new(&predictor, &net, a.threads, bars.as_ref())?;
            Compute::Bundle {
                path: a.bundle.clone(),
                device,
                layers: &bundle_compute,
            }
        }
    };
    let (report, rows) = predict_scaling(
        &net,
        a.batch,
        &a.gpus,
        model,
        optimizer,
        a.update_ms,
        device_spec,
        compute,
        bars.as_ref(),
    )?;
    let update_s = rows.first().map_or(0.0, |r| r.update_s);
    if let Some(path) = &a.plot {
        render::charts::scaling(
            path,
            &rows,
            &format!("{} ({})", report.strategy.name(), report.link.name),
            &format!("{}, global batch {}", report.network, a.batch),
        )?;
        ui.info(format!("wrote `{}`", path.display()));
    }
    match a.format {
        Format::Json => emit_json(&report)?,
        Format::Text => emit(&render::scale::predict(&report, update_s))?,
    }
    Ok(ExitCode::SUCCESS)
}

fn fit(a: FitArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    if let Some(path) = &a.plot {
        crate::plot::is_svg(path)?;
    }
    let expression = Expression::parse(&a.terms).context("`--terms`")?;
    let points: Vec<Point> = a
        .predict
        .iter()
        .map(|t| Point::parse(t).context("`--predict`"))
        .collect::<anyhow::Result<_>>()?;
    let holdout = match (a.holdout, &a.holdout_runs) {
        (Some(share), _) => Some(Holdout::Share {
            share,
            seed: a.seed,
        }),
        (None, Some(text)) => Some(Holdout::Where(
            Filter::parse(text).context("`--holdout-runs`")?,
        )),
        (None, None) => None,
    };
    let config = FitConfig {
        lambda: a.lambda,
        de: DeConfig {
            population: a.population,
            max_generations: a.generations,
            seed: a.seed,
            ..DeConfig::default()
        },
    };
    let bars = Bars::new(ui);
    let out = fit_runs(
        &a.runs,
        &expression,
        holdout.as_ref(),
        &config,
        &points,
        bars.as_ref(),
    )?;
    if let Some(path) = &a.plot {
        render::charts::scale_fit(path, &out.fitted, &out.runs)?;
        ui.info(format!(
            "wrote `{}` and its `-fit` companion",
            path.display()
        ));
    }
    match a.format {
        Format::Json => emit_json(&out.report)?,
        Format::Text => emit(&render::scale::fit(&out.report))?,
    }
    Ok(ExitCode::SUCCESS)
}

fn measure(a: MeasureArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    let plan = perfcast_workflow::scale::MeasurePlan {
        network: match a.network_file {
            Some(path) => NetworkSource::File(path),
            None => NetworkSource::Zoo(a.network),
        },
        threads: a.threads,
        batch: a.batch,
        samples: a.samples,
        repeats: a.repeats,
        backend: a.backend,
        out: a.out,
    };
    let report = perfcast_workflow::scale::measure(
        &plan,
        Bars::new(ui).as_ref(),
        perfcast_core::interrupt::token(),
    )?;
    ui.info(format!(
        "wrote {} runs to `{}`; fit them with `perfcast scale fit --runs {} --holdout 0.25`",
        report.runs.len(),
        plan.out.display(),
        plan.out.display()
    ));
    match a.format {
        Format::Json => emit_json(&report)?,
        Format::Text => emit(&render::scale::measure(&report))?,
    }
    if !report.failed.is_empty() {
        ui.info(format!(
            "error: {} of {} runs failed; the file holds the others",
            report.failed.len(),
            report.failed.len() + report.runs.len()
        ));
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
