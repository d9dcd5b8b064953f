//! The quickstart: profile the layers of a few zoo networks and a small sweep on this machine,
//! spend what is left of a time budget on active rounds, train every candidate family,
//! auto-select a bundle, fit its host-cost terms to networks measured end to end, and predict
//! those networks. Every step appends to one dataset and skips what it already holds, so a
//! stopped run resumes where it stopped.
//!
//! The steps are the library calls their own commands make: [`perfcast_profile::run`]
//! (`perfcast profile`), [`perfcast_select::active`] (`profile --active`),
//! [`perfcast_select::pipeline`] (`perfcast train --bundle`), [`perfcast_calibrate::calibrate`]
//! (`perfcast calibrate`) and [`perfcast_calibrate::calibrate::network_table`].

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use perfcast_calibrate::HostCosts;
use perfcast_calibrate::calibrate::{calibrate_bundle, network_table};
use perfcast_core::{DeviceSpec, NetworkChoice};
use perfcast_data::DatasetDir;
use perfcast_predict::{Bundle, Predictor};
use perfcast_profile::canary::CanaryReport;
use perfcast_profile::network_runs::{MeasurePlan, NoPeak, measure_networks, profile_layers};
use perfcast_profile::overrides::{active_sweeps, quickstart_sweeps};
use perfcast_profile::run::{RunOptions, RunSummary, jobs_of, run_jobs};
use perfcast_profile::{Backend, Sweep};
use perfcast_select::active::{ActivePlan, choose_round};
use perfcast_select::pipeline::{TrainPlan, TrainReport, bundle_dir};
use perfcast_select::select::Budget;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::observe::{Done, PROFILE_STAGE, StepObserver, sweep_events};
use crate::profile::probe_device;

/// Networks the quickstart measures end to end to fit the host-cost terms: a small one pins
/// the per-run cost, which large ones cannot tell apart, and linear-only, conv-only and
/// FC-heavy nets set the update's rates per tensor kind.
pub const CALIBRATION_NETWORKS: [&str; 5] = [
    "vgg11@64",
    "resnet50@64",
    "resnet18@64",
    "transformer@64",
    "lenet5@28",
];
/// Seconds kept for training, distillation and calibration after the last active round
/// (about a minute and a half on an idle 2-core machine); re-measuring disturbed rows stops
/// there too, since in slow phases it alone could take the quickstart past its budget.
pub const RESERVE_S: f64 = 95.0;

/// What to run: every input of the quickstart, defaults from [`QuickstartPlan::new`].
#[derive(Clone, Debug)]
pub struct QuickstartPlan {
    /// Dataset the measurements go into, resumed when it exists (the CLI:
    /// `datasets/<this CPU>`).
    pub data: PathBuf,
    /// Bundle name (`checkpoints/<name>/`) or directory; the training report goes beside it
    /// (`<bundle>.train`).
    pub bundle: String,
    /// Model families to train and choose from (default ridge, trees, roofline, medn).
    pub models: Vec<String>,
    /// Zoo networks predicted at the end (`name@resolution` for another input size); their
    /// layers are profiled too, at [`QuickstartPlan::batch`] (default lenet5, alexnet,
    /// resnet18, mobilenetv2, vgg16@112).
    pub networks: Vec<String>,
    /// Batch sizes of those predictions (default 1, 8).
    pub batch: Vec<usize>,
    /// Networks measured end to end to fit the host-cost terms; their layers are profiled too
    /// (default [`CALIBRATION_NETWORKS`]).
    pub calibration_networks: Vec<String>,
    /// Batch sizes the calibration networks are measured at (default 1, 4).
    pub calibration_batch: Vec<usize>,
    /// Cap on the timed samples of one calibration run, seconds (default 1).
    pub calibration_max_time_s: f64,
    /// Skip the networks' own layers, the active rounds and the calibration (default false).
    pub fast: bool,
    /// Target wall time, seconds: active rounds run until only [`QuickstartPlan::reserve_s`]
    /// is left, and re-measuring disturbed rows stops there too (0: no active round, no such
    /// stop; default 530).
    pub budget_s: f64,
    /// Seconds of the budget kept for training, distillation and calibration (default
    /// [`RESERVE_S`]).
    pub reserve_s: f64,
    /// The random sweeps, measured in turn (default: the quickstart's sweeps at `samples`).
    pub sweeps: Vec<Sweep>,
    /// The sweeps active rounds choose configurations from (default: the quickstart's).
    pub active_sweeps: Vec<Sweep>,
    /// Skip rows the dataset holds already; without it a rerun is refused (default true).
    pub resume: bool,
    /// Compute threads of the networks' layers, the calibration runs and the closing
    /// predictions (default 1: the most repeatable).
    pub threads: usize,
    /// This device's spec; `None` (the default) measures its peaks first (a few seconds).
    pub device: Option<DeviceSpec>,
}

impl QuickstartPlan {
    /// The CLI's defaults, with `samples` configurations per elementwise or pooling kind (conv2d
    /// gets 6x, linear and matmul 2x), measuring into `data` and writing the bundle `bundle`.
    pub fn new(samples: usize, data: PathBuf, bundle: String) -> Result<QuickstartPlan> {
        if samples < 10 {
            return Err(Error::Input(format!(
                "`--samples` must be at least 10, got {samples}"
            )));
        }
        let strings = |s: &[&str]| s.iter().map(|s| s.to_string()).collect();
        Ok(QuickstartPlan {
            data,
            bundle,
            models: strings(&["ridge", "trees", "roofline", "medn"]),
            networks: strings(&["lenet5", "alexnet", "resnet18", "mobilenetv2", "vgg16@112"]),
            batch: vec![1, 8],
            calibration_networks: strings(&CALIBRATION_NETWORKS),
            calibration_batch: vec![1, 4],
            calibration_max_time_s: MeasurePlan::calibration(Vec::new()).max_time_s,
            fast: false,
            budget_s: 530.0,
            reserve_s: RESERVE_S,
            sweeps: quickstart_sweeps(samples)?,
            active_sweeps: active_sweeps(samples)?,
            resume: true,
            threads: 1,
            device: None,
        })
    }

    /// Configurations and kinds the random sweeps measure (each configuration in every phase
    /// of its sweep).
    pub fn size(&self) -> (usize, usize) {
        let configurations = self
            .sweeps
            .iter()
            .map(|s| s.samples * s.modules.len())
            .sum();
        // A kind swept in several groups (dense and depthwise convs) counts once.
        let kinds: std::collections::BTreeSet<_> =
            self.sweeps.iter().flat_map(|s| s.modules.iter()).collect();
        (configurations, kinds.len())
    }

    /// Where the bundle is written.
    pub fn bundle_dir(&self) -> PathBuf {
        bundle_dir(&self.bundle)
    }

    /// The training step: 3 folds, MEDN up to 10,000 steps at width 48, selection at cost
    /// weight 0.03 (as `perfcast train` selects by default), each kind's choice refitted on all
    /// its rows. The quickstart's bundle is judged on its speed too: MEDN serves most of a
    /// network's queries, and at width 48 (against 64) it answers faster at much the same
    /// held-out accuracy (docs/accuracy.md); the cost weight keeps a family twice as slow from
    /// winning a kind by a fraction of a point.
    pub fn train_plan(&self) -> TrainPlan {
        let dir = self.bundle_dir();
        TrainPlan {
            models: self.models.clone(),
            force: true,
            folds: 3,
            set: ["medn.max_steps=10000", "medn.width=48"]
                .map(String::from)
                .to_vec(),
            bundle: Some(self.bundle.clone()),
            budget: Budget {
                cost_weight: perfcast_predict::bundle::DEFAULT_COST_WEIGHT,
                ..Budget::default()
            },
            refit: true,
            distill: Some(perfcast_select::distill::DistillPlan::default()),
            ..TrainPlan::new(
                vec![self.data.clone()],
                format!("{}.train", dir.display()).into(),
            )
        }
    }
}

/// What the quickstart did.
#[derive(Clone, Debug, Serialize)]
pub struct QuickstartReport {
    /// The dataset measured into.
    pub data: PathBuf,
    /// The bundle written.
    pub bundle: PathBuf,
    /// New layer measurements of the networks (`None`: skipped, `fast`).
    pub layers_timed: Option<usize>,
    /// What the interference canary saw while layers were timed, per group of networks.
    pub canary: Vec<CanaryReport>,
    /// Every sweep measured, random ones first, then the active rounds'.
    pub sweeps: Vec<RunSummary>,
    /// Active rounds run.
    pub active_rounds: u64,
    /// The training report.
    pub train: TrainReport,
    /// The host-cost terms fitted (`None`: skipped, `fast`).
    pub host_costs: Option<HostCosts>,
    /// Runs they were fitted to.
    pub calibration_runs: usize,
    /// Each network's composed inference and training-step time at each batch size, ms:
    /// (label, batch, inference, training).
    pub networks: Vec<(String, usize, f64, f64)>,
    /// Whether the bundle has host-cost terms (from this run or an earlier one).
    pub calibrated: bool,
    /// Wall time, seconds.
    pub elapsed_s: f64,
}

/// Runs the quickstart as `plan` says, reporting to `observer`; stops with
/// [`Error::Interrupted`] at the next check after `interrupt` (or the process's interrupt
/// token) is set, the rows measured so far saved.
pub fn run(
    plan: &QuickstartPlan,
    observer: Arc<dyn StepObserver>,
    interrupt: &AtomicBool,
) -> Result<QuickstartReport> {
    Quickstart {
        plan,
        observer,
        interrupt,
        started: Instant::now(),
    }
    .run()
}

struct Quickstart<'a> {
    plan: &'a QuickstartPlan,
    observer: Arc<dyn StepObserver>,
    interrupt: &'a AtomicBool,
    started: Instant,
}

impl Quickstart<'_> {
    fn note(&self, text: String) {
        self.observer.note(&text);
    }

    fn elapsed_s(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    fn stopped(&self, step: String) -> Error {
        Error::Interrupted {
            step,
            data: self.plan.data.clone(),
        }
    }

    fn check(&self, step: &str) -> Result<()> {
        if crate::stop_requested(self.interrupt) {
            return Err(self.stopped(step.to_string()));
        }
        Ok(())
    }

    /// A step's measuring error, an interruption saying how far the step got; its own message
    /// would name `perfcast profile --resume`, which the quickstart does not take: it always
    /// resumes.
    fn measuring(&self, step: &str, e: perfcast_profile::Error) -> Error {
        match e {
            perfcast_profile::Error::Interrupted { done } => {
                self.stopped(format!("{step} after {done} new measurements"))
            }
            e => e.into(),
        }
    }

    fn run(self) -> Result<QuickstartReport> {
        let plan = self.plan;
        let data = &plan.data;
        let device = match &plan.device {
            Some(d) => d.clone(),
            None => probe_device(data, self.observer.as_ref())?,
        };
        DatasetDir::create_or_open(data, &device)?;
        let budget_s = if plan.fast { 0.0 } else { plan.budget_s };
        // With a budget, re-measuring stops where the rest would no longer fit it.
        let remeasure_until = (budget_s > 0.0)
            .then(|| self.started + Duration::from_secs_f64((budget_s - plan.reserve_s).max(0.0)));
        let predicted = NetworkChoice::zoo_all(&plan.networks, None)?;
        let calibration = NetworkChoice::zoo_all(&plan.calibration_networks, None)?;
        let mut canary = Vec::new();
        // The networks' own layers first: they are what the predicted networks are made of, so
        // they get the machine's calm stretches and the re-measuring time before the sweep.
        let layers_timed = if plan.fast {
            self.note("1/5 skipped (--fast): the networks' own layers are not profiled".into());
            None
        } else {
            self.note(format!(
                "1/5 profiling the layers of {} (batch {:?}) and of the calibration networks {} into `{}` (resumable)",
                plan.networks.join(", "),
                plan.batch,
                plan.calibration_networks.join(", "),
                data.display()
            ));
            let mut timed = 0;
            for (nets, batch) in [
                (&predicted, &plan.batch),
                (&calibration, &plan.calibration_batch),
            ] {
                let done = profile_layers(
                    nets,
                    batch,
                    plan.threads,
                    data,
                    remeasure_until,
                    self.observer.as_ref(),
                )
                .map_err(|e| self.measuring("step 1/5 (the networks' layers)", e))?;
                timed += done.timed;
                if !done.canary.readings_ms.is_empty() {
                    self.observer.done(Done::Canary(&done.canary));
                }
                canary.push(done.canary);
            }
            self.observer.done(Done::Layers { timed });
            self.note(format!("    {timed} new layer measurements"));
            Some(timed)
        };
        let (configurations, kinds) = plan.size();
        self.note(format!(
            "2/5 [{:.0} s] profiling {configurations} configurations over {kinds} kinds",
            self.elapsed_s()
        ));
        let options = |s: &Sweep| RunOptions {
            remeasure_until,
            ..RunOptions::for_sweep(s, data, Backend::Flex, device.clone(), plan.resume)
        };
        let mut sweeps = Vec::new();
        for sweep in &plan.sweeps {
            let jobs = perfcast_profile::run::plan(sweep)?;
            sweeps.push(self.measure(sweep, jobs, &options(sweep), "step 2/5 (the sweep)")?);
        }
        let mut clock = RoundClock::new(self.started, budget_s, plan.reserve_s);
        self.note(format!(
            "3/5 [{:.0} s] active rounds for {:.0} s: configurations where the models disagree most",
            self.elapsed_s(),
            clock.left_s().max(0.0)
        ));
        let mut active_rounds = 0;
        while let Some(seed) = clock.next_round() {
            active_rounds += 1;
            let active = ActivePlan {
                seed,
                ..ActivePlan::default()
            };
            for sweep in &plan.active_sweeps {
                let choices = choose_round(sweep, data, &device, &active)?;
                self.observer.done(Done::ActiveRound(&choices));
                let chosen: Vec<_> = choices.into_iter().flat_map(|c| c.chosen).collect();
                let jobs = jobs_of(&chosen, &sweep.phases);
                sweeps.push(self.measure(
                    sweep,
                    jobs,
                    &options(sweep),
                    "step 3/5 (an active round)",
                )?);
            }
        }
        self.check("step 3/5 (active rounds)")?;
        let dir = plan.bundle_dir();
        self.note(format!(
            "4/5 [{:.0} s] training {} on every kind, auto-selecting into `{}`",
            self.elapsed_s(),
            plan.models.join(","),
            dir.display()
        ));
        let train_plan = plan.train_plan();
        let train =
            crate::train::run(&train_plan, self.observer.clone(), self.interrupt).map_err(|e| {
                match e {
                    // Training checks the interrupt between fits and writes nothing when stopped.
                    Error::Select(perfcast_select::Error::Interrupted(at)) => {
                        self.stopped(format!("step 4/5 (training, before {at})"))
                    }
                    Error::Stopped(_) => self.stopped("step 4/5 (training)".into()),
                    e => e,
                }
            })?;
        self.observer.done(Done::Trained {
            report: &train,
            out: &train_plan.out,
        });
        self.check(&format!(
            "step 4/5 (training, which finished and wrote `{}` first)",
            dir.display()
        ))?;
        let (mut host_costs, mut calibration_runs) = (None, 0);
        if plan.fast {
            self.note("5/5 predicting zoo networks (host-cost calibration skipped: --fast)".into());
        } else {
            self.note(format!(
                "5/5 [{:.0} s] measuring {} end to end to fit the host-cost terms, then predicting",
                self.elapsed_s(),
                plan.calibration_networks.join(", ")
            ));
            let bundle = Bundle::load(&dir)?;
            let measure = MeasurePlan {
                threads: plan.threads,
                max_time_s: plan.calibration_max_time_s,
                ..MeasurePlan::calibration(plan.calibration_batch.clone())
            };
            let runs: Vec<_> =
                measure_networks(&calibration, &measure, &NoPeak, self.observer.as_ref())?
                    .into_iter()
                    .map(|m| (m.label, m.record))
                    .collect();
            let costs = calibrate_bundle(bundle, &dir, &runs, None, false)?;
            self.observer.done(Done::Calibrated {
                costs: &costs,
                runs: runs.len(),
                bundle: &dir,
            });
            calibration_runs = runs.len();
            host_costs = Some(costs);
            self.check("step 5/5 (the host-cost calibration)")?;
        }
        let predictor = Predictor::new(Bundle::load(&dir)?);
        let networks = network_table(&predictor, &predicted, &plan.batch, plan.threads)?;
        Ok(QuickstartReport {
            data: data.clone(),
            bundle: dir,
            layers_timed,
            canary,
            sweeps,
            active_rounds,
            train,
            host_costs,
            calibration_runs,
            networks,
            calibrated: predictor.bundle().manifest.host_costs.is_some(),
            elapsed_s: self.elapsed_s(),
        })
    }

    /// Measures `jobs` of `sweep`, progress as stage [`PROFILE_STAGE`], and hands the summary
    /// to the observer.
    fn measure(
        &self,
        sweep: &Sweep,
        jobs: Vec<perfcast_profile::run::Job>,
        options: &RunOptions,
        step: &str,
    ) -> Result<RunSummary> {
        let observer = self.observer.as_ref();
        let mut on_event = sweep_events(observer);
        let summary = run_jobs(sweep, jobs, options, &mut on_event, self.interrupt);
        observer.end(PROFILE_STAGE);
        let summary = summary.map_err(|e| match e {
            perfcast_profile::Error::Interrupted { .. } => self.measuring(step, e),
            e => Error::Context {
                context: format!("profiling into `{}`", options.out.display()),
                source: Box::new(e),
            },
        })?;
        self.observer.done(Done::Swept {
            modules: &sweep.modules,
            summary: &summary,
        });
        Ok(summary)
    }
}

/// When active rounds stop: a next round starts while one more, as long as the last one took
/// (at least `MIN_ROUND_S`), still ends `reserve_s` before the budget, counted from `started`.
#[derive(Clone, Debug)]
pub struct RoundClock {
    started: std::time::Instant,
    budget_s: f64,
    reserve_s: f64,
    round: u64,
    round_began_s: f64,
    last_round_s: f64,
}

/// The shortest round a clock expects before it has timed one, seconds.
pub const MIN_ROUND_S: f64 = 10.0;

impl RoundClock {
    /// A clock for rounds within `budget_s` of `started`, keeping `reserve_s` for what follows.
    pub fn new(started: std::time::Instant, budget_s: f64, reserve_s: f64) -> RoundClock {
        RoundClock {
            started,
            budget_s,
            reserve_s,
            round: 0,
            round_began_s: 0.0,
            last_round_s: 0.0,
        }
    }

    /// Seconds the rounds may still take.
    pub fn left_s(&self) -> f64 {
        self.left_at(self.started.elapsed().as_secs_f64())
    }

    fn left_at(&self, elapsed_s: f64) -> f64 {
        self.budget_s - self.reserve_s - elapsed_s
    }

    /// The next round's number (its seed), or `None` when it would not fit.
    pub fn next_round(&mut self) -> Option<u64> {
        self.next_at(self.started.elapsed().as_secs_f64())
    }

    fn next_at(&mut self, elapsed_s: f64) -> Option<u64> {
        if self.round > 0 {
            self.last_round_s = elapsed_s - self.round_began_s;
        }
        if self.left_at(elapsed_s) < self.last_round_s.max(MIN_ROUND_S) {
            return None;
        }
        self.round_began_s = elapsed_s;
        self.round += 1;
        Some(self.round - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn the_default_plan_sizes_the_quickstart_s_sweeps() {
        let plan = QuickstartPlan::new(40, "d".into(), "local".into()).unwrap();
        assert_eq!(
            plan.size(),
            perfcast_profile::overrides::quickstart_size(40)
        );
        assert_eq!(plan.bundle_dir(), Path::new("checkpoints/local"));
        let train = plan.train_plan();
        assert_eq!(train.out, Path::new("checkpoints/local.train"));
        assert_eq!((train.folds, train.refit, train.force), (3, true, true));
        let err = QuickstartPlan::new(9, "d".into(), "local".into()).unwrap_err();
        assert_eq!(err.to_string(), "`--samples` must be at least 10, got 9");
    }

    #[test]
    fn rounds_start_while_one_more_fits_before_the_reserve() {
        // 480 s budget, 60 s reserve: rounds may run until 420 s.
        let mut clock = RoundClock::new(std::time::Instant::now(), 480.0, 60.0);
        assert_eq!(clock.next_at(300.0), Some(0));
        assert_eq!(clock.next_at(350.0), Some(1), "70 s left, the last took 50");
        assert_eq!(clock.next_at(400.0), None, "20 s left, the last took 50");
        let mut late = RoundClock::new(std::time::Instant::now(), 480.0, 60.0);
        assert_eq!(late.next_at(415.0), None, "under the shortest round left");
        let mut off = RoundClock::new(std::time::Instant::now(), 0.0, 60.0);
        assert_eq!(off.next_at(0.0), None, "a zero budget runs none");
    }
}
