//! What an ONNX import found beside the network, for people and scripts: nodes folded as
//! constants, fusions, nearest-kind mappings, and the ops left unmapped with their share of
//! the estimated FLOPs and bytes.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use super::{Imported, Unmapped};

/// One unmapped op type with its shares, for output.
#[derive(Clone, Debug, Serialize)]
pub struct UnmappedRow {
    /// The op and its totals.
    #[serde(flatten)]
    pub op: Unmapped,
    /// Its share of all estimated FLOPs, %.
    pub flop_share_pct: f64,
    /// Its share of all estimated bytes, %.
    pub byte_share_pct: f64,
}

/// What an import found beside the network, for output.
#[derive(Clone, Debug, Serialize)]
pub struct ImportReport {
    /// The file.
    pub source: PathBuf,
    /// Nodes in the file.
    pub nodes: usize,
    /// The batch the file fixes (its first input's leading dim above 1), or `None`.
    pub batch: Option<usize>,
    /// Layers in the network.
    pub layers: usize,
    /// Nodes folded as constants.
    pub folded: usize,
    /// Fusions by pattern.
    pub fused: BTreeMap<String, usize>,
    /// Nearest-kind mappings and other approximations.
    pub notes: BTreeMap<String, usize>,
    /// Ops with no kind.
    pub unmapped: Vec<UnmappedRow>,
    /// Share of estimated FLOPs in unmapped ops, %.
    pub unmapped_flop_share_pct: f64,
    /// Share of estimated bytes in unmapped ops, %.
    pub unmapped_byte_share_pct: f64,
}

impl ImportReport {
    /// The report of `imported`, read from `source`.
    pub fn new(source: PathBuf, imported: &Imported) -> ImportReport {
        let flops = imported.mapped_flops + imported.unmapped.iter().map(|u| u.flops).sum::<f64>();
        let bytes = imported.mapped_bytes + imported.unmapped.iter().map(|u| u.bytes).sum::<f64>();
        let pct = |part: f64, all: f64| if all > 0.0 { 100.0 * part / all } else { 0.0 };
        ImportReport {
            source,
            nodes: imported.nodes,
            batch: imported.batch,
            layers: imported.network.layers.len(),
            folded: imported.folded,
            fused: imported.fused.clone(),
            notes: imported.notes.clone(),
            unmapped: imported
                .unmapped
                .iter()
                .map(|u| UnmappedRow {
                    op: u.clone(),
                    flop_share_pct: pct(u.flops, flops),
                    byte_share_pct: pct(u.bytes, bytes),
                })
                .collect(),
            unmapped_flop_share_pct: 100.0 * imported.unmapped_flop_share(),
            unmapped_byte_share_pct: 100.0 * imported.unmapped_byte_share(),
        }
    }
}
