//! `perfcast quickstart`: profile this machine with a small sweep, train every candidate,
//! auto-select, write `checkpoints/<bundle>/`, and predict a few zoo networks.

use std::process::ExitCode;

use clap::{Args, Parser};
use perfcast_core::{Context, Phase};
use perfcast_select::{Predictor, RunShape};

use super::{networks, predict, profile, train};
use crate::Ui;
use crate::output::{emit, fmt_ms};

/// Every kind the zoo networks are made of, so no layer falls back to the spec roofline, with
/// the multiple of `--samples` each gets (convolutions have ten shape parameters and dominate
/// CNN time, GEMMs come next; elementwise kinds are nearly linear in their size) and the cap
/// on each configuration's timed samples, seconds. Small ops are noisy and run to the cap:
/// 0.15-0.25 s is still hundreds of calls, and keeps the whole quickstart under 10 minutes
/// (the default 0.6 s alone took 7.5 of them).
const KINDS: [(&str, usize, &str); 3] = [
    ("conv2d", 6, "0.25"),
    ("linear,matmul", 2, "0.25"),
    (
        "maxpool2d,avgpool2d,batchnorm2d,relu,add,softmax,layernorm,gelu,tanh",
        1,
        "0.15",
    ),
];

/// Arguments of `perfcast quickstart`.
#[derive(Debug, Args)]
pub struct QuickstartArgs {
    /// Configurations per elementwise or pooling kind to measure (each in both phases;
    /// conv2d gets 6x, linear and matmul 2x); more is slower and more accurate
    #[arg(long, default_value_t = 40)]
    samples: usize,
    /// Bundle name (`checkpoints/<name>/`)
    #[arg(long, default_value = "local")]
    bundle: String,
    /// Model families to train and choose from
    #[arg(long, default_value = "ridge,knn,trees,roofline,medn")]
    models: String,
    /// Zoo networks to predict at the end (`name@resolution` for another input size); their
    /// layers are profiled too, at these batch sizes
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "lenet5,alexnet,resnet18,mobilenetv2,vgg16@112"
    )]
    networks: Vec<String>,
    /// Batch sizes of those predictions
    #[arg(long, value_delimiter = ',', default_value = "1,8")]
    batch: Vec<usize>,
    /// Networks measured end to end to fit the host-cost terms (other than the predicted ones;
    /// a small one among them pins the per-run cost, which large ones cannot tell apart)
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "vgg11@64,resnet50@64,transformer@64,lenet5@28"
    )]
    calibration_networks: Vec<String>,
    /// Skip profiling the networks' own layers and the host-cost calibration (faster; network
    /// predictions then rest on the random sweep alone)
    #[arg(long)]
    fast: bool,
}

#[derive(Parser)]
struct Wrap<T: Args> {
    #[command(flatten)]
    args: T,
}

fn parse<T: Args>(argv: &[String]) -> anyhow::Result<T> {
    Ok(Wrap::<T>::try_parse_from(argv)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .args)
}

pub fn run(a: QuickstartArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        a.samples >= 10,
        "`--samples` must be at least 10, got {}",
        a.samples
    );
    let data = std::path::PathBuf::from("datasets").join(perfcast_core::slugify(
        &perfcast_core::CpuTopology::detect().model,
    ));
    let s = |v: &str| v.to_string();
    ui.info(format!(
        "1/4 profiling {} configurations over 12 kinds into `{}` (resumable)",
        KINDS
            .iter()
            .map(|(k, m, _)| k.split(',').count() * m * a.samples)
            .sum::<usize>(),
        data.display()
    ));
    for (kinds, multiple, cap) in KINDS {
        let code = profile::run(
            parse(&[
                s("profile"),
                s("--modules"),
                s(kinds),
                s("--samples"),
                (multiple * a.samples).to_string(),
                s("--out"),
                data.display().to_string(),
                s("--max-time-s"),
                s(cap),
                s("--resume"),
            ])?,
            ui,
        )?;
        if code != ExitCode::SUCCESS {
            return Ok(code);
        }
    }
    let predicted: Vec<networks::NetworkChoice> = a
        .networks
        .iter()
        .map(|n| networks::zoo_choice(n, None))
        .collect::<anyhow::Result<_>>()?;
    let calibration: Vec<networks::NetworkChoice> = a
        .calibration_networks
        .iter()
        .map(|n| networks::zoo_choice(n, None))
        .collect::<anyhow::Result<_>>()?;
    let calibration_batch = [1, 4];
    if a.fast {
        ui.info("2/4 skipped (--fast): the networks' own layers are not profiled");
    } else {
        ui.info(format!(
            "2/4 profiling the layers of {} (batch {}) and of the calibration networks {}",
            a.networks.join(", "),
            a.batch
                .iter()
                .map(|b| b.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            a.calibration_networks.join(", ")
        ));
        let n = networks::profile_layers(&predicted, &a.batch, 1, &data, ui)?
            + networks::profile_layers(&calibration, &calibration_batch, 1, &data, ui)?;
        ui.info(format!("    {n} new layer measurements"));
    }
    let dir = train::bundle_dir(&a.bundle);
    ui.info(format!(
        "3/4 training {} on every kind, auto-selecting into `{}`",
        a.models,
        dir.display()
    ));
    let code = train::train(
        parse(&[
            s("train"),
            s("--data"),
            data.display().to_string(),
            s("--out"),
            format!("{}.train", dir.display()),
            s("--force"),
            s("--folds"),
            s("3"),
            s("--models"),
            a.models.clone(),
            s("--set"),
            s("medn.max_steps=3000"),
            s("--bundle"),
            a.bundle.clone(),
        ])?,
        ui,
    )?;
    if code != ExitCode::SUCCESS {
        return Ok(code);
    }
    if a.fast {
        ui.info("4/4 predicting zoo networks (host-cost calibration skipped: --fast)");
    } else {
        ui.info(format!(
            "4/4 measuring {} end to end to fit the host-cost terms, then predicting",
            a.calibration_networks.join(", ")
        ));
        let code = networks::calibrate(
            parse(&[
                s("calibrate"),
                s("--bundle"),
                dir.display().to_string(),
                s("--networks"),
                a.calibration_networks.join(","),
                s("--batch"),
                s("1,4"),
                s("--phase"),
                s("inference,training"),
                s("--max-time-s"),
                s("1"),
            ])?,
            ui,
        )?;
        if code != ExitCode::SUCCESS {
            return Ok(code);
        }
    }
    let predictor = Predictor::new(predict::load_bundle(&dir)?);
    let costs = predictor.bundle().manifest.host_costs.clone();
    let mut t = format!(
        "\n{:<14} {:>6} {:>14} {:>14}\n",
        "network", "batch", "inference", "training step"
    );
    for choice in &predicted {
        let (name, net) = (&choice.label, &choice.network);
        for &batch in &a.batch {
            let mut cells = Vec::new();
            for phase in [Phase::Inference, Phase::Training] {
                let context = Context {
                    batch,
                    phase,
                    threads: 1,
                    utilisation: 0.0,
                };
                let sum = predictor.predict_network(net, &context)?.layer_sum_ms;
                let total = costs
                    .as_ref()
                    .and_then(|c| c.phase(phase))
                    .map_or(sum, |c| c.compose(&RunShape::of(net, sum)).total_ms);
                cells.push(fmt_ms(total));
            }
            t.push_str(&format!(
                "{:<14} {:>6} {:>14} {:>14}\n",
                name, batch, cells[0], cells[1]
            ));
        }
    }
    t.push_str(&format!(
        "\n({}, 1 thread; `perfcast predict --network resnet18 --batch 8` shows the layers; \
         `perfcast eval networks` measures and compares; bundle: `{}`)\n",
        if costs.is_some() {
            "sum of per-layer predictions with the host-cost terms"
        } else {
            "sum of per-layer predictions"
        },
        dir.display()
    ));
    emit(&t)?;
    Ok(ExitCode::SUCCESS)
}
