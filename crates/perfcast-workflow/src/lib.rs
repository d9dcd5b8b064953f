//! perfcast-workflow: multi-step jobs as one library call each, a plan value in and a report
//! value out, so the CLI, tests and other front ends run the same steps: `run(plan, observer,
//! interrupt) -> report`. The caller hands in a progress observer (the CLI draws it as bars and
//! prints each step's table as it finishes) and an interrupt flag (the CLI's Ctrl-C; the
//! process-wide [`perfcast_core::interrupt`] token is honoured too).
//!
//! [`quickstart`] profiles this machine (the layers of a few zoo networks, a random sweep,
//! active rounds under a time budget), trains and auto-selects a bundle, fits its host-cost
//! terms to networks measured end to end, and predicts those networks. It sits above every
//! crate it calls: perfcast-profile (measuring), perfcast-select (training, selection, the
//! bundle), perfcast-calibrate (host costs, network predictions).
//!
//! The commands' own jobs: [`profile`] (a sweep measured into a dataset), [`train`] (families
//! fitted, cross-validated and selected into a bundle), [`plan`] (a training job laid out over
//! devices and GPU counts), [`map`] (a profile or a step carried to another device),
//! [`networks`] (`measure`, `calibrate`: host-cost terms fitted to measured runs, and `eval`:
//! runs beside a bundle's predictions) and [`scale`] (training runs timed over a grid for
//! perfcast-scale's fitted expression). Each step's result reaches the caller through
//! [`observe::StepObserver`] as soon as it is known.
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::sync::atomic::AtomicBool;
//! use perfcast_workflow::quickstart::{self, QuickstartPlan};
//!
//! let plan = QuickstartPlan {
//!     fast: true,
//!     ..QuickstartPlan::new(40, "datasets/my-cpu".into(), "local".into())?
//! };
//! let report = quickstart::run(&plan, Arc::new(perfcast_core::progress::Silent), &AtomicBool::new(false))?;
//! for (network, batch, inference_ms, training_ms) in &report.networks {
//!     println!("{network} b{batch}: {inference_ms:.2} / {training_ms:.2} ms");
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod error;
pub mod map;
pub mod networks;
pub mod observe;
pub mod plan;
pub mod profile;
pub mod quickstart;
pub mod scale;
pub mod train;

pub use error::{Error, Result};

use std::sync::atomic::{AtomicBool, Ordering};

/// Whether the caller's `interrupt` or the process's token asks the workflow to stop.
pub(crate) fn stop_requested(interrupt: &AtomicBool) -> bool {
    interrupt.load(Ordering::SeqCst) || perfcast_core::interrupt::requested()
}

/// [`Error::Stopped`] before `step` when a stop is requested.
pub(crate) fn check(interrupt: &AtomicBool, step: &str) -> Result<()> {
    if stop_requested(interrupt) {
        return Err(Error::Stopped(step.to_string()));
    }
    Ok(())
}

/// `examples/sweeps/tiny.toml` (LeNet-5's kinds at toy sizes, timed briefly) narrowed to
/// `modules`, `samples` configurations each: the tests' measurements take seconds.
#[cfg(test)]
pub(crate) fn tiny_sweep(
    modules: &[perfcast_core::ModuleKind],
    samples: usize,
) -> perfcast_profile::Sweep {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/sweeps/tiny.toml"
    );
    let mut sweep = perfcast_profile::Sweep::from_file(std::path::Path::new(path)).expect("sweep");
    sweep.modules = modules.to_vec();
    sweep.samples = samples;
    sweep
}
