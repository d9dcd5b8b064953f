//! `perfcast measure`, `perfcast calibrate` and `perfcast eval networks` as text, and the
//! host-cost terms table `bundle show` shares.

use std::path::Path;

use perfcast_calibrate::HostCosts;
use perfcast_calibrate::calibrate::NetworksEval;
use perfcast_profile::Backend;
use perfcast_workflow::networks::MeasuredRun;

use crate::output::{fmt_ms, sig3};

/// `perfcast measure`: every run's median and spread, layers, parameters and memory.
pub fn measured(rows: &[MeasuredRun], threads: usize, backend: Backend) -> String {
    let mib = |b: f64| b / (1024.0 * 1024.0);
    let mut t = format!(
        "{:<18} {:>5} {:<10} {:>10} {:>10} {:>10} {:>6} {:>7} {:>11} {:>11} {:>9} {:>9}\n",
        "network",
        "batch",
        "phase",
        "median",
        "p10",
        "p90",
        "runs",
        "layers",
        "params",
        "layers sum",
        "peak MiB",
        "pred MiB"
    );
    for row in rows {
        let r = &row.record;
        t.push_str(&format!(
            "{:<18} {:>5} {:<10} {:>10} {:>10} {:>10} {:>6} {:>7} {:>11} {:>11} {:>9} {:>9}\n",
            row.name,
            r.batch,
            r.phase.name(),
            fmt_ms(r.timing.median_ms),
            fmt_ms(r.timing.p10_ms.unwrap_or(f64::NAN)),
            fmt_ms(r.timing.p90_ms.unwrap_or(f64::NAN)),
            r.timing.repetitions.unwrap_or(0),
            r.layers,
            r.params,
            r.layer_sum_ms.map_or("-".to_string(), fmt_ms),
            row.peak_bytes
                .map_or("-".to_string(), |b| sig3(mib(b as f64))),
            row.predicted_peak_bytes
                .map_or("-".to_string(), |b| sig3(mib(b)))
        ));
    }
    t.push_str(&format!(
        "({} thread{}, {} backend; median of timed runs after warm-up; peak: most heap \
         bytes live during the run; pred: the memory model's training peak under burn's rules)\n",
        threads,
        if threads == 1 { "" } else { "s" },
        backend
    ));
    for (name, reference) in [("burn's", false), ("the reference (PyTorch)", true)] {
        let (p, m): (Vec<f64>, Vec<f64>) = rows
            .iter()
            .filter_map(|r| {
                let predicted = if reference {
                    r.predicted_peak_bytes_reference
                } else {
                    r.predicted_peak_bytes
                };
                Some((predicted?, r.peak_bytes? as f64))
            })
            .unzip();
        if p.is_empty() {
            continue;
        }
        t.push_str(&format!(
            "training peak memory under {name} rules, predicted against measured: MAPE \
             {}% over {} run(s)\n",
            sig3(perfcast_calibrate::compose::mape(&p, &m)),
            p.len()
        ));
    }
    t
}

/// A fitted term in ms; below a nanosecond it is shown as 0 (the prior held it there).
fn fmt_term(ms: f64) -> String {
    if ms.abs() < 1e-6 {
        "0".to_string()
    } else {
        fmt_ms(ms)
    }
}

/// The host-cost terms as a small table (`calibrate`, `eval networks`, `bundle show`).
pub fn costs(costs: &HostCosts) -> String {
    let mut t = format!(
        "{:<10} {:>10} {:>12} {:>8} {:>14} {:>5} {:>11} {:>12} {:>10} {:>13}\n",
        "phase",
        "per run",
        "per layer",
        "scale",
        "update/Mparam",
        "runs",
        "plain MAPE",
        "fitted MAPE",
        "LONO plain",
        "LONO composed"
    );
    for (name, c) in [
        ("inference", &costs.inference),
        ("training", &costs.training),
    ] {
        if let Some(c) = c {
            t.push_str(&format!(
                "{:<10} {:>10} {:>12} {:>8} {:>14} {:>5} {:>10}% {:>11}% {:>10} {:>13}\n",
                name,
                fmt_term(c.per_run_ms),
                fmt_term(c.per_layer_ms),
                sig3(c.layer_scale),
                if let Some(conv) = c.update_conv_ms_per_mparam {
                    format!(
                        "{}/{}/{}",
                        fmt_term(c.update_ms_per_mparam),
                        fmt_term(conv),
                        fmt_term(c.update_large_ms_per_mparam)
                    )
                } else if c.update_large_ms_per_mparam != c.update_ms_per_mparam {
                    format!(
                        "{}/{}",
                        fmt_term(c.update_ms_per_mparam),
                        fmt_term(c.update_large_ms_per_mparam)
                    )
                } else {
                    fmt_term(c.update_ms_per_mparam)
                },
                c.runs,
                sig3(c.plain_mape),
                sig3(c.fit_mape),
                c.cv_plain_mape
                    .map_or("-".to_string(), |m| format!("{}%", sig3(m))),
                c.cv_mape
                    .map_or("-".to_string(), |m| format!("{}%", sig3(m)))
            ));
        }
    }
    // The split the bundle was calibrated with (older bundles split at the cache).
    let training = costs.training.as_ref();
    let split = training.and_then(|c| c.large_tensor_bytes).map(|bytes| {
        let mib = bytes / perfcast_predict::compose::UPDATE_BYTES_PER_PARAM
            * perfcast_core::features::F32_BYTES
            / (1024.0 * 1024.0);
        format!("{} MiB", sig3(mib))
    });
    let conv = training.is_some_and(|c| c.update_conv_ms_per_mparam.is_some());
    let parts = match (split, conv) {
        (Some(split), true) => format!(
            "in other tensors under {split} / in convolution weights under it / in larger ones"
        ),
        (Some(split), false) => format!("in tensors under {split} / in larger ones"),
        (None, _) => "one rate for every tensor".to_string(),
    };
    t.push_str(&format!(
        "(update/Mparam: {parts}, measured inside the \
         training steps; LONO: leave one network out, each predicted by terms fitted on the \
         other networks; the prior's strength is chosen by it)\n",
    ));
    t
}

/// `perfcast calibrate`: the terms fitted on `runs` runs and where they went (`None`: a dry
/// run left the bundle unchanged).
pub fn calibrated(c: &HostCosts, runs: usize, written: Option<&Path>) -> String {
    let mut t = format!(
        "host-cost terms fitted on {} run(s) of {}\n",
        runs,
        c.networks.join(", ")
    );
    t.push_str(&costs(c));
    t.push_str(&match written {
        None => "(dry run: the bundle is unchanged)\n".to_string(),
        Some(bundle) => format!("written to `{}`\n", bundle.join("manifest.json").display()),
    });
    t
}

/// `perfcast eval networks`: every run measured beside the plain sum and the composed
/// prediction, the MAPE per phase, and the terms used.
pub fn evaluated(r: &NetworksEval) -> String {
    let pct = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:+.1}%", v));
    let mut t = format!(
        "{:<16} {:>5} {:<10} {:>10} {:>11} {:>10} {:>8} {:>10} {:>8}\n",
        "network",
        "batch",
        "phase",
        "measured",
        "layers alone",
        "plain sum",
        "error",
        "composed",
        "error"
    );
    for c in &r.runs {
        t.push_str(&format!(
            "{:<16} {:>5} {:<10} {:>10} {:>11} {:>10} {:>8} {:>10} {:>8}{}\n",
            c.network,
            c.batch,
            c.phase.name(),
            fmt_ms(c.measured_ms),
            c.measured_layer_sum_ms.map_or("-".to_string(), fmt_ms),
            fmt_ms(c.plain_ms),
            pct(Some(c.plain_error_pct)),
            c.composed
                .as_ref()
                .map_or("-".to_string(), |x| fmt_ms(x.total_ms)),
            pct(c.composed_error_pct),
            if c.fallback_layers > 0 {
                format!("  ({} roofline layers)", c.fallback_layers)
            } else {
                String::new()
            }
        ));
    }
    t.push('\n');
    for s in &r.summary {
        t.push_str(&format!(
            "{:<10} {} runs: MAPE plain sum {}%, composed {}\n",
            s.phase.name(),
            s.runs,
            sig3(s.plain_mape),
            s.composed_mape
                .map_or("- (not calibrated)".to_string(), |m| format!(
                    "{}%",
                    sig3(m)
                ))
        ));
    }
    t.push_str(&furthest_layers(r));
    if let Some(c) = &r.host_costs {
        t.push_str(&format!(
            "\nhost-cost terms (fitted on {}):\n{}",
            c.networks.join(", "),
            costs(c)
        ));
    }
    t
}

/// Layers `eval networks` shows per run measured with `--layers`.
const FURTHEST_LAYERS: usize = 3;

/// Per run measured layer by layer, the distinct layers whose predictions are furthest from
/// their measured times (in ms, so the ones that move the network's error most); empty when
/// no run was measured so.
fn furthest_layers(r: &NetworksEval) -> String {
    if r.runs.iter().all(|c| c.layers.is_empty()) {
        return String::new();
    }
    let mut t = format!(
        "\nlayers furthest from their time alone ({FURTHEST_LAYERS} per run; `--format json` \
         lists every layer):\n"
    );
    for c in r.runs.iter().filter(|c| !c.layers.is_empty()) {
        t.push_str(&format!(
            "{} batch {} {}:\n",
            c.network,
            c.batch,
            c.phase.name()
        ));
        for l in c.layers.iter().take(FURTHEST_LAYERS) {
            t.push_str(&format!(
                "  {:<40} x{:<3} measured {:>9}  predicted {:>9}  {:+.1}%\n",
                l.module,
                l.count,
                fmt_ms(l.measured_ms),
                fmt_ms(l.predicted_ms),
                l.error_pct
            ));
        }
    }
    t
}

/// `quickstart`'s last table: each network's predicted inference and training step per batch.
pub fn quickstart(rows: &[(String, usize, f64, f64)], calibrated: bool, bundle: &Path) -> String {
    let mut t = format!(
        "\n{:<14} {:>6} {:>14} {:>14}\n",
        "network", "batch", "inference", "training step"
    );
    for (name, batch, inference, training) in rows {
        t.push_str(&format!(
            "{:<14} {:>6} {:>14} {:>14}\n",
            name,
            batch,
            fmt_ms(*inference),
            fmt_ms(*training)
        ));
    }
    t.push_str(&format!(
        "\n({}, 1 thread; `perfcast predict --network resnet18 --batch 8` shows the layers; \
         `perfcast eval networks` measures and compares; bundle: `{}`)\n",
        if calibrated {
            "sum of per-layer predictions with the host-cost terms"
        } else {
            "sum of per-layer predictions"
        },
        bundle.display()
    ));
    t
}
