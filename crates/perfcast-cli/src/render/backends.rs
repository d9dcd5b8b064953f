//! `perfcast backends compare` as text.

use perfcast_profile::backends::BackendRow;

use crate::output::{fmt_ms, sig3};

/// Each op's median on flex and ndarray, their ratio, and how often flex was faster.
pub fn compare(rows: &[BackendRow], threads: usize) -> String {
    let mut t = format!(
        "median per call, {} thread(s)\n{:<40} {:>5} {:<9} {:>10} {:>10} {:>14}\n",
        threads, "module", "batch", "phase", "flex", "ndarray", "ndarray/flex"
    );
    let mut flex_wins = 0;
    let mut log_ratio_sum = 0.0;
    let mut count = 0;
    for r in rows {
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
    t
}
