//! `perfcast collectives fit | eval`: NCCL timings (Vidur's network CSVs) -> latency-bandwidth
//! fits per collective and node count ([`perfcast_scale::measured`]) -> a JSON file `plan` and
//! `scale predict` read with `--collectives`, or the held-out splits as a table.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use perfcast_scale::measured::{Sample, evaluate, read_samples};
use perfcast_scale::{Collectives, Link};
use serde::Serialize;

use crate::Ui;
use crate::output::{Format, emit, emit_json};
use crate::render;

/// `perfcast collectives ...`.
#[derive(Debug, Subcommand)]
pub enum CollectivesCommand {
    /// Fit the latency-bandwidth model of each collective to measured timings
    ///
    /// Reads Vidur network CSVs (`num_workers`, `devices_per_node`, `size` in fp16 elements,
    /// `collective`, `time_stats.<collective>.median` in ms) and fits per collective and node
    /// count time = overhead + latency x steps(p) + volume(p) x bytes / bus bandwidth, with
    /// ring factors, one line or two around a protocol switch, the form chosen on the largest
    /// messages held out. Writes the fits as JSON (replaced atomically).
    Fit(FitArgs),
    /// Fit on part of the timings and report the error on the rest
    ///
    /// Per collective and node count: messages up to 16 MiB predicting larger ones, and, where
    /// three or more GPU counts were measured, the smaller counts predicting the largest.
    Eval(EvalArgs),
}

/// Arguments of `perfcast collectives fit`.
#[derive(Debug, Args)]
pub struct FitArgs {
    /// Timing CSVs (e.g. `all_reduce.csv send_recv.csv` of one machine)
    #[arg(required = true)]
    csv: Vec<PathBuf>,
    /// The machine or topology the timings are from; default: the CSVs' folder name
    #[arg(long)]
    name: Option<String>,
    /// JSON file to write (replaced atomically)
    #[arg(long)]
    out: PathBuf,
    /// Output format of the summary on stdout
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

/// Arguments of `perfcast collectives eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Timing CSVs
    #[arg(required = true)]
    csv: Vec<PathBuf>,
    /// Link whose alpha-beta formula is scored on the same held-out rows inside a node
    /// (pcie4, nvlink, ..., or GBPS:US)
    #[arg(long, default_value = "nvlink")]
    link: String,
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

pub fn run(c: CollectivesCommand, ui: &Ui) -> anyhow::Result<ExitCode> {
    match c {
        CollectivesCommand::Fit(a) => fit(a, ui),
        CollectivesCommand::Eval(a) => eval(a),
    }
}

fn read_all(paths: &[PathBuf]) -> anyhow::Result<Vec<Sample>> {
    let mut out = Vec::new();
    for p in paths {
        out.extend(read_samples(p)?);
    }
    Ok(out)
}

fn fit(a: FitArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    let samples = read_all(&a.csv)?;
    let name = a.name.clone().unwrap_or_else(|| {
        a.csv[0]
            .parent()
            .and_then(|p| p.file_name())
            .map_or("measured".into(), |n| n.to_string_lossy().replace('_', "-"))
    });
    let sources = a.csv.iter().map(|p| p.display().to_string()).collect();
    let fits = Collectives::fit(&name, sources, &samples)?;
    fits.write(&a.out)?;
    ui.info(format!(
        "wrote {} fit(s) to `{}`; use them with `perfcast plan --collectives {}`",
        fits.fits.len(),
        a.out.display(),
        a.out.display()
    ));
    match a.format {
        Format::Json => emit_json(&fits)?,
        Format::Text => emit(&render::collectives::fits(&fits))?,
    }
    Ok(ExitCode::SUCCESS)
}

fn eval(a: EvalArgs) -> anyhow::Result<ExitCode> {
    let link = Link::parse(&a.link).with_context(|| format!("`--link {}`", a.link))?;
    let samples = read_all(&a.csv)?;
    let splits = evaluate(&samples, Some(&link))?;
    match a.format {
        Format::Json => {
            #[derive(Serialize)]
            struct Out<'a> {
                sources: &'a [PathBuf],
                link: &'a Link,
                splits: &'a [perfcast_scale::measured::SplitReport],
            }
            emit_json(&Out {
                sources: &a.csv,
                link: &link,
                splits: &splits,
            })?
        }
        Format::Text => emit(&render::collectives::splits(&a.csv, &link, &splits))?,
    }
    Ok(ExitCode::SUCCESS)
}
