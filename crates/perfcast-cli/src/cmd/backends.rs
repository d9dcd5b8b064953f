//! `perfcast backends compare`: the same ops timed on each CPU backend.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use perfcast_core::{Context, ModuleSpec, Phase};
use perfcast_data::Outcome;
use perfcast_profile::run::{Job, measure_job};
use perfcast_profile::sweep::Sample;
use perfcast_profile::{Backend, Sweep};
use serde::Serialize;

use crate::Ui;
use crate::output::{Format, emit, emit_json, fmt_ms, progress, sig3};

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

/// The comparison's ops: (batch, spec JSON), from FINDINGS.md's table plus ResNet-like layers.
const OPS: &[(usize, &str)] = &[
    (
        1,
        r#"{"kind":"conv2d","in_channels":3,"out_channels":64,"input_hw":56,"kernel":3,"padding":1}"#,
    ),
    (
        1,
        r#"{"kind":"conv2d","in_channels":3,"out_channels":64,"input_hw":224,"kernel":7,"stride":2,"padding":3}"#,
    ),
    (
        8,
        r#"{"kind":"conv2d","in_channels":64,"out_channels":64,"input_hw":56,"kernel":3,"padding":1}"#,
    ),
    (
        8,
        r#"{"kind":"conv2d","in_channels":128,"out_channels":128,"input_hw":28,"kernel":3,"padding":1,"groups":128}"#,
    ),
    (
        1,
        r#"{"kind":"linear","in_features":512,"out_features":512}"#,
    ),
    (
        1024,
        r#"{"kind":"linear","in_features":1024,"out_features":1024}"#,
    ),
    (1, r#"{"kind":"matmul","m":1024,"k":1024,"n":1024}"#),
    (8, r#"{"kind":"matmul","heads":8,"m":128,"k":64,"n":128}"#),
];

#[derive(Debug, Serialize)]
struct Row {
    module: String,
    batch: usize,
    phase: String,
    ms: Vec<(String, Option<f64>)>,
}

pub fn run(command: BackendsCommand, ui: &Ui) -> anyhow::Result<ExitCode> {
    let BackendsCommand::Compare(args) = command;
    let backends = Backend::CPU;
    let sweep = Sweep::default();
    let total = OPS.len() * args.phases.len() * backends.len();
    let bar = progress(ui, total as u64, "compare");
    let mut rows = Vec::new();
    for (batch, json) in OPS {
        let spec = ModuleSpec::from_json(json)?;
        for &phase in &args.phases {
            let mut ms = Vec::new();
            for backend in backends {
                bar.set_message(format!("{} {} on {backend}", spec.describe(), phase));
                let ctx = Context {
                    batch: *batch,
                    phase,
                    threads: args.threads,
                    utilisation: 0.0,
                };
                let job = Job {
                    sample: Sample {
                        spec: spec.clone(),
                        batch: ctx.batch,
                        threads: ctx.threads,
                        utilisation: 0.0,
                    },
                    phase,
                };
                let t = match measure_job(&job, backend, &sweep, f64::INFINITY) {
                    Outcome::Ok(t) => Some(t.median_ms),
                    Outcome::Failed { .. } => None,
                };
                ms.push((backend.name().to_string(), t));
                bar.inc(1);
            }
            rows.push(Row {
                module: spec.describe(),
                batch: *batch,
                phase: phase.name().into(),
                ms,
            });
        }
    }
    bar.finish_and_clear();
    if args.format == Format::Json {
        emit_json(&serde_json::json!({ "threads": args.threads, "rows": rows }))?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = format!(
        "median per call, {} thread(s)\n{:<40} {:>5} {:<9} {:>10} {:>10} {:>14}\n",
        args.threads, "module", "batch", "phase", "flex", "ndarray", "ndarray/flex"
    );
    let mut flex_wins = 0;
    let mut log_ratio_sum = 0.0;
    let mut count = 0;
    for r in &rows {
        let flex = r.ms[0].1;
        let nd = r.ms[1].1;
        let ratio = match (flex, nd) {
            (Some(f), Some(n)) => {
                flex_wins += usize::from(f < n);
                log_ratio_sum += (n / f).ln();
                count += 1;
                format!("{}x", sig3(n / f))
            }
            _ => "-".into(),
        };
        t.push_str(&format!(
            "{:<40} {:>5} {:<9} {:>10} {:>10} {:>14}\n",
            r.module,
            r.batch,
            r.phase,
            flex.map_or("failed".into(), fmt_ms),
            nd.map_or("failed".into(), fmt_ms),
            ratio
        ));
    }
    if count > 0 {
        t.push_str(&format!(
            "\nflex faster on {flex_wins} of {count}; geometric-mean ndarray/flex time ratio {}x\n",
            sig3((log_ratio_sum / count as f64).exp())
        ));
    }
    emit(&t)?;
    Ok(ExitCode::SUCCESS)
}
