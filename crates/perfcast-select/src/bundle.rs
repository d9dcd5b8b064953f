//! Checkpoint bundles, the write side: `checkpoints/<name>/manifest.json` plus one model file
//! per module kind, written into a temporary directory beside its destination and renamed into
//! place, so a reader never sees half of one. Loading ([`Bundle`], the manifest types) is the
//! predictor's (`perfcast_predict::bundle`), re-exported here.

use std::path::Path;

use perfcast_data::outdir::{self, OutputKind};
use perfcast_models::{SavedModel, TrainSet};
pub use perfcast_predict::bundle::{
    Bundle, FORMAT, FeatureRange, KindEntry, MAX_MANIFEST_BYTES, MAX_MODEL_BYTES, Manifest,
};

use crate::error::{Error, Result};

fn bundle_err(path: &Path, message: impl Into<String>) -> Error {
    Error::Bundle {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// Ranges of every feature of a training set.
pub fn feature_ranges(data: &TrainSet) -> Vec<FeatureRange> {
    data.schema
        .names
        .iter()
        .enumerate()
        .map(|(j, name)| {
            let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
            for row in data.x.iter_rows() {
                min = min.min(row[j]);
                max = max.max(row[j]);
            }
            FeatureRange {
                name: name.clone(),
                min,
                max,
            }
        })
        .collect()
}

/// Writes a bundle to `dir` atomically: files go into a temporary sibling directory, which
/// replaces `dir` at the end. `models` maps each manifest entry's `file` to its model.
pub fn write_bundle(
    dir: &Path,
    manifest: &Manifest,
    models: &[(String, SavedModel)],
) -> Result<()> {
    // Only an earlier bundle is replaced, never another folder.
    outdir::check_destination(dir, OutputKind::Bundle, true, &[])?;
    let staging = outdir::stage_beside(dir, "bundle")?;
    for entry in manifest.kinds.values() {
        if !models.iter().any(|(f, _)| f == &entry.file) {
            return Err(bundle_err(
                dir,
                format!("no model given for `{}`", entry.file),
            ));
        }
    }
    for (file, model) in models {
        let path = staging.path().join(file);
        if let Some(p) = path.parent() {
            std::fs::create_dir_all(p).map_err(|e| bundle_err(p, e.to_string()))?;
        }
        let json = serde_json::to_vec(model).map_err(|e| bundle_err(&path, e.to_string()))?;
        std::fs::write(&path, json).map_err(|e| bundle_err(&path, e.to_string()))?;
    }
    let manifest_path = staging.path().join("manifest.json");
    let json = serde_json::to_vec_pretty(manifest)
        .map_err(|e| bundle_err(&manifest_path, e.to_string()))?;
    std::fs::write(&manifest_path, json).map_err(|e| bundle_err(&manifest_path, e.to_string()))?;
    outdir::mark(staging.path(), OutputKind::Bundle)?;
    // Swapped in atomically: a kill leaves the old bundle or the new one, never neither.
    outdir::replace_with(staging, dir)?;
    Ok(())
}
