//! What a fused network prediction reports beside its total; the predictor's network answer
//! carries it, and [`crate::fused`] fills it.

use perfcast_core::fusion::Fusion;
use serde::{Deserialize, Serialize};

/// What a fused prediction was grouped by, and the eager prediction it replaces.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FusionReport {
    /// The policy.
    pub policy: Fusion,
    /// The graph style it stands for, in words.
    pub graph: String,
    /// Layers of the network as given.
    pub eager_layers: usize,
    /// Kernels (regions) after fusion, zero-cost views included.
    pub kernels: usize,
    /// The eager prediction's total, ms.
    pub eager_total_ms: f64,
    /// The eager graph's roofline, ms.
    pub eager_roofline_ms: f64,
}
