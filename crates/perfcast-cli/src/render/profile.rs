//! `perfcast profile` as text.

use perfcast_core::ModuleKind;
use perfcast_profile::run::RunSummary;

/// Rows measured, failed and skipped per kind, and every failed configuration.
pub fn summary(modules: &[ModuleKind], summary: &RunSummary) -> String {
    let mut text = format!(
        "profiled {} on {} in {:.1} s -> {}\n\n{:<12} {:>9} {:>7} {:>8} {:>11}\n",
        modules
            .iter()
            .map(|k| k.name())
            .collect::<Vec<_>>()
            .join(","),
        summary.backend,
        summary.elapsed_s,
        summary.dataset.display(),
        "module",
        "measured",
        "failed",
        "skipped",
        "total rows"
    );
    for (kind, c) in &summary.kinds {
        text.push_str(&format!(
            "{kind:<12} {:>9} {:>7} {:>8} {:>11}\n",
            c.measured, c.failed, c.skipped, c.total_rows
        ));
    }
    if let Some(c) = &summary.canary {
        text.push_str(&canary_line(c));
    }
    if !summary.failures.is_empty() {
        text.push_str("\nfailed configurations (recorded with their reason):\n");
        for f in &summary.failures {
            text.push_str(&format!("  {f}\n"));
        }
    }
    text
}

/// One line on what the interference canary saw.
pub fn canary_line(c: &perfcast_profile::canary::CanaryReport) -> String {
    let best = c.best_ms.map_or("-".into(), crate::output::fmt_ms);
    let worst = c.readings_ms.iter().copied().reduce(f64::max);
    let spread = match (c.best_ms, worst) {
        (Some(b), Some(w)) if b > 0.0 => format!(", slowest +{:.0}%", 100.0 * (w / b - 1.0)),
        _ => String::new(),
    };
    let correction = match (c.exponent, c.pair_error) {
        (Some(a), Some((before, after))) if c.still_disturbed > 0 => format!(
            ", divided by their stretch's slowdown^{a:.2}: on {} rows seen both ways the mean gap \
             to the clean visit goes {:.1}% -> {:.1}%",
            c.pairs,
            100.0 * before.exp_m1(),
            100.0 * after.exp_m1()
        ),
        _ => String::new(),
    };
    let stopped = match c.pair_error {
        Some((before, _)) if c.stopped_early => format!(
            "; re-measuring stopped early, disturbed visits were within {:.1}% of clean ones",
            100.0 * before.exp_m1()
        ),
        _ => String::new(),
    };
    format!(
        "\ncanary: {} readings, best {best}{spread}; {} rows measured while disturbed, {} of \
         them measured again ({} without a clean visit keep their fastest{correction}){stopped}\n",
        c.readings_ms.len(),
        c.disturbed,
        c.remeasured,
        c.still_disturbed
    )
}

/// One line per kind on what active selection chose: how sure the models were of the pool
/// and of the picks.
pub fn active_round(choices: &[perfcast_select::active::ActiveChoice]) -> String {
    choices
        .iter()
        .map(|c| match (c.pool_spread, c.chosen_spread) {
            (Some(pool), Some(chosen)) => format!(
                "active: `{}`: {} of {} candidates, where the models disagree most (ln spread {chosen:.3}, pool mean {pool:.3})\n",
                c.kind,
                c.chosen.len(),
                c.pool
            ),
            _ => format!(
                "active: `{}`: {} random draws (fewer than {} rows measured, or no more candidates than that)\n",
                c.kind,
                c.chosen.len(),
                perfcast_select::active::MIN_ROWS
            ),
        })
        .collect()
}
