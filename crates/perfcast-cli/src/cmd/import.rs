//! `perfcast import`: published measurements and users' CSVs as perfcast datasets.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Args, Subcommand};
use perfcast_core::Hinted;
use perfcast_data::import::{self, Import, ImportSummary};

use crate::Ui;
use crate::output::{Format, emit, emit_json};

/// Subcommands of `perfcast import`.
#[derive(Debug, Subcommand)]
pub enum ImportCommand {
    /// NeuSight's PyTorch fp32 forward latencies (linear, bmm, conv) on five GPUs
    ///
    /// PATH is NeuSight's data folder (`linear/`, `bmm/`, `conv/`, `device_configs/`). Writes one
    /// dataset per GPU under `--out`.
    Neusight(SourceArgs),
    /// Justus et al.'s TensorFlow conv2d and dense timings on six GPUs
    ///
    /// PATH is the folder holding `conv.csv` and `dense.csv`. Writes one dataset per GPU under
    /// `--out`; the activation and optimizer of each row are dropped (a spec cannot state them).
    Justus(SourceArgs),
    /// DeepBench's fp32 conv and GEMM kernel times on eleven devices
    ///
    /// PATH is the folder holding `conv.csv` and `gemm.csv`. Only fp32 rows are imported; the
    /// rest are counted as skipped.
    Deepbench(SourceArgs),
    /// Vidur's fp16 LLM-layer kernels (GEMMs, norms, activation, add, embedding) on A100 and A40
    ///
    /// PATH is Vidur's `data/profiling` folder (or its `compute/`). Shapes are each
    /// tensor-parallel worker's shard; datasets are the GPUs seen in fp16 (`nvidia-a40-fp16`).
    Vidur(SourceArgs),
    /// Your own measurements: a CSV and a TOML mapping of its columns
    ///
    /// The mapping names the module kind, the device, the phase, the backend, the latency unit,
    /// and the CSV column or constant behind each configuration value. `--out` is one dataset
    /// directory: created, or (same device) given the kind's table; `--force` replaces a table
    /// it already holds.
    Csv(CsvArgs),
}

/// Arguments of the published-data importers.
#[derive(Debug, Args)]
pub struct SourceArgs {
    /// The data folder
    path: PathBuf,
    /// Output folder: one dataset directory per device is written under it
    #[arg(long)]
    out: PathBuf,
    /// Replace `--out` if it exists (it must hold only an earlier import)
    #[arg(long)]
    force: bool,
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

/// Arguments of `perfcast import csv`.
#[derive(Debug, Args)]
pub struct CsvArgs {
    /// The CSV file
    file: PathBuf,
    /// TOML mapping of the CSV's columns
    #[arg(long)]
    mapping: PathBuf,
    /// Dataset directory to write
    #[arg(long)]
    out: PathBuf,
    /// Replace the kind's table if the dataset already holds one
    #[arg(long)]
    force: bool,
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

pub fn run(command: ImportCommand, ui: &Ui) -> anyhow::Result<ExitCode> {
    let start = Instant::now();
    let (summary, format) = match command {
        ImportCommand::Neusight(a) => (published(&a, ui, import::neusight::import)?, a.format),
        ImportCommand::Justus(a) => (published(&a, ui, import::justus::import)?, a.format),
        ImportCommand::Deepbench(a) => (published(&a, ui, import::deepbench::import)?, a.format),
        ImportCommand::Vidur(a) => (published(&a, ui, import::vidur::import)?, a.format),
        ImportCommand::Csv(a) => {
            let mapping = import::csv::Mapping::from_file(&a.mapping)?;
            let table = a.out.join(format!("{}.parquet", mapping.kind.name()));
            if !a.force && table.exists() {
                return Err(Hinted::new(
                    format!(
                        "`{}` already holds a {} table",
                        a.out.display(),
                        mapping.kind
                    ),
                    "pass `--force` to replace it",
                )
                .into());
            }
            ui.info(format!("reading {}", a.file.display()));
            let rows = import::csv::import(&a.file, &mapping)?;
            (import::csv::write(&rows, &a.out, a.force)?, a.format)
        }
    };
    ui.info(format!(
        "imported {} rows into {} in {:.1} s",
        summary.imported,
        summary.out.display(),
        start.elapsed().as_secs_f64()
    ));
    match format {
        Format::Json => emit_json(&summary)?,
        Format::Text => emit(&crate::render::import::summary(&summary))?,
    }
    Ok(ExitCode::SUCCESS)
}

fn published(
    args: &SourceArgs,
    ui: &Ui,
    read: fn(&Path) -> perfcast_data::Result<Import>,
) -> anyhow::Result<ImportSummary> {
    // Refuse an existing output before reading, not after.
    import::refuse_existing(&args.out, args.force)?;
    ui.info(format!("reading {}", args.path.display()));
    let rows = read(&args.path)?;
    Ok(rows.write(&args.out, args.force)?)
}
