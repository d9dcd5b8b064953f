//! `perfcast devices`, `perfcast eval devices | anchor` and `perfcast map` as text.

use perfcast_core::DeviceSpec;
use perfcast_models::anchor;
use perfcast_models::devices_eval::{AnchorKindResult, KindResult, MapReport};

use perfcast_profile::Backend;
use perfcast_profile::probe::Peaks;

use crate::output::{fmt_ms, sig3};

/// Per kind: each held-out device's MAPE under every family, and the mean.
pub fn devices(results: &[KindResult]) -> String {
    let mut t = String::new();
    for r in results {
        t.push_str(&format!(
            "{} ({} rows), MAPE % with the device left out, trained on the others\n",
            r.kind,
            r.phase.name()
        ));
        t.push_str(&format!("{:<28} {:>8}", "held-out device", "rows"));
        for m in &r.models {
            t.push_str(&format!(" {:>12}", m.model));
        }
        t.push('\n');
        let mut names: Vec<&String> = Vec::new();
        for m in &r.models {
            for d in &m.devices {
                if !names.contains(&&d.device) {
                    names.push(&d.device);
                }
            }
        }
        for name in names {
            let rows = r
                .models
                .iter()
                .flat_map(|m| &m.devices)
                .find(|d| &d.device == name)
                .map_or(0, |d| d.metrics.n);
            t.push_str(&format!("{name:<28} {rows:>8}"));
            for m in &r.models {
                let v = m
                    .devices
                    .iter()
                    .find(|d| &d.device == name)
                    .map_or("-".to_string(), |d| sig3(d.metrics.mape));
                t.push_str(&format!(" {v:>12}"));
            }
            t.push('\n');
        }
        t.push_str(&format!("{:<28} {:>8}", "mean", ""));
        for m in &r.models {
            t.push_str(&format!(" {:>12}", sig3(m.mean_mape)));
        }
        t.push('\n');
        let raised: usize = r
            .models
            .iter()
            .flat_map(|m| &m.devices)
            .map(|d| d.raised_to_roofline)
            .sum();
        if raised > 0 {
            t.push_str(&format!(
                "({raised} GPU predictions below the spec roofline raised to it, as the predictor does)\n"
            ));
        }
        if !r.excluded.is_empty() {
            t.push_str(&format!(
                "(flagged by the consistency check, left out of training: {})\n",
                r.excluded.join(", ")
            ));
        }
        t.push('\n');
    }
    t
}

/// Per kind: each target's anchors and every method's MAPE, and the means.
pub fn anchor(results: &[AnchorKindResult]) -> String {
    let mut t = String::new();
    for r in results {
        t.push_str(&format!(
            "{} ({:?} rows), anchor {}: MAPE % predicting the held-out device\n",
            r.kind, r.phase, r.anchor
        ));
        t.push_str(&format!(
            "{:<30} {:<30} {:>6}",
            "held-out device", "anchor", "pairs"
        ));
        for m in anchor::METHODS {
            t.push_str(&format!(" {m:>10}"));
        }
        t.push('\n');
        for d in &r.devices {
            t.push_str(&format!(
                "{:<30} {:<30} {:>6}",
                d.device,
                d.anchors.join("+"),
                d.pairs
            ));
            for m in anchor::METHODS {
                let v = d.mape.get(*m).map_or("-".to_string(), |v| sig3(*v));
                t.push_str(&format!(" {v:>10}"));
            }
            t.push('\n');
        }
        t.push_str(&format!("{:<30} {:<30} {:>6}", "mean", "", ""));
        for m in anchor::METHODS {
            let v = r.mean_mape.get(*m).map_or("-".to_string(), |v| sig3(*v));
            t.push_str(&format!(" {v:>10}"));
        }
        t.push_str("\n\n");
    }
    t
}

/// `perfcast map`: every mapped row beside the anchor's time and the roofline ratio, and the
/// totals per kind and phase.
pub fn map(r: &MapReport) -> String {
    let mut t = format!(
        "{} -> {}{}\n{:<48} {:>5} {:<9} {:>10} {:>10} {:>10}\n",
        r.anchor,
        r.target,
        if r.same_software {
            " (same software stack)"
        } else {
            ""
        },
        "module",
        "batch",
        "phase",
        "anchor",
        "mapped",
        "roofline"
    );
    for m in &r.rows {
        t.push_str(&format!(
            "{:<48} {:>5} {:<9} {:>10} {:>10} {:>10}\n",
            m.module,
            m.batch,
            m.phase,
            fmt_ms(m.anchor_ms),
            fmt_ms(m.predicted_ms),
            fmt_ms(m.roofline_ratio_ms)
        ));
    }
    for ((kind, phase), (rows, anchor_ms, predicted_ms)) in &r.totals {
        t.push_str(&format!(
            "total {kind} {phase}: {rows} rows, {} on the anchor -> {} mapped\n",
            fmt_ms(*anchor_ms),
            fmt_ms(*predicted_ms)
        ));
    }
    t
}

/// This machine's spec with the peaks just measured and how.
pub fn local(spec: &DeviceSpec, peaks: &Peaks, backend: Backend) -> String {
    let c = &spec.caches;
    let kb = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0} KiB"));
    format!(
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
        backend = backend,
        bw = sig3(spec.mem_bandwidth_gbs),
        mib = peaks.triad_elems * 4 / 1048576,
        slug = spec.slug(),
    )
}

/// Steps mapped from an anchor to other devices (`perfcast map --measured-ms`): the mapped
/// time beside the bundle's ratio, the FLOP ratio, the parts ratio, the bundle's own
/// prediction and the roofline.
pub fn mapped_steps(rows: &[perfcast_calibrate::step_map::MappedStep]) -> String {
    let mut t = format!(
        "{:<32} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11}  method\n",
        "target", "mapped", "bundle x", "FLOP x", "parts x", "predicted", "roofline"
    );
    for r in rows {
        t.push_str(&format!(
            "{:<32} {:>8} ms {:>8} ms {:>8} ms {:>8} ms {:>8} ms {:>8} ms  {}\n",
            r.device,
            sig3(r.mapped_ms),
            sig3(r.bundle_ratio_ms),
            sig3(r.flop_ratio_ms),
            sig3(r.parts_ratio_ms),
            sig3(r.predicted_ms),
            sig3(r.roofline_ms),
            r.method
        ));
    }
    t
}
