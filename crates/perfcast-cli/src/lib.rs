//! The `perfcast` command line: clap definitions and the commands behind them.
//!
//! The binary's `main` is [`main_entry`]; it lives in this library so the end-to-end tests
//! crate can build the same binary. Data goes to stdout, logs and progress bars to stderr.
//! Exit codes: 0 success, 1 a check that failed, 2 an error.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

pub mod alloc;
mod cmd;
mod output;
mod plot;
mod progress;
mod render;

pub use output::Format;

/// Predicts how long DNN layers and networks take to run, from measurements.
#[derive(Debug, Parser)]
#[command(name = "perfcast", version, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

/// Options every command takes.
#[derive(Debug, Args)]
#[command(next_help_heading = "Global options")]
pub struct Global {
    /// More log output on stderr (repeat for more)
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Only errors on stderr
    #[arg(short, long, global = true)]
    quiet: bool,
    /// Hide progress bars
    #[arg(long, global = true)]
    no_progress: bool,
    /// When to use colour
    #[arg(long, global = true, value_enum, default_value_t = Color::Auto)]
    color: Color,
}

/// Colour choice.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Color {
    /// Colour when stderr is a terminal
    Auto,
    /// Always colour
    Always,
    /// Never colour
    Never,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show this machine's device spec, with peak GFLOP/s and bandwidth measured now
    Devices(cmd::devices::DevicesArgs),
    /// Measure modules on this device and store them as a dataset
    ///
    /// Draws configurations per module kind (built-in ranges, or a sweep TOML), measures each
    /// in the inference and training phases, and appends every row to
    /// `<out>/<module>.parquet` the moment it is measured. Safe to kill: rerun with `--resume`.
    Profile(cmd::profile::ProfileArgs),
    /// Inspect and check datasets
    #[command(subcommand)]
    Datasets(cmd::datasets::DatasetsCommand),
    /// Compare burn's CPU backends on conv, linear and matmul
    #[command(subcommand)]
    Backends(cmd::backends::BackendsCommand),
    /// Import published measurements, or your own CSV, as perfcast datasets
    ///
    /// Writes one dataset directory per device. The output is built beside `--out` and renamed
    /// into place, so a failed import leaves nothing behind.
    #[command(subcommand)]
    Import(cmd::import::ImportCommand),
    /// Fit regressors per module kind on a dataset, score them, save them
    ///
    /// Holds out `--test-share` of the rows (at random or by configuration group), cross-validates
    /// every model on the rest, fits it, scores it on the held-out rows, times its predictions,
    /// and writes `<out>/<module>/<model>.json` plus `report.json`.
    Train(cmd::train::TrainArgs),
    /// Score models saved by `perfcast train` on another dataset, or whole networks
    ///
    /// `perfcast eval --models <dir> --data <dataset>` scores saved models;
    /// `perfcast eval networks --networks lenet5,vgg16@112 --batch 1,8` measures networks on
    /// this machine and predicts them from a bundle, side by side.
    #[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
    Eval(cmd::networks::EvalCommand),
    /// Measure whole networks end to end on this machine (forward, or a training step)
    ///
    /// Builds each network in burn from the same description `predict` decomposes, runs
    /// warm-up and timed repetitions, and reports the median and spread per run.
    Measure(cmd::networks::MeasureArgs),
    /// Fit a bundle's network host-cost terms from measured networks
    ///
    /// Measures (or reads, `--from`) whole-network runs, predicts each as the sum of its layers,
    /// and fits per phase a per-run cost, a per-layer cost, a scale on the sum and (training)
    /// the optimiser update per parameter; the terms go into the bundle's manifest.
    Calibrate(cmd::networks::CalibrateArgs),
    /// Predict the latency of modules or whole networks from a bundle
    ///
    /// A module from flags (`perfcast predict conv2d --batch 8 --input 3x224x224 --out-channels
    /// 64 --kernel 7 --stride 2 --padding 3`), modules from a JSON file, or a network from the
    /// zoo (`--network vgg16 --batch 32`) or a JSON file: a per-layer table with the total.
    Predict(cmd::predict::PredictArgs),
    /// Map a profile measured on one device to another device from both specs (PROFET-style)
    ///
    /// `perfcast map --from <dataset of the anchor device> --train datasets/deepbench --device
    /// v100` fits the anchor mapping on every pair of `--train` devices (the configurations
    /// they all measured) and predicts each `--from` row on the target, with the roofline
    /// ratio beside it; `perfcast eval anchor` scores the same mapping with devices left out.
    Map(cmd::map::MapArgs),
    /// Profile this machine, train every model, auto-select, write `checkpoints/local/`
    ///
    /// The first thing to run: a small sweep over every kind the zoo networks use (minutes;
    /// resumable), every candidate trained and cross-validated, the best per kind written as
    /// a bundle, and predictions for a few zoo networks.
    Quickstart(cmd::quickstart::QuickstartArgs),
    /// Inspect bundles written by `perfcast train --bundle`
    #[command(subcommand)]
    Bundle(cmd::predict::BundleCommand),
    /// Training time on several devices: the analytical data-parallel model, and the generic
    /// expression T(p, b, n) fitted to measured runs
    #[command(subcommand)]
    Scale(cmd::scale::ScaleCommand),
    /// Plan a training job: step time, memory per GPU and cost per device, GPU count and
    /// parallel layout (data x tensor x pipeline)
    ///
    /// For every device and GPU count, every layout DP x TP x PP = GPUs (Megatron-LM tensor
    /// parallelism, GPipe and 1F1B pipelines balanced by predicted layer times, data parallel
    /// on top), with micro-batches and recomputation chosen per layout: the step time split
    /// into compute, exposed communication, pipeline bubble and optimiser update, the peak
    /// memory per GPU and whether it fits, samples/s and cost per 1,000 steps. Compute comes
    /// from the bundle's per-layer training-step predictions for each device.
    Plan(cmd::plan::PlanArgs),
    /// Fit collectives (all-reduce, send/recv) to measured NCCL timings, and check the fits
    ///
    /// `perfcast collectives fit all_reduce.csv send_recv.csv --out a100-dgx.json` writes the
    /// fits `plan` and `scale predict` use with `--collectives`; `perfcast collectives eval`
    /// prints their error on held-out messages and GPU counts.
    #[command(subcommand)]
    Collectives(cmd::collectives::CollectivesCommand),
    /// Serve a bundle over HTTP: module and network predictions as JSON
    ///
    /// `POST /v1/predict` (`{"module": {...}}` or `{"modules": [...]}` with `batch`, `phase`,
    /// `threads`), `POST /v1/predict/network` (`{"network": "vgg16", "batch": 8}` or a network
    /// in JSON), `GET /v1/bundle`, `GET /healthz`. Binds loopback by default; stops cleanly on
    /// SIGINT or SIGTERM.
    Serve(cmd::serve::ServeArgs),
    /// Drive a running `perfcast serve` on loopback and report throughput, latency and errors
    ///
    /// A bounded number of requests within a bounded time over keep-alive connections, valid
    /// and malformed ones mixed; a valid request not answered 200 or a malformed one not
    /// answered 4xx is an error (exit 1), as is a server not healthy afterwards.
    Loadtest(cmd::serve::LoadtestArgs),
}

/// Shared state of one invocation: verbosity and whether to draw progress.
#[derive(Debug, Clone)]
pub struct Ui {
    /// Suppress informational messages.
    pub quiet: bool,
    /// Extra detail.
    pub verbose: u8,
    /// Draw progress bars.
    pub progress: bool,
    /// Colour stderr output.
    pub color: bool,
}

impl Ui {
    /// Prints an informational line to stderr unless quiet.
    pub fn info(&self, message: impl std::fmt::Display) {
        if !self.quiet {
            eprintln!("{message}");
        }
    }
}

/// Runs the command line and returns the process exit code.
/// Longest line of an error message: values from the input are echoed, and a line must stay
/// readable whatever the input held.
const MAX_ERROR_LINE: usize = 1000;

/// `message` with every line cut to [`MAX_ERROR_LINE`] bytes, saying how much was cut.
fn clip_lines(message: &str) -> String {
    message
        .lines()
        .map(|line| perfcast_data::clip_text(line, MAX_ERROR_LINE))
        .collect::<Vec<_>>()
        .join("\n")
}

pub fn main_entry() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let stderr_tty = std::io::stderr().is_terminal();
    let ui = Ui {
        quiet: cli.global.quiet,
        verbose: cli.global.verbose,
        progress: !cli.global.no_progress && !cli.global.quiet && stderr_tty,
        color: match cli.global.color {
            Color::Always => true,
            Color::Never => false,
            Color::Auto => stderr_tty && std::env::var_os("NO_COLOR").is_none(),
        },
    };
    let result = match cli.command {
        Command::Devices(args) => cmd::devices::run(args, &ui),
        Command::Profile(args) => cmd::profile::run(args, &ui),
        Command::Datasets(c) => cmd::datasets::run(c, &ui),
        Command::Backends(c) => cmd::backends::run(c, &ui),
        Command::Import(c) => cmd::import::run(c, &ui),
        Command::Train(args) => cmd::train::train(args, &ui),
        Command::Eval(c) => cmd::networks::eval(c, &ui),
        Command::Measure(args) => cmd::networks::run_measure(args, &ui),
        Command::Calibrate(args) => cmd::networks::calibrate(args, &ui),
        Command::Predict(args) => cmd::predict::predict(args, &ui),
        Command::Map(args) => cmd::map::run(args, &ui),
        Command::Quickstart(args) => cmd::quickstart::run(args, &ui),
        Command::Bundle(c) => cmd::predict::bundle(c, &ui),
        Command::Scale(c) => cmd::scale::run(c, &ui),
        Command::Plan(args) => cmd::plan::run(args, &ui),
        Command::Collectives(c) => cmd::collectives::run(c, &ui),
        Command::Serve(args) => cmd::serve::serve(args, &ui),
        Command::Loadtest(args) => cmd::serve::loadtest(args, &ui),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            if is_broken_pipe(&err) {
                return ExitCode::SUCCESS;
            }
            let prefix = if ui.color {
                "\x1b[1;31merror\x1b[0m"
            } else {
                "error"
            };
            eprintln!("{prefix}: {}", clip_lines(&format!("{err:#}")));
            // Ctrl-C ends with the shell's code for SIGINT, whatever step it stopped.
            let interrupted = err.chain().any(|c| {
                matches!(
                    c.downcast_ref::<perfcast_select::Error>(),
                    Some(perfcast_select::Error::Interrupted(_))
                ) || matches!(
                    c.downcast_ref::<perfcast_profile::Error>(),
                    Some(perfcast_profile::Error::Interrupted { .. })
                ) || matches!(
                    c.downcast_ref::<perfcast_workflow::Error>(),
                    Some(
                        perfcast_workflow::Error::Interrupted { .. }
                            | perfcast_workflow::Error::Stopped(_)
                    )
                )
            });
            ExitCode::from(if interrupted { 130 } else { 2 })
        }
    }
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
