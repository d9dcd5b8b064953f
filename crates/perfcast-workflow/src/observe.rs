//! What a workflow tells its caller besides progress: each step's result as soon as it is
//! known ([`Done`]), and files to write beside trained models ([`StepObserver::train_files`]),
//! so a front end can print each step's table while the next one runs.

use std::path::{Path, PathBuf};

use perfcast_calibrate::HostCosts;
use perfcast_core::ModuleKind;
use perfcast_core::progress::{Observer, Silent};
use perfcast_data::Record;
use perfcast_profile::canary::CanaryReport;
use perfcast_profile::run::{Event, RunSummary};
use perfcast_select::active::ActiveChoice;
use perfcast_select::pipeline::{TrainReport, Trained};

/// The progress stage of the sweeps and active rounds (one row a unit).
pub const PROFILE_STAGE: &str = "profile";

/// A step's result, handed to the observer as soon as it is known so the caller can show it
/// while the next step runs; the same values are in the workflow's report.
#[derive(Debug)]
#[non_exhaustive]
pub enum Done<'a> {
    /// What the interference canary saw while the layers of one group of networks were timed.
    Canary(&'a CanaryReport),
    /// The networks' own layers are profiled: new measurements.
    Layers {
        /// Layer configurations timed.
        timed: usize,
    },
    /// An active round chose these configurations (measured next).
    ActiveRound(&'a [ActiveChoice]),
    /// One row of a sweep is measured (or failed) and saved.
    Row(&'a Record),
    /// A sweep (random or an active round's) is measured.
    Swept {
        /// Its kinds.
        modules: &'a [ModuleKind],
        /// What it measured.
        summary: &'a RunSummary,
    },
    /// Training, selection and the bundle are written.
    Trained {
        /// The report written beside the models.
        report: &'a TrainReport,
        /// Where the models and report are.
        out: &'a Path,
    },
    /// The host-cost terms are fitted and stored in the bundle.
    Calibrated {
        /// The terms.
        costs: &'a HostCosts,
        /// Measured runs they were fitted to.
        runs: usize,
        /// The bundle they are stored in.
        bundle: &'a Path,
    },
}

/// Extra file contents written beside the trained models, relative path and bytes.
pub type ExtraFiles = Vec<(PathBuf, Vec<u8>)>;

/// A workflow's observer: progress and notes ([`Observer`]), each step's result as it
/// finishes, and any files to write beside the trained models (the CLI's charts).
pub trait StepObserver: Observer {
    /// A step finished with this result.
    fn done(&self, _step: Done<'_>) {}
    /// Files written with the training report (none by default).
    fn train_files(
        &self,
        _trained: &Trained,
    ) -> std::result::Result<ExtraFiles, Box<dyn std::error::Error + Send + Sync>> {
        Ok(Vec::new())
    }
}

impl StepObserver for Silent {}

/// A sweep's events as progress on [`PROFILE_STAGE`], each saved row as [`Done::Row`].
pub(crate) fn sweep_events(observer: &dyn StepObserver) -> impl FnMut(Event<'_>) + '_ {
    let mut remeasured = 0;
    move |event: Event<'_>| match event {
        Event::Planned { total, skipped } => {
            observer.begin(PROFILE_STAGE, total as u64);
            if skipped > 0 {
                observer.note(&format!(
                    "resuming: {skipped} rows already measured, {total} to go"
                ));
            }
        }
        Event::Started { job } => observer.message(
            PROFILE_STAGE,
            &format!("{} ({})", job.sample.spec.describe(), job.phase),
        ),
        Event::Finished { record, .. } => {
            observer.advance(PROFILE_STAGE, 1);
            observer.done(Done::Row(record));
        }
        Event::Remeasuring { rows } => {
            observer.note(&format!(
                "the canary found disturbed stretches: measuring their {rows} rows again"
            ));
            observer.begin(PROFILE_STAGE, rows as u64);
            remeasured = 0;
        }
        Event::Remeasured { done } => {
            observer.advance(PROFILE_STAGE, done.saturating_sub(remeasured) as u64);
            remeasured = done;
        }
    }
}
