//! Whole networks on this machine as workflows: [`measure`] (time networks end to end, beside
//! the memory model's peak), [`calibrate`] (a bundle's host-cost terms fitted to measured or
//! saved runs) and [`eval`] (runs set beside the bundle's predictions). Each is
//! `run(plan, observer, interrupt) -> report`; the CLI's `measure`, `calibrate` and
//! `eval networks` parse into these plans and render the reports.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use perfcast_calibrate::HostCosts;
use perfcast_calibrate::calibrate::{NetworksEval, calibrate_bundle, evaluate_networks, labelled};
use perfcast_core::progress::Observer;
use perfcast_core::{Hint, Hinted, NetworkChoice, Phase};
use perfcast_data::networks::{NetworkRecord, read_networks};
use perfcast_predict::{Bundle, Predictor};
use perfcast_profile::network_runs::{MeasurePlan, NoPeak, PeakMemory, measure_networks};
use perfcast_scale::memory::{Framework, cpu_run_bytes, cpu_training_peak};
use serde::Serialize;

use crate::{Error, Result, check};

/// The bundle the commands use when none is named, which the quickstart writes.
pub const DEFAULT_BUNDLE: &str = "checkpoints/local";

/// Most compute threads a measurement runs (a count past it is a typo that aborts the
/// allocator).
const MAX_THREADS: usize = 1024;

/// Loads the bundle at `dir`; the default one, missing, says how to make it.
pub fn load_bundle(dir: &Path) -> Result<Bundle> {
    if !dir.exists() && dir == Path::new(DEFAULT_BUNDLE) {
        return Err(Hinted::new(
            format!("no bundle at `{DEFAULT_BUNDLE}`"),
            "run `perfcast quickstart` to profile this machine and write one, or pass `--bundle \
             <dir>`",
        )
        .into());
    }
    Ok(Bundle::load(dir)?)
}

/// Networks to time now, and how.
#[derive(Clone, Debug)]
pub struct MeasureJob {
    /// The networks, labelled.
    pub networks: Vec<NetworkChoice>,
    /// Batches, phases, threads, backend, time cap, where to save.
    pub plan: MeasurePlan,
}

/// Where network runs come from.
#[derive(Clone, Debug)]
pub enum Runs {
    /// Read from a JSON-lines file measured earlier (`perfcast measure --save`).
    File(PathBuf),
    /// Measured now.
    Measure(MeasureJob),
}

/// One run of `perfcast measure`: the measurement and the memory model's peak beside it.
#[derive(Clone, Debug, Serialize)]
pub struct MeasuredRun {
    /// The label (`vgg16@112`); `network` holds the full description.
    pub name: String,
    /// The measurement.
    #[serde(flatten)]
    pub record: NetworkRecord,
    /// Most heap bytes live during the run above what was live before it.
    pub peak_bytes: Option<u64>,
    /// The memory model's peak of the training step under burn's rules (training only).
    pub predicted_peak_bytes: Option<f64>,
    /// The same under the reference (PyTorch) rules `perfcast plan` uses.
    pub predicted_peak_bytes_reference: Option<f64>,
}

/// Refuses, before anything is allocated, a thread count past [`MAX_THREADS`] and a batch
/// that cannot fit this machine's memory ([`cpu_run_bytes`]).
fn check_fits(job: &MeasureJob) -> Result<()> {
    let threads = job.plan.threads;
    if !(1..=MAX_THREADS).contains(&threads) {
        return Err(Error::Input(format!(
            "`--threads` must be from 1 to {MAX_THREADS}, got {threads}"
        )));
    }
    let memory_gb = perfcast_core::CpuTopology::detect().memory_gb;
    if memory_gb <= 0.0 {
        return Ok(());
    }
    let training = job.plan.phases.contains(&Phase::Training);
    for net in &job.networks {
        for &batch in &job.plan.batch {
            let need_gb = cpu_run_bytes(&net.network, batch, training) / 1e9;
            if need_gb > memory_gb {
                return Err(Error::Input(format!(
                    "`--batch {batch}`: `{}` needs about {need_gb:.0} GB, this machine has \
                     {memory_gb:.0} GB",
                    net.label
                )));
            }
        }
    }
    Ok(())
}

/// Times `job`'s networks (heap peaks counted by `peak`) and sets the memory model's peak of
/// each training step beside them, under burn's rules (what this backend keeps) and the
/// reference (PyTorch's) rules the planner uses for GPUs.
pub fn measure(
    job: &MeasureJob,
    peak: &dyn PeakMemory,
    observer: &dyn Observer,
    interrupt: &AtomicBool,
) -> Result<Vec<MeasuredRun>> {
    check_fits(job)?;
    check(interrupt, "measuring networks")?;
    let rows = measure_networks(&job.networks, &job.plan, peak, observer)?;
    let predict = |r: &NetworkRecord, framework| {
        (r.phase == Phase::Training)
            .then(|| cpu_training_peak(&r.network, r.batch, framework))
            .flatten()
    };
    Ok(rows
        .into_iter()
        .map(|m| MeasuredRun {
            predicted_peak_bytes: predict(&m.record, Framework::Burn),
            predicted_peak_bytes_reference: predict(&m.record, Framework::Reference),
            name: m.label,
            record: m.record,
            peak_bytes: m.peak_bytes,
        })
        .collect())
}

/// The runs `source` names, labelled: read from its file, or measured now.
pub fn runs(
    source: &Runs,
    observer: &dyn Observer,
    interrupt: &AtomicBool,
) -> Result<Vec<(String, NetworkRecord)>> {
    match source {
        Runs::File(path) => {
            let records = read_networks(path)?;
            if records.is_empty() {
                return Err(Error::Input(format!(
                    "`{}` holds no network measurements",
                    path.display()
                )));
            }
            Ok(labelled(records))
        }
        Runs::Measure(job) => {
            check(interrupt, "measuring networks")?;
            Ok(
                measure_networks(&job.networks, &job.plan, &NoPeak, observer)?
                    .into_iter()
                    .map(|m| (m.label, m.record))
                    .collect(),
            )
        }
    }
}

/// What [`calibrate`] fits.
#[derive(Clone, Debug)]
pub struct CalibratePlan {
    /// The bundle whose host-cost terms to fit (its manifest is rewritten).
    pub bundle: PathBuf,
    /// The runs to fit them to.
    pub runs: Runs,
    /// Strength of the pull towards the plain sum; `None`: chosen by leave-one-network-out
    /// cross-validation.
    pub lambda: Option<f64>,
    /// Fit and report, but leave the bundle as it is.
    pub dry_run: bool,
}

/// What [`calibrate`] fitted.
#[derive(Clone, Debug)]
pub struct CalibrateReport {
    /// The host-cost terms.
    pub host_costs: HostCosts,
    /// Runs they were fitted to.
    pub runs: usize,
    /// The bundle written (`None`: a dry run).
    pub written: Option<PathBuf>,
}

/// Fits the host-cost terms of `plan.bundle` to the runs measured or read (after the bundle
/// loads, so a bad bundle costs no measuring) and writes them into its manifest unless
/// `dry_run`.
pub fn calibrate(
    plan: &CalibratePlan,
    observer: &dyn Observer,
    interrupt: &AtomicBool,
) -> Result<CalibrateReport> {
    perfcast_calibrate::calibrate::check_lambda(plan.lambda)?;
    let bundle = load_bundle(&plan.bundle)?;
    let runs = runs(&plan.runs, observer, interrupt)?;
    check(interrupt, "calibrating")?;
    let host_costs = calibrate_bundle(bundle, &plan.bundle, &runs, plan.lambda, plan.dry_run)?;
    Ok(CalibrateReport {
        host_costs,
        runs: runs.len(),
        written: (!plan.dry_run).then(|| plan.bundle.clone()),
    })
}

/// What [`eval`] compares.
#[derive(Clone, Debug)]
pub struct EvalPlan {
    /// The bundle to predict with.
    pub bundle: PathBuf,
    /// The runs to compare with.
    pub runs: Runs,
}

/// What [`eval`] found.
#[derive(Clone, Debug)]
pub struct EvalReport {
    /// Every run beside its predictions, with the MAPE per phase.
    pub eval: NetworksEval,
    /// The device the bundle predicts.
    pub device: String,
}

/// Sets the runs measured or read beside the bundle's plain sum and composed prediction; a
/// bundle without host-cost terms gets a note saying how to fit them.
pub fn eval(
    plan: &EvalPlan,
    observer: &dyn Observer,
    interrupt: &AtomicBool,
) -> Result<EvalReport> {
    let bundle = load_bundle(&plan.bundle)?;
    if bundle.manifest.host_costs.is_none() {
        observer.note(&format!(
            "note: `{}` has no host-cost terms; only the plain sum is shown{}",
            plan.bundle.display(),
            Hint::new(format!(
                "`perfcast calibrate --bundle {} --networks ...` fits them from measured networks",
                plan.bundle.display()
            ))
        ));
    }
    let predictor = Predictor::new(bundle);
    let runs = runs(&plan.runs, observer, interrupt)?;
    check(interrupt, "predicting networks")?;
    let eval = evaluate_networks(&predictor, &plan.bundle, &runs, observer)?;
    Ok(EvalReport {
        eval,
        device: predictor.bundle().manifest.device.name.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfcast_core::progress::Silent;

    /// LeNet-5 at batch 1 on `threads` threads.
    fn lenet(threads: usize) -> MeasureJob {
        MeasureJob {
            networks: vec![NetworkChoice::zoo("lenet5", None).expect("zoo")],
            plan: MeasurePlan {
                batch: vec![1],
                phases: vec![Phase::Inference],
                threads,
                backend: perfcast_profile::Backend::Flex,
                max_time_s: 0.01,
                save: None,
                layers: false,
                layers_into: None,
            },
        }
    }

    #[test]
    fn a_missing_default_bundle_says_how_to_make_one() {
        let err = load_bundle(Path::new(DEFAULT_BUNDLE));
        // Run from the crate's folder, where no `checkpoints/local` exists.
        let err = err.expect_err("no bundle here");
        assert_eq!(
            err.hint(),
            Some(
                "run `perfcast quickstart` to profile this machine and write one, or pass \
                 `--bundle <dir>`"
            )
        );
        assert!(
            err.to_string()
                .starts_with("no bundle at `checkpoints/local`\n\nhint: run")
        );
    }

    #[test]
    fn runs_from_an_empty_file_are_refused_by_name() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("runs.jsonl");
        std::fs::write(&path, "").expect("write");
        let err =
            runs(&Runs::File(path.clone()), &Silent, &AtomicBool::new(false)).expect_err("empty");
        assert_eq!(
            err.to_string(),
            format!("`{}` holds no network measurements", path.display())
        );
    }

    #[test]
    fn a_set_interrupt_stops_before_measuring() {
        let err =
            measure(&lenet(1), &NoPeak, &Silent, &AtomicBool::new(true)).expect_err("stopped");
        assert!(matches!(err, Error::Stopped(_)), "{err}");
    }

    #[test]
    fn a_thread_count_past_the_limit_is_refused_before_measuring() {
        let job = lenet(MAX_THREADS + 1);
        let err = measure(&job, &NoPeak, &Silent, &AtomicBool::new(false)).expect_err("threads");
        assert_eq!(
            err.to_string(),
            format!(
                "`--threads` must be from 1 to {MAX_THREADS}, got {}",
                MAX_THREADS + 1
            )
        );
    }
}
