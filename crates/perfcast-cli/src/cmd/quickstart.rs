//! `perfcast quickstart`: profile the layers of a few zoo networks and a small sweep on this
//! machine, train every candidate, auto-select, write `checkpoints/<bundle>/`, fit the
//! host-cost terms, and predict those networks. Each step is the library call its own command
//! makes, with a typed plan.

use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use perfcast_core::NetworkChoice;
use perfcast_profile::network_runs::{MeasurePlan, NoPeak, measure_networks, profile_layers};
use perfcast_profile::overrides::{
    active_sweeps, parse_duration_s, quickstart_size, quickstart_sweeps,
};
use perfcast_profile::run::RunOptions;
use perfcast_profile::{Backend, Sweep};
use perfcast_select::Predictor;
use perfcast_select::active::{ActivePlan, RoundClock};
use perfcast_select::calibrate::network_table;
use perfcast_select::pipeline::{TrainPlan, bundle_dir};

use super::{networks, predict, profile, train};
use crate::output::{Format, emit};
use crate::progress::Bars;
use crate::{Interrupted, Ui};

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
    // k-NN is left out because it never won a kind in a quickstart
    // (docs/accuracy.md#figures-behind-code-choices).
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
    /// Skip profiling the networks' own layers, the active rounds and the host-cost
    /// calibration (faster; network predictions then rest on the random sweep alone)
    #[arg(long)]
    fast: bool,
    /// Target wall time (`8m`, `90s`, `0`): after the random sweep and the networks' layers,
    /// rounds of conv2d, linear and matmul configurations chosen where the models disagree
    /// most are measured until training and calibration are all that is left (`0`: none);
    /// re-measuring rows the interference canary found disturbed also stops where the rest
    /// would no longer fit
    #[arg(long, default_value = "8m30s", value_parser = parse_duration_s)]
    budget: f64,
}

/// Seconds kept for training and calibration after the last active round; re-measuring
/// disturbed rows stops there too, so a slow machine cannot stretch the quickstart past its
/// budget (docs/accuracy.md#figures-behind-code-choices).
const RESERVE_S: f64 = 75.0;

pub fn run(a: QuickstartArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        a.samples >= 10,
        "`--samples` must be at least 10, got {}",
        a.samples
    );
    let data = std::path::PathBuf::from("datasets").join(perfcast_core::slugify(
        &perfcast_core::CpuTopology::detect().model,
    ));
    let started = Instant::now();
    // Installed before any step, so that Ctrl-C in any of them is seen, not only in a sweep.
    let interrupt = profile::interrupt_flag();
    let stopped = |step: &str| {
        Interrupted(format!(
            "quickstart interrupted in {step}; the rows measured so far are saved in `{}`: run the \
             same command again to resume",
            data.display()
        ))
    };
    // A sweep's own message names `perfcast profile --resume`, which the quickstart does not
    // take: it always resumes.
    let step = |step: &str, e: anyhow::Error| -> anyhow::Error {
        match e
            .chain()
            .find_map(|c| c.downcast_ref::<perfcast_profile::Error>())
        {
            Some(perfcast_profile::Error::Interrupted { done }) => {
                stopped(&format!("{step} after {done} new measurements")).into()
            }
            _ => e,
        }
    };
    let check = |name: &str| -> anyhow::Result<()> {
        if interrupt.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(stopped(name).into());
        }
        Ok(())
    };
    let device = profile::probe_device(&data, ui)?;
    perfcast_data::DatasetDir::create_or_open(&data, &device)?;
    let budget_s = if a.fast { 0.0 } else { a.budget };
    // With a budget, re-measuring stops where the rest would no longer fit it.
    let until = |left_s: f64| {
        (budget_s > 0.0).then(|| started + std::time::Duration::from_secs_f64(left_s.max(0.0)))
    };
    let remeasure_until = until(budget_s - RESERVE_S);
    let predicted = NetworkChoice::zoo_all(&a.networks, None)?;
    let calibration = NetworkChoice::zoo_all(&a.calibration_networks, None)?;
    let calibration_batch = [1, 4];
    // The networks' own layers first: they are what the predicted networks are made of, so
    // they get the machine's calm stretches and the re-measuring time before the sweep.
    if a.fast {
        ui.info("1/5 skipped (--fast): the networks' own layers are not profiled");
    } else {
        ui.info(format!(
            "1/5 profiling the layers of {} (batch {:?}) and of the calibration networks {} into `{}` (resumable)",
            a.networks.join(", "),
            a.batch,
            a.calibration_networks.join(", "),
            data.display()
        ));
        let bars = Bars::new(ui);
        let mut timed = 0;
        for (nets, batch) in [
            (&predicted, &a.batch[..]),
            (&calibration, &calibration_batch[..]),
        ] {
            let done = profile_layers(nets, batch, 1, &data, remeasure_until, bars.as_ref())
                .map_err(|e| step("step 1/5 (the networks' layers)", e.into()))?;
            timed += done.timed;
            if !done.canary.readings_ms.is_empty() {
                emit(&crate::render::profile::canary_line(&done.canary))?;
            }
        }
        ui.info(format!("    {timed} new layer measurements"));
    }
    let (configurations, kinds) = quickstart_size(a.samples);
    ui.info(format!(
        "2/5 [{:.0} s] profiling {configurations} configurations over {kinds} kinds",
        started.elapsed().as_secs_f64()
    ));
    let options = |s: &Sweep, remeasure_until| RunOptions {
        remeasure_until,
        ..RunOptions::for_sweep(s, &data, Backend::Flex, device.clone(), true)
    };
    for sweep in &quickstart_sweeps(a.samples)? {
        let code = profile::profile(
            sweep,
            &options(sweep, remeasure_until),
            None,
            Format::Text,
            ui,
        )
        .map_err(|e| step("step 2/5 (the sweep)", e))?;
        if code != ExitCode::SUCCESS {
            return Ok(code);
        }
    }
    let mut clock = RoundClock::new(started, budget_s, RESERVE_S);
    ui.info(format!(
        "3/5 [{:.0} s] active rounds for {:.0} s: configurations where the models disagree most",
        started.elapsed().as_secs_f64(),
        clock.left_s().max(0.0)
    ));
    while let Some(seed) = clock.next_round() {
        let plan = ActivePlan {
            seed,
            ..ActivePlan::default()
        };
        for sweep in &active_sweeps(a.samples)? {
            let code = profile::profile(
                sweep,
                &options(sweep, remeasure_until),
                Some(&plan),
                Format::Text,
                ui,
            )
            .map_err(|e| step("step 3/5 (an active round)", e))?;
            if code != ExitCode::SUCCESS {
                return Ok(code);
            }
        }
    }
    check("step 3/5 (active rounds)")?;
    let dir = bundle_dir(&a.bundle);
    ui.info(format!(
        "4/5 [{:.0} s] training {} on every kind, auto-selecting into `{}`",
        started.elapsed().as_secs_f64(),
        a.models,
        dir.display()
    ));
    let plan = TrainPlan::quickstart(
        vec![data.clone()],
        format!("{}.train", dir.display()).into(),
        a.models.split(',').map(|m| m.trim().to_string()).collect(),
        a.bundle.clone(),
    );
    let code = train::run_plan(&plan, Format::Text, ui).map_err(|e| {
        match e
            .chain()
            .find_map(|c| c.downcast_ref::<perfcast_select::Error>())
        {
            // Training checks the interrupt between fits and writes nothing when stopped.
            Some(perfcast_select::Error::Interrupted(at)) => {
                anyhow::Error::from(stopped(&format!("step 4/5 (training, before {at})")))
            }
            _ => e,
        }
    })?;
    if code != ExitCode::SUCCESS {
        return Ok(code);
    }
    check(&format!(
        "step 4/5 (training, which finished and wrote `{}` first)",
        dir.display()
    ))?;
    if a.fast {
        ui.info("5/5 predicting zoo networks (host-cost calibration skipped: --fast)");
    } else {
        ui.info(format!(
            "5/5 [{:.0} s] measuring {} end to end to fit the host-cost terms, then predicting",
            started.elapsed().as_secs_f64(),
            a.calibration_networks.join(", ")
        ));
        let measure = MeasurePlan::calibration(calibration_batch.to_vec());
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
        check("step 5/5 (the host-cost calibration)")?;
    }
    let predictor = Predictor::new(predict::load_bundle(&dir)?);
    let rows = network_table(&predictor, &predicted, &a.batch)?;
    let calibrated = predictor.bundle().manifest.host_costs.is_some();
    emit(&crate::render::networks::quickstart(
        &rows, calibrated, &dir,
    ))?;
    Ok(ExitCode::SUCCESS)
}
