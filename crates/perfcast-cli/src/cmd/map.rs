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
#[derive(Debug, Args)]
pub struct MapArgs {
    /// Dataset measured on the anchor device (its `device.json` is the anchor's spec): the
    /// modules to map
    #[arg(long)]
    pub from: PathBuf,
    /// Datasets of devices that measured the same configurations (e.g. `datasets/deepbench`),
    /// or a folder of them: the mapping is fitted on every ordered pair of them
    #[arg(long, required = true, num_args = 1..)]
    pub train: Vec<PathBuf>,
    /// Target device by name (`perfcast predict --list-devices`)
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
    let target = target_device(a.device_spec.as_deref(), a.device.as_deref())?
        .ok_or_else(|| anyhow::anyhow!("name the target with `--device` or `--device-spec`"))?;
    let from = DatasetDir::open(&a.from)?;
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
