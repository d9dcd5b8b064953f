//! `perfcast quickstart`: profile this machine with a small sweep, train every candidate,
//! auto-select, write `checkpoints/<bundle>/`, fit the host-cost terms, and predict a few zoo
//! networks. Each step is the library call its own command makes, with a typed plan.

use std::process::ExitCode;

use clap::Args;
use perfcast_core::{Context, NetworkChoice, Phase};
use perfcast_profile::Backend;
use perfcast_profile::network_runs::{MeasurePlan, NoPeak, measure_networks, profile_layers};
use perfcast_profile::overrides::{quickstart_size, quickstart_sweeps};
use perfcast_select::Predictor;
use perfcast_select::calibrate::network_ms;
use perfcast_select::pipeline::{TrainPlan, bundle_dir};

use super::{networks, predict, profile, train};
use crate::Ui;
use crate::output::{Format, emit};
use crate::progress::Bars;

/// Arguments of `perfcast quickstart`.
#[derive(Debug, Args)]
pub struct QuickstartArgs {
    /// Configurations per elementwise or pooling kind to measure (each in both phases;
    /// conv2d gets 6x, linear and matmul 2x, the kinds imported models add 1/4); more is
    /// slower and more accurate
    #[arg(long, default_value_t = 40)]
    samples: usize,
    /// Bundle name (`checkpoints/<name>/`)
    #[arg(long, default_value = "local")]
    bundle: String,
    /// Model families to train and choose from
    // k-NN is left out: it never won a kind in a quickstart (38-79% held-out on every kind).
    #[arg(long, default_value = "ridge,trees,roofline,medn")]
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

pub fn run(a: QuickstartArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        a.samples >= 10,
        "`--samples` must be at least 10, got {}",
        a.samples
    );
    let data = std::path::PathBuf::from("datasets").join(perfcast_core::slugify(
        &perfcast_core::CpuTopology::detect().model,
    ));
    let (configurations, kinds) = quickstart_size(a.samples);
    ui.info(format!(
        "1/4 profiling {configurations} configurations over {kinds} kinds into `{}` (resumable)",
        data.display()
    ));
    for sweep in &quickstart_sweeps(a.samples)? {
        let code = profile::profile(sweep, &data, Backend::Flex, true, Format::Text, ui)?;
        if code != ExitCode::SUCCESS {
            return Ok(code);
        }
    }
    let predicted = NetworkChoice::zoo_all(&a.networks, None)?;
    let calibration = NetworkChoice::zoo_all(&a.calibration_networks, None)?;
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
        let bars = Bars::new(ui);
        let n = profile_layers(&predicted, &a.batch, 1, &data, bars.as_ref())?
            + profile_layers(&calibration, &calibration_batch, 1, &data, bars.as_ref())?;
        ui.info(format!("    {n} new layer measurements"));
    }
    let dir = bundle_dir(&a.bundle);
    ui.info(format!(
        "3/4 training {} on every kind, auto-selecting into `{}`",
        a.models,
        dir.display()
    ));
    let plan = TrainPlan {
        models: a.models.split(',').map(|m| m.trim().to_string()).collect(),
        force: true,
        folds: 3,
        set: vec!["medn.max_steps=3000".into()],
        bundle: Some(a.bundle.clone()),
        ..TrainPlan::new(
            vec![data.clone()],
            format!("{}.train", dir.display()).into(),
        )
    };
    let code = train::run_plan(&plan, Format::Text, ui)?;
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
        let measure = MeasurePlan {
            batch: calibration_batch.to_vec(),
            phases: vec![Phase::Inference, Phase::Training],
            threads: 1,
            backend: Backend::Flex,
            max_time_s: 1.0,
            save: None,
            layers: false,
            layers_into: None,
        };
        let code = networks::calibrate_with(&dir, None, false, Format::Text, || {
            Ok(
                measure_networks(&calibration, &measure, &NoPeak, Bars::new(ui).as_ref())?
                    .into_iter()
                    .map(|m| (m.label, m.record))
                    .collect(),
            )
        })?;
        if code != ExitCode::SUCCESS {
            return Ok(code);
        }
    }
    let predictor = Predictor::new(predict::load_bundle(&dir)?);
    let mut rows = Vec::new();
    for choice in &predicted {
        for &batch in &a.batch {
            let at = |phase| {
                let context = Context {
                    batch,
                    phase,
                    threads: 1,
                    utilisation: 0.0,
                };
                network_ms(&predictor, &choice.network, &context)
            };
            rows.push((
                choice.label.as_str(),
                batch,
                at(Phase::Inference)?,
                at(Phase::Training)?,
            ));
        }
    }
    let calibrated = predictor.bundle().manifest.host_costs.is_some();
    emit(&crate::render::networks::quickstart(
        &rows, calibrated, &dir,
    ))?;
    Ok(ExitCode::SUCCESS)
}
