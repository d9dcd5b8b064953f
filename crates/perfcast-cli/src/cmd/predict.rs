//! `perfcast predict` (modules and networks from a bundle) and `perfcast bundle show`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use perfcast_core::{Context, ModuleKind, ModuleSpec, Network, Phase, zoo};
use perfcast_select::{Bundle, ModulePrediction, NetworkPrediction, Predictor};
use serde::Serialize;

use crate::Ui;
use crate::output::{Format, emit, emit_json, fmt_ms, sig3};

/// Arguments of `perfcast predict`.
#[derive(Debug, Args)]
pub struct PredictArgs {
    /// Module kind to predict from flags (conv2d, linear, matmul, maxpool2d, ...)
    kind: Option<ModuleKind>,
    /// Bundle directory written by `perfcast train --bundle` or `perfcast quickstart`
    #[arg(long, default_value = "checkpoints/local")]
    bundle: PathBuf,
    /// Batch size
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Phase: inference, or training (forward + backward)
    #[arg(long, default_value = "inference")]
    phase: Phase,
    /// Compute threads
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Input shape per sample: CxHxW for conv and pools, TOKENSxFEATURES or FEATURES for
    /// linear and layernorm, any shape for elementwise kinds
    #[arg(long)]
    input: Option<String>,
    /// conv2d: output channels
    #[arg(long)]
    out_channels: Option<usize>,
    /// linear: output features
    #[arg(long)]
    out_features: Option<usize>,
    /// conv2d and pools: kernel size (square)
    #[arg(long)]
    kernel: Option<usize>,
    /// conv2d and pools: stride
    #[arg(long)]
    stride: Option<usize>,
    /// conv2d and pools: padding
    #[arg(long)]
    padding: Option<usize>,
    /// conv2d: dilation
    #[arg(long)]
    dilation: Option<usize>,
    /// conv2d: groups (the input channels for depthwise)
    #[arg(long)]
    groups: Option<usize>,
    /// conv2d and linear: no bias
    #[arg(long)]
    no_bias: bool,
    /// matmul: heads, and the `m x k` by `k x n` shapes
    #[arg(long)]
    heads: Option<usize>,
    /// matmul: rows of the left operand
    #[arg(long)]
    m: Option<usize>,
    /// matmul: inner dimension
    #[arg(long)]
    k: Option<usize>,
    /// matmul: columns of the right operand
    #[arg(long)]
    n: Option<usize>,
    /// Modules from a JSON file: an array of module specs (format: docs/formats.md, "Module specs"),
    /// each optionally with `batch`, `phase` and `threads`
    #[arg(long, conflicts_with_all = ["kind", "network", "network_file"])]
    modules_file: Option<PathBuf>,
    /// A network from the built-in zoo (lenet5, alexnet, vgg11, vgg16, resnet18, resnet50,
    /// mobilenetv2, transformer)
    #[arg(long, conflicts_with_all = ["kind", "network_file"])]
    network: Option<String>,
    /// Input resolution of a zoo network (tokens for the transformer)
    #[arg(long)]
    resolution: Option<usize>,
    /// A network from a JSON file (format: `examples/networks/`)
    #[arg(long, conflicts_with = "kind")]
    network_file: Option<PathBuf>,
    #[command(flatten)]
    model: crate::cmd::model::ModelArgs,
    /// Predict for this device: a spec file (perfcast's `device.json` format, or a NeuSight
    /// `device_configs/*.json`); needs a cross-device bundle unless it is the bundle's device
    #[arg(long, value_name = "FILE.json", conflicts_with = "device")]
    device_spec: Option<PathBuf>,
    /// Predict for a known device by name (`v100`, `a100`, `h100`, `l4`, `t4`, `tesla-p4`, ...;
    /// `--list-devices` lists them)
    #[arg(long, value_name = "NAME")]
    device: Option<String>,
    /// List the known devices `--device` selects from, and exit
    #[arg(long)]
    list_devices: bool,
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

/// `perfcast bundle ...`.
#[derive(Debug, Subcommand)]
pub enum BundleCommand {
    /// Print a bundle's manifest: device, and per kind the chosen model and every candidate
    Show(ShowArgs),
    /// Time the in-process Predictor on this bundle: one module, a VGG-16 query, and batched
    /// throughput (median and p99 over many calls, after a warm-up)
    Bench(BenchArgs),
}

/// Arguments of `perfcast bundle bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Bundle directory
    dir: PathBuf,
    /// Timed calls per query
    #[arg(long, default_value_t = 5000)]
    iterations: usize,
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

/// Timing of one query kind.
#[derive(Debug, Serialize)]
struct BenchLine {
    query: String,
    p50_us: f64,
    p99_us: f64,
    per_second: f64,
}

fn time_calls(n: usize, mut f: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<(f64, f64)> {
    for _ in 0..(n / 10).max(10) {
        f()?;
    }
    let mut us = Vec::with_capacity(n);
    for _ in 0..n {
        let t = std::time::Instant::now();
        f()?;
        us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    us.sort_by(f64::total_cmp);
    let q = |p: f64| us[((us.len() - 1) as f64 * p).round() as usize];
    Ok((q(0.5), q(0.99)))
}

fn bench(a: BenchArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        a.iterations >= 10,
        "`--iterations` must be at least 10, got {}",
        a.iterations
    );
    let predictor = Predictor::new(load_bundle(&a.dir)?);
    let conv: ModuleSpec = serde_json::from_str(
        r#"{"kind": "conv2d", "in_channels": 64, "out_channels": 64, "input_hw": 56, "kernel": 3, "padding": 1}"#,
    )?;
    let one = Context {
        batch: 1,
        phase: Phase::Inference,
        threads: 1,
        utilisation: 0.0,
    };
    let vgg = zoo::build("vgg16", None)?;
    let mut lines = Vec::new();
    let (p50, p99) = time_calls(a.iterations, || {
        std::hint::black_box(predictor.predict_module(&conv, &one)?);
        Ok(())
    })?;
    lines.push(BenchLine {
        query: "one module (conv2d 64->64 k3 @56x56, batch 1)".into(),
        p50_us: p50,
        p99_us: p99,
        per_second: 1e6 / p50,
    });
    let (p50, p99) = time_calls(a.iterations.div_ceil(10), || {
        std::hint::black_box(predictor.predict_network(&vgg, &one)?);
        Ok(())
    })?;
    lines.push(BenchLine {
        query: format!(
            "vgg16 ({} layers, batch 1), shapes checked",
            vgg.layers.len()
        ),
        p50_us: p50,
        p99_us: p99,
        per_second: 1e6 / p50,
    });
    let prepared = predictor.prepare(&vgg)?;
    let (p50, p99) = time_calls(a.iterations.div_ceil(10), || {
        std::hint::black_box(predictor.predict_prepared(&prepared, &one)?);
        Ok(())
    })?;
    lines.push(BenchLine {
        query: format!(
            "vgg16 prepared ({} distinct modules), batch 1",
            prepared.distinct_modules()
        ),
        p50_us: p50,
        p99_us: p99,
        per_second: 1e6 / p50,
    });
    // Batched: 10,000 module queries of every layer of VGG-16 at several batch sizes.
    let queries: Vec<(ModuleSpec, Context)> = (0..10_000)
        .map(|i| {
            let (_, spec) = vgg.modules()[i % vgg.layers.len()];
            (
                spec.clone(),
                Context {
                    batch: 1 << (i % 6),
                    ..one.clone()
                },
            )
        })
        .collect();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    for threads in [1, cores] {
        let (p50, p99) = time_calls(20, || {
            std::hint::black_box(predictor.predict_modules_threads(&queries, threads)?);
            Ok(())
        })?;
        lines.push(BenchLine {
            query: format!(
                "batch of 10,000 modules ({threads} thread{}), per module",
                if threads == 1 { "" } else { "s" }
            ),
            p50_us: p50 / 1e4,
            p99_us: p99 / 1e4,
            per_second: 1e10 / p50,
        });
        if cores == 1 {
            break;
        }
    }
    match a.format {
        Format::Json => emit_json(&lines)?,
        Format::Text => {
            let mut t = format!(
                "{:<52} {:>10} {:>10} {:>12}\n",
                "query", "p50 us", "p99 us", "per second"
            );
            for l in &lines {
                t.push_str(&format!(
                    "{:<52} {:>10} {:>10} {:>12}\n",
                    l.query,
                    sig3(l.p50_us),
                    sig3(l.p99_us),
                    sig3(l.per_second)
                ));
            }
            emit(&t)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Arguments of `perfcast bundle show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Bundle directory
    dir: PathBuf,
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

/// A module prediction with its query, for output.
#[derive(Debug, Serialize)]
struct ModuleRow {
    module: String,
    context: Context,
    #[serde(flatten)]
    prediction: ModulePrediction,
}

fn dims(text: &str) -> anyhow::Result<Vec<usize>> {
    text.split(['x', 'X', ','])
        .map(|d| {
            d.trim()
                .parse::<usize>()
                .ok()
                .filter(|v| *v > 0)
                .ok_or_else(|| anyhow::anyhow!("`--input {text}`: `{d}` is not a positive size"))
        })
        .collect()
}

/// The module the flags describe, built through the JSON form so the spec's own checks apply.
fn spec_from_flags(kind: ModuleKind, a: &PredictArgs) -> anyhow::Result<ModuleSpec> {
    use serde_json::{Value, json};
    let input = a.input.as_deref().map(dims).transpose()?;
    let need = |name: &str| anyhow::anyhow!("`perfcast predict {kind}` needs `--{name}`");
    let chw = || -> anyhow::Result<(usize, [usize; 2])> {
        match input.as_deref() {
            Some([c, h, w]) => Ok((*c, [*h, *w])),
            _ => anyhow::bail!("`perfcast predict {kind}` needs `--input CxHxW`"),
        }
    };
    let tf = || -> anyhow::Result<(usize, usize)> {
        match input.as_deref() {
            Some([f]) => Ok((1, *f)),
            Some([t, f]) => Ok((*t, *f)),
            _ => anyhow::bail!(
                "`perfcast predict {kind}` needs `--input FEATURES` or `TOKENSxFEATURES`"
            ),
        }
    };
    let mut v: Value = match kind {
        ModuleKind::Conv2d => {
            let (c, hw) = chw()?;
            json!({"in_channels": c, "input_hw": hw,
                   "out_channels": a.out_channels.ok_or_else(|| need("out-channels"))?,
                   "kernel": a.kernel.ok_or_else(|| need("kernel"))?,
                   "stride": a.stride.unwrap_or(1), "padding": a.padding.unwrap_or(0),
                   "dilation": a.dilation.unwrap_or(1), "groups": a.groups.unwrap_or(1),
                   "bias": !a.no_bias})
        }
        ModuleKind::Linear => {
            let (t, f) = tf()?;
            json!({"tokens": t, "in_features": f,
                   "out_features": a.out_features.ok_or_else(|| need("out-features"))?,
                   "bias": !a.no_bias})
        }
        ModuleKind::Matmul => json!({"heads": a.heads.unwrap_or(1),
            "m": a.m.ok_or_else(|| need("m"))?, "k": a.k.ok_or_else(|| need("k"))?,
            "n": a.n.ok_or_else(|| need("n"))?}),
        ModuleKind::MaxPool2d | ModuleKind::AvgPool2d => {
            let (c, hw) = chw()?;
            let mut p = json!({"channels": c, "input_hw": hw,
                "kernel": a.kernel.ok_or_else(|| need("kernel"))?, "padding": a.padding.unwrap_or(0)});
            if let Some(s) = a.stride {
                p["stride"] = json!(s);
            }
            p
        }
        ModuleKind::BatchNorm2d => {
            let (c, hw) = chw()?;
            json!({"channels": c, "input_hw": hw})
        }
        ModuleKind::LayerNorm | ModuleKind::RmsNorm => {
            let (t, f) = tf()?;
            json!({"tokens": t, "features": f})
        }
        ModuleKind::Embedding => {
            let (t, f) = tf()?;
            json!({"tokens": t, "features": f,
                   "vocab": a.out_features.ok_or_else(|| need("out-features (the vocabulary)"))?})
        }
        _ => {
            let mut shape = input.ok_or_else(|| need("input"))?;
            anyhow::ensure!(
                shape.len() <= 3,
                "`--input`: at most 3 dimensions per sample"
            );
            while shape.len() < 3 {
                shape.insert(0, 1);
            }
            json!({"shape": shape})
        }
    };
    v["kind"] = json!(kind.name());
    let spec: ModuleSpec = serde_json::from_value(v).context("building the module")?;
    spec.validate()?;
    Ok(spec)
}

fn network(
    a: &PredictArgs,
) -> anyhow::Result<Option<(Network, Option<crate::cmd::model::ImportReport>)>> {
    let given = [
        a.network.is_some(),
        a.network_file.is_some(),
        a.model.given(),
    ];
    anyhow::ensure!(
        given.iter().filter(|g| **g).count() <= 1,
        "give one of `--network`, `--network-file`, `--transformer` and `--onnx`"
    );
    if a.model.given() {
        anyhow::ensure!(
            a.kind.is_none(),
            "a module kind and `--transformer` / `--onnx` cannot be given together"
        );
        // With `--onnx`, `--input NAME=DIMS` gives an input's shape.
        let extra: Vec<String> = a
            .input
            .iter()
            .filter(|_| a.model.onnx.is_some())
            .cloned()
            .collect();
        let loaded = a.model.load(a.phase, &extra)?;
        return Ok(loaded.map(|l| (l.network, l.report)));
    }
    if let Some(name) = &a.network {
        return Ok(Some((zoo::build(name, a.resolution)?, None)));
    }
    if let Some(path) = &a.network_file {
        return Ok(Some((Network::from_json_file(path)?, None)));
    }
    Ok(None)
}

/// Loads a bundle, with a hint when the default one does not exist yet.
pub fn load_bundle(dir: &Path) -> anyhow::Result<Bundle> {
    if !dir.exists() && dir == Path::new("checkpoints/local") {
        anyhow::bail!(
            "no bundle at `checkpoints/local`\n\nhint: run `perfcast quickstart` to profile this \
             machine and write one, or pass `--bundle <dir>`"
        );
    }
    Ok(Bundle::load(dir)?)
}

pub fn predict(a: PredictArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    if a.list_devices {
        emit(&crate::cmd::target_device::devices_table())?;
        return Ok(ExitCode::SUCCESS);
    }
    let context = Context {
        batch: a.batch,
        phase: a.phase,
        threads: a.threads,
        utilisation: 0.0,
    };
    context.validate()?;
    // Parse the query before loading the bundle: a bad query is reported as such.
    let net = network(&a)?;
    let queries: Vec<(ModuleSpec, Context)> = if net.is_some() {
        Vec::new()
    } else if let Some(path) = &a.modules_file {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading `{}`", path.display()))?;
        let items: Vec<perfcast_core::ModuleQuery> = serde_json::from_str(&text)
            .with_context(|| format!("`{}` is not a JSON array of module specs", path.display()))?;
        items
            .into_iter()
            .enumerate()
            .map(|(i, q)| {
                q.spec
                    .validate()
                    .with_context(|| format!("`{}`: module {i}", path.display()))?;
                let context = q.context(&Context {
                    batch: a.batch,
                    phase: a.phase,
                    threads: a.threads,
                    utilisation: 0.0,
                });
                // Checked here, not at prediction time, so the error names the file and entry.
                context
                    .validate()
                    .with_context(|| format!("`{}`: module {i}", path.display()))?;
                Ok((q.spec, context))
            })
            .collect::<anyhow::Result<_>>()?
    } else if let Some(kind) = a.kind {
        vec![(spec_from_flags(kind, &a)?, context.clone())]
    } else {
        anyhow::bail!(
            "nothing to predict\n\nhint: name a module kind (`perfcast predict conv2d --input \
             3x224x224 --out-channels 64 --kernel 7`), `--modules-file`, `--network`, \
             `--network-file`, `--transformer` or `--onnx`"
        );
    };
    let target =
        crate::cmd::target_device::target_device(a.device_spec.as_deref(), a.device.as_deref())?;
    let bundle = match &target {
        Some(device) => {
            let b = Bundle::load_for_device(&a.bundle, device)?;
            if b.manifest.cross_device() {
                ui.info(format!(
                    "predicting for `{}` ({} GFLOP/s, {} GB/s) with a bundle trained on {} devices",
                    device.name,
                    sig3(device.peak_gflops),
                    sig3(device.mem_bandwidth_gbs),
                    b.manifest.trained_devices.len()
                ));
            }
            b
        }
        None => load_bundle(&a.bundle)?,
    };
    let predictor = Predictor::new(bundle);
    if let Some((net, report)) = net {
        let p = predictor.predict_network(&net, &context)?;
        for l in p
            .layers
            .iter()
            .filter(|l| !l.prediction.warnings.is_empty())
            .take(3)
        {
            ui.info(format!(
                "warning: layer `{}`: {}",
                l.name,
                l.prediction.warnings.join("; ")
            ));
        }
        #[derive(Serialize)]
        struct Out<'a> {
            #[serde(flatten)]
            prediction: &'a NetworkPrediction,
            /// What an ONNX import folded, fused, approximated and left unmapped.
            #[serde(skip_serializing_if = "Option::is_none")]
            import: Option<&'a crate::cmd::model::ImportReport>,
        }
        match a.format {
            Format::Json => emit_json(&Out {
                prediction: &p,
                import: report.as_ref(),
            })?,
            Format::Text => {
                let mut t = render_network(&p);
                let views = crate::cmd::model::views(&net);
                if views > 0 {
                    t.push_str(&format!(
                        "{views} view layer(s) (reshape, transpose, split) are zero-cost: predicted as 0 ms, marked `zero-cost`\n"
                    ));
                }
                if let Some(r) = &report {
                    t.push_str(&r.render());
                }
                emit(&t)?
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<ModuleRow> = queries
        .iter()
        .map(|(spec, ctx)| {
            Ok(ModuleRow {
                module: spec.describe(),
                context: ctx.clone(),
                prediction: predictor.predict_module(spec, ctx)?,
            })
        })
        .collect::<anyhow::Result<_>>()?;
    for r in &rows {
        for w in &r.prediction.warnings {
            ui.info(format!("warning: {}: {w}", r.module));
        }
    }
    match a.format {
        Format::Json => emit_json(&rows)?,
        Format::Text => {
            let mut t = format!(
                "{:<44} {:>6} {:<10} {:>12} {:<10}\n",
                "module", "batch", "phase", "predicted", "model"
            );
            for r in &rows {
                t.push_str(&format!(
                    "{:<44} {:>6} {:<10} {:>12} {:<10}\n",
                    r.module,
                    r.context.batch,
                    r.context.phase.name(),
                    fmt_ms(r.prediction.ms),
                    r.prediction.model
                ));
            }
            emit(&t)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn render_network(p: &NetworkPrediction) -> String {
    let mut t = format!(
        "{} (batch {}, {}, {} thread{})\n{:<24} {:<44} {:>11} {:>6}  {}\n",
        p.network,
        p.context.batch,
        p.context.phase.name(),
        p.context.threads,
        if p.context.threads == 1 { "" } else { "s" },
        "layer",
        "module",
        "predicted",
        "share",
        "model"
    );
    for l in &p.layers {
        t.push_str(&format!(
            "{:<24} {:<44} {:>11} {:>5}%  {}{}\n",
            l.name,
            l.module,
            fmt_ms(l.prediction.ms),
            sig3(100.0 * l.prediction.ms / p.layer_sum_ms),
            l.prediction.model,
            if l.prediction.fallback {
                " (fallback)"
            } else {
                ""
            }
        ));
    }
    match &p.composed {
        None => t.push_str(&format!(
            "{:<24} {:<44} {:>11}\n",
            "total",
            format!("{} layers", p.layers.len()),
            fmt_ms(p.total_ms)
        )),
        Some(c) => {
            let terms = [
                (
                    "layers",
                    format!("sum of {} layers", p.layers.len()),
                    c.layer_sum_ms,
                ),
                (
                    "host: per run",
                    "setup, input, loss".to_string(),
                    c.per_run_ms,
                ),
                (
                    "host: per layer",
                    "dispatch and allocation between layers".to_string(),
                    c.dispatch_ms,
                ),
                (
                    "host: layer scale",
                    "cache effects across layers".to_string(),
                    c.scale_ms,
                ),
                (
                    "host: update",
                    "optimiser step over parameters".to_string(),
                    c.update_ms,
                ),
            ];
            for (name, what, ms) in terms {
                if name == "host: update" && p.context.phase == Phase::Inference {
                    continue;
                }
                // A fitted term of a few nanoseconds reads as noise: show it as zero.
                let ms = if ms.abs() < 1e-6 { 0.0 } else { ms };
                t.push_str(&format!("{name:<24} {what:<44} {:>11}\n", fmt_ms(ms)));
            }
            t.push_str(&format!(
                "{:<24} {:<44} {:>11}\n",
                "total",
                "composed (pre + layers + post)",
                fmt_ms(c.total_ms)
            ));
        }
    }
    if p.fallback_layers > 0 {
        t.push_str(&format!(
            "{} layer(s) have no model in the bundle and use the device-spec roofline\n",
            p.fallback_layers
        ));
    }
    t
}

pub fn bundle(c: BundleCommand, _ui: &Ui) -> anyhow::Result<ExitCode> {
    let a = match c {
        BundleCommand::Show(a) => a,
        BundleCommand::Bench(a) => return bench(a),
    };
    let manifest = Bundle::read_manifest(&a.dir)?;
    // Loading checks every model file too, so `show` also validates the bundle.
    Bundle::load(&a.dir)?;
    match a.format {
        Format::Json => emit_json(&manifest)?,
        Format::Text => {
            let mut t = format!(
                "bundle `{}` (format {}, perfcast {}) for {} ({} GFLOP/s, {} GB/s), trained on {}\n",
                manifest.name,
                manifest.format,
                manifest.perfcast_version,
                manifest.device.name,
                sig3(manifest.device.peak_gflops),
                sig3(manifest.device.mem_bandwidth_gbs),
                manifest.data
            );
            for (kind, e) in &manifest.kinds {
                t.push_str(&format!(
                    "\n{kind}: {} ({} rows), {}\n  {:<12} {:>8} {:>9} {:>9} {:>9}\n",
                    e.chosen,
                    e.rows,
                    e.selection.why,
                    "model",
                    "cv MAPE",
                    "test MAPE",
                    "us/row",
                    "KB"
                ));
                for c in &e.candidates {
                    let mark = if c.model == e.chosen {
                        "*"
                    } else if e.selection.pareto.contains(&c.model) {
                        "p"
                    } else {
                        " "
                    };
                    t.push_str(&format!(
                        "{mark} {:<12} {:>7}% {:>8}% {:>9} {:>9}\n",
                        c.model,
                        sig3(c.cv_mape),
                        sig3(c.test_mape),
                        sig3(c.predict_us),
                        sig3(c.size_bytes as f64 / 1024.0)
                    ));
                }
            }
            t.push_str("\n* chosen, p on the Pareto front (MAPE, prediction time, size)\n");
            match &manifest.host_costs {
                Some(c) => t.push_str(&format!(
                    "\nnetwork host-cost terms (fitted on {}, {} thread(s)):\n{}",
                    c.networks.join(", "),
                    c.threads,
                    crate::render::networks::costs(c)
                )),
                None => t.push_str(
                    "\nno network host-cost terms: networks are predicted as the plain sum of \
                     their layers (`perfcast calibrate` fits them)\n",
                ),
            }
            emit(&t)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
