//! `perfcast devices`: the local device spec with measured peaks.

use std::process::ExitCode;

use clap::Args;
use perfcast_profile::{Backend, probe};

use crate::Ui;
use crate::output::{Format, emit, emit_json};

/// Arguments of `perfcast devices`.
#[derive(Debug, Args)]
pub struct DevicesArgs {
    /// Backend whose GEMM measures the peak GFLOP/s
    #[arg(long, default_value = "flex")]
    backend: Backend,
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

pub fn run(args: DevicesArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    ui.info("measuring peak GFLOP/s (GEMM) and bandwidth (triad)...");
    let (spec, peaks) = probe::local_cpu(args.backend)?;
    match args.format {
        Format::Json => emit_json(&serde_json::json!({ "device": spec, "peaks": peaks }))?,
        Format::Text => {
            emit(&crate::render::devices::local(&spec, &peaks, args.backend))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
