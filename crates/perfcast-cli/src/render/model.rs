//! What `--onnx` imports found, as text.

use perfcast_graph::onnx::ImportReport;

/// What an import folded, fused, approximated and left unmapped.
pub fn import(r: &ImportReport) -> String {
    let mut t = format!(
        "imported `{}`: {} nodes -> {} layers ({} folded as constants)\n",
        r.source.display(),
        r.nodes,
        r.layers,
        r.folded
    );
    for (pattern, n) in &r.fused {
        t.push_str(&format!("  fused {pattern}: {n}\n"));
    }
    for (note, n) in &r.notes {
        t.push_str(&format!("  {note}: {n}\n"));
    }
    if r.unmapped.is_empty() {
        t.push_str("  unmapped ops: none (0% of FLOPs and bytes)\n");
    } else {
        t.push_str(&format!(
            "  unmapped ops (not predicted): {:.2}% of FLOPs, {:.2}% of bytes\n",
            r.unmapped_flop_share_pct, r.unmapped_byte_share_pct
        ));
        for u in &r.unmapped {
            t.push_str(&format!(
                "    {:<24} x{:<5} {:>7.3}% FLOPs {:>7.3}% bytes\n",
                u.op.op, u.op.count, u.flop_share_pct, u.byte_share_pct
            ));
        }
    }
    t
}
