//! `perfcast train` and `perfcast eval --models` as text.

use std::path::Path;

use perfcast_core::Metrics;
use perfcast_select::pipeline::{SavedScore, TrainReport};

use crate::output::sig3;

/// A MAPE figure, or `blow-up` where it is no accuracy at all.
fn mape(v: f64) -> String {
    if perfcast_select::select::blown_up(v) {
        "blow-up".into()
    } else {
        format!("{}%", sig3(v))
    }
}

/// Per kind every family's cross-validated and held-out figures, the auto-selection with the
/// pooled figures against one family everywhere, and the shared networks against per-kind
/// ones.
pub fn train(report: &TrainReport, out: &Path) -> String {
    let mut t = format!(
        "{} ({}), {:?} split, {}% held out, {}-fold CV -> {}\n",
        report.data.display(),
        report.device,
        report.split,
        sig3(100.0 * report.test_share),
        report.folds,
        out.display()
    );
    for k in &report.kinds {
        t.push_str(&format!(
            "\n{}: {} train / {} test rows, best {}\n{:<12} {:>8} {:>9} {:>8} {:>8} {:>8} {:>8} {:>10} {:>11} {:>9}\n",
            k.kind, k.rows.0, k.rows.1, k.best, "model", "cv MAPE", "test MAPE", "R2(log)", "±10%", "p50 APE", "p95 APE",
            "1 row us", "batch us/row", "size KB"
        ));
        for m in &k.models {
            t.push_str(&format!(
                "{:<12} {:>8} {:>9} {:>8} {:>7}% {:>7}% {:>7}% {:>10} {:>11} {:>9}\n",
                m.model,
                mape(m.cv.mape),
                mape(m.test.mape),
                format!("{:.4}", m.test.r2_log),
                sig3(m.test.within_10),
                sig3(m.test.p50_ape),
                sig3(m.test.p95_ape),
                sig3(m.cost.one_row_us),
                sig3(m.cost.batch_row_us),
                sig3(m.cost.size_bytes as f64 / 1024.0)
            ));
        }
        for m in &k.models {
            if let Some(parts) = &m.parts {
                t.push_str(&format!("  {} = {parts} (geometric mean)\n", m.model));
            }
        }
    }
    if let Some(sel) = &report.selection {
        t.push_str(&format!(
            "\nauto-selection -> {}\n{:<12} {:<12} {:>9}  {:<28} why\n",
            sel.bundle.display(),
            "kind",
            "chosen",
            "test MAPE",
            "Pareto front (MAPE/time/size)"
        ));
        for k in &sel.kinds {
            t.push_str(&format!(
                "{:<12} {:<12} {:>9}  {:<28} {}\n",
                k.kind.name(),
                k.selection.chosen,
                mape(k.test_mape),
                k.selection.pareto.join(","),
                k.selection.why
            ));
            for (model, why) in &k.selection.excluded {
                if why.starts_with("guarded") {
                    t.push_str(&format!("{:<12} {model} {why}\n", ""));
                }
            }
        }
        t.push_str(&format!(
            "{:<22} {:>9} {:>8} {:>8} {:>12} {:>10}\n",
            "overall (held out)", "MAPE", "R2", "R2(log)", "mean us/row", "size KB"
        ));
        let line = |name: String, m: &Metrics, us: f64, bytes: usize| {
            format!(
                "{:<22} {:>9} {:>8.4} {:>8.4} {:>12} {:>10}\n",
                name,
                mape(m.mape),
                m.r2,
                m.r2_log,
                sig3(us),
                sig3(bytes as f64 / 1024.0)
            )
        };
        t.push_str(&line(
            "auto-selection".into(),
            &sel.overall,
            sel.mean_predict_us,
            sel.total_size_bytes,
        ));
        for s in &sel.single {
            t.push_str(&line(
                format!("only {}", s.model),
                &s.overall,
                s.mean_predict_us,
                s.total_size_bytes,
            ));
        }
        if sel.refitted {
            t.push_str(
                "the bundle's models were then refitted on every row, held-out ones included \
                 (the figures above are the selection's)\n",
            );
        }
    }
    if !report.shared.is_empty() {
        t.push_str(&format!(
            "\none network per kind vs one shared by every kind (test MAPE)\n{:<9} {:<12} {:>9} {:>9}\n",
            "model", "kind", "per kind", "shared"
        ));
        // A kind too small for its own network (MEDN's fewest rows) has no per-kind score.
        let pct = |v: Option<f64>| v.map_or("-".to_string(), |m| format!("{}%", sig3(m)));
        for s in &report.shared {
            t.push_str(&format!(
                "{:<9} {:<12} {:>9} {:>9}\n",
                s.model,
                s.kind.name(),
                pct(s.per_kind_mape),
                pct(Some(s.shared_mape))
            ));
        }
    }
    t
}

/// `eval --models`: each saved model's accuracy on the other dataset.
pub fn saved_scores(rows: &[SavedScore]) -> String {
    let mut t = format!(
        "{:<12} {:<9} {:>6} {:>8} {:>8} {:>8} {:>8}\n",
        "module", "model", "rows", "MAPE", "R2(log)", "±10%", "p95 APE"
    );
    for r in rows {
        t.push_str(&format!(
            "{:<12} {:<9} {:>6} {:>7}% {:>8} {:>7}% {:>7}%\n",
            r.kind.name(),
            r.model,
            r.metrics.n,
            sig3(r.metrics.mape),
            format!("{:.4}", r.metrics.r2_log),
            sig3(r.metrics.within_10),
            sig3(r.metrics.p95_ape)
        ));
    }
    t
}
