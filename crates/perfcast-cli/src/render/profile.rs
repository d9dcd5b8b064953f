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
    if !summary.failures.is_empty() {
        text.push_str("\nfailed configurations (recorded with their reason):\n");
        for f in &summary.failures {
            text.push_str(&format!("  {f}\n"));
        }
    }
    text
}
