//! `perfcast import` as text.

use perfcast_data::import::ImportSummary;

/// Rows imported and skipped, per device and kind, with the reasons.
pub fn summary(s: &ImportSummary) -> String {
    let mut t = format!(
        "{} from {} into {}: {} rows imported, {} skipped\n",
        s.source,
        s.input.display(),
        s.out.display(),
        s.imported,
        s.skipped
    );
    for d in &s.devices {
        let target = match (&d.dataset, &d.name) {
            (Some(dir), Some(name)) => format!("{dir}  ({name})"),
            (None, Some(name)) => format!("not written  ({name})"),
            (_, None) => "not written  (no published spec)".to_string(),
        };
        t.push_str(&format!("\n{}: {target}\n", d.id));
        for k in &d.kinds {
            let skipped: usize = k.skipped.values().sum();
            let phases: Vec<String> = [("inference", k.inference), ("training", k.training)]
                .into_iter()
                .filter(|(_, n)| *n > 0)
                .map(|(p, n)| format!("{p} {n}"))
                .collect();
            let mut line = format!("  {:<8} {:>7} rows", k.kind, k.imported);
            if !phases.is_empty() {
                line.push_str(&format!(" ({})", phases.join(", ")));
            }
            if k.duplicates > 0 {
                line.push_str(&format!(", {} repeat a configuration", k.duplicates));
            }
            if skipped > 0 {
                line.push_str(&format!(", {skipped} skipped"));
            }
            t.push_str(&line);
            t.push('\n');
            for (reason, n) in &k.skipped {
                t.push_str(&format!("  {:<8} {n:>7} skipped: {reason}\n", ""));
            }
        }
    }
    t
}
