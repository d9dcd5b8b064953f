//! `perfcast eval bundle`: a bundle's answers scored on measured rows of any device
//! ([`perfcast_calibrate::score_datasets`]).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use perfcast_calibrate::score_datasets;
use perfcast_core::ModuleKind;
use perfcast_data::resolve_datasets;

use crate::Ui;
use crate::cmd::devices_eval::PhaseChoice;
use crate::output::{Format, emit, emit_json};
use crate::progress::Bars;
use crate::render;

/// Arguments of `perfcast eval bundle`.
#[derive(Debug, Args)]
pub struct EvalBundleArgs {
    /// The bundle to score (`checkpoints/gpu`)
    #[arg(long)]
    pub bundle: PathBuf,
    /// Dataset directories, one per device, or folders of them (`datasets/deepbench`); each is
    /// predicted for its own device's spec
    #[arg(long, required = true, num_args = 1..)]
    pub data: Vec<PathBuf>,
    /// Module kinds (default: every kind of the datasets)
    #[arg(long, value_delimiter = ',')]
    pub modules: Vec<ModuleKind>,
    /// Rows of which phase
    #[arg(long, value_enum, default_value_t = PhaseChoice::All)]
    pub phase: PhaseChoice,
    /// Also write every scored row (device, kind, phase, module, batch, measured, predicted,
    /// spec bound) to this CSV file
    #[arg(long, value_name = "FILE.csv")]
    pub rows: Option<PathBuf>,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// Runs `perfcast eval bundle`.
pub fn run(a: EvalBundleArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    let dirs = resolve_datasets(&a.data)?;
    let out = score_datasets(
        &a.bundle,
        &dirs,
        &a.modules,
        a.phase.filter().phase(),
        Bars::new(ui).as_ref(),
    )?;
    if let Some(path) = &a.rows {
        let records: Vec<Vec<String>> = out
            .iter()
            .flat_map(|d| {
                d.rows.iter().map(|r| {
                    vec![
                        d.device.clone(),
                        r.kind.to_string(),
                        r.phase.to_string(),
                        r.module.clone(),
                        r.batch.to_string(),
                        r.measured_ms.to_string(),
                        r.predicted_ms.to_string(),
                        r.bound_ms.to_string(),
                    ]
                })
            })
            .collect();
        perfcast_data::write_csv(
            path,
            &[
                "device",
                "kind",
                "phase",
                "module",
                "batch",
                "measured_ms",
                "predicted_ms",
                "bound_ms",
            ],
            &records,
        )?;
        ui.info(format!("wrote the scored rows to {}", path.display()));
    }
    match a.format {
        Format::Json => emit_json(&out)?,
        Format::Text => emit(&render::bundle_eval::bundle_scores(&out))?,
    }
    Ok(ExitCode::SUCCESS)
}
