//! `perfcast predict` (modules and networks from a bundle) and `perfcast bundle show`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use perfcast_core::{Context, Hinted, ModuleKind, ModuleSpec, Network, Phase, zoo};
use perfcast_select::{Bundle, Predictor};

use crate::Ui;
use crate::output::{Format, emit, emit_json, sig3};

/// Arguments of `perfcast predict`.
#[derive(Debug, Args)]
pub struct PredictArgs {
    /// Module kind to predict from flags (conv2d, linear, matmul, maxpool2d, ...)
    kind: Option<ModuleKind>,
    /// Bundle directory written by `perfcast train --bundle` or `perfcast quickstart`
    #[arg(long, default_value = "checkpoints/local")]
    bundle: PathBuf,
    /// Batch size (default: the batch an `--onnx` file fixes, else 1)
    #[arg(long)]
    batch: Option<usize>,
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
    /// mobilenetv2, transformer, squeezenet1_1, densenet121, efficientnet_b0, vit_b_16,
    /// llama_block)
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
    /// Data type the modules compute in on the GPU: fp32 (default), tf32, fp16 or bf16
    /// (tensor cores; the device's published peak for that type bounds the answer). Needs
    /// `--device` or `--device-spec`; `--device h100:bf16` says the same
    #[arg(long, value_name = "TYPE")]
    dtype: Option<perfcast_core::DType>,
    /// List the known devices `--device` selects from, and exit
    #[arg(long)]
    list_devices: bool,
    /// Kernel fusion of a network: none (eager, every layer a kernel), epilogue, compile,
    /// engine or megatron
    ///
    /// epilogue: element-wise ops after a GEMM run in its epilogue; compile: epilogues,
    /// element-wise/norm chains as one kernel, attention as one kernel; engine: compile plus
    /// residual-norm fusion; megatron: Megatron-LM's graph (fused QKV, bias-GeLU, dropout-add,
    /// scale-mask-softmax). See docs/networks.md
    #[arg(long, value_name = "POLICY", default_value = "none")]
    fusion: perfcast_core::fusion::Fusion,
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

fn bench(a: BenchArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        a.iterations >= 10,
        "`--iterations` must be at least 10, got {}",
        a.iterations
    );
    let predictor = Predictor::new(load_bundle(&a.dir)?);
    let lines = perfcast_calibrate::bench::bench(&predictor, a.iterations)?;
    match a.format {
        Format::Json => emit_json(&lines)?,
        Format::Text => emit(&crate::render::predict::bench(&lines))?,
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

use crate::render::predict::ModuleRow;

impl PredictArgs {
    /// The module the flags describe.
    fn spec(&self, kind: ModuleKind) -> anyhow::Result<ModuleSpec> {
        Ok(perfcast_core::SpecFlags {
            input: self.input.clone(),
            out_channels: self.out_channels,
            out_features: self.out_features,
            kernel: self.kernel,
            stride: self.stride,
            padding: self.padding,
            dilation: self.dilation,
            groups: self.groups,
            no_bias: self.no_bias,
            heads: self.heads,
            m: self.m,
            k: self.k,
            n: self.n,
        }
        .spec(kind)?)
    }
}

fn network(a: &PredictArgs) -> anyhow::Result<Option<Named>> {
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

/// The network the flags name (with its import report) and the context to predict in: at
/// `--batch`, else at the batch an ONNX file fixes, else 1.
fn network_and_context(a: &PredictArgs, ui: &Ui) -> anyhow::Result<(Option<Named>, Context)> {
    let mut context = Context {
        batch: a.batch.unwrap_or(1),
        phase: a.phase,
        threads: a.threads,
        utilisation: 0.0,
    };
    context.validate()?;
    let net = network(a)?;
    let file_batch = net.as_ref().and_then(|(_, r)| r.as_ref()?.batch);
    context.batch = crate::cmd::model::batch(a.batch, file_batch, ui);
    Ok((net, context))
}

/// A network and, for an ONNX model, its import report.
type Named = (Network, Option<crate::cmd::model::ImportReport>);

/// Loads a bundle, with a hint when the default one does not exist yet.
pub fn load_bundle(dir: &Path) -> anyhow::Result<Bundle> {
    Ok(perfcast_workflow::networks::load_bundle(dir)?)
}

pub fn predict(a: PredictArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    if a.list_devices {
        emit(&crate::render::predict::devices_table())?;
        return Ok(ExitCode::SUCCESS);
    }
    // Parse the query before loading the bundle: a bad query is reported as such.
    let (net, context) = network_and_context(&a, ui)?;
    let queries: Vec<(ModuleSpec, Context)> = if net.is_some() {
        Vec::new()
    } else if let Some(path) = &a.modules_file {
        perfcast_core::read_queries(path, &context)?
    } else if let Some(kind) = a.kind {
        vec![(a.spec(kind)?, context.clone())]
    } else {
        return Err(Hinted::new(
            "nothing to predict",
            "name a module kind (`perfcast predict conv2d --input 3x224x224 --out-channels 64 \
             --kernel 7`), `--modules-file`, `--network`, `--network-file`, `--transformer` or \
             `--onnx`",
        )
        .into());
    };
    let mut target =
        perfcast_data::import::known::target_device(a.device_spec.as_deref(), a.device.as_deref())?;
    if let Some(dtype) = a.dtype {
        let Some(device) = &target else {
            anyhow::bail!(
                "`--dtype {dtype}` needs a GPU: pass `--device <name>` or `--device-spec <file>`"
            );
        };
        anyhow::ensure!(
            device.kind == perfcast_core::DeviceKind::Gpu,
            "`--dtype` applies to GPUs; `{}` is a CPU",
            device.name
        );
        target = Some(device.at_dtype(dtype)?);
    }
    let bundle = match &target {
        Some(device) => {
            let b = Bundle::load_for_device(&a.bundle, device)?;
            if b.manifest.cross_device() {
                ui.info(format!(
                    "predicting for `{}` in {} ({} GFLOP/s, {} GB/s) with a bundle trained on {} \
                     devices",
                    device.name,
                    device.dtype,
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
        let p = predictor.predict_network_fused(&net, &context, a.fusion)?;
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
        crate::render::predict::network_output(a.format, &p, &net, report.as_ref())?;
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
        Format::Text => emit(&crate::render::predict::modules(&rows))?,
    }
    Ok(ExitCode::SUCCESS)
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
        Format::Text => emit(&crate::render::predict::bundle(&manifest))?,
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use perfcast_graph::onnx::testing::resnet18;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        predict: PredictArgs,
    }

    #[test]
    fn a_fixed_batch_onnx_predicts_as_a_dynamic_one_at_that_batch() {
        let dir = tempfile::tempdir().expect("temp dir");
        let fixed = dir.path().join("resnet18-b8.onnx");
        let dynamic = dir.path().join("resnet18.onnx");
        std::fs::write(&fixed, resnet18(Some(8), 224).encode()).expect("write");
        std::fs::write(&dynamic, resnet18(None, 224).encode()).expect("write");
        let bundle = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../checkpoints/gpu");
        let predictor = Predictor::new(load_bundle(&bundle).expect("bundle"));
        let ui = Ui {
            quiet: true,
            verbose: 0,
            progress: false,
            color: false,
        };
        let total = |args: &[&str]| {
            let cli = Cli::parse_from(std::iter::once("predict").chain(args.iter().copied()));
            let (net, context) = network_and_context(&cli.predict, &ui).expect("network");
            let (net, _) = net.expect("a network");
            let p = predictor
                .predict_network(&net, &context)
                .expect("prediction");
            (p.total_ms, context.batch)
        };
        let (fixed_ms, fixed_batch) = total(&["--onnx", fixed.to_str().expect("utf-8")]);
        let (dynamic_ms, _) = total(&["--onnx", dynamic.to_str().expect("utf-8"), "--batch", "8"]);
        let (one_ms, _) = total(&["--onnx", dynamic.to_str().expect("utf-8")]);
        assert_eq!(fixed_batch, 8);
        let gap = (fixed_ms - dynamic_ms).abs() / dynamic_ms;
        eprintln!("fixed batch 8: {fixed_ms} ms, dynamic at --batch 8: {dynamic_ms} ms, gap {gap}");
        assert!(gap < 0.005, "{fixed_ms} ms vs {dynamic_ms} ms");
        // The batch matters (batch 1 is cheaper), so the check above is not vacuous.
        assert!(one_ms < 0.9 * dynamic_ms, "{one_ms} ms at batch 1");
        // `--batch` overrides the file's.
        let (_, given) = total(&["--onnx", fixed.to_str().expect("utf-8"), "--batch", "2"]);
        assert_eq!(given, 2);
    }
}
