//! `perfcast predict` and `perfcast bundle show | bench` as text.

use perfcast_calibrate::bench::BenchLine;
use perfcast_core::Context;
use perfcast_core::Phase;
use perfcast_select::{Manifest, ModulePrediction, NetworkPrediction};
use serde::Serialize;

use crate::output::{fmt_ms, sig3};

/// A module prediction with its query, for output.
#[derive(Debug, Serialize)]
pub struct ModuleRow {
    /// The module, described.
    pub module: String,
    /// Its context.
    pub context: Context,
    /// The prediction.
    #[serde(flatten)]
    pub prediction: ModulePrediction,
}

/// Module predictions: one line per query.
pub fn modules(rows: &[ModuleRow]) -> String {
    let mut t = format!(
        "{:<44} {:>6} {:<10} {:>12} {:<10}\n",
        "module", "batch", "phase", "predicted", "model"
    );
    for r in rows {
        t.push_str(&format!(
            "{:<44} {:>6} {:<10} {:>12} {:<10}\n",
            r.module,
            r.context.batch,
            r.context.phase.name(),
            fmt_ms(r.prediction.ms),
            r.prediction.model
        ));
    }
    t
}

/// A network's per-layer table with the total: the plain sum of its layers, or, with the
/// bundle's host-cost terms, the composed total term by term.
pub fn network(p: &NetworkPrediction) -> String {
    // Columns as wide as their longest entry, never narrower than the usual layer names and
    // module descriptions (imported graphs have long names; marked layers long descriptions).
    let nw = p
        .layers
        .iter()
        .map(|l| l.name.chars().count())
        .fold(24, usize::max);
    let mw = p
        .layers
        .iter()
        .map(|l| l.module.chars().count())
        .fold(44, usize::max);
    let mut t = format!(
        "{} (batch {}, {}, {} thread{})\n{:<nw$} {:<mw$} {:>11} {:>6}  {}\n",
        p.network,
        p.context.batch,
        p.context.phase.name(),
        p.context.threads,
        if p.context.threads == 1 { "" } else { "s" },
        "layer",
        "module",
        "predicted",
        "share",
        "model"
    );
    for l in &p.layers {
        t.push_str(&format!(
            "{:<nw$} {:<mw$} {:>11} {:>5}%  {}{}\n",
            l.name,
            l.module,
            fmt_ms(l.prediction.ms),
            sig3(100.0 * l.prediction.ms / p.layer_sum_ms),
            l.prediction.model,
            if l.prediction.fallback {
                " (fallback)"
            } else {
                ""
            }
        ));
    }
    // A fused prediction's rows are kernels, several layers each.
    let rows = if p.fusion.is_some() {
        "kernels"
    } else {
        "layers"
    };
    match &p.composed {
        None => t.push_str(&format!(
            "{:<nw$} {:<mw$} {:>11}\n",
            "total",
            format!("{} {rows}", p.layers.len()),
            fmt_ms(p.total_ms)
        )),
        Some(c) => {
            let terms = [
                (
                    "layers",
                    format!("sum of {} {rows}", p.layers.len()),
                    c.layer_sum_ms,
                ),
                (
                    "host: per run",
                    "setup, input, loss".to_string(),
                    c.per_run_ms,
                ),
                (
                    "host: per layer",
                    "dispatch and allocation between layers".to_string(),
                    c.dispatch_ms,
                ),
                (
                    "host: layer scale",
                    "cache effects across layers".to_string(),
                    c.scale_ms,
                ),
                (
                    "host: update",
                    "optimiser step over parameters".to_string(),
                    c.update_ms,
                ),
                (
                    "host: input copy",
                    "the batch copied host to device".to_string(),
                    c.copy_ms,
                ),
                (
                    "per-sample grads",
                    "weight gradients per sample, then summed".to_string(),
                    c.per_sample_grads_ms,
                ),
                (
                    "uncached weights",
                    "linear weights read from memory, not cache".to_string(),
                    c.uncached_weights_ms,
                ),
                (
                    "host: dispatch",
                    format!(
                        "waiting on the framework's {} of host work",
                        fmt_ms(c.host_floor_ms)
                    ),
                    c.host_bound_ms,
                ),
            ];
            for (name, what, ms) in terms {
                if name == "host: update" && p.context.phase == Phase::Inference
                    || matches!(name, "uncached weights" | "per-sample grads") && ms == 0.0
                    || name == "host: dispatch" && c.host_floor_ms == 0.0
                {
                    continue;
                }
                // Spec defaults hold no per-layer or scale term; calibrated terms no copy.
                if c.from_spec && matches!(name, "host: per layer" | "host: layer scale")
                    || !c.from_spec && name == "host: input copy"
                {
                    continue;
                }
                // A fitted term of a few nanoseconds reads as noise: show it as zero.
                let ms = if ms.abs() < 1e-6 { 0.0 } else { ms };
                t.push_str(&format!("{name:<nw$} {what:<mw$} {:>11}\n", fmt_ms(ms)));
            }
            t.push_str(&format!(
                "{:<nw$} {:<mw$} {:>11}\n",
                "total",
                "composed (pre + layers + post)",
                fmt_ms(c.total_ms)
            ));
            if c.from_spec {
                t.push_str(
                    "host terms from the device spec (pageable input copy, SGD-momentum update, \
                     PyTorch eager's dispatch); `perfcast calibrate` fits them to measured steps\n",
                );
            }
        }
    }
    if p.fallback_layers > 0 {
        t.push_str(&format!(
            "{} layer(s) have no model in the bundle and use the device-spec roofline\n",
            p.fallback_layers
        ));
    }
    if let Some(f) = &p.fusion {
        t.push_str(&format!(
            "fusion `{}`, graph: {}: {} layers run as {} kernels; eager {}, fused/eager {}; \
             roofline {} (eager graph {})\n",
            f.policy,
            f.graph,
            f.eager_layers,
            f.kernels,
            fmt_ms(f.eager_total_ms),
            sig3(p.total_ms / f.eager_total_ms),
            fmt_ms(p.roofline_ms),
            fmt_ms(f.eager_roofline_ms),
        ));
    }
    t
}

/// `bundle show`: the device, and per kind the chosen model, why, and every candidate; then the
/// host-cost terms.
pub fn bundle(manifest: &Manifest) -> String {
    let mut t = format!(
        "bundle `{}` (format {}, perfcast {}) for {} ({} GFLOP/s, {} GB/s), trained on {}\n",
        manifest.name,
        manifest.format,
        manifest.perfcast_version,
        manifest.device.name,
        sig3(manifest.device.peak_gflops),
        sig3(manifest.device.mem_bandwidth_gbs),
        manifest.data
    );
    for (kind, e) in &manifest.kinds {
        t.push_str(&format!(
            "\n{kind}: {} ({} rows{}), {}\n  {:<12} {:>8} {:>9} {:>9} {:>9}\n",
            e.chosen,
            e.rows,
            if e.refitted {
                ", refitted on all after selection"
            } else {
                ""
            },
            e.selection.why,
            "model",
            "cv MAPE",
            "test MAPE",
            "us/row",
            "KB"
        ));
        for c in &e.candidates {
            let mark = if c.model == e.chosen {
                "*"
            } else if e.selection.pareto.contains(&c.model) {
                "p"
            } else {
                " "
            };
            t.push_str(&format!(
                "{mark} {:<12} {:>7}% {:>8}% {:>9} {:>9}\n",
                c.model,
                sig3(c.cv_mape),
                sig3(c.test_mape),
                sig3(c.predict_us),
                sig3(c.size_bytes as f64 / 1024.0)
            ));
        }
        if let Some(d) = &e.distilled {
            t.push_str(&format!(
                "  student ({}) of {} on {} labelled rows: {}{}\n",
                d.student,
                d.teacher,
                d.rows,
                if d.kept { "" } else { "not kept, " },
                d.why
            ));
        }
    }
    t.push_str("\n* chosen, p on the Pareto front (MAPE, prediction time, size)\n");
    match &manifest.host_costs {
        Some(c) => t.push_str(&format!(
            "\nnetwork host-cost terms (fitted on {}, {} thread(s)):\n{}",
            c.networks.join(", "),
            c.threads,
            super::networks::costs(c)
        )),
        None => t.push_str(
            "\nno network host-cost terms: networks are predicted as the plain sum of \
             their layers (`perfcast calibrate` fits them)\n",
        ),
    }
    t
}

/// `bundle bench`: the median and p99 time of each query and its rate.
pub fn bench(lines: &[BenchLine]) -> String {
    let mut t = format!(
        "{:<52} {:>10} {:>10} {:>12}\n",
        "query", "p50 us", "p99 us", "per second"
    );
    for l in lines {
        t.push_str(&format!(
            "{:<52} {:>10} {:>10} {:>12}\n",
            l.query,
            sig3(l.p50_us),
            sig3(l.p99_us),
            sig3(l.per_second)
        ));
    }
    t
}

/// The known devices as a table (`perfcast predict --list-devices`); `launch us` is the
/// measured launch floor where one exists (`-` otherwise), `arch` the architecture the GPU
/// util model reads the generation of.
pub fn devices_table() -> String {
    let tf = |v: Option<f64>| v.map_or("-".to_string(), |g| format!("{:.1}", g / 1e3));
    let mut t = format!(
        "{:<32} {:<30} {:>7} {:>7} {:>7} {:>7} {:>7} {:>6} {:>5} {:>5} {:>6} {:>9}  {}\n",
        "name",
        "--device",
        "fp32",
        "tf32",
        "fp16",
        "bf16",
        "fp8",
        "GB/s",
        "SMs",
        "GB",
        "link",
        "launch us",
        "arch"
    );
    for s in perfcast_data::import::known::known() {
        t.push_str(&format!(
            "{:<32} {:<30} {:>7} {:>7} {:>7} {:>7} {:>7} {:>6} {:>5} {:>5} {:>6} {:>9}  {}\n",
            s.name,
            s.slug(),
            tf(Some(s.peak_gflops)),
            tf(s.peak_for(perfcast_core::DType::Tf32)),
            tf(s.peak_for(perfcast_core::DType::Fp16)),
            tf(s.peak_for(perfcast_core::DType::Bf16)),
            tf(s.peak_for(perfcast_core::DType::Fp8)),
            s.mem_bandwidth_gbs,
            s.cores,
            s.memory_gb,
            s.links.peer_gbs.map_or("-".to_string(), |g| {
                let bridge = if s.links.peer_gpus == Some(1) {
                    "*"
                } else {
                    ""
                };
                format!("{g:.0}{bridge}")
            }),
            s.launch_us.map_or("-".to_string(), |us| format!("{us:.1}")),
            perfcast_core::arch::architecture(&s.name).map_or("-", |a| a.name)
        ));
    }
    t.push_str(
        "\npeaks in dense TFLOP/s per data type (tensor cores for tf32/fp16/bf16/fp8); link: \
         NVLink/xGMI GB/s per direction (*: a bridge to one peer); `--device <name>:bf16` or \
         `--dtype bf16` predicts in another type\n",
    );
    t
}

/// A network's prediction on stdout: JSON (with what an import folded, fused, approximated
/// and left unmapped), or the layer table with notes on zero-cost views and the import.
pub fn network_output(
    format: crate::output::Format,
    p: &NetworkPrediction,
    net: &perfcast_core::Network,
    report: Option<&crate::cmd::model::ImportReport>,
) -> anyhow::Result<()> {
    #[derive(Serialize)]
    struct Out<'a> {
        #[serde(flatten)]
        prediction: &'a NetworkPrediction,
        #[serde(skip_serializing_if = "Option::is_none")]
        import: Option<&'a crate::cmd::model::ImportReport>,
    }
    if format == crate::output::Format::Json {
        return crate::output::emit_json(&Out {
            prediction: p,
            import: report,
        });
    }
    let mut t = network(p);
    let views = crate::cmd::model::views(net);
    if views > 0 {
        t.push_str(&format!(
            "{views} view layer(s) (reshape, transpose, split) are zero-cost: predicted as 0 ms, marked `zero-cost`\n"
        ));
    }
    if let Some(r) = report {
        t.push_str(&crate::render::model::import(r));
    }
    crate::output::emit(&t)
}
