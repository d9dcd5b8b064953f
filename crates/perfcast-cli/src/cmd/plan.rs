//! `perfcast plan`: time, memory and cost of a training job per device, GPU count and
//! parallel layout. Arguments -> devices with their predictors -> `perfcast_scale::plan::plan`
//! -> table, JSON or plot.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use perfcast_core::{Context, Network, Phase};
use perfcast_scale::memory::{GIB, Recompute};
use perfcast_scale::plan::{
    DeviceOption, LayerTimes, PlanConfig, PlanReport, PriceTable, SortBy, default_link, plan,
};
use perfcast_scale::{Link, Optimizer};
use perfcast_select::{Bundle, Predictor};
use serde::Serialize;

use crate::Ui;
use crate::output::{Format, emit, emit_json, fmt_ms, sig3};
use crate::plot;

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
    /// Link between the GPUs of a node (pcie3, pcie4, nvlink, nvlink2, nvlink4, or GBPS:US);
    /// default per device: NVLink on SXM parts, PCIe otherwise
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
    /// Sort by
    #[arg(long, value_enum, default_value_t = SortArg::Time)]
    sort: SortArg,
    /// Rows to print (text); 0 prints all
    #[arg(long, default_value_t = 0)]
    top: usize,
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    format: Format,
    /// Write time against cost, the Pareto front marked, as SVG or PNG (by extension)
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// The network to plan: a zoo name, a network JSON, a transformer config or an ONNX file.
fn network_of(a: &PlanArgs) -> anyhow::Result<Network> {
    // A training step: a transformer config builds its dropout layers.
    if let Some(loaded) = a.model.load(perfcast_core::Phase::Training, &[])? {
        anyhow::ensure!(
            a.network.is_none() && a.network_file.is_none(),
            "give one network: `--network`, `--network-file`, `--transformer` or `--onnx`"
        );
        return Ok(loaded.network);
    }
    match (&a.network, &a.network_file) {
        (Some(name), _) => Ok(perfcast_core::NetworkChoice::zoo(name, None)?.network),
        (None, Some(path)) => Ok(Network::from_json_file(path)?),
        (None, None) => anyhow::bail!(
            "nothing to plan: give `--network`, `--network-file`, `--transformer` or `--onnx`"
        ),
    }
}

/// Per-layer forward and backward seconds from a bundle's predictor: the training phase is
/// forward + backward.
struct Predicted<'a> {
    predictor: Predictor,
    ui: &'a Ui,
    label: String,
    warned: std::cell::Cell<bool>,
}

impl LayerTimes for Predicted<'_> {
    fn layer_times(
        &self,
        network: &Network,
        batch: usize,
    ) -> perfcast_scale::Result<Vec<(f64, f64)>> {
        let wrap = |e: perfcast_select::Error| perfcast_scale::Error::Compute {
            batch,
            message: e.to_string(),
        };
        let prepared = self.predictor.prepare(network).map_err(wrap)?;
        let at = |phase| {
            self.predictor.predict_prepared(
                &prepared,
                &Context {
                    batch,
                    phase,
                    threads: 1,
                    utilisation: 0.0,
                },
            )
        };
        let fwd = at(Phase::Inference).map_err(wrap)?;
        let train = at(Phase::Training).map_err(wrap)?;
        let outside = fwd
            .layers
            .iter()
            .chain(&train.layers)
            .filter(|l| l.prediction.warnings.iter().any(|w| w.contains("range")))
            .count();
        if outside > 0 && !self.warned.get() {
            self.warned.set(true);
            self.ui.info(format!(
                "warning: `{}`: {outside} layer prediction(s) of `{}` at batch {batch} leave the \
                 bundle's trained ranges",
                self.label, network.name
            ));
        }
        Ok(fwd
            .layers
            .iter()
            .zip(&train.layers)
            .map(|(f, t)| {
                let f_s = f.prediction.ms * 1e-3;
                (f_s, (t.prediction.ms * 1e-3 - f_s).max(0.0))
            })
            .collect())
    }
}

pub fn run(a: PlanArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    // Everything typed is checked before a bundle loads.
    if let Some(p) = &a.plot {
        crate::plot::is_svg(p)?;
    }
    let network = network_of(&a)?;
    anyhow::ensure!(
        a.global_batch >= 1,
        "`--global-batch` must be at least 1, got 0"
    );
    anyhow::ensure!(
        a.max_memory_fraction > 0.0 && a.max_memory_fraction <= 1.0,
        "`--max-memory-fraction` must be in (0, 1], got {}",
        a.max_memory_fraction
    );
    anyhow::ensure!(!a.gpus.is_empty(), "`--gpus` needs at least one count");
    if let Some(&bad) = a.gpus.iter().find(|&&g| g == 0) {
        anyhow::bail!("`--gpus {bad}`: a GPU count must be at least 1");
    }
    anyhow::ensure!(
        !a.devices.is_empty(),
        "`--devices` needs at least one device"
    );
    let specs = a
        .devices
        .iter()
        .map(|name| {
            let spec = crate::cmd::target_device::target_device(None, Some(name))
                .with_context(|| format!("`--devices {name}`"))?
                .ok_or_else(|| anyhow::anyhow!("`--devices {name}`: no device"))?;
            Ok((name.trim().to_string(), spec))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let link = a
        .link
        .as_deref()
        .map(|l| Link::parse(l).with_context(|| format!("`--link {l}`")))
        .transpose()?;
    let prices = a
        .price_file
        .as_deref()
        .map(PriceTable::from_file)
        .transpose()?;
    let config = PlanConfig {
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
        ..PlanConfig::default()
    };
    let mut computes = Vec::with_capacity(specs.len());
    for (label, spec) in &specs {
        let bundle = Bundle::load_for_device(&a.bundle, spec)?;
        computes.push(Predicted {
            predictor: Predictor::new(bundle),
            ui,
            label: label.clone(),
            warned: std::cell::Cell::new(false),
        });
    }
    let mut missing_price = Vec::new();
    let devices: Vec<DeviceOption<'_>> = specs
        .iter()
        .zip(&computes)
        .map(|((label, spec), compute)| {
            let price = prices.as_ref().and_then(|p| p.price(label, spec));
            if prices.is_some() && price.is_none() {
                missing_price.push(format!("`{label}`"));
            }
            DeviceOption {
                label: label.clone(),
                spec: spec.clone(),
                link: link.clone().unwrap_or_else(|| default_link(spec)),
                price_per_gpu_hour: price,
                compute,
            }
        })
        .collect();
    if let (Some(path), false) = (&a.price_file, missing_price.is_empty()) {
        ui.info(format!(
            "warning: `{}` has no price for {}: no cost for them",
            path.display(),
            missing_price.join(", ")
        ));
    }
    let report = plan(&network, &devices, &config)?;
    let links: Vec<(String, Link)> = devices
        .iter()
        .map(|d| (d.label.clone(), d.link.clone()))
        .collect();
    if let Some(path) = &a.plot {
        write_plot(path, &report)?;
        ui.info(format!("wrote `{}`", path.display()));
    }
    match a.format {
        Format::Json => {
            #[derive(Serialize)]
            struct Out<'a> {
                #[serde(flatten)]
                report: &'a PlanReport,
                links: &'a [(String, Link)],
                prices: Option<&'a PriceTable>,
                bundle: &'a Path,
                message: Option<String>,
            }
            emit_json(&Out {
                report: &report,
                links: &links,
                prices: prices.as_ref(),
                bundle: &a.bundle,
                message: report.no_fit_message(),
            })?
        }
        Format::Text => emit(&render(&report, &links, prices.as_ref(), &a))?,
    }
    Ok(ExitCode::SUCCESS)
}

fn gib(bytes: f64) -> String {
    format!("{:.1}", bytes / GIB)
}

fn render(
    r: &PlanReport,
    links: &[(String, Link)],
    prices: Option<&PriceTable>,
    a: &PlanArgs,
) -> String {
    let c = &r.config;
    let mut t = format!(
        "{}: {} M parameters; global batch {}; {:?} optimiser; fp32; compute from `{}`\n",
        r.network,
        sig3(r.parameters / 1e6),
        c.global_batch,
        c.optimizer,
        a.bundle.display()
    );
    let l: Vec<String> = links
        .iter()
        .map(|(d, l)| format!("{d} {}", l.name))
        .collect();
    t.push_str(&format!(
        "links inside a node: {}; memory limit {:.0}% of each GPU",
        l.join(", "),
        100.0 * c.max_memory_fraction
    ));
    match prices {
        Some(p) => t.push_str(&format!(
            "; prices {} ({})\n",
            p.date.as_deref().unwrap_or("undated"),
            p.currency.as_deref().unwrap_or("?")
        )),
        None => t.push_str("; no price file (`--price-file`)\n"),
    }
    t.push_str(&format!(
        "\n{:<6} {:>4} {:<24} {:<9} {:>10} {:>10} {:>10} {:>10} {:>9} {:>11} {:<4} {:>9} {:>9}\n",
        "device",
        "gpus",
        "layout",
        "recompute",
        "step",
        "compute",
        "comm",
        "bubble",
        "update",
        "mem/GPU GiB",
        "fits",
        "samples/s",
        "$/1k steps"
    ));
    let shown = if a.top == 0 {
        r.rows.len()
    } else {
        a.top.min(r.rows.len())
    };
    for row in &r.rows[..shown] {
        t.push_str(&format!(
            "{:<6} {:>4} {:<24} {:<9} {:>10} {:>10} {:>10} {:>10} {:>9} {:>5}/{:<5} {:<4} {:>9} {:>9}{}\n",
            row.device,
            row.gpus,
            row.layout_name,
            row.recompute.name(),
            fmt_ms(row.step_s * 1e3),
            fmt_ms(row.compute_s * 1e3),
            fmt_ms(row.exposed_comm_s * 1e3),
            fmt_ms(row.bubble_s * 1e3),
            fmt_ms(row.update_s * 1e3),
            gib(row.memory.total),
            gib(row.capacity_bytes),
            if row.fits { "yes" } else { "no" },
            sig3(row.samples_per_s),
            row.cost_per_1000_steps
                .map_or("-".to_string(), |c| format!("{c:.2}")),
            if row.pareto { " *" } else { "" }
        ));
    }
    if shown < r.rows.len() {
        t.push_str(&format!(
            "... {} more (`--top 0` prints all)\n",
            r.rows.len() - shown
        ));
    }
    t.push_str(
        "\ncomm: TP all-reduces, PP sends and the DP all-reduce not hidden behind the backward \
         pass; mem: peak per GPU / allowed; * on the time-cost Pareto front\n",
    );
    if !r.skipped.is_empty() {
        t.push_str(&format!(
            "{} layout(s) not planned, e.g. {} x {} {}: {}\n",
            r.skipped.len(),
            r.skipped[0].gpus,
            r.skipped[0].device,
            r.skipped[0].layout,
            r.skipped[0].reason
        ));
    }
    if let Some(m) = r.no_fit_message() {
        t.push_str(&format!("\n{m}\n"));
    }
    t
}

fn write_plot(path: &Path, r: &PlanReport) -> anyhow::Result<()> {
    let mut series: Vec<plot::Series> = Vec::new();
    for row in r.rows.iter().filter(|r| r.fits) {
        let Some(cost) = row.cost_per_1000_steps else {
            continue;
        };
        let name = format!("{} (fits)", row.device);
        match series.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push((row.step_s, cost)),
            None => series.push(plot::Series {
                name,
                points: vec![(row.step_s, cost)],
            }),
        }
    }
    let mut front: Vec<(f64, f64)> = r
        .rows
        .iter()
        .filter(|r| r.pareto)
        .filter_map(|r| r.cost_per_1000_steps.map(|c| (r.step_s, c)))
        .collect();
    front.sort_by(|a, b| a.0.total_cmp(&b.0));
    anyhow::ensure!(
        !series.is_empty(),
        "`--plot {}`: no plan both fits and has a price to plot",
        path.display()
    );
    let title = format!(
        "{}, batch {}: time vs cost",
        r.network, r.config.global_batch
    );
    let chart = plot::Chart {
        title: &title,
        x_label: "seconds per step",
        y_label: "dollars per 1,000 steps",
        series: &series,
        log: (true, true),
        scatter: true,
        diagonal: false,
    };
    let lines = [plot::Series {
        name: "Pareto front".into(),
        points: front,
    }];
    let bytes = if crate::plot::is_svg(path)? {
        chart.svg_with_lines(&lines).into_bytes()
    } else {
        chart.png_with_lines(&lines)?
    };
    perfcast_data::write_atomic(path, &bytes)
        .with_context(|| format!("writing the plot `{}`", path.display()))
}
