//! `perfcast devices`: the local device spec with measured peaks.

use std::process::ExitCode;

use clap::Args;
use perfcast_profile::{Backend, probe};

use crate::Ui;
use crate::output::{Format, emit, emit_json, sig3};

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
            let c = &spec.caches;
            let kb = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0} KiB"));
            emit(&format!(
                "{name}\n  kind            cpu\n  cores/threads   {cores}/{threads}\n  clock           {clock:.0} MHz\n  memory          {mem:.1} GB\n  caches          L1d {l1}, L2 {l2}, L3 {l3}\n  peak fp32       {gf} GFLOP/s  (measured: {n}x{n} GEMM, {backend}, {threads} threads)\n  bandwidth       {bw} GB/s  (measured: triad over 3 x {mib} MiB)\n  dataset folder  datasets/{slug}",
                name = spec.name,
                cores = spec.cores,
                threads = spec.threads,
                clock = spec.clock_mhz,
                mem = spec.memory_gb,
                l1 = kb(c.l1d_kb),
                l2 = kb(c.l2_kb),
                l3 = kb(c.l3_kb),
                gf = sig3(spec.peak_gflops),
                n = peaks.gemm_n,
                backend = args.backend,
                bw = sig3(spec.mem_bandwidth_gbs),
                mib = peaks.triad_elems * 4 / 1048576,
                slug = spec.slug(),
            ))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
