//! The quickstart run from the library on a tiny budget: a sweep of LeNet-5's kinds at toy
//! sizes with short timing, LeNet-5 for the layers, the calibration and the predictions, and
//! the cheap families; then a rerun that resumes, and an interrupted run.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use perfcast_core::progress::{Observer, Silent};
use perfcast_profile::Sweep;
use perfcast_workflow::Error;
use perfcast_workflow::observe::{Done, StepObserver};
use perfcast_workflow::quickstart::{self, QuickstartPlan};

fn plan(dir: &Path) -> QuickstartPlan {
    let strings = |s: &[&str]| s.iter().map(|s| s.to_string()).collect();
    QuickstartPlan {
        models: strings(&["ridge", "roofline"]),
        networks: strings(&["lenet5"]),
        batch: vec![1, 2],
        calibration_networks: strings(&["lenet5"]),
        calibration_batch: vec![1, 2, 4, 8],
        calibration_max_time_s: 0.05,
        budget_s: 0.0,
        sweeps: vec![
            Sweep::from_file(Path::new(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../examples/sweeps/tiny.toml"
            )))
            .unwrap(),
        ],
        active_sweeps: Vec::new(),
        device: Some(perfcast_core::testing::cpu_device()),
        ..QuickstartPlan::new(
            10,
            dir.join("data"),
            dir.join("bundle").display().to_string(),
        )
        .unwrap()
    }
}

/// The steps the observer was told of, by name.
#[derive(Default)]
struct Steps(Mutex<Vec<&'static str>>);

impl Observer for Steps {}

impl StepObserver for Steps {
    fn done(&self, step: Done<'_>) {
        let name = match step {
            Done::Canary(_) => "canary",
            Done::Layers { .. } => "layers",
            Done::ActiveRound(_) => "active",
            Done::Row(_) => "row",
            Done::Swept { .. } => "swept",
            Done::Trained { .. } => "trained",
            Done::Calibrated { .. } => "calibrated",
            _ => "other",
        };
        self.0.lock().unwrap().push(name);
    }
}

#[test]
fn the_quickstart_profiles_trains_calibrates_and_predicts_and_a_rerun_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let plan = plan(tmp.path());
    let steps = Arc::new(Steps::default());
    let report = quickstart::run(&plan, steps.clone(), &AtomicBool::new(false)).unwrap();

    let seen: Vec<_> = steps.0.lock().unwrap().clone();
    let rows = seen.iter().filter(|s| **s == "row").count();
    let steps: Vec<_> = seen
        .into_iter()
        .filter(|s| !["canary", "row"].contains(s))
        .collect();
    assert_eq!(steps, ["layers", "swept", "trained", "calibrated"]);
    assert!(report.layers_timed.unwrap() > 0, "{report:?}");
    assert_eq!(report.sweeps.len(), 1);
    let counts = &report.sweeps[0].kinds;
    assert_eq!(counts.len(), 4, "{counts:?}");
    assert!(
        counts.values().all(|c| c.measured > 0 && c.skipped == 0),
        "{counts:?}"
    );
    let swept: usize = counts.values().map(|c| c.measured + c.failed).sum();
    assert_eq!(rows, swept, "each row of the sweep is told as it is saved");
    assert_eq!(
        report.active_rounds, 0,
        "a zero budget runs no active round"
    );

    // The bundle answers for every kind of LeNet-5, and holds the fitted host-cost terms.
    let bundle = perfcast_predict::Bundle::load(&report.bundle).unwrap();
    let kinds: Vec<&str> = bundle.manifest.kinds.keys().map(String::as_str).collect();
    for kind in ["avgpool2d", "conv2d", "linear", "tanh"] {
        assert!(kinds.contains(&kind), "{kinds:?}");
    }
    assert_eq!(bundle.manifest.host_costs, report.host_costs);
    assert!(report.calibrated);
    assert_eq!(report.calibration_runs, 8, "4 batch sizes in 2 phases");
    assert!(
        report
            .train
            .kinds
            .iter()
            .all(|k| k.models.iter().any(|m| m.model == "ridge"))
    );
    assert!(
        tmp.path()
            .join("bundle.train")
            .join("report.json")
            .is_file()
    );

    // LeNet-5 at batch 1 and 2, a training step dearer than inference.
    let labels: Vec<_> = report
        .networks
        .iter()
        .map(|r| (r.0.as_str(), r.1))
        .collect();
    assert_eq!(labels, [("lenet5", 1), ("lenet5", 2)]);
    for (_, _, inference, training) in &report.networks {
        assert!(inference.is_finite() && *inference > 0.0, "{report:?}");
        assert!(training > inference, "{report:?}");
    }

    // A rerun (fast: no layers, no calibration) measures nothing the dataset holds; its bundle
    // is trained anew, so it has no host-cost terms.
    let again = quickstart::run(
        &QuickstartPlan { fast: true, ..plan },
        Arc::new(Silent),
        &AtomicBool::new(false),
    )
    .unwrap();
    assert_eq!(again.layers_timed, None);
    let counts = &again.sweeps[0].kinds;
    assert!(
        counts.values().all(|c| c.measured == 0 && c.skipped > 0),
        "{counts:?}"
    );
    assert!(again.host_costs.is_none() && !again.calibrated);
}

#[test]
fn an_interrupted_quickstart_says_where_it_stopped_and_writes_no_bundle() {
    let tmp = tempfile::tempdir().unwrap();
    let plan = QuickstartPlan {
        fast: true,
        ..plan(tmp.path())
    };
    let err = quickstart::run(&plan, Arc::new(Silent), &AtomicBool::new(true)).unwrap_err();
    assert!(matches!(err, Error::Interrupted { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message
            .starts_with("quickstart interrupted in step 2/5 (the sweep) after 0 new measurements")
            && message.contains(&tmp.path().join("data").display().to_string()),
        "{message}"
    );
    assert!(!tmp.path().join("bundle").exists());
}
