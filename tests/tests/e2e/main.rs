//! End-to-end tests of the real `perfcast` binary on temporary directories.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod collectives;
mod devices;
mod fusion;
mod import;
mod models;
mod networks;
mod plan;
mod predict;
mod profile;
mod robustness;
mod scale;
mod serve;
mod train;
mod zoo;

use std::path::Path;
use std::process::{Command, Output};

/// The binary under test.
pub fn perfcast() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_perfcast-under-test"));
    cmd.env("NO_COLOR", "1");
    cmd
}

/// Runs and returns the output.
pub fn run(args: &[&str]) -> Output {
    perfcast().args(args).output().expect("perfcast runs")
}

/// A sweep that measures quickly: tiny shapes, short timing.
pub fn write_fast_sweep(dir: &Path, extra: &str) -> std::path::PathBuf {
    let path = dir.join("sweep.toml");
    let text = format!(
        "seed = 1\nphases = [\"inference\"]\nbatch = [1, 2]\n\
         [timing]\nwarmup_s = 0.0\nmin_samples = 3\nmax_time_s = 0.01\n\
         [relu]\nc = {{ min = 1, max = 8 }}\nh = [4, 8]\nw = [4, 8]\n\
         [linear]\ntokens = [1]\nin_features = {{ min = 4, max = 32 }}\nout_features = [8]\n{extra}"
    );
    std::fs::write(&path, text).expect("write sweep");
    path
}

/// stderr as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}
