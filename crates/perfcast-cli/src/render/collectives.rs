//! `perfcast collectives fit | eval` as text.

use std::path::PathBuf;

use perfcast_scale::measured::{CollectiveFit, SplitReport};
use perfcast_scale::{Collectives, Link};

use crate::output::sig3;

fn bytes(b: f64) -> String {
    if b >= 1024.0 * 1024.0 {
        format!("{} MiB", sig3(b / 1024.0 / 1024.0))
    } else {
        format!("{} KiB", sig3(b / 1024.0))
    }
}

fn pieces(f: &CollectiveFit) -> String {
    f.pieces
        .iter()
        .map(|p| {
            let range = match p.up_to_bytes {
                Some(up) => format!("<= {}", bytes(up)),
                None => "above".into(),
            };
            format!(
                "{range}: {} us + {} us/step, {} GB/s",
                sig3(p.overhead_us),
                sig3(p.latency_us),
                sig3(p.bus_bandwidth_gbs)
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// `collectives fit`: per collective and node count, its lines and what it was fitted on.
pub fn fits(c: &Collectives) -> String {
    let mut t = format!("fits `{}` from {}\n", c.name, c.sources.join(", "));
    for f in &c.fits {
        t.push_str(&format!(
            "{}: {} ({} rows, {} to {}; {:?} loss, {}% MAPE on the largest held out)\n",
            f.describe(),
            pieces(f),
            f.fitted_on.rows,
            bytes(f.fitted_on.min_bytes),
            bytes(f.fitted_on.max_bytes),
            f.loss,
            f.selection_mape.map_or("-".into(), sig3)
        ));
    }
    t
}

/// `collectives eval`: per split the training and held-out MAPE and the fit.
pub fn splits(sources: &[PathBuf], link: &Link, s: &[SplitReport]) -> String {
    let names: Vec<String> = sources.iter().map(|p| p.display().to_string()).collect();
    let mut t = format!("held-out splits of {}\n\n", names.join(", "));
    t.push_str(&format!(
        "{:<24} {:<32} {:>6} {:>6} {:>10} {:>10} {:>12}  {}\n",
        "group",
        "split",
        "train",
        "test",
        "train MAPE",
        "test MAPE",
        "formula MAPE",
        "test MAPE by GPUs"
    ));
    for r in s {
        let by: Vec<String> = r
            .test_mape_by_workers
            .iter()
            .map(|(p, e)| format!("p={p}: {}%", sig3(*e)))
            .collect();
        t.push_str(&format!(
            "{:<24} {:<32} {:>6} {:>6} {:>9}% {:>9}% {:>12}  {}\n",
            r.group,
            r.split,
            r.train_rows,
            r.test_rows,
            sig3(r.train_mape),
            sig3(r.test_mape),
            r.formula_test_mape
                .map_or("-".into(), |m| format!("{}%", sig3(m))),
            by.join(", ")
        ));
        for f in &r.fits {
            let on = f
                .only_workers
                .map_or(String::new(), |p| format!(" (p={p})"));
            t.push_str(&format!("    fit{on}: {}\n", pieces(f)));
        }
    }
    t.push_str(&format!(
        "\nformula MAPE: the alpha-beta formula over {} on the same held-out rows (inside a \
         node)\n",
        link
    ));
    t
}
