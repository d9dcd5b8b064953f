//! `perfcast map`: PROFET-style anchor mapping of a profile measured on one device (the anchor)
//! to a device never measured, from both specs and a mapping fitted on devices that measured the
//! same configurations (`perfcast eval anchor` scores the same mapping with devices left out).
//! The mapping is [`perfcast_models::devices_eval::map_profile`].

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use perfcast_core::ModuleKind;
use perfcast_data::{DatasetDir, resolve_datasets};
use perfcast_models::devices_eval::{map_profile, write_mapped};

use super::devices_eval::PhaseChoice;
use crate::Ui;
use crate::output::{Format, emit, emit_json};
use crate::progress::Bars;
use crate::render;
use perfcast_data::import::known::target_device;

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
    if let Some(measured_ms) = a.measured_ms {
        return map_network(&a, measured_ms, ui);
    }
    let target = target_device(a.device_spec.as_deref(), a.device.as_deref())?
        .ok_or_else(|| anyhow::anyhow!("name the target with `--device` or `--device-spec`"))?;
    let Some(from) = &a.from else {
        anyhow::bail!("give `--from <dataset>` (a profile) or `--measured-ms` (a network step)");
    };
    let from = DatasetDir::open(from)?;
    let train = resolve_datasets(&a.train)?;
    let report = map_profile(
        &from,
        &train,
        &target,
        &a.modules,
        a.phase.filter(),
        Bars::new(ui).as_ref(),
    )?;
    if let Some(path) = &a.out {
        write_mapped(path, &report.rows)?;
    }
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
fn map_network(a: &MapArgs, measured_ms: f64, ui: &Ui) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        measured_ms.is_finite() && measured_ms > 0.0 && measured_ms <= 8.64e7,
        "`--measured-ms` must be a positive time of at most a day, got {measured_ms}"
    );
    let anchor_name = a.anchor.as_deref().unwrap_or_default();
    let anchor = perfcast_core::known::lookup(anchor_name)
        .map_err(|e| anyhow::anyhow!("`--anchor`: {e}"))?;
    let network_arg = a.network.as_deref().unwrap_or_default();
    let network = if std::path::Path::new(network_arg).is_file() {
        perfcast_core::Network::from_json_file(std::path::Path::new(network_arg))?
    } else {
        perfcast_core::NetworkChoice::zoo(network_arg, None)?.network
    };
    let context = perfcast_core::Context {
        batch: a.batch,
        phase: a.step,
        threads: 1,
        utilisation: 0.0,
    };
    context.validate()?;
    let mut targets = Vec::new();
    if let Some(path) = &a.device_spec {
        targets.push(perfcast_core::DeviceSpec::read_file(path)?);
    }
    for name in a.device.iter().flat_map(|d| d.split(',')) {
        targets.push(
            perfcast_core::known::lookup(name.trim())
                .map_err(|e| anyhow::anyhow!("`--device`: {e}"))?,
        );
    }
    anyhow::ensure!(
        !targets.is_empty(),
        "name the targets with `--device a,b` or `--device-spec <file>`"
    );
    let (anchor_ms, out) = perfcast_calibrate::step_map::map_step(
        &a.bundle,
        &network,
        &context,
        measured_ms,
        &anchor,
        &targets,
    )?;
    ui.info(format!(
        "`{}` at batch {} ({}) measured {} ms on `{}`; the bundle predicts {} ms there",
        network.name,
        a.batch,
        a.step,
        crate::output::sig3(measured_ms),
        anchor.name,
        crate::output::sig3(anchor_ms)
    ));
    match a.format {
        Format::Json => emit_json(&out)?,
        Format::Text => {
            let mut t = format!(
                "{:<32} {:>11} {:>11} {:>11} {:>11} {:>11}  method\n",
                "target", "mapped", "bundle x", "FLOP x", "predicted", "roofline"
            );
            for r in &out {
                t.push_str(&format!(
                    "{:<32} {:>8} ms {:>8} ms {:>8} ms {:>8} ms {:>8} ms  {}\n",
                    r.device,
                    crate::output::sig3(r.mapped_ms),
                    crate::output::sig3(r.bundle_ratio_ms),
                    crate::output::sig3(r.flop_ratio_ms),
                    crate::output::sig3(r.predicted_ms),
                    crate::output::sig3(r.roofline_ms),
                    r.method
                ));
            }
            emit(&t)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
