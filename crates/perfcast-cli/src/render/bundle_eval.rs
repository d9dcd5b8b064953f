//! `perfcast eval bundle` as text.

use std::fmt::Write as _;

use perfcast_calibrate::DeviceScores;

/// `eval bundle`: per device, kind and phase the MAPE, the median ratio and how many answers
/// were raised to the bound, fell back to the spec or stayed below it.
pub fn bundle_scores(devices: &[DeviceScores]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<28} {:<12} {:<9} {:>6} {:<14} {:>7} {:>8} {:>7} {:>8} {:>6}",
        "device",
        "kind",
        "phase",
        "rows",
        "model",
        "MAPE %",
        "pred/meas",
        "raised",
        "fallback",
        "below"
    );
    for d in devices {
        for k in &d.kinds {
            let _ = writeln!(
                s,
                "{:<28} {:<12} {:<9} {:>6} {:<14} {:>7.1} {:>9.2} {:>7} {:>8} {:>6}",
                d.device,
                k.kind.name(),
                k.phase.to_string(),
                k.metrics.n,
                k.model,
                k.metrics.mape,
                k.median_ratio,
                k.raised,
                k.fallback,
                k.below_bound
            );
        }
    }
    s.push_str(
        "pred/meas: median ratio of predicted to measured; raised: model answers below the spec \
         bound, raised to it; below: answers still below it (always 0 on a GPU bundle)",
    );
    s
}
