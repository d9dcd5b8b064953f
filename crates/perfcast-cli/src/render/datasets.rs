//! `perfcast datasets show | check | remeasure | merge | strip-overhead` as text.

use std::path::Path;

use perfcast_calibrate::overhead::StripReport;
use perfcast_core::DeviceSpec;
use perfcast_data::consistency::GemmConsistency;
use perfcast_data::merge::MergeReport;
use perfcast_data::summary::KindSummary;
use perfcast_profile::remeasure::RemeasureReport;

use crate::output::{fmt_ms, sig3};

/// `datasets show`: rows, ranges and latency distribution per kind.
pub fn show(dir: &Path, device: &DeviceSpec, summaries: &[KindSummary]) -> String {
    let mut t = format!(
        "{}  ({}, {} GFLOP/s, {} GB/s)\n",
        dir.display(),
        device.name,
        sig3(device.peak_gflops),
        sig3(device.mem_bandwidth_gbs)
    );
    if summaries.is_empty() {
        t.push_str("\nno module tables yet\n");
    }
    for s in summaries {
        t.push_str(&format!(
            "\n{}: {} rows ({} failed), backend {}\n",
            s.kind,
            s.rows,
            s.failed,
            s.backends.join(", ")
        ));
        for l in &s.latency {
            t.push_str(&format!(
                "  {:<9} {:>4} rows  min {}  p10 {}  p50 {}  p90 {}  max {}  (median spread {})\n",
                l.phase.name(),
                l.rows,
                fmt_ms(l.min_ms),
                fmt_ms(l.p10_ms),
                fmt_ms(l.p50_ms),
                fmt_ms(l.p90_ms),
                fmt_ms(l.max_ms),
                if l.median_rel_mad.is_nan() {
                    "not published".to_string()
                } else {
                    format!("{}%", sig3(100.0 * l.median_rel_mad))
                }
            ));
            let labels = ["<10us", "<100us", "<1ms", "<10ms", "<100ms", "<1s", ">=1s"];
            let most = l.decades.iter().copied().max().unwrap_or(1).max(1);
            for (label, &count) in labels.iter().zip(&l.decades) {
                if count > 0 {
                    let bar = "#".repeat((count * 30).div_ceil(most));
                    t.push_str(&format!("            {label:>7} {count:>5} {bar}\n"));
                }
            }
        }
        let ranges: Vec<String> = s
            .ranges
            .iter()
            .map(|r| {
                if r.min == r.max {
                    format!("{}={}", r.column, r.min)
                } else {
                    format!("{}={}..{}", r.column, r.min, r.max)
                }
            })
            .collect();
        t.push_str(&format!("  ranges: {}\n", ranges.join(" ")));
    }
    t
}

/// `datasets check`: each device's linear and bmm GEMM efficiency and the verdict.
pub fn check(report: &[GemmConsistency]) -> String {
    let mut t = String::from(
        "linear vs bmm efficiency on compute-bound GEMMs of 1-100 GFLOP (median, spec roofline / measured)\n\
         device                         linear    bmm  ln ratio  others  verdict\n",
    );
    if report.is_empty() {
        t.push_str("(fewer than three devices hold both tables: nothing to compare)\n");
    }
    for c in report {
        t.push_str(&format!(
            "{:<30} {:>6.3} {:>6.3} {:>+9.2} {:>+7.2}  {}\n",
            c.device,
            c.linear_efficiency,
            c.matmul_efficiency,
            c.log_ratio,
            c.others_log_ratio,
            if c.flagged {
                "FLAGGED: its linear file disagrees with its bmm file"
            } else {
                "ok"
            }
        ));
    }
    t
}

/// `datasets remeasure`: every row stored and now, and the verdict per class.
pub fn remeasure(r: &RemeasureReport) -> String {
    let mut t = format!(
        "{:<44} {:>5} {:<9} {:>10} {:>10} {:>7}\n",
        "module", "batch", "phase", "stored", "now", "diff"
    );
    for row in &r.rows {
        t.push_str(&format!(
            "{:<44} {:>5} {:<9} {:>10} {:>10} {:>6}%\n",
            row.module,
            row.batch,
            row.phase,
            fmt_ms(row.stored_ms),
            fmt_ms(row.new_ms),
            sig3(100.0 * row.rel_diff)
        ));
    }
    for (name, c) in [(">= 1 ms", &r.at_least_1ms), ("< 1 ms", &r.under_1ms)] {
        t.push_str(&format!(
            "\n{name:>8}: {} rows, median difference {}% (p90 {}%), limit {}%: {}",
            c.rows,
            sig3(100.0 * c.median_rel_diff),
            sig3(100.0 * c.p90_rel_diff),
            sig3(100.0 * c.limit),
            if c.pass { "pass" } else { "FAIL" }
        ));
    }
    t
}

/// `datasets merge`: rows per kind by the sessions that measured them.
pub fn merge(r: &MergeReport) -> String {
    let mut t = format!(
        "merged {} sessions ({}) into {}\n",
        r.sessions,
        r.combine.name(),
        r.out.display()
    );
    for k in &r.kinds {
        let sessions: Vec<String> = k
            .by_sessions
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(i, n)| format!("{n} rows x{}", i + 1))
            .collect();
        t.push_str(&format!(
            "  {}: {} rows ({}), labels moved by a median {}% (p90 {}%) from the first input\n",
            k.kind,
            k.rows,
            sessions.join(", "),
            sig3(100.0 * k.median_rel_change),
            sig3(100.0 * k.p90_rel_change)
        ));
        if k.duplicates > 0 {
            t.push_str(&format!(
                "    {} duplicate rows within one input merged into their row\n",
                k.duplicates
            ));
        }
    }
    t
}

/// `datasets strip-overhead`: the framework's factors, then what each device kept.
pub fn strip(r: &StripReport, out: &Path) -> String {
    let mut t =
        String::from("framework factor per kind and phase (time - floor) / bundle answer:\n");
    for f in &r.factors {
        let refs: Vec<String> = f
            .references
            .iter()
            .map(|x| format!("{} {} ({} rows)", x.device, sig3(x.factor), x.rows))
            .collect();
        t.push_str(&format!(
            "  {:<8} {:<9} {:>6}   {}\n",
            f.kind.name(),
            f.phase.name(),
            sig3(f.factor),
            refs.join(", ")
        ));
    }
    t.push_str(&format!(
        "\n{:<28} {:<8} {:<9} {:>9} {:>7} {:>12} {:>11} {:>8}\n",
        "device", "kind", "phase", "floor", "read", "above floor", "below bound", "written"
    ));
    for s in &r.tables {
        t.push_str(&format!(
            "{:<28} {:<8} {:<9} {:>9} {:>7} {:>12} {:>11} {:>8}\n",
            s.device,
            s.kind.name(),
            s.phase.name(),
            fmt_ms(s.floor_ms),
            s.rows_read,
            s.rows_above_floor,
            s.below_bound,
            s.rows_written
        ));
    }
    t.push_str(&format!(
        "\nwritten to {} (factors in {})\n",
        out.display(),
        perfcast_calibrate::overhead::REPORT_FILE
    ));
    t
}
