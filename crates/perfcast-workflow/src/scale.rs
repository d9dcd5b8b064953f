//! Training runs measured for perfcast-scale's fitted expression: a network's training steps
//! timed over a grid of thread counts, batch sizes and sample counts on a CPU backend
//! (perfcast-profile), gathered into a runs file (perfcast-scale) that `scale fit` reads.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use perfcast_core::progress::Observer;
use perfcast_core::{CpuTopology, Network, NetworkChoice};
use perfcast_profile::Backend;
use perfcast_profile::network::time_training;
use perfcast_scale::measure::{RunGrid, RunsReport, measure_runs};

use crate::{Error, Result};

/// The network whose training runs are timed.
#[derive(Clone, Debug)]
pub enum NetworkSource {
    /// A zoo network, optionally `@resolution`.
    Zoo(String),
    /// A network JSON file.
    File(PathBuf),
}

/// What [`measure`] times and where it writes.
#[derive(Clone, Debug)]
pub struct MeasurePlan {
    /// The network.
    pub network: NetworkSource,
    /// Thread counts p.
    pub threads: Vec<usize>,
    /// Batch sizes b.
    pub batch: Vec<usize>,
    /// Samples n per run (ceil(n / b) training steps).
    pub samples: Vec<usize>,
    /// Timed repetitions per run; a run's time is their median.
    pub repeats: usize,
    /// The CPU backend whose compute threads are varied.
    pub backend: Backend,
    /// The runs CSV to write (replaced atomically).
    pub out: PathBuf,
}

impl MeasurePlan {
    fn grid(&self, label: String) -> RunGrid {
        RunGrid {
            label,
            threads: self.threads.clone(),
            batch: self.batch.clone(),
            samples: self.samples.clone(),
            repeats: self.repeats,
        }
    }
}

/// Times the plan's grid and writes the runs to `plan.out`. Runs that fail, or that would
/// start after `interrupt` (or the process's token) is set, are listed in the report's
/// `failed`; the others are written all the same, so a grid stopped part way keeps what it
/// measured. Stopped before any run, it writes nothing ([`Error::Stopped`]).
pub fn measure(
    plan: &MeasurePlan,
    observer: &dyn Observer,
    interrupt: &AtomicBool,
) -> Result<RunsReport> {
    // The grid's own checks come first, before the backend and the network.
    plan.grid(String::new()).validate()?;
    if !plan.backend.is_cpu() {
        return Err(Error::Input(format!(
            "`--backend {}`: `scale measure` varies the compute threads of a CPU backend \
             (flex or ndarray)",
            plan.backend
        )));
    }
    plan.backend.device()?;
    let NetworkChoice {
        label,
        network,
        resolution,
    } = match &plan.network {
        NetworkSource::File(path) => NetworkChoice::named(Network::from_json_file(path)?),
        NetworkSource::Zoo(name) => NetworkChoice::zoo(name, None)?,
    };
    network.check()?;
    let stopped = || crate::stop_requested(interrupt);
    if stopped() {
        return Err(Error::Stopped("measuring the runs".into()));
    }
    let cpu = CpuTopology::detect();
    let measured = measure_runs(
        &plan.grid(label.clone()),
        cpu.threads,
        &mut |p, b, steps| {
            if stopped() {
                return Err("interrupted".into());
            }
            time_training(&network, plan.backend, b, p, steps, 1)
                .map(|d| d.iter().map(Duration::as_secs_f64).collect())
        },
        observer,
    )
    .map_err(|e| {
        if stopped() {
            Error::Stopped("measuring the runs".into())
        } else {
            e.into()
        }
    })?;
    let report = RunsReport {
        out: plan.out.clone(),
        network: label,
        resolution,
        backend: plan.backend.name().into(),
        cpu: cpu.model,
        cores: cpu.cores,
        repeats: plan.repeats,
        load_start: measured.load_start,
        load_end: measured.load_end,
        runs: measured.runs,
        failed: measured.failed,
    };
    perfcast_scale::write_runs(&plan.out, &report)?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfcast_core::progress::Silent;

    fn plan(out: PathBuf) -> MeasurePlan {
        MeasurePlan {
            network: NetworkSource::Zoo("lenet5".into()),
            threads: vec![1],
            batch: vec![2],
            samples: vec![4],
            repeats: 1,
            backend: Backend::Flex,
            out,
        }
    }

    #[test]
    fn a_grid_stopped_before_its_first_run_writes_nothing() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let out = tmp.path().join("runs.csv");
        let err = measure(&plan(out.clone()), &Silent, &AtomicBool::new(true)).expect_err("stop");
        assert!(matches!(err, Error::Stopped(_)), "{err}");
        assert!(!out.exists());
    }

    #[test]
    fn a_gpu_backend_is_refused_before_the_network_is_read() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut plan = plan(tmp.path().join("runs.csv"));
        plan.backend = Backend::Wgpu;
        plan.network = NetworkSource::File(tmp.path().join("missing.json"));
        let err = measure(&plan, &Silent, &AtomicBool::new(false)).expect_err("gpu");
        assert!(err.to_string().starts_with("`--backend wgpu`"), "{err}");
    }
}
