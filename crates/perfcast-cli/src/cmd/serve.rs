//! `perfcast serve` (the HTTP prediction service) and `perfcast loadtest` (its load generator).

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use perfcast_select::Predictor;
use perfcast_serve::loadtest::{LoadConfig, LoadKind};
use perfcast_serve::{
    DEFAULT_BODY_LIMIT, DEFAULT_BODY_TIMEOUT, DEFAULT_HEADER_TIMEOUT, DEFAULT_IDLE_TIMEOUT,
    DEFAULT_ONNX_LIMIT, DEFAULT_REQUEST_TIMEOUT, DEFAULT_SHUTDOWN_TIMEOUT, ServeConfig,
};

use crate::Ui;
use crate::cmd::predict::load_bundle;
use crate::output::{Format, emit, emit_json, sig3};

/// Arguments of `perfcast serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Bundle directory written by `perfcast train --bundle` or `perfcast quickstart`
    #[arg(long, default_value = "checkpoints/local")]
    bundle: PathBuf,
    /// Serve predictions for this known device (a cross-device bundle such as
    /// `checkpoints/gpu`), optionally in a data type: `h100`, `h100:bf16`
    #[arg(long, value_name = "NAME[:TYPE]", conflicts_with = "device_spec")]
    device: Option<String>,
    /// Serve predictions for the device of this spec file
    #[arg(long, value_name = "FILE.json")]
    device_spec: Option<PathBuf>,
    /// Data type the device's modules compute in (fp32, tf32, fp16, bf16); needs `--device`
    /// or `--device-spec`
    #[arg(long, value_name = "TYPE")]
    dtype: Option<perfcast_core::DType>,
    /// Address to listen on (loopback by default; port 0 picks a free port and prints it)
    #[arg(long, default_value = "127.0.0.1:8787")]
    addr: SocketAddr,
    /// Worker threads [default: the available cores]
    #[arg(long)]
    threads: Option<usize>,
    /// Largest request body, KiB
    #[arg(long, default_value_t = DEFAULT_BODY_LIMIT / 1024)]
    max_body_kb: usize,
    /// Largest ONNX file `POST /v1/predict/onnx` takes, MiB
    #[arg(long, default_value_t = DEFAULT_ONNX_LIMIT >> 20)]
    max_onnx_mb: usize,
    /// Seconds for a request head to arrive whole (from the connection's start or the request's first byte); then the connection is closed
    #[arg(long, default_value_t = DEFAULT_HEADER_TIMEOUT.as_secs_f64())]
    header_timeout_s: f64,
    /// Seconds for a request body to arrive whole, from its head; then 408
    #[arg(long, default_value_t = DEFAULT_BODY_TIMEOUT.as_secs_f64())]
    body_timeout_s: f64,
    /// Seconds a keep-alive connection may wait for its next request
    #[arg(long, default_value_t = DEFAULT_IDLE_TIMEOUT.as_secs_f64())]
    idle_timeout_s: f64,
    /// Seconds, after SIGINT or SIGTERM, for requests in flight to finish before every connection is dropped
    #[arg(long, default_value_t = DEFAULT_SHUTDOWN_TIMEOUT.as_secs_f64())]
    shutdown_timeout_s: f64,
    /// Seconds a request's work (an ONNX import, a large network or module batch) may take once its body is read; then 503
    #[arg(long, default_value_t = DEFAULT_REQUEST_TIMEOUT.as_secs_f64())]
    request_timeout_s: f64,
}

/// `--max-body-kb` in bytes.
fn body_limit(kb: usize) -> anyhow::Result<usize> {
    kb.checked_mul(1024)
        .ok_or_else(|| anyhow::anyhow!("`--max-body-kb` is too large, got {kb}"))
}

/// A positive number of seconds, at most a day, as a duration.
fn seconds(flag: &str, s: f64) -> anyhow::Result<Duration> {
    anyhow::ensure!(
        s.is_finite() && s > 0.0 && s <= 86_400.0,
        "`--{flag}` must be in (0, 86400] seconds, got {s}"
    );
    Ok(Duration::from_secs_f64(s))
}

/// `perfcast serve`: loads the bundle, binds, prints the address, serves until SIGINT or
/// SIGTERM, then finishes in-flight requests and exits 0.
pub fn serve(a: ServeArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        a.max_body_kb >= 1,
        "`--max-body-kb` must be at least 1, got {}",
        a.max_body_kb
    );
    if let Some(t) = a.threads {
        anyhow::ensure!(
            (1..=MAX_THREADS).contains(&t),
            "`--threads` must be from 1 to {MAX_THREADS}, got {t}"
        );
    }
    let bundle =
        match perfcast_core::known::target_device(a.device_spec.as_deref(), a.device.as_deref())? {
            Some(device) => {
                let device = match a.dtype {
                    Some(dtype) => device.at_dtype(dtype)?,
                    None => device,
                };
                ui.info(format!(
                    "perfcast serve: predicting for `{}` in {}",
                    device.name, device.dtype
                ));
                perfcast_select::Bundle::load_for_device(&a.bundle, &device)?
            }
            None => {
                anyhow::ensure!(
                    a.dtype.is_none(),
                    "`--dtype` needs a GPU: pass `--device <name>` or `--device-spec <file>`"
                );
                load_bundle(&a.bundle)?
            }
        };
    let kinds = bundle.kinds().count();
    let predictor = Arc::new(Predictor::new(bundle));
    let config = ServeConfig {
        addr: a.addr,
        threads: a.threads.unwrap_or(ServeConfig::default().threads),
        body_limit: body_limit(a.max_body_kb)?,
        onnx_limit: a.max_onnx_mb.saturating_mul(1 << 20),
        header_timeout: seconds("header-timeout-s", a.header_timeout_s)?,
        body_timeout: seconds("body-timeout-s", a.body_timeout_s)?,
        idle_timeout: seconds("idle-timeout-s", a.idle_timeout_s)?,
        shutdown_timeout: seconds("shutdown-timeout-s", a.shutdown_timeout_s)?,
        request_timeout: seconds("request-timeout-s", a.request_timeout_s)?,
    };
    if !a.addr.ip().is_loopback() {
        ui.info(format!(
            "warning: listening on `{}`, which is not a loopback address: other machines can reach it",
            a.addr
        ));
    }
    let threads = config.threads;
    let bundle_dir = a.bundle.display().to_string();
    perfcast_serve::run(predictor, &config, |addr| {
        // Always printed (tests and scripts read the port when `--addr` ends in `:0`).
        let mut err = std::io::stderr().lock();
        let _ = writeln!(
            err,
            "perfcast serve: listening on http://{addr} (bundle `{bundle_dir}`, {kinds} kinds, {threads} worker thread{})",
            if threads == 1 { "" } else { "s" }
        );
        let _ = err.flush();
    })?;
    ui.info("perfcast serve: shut down");
    Ok(ExitCode::SUCCESS)
}

/// Endpoint of the valid requests of a load test.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Kind {
    /// `POST /v1/predict`, one module per request
    Module,
    /// `POST /v1/predict/network`, one zoo network per request
    Network,
}

/// Arguments of `perfcast loadtest`.
#[derive(Debug, Args)]
pub struct LoadtestArgs {
    /// Address of a running `perfcast serve` (loopback)
    #[arg(long, default_value = "127.0.0.1:8787")]
    addr: SocketAddr,
    /// Most requests to send
    #[arg(long, default_value_t = 100_000)]
    requests: u64,
    /// Longest time to send them in, seconds
    #[arg(long, default_value_t = 10.0)]
    duration_s: f64,
    /// Connections, each with one request in flight (or `--pipeline` of them)
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Requests each connection writes back to back before reading their answers (HTTP/1.1
    /// pipelining, fewer system calls per request); above 1 needs `--invalid-share 0`
    #[arg(long, default_value_t = 1)]
    pipeline: usize,
    /// Share of malformed requests, in [0, 1] (each must be answered 4xx)
    #[arg(long, default_value_t = 0.1)]
    invalid_share: f64,
    /// Endpoint of the valid requests
    #[arg(long, value_enum, default_value_t = Kind::Module)]
    kind: Kind,
    /// The server's `--max-body-kb`: one malformed request in 50 is a byte over it
    #[arg(long, default_value_t = DEFAULT_BODY_LIMIT / 1024)]
    max_body_kb: usize,
    /// Seed of the request mix
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Allow a server address that is not on this machine's loopback
    #[arg(long)]
    allow_remote: bool,
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

/// Most worker threads `serve` starts: each holds a stack and a predictor's scratch, and a
/// count past this is a typo (100,000 took gigabytes).
const MAX_THREADS: usize = 1024;
/// Most connections `loadtest` opens at once (each a thread and a socket).
const MAX_CONCURRENCY: usize = 4096;

/// `perfcast loadtest`: drives a server with a bounded request count and time, reports
/// throughput, latency and errors; exits 1 when any request failed its check or the server
/// is not healthy afterwards.
pub fn loadtest(a: LoadtestArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    if !(a.addr.ip().is_loopback() || a.allow_remote) {
        return Err(perfcast_core::Hinted::new(
            format!("`--addr {}` is not a loopback address", a.addr),
            "load tests drive a server on this machine; pass `--allow-remote` to aim elsewhere",
        )
        .into());
    }
    anyhow::ensure!(
        a.duration_s.is_finite() && a.duration_s > 0.0 && a.duration_s <= 3600.0,
        "`--duration-s` must be in (0, 3600], got {}",
        a.duration_s
    );
    anyhow::ensure!(
        (1..=MAX_CONCURRENCY).contains(&a.concurrency),
        "`--concurrency` must be from 1 to {MAX_CONCURRENCY}, got {}",
        a.concurrency
    );
    let config = LoadConfig {
        addr: a.addr,
        requests: a.requests,
        duration: Duration::from_secs_f64(a.duration_s),
        concurrency: a.concurrency,
        pipeline: a.pipeline,
        invalid_share: a.invalid_share,
        kind: match a.kind {
            Kind::Module => LoadKind::Module,
            Kind::Network => LoadKind::Network,
        },
        body_limit: body_limit(a.max_body_kb)?,
        seed: a.seed,
    };
    ui.info(format!(
        "loadtest: up to {} requests in {} s over {} connections{} to http://{} ({}% malformed)",
        a.requests,
        a.duration_s,
        a.concurrency,
        if a.pipeline > 1 {
            format!(", {} pipelined on each", a.pipeline)
        } else {
            String::new()
        },
        a.addr,
        sig3(100.0 * a.invalid_share)
    ));
    let report = perfcast_serve::loadtest::run(&config)?;
    match a.format {
        Format::Json => emit_json(&report)?,
        Format::Text => emit(&crate::render::serve::loadtest(&report))?,
    }
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
