//! Whole-network measurements: one JSON object per line (`networks.jsonl`), each carrying the
//! full network description, so predictions can be recomputed for it by any later bundle.
//!
//! Appends rewrite the file atomically (temp file, then rename): a killed run keeps every
//! earlier line. Reading checks every line; an error names the file and the line.

use std::path::Path;

use perfcast_core::{Network, Phase};
use serde::{Deserialize, Serialize};

use crate::atomic::write_atomic;
use crate::error::{Error, Result};
use crate::record::Timing;

/// The file name network measurements take inside a dataset directory.
pub const NETWORKS_FILE: &str = "networks.jsonl";

/// One measured network run: what ran, where, and how long it took.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkRecord {
    /// The network as it ran (layers, shapes); `network.name` names it.
    pub network: Network,
    /// Input resolution the zoo built it at (`None` for a network file or the default).
    #[serde(default)]
    pub resolution: Option<usize>,
    /// Batch size.
    pub batch: usize,
    /// Inference (forward) or training step (forward, backward, SGD update).
    pub phase: Phase,
    /// Threads the backend ran with.
    pub threads: usize,
    /// burn backend.
    pub backend: String,
    /// Device name (as in the dataset's device spec).
    pub device: String,
    /// Layers per forward pass.
    pub layers: usize,
    /// Trainable parameter tensors.
    pub param_tensors: usize,
    /// Trainable parameters.
    pub params: usize,
    /// End-to-end latency statistics per run.
    pub timing: Timing,
    /// Median duration of the optimiser update inside a training step, ms (training only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_ms: Option<f64>,
    /// Sum of the layers' latencies measured one by one as modules (`measure --layers`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer_sum_ms: Option<f64>,
    /// Each layer's latency measured alone, ms, in the network's layer order (`measure
    /// --layers`): what `eval networks` sets beside each layer's prediction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer_ms: Option<Vec<f64>>,
    /// perfcast version that measured it.
    pub perfcast_version: String,
    /// Unix seconds.
    pub timestamp: i64,
}

impl NetworkRecord {
    /// Checks the values a composition fit relies on; the message names the field.
    pub fn validate(&self) -> std::result::Result<(), String> {
        let t = self.timing.median_ms;
        if !(t.is_finite() && t > 0.0) {
            return Err(format!("`timing.median_ms` {t} must be a positive number"));
        }
        if self.batch == 0 {
            return Err("`batch` must be at least 1".into());
        }
        if self.layers != self.network.layers.len() {
            return Err(format!(
                "`layers` {} differs from the network's {} layers",
                self.layers,
                self.network.layers.len()
            ));
        }
        if let Some(times) = &self.layer_ms {
            if times.len() != self.network.layers.len() {
                return Err(format!(
                    "`layer_ms` holds {} times for the network's {} layers",
                    times.len(),
                    self.network.layers.len()
                ));
            }
            if let Some(t) = times.iter().find(|t| !(t.is_finite() && **t >= 0.0)) {
                return Err(format!(
                    "`layer_ms` value {t} must be a non-negative number"
                ));
            }
        }
        self.network.check().map_err(|e| e.to_string())?;
        Ok(())
    }
}

/// Reads every record of a `networks.jsonl` file; a missing file is empty.
pub fn read_networks(path: &Path) -> Result<Vec<NetworkRecord>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(Error::Io {
                action: "read",
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let mut records = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |message: String| Error::Schema {
            path: path.to_path_buf(),
            message: format!("line {}: {message}", i + 1),
        };
        let record: NetworkRecord = serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
        record.validate().map_err(bad)?;
        records.push(record);
    }
    Ok(records)
}

/// Appends records to a `networks.jsonl` file (created if missing), atomically.
pub fn append_networks(path: &Path, records: &[NetworkRecord]) -> Result<()> {
    let mut text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(source) => {
            return Err(Error::Io {
                action: "read",
                path: path.to_path_buf(),
                source,
            });
        }
    };
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    for record in records {
        let line = serde_json::to_string(record).map_err(|e| Error::Unreadable {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        text.push_str(&line);
        text.push('\n');
    }
    write_atomic(path, text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(ms: f64) -> NetworkRecord {
        let network = perfcast_core::zoo::build("lenet5", None).unwrap();
        NetworkRecord {
            layers: network.layers.len(),
            network,
            resolution: None,
            batch: 4,
            phase: Phase::Inference,
            threads: 1,
            backend: "flex".into(),
            device: "cpu".into(),
            param_tensors: 10,
            params: 61_706,
            timing: Timing::median_only(ms),
            layer_sum_ms: None,
            layer_ms: None,
            update_ms: None,
            perfcast_version: "0".into(),
            timestamp: 0,
        }
    }

    #[test]
    fn append_then_read_round_trips_and_bad_lines_name_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(NETWORKS_FILE);
        assert!(read_networks(&path).unwrap().is_empty());
        append_networks(&path, &[record(1.5)]).unwrap();
        append_networks(&path, &[record(2.5)]).unwrap();
        let back = read_networks(&path).unwrap();
        assert_eq!(back, vec![record(1.5), record(2.5)]);

        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(&serde_json::to_string(&record(-1.0)).unwrap());
        std::fs::write(&path, text).unwrap();
        let err = read_networks(&path).unwrap_err().to_string();
        assert!(err.contains("line 3") && err.contains("median_ms"), "{err}");
    }
}
