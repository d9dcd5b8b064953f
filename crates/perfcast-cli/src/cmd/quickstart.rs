//! `perfcast quickstart`: arguments -> a [`QuickstartPlan`] -> [`perfcast_workflow::quickstart`]
//! -> each step's table printed as it finishes, progress drawn from the workflow's observer.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use perfcast_profile::overrides::parse_duration_s;
use perfcast_workflow::quickstart::{self, QuickstartPlan};

use crate::Ui;
use crate::output::emit;
use crate::progress::{Steps, interrupt_flag};
use crate::render;

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
    /// a small one among them pins the per-run cost, which large ones cannot tell apart, and
    /// linear-only, conv-only and FC-heavy nets set the update's rates per tensor kind)
    #[arg(
        long,
        value_delimiter = ',',
        default_values_t = perfcast_workflow::quickstart::CALIBRATION_NETWORKS.map(String::from)
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
    #[arg(long, default_value = "8m50s", value_parser = parse_duration_s)]
    budget: f64,
}

impl QuickstartArgs {
    /// The plan these arguments describe, measuring into `data`.
    pub fn plan(&self, data: PathBuf) -> anyhow::Result<QuickstartPlan> {
        Ok(QuickstartPlan {
            models: self
                .models
                .split(',')
                .map(|m| m.trim().to_string())
                .collect(),
            networks: self.networks.clone(),
            batch: self.batch.clone(),
            calibration_networks: self.calibration_networks.clone(),
            fast: self.fast,
            budget_s: self.budget,
            ..QuickstartPlan::new(self.samples, data, self.bundle.clone())?
        })
    }
}

pub fn run(a: QuickstartArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    let data = PathBuf::from("datasets").join(perfcast_core::slugify(
        &perfcast_core::CpuTopology::detect().model,
    ));
    let plan = a.plan(data)?;
    // Installed before any step, so that Ctrl-C in any of them is seen, not only in a sweep.
    let interrupt = interrupt_flag();
    let report = quickstart::run(&plan, Steps::new(ui, true), interrupt)?;
    emit(&render::networks::quickstart(
        &report.networks,
        report.calibrated,
        &report.bundle,
    ))?;
    Ok(ExitCode::SUCCESS)
}
