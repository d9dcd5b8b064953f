//! `perfcast profile` as a workflow: a sweep (or the configurations active selection chooses
//! from its ranges) measured into a dataset on one backend, resumable, stopped cleanly by the
//! interrupt after the row in flight.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use perfcast_core::progress::Observer;
use perfcast_core::{DeviceSpec, Hinted};
use perfcast_profile::run::{RunOptions, RunSummary, jobs_of, plan as all_jobs, run_jobs};
use perfcast_profile::{Backend, Sweep, probe};
use perfcast_select::active::{ActivePlan, choose_round};

use crate::observe::{Done, PROFILE_STAGE, StepObserver, sweep_events};
use crate::{Error, Result};

/// What [`run`] measures and where.
#[derive(Clone, Debug)]
pub struct ProfilePlan {
    /// The sweep: kinds, sampling ranges, phases, timing.
    pub sweep: Sweep,
    /// The dataset measured into (created with the device's spec when new).
    pub out: PathBuf,
    /// The backend measured on.
    pub backend: Backend,
    /// This device's spec; `None` measures its peaks first (a few seconds).
    pub device: Option<DeviceSpec>,
    /// Skip rows the dataset holds already (continue a stopped run).
    pub resume: bool,
    /// Choose the sweep's samples by active selection instead of at random.
    pub active: Option<ActivePlan>,
}

/// This device's spec with measured peaks (a few seconds), noting when other processes keep
/// cores busy.
pub fn probe_device(out: &Path, observer: &dyn Observer) -> Result<DeviceSpec> {
    observer.note(&format!(
        "measuring this device's peaks for `{}`...",
        out.join("device.json").display()
    ));
    let (device, _) = probe::local_cpu(Backend::Flex)?;
    if let Some(warning) = probe::busy_warning() {
        observer.note(&warning);
    }
    Ok(device)
}

/// Measures `plan`'s sweep into `plan.out`, each row saved as it finishes (and reported as
/// [`Done::Row`]); an active round's choice is reported as [`Done::ActiveRound`] before it is
/// measured. `interrupt` (or the process's token) stops it after the row in flight, with
/// [`perfcast_profile::Error::Interrupted`] as the source.
pub fn run(
    plan: &ProfilePlan,
    observer: &dyn StepObserver,
    interrupt: &AtomicBool,
) -> Result<RunSummary> {
    if !plan.backend.available() {
        return Err(Hinted::new(
            format!("backend `{}` is not in this build", plan.backend),
            "rebuild with `cargo build --release --features wgpu`",
        )
        .into());
    }
    let device = match &plan.device {
        Some(d) => d.clone(),
        None => probe_device(&plan.out, observer)?,
    };
    let sweep = &plan.sweep;
    let options = RunOptions::for_sweep(sweep, &plan.out, plan.backend, device, plan.resume);
    let jobs = match &plan.active {
        Some(active) => {
            let choices = choose_round(sweep, &plan.out, &options.device, active)?;
            observer.done(Done::ActiveRound(&choices));
            let chosen: Vec<_> = choices.into_iter().flat_map(|c| c.chosen).collect();
            jobs_of(&chosen, &sweep.phases)
        }
        None => all_jobs(sweep)?,
    };
    let summary = run_jobs(
        sweep,
        jobs,
        &options,
        &mut sweep_events(observer),
        interrupt,
    );
    observer.end(PROFILE_STAGE);
    summary.map_err(|e| Error::Context {
        context: format!("profiling into `{}`", plan.out.display()),
        source: Box::new(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// The rows the observer was told of.
    #[derive(Default)]
    struct Rows(Mutex<usize>);

    impl Observer for Rows {}

    impl StepObserver for Rows {
        fn done(&self, step: Done<'_>) {
            if let Done::Row(_) = step {
                *self.0.lock().expect("rows") += 1;
            }
        }
    }

    fn plan(out: PathBuf) -> ProfilePlan {
        ProfilePlan {
            sweep: crate::tiny_sweep(&[perfcast_core::ModuleKind::Tanh], 3),
            out,
            backend: Backend::Flex,
            device: Some(perfcast_core::testing::cpu_device()),
            resume: true,
            active: None,
        }
    }

    #[test]
    fn a_tiny_sweep_is_measured_once_and_resumed_without_measuring_again() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let plan = plan(tmp.path().join("data"));
        let rows = Rows::default();
        let summary = run(&plan, &rows, &AtomicBool::new(false)).expect("profile");
        let tanh = &summary.kinds["tanh"];
        assert_eq!((tanh.measured, tanh.failed), (6, 0), "{summary:?}");
        assert_eq!(
            *rows.0.lock().expect("rows"),
            6,
            "3 configurations in 2 phases"
        );
        assert!(plan.out.join("device.json").is_file());

        let again = run(&plan, &Rows::default(), &AtomicBool::new(false)).expect("resume");
        let tanh = &again.kinds["tanh"];
        assert_eq!((tanh.measured, tanh.skipped), (0, 6), "{again:?}");
    }

    #[test]
    fn an_interrupted_sweep_names_the_dataset_and_stays_an_interruption() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let plan = plan(tmp.path().join("data"));
        let err = run(&plan, &Rows::default(), &AtomicBool::new(true)).expect_err("stopped");
        assert!(err.to_string().starts_with("profiling into `"), "{err}");
        let source = std::error::Error::source(&err).expect("source");
        assert!(
            matches!(
                source.downcast_ref::<perfcast_profile::Error>(),
                Some(perfcast_profile::Error::Interrupted { .. })
            ),
            "{source}"
        );
    }
}
