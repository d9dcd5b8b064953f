//! `perfcast backends compare`: the same ops timed on each CPU backend
//! ([`perfcast_profile::backends`]).

use std::process::ExitCode;

use clap::{Args, Subcommand};
use perfcast_core::Phase;
use perfcast_profile::backends::compare_backends;

use crate::Ui;
use crate::output::{Format, emit, emit_json};
use crate::progress::Bars;
use crate::render;

/// Subcommands of `perfcast backends`.
#[derive(Debug, Subcommand)]
pub enum BackendsCommand {
    /// Time conv, linear and matmul configurations on every CPU backend
    Compare(CompareArgs),
}

/// Arguments of `perfcast backends compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Compute threads
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Phases to time, comma-separated
    #[arg(long, value_delimiter = ',', default_value = "inference,training")]
    phases: Vec<Phase>,
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

pub fn run(command: BackendsCommand, ui: &Ui) -> anyhow::Result<ExitCode> {
    let BackendsCommand::Compare(args) = command;
    let rows = compare_backends(args.threads, &args.phases, Bars::new(ui).as_ref())?;
    match args.format {
        Format::Json => emit_json(&serde_json::json!({ "threads": args.threads, "rows": rows }))?,
        Format::Text => emit(&render::backends::compare(&rows, args.threads))?,
    }
    Ok(ExitCode::SUCCESS)
}
