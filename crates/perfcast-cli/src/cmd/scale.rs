//! `perfcast scale predict` (the analytical multi-device model) and `perfcast scale fit` (the
//! generic expression fitted to measured runs).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Subcommand, ValueEnum};
use perfcast_core::{Context, CpuTopology, DeviceSpec, Network, Phase, slugify, zoo};
use perfcast_profile::Backend;
use perfcast_profile::network::time_training;
use perfcast_scale::analytic::{layer_params, layers_from_measurement};
use perfcast_scale::fit::{Filter, fit_with_holdout};
use perfcast_scale::{
    DataParallelModel, DeConfig, Expression, FitConfig, FittedExpression, Holdout, InterNode,
    IterationEstimate, LayerCost, Link, Optimizer, Overlap, Parallelism, Point, Run, Strategy,
    Term,
};
use perfcast_select::Predictor;
use serde::Serialize;

use crate::Ui;
use crate::output::{Format, emit, emit_json, fmt_ms, progress, sig3};
use crate::plot;

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
    Predict(PredictArgs),
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
    /// mobilenetv2, transformer)
    #[arg(
        long,
        conflicts_with = "network_file",
        required_unless_present = "network_file"
    )]
    network: Option<String>,
    /// A network from a JSON file (format: `examples/networks/`)
    #[arg(long)]
    network_file: Option<PathBuf>,
    /// Input resolution of a zoo network (tokens for the transformer)
    #[arg(long)]
    resolution: Option<usize>,
    /// Global batch: samples per iteration over all devices; each device runs ceil(batch / P)
    #[arg(long)]
    batch: usize,
    /// Device counts to predict (efficiency is always against 1 device)
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    gpus: Vec<usize>,
    /// The devices' spec (JSON, as `perfcast devices --format json` or an import's
    /// `device.json`): recorded, and its memory bandwidth times the optimiser update
    #[arg(long)]
    device_spec: Option<PathBuf>,
    /// Link between devices: pcie3, pcie4, nvlink, nvlink2, infiniband, ethernet, or
    /// GBPS:US (bandwidth per direction in GB/s, latency in microseconds)
    #[arg(long, default_value = "nvlink")]
    link: String,
    /// Gradient exchange
    #[arg(long, value_enum, default_value_t = StrategyArg::Ring)]
    strategy: StrategyArg,
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
        ScaleCommand::Predict(a) => predict(a, ui),
        ScaleCommand::Fit(a) => fit(a, ui),
        ScaleCommand::Measure(a) => measure(a, ui),
    }
}

use crate::render::charts::write as write_chart;

/// One device count, in milliseconds, for output.
#[derive(Debug, Serialize)]
struct Row {
    gpus: usize,
    per_device_batch: usize,
    forward_ms: f64,
    backward_ms: f64,
    comm_ms: f64,
    exposed_comm_ms: f64,
    update_ms: f64,
    iteration_ms: f64,
    throughput: f64,
    speedup: f64,
    efficiency: f64,
    messages: usize,
}

impl From<&IterationEstimate> for Row {
    fn from(it: &IterationEstimate) -> Row {
        Row {
            gpus: it.devices,
            per_device_batch: it.per_device_batch,
            forward_ms: it.forward_s * 1e3,
            backward_ms: it.backward_s * 1e3,
            comm_ms: it.comm_s * 1e3,
            exposed_comm_ms: it.exposed_comm_s * 1e3,
            update_ms: it.update_s * 1e3,
            iteration_ms: it.iteration_s * 1e3,
            throughput: it.throughput,
            speedup: it.speedup,
            efficiency: it.efficiency,
            messages: it.messages,
        }
    }
}

/// What `scale predict` prints.
#[derive(Debug, Serialize)]
struct PredictReport {
    network: String,
    parameters: f64,
    gradient_bytes: f64,
    global_batch: usize,
    /// `bundle` or `measured`.
    compute_source: String,
    /// The bundle, where it gave the compute time.
    bundle: Option<PathBuf>,
    /// The device the compute time is for (the bundle's), where known.
    compute_device: Option<String>,
    /// The spec given with `--device-spec`.
    device_spec: Option<DeviceSpec>,
    parallelism: Parallelism,
    strategy: Strategy,
    link: Link,
    overlap: Overlap,
    optimizer: Optimizer,
    /// How the update time was obtained.
    update_source: String,
    rows: Vec<Row>,
}

fn predict(a: PredictArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    // Everything the user typed is checked before the bundle is loaded.
    if let Some(path) = &a.plot {
        crate::plot::is_svg(path)?;
    }
    let net = match (&a.network, &a.network_file) {
        (Some(name), _) => zoo::build(name, a.resolution)?,
        (None, Some(path)) => Network::from_json_file(path)?,
        (None, None) => anyhow::bail!("`--network` or `--network-file` is needed"),
    };
    net.check()?;
    anyhow::ensure!(a.batch >= 1, "`--batch` must be at least 1, got 0");
    anyhow::ensure!(
        !a.gpus.is_empty(),
        "`--gpus` needs at least one device count"
    );
    if let Some(&bad) = a.gpus.iter().find(|&&p| p == 0 || p > a.batch) {
        anyhow::bail!(
            "`--gpus {bad}`: the global batch {} cannot be split over {bad} devices",
            a.batch
        );
    }
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
    let overlap = match a.overlap {
        OverlapArg::Bucketed => {
            anyhow::ensure!(
                a.bucket_mb.is_finite() && a.bucket_mb > 0.0,
                "`--bucket-mb` must be positive, got {}",
                a.bucket_mb
            );
            Overlap::Bucketed {
                bucket_bytes: a.bucket_mb * 1024.0 * 1024.0,
            }
        }
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
    if let Some(ms) = a.update_ms {
        anyhow::ensure!(
            ms.is_finite() && ms >= 0.0,
            "`--update-ms` must not be negative, got {ms}"
        );
    }
    let device_spec = match &a.device_spec {
        // The reader `predict --device-spec` uses: perfcast's format or a NeuSight config.
        Some(path) => Some(crate::cmd::target_device::read_device_spec(path)?),
        None => None,
    };
    // The model's own checks (model and pipeline parallelism are not modelled yet) come
    // before the bundle loads; the update time is filled in below.
    let mut model = DataParallelModel {
        parallelism,
        strategy,
        link,
        overlap,
        update_s: 0.0,
    };
    model.validate()?;
    let layers = layer_params(&net);
    let parameters: f64 = layers.iter().map(|(_, p)| p).sum();

    // Compute: a measurement, or the bundle's per-layer predictions.
    let predictor;
    let prepared;
    let mut bundle_device: Option<DeviceSpec> = None;
    let compute: Box<dyn Fn(usize) -> perfcast_scale::Result<Vec<LayerCost>> + '_> =
        if let Some(ms) = a.compute_ms {
            anyhow::ensure!(
                ms.is_finite() && ms > 0.0,
                "`--compute-ms` must be a positive number of milliseconds, got {ms}"
            );
            anyhow::ensure!(
                a.backward_share.is_finite() && (0.0..1.0).contains(&a.backward_share),
                "`--backward-share` must be in [0, 1), got {}",
                a.backward_share
            );
            let per_sample_s = ms * 1e-3 / a.batch as f64;
            let share = a.backward_share;
            let net = net.clone();
            Box::new(move |b: usize| {
                let step = per_sample_s * b as f64;
                Ok(layers_from_measurement(
                    &net,
                    step * (1.0 - share),
                    step * share,
                ))
            })
        } else {
            predictor = Predictor::new(crate::cmd::predict::load_bundle(&a.bundle)?);
            let device = &predictor.bundle().manifest.device;
            bundle_device = Some(device.clone());
            if let Some(spec) = &device_spec
                && slugify(&spec.name) != slugify(&device.name)
            {
                ui.info(format!(
                    "warning: `--device-spec` describes `{}`, but bundle `{}` was trained on \
                     `{}`: compute times are for `{}` (cross-device prediction is not \
                     implemented yet)",
                    spec.name,
                    a.bundle.display(),
                    device.name,
                    device.name
                ));
            }
            prepared = predictor.prepare(&net)?;
            let threads = a.threads;
            anyhow::ensure!(threads >= 1, "`--threads` must be at least 1, got 0");
            let (predictor, prepared, layers) = (&predictor, &prepared, &layers);
            let warned = std::cell::Cell::new(false);
            Box::new(move |b: usize| {
                let at = |phase| {
                    predictor.predict_prepared(
                        prepared,
                        &Context {
                            batch: b,
                            phase,
                            threads,
                            utilisation: 0.0,
                        },
                    )
                };
                let wrap = |e: perfcast_select::Error| perfcast_scale::Error::Compute {
                    batch: b,
                    message: e.to_string(),
                };
                let fwd = at(Phase::Inference).map_err(wrap)?;
                let train = at(Phase::Training).map_err(wrap)?;
                let outside = train
                    .layers
                    .iter()
                    .chain(&fwd.layers)
                    .filter(|l| !l.prediction.warnings.is_empty())
                    .count();
                if outside > 0 && !warned.get() {
                    warned.set(true);
                    ui.info(format!(
                        "warning: {outside} layer prediction(s) at per-device batch {b} leave \
                         the bundle's trained ranges (`perfcast predict --network ... \
                         --batch {b} --phase training` lists them)"
                    ));
                }
                Ok(fwd
                    .layers
                    .iter()
                    .zip(&train.layers)
                    .zip(layers)
                    .map(|((f, t), (name, params))| LayerCost {
                        name: name.clone(),
                        forward_s: f.prediction.ms * 1e-3,
                        // The training phase is forward + backward.
                        backward_s: (t.prediction.ms - f.prediction.ms).max(0.0) * 1e-3,
                        grad_bytes: params * 4.0,
                    })
                    .collect())
            })
        };
    // The update streams the optimiser state through device memory: the spec given, else
    // the bundle's device (the one the compute time is for).
    let memory = device_spec.as_ref().or(bundle_device.as_ref());
    let (update_s, update_source) = match (a.update_ms, memory) {
        (Some(ms), _) => (ms * 1e-3, "`--update-ms`".to_string()),
        (None, Some(d)) => (
            optimizer.update_s(parameters, d.mem_bandwidth_gbs),
            format!(
                "{} bytes per parameter over the {} GB/s of `{}`",
                optimizer.bytes_per_param(),
                sig3(d.mem_bandwidth_gbs),
                d.name
            ),
        ),
        (None, None) => {
            ui.info(
                "note: no optimiser update time without a device spec (pass `--device-spec` \
                 or `--update-ms`)",
            );
            (0.0, "none: no device spec".to_string())
        }
    };
    model.update_s = update_s;
    let rows = model.scaling(&a.gpus, a.batch, &compute)?;
    drop(compute);
    if let Some(r) = rows.iter().find(|r| r.efficiency > 1.0 + 1e-6) {
        ui.info(format!(
            "warning: efficiency above 100% at {} devices: the compute time at per-device batch \
             {} is less than 1/{} of that at batch {}; per-sample compute should not fall with \
             smaller batches (are the predictions outside the bundle's trained ranges?)",
            r.devices, r.per_device_batch, r.devices, a.batch
        ));
    }
    let report = PredictReport {
        network: net.name.clone(),
        parameters,
        gradient_bytes: parameters * 4.0,
        global_batch: a.batch,
        compute_source: if a.compute_ms.is_some() {
            "measured".into()
        } else {
            "bundle".into()
        },
        bundle: a.compute_ms.is_none().then(|| a.bundle.clone()),
        compute_device: bundle_device.map(|d| d.name),
        device_spec,
        parallelism,
        strategy: model.strategy.clone(),
        link: model.link.clone(),
        overlap,
        optimizer,
        update_source,
        rows: rows.iter().map(Row::from).collect(),
    };
    if let Some(path) = &a.plot {
        let base = rows
            .iter()
            .find(|r| r.devices == 1)
            .map(|r| r.throughput)
            .unwrap_or(rows[0].throughput / rows[0].speedup);
        let series = [
            plot::Series {
                name: format!("{} ({})", model.strategy.name(), model.link.name),
                points: rows
                    .iter()
                    .map(|r| (r.devices as f64, r.throughput))
                    .collect(),
            },
            plot::Series {
                name: "linear scaling".into(),
                points: rows
                    .iter()
                    .map(|r| (r.devices as f64, base * r.devices as f64))
                    .collect(),
            },
        ];
        let title = format!("{}, global batch {}", report.network, a.batch);
        write_chart(
            path,
            &plot::Chart {
                title: &title,
                x_label: "devices",
                y_label: "samples per second",
                series: &series,
                log: (true, true),
                scatter: false,
                diagonal: false,
            },
        )?;
        ui.info(format!("wrote `{}`", path.display()));
    }
    match a.format {
        Format::Json => emit_json(&report)?,
        Format::Text => emit(&render_predict(&report, update_s))?,
    }
    Ok(ExitCode::SUCCESS)
}

fn render_predict(r: &PredictReport, update_s: f64) -> String {
    let overlap = match r.overlap {
        Overlap::None => "no overlap".to_string(),
        Overlap::Full => "full overlap with backward".to_string(),
        Overlap::Bucketed { bucket_bytes } => format!(
            "bucketed overlap ({} MiB buckets)",
            sig3(bucket_bytes / 1024.0 / 1024.0)
        ),
    };
    let mut t = format!(
        "{}: {} M parameters, {} MB of fp32 gradients; global batch {} (ceil(batch / P) per device)\n",
        r.network,
        sig3(r.parameters / 1e6),
        sig3(r.gradient_bytes / 1e6),
        r.global_batch
    );
    t.push_str(&format!(
        "{} over {}, {overlap}\n",
        r.strategy.name(),
        r.link
    ));
    match (&r.bundle, &r.compute_device) {
        (Some(b), Some(d)) => t.push_str(&format!(
            "compute: bundle `{}` ({d}), training phase at the per-device batch\n",
            b.display()
        )),
        _ => t.push_str("compute: measured (`--compute-ms`), scaled per sample\n"),
    }
    t.push_str(&format!(
        "update: {} per iteration ({})\n",
        fmt_ms(update_s * 1e3),
        r.update_source
    ));
    if let Some(d) = &r.device_spec {
        t.push_str(&format!("device spec: {}\n", d.name));
    }
    t.push_str(&format!(
        "\n{:>5} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>11} {:>10} {:>8} {:>10}\n",
        "gpus",
        "batch/gpu",
        "forward",
        "backward",
        "comm",
        "exposed",
        "update",
        "iteration",
        "samples/s",
        "speedup",
        "efficiency"
    ));
    for row in &r.rows {
        t.push_str(&format!(
            "{:>5} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>11} {:>10} {:>8} {:>9}%\n",
            row.gpus,
            row.per_device_batch,
            fmt_ms(row.forward_ms),
            fmt_ms(row.backward_ms),
            fmt_ms(row.comm_ms),
            fmt_ms(row.exposed_comm_ms),
            fmt_ms(row.update_ms),
            fmt_ms(row.iteration_ms),
            sig3(row.throughput),
            sig3(row.speedup),
            sig3(100.0 * row.efficiency)
        ));
    }
    t.push_str(
        "\ncomm: link busy with gradients; exposed: the part not hidden behind the backward pass\n",
    );
    t
}

/// One constant, for output.
#[derive(Debug, Serialize)]
struct ConstantRow {
    term: String,
    formula: String,
    extrinsic: bool,
    value: f64,
    rel_se: Option<f64>,
    mean_share: f64,
    meaning: String,
}

/// One `--predict` point.
#[derive(Debug, Serialize)]
struct PointPrediction {
    p: f64,
    b: f64,
    n: f64,
    time_s: f64,
    terms: Vec<(String, f64)>,
}

/// What `scale fit` prints.
#[derive(Debug, Serialize)]
struct FitReport {
    runs_file: PathBuf,
    runs: usize,
    formula: String,
    constants: Vec<ConstantRow>,
    unfitted: Vec<String>,
    /// Terms the runs cannot tell from the others, set to 0 (`startup` at one `n`).
    undetermined: Vec<String>,
    fitted_runs: usize,
    fit_mape: f64,
    holdout: Option<HoldoutSummary>,
    generations: usize,
    evaluations: usize,
    converged: bool,
    seed: u64,
    lambda: f64,
    predictions: Vec<PointPrediction>,
}

#[derive(Debug, Serialize)]
struct HoldoutSummary {
    how: String,
    runs: usize,
    mape: f64,
    max_ape: f64,
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
    let runs = perfcast_scale::read_runs(&a.runs)?;
    let config = FitConfig {
        lambda: a.lambda,
        de: DeConfig {
            population: a.population,
            max_generations: a.generations,
            seed: a.seed,
            ..DeConfig::default()
        },
    };
    let (fitted, held) = match &holdout {
        Some(h) => {
            let r = fit_with_holdout(&expression, &runs, h, &config)
                .with_context(|| format!("fitting `{}`", a.runs.display()))?;
            let how = match h {
                Holdout::Share { share, seed } => {
                    format!("a random {}% (seed {seed})", sig3(100.0 * share))
                }
                Holdout::Where(f) => format!("the runs with {f}"),
            };
            let summary = HoldoutSummary {
                how,
                runs: r.holdout_runs,
                mape: r.holdout_mape,
                max_ape: r.holdout_max_ape,
            };
            (r.fitted, Some(summary))
        }
        None => (
            perfcast_scale::fit::fit(&expression, &runs, &config)
                .with_context(|| format!("fitting `{}`", a.runs.display()))?,
            None,
        ),
    };
    if !fitted.converged {
        ui.info(format!(
            "warning: differential evolution stopped at {} generations before converging; \
             `--generations` raises the limit",
            fitted.generations
        ));
    }
    for t in &fitted.unfitted {
        ui.info(format!(
            "warning: term `{}` ({}) is zero on every run fitted: its constant is 0",
            t.name(),
            t.formula()
        ));
    }
    if fitted.undetermined.contains(&Term::Startup) {
        ui.info(
            "note: every run fitted has the same n: a fixed cost per run (`startup`) cannot be \
             told from per-sample work; taken as 0",
        );
    }
    let blind: Vec<String> = fitted
        .constants
        .iter()
        .filter(|c| {
            !c.rel_se.is_finite()
                && !fitted.unfitted.contains(&c.term)
                && !fitted.undetermined.contains(&c.term)
        })
        .map(|c| format!("`{}`", c.term.name()))
        .collect();
    if !blind.is_empty() {
        ui.info(format!(
            "note: no standard error for {}: the runs cannot separate {} from the others (or \
             push {} to zero); predictions far outside the runs depend on how the fit split \
             them\n\nhint: runs at more values of p, b and n separate the terms",
            blind.join(", "),
            if blind.len() == 1 { "it" } else { "them" },
            if blind.len() == 1 { "it" } else { "them" }
        ));
    }
    let report = FitReport {
        runs_file: a.runs.clone(),
        runs: runs.len(),
        formula: expression.formula(),
        constants: fitted
            .constants
            .iter()
            .map(|c| ConstantRow {
                term: c.term.name().into(),
                formula: c.term.formula().into(),
                extrinsic: c.term.extrinsic(),
                value: c.value,
                rel_se: c.rel_se.is_finite().then_some(c.rel_se),
                mean_share: c.mean_share,
                meaning: c.term.meaning().into(),
            })
            .collect(),
        unfitted: fitted.unfitted.iter().map(|t| t.name().into()).collect(),
        undetermined: fitted
            .undetermined
            .iter()
            .map(|t| t.name().into())
            .collect(),
        fitted_runs: fitted.runs,
        fit_mape: fitted.fit_mape,
        holdout: held,
        generations: fitted.generations,
        evaluations: fitted.evaluations,
        converged: fitted.converged,
        seed: a.seed,
        lambda: a.lambda,
        predictions: points
            .iter()
            .map(|&x| PointPrediction {
                p: x.p,
                b: x.b,
                n: x.n,
                time_s: fitted.predict(x),
                terms: fitted
                    .breakdown(x)
                    .into_iter()
                    .map(|(t, s)| (t.name().to_string(), s))
                    .collect(),
            })
            .collect(),
    };
    if let Some(path) = &a.plot {
        plot_fit(path, &fitted, &runs)?;
        ui.info(format!(
            "wrote `{}` and its `-fit` companion",
            path.display()
        ));
    }
    match a.format {
        Format::Json => emit_json(&report)?,
        Format::Text => emit(&render_fit(&report))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Significant digits for constants that may be tiny: `1.23e-4`.
fn sci(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if (1e-2..1e4).contains(&v.abs()) {
        sig3(v)
    } else {
        format!("{v:.3e}")
    }
}

fn render_fit(r: &FitReport) -> String {
    let mut t = format!("{}\n", r.formula);
    t.push_str(&format!(
        "fitted to {} of {} runs in `{}` by differential evolution ({} generations, seed {}{})\n\n",
        r.fitted_runs,
        r.runs,
        r.runs_file.display(),
        r.generations,
        r.seed,
        if r.converged { "" } else { ", not converged" }
    ));
    t.push_str(&format!(
        "{:<11} {:<14} {:>11} {:>8} {:>7}  {}\n",
        "term", "factor", "constant", "+-se", "share", "meaning"
    ));
    for c in &r.constants {
        t.push_str(&format!(
            "{:<11} {:<14} {:>11} {:>8} {:>6}%  {}{}\n",
            c.term,
            c.formula,
            sci(c.value),
            c.rel_se
                .map(|s| format!("{}%", sig3(100.0 * s)))
                .unwrap_or_else(|| "-".into()),
            sig3(100.0 * c.mean_share),
            c.meaning,
            if c.extrinsic { " [extrinsic]" } else { "" }
        ));
    }
    t.push_str(&format!("\nfit MAPE {}%", sig3(r.fit_mape)));
    match &r.holdout {
        Some(h) => t.push_str(&format!(
            "; held out {} ({} runs): MAPE {}%, max {}%\n",
            h.how,
            h.runs,
            sig3(h.mape),
            sig3(h.max_ape)
        )),
        None => t.push('\n'),
    }
    if !r.predictions.is_empty() {
        t.push('\n');
    }
    for p in &r.predictions {
        let parts: Vec<String> = p
            .terms
            .iter()
            .filter(|(_, s)| *s != 0.0)
            .map(|(name, s)| format!("{name} {}", fmt_ms(s * 1e3)))
            .collect();
        t.push_str(&format!(
            "p={} b={} n={}: {} ({})\n",
            p.p,
            p.b,
            p.n,
            fmt_ms(p.time_s * 1e3),
            parts.join(", ")
        ));
    }
    t
}

/// The scaling curves (predicted time against p for up to six (b, n) pairs of the
/// runs) and measured against predicted, beside it.
fn plot_fit(path: &Path, fitted: &FittedExpression, runs: &[Run]) -> anyhow::Result<()> {
    // Up to six (b, n) pairs of the runs, spread over their range.
    let mut pairs: Vec<(f64, f64)> = runs.iter().map(|r| (r.point.b, r.point.n)).collect();
    pairs.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    pairs.dedup();
    let shown: Vec<(f64, f64)> = if pairs.len() <= 6 {
        pairs
    } else {
        let last = (pairs.len() - 1) as f64;
        (0..6)
            .map(|i| pairs[(last * f64::from(i) / 5.0).round() as usize])
            .collect()
    };
    let max_p = runs.iter().map(|r| r.point.p).fold(1.0, f64::max);
    let top = (2.0 * max_p).ceil().max(2.0);
    let ps: Vec<f64> = (0..=48)
        .map(|i| 1.0 + (top - 1.0) * f64::from(i) / 48.0)
        .collect();
    let curves: Vec<plot::Series> = shown
        .iter()
        .map(|&(b, n)| plot::Series {
            name: format!("b={b} n={n}"),
            points: ps
                .iter()
                .map(|&p| (p, fitted.predict(Point { p, b, n })))
                .collect(),
        })
        .collect();
    write_chart(
        path,
        &plot::Chart {
            title: "predicted scaling: T(p, b, n)",
            x_label: "processors p",
            y_label: "seconds",
            series: &curves,
            log: (false, true),
            scatter: false,
            diagonal: false,
        },
    )?;
    let scatter = [plot::Series {
        name: format!("{} runs (MAPE {}%)", runs.len(), sig3(fitted.mape(runs))),
        points: runs
            .iter()
            .map(|r| (r.time_s, fitted.predict(r.point)))
            .collect(),
    }];
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("plot");
    let ext = path.extension().and_then(|s| s.to_str()).unwrap_or("svg");
    write_chart(
        &path.with_file_name(format!("{stem}-fit.{ext}")),
        &plot::Chart {
            title: "fitted expression: every run",
            x_label: "measured (s)",
            y_label: "predicted (s)",
            series: &scatter,
            log: (true, true),
            scatter: true,
            diagonal: true,
        },
    )
}

/// One measured run, as written to the runs CSV.
#[derive(Debug, Clone, Serialize)]
struct MeasuredRun {
    p: usize,
    b: usize,
    /// Samples processed: `steps * b`.
    n: usize,
    steps: usize,
    /// Median over the repeats, seconds.
    time_s: f64,
    /// Fastest and slowest repeat, seconds.
    min_s: f64,
    max_s: f64,
}

/// A configuration that could not be measured.
#[derive(Debug, Serialize)]
struct FailedRun {
    p: usize,
    b: usize,
    n: usize,
    error: String,
}

/// What `scale measure` prints.
#[derive(Debug, Serialize)]
struct MeasureReport {
    out: PathBuf,
    network: String,
    resolution: Option<usize>,
    backend: String,
    cpu: String,
    cores: u32,
    repeats: usize,
    /// One-minute load average before and after measuring (Linux), for the record.
    load_start: Option<f64>,
    load_end: Option<f64>,
    runs: Vec<MeasuredRun>,
    failed: Vec<FailedRun>,
}

/// The one-minute load average, where the system publishes it.
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A CSV field, quoted when it holds a comma, a quote or spaces at its ends.
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n']) || text.trim() != text {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

/// The runs CSV: a `#` provenance line (skipped by the reader), the header, one line per run.
fn runs_csv(r: &MeasureReport) -> String {
    let load = |l: Option<f64>| l.map_or_else(|| "unknown".to_string(), |v| format!("{v:.2}"));
    let mut t = format!(
        "# perfcast scale measure: {} training steps (forward, backward, SGD update) on {}, \
         {} ({} cores); time_s is the median of {} repeats (rounds over every run in shuffled \
         order), each after one untimed warm-up step; 1-minute load average {} before, {} \
         after\n",
        r.network.replace('\n', " "),
        r.backend,
        r.cpu.replace('\n', " "),
        r.cores,
        r.repeats,
        load(r.load_start),
        load(r.load_end)
    );
    t.push_str("network,resolution,backend,p,b,n,steps,repeats,time_s,min_s,max_s\n");
    let network = csv_field(&r.network);
    let resolution = r.resolution.map(|v| v.to_string()).unwrap_or_default();
    for run in &r.runs {
        t.push_str(&format!(
            "{network},{resolution},{},{},{},{},{},{},{:.6},{:.6},{:.6}\n",
            r.backend, run.p, run.b, run.n, run.steps, r.repeats, run.time_s, run.min_s, run.max_s
        ));
    }
    t
}

use perfcast_core::rng::shuffled;

/// Median of a non-empty slice, which it sorts.
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let m = values.len() / 2;
    if values.len() % 2 == 1 {
        values[m]
    } else {
        0.5 * (values[m - 1] + values[m])
    }
}

fn measure(a: MeasureArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    for (flag, values) in [
        ("--threads", &a.threads),
        ("--batch", &a.batch),
        ("--samples", &a.samples),
    ] {
        anyhow::ensure!(!values.is_empty(), "`{flag}` needs at least one value");
        anyhow::ensure!(
            values.iter().all(|&v| v >= 1),
            "`{flag}` values must be at least 1, got {}",
            values
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(",")
        );
    }
    anyhow::ensure!(
        a.repeats >= 1,
        "`--repeats` must be at least 1, got {}",
        a.repeats
    );
    anyhow::ensure!(
        a.backend.is_cpu(),
        "`--backend {}`: `scale measure` varies the compute threads of a CPU backend \
         (flex or ndarray)",
        a.backend
    );
    a.backend.device()?;
    let (label, network, resolution) = match &a.network_file {
        Some(path) => {
            let network = Network::from_json_file(path)?;
            (network.name.clone(), network, None)
        }
        None => {
            let c = perfcast_core::NetworkChoice::zoo(&a.network, None)?;
            (c.label, c.network, c.resolution)
        }
    };
    network.check()?;
    let cpu = CpuTopology::detect();
    if let Some(&p) = a.threads.iter().find(|&&p| p > cpu.threads as usize) {
        ui.info(format!(
            "note: {p} threads on {} logical CPUs oversubscribe them: the runs measure the \
             contention",
            cpu.threads
        ));
    }
    // The (b, n) pairs, each measured at every thread count.
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    for &n in &a.samples {
        for &b in &a.batch {
            let steps = n.div_ceil(b);
            if steps * b != n {
                ui.info(format!(
                    "note: n={n} is not a whole number of batches of {b}: {steps} steps, \
                     recorded as n={}",
                    steps * b
                ));
            }
            pairs.push((b, steps));
        }
    }
    let threads = &a.threads;
    let load_start = load_average();
    if let Some(load) = load_start.filter(|&l| l >= 0.5) {
        ui.info(format!(
            "note: the machine is busy (1-minute load average {load:.2} on {} logical CPUs): \
             the runs share it, those with more threads most",
            cpu.threads
        ));
    }
    // Every repeat is a round over all runs: the (b, n) pairs in a fresh shuffled order, the
    // thread counts of a pair one after the other. Load that drifts while measuring (other
    // work starting or stopping) then spreads over the repeats of every run alike instead of
    // biasing the runs measured last, and the thread counts of a pair see the same load.
    // Each repeat builds the network anew and runs one untimed warm-up step.
    // Progress in samples (warm-up included): a run's time grows with its samples, so the
    // ETA holds across runs of very different sizes.
    let cost = |b: usize, steps: usize| ((steps + 1) * b) as u64;
    let per_round: u64 =
        pairs.iter().map(|&(b, steps)| cost(b, steps)).sum::<u64>() * threads.len() as u64;
    let bar = progress(ui, per_round * a.repeats as u64, "measure");
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); pairs.len() * threads.len()];
    let mut errors: Vec<Option<String>> = vec![None; times.len()];
    for round in 0..a.repeats {
        for pair in shuffled(pairs.len(), round as u64) {
            let (b, steps) = pairs[pair];
            for (t, &p) in threads.iter().enumerate() {
                let i = pair * threads.len() + t;
                if errors[i].is_none() {
                    bar.set_message(format!(
                        "{label}: repeat {}/{}, p={p} b={b} n={} ({steps} steps)",
                        round + 1,
                        a.repeats,
                        steps * b
                    ));
                    match time_training(&network, a.backend, b, p, steps, 1) {
                        Ok(d) => times[i].extend(d.iter().map(Duration::as_secs_f64)),
                        Err(error) => {
                            bar.suspend(|| {
                                ui.info(format!(
                                    "error: `{label}` at p={p} b={b} n={}: {error}",
                                    steps * b
                                ))
                            });
                            errors[i] = Some(error);
                        }
                    }
                }
                bar.inc(cost(b, steps));
            }
        }
    }
    let mut runs = Vec::with_capacity(times.len());
    let mut failed = Vec::new();
    for (i, (mut s, error)) in times.into_iter().zip(errors).enumerate() {
        let (b, steps) = pairs[i / threads.len()];
        let p = threads[i % threads.len()];
        let n = steps * b;
        match error {
            Some(error) => failed.push(FailedRun { p, b, n, error }),
            None => {
                let time_s = median(&mut s);
                runs.push(MeasuredRun {
                    p,
                    b,
                    n,
                    steps,
                    time_s,
                    min_s: s[0],
                    max_s: s[s.len() - 1],
                });
            }
        }
    }
    bar.finish_and_clear();
    anyhow::ensure!(
        !runs.is_empty(),
        "no run could be measured (the first error: {})",
        failed.first().map_or("none", |f| f.error.as_str())
    );
    let report = MeasureReport {
        out: a.out.clone(),
        network: label,
        resolution,
        backend: a.backend.name().into(),
        cpu: cpu.model,
        cores: cpu.cores,
        repeats: a.repeats,
        load_start,
        load_end: load_average(),
        runs,
        failed,
    };
    perfcast_data::write_atomic(&a.out, runs_csv(&report).as_bytes())
        .with_context(|| format!("writing the runs `{}`", a.out.display()))?;
    ui.info(format!(
        "wrote {} runs to `{}`; fit them with `perfcast scale fit --runs {} --holdout 0.25`",
        report.runs.len(),
        a.out.display(),
        a.out.display()
    ));
    match a.format {
        Format::Json => emit_json(&report)?,
        Format::Text => emit(&render_measure(&report))?,
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

fn render_measure(r: &MeasureReport) -> String {
    let load = |l: Option<f64>| l.map_or_else(|| "-".to_string(), sig3);
    let mut t = format!(
        "{}: training steps on {}, {} ({} cores), median of {} repeats; load average {} \
         before, {} after\n\n",
        r.network,
        r.backend,
        r.cpu,
        r.cores,
        r.repeats,
        load(r.load_start),
        load(r.load_end)
    );
    t.push_str(&format!(
        "{:>3} {:>5} {:>7} {:>6} {:>10} {:>7} {:>10} {:>8}\n",
        "p", "b", "n", "steps", "time", "spread", "samples/s", "speedup"
    ));
    for run in &r.runs {
        let one = r
            .runs
            .iter()
            .find(|o| o.p == 1 && o.b == run.b && o.n == run.n)
            .map(|o| o.time_s);
        t.push_str(&format!(
            "{:>3} {:>5} {:>7} {:>6} {:>10} {:>6}% {:>10} {:>8}\n",
            run.p,
            run.b,
            run.n,
            run.steps,
            fmt_ms(run.time_s * 1e3),
            sig3(100.0 * (run.max_s - run.min_s) / run.time_s),
            sig3(run.n as f64 / run.time_s),
            one.map_or_else(|| "-".into(), |o| sig3(o / run.time_s))
        ));
    }
    for f in &r.failed {
        t.push_str(&format!(
            "{:>3} {:>5} {:>7} failed: {}\n",
            f.p, f.b, f.n, f.error
        ));
    }
    t.push_str("\nspread: slowest minus fastest repeat, relative to the median\n");
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffled_orders_are_permutations_fixed_by_the_seed() {
        for seed in 0..4 {
            let mut order = shuffled(10, seed);
            assert_eq!(order, shuffled(10, seed));
            order.sort_unstable();
            assert_eq!(order, (0..10).collect::<Vec<_>>());
        }
        assert_ne!(shuffled(10, 0), shuffled(10, 1));
        assert!(shuffled(0, 3).is_empty());
        assert_eq!(shuffled(1, 3), [0]);
    }

    #[test]
    fn medians_and_csv_fields() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(csv_field("lenet5"), "lenet5");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }
}
