//! `perfcast eval bundle`: a bundle's answers scored on measured rows of any device.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use perfcast_core::ModuleKind;
use perfcast_select::{Bundle, KindScore, Predictor, score_records};
use serde::Serialize;

use crate::Ui;
use crate::cmd::devices_eval::PhaseChoice;
use crate::output::{Format, emit, emit_json};
use perfcast_data::resolve_datasets;

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
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// One device's scores.
#[derive(Debug, Serialize)]
struct DeviceScores {
    device: String,
    dataset: String,
    kinds: Vec<KindScore>,
}

/// Runs `perfcast eval bundle`.
pub fn run(a: EvalBundleArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    let mut out = Vec::new();
    for dir in resolve_datasets(&a.data)? {
        let device = dir.device()?;
        let predictor = Predictor::new(Bundle::load_for_device(&a.bundle, &device)?);
        let mut records = Vec::new();
        for kind in dir.kinds() {
            if a.modules.is_empty() || a.modules.contains(&kind) {
                records.extend(dir.read(kind)?);
            }
        }
        ui.info(format!(
            "{}: {} rows of {}",
            device.name,
            records.len(),
            dir.root().display()
        ));
        out.push(DeviceScores {
            device: device.name.clone(),
            dataset: dir.root().display().to_string(),
            kinds: score_records(&predictor, &records, a.phase.phase())?,
        });
    }
    match a.format {
        Format::Json => emit_json(&out)?,
        Format::Text => emit(&render(&out))?,
    }
    Ok(ExitCode::SUCCESS)
}

fn render(devices: &[DeviceScores]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<28} {:<12} {:<9} {:>6} {:<14} {:>7} {:>8} {:>7} {:>8} {:>6}",
        "device",
        "kind",
        "phase",
        "rows",
        "model",
        "MAPE %",
        "pred/meas",
        "raised",
        "fallback",
        "below"
    );
    for d in devices {
        for k in &d.kinds {
            let _ = writeln!(
                s,
                "{:<28} {:<12} {:<9} {:>6} {:<14} {:>7.1} {:>9.2} {:>7} {:>8} {:>6}",
                d.device,
                k.kind.name(),
                k.phase.to_string(),
                k.metrics.n,
                k.model,
                k.metrics.mape,
                k.median_ratio,
                k.raised,
                k.fallback,
                k.below_bound
            );
        }
    }
    s.push_str(
        "pred/meas: median ratio of predicted to measured; raised: model answers below the spec \
         bound, raised to it; below: answers still below it (always 0 on a GPU bundle)",
    );
    s
}
