//! `perfcast scale predict | fit | measure` as text.

use perfcast_scale::Overlap;
use perfcast_scale::fit_report::FitReport;
use perfcast_scale::measure::RunsReport;
use perfcast_scale::scaling::ScalingReport;

use crate::output::{fmt_ms, sig3};

/// `scale predict`: where the figures come from, then per device count the iteration's parts,
/// throughput, speedup and efficiency.
pub fn predict(r: &ScalingReport, update_s: f64) -> String {
    let overlap = match r.overlap {
        Overlap::None => "no overlap".to_string(),
        Overlap::Full => "full overlap with backward".to_string(),
        Overlap::Bucketed { bucket_bytes } => format!(
            "bucketed overlap ({} MiB buckets)",
            sig3(bucket_bytes / 1024.0 / 1024.0)
        ),
    };
    let mut t = format!(
        "{}: {} M parameters, {} MB of fp32 gradients; global batch {} (ceil(batch / P) per device)\n",
        r.network,
        sig3(r.parameters / 1e6),
        sig3(r.gradient_bytes / 1e6),
        r.global_batch
    );
    t.push_str(&format!(
        "{} over {}, {overlap}\n",
        r.strategy.name(),
        r.link
    ));
    match (&r.bundle, &r.compute_device) {
        (Some(b), Some(d)) => t.push_str(&format!(
            "compute: bundle `{}` ({d}), training phase at the per-device batch\n",
            b.display()
        )),
        _ => t.push_str("compute: measured (`--compute-ms`), scaled per sample\n"),
    }
    t.push_str(&format!(
        "update: {} per iteration ({})\n",
        fmt_ms(update_s * 1e3),
        r.update_source
    ));
    if let Some(d) = &r.device_spec {
        t.push_str(&format!("device spec: {}\n", d.name));
    }
    t.push_str(&format!(
        "\n{:>5} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>11} {:>10} {:>8} {:>10}\n",
        "gpus",
        "batch/gpu",
        "forward",
        "backward",
        "comm",
        "exposed",
        "update",
        "iteration",
        "samples/s",
        "speedup",
        "efficiency"
    ));
    for row in &r.rows {
        t.push_str(&format!(
            "{:>5} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>11} {:>10} {:>8} {:>9}%\n",
            row.gpus,
            row.per_device_batch,
            fmt_ms(row.forward_ms),
            fmt_ms(row.backward_ms),
            fmt_ms(row.comm_ms),
            fmt_ms(row.exposed_comm_ms),
            fmt_ms(row.update_ms),
            fmt_ms(row.iteration_ms),
            sig3(row.throughput),
            sig3(row.speedup),
            sig3(100.0 * row.efficiency)
        ));
    }
    t.push_str(
        "\ncomm: link busy with gradients; exposed: the part not hidden behind the backward pass\n",
    );
    t
}

/// Significant digits for constants that may be tiny: `1.23e-4`.
fn sci(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if (1e-2..1e4).contains(&v.abs()) {
        sig3(v)
    } else {
        format!("{v:.3e}")
    }
}

/// `scale fit`: every constant with its factor, error, share and meaning; the MAPEs; and the
/// predictions asked for.
pub fn fit(r: &FitReport) -> String {
    let mut t = format!("{}\n", r.formula);
    t.push_str(&format!(
        "fitted to {} of {} runs in `{}` by differential evolution ({} generations, seed {}{})\n\n",
        r.fitted_runs,
        r.runs,
        r.runs_file.display(),
        r.generations,
        r.seed,
        if r.converged { "" } else { ", not converged" }
    ));
    t.push_str(&format!(
        "{:<11} {:<14} {:>11} {:>8} {:>7}  {}\n",
        "term", "factor", "constant", "+-se", "share", "meaning"
    ));
    for c in &r.constants {
        t.push_str(&format!(
            "{:<11} {:<14} {:>11} {:>8} {:>6}%  {}{}\n",
            c.term,
            c.formula,
            sci(c.value),
            c.rel_se
                .map(|s| format!("{}%", sig3(100.0 * s)))
                .unwrap_or_else(|| "-".into()),
            sig3(100.0 * c.mean_share),
            c.meaning,
            if c.extrinsic { " [extrinsic]" } else { "" }
        ));
    }
    t.push_str(&format!("\nfit MAPE {}%", sig3(r.fit_mape)));
    match &r.holdout {
        Some(h) => t.push_str(&format!(
            "; held out {} ({} runs): MAPE {}%, max {}%\n",
            h.how,
            h.runs,
            sig3(h.mape),
            sig3(h.max_ape)
        )),
        None => t.push('\n'),
    }
    if !r.predictions.is_empty() {
        t.push('\n');
    }
    for p in &r.predictions {
        let parts: Vec<String> = p
            .terms
            .iter()
            .filter(|(_, s)| *s != 0.0)
            .map(|(name, s)| format!("{name} {}", fmt_ms(s * 1e3)))
            .collect();
        t.push_str(&format!(
            "p={} b={} n={}: {} ({})\n",
            p.p,
            p.b,
            p.n,
            fmt_ms(p.time_s * 1e3),
            parts.join(", ")
        ));
    }
    t
}

/// `scale measure`: every run's time, spread, throughput and speedup over one thread.
pub fn measure(r: &RunsReport) -> String {
    let load = |l: Option<f64>| l.map_or_else(|| "-".to_string(), sig3);
    let mut t = format!(
        "{}: training steps on {}, {} ({} cores), median of {} repeats; load average {} \
         before, {} after\n\n",
        r.network,
        r.backend,
        r.cpu,
        r.cores,
        r.repeats,
        load(r.load_start),
        load(r.load_end)
    );
    t.push_str(&format!(
        "{:>3} {:>5} {:>7} {:>6} {:>10} {:>7} {:>10} {:>8}\n",
        "p", "b", "n", "steps", "time", "spread", "samples/s", "speedup"
    ));
    for run in &r.runs {
        let one = r
            .runs
            .iter()
            .find(|o| o.p == 1 && o.b == run.b && o.n == run.n)
            .map(|o| o.time_s);
        t.push_str(&format!(
            "{:>3} {:>5} {:>7} {:>6} {:>10} {:>6}% {:>10} {:>8}\n",
            run.p,
            run.b,
            run.n,
            run.steps,
            fmt_ms(run.time_s * 1e3),
            sig3(100.0 * (run.max_s - run.min_s) / run.time_s),
            sig3(run.n as f64 / run.time_s),
            one.map_or_else(|| "-".into(), |o| sig3(o / run.time_s))
        ));
    }
    for f in &r.failed {
        t.push_str(&format!(
            "{:>3} {:>5} {:>7} failed: {}\n",
            f.p, f.b, f.n, f.error
        ));
    }
    t.push_str("\nspread: slowest minus fastest repeat, relative to the median\n");
    t
}
