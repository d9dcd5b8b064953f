//! Whole networks on this machine: `perfcast measure`, `perfcast calibrate` and
//! `perfcast eval networks` (measured and predicted side by side).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use clap::Args;
use perfcast_core::{Context, CpuTopology, Network, Phase, zoo};
use perfcast_data::networks::{NetworkRecord, append_networks, read_networks};
use perfcast_data::{DatasetDir, Outcome, Record, Timing, measurement_key};
use perfcast_profile::Backend;
use perfcast_profile::network::{measure, measure_layers, network_timing};
use perfcast_select::bundle::rewrite_manifest;
use perfcast_select::compose::{self, Composed, HostCosts, RunShape};
use perfcast_select::{Bundle, Predictor};
use serde::Serialize;

use crate::Ui;
use crate::cmd::predict::load_bundle;
use crate::output::{Format, emit, emit_json, fmt_ms, progress, sig3};
use crate::plot;

/// A network to run: a zoo name with an optional resolution (`vgg16@112`), or a JSON file.
#[derive(Clone, Debug)]
pub struct NetworkChoice {
    /// Label in tables (`vgg16@112`, or the file's network name).
    pub label: String,
    /// The network.
    pub network: Network,
    /// Resolution it was built at, for zoo networks given one.
    pub resolution: Option<usize>,
}

/// Parses `name[@resolution]` of the zoo; errors name the entry.
pub fn zoo_choice(entry: &str, default_resolution: Option<usize>) -> anyhow::Result<NetworkChoice> {
    let (name, res) = match entry.split_once('@') {
        Some((n, r)) => {
            let r: usize = r.trim().parse().map_err(|_| {
                anyhow::anyhow!("`{entry}`: the resolution after `@` must be a whole number")
            })?;
            (n.trim(), Some(r))
        }
        None => (entry.trim(), default_resolution),
    };
    let network = zoo::build(name, res)?;
    Ok(NetworkChoice {
        label: match res {
            Some(r) => format!("{name}@{r}"),
            None => name.to_string(),
        },
        network,
        resolution: res,
    })
}

/// The networks named by `--network` entries and `--network-file` paths.
fn choices(
    names: &[String],
    files: &[PathBuf],
    resolution: Option<usize>,
    model: &crate::cmd::model::ModelArgs,
) -> anyhow::Result<Vec<NetworkChoice>> {
    let mut out = Vec::new();
    // Transformers are built as inference graphs (no dropout layers) for every phase measured.
    if let Some(loaded) = model.load(Phase::Inference, &[])? {
        if let Some(report) = &loaded.report
            && !report.unmapped.is_empty()
        {
            anyhow::bail!(
                "`{}` has ops perfcast has no kind for ({}): a measured run would include them                  and its prediction not\n\nhint: `perfcast predict --onnx` lists them",
                report.source.display(),
                report
                    .unmapped
                    .iter()
                    .map(|u| u.op.op.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        out.push(NetworkChoice {
            label: loaded.network.name.clone(),
            network: loaded.network,
            resolution: None,
        });
    }
    for name in names {
        out.push(zoo_choice(name, resolution)?);
    }
    for path in files {
        let network = Network::from_json_file(path)?;
        out.push(NetworkChoice {
            label: network.name.clone(),
            network,
            resolution: None,
        });
    }
    anyhow::ensure!(
        !out.is_empty(),
        "no network given\n\nhint: `--network vgg16` (zoo: {}), `--network vgg16@112` for another \
         resolution, `--network-file net.json`, `--transformer config.json --seq N` or `--onnx \
         model.onnx`",
        zoo::names().join(", ")
    );
    Ok(out)
}

/// Options shared by every command that measures networks.
#[derive(Debug, Args)]
pub struct MeasureOptions {
    /// Batch sizes, comma-separated
    #[arg(long, value_delimiter = ',', default_value = "1")]
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
    /// their sum beside the whole network
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

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Measures every (network, batch, phase) with a progress bar; saves each as it finishes.
fn measure_all(
    nets: &[NetworkChoice],
    o: &MeasureOptions,
    ui: &Ui,
) -> anyhow::Result<Vec<(String, NetworkRecord)>> {
    Ok(measure_all_peaks(nets, o, ui)?
        .into_iter()
        .map(|(label, record, _)| (label, record))
        .collect())
}

/// [`measure_all`], with each run's peak heap bytes above what was live before it (`None`
/// without the counting allocator): the network's weights, optimiser state, activations,
/// gradients and the backend's buffers, over the warm-up and every timed run.
fn measure_all_peaks(
    nets: &[NetworkChoice],
    o: &MeasureOptions,
    ui: &Ui,
) -> anyhow::Result<Vec<(String, NetworkRecord, Option<u64>)>> {
    anyhow::ensure!(
        o.batch.iter().all(|&b| b >= 1),
        "`--batch` values must be at least 1"
    );
    anyhow::ensure!(o.threads >= 1, "`--threads` must be at least 1");
    anyhow::ensure!(
        o.max_time_s.is_finite() && o.max_time_s > 0.0,
        "`--max-time-s` must be a positive number of seconds, got {}",
        o.max_time_s
    );
    if !o.backend.available() {
        o.backend.device()?; // the backend's own error says how to get it
    }
    let timing = network_timing(o.max_time_s);
    super::profile::warn_if_busy(ui);
    let module_timing = perfcast_profile::timer::TimingConfig::default();
    let dataset = match &o.layers_into {
        Some(dir) => Some(DatasetDir::open(dir)?),
        None => None,
    };
    let device = CpuTopology::detect().model;
    let total = nets.len() * o.batch.len() * o.phase.len();
    let bar = progress(ui, total as u64, "measure");
    let mut out = Vec::with_capacity(total);
    for net in nets {
        for &phase in &o.phase {
            for &batch in &o.batch {
                bar.set_message(format!("{} batch {batch} {}", net.label, phase.name()));
                let context = Context {
                    batch,
                    phase,
                    threads: o.threads,
                    utilisation: 0.0,
                };
                context.validate()?;
                let before = crate::alloc::reset_peak();
                let measured =
                    measure(&net.network, &context, o.backend, &timing).map_err(|e| {
                        anyhow::anyhow!("measuring `{}` at batch {batch} ({phase}): {e}", net.label)
                    })?;
                let peak = crate::alloc::installed()
                    .then(|| crate::alloc::peak().saturating_sub(before) as u64);
                let layer_times = if o.layers || dataset.is_some() {
                    bar.set_message(format!(
                        "{} batch {batch} {}: layers alone",
                        net.label,
                        phase.name()
                    ));
                    let t = measure_layers(&net.network, &context, o.backend, &module_timing)
                        .map_err(|e| anyhow::anyhow!("measuring `{}`: {e}", net.label))?;
                    if let Some(ds) = &dataset {
                        save_layers(ds, &net.network, &context, o.backend, &t)?;
                    }
                    Some(t)
                } else {
                    None
                };
                let record = NetworkRecord {
                    network: net.network.clone(),
                    resolution: net.resolution,
                    batch,
                    phase,
                    threads: o.threads,
                    backend: o.backend.name().to_string(),
                    device: device.clone(),
                    layers: measured.counts.layers,
                    param_tensors: measured.counts.param_tensors,
                    params: measured.counts.params,
                    timing: measured.timing,
                    update_ms: measured.update_ms,
                    layer_sum_ms: layer_times.map(|ts| ts.iter().map(|t| t.median_ms).sum::<f64>()),
                    perfcast_version: perfcast_core::VERSION.to_string(),
                    timestamp: now(),
                };
                if let Some(path) = &o.save {
                    append_networks(path, std::slice::from_ref(&record))?;
                }
                out.push((net.label.clone(), record, peak));
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    Ok(out)
}

/// Appends the distinct layers' timings to a module dataset, skipping rows it holds.
fn save_layers(
    dataset: &DatasetDir,
    network: &Network,
    context: &Context,
    backend: Backend,
    times: &[Timing],
) -> anyhow::Result<()> {
    let mut by_kind: std::collections::BTreeMap<_, Vec<Record>> = Default::default();
    let mut seen = std::collections::HashSet::new();
    for (layer, t) in network.layers.iter().zip(times) {
        let key = measurement_key(&layer.spec, context, backend.name());
        if !seen.insert(key) {
            continue;
        }
        by_kind.entry(layer.spec.kind()).or_default().push(Record {
            spec: layer.spec.clone(),
            context: context.clone(),
            backend: backend.name().to_string(),
            outcome: Outcome::Ok(t.clone()),
            perfcast_version: perfcast_core::VERSION.to_string(),
            timestamp: now(),
        });
    }
    for (kind, records) in by_kind {
        // Rows the dataset already holds are not stored again (append checks the keys).
        dataset.append(kind, &records)?;
    }
    Ok(())
}

/// Times every distinct layer of `nets` alone at each batch, in both phases, as `profile`
/// times modules, and appends the rows `dataset` does not hold yet (network-aware profiling:
/// the module models then know exactly the layers these networks use). Returns the layer
/// configurations timed.
pub fn profile_layers(
    nets: &[NetworkChoice],
    batches: &[usize],
    threads: usize,
    dataset: &Path,
    ui: &Ui,
) -> anyhow::Result<usize> {
    let ds = DatasetDir::open(dataset)?;
    super::profile::warn_if_busy(ui);
    // Shorter than `profile`'s rules (0.6 s cap, 7 samples): a network's layers are many and
    // mostly large, where a median of 3 samples already agrees within 1-3% (the spread of big
    // ops here); this keeps the quickstart within its 10 minutes.
    let timing = perfcast_profile::timer::TimingConfig {
        min_samples: 3,
        max_time_s: 0.2,
        warmup_s: 0.02,
        ..perfcast_profile::timer::TimingConfig::default()
    };
    let phases = [Phase::Inference, Phase::Training];
    let bar = progress(
        ui,
        (nets.len() * batches.len() * phases.len()) as u64,
        "layers",
    );
    let mut timed = 0;
    for net in nets {
        for &batch in batches {
            for phase in phases {
                bar.set_message(format!("{} batch {batch} {}", net.label, phase.name()));
                let context = Context {
                    batch,
                    phase,
                    threads,
                    utilisation: 0.0,
                };
                context.validate()?;
                // Skip layers already stored: a rerun (or a second network sharing layers)
                // measures only what is new.
                let mut stored = std::collections::HashMap::new();
                let mut layers = Vec::new();
                for l in &net.network.layers {
                    let kind = l.spec.kind();
                    let keys = match stored.entry(kind) {
                        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                        std::collections::hash_map::Entry::Vacant(e) => {
                            e.insert(ds.measured_keys(kind)?)
                        }
                    };
                    let key = measurement_key(&l.spec, &context, Backend::Flex.name());
                    if !keys.contains(&key) {
                        layers.push(l.clone());
                    }
                }
                let fresh = Network {
                    layers,
                    ..net.network.clone()
                };
                if !fresh.layers.is_empty() {
                    let t = measure_layers(&fresh, &context, Backend::Flex, &timing)
                        .map_err(|e| anyhow::anyhow!("measuring `{}`: {e}", net.label))?;
                    timed += t.len();
                    save_layers(&ds, &fresh, &context, Backend::Flex, &t)?;
                }
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    Ok(timed)
}

/// `perfcast measure`.
pub fn run_measure(a: MeasureArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    let nets = choices(&a.network, &a.network_file, a.resolution, &a.model)?;
    let rows = measure_all_peaks(&nets, &a.options, ui)?;
    // The memory model's peak of a training step as `measure` runs it: fp32, SGD with
    // momentum, no runtime reserve (a CPU process); under burn's rules (what this backend keeps)
    // and the reference (PyTorch's) rules the planner uses for GPUs.
    let predict = |r: &NetworkRecord, framework| -> Option<f64> {
        if r.phase != Phase::Training {
            return None;
        }
        let config = perfcast_scale::memory::MemoryConfig {
            optimizer: perfcast_scale::Optimizer::Momentum,
            reserve_bytes: 0.0,
            framework,
            ..Default::default()
        };
        perfcast_scale::memory::training_memory(&r.network, r.batch, &config)
            .ok()
            .map(|m| m.total)
    };
    use perfcast_scale::memory::Framework;
    let predicted: Vec<Option<f64>> = rows
        .iter()
        .map(|(_, r, _)| predict(r, Framework::Burn))
        .collect();
    let reference: Vec<Option<f64>> = rows
        .iter()
        .map(|(_, r, _)| predict(r, Framework::Reference))
        .collect();
    #[derive(Serialize)]
    struct Row<'a> {
        /// The label (`vgg16@112`); `network` holds the full description.
        name: &'a str,
        #[serde(flatten)]
        record: &'a NetworkRecord,
        /// Most heap bytes live during the run above what was live before it.
        peak_bytes: Option<u64>,
        /// The memory model's peak of the training step under burn's rules (training only).
        predicted_peak_bytes: Option<f64>,
        /// The same under the reference (PyTorch) rules `perfcast plan` uses.
        predicted_peak_bytes_reference: Option<f64>,
    }
    let mib = |b: f64| b / (1024.0 * 1024.0);
    let pairs = |pred: &[Option<f64>]| -> Vec<(f64, f64)> {
        rows.iter()
            .zip(pred)
            .filter_map(|((_, _, peak), p)| Some(((*p)?, (*peak)? as f64)))
            .collect()
    };
    match a.format {
        Format::Json => emit_json(
            &rows
                .iter()
                .zip(predicted.iter().zip(&reference))
                .map(|((label, record, peak), (p, q))| Row {
                    name: label,
                    record,
                    peak_bytes: *peak,
                    predicted_peak_bytes: *p,
                    predicted_peak_bytes_reference: *q,
                })
                .collect::<Vec<_>>(),
        )?,
        Format::Text => {
            let mut t = format!(
                "{:<18} {:>5} {:<10} {:>10} {:>10} {:>10} {:>6} {:>7} {:>11} {:>11} {:>9} {:>9}\n",
                "network",
                "batch",
                "phase",
                "median",
                "p10",
                "p90",
                "runs",
                "layers",
                "params",
                "layers sum",
                "peak MiB",
                "pred MiB"
            );
            for ((label, r, peak), p) in rows.iter().zip(&predicted) {
                t.push_str(&format!(
                    "{:<18} {:>5} {:<10} {:>10} {:>10} {:>10} {:>6} {:>7} {:>11} {:>11} {:>9} {:>9}\n",
                    label,
                    r.batch,
                    r.phase.name(),
                    fmt_ms(r.timing.median_ms),
                    fmt_ms(r.timing.p10_ms.unwrap_or(f64::NAN)),
                    fmt_ms(r.timing.p90_ms.unwrap_or(f64::NAN)),
                    r.timing.repetitions.unwrap_or(0),
                    r.layers,
                    r.params,
                    r.layer_sum_ms.map_or("-".to_string(), fmt_ms),
                    peak.map_or("-".to_string(), |b| sig3(mib(b as f64))),
                    p.map_or("-".to_string(), |b| sig3(mib(b)))
                ));
            }
            t.push_str(&format!(
                "({} thread{}, {} backend; median of timed runs after warm-up; peak: most heap \
                 bytes live during the run; pred: the memory model's training peak under burn's rules)\n",
                a.options.threads,
                if a.options.threads == 1 { "" } else { "s" },
                a.options.backend
            ));
            for (rules, pred) in [
                ("burn's", &predicted),
                ("the reference (PyTorch)", &reference),
            ] {
                let pairs = pairs(pred);
                if pairs.is_empty() {
                    continue;
                }
                let (p, m): (Vec<f64>, Vec<f64>) = pairs.iter().copied().unzip();
                t.push_str(&format!(
                    "training peak memory under {rules} rules, predicted against measured: MAPE \
                     {}% over {} run(s)\n",
                    sig3(compose::mape(&p, &m)),
                    pairs.len()
                ));
            }
            emit(&t)?;
        }
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

fn runs(source: &RunsSource, ui: &Ui) -> anyhow::Result<Vec<(String, NetworkRecord)>> {
    if let Some(path) = &source.from {
        let records = read_networks(path)?;
        anyhow::ensure!(
            !records.is_empty(),
            "`{}` holds no network measurements",
            path.display()
        );
        return Ok(records
            .into_iter()
            .map(|r| {
                let label = match r.resolution {
                    Some(res) => format!("{}@{res}", r.network.name),
                    None => r.network.name.clone(),
                };
                (label, r)
            })
            .collect());
    }
    let nets = choices(&source.networks, &source.network_file, None, &source.model)?;
    measure_all(&nets, &source.options, ui)
}

/// One network run measured and predicted.
#[derive(Clone, Debug, Serialize)]
struct Compared {
    network: String,
    batch: usize,
    phase: Phase,
    measured_ms: f64,
    /// The layers measured one by one and summed (`--layers`), when measured.
    measured_layer_sum_ms: Option<f64>,
    plain_ms: f64,
    plain_error_pct: f64,
    /// Absent when the bundle has no host-cost terms for the phase.
    composed: Option<Composed>,
    composed_error_pct: Option<f64>,
    fallback_layers: usize,
}

fn compare(
    predictor: &Predictor,
    runs: &[(String, NetworkRecord)],
    costs: Option<&HostCosts>,
) -> anyhow::Result<Vec<Compared>> {
    runs.iter()
        .map(|(label, r)| {
            let context = Context {
                batch: r.batch,
                phase: r.phase,
                threads: r.threads,
                utilisation: 0.0,
            };
            let p = predictor.predict_network(&r.network, &context)?;
            // Plain: the layers alone; composed: with the host costs under evaluation (the
            // bundle's, or those of a leave-one-network-out fit).
            let shape = RunShape::of(&r.network, p.layer_sum_ms);
            let composed = costs
                .and_then(|c| c.phase(r.phase))
                .map(|c| c.compose(&shape));
            let m = r.timing.median_ms;
            let err = |x: f64| 100.0 * (x - m) / m;
            Ok(Compared {
                network: label.clone(),
                batch: r.batch,
                phase: r.phase,
                measured_ms: m,
                measured_layer_sum_ms: r.layer_sum_ms,
                plain_ms: p.layer_sum_ms,
                plain_error_pct: err(p.layer_sum_ms),
                composed_error_pct: composed.as_ref().map(|c| err(c.total_ms)),
                composed,
                fallback_layers: p.fallback_layers,
            })
        })
        .collect()
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

/// `perfcast calibrate`.
pub fn calibrate(a: CalibrateArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    if let Some(l) = a.lambda {
        anyhow::ensure!(
            l.is_finite() && l >= 0.0,
            "`--lambda` must be a non-negative number, got {l}"
        );
    }
    let bundle = load_bundle(&a.bundle)?;
    let mut manifest = bundle.manifest.clone();
    let predictor = Predictor::new(bundle);
    let runs = runs(&a.source, ui)?;
    let compared = compare(&predictor, &runs, None)?;
    let threads = runs.first().map(|(_, r)| r.threads).unwrap_or(1);
    anyhow::ensure!(
        runs.iter().all(|(_, r)| r.threads == threads),
        "calibration runs must share one thread count"
    );
    let mut costs = HostCosts {
        inference: None,
        training: None,
        networks: Vec::new(),
        threads,
    };
    for (label, _) in &runs {
        if !costs.networks.contains(label) {
            costs.networks.push(label.clone());
        }
    }
    for phase in [Phase::Inference, Phase::Training] {
        let (data, groups): (Vec<(RunShape, f64)>, Vec<String>) = runs
            .iter()
            .zip(&compared)
            .filter(|((_, r), _)| r.phase == phase)
            .map(|((label, r), c)| {
                (
                    (RunShape::of(&r.network, c.plain_ms), r.timing.median_ms),
                    label.clone(),
                )
            })
            .unzip();
        if data.is_empty() {
            continue;
        }
        let lambdas: Vec<f64> = match a.lambda {
            Some(l) => vec![l],
            None => compose::LAMBDAS.to_vec(),
        };
        // The update's own duration is measured inside every training step: fit its cost per
        // parameter directly (tensors beyond the last-level cache apart) rather than leave it
        // to the network-level fit.
        let cache_bytes = manifest.device.cache_mb * 1024.0 * 1024.0;
        let update = compose::fit_update(
            &runs
                .iter()
                .zip(&compared)
                .filter(|((_, r), _)| r.phase == Phase::Training)
                .filter_map(|((_, r), c)| {
                    Some((
                        RunShape::of(&r.network, c.plain_ms),
                        r.update_ms?,
                        r.timing.median_ms,
                    ))
                })
                .collect::<Vec<_>>(),
            if cache_bytes > 0.0 {
                cache_bytes
            } else {
                f64::INFINITY
            },
        );
        let fitted = compose::fit_phase_cv(phase, &data, &groups, &lambdas, 0.01, update.as_ref())
            .map_err(|e| anyhow::anyhow!("calibrating {phase}: {e}"))?;
        match phase {
            Phase::Inference => costs.inference = Some(fitted),
            Phase::Training => costs.training = Some(fitted),
        }
    }
    if let Some(old) = &manifest.host_costs {
        // Keep a phase calibrated earlier when this run did not cover it.
        costs.inference = costs.inference.or_else(|| old.inference.clone());
        costs.training = costs.training.or_else(|| old.training.clone());
    }
    manifest.host_costs = Some(costs.clone());
    if !a.dry_run {
        rewrite_manifest(&a.bundle, &manifest)?;
    }
    match a.format {
        Format::Json => emit_json(&costs)?,
        Format::Text => {
            let mut t = format!(
                "host-cost terms fitted on {} run(s) of {}\n",
                runs.len(),
                costs.networks.join(", ")
            );
            t.push_str(&render_costs(&costs));
            t.push_str(&if a.dry_run {
                "(dry run: the bundle is unchanged)\n".to_string()
            } else {
                format!(
                    "written to `{}`\n",
                    a.bundle.join("manifest.json").display()
                )
            });
            emit(&t)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A fitted term in ms; below a nanosecond it is shown as 0 (the prior held it there).
fn fmt_term(ms: f64) -> String {
    if ms.abs() < 1e-6 {
        "0".to_string()
    } else {
        fmt_ms(ms)
    }
}

/// The terms as a small table (also used by `bundle show`).
pub fn render_costs(costs: &HostCosts) -> String {
    let mut t = format!(
        "{:<10} {:>10} {:>12} {:>8} {:>14} {:>5} {:>11} {:>12} {:>10} {:>13}\n",
        "phase",
        "per run",
        "per layer",
        "scale",
        "update/Mparam",
        "runs",
        "plain MAPE",
        "fitted MAPE",
        "LONO plain",
        "LONO composed"
    );
    for (name, c) in [
        ("inference", &costs.inference),
        ("training", &costs.training),
    ] {
        if let Some(c) = c {
            t.push_str(&format!(
                "{:<10} {:>10} {:>12} {:>8} {:>14} {:>5} {:>10}% {:>11}% {:>10} {:>13}\n",
                name,
                fmt_term(c.per_run_ms),
                fmt_term(c.per_layer_ms),
                sig3(c.layer_scale),
                if c.update_large_ms_per_mparam != c.update_ms_per_mparam {
                    format!(
                        "{}/{}",
                        fmt_term(c.update_ms_per_mparam),
                        fmt_term(c.update_large_ms_per_mparam)
                    )
                } else {
                    fmt_term(c.update_ms_per_mparam)
                },
                c.runs,
                sig3(c.plain_mape),
                sig3(c.fit_mape),
                c.cv_plain_mape
                    .map_or("-".to_string(), |m| format!("{}%", sig3(m))),
                c.cv_mape
                    .map_or("-".to_string(), |m| format!("{}%", sig3(m)))
            ));
        }
    }
    t.push_str(
        "(update/Mparam: in tensors that fit in cache / in larger ones, measured inside the \
         training steps; LONO: leave one network out, each predicted by terms fitted on the \
         other networks; the prior's strength is chosen by it)\n",
    );
    t
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

#[derive(Serialize)]
struct EvalReport {
    bundle: PathBuf,
    host_costs: Option<HostCosts>,
    runs: Vec<Compared>,
    /// Per phase: runs, plain-sum MAPE, composed MAPE.
    summary: Vec<PhaseSummary>,
}

#[derive(Serialize)]
struct PhaseSummary {
    phase: Phase,
    runs: usize,
    plain_mape: f64,
    composed_mape: Option<f64>,
}

/// `perfcast eval networks`.
pub fn eval_networks(a: EvalNetworksArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    let bundle: Bundle = load_bundle(&a.bundle)?;
    let costs = bundle.manifest.host_costs.clone();
    if costs.is_none() {
        ui.info(format!(
            "note: `{}` has no host-cost terms; only the plain sum is shown\n\nhint: `perfcast \
             calibrate --bundle {} --networks ...` fits them from measured networks",
            a.bundle.display(),
            a.bundle.display()
        ));
    }
    let predictor = Predictor::new(bundle);
    let runs = runs(&a.source, ui)?;
    let compared = compare(&predictor, &runs, costs.as_ref())?;
    if let (Some(c), Some((_, r))) = (&costs, runs.first())
        && c.threads != r.threads
    {
        ui.info(format!(
            "warning: the host-cost terms were fitted at {} thread(s), these runs use {}",
            c.threads, r.threads
        ));
    }
    let mut summary = Vec::new();
    for phase in [Phase::Inference, Phase::Training] {
        let rows: Vec<&Compared> = compared.iter().filter(|c| c.phase == phase).collect();
        if rows.is_empty() {
            continue;
        }
        let measured: Vec<f64> = rows.iter().map(|c| c.measured_ms).collect();
        let plain: Vec<f64> = rows.iter().map(|c| c.plain_ms).collect();
        let composed: Option<Vec<f64>> = rows
            .iter()
            .map(|c| c.composed.as_ref().map(|x| x.total_ms))
            .collect();
        summary.push(PhaseSummary {
            phase,
            runs: rows.len(),
            plain_mape: compose::mape(&plain, &measured),
            composed_mape: composed.map(|p| compose::mape(&p, &measured)),
        });
    }
    if let Some(path) = &a.plot {
        write_plot(path, &compared, &predictor.bundle().manifest.device.name)?;
    }
    let report = EvalReport {
        bundle: a.bundle.clone(),
        host_costs: costs,
        runs: compared,
        summary,
    };
    match a.format {
        Format::Json => emit_json(&report)?,
        Format::Text => emit(&render_eval(&report))?,
    }
    Ok(ExitCode::SUCCESS)
}

fn render_eval(r: &EvalReport) -> String {
    let pct = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:+.1}%", v));
    let mut t = format!(
        "{:<16} {:>5} {:<10} {:>10} {:>11} {:>10} {:>8} {:>10} {:>8}\n",
        "network",
        "batch",
        "phase",
        "measured",
        "layers alone",
        "plain sum",
        "error",
        "composed",
        "error"
    );
    for c in &r.runs {
        t.push_str(&format!(
            "{:<16} {:>5} {:<10} {:>10} {:>11} {:>10} {:>8} {:>10} {:>8}{}\n",
            c.network,
            c.batch,
            c.phase.name(),
            fmt_ms(c.measured_ms),
            c.measured_layer_sum_ms.map_or("-".to_string(), fmt_ms),
            fmt_ms(c.plain_ms),
            pct(Some(c.plain_error_pct)),
            c.composed
                .as_ref()
                .map_or("-".to_string(), |x| fmt_ms(x.total_ms)),
            pct(c.composed_error_pct),
            if c.fallback_layers > 0 {
                format!("  ({} roofline layers)", c.fallback_layers)
            } else {
                String::new()
            }
        ));
    }
    t.push('\n');
    for s in &r.summary {
        t.push_str(&format!(
            "{:<10} {} runs: MAPE plain sum {}%, composed {}\n",
            s.phase.name(),
            s.runs,
            sig3(s.plain_mape),
            s.composed_mape
                .map_or("- (not calibrated)".to_string(), |m| format!(
                    "{}%",
                    sig3(m)
                ))
        ));
    }
    if let Some(c) = &r.host_costs {
        t.push_str(&format!(
            "\nhost-cost terms (fitted on {}):\n{}",
            c.networks.join(", "),
            render_costs(c)
        ));
    }
    t
}

fn write_plot(path: &Path, runs: &[Compared], device: &str) -> anyhow::Result<()> {
    let mut series = Vec::new();
    for phase in [Phase::Inference, Phase::Training] {
        let rows: Vec<&Compared> = runs.iter().filter(|c| c.phase == phase).collect();
        if rows.is_empty() {
            continue;
        }
        series.push(plot::Series {
            name: format!("{} plain sum", phase.name()),
            points: rows.iter().map(|c| (c.measured_ms, c.plain_ms)).collect(),
        });
        if rows.iter().all(|c| c.composed.is_some()) {
            series.push(plot::Series {
                name: format!("{} composed", phase.name()),
                points: rows
                    .iter()
                    .filter_map(|c| c.composed.as_ref().map(|x| (c.measured_ms, x.total_ms)))
                    .collect(),
            });
        }
    }
    let title = format!("{device}: networks");
    let chart = plot::Chart {
        title: &title,
        x_label: "measured (ms)",
        y_label: "predicted (ms)",
        series: &series,
        log: (true, true),
        scatter: true,
        diagonal: true,
    };
    let bytes = match path.extension().and_then(|e| e.to_str()) {
        Some("png") => chart.png()?,
        Some("svg") => chart.svg().into_bytes(),
        _ => anyhow::bail!(
            "`--plot {}`: the file name must end in `.svg` or `.png`",
            path.display()
        ),
    };
    perfcast_data::write_atomic(path, &bytes)
        .with_context(|| format!("writing `{}`", path.display()))?;
    Ok(())
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
