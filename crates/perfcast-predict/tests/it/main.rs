//! Integration tests of perfcast-predict: bundles written before this crate existed answer
//! as they did within float rounding (`compat`), and every shipped bundle loads and predicts
//! (`checkpoints`).
#![allow(clippy::unwrap_used)]

mod checkpoints;
mod compat;
mod corrupt;
mod extrapolation;
mod fast_paths;
mod fusion;
mod gradients;
mod plans;
mod training_steps;

use std::path::{Path, PathBuf};

/// `tests/fixtures/` of this crate.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}
