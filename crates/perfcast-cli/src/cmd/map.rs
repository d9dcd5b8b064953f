//! `perfcast map`: PROFET-style anchor mapping of a profile measured on one device (the anchor)
//! to a device never measured, from both specs and a mapping fitted on devices that measured the
//! same configurations (`perfcast eval anchor` scores the same mapping with devices left out).
//! Arguments -> a [`ProfileMap`] or a [`StepMap`] -> [`perfcast_workflow::map`] -> a table.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;

use clap::Args;
use perfcast_core::ModuleKind;
use perfcast_workflow::map::{self, ProfileMap, StepMap};

use super::devices_eval::PhaseChoice;
use crate::Ui;
use crate::output::{Format, emit, emit_json};
use crate::progress::Bars;
use crate::render;

/// Arguments of `perfcast map`.
///
/// Two modes. A profile: `--from <dataset of the anchor> --train <datasets>` maps every measured
/// module with a pair model. A network step: `--network <zoo name or file> --measured-ms T
/// --anchor <device>` maps one measured step with a bundle (`--bundle`, default
/// `checkpoints/gpu`): the measured time times the bundle's target/anchor ratio for the same
/// network, beside the plain peak-FLOP ratio.
#[derive(Debug, Args)]
pub struct MapArgs {
    /// Dataset measured on the anchor device (its `device.json` is the anchor's spec): the
    /// modules to map
    #[arg(
        long,
        required_unless_present = "measured_ms",
        conflicts_with = "measured_ms"
    )]
    pub from: Option<PathBuf>,
    /// Datasets of devices that measured the same configurations (e.g. `datasets/deepbench`),
    /// or a folder of them: the mapping is fitted on every ordered pair of them
    #[arg(long, num_args = 1.., required_unless_present = "measured_ms")]
    pub train: Vec<PathBuf>,
    /// Network mode: the step time measured on `--anchor`, ms
    #[arg(long, requires_all = ["anchor", "network"])]
    pub measured_ms: Option<f64>,
    /// Network mode: the device the step was measured on (a known name, `:TYPE` allowed)
    #[arg(long)]
    pub anchor: Option<String>,
    /// Network mode: a zoo network (`resnet50`, `resnet50@128`) or a network JSON file
    #[arg(long)]
    pub network: Option<String>,
    /// Network mode: samples per step
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// Network mode: inference (forward) or training (a whole step)
    #[arg(long, default_value = "training")]
    pub step: perfcast_core::Phase,
    /// Network mode: the bundle whose ratio maps the step
    #[arg(long, default_value = "checkpoints/gpu")]
    pub bundle: PathBuf,
    /// Target device by name (`perfcast predict --list-devices`); network mode takes a
    /// comma-separated list
    #[arg(long, conflicts_with = "device_spec")]
    pub device: Option<String>,
    /// Target device spec: perfcast's `device.json` format (may name its `software` stack) or
    /// a NeuSight config
    #[arg(long)]
    pub device_spec: Option<PathBuf>,
    /// Module kinds (default: every kind of `--from` that two `--train` devices measured)
    #[arg(long, value_delimiter = ',')]
    pub modules: Vec<ModuleKind>,
    /// Rows of which phase
    #[arg(long, value_enum, default_value_t)]
    pub phase: PhaseChoice,
    /// Also write every mapped row to this CSV (written atomically)
    #[arg(long, value_name = "CSV")]
    pub out: Option<PathBuf>,
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

/// Runs `perfcast map`.
pub fn run(a: MapArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    let interrupt = AtomicBool::new(false);
    if let Some(measured_ms) = a.measured_ms {
        return map_network(&a, measured_ms, &interrupt, ui);
    }
    let Some(from) = a.from.clone() else {
        anyhow::bail!("give `--from <dataset>` (a profile) or `--measured-ms` (a network step)");
    };
    let plan = ProfileMap {
        from,
        train: a.train.clone(),
        device: a.device.clone(),
        device_spec: a.device_spec.clone(),
        modules: a.modules.clone(),
        phase: a.phase.filter(),
        out: a.out.clone(),
    };
    let report = map::profile(&plan, Bars::new(ui).as_ref(), &interrupt)?;
    match a.format {
        Format::Json => {
            let totals: Vec<_> = report
                .totals
                .iter()
                .map(|((kind, phase), (rows, anchor_ms, predicted_ms))| {
                    serde_json::json!({ "kind": kind, "phase": phase, "rows": rows,
                        "anchor_ms": anchor_ms, "predicted_ms": predicted_ms })
                })
                .collect();
            emit_json(&serde_json::json!({
                "anchor": report.anchor, "target": report.target,
                "same_software": report.same_software,
                "rows": report.rows, "totals": totals
            }))?
        }
        Format::Text => emit(&render::devices::map(&report))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `perfcast map --measured-ms`: a step measured on the anchor, mapped to each target.
fn map_network(
    a: &MapArgs,
    measured_ms: f64,
    interrupt: &AtomicBool,
    ui: &Ui,
) -> anyhow::Result<ExitCode> {
    let plan = StepMap {
        network: a.network.clone().unwrap_or_default(),
        batch: a.batch,
        step: a.step,
        measured_ms,
        anchor: a.anchor.clone().unwrap_or_default(),
        devices: a
            .device
            .iter()
            .flat_map(|d| d.split(','))
            .map(|name| name.trim().to_string())
            .collect(),
        device_spec: a.device_spec.clone(),
        bundle: a.bundle.clone(),
    };
    let report = map::network(&plan, interrupt)?;
    let parts = &report.anchor_parts;
    let share = |ms: f64| 100.0 * ms / parts.total_ms().max(f64::MIN_POSITIVE);
    ui.info(format!(
        "`{}` at batch {} ({}) measured {} ms on `{}`; the bundle predicts {} ms there: \
         compute {:.0}%, memory {:.0}%, overhead {:.0}%",
        report.network,
        report.batch,
        report.step,
        crate::output::sig3(report.measured_ms),
        report.anchor,
        crate::output::sig3(report.anchor_ms),
        share(parts.compute_ms),
        share(parts.memory_ms),
        share(parts.overhead_ms())
    ));
    for w in &report.warnings {
        ui.info(format!("warning: {w}"));
    }
    match a.format {
        Format::Json => emit_json(&report.targets)?,
        Format::Text => emit(&render::devices::mapped_steps(&report.targets))?,
    }
    Ok(ExitCode::SUCCESS)
}
