//! `perfcast train` as a workflow: every family fitted and cross-validated per kind, the
//! models, report and the observer's files (the CLI's charts) written, and with a bundle
//! named, one model per kind selected into it. The quickstart's training step is this call.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use perfcast_select::pipeline::{TrainPlan, TrainReport, train_and_select};

use crate::observe::StepObserver;
use crate::{Error, Result, check};

/// Trains and selects as `plan` says and writes the models, the report, the observer's
/// [`StepObserver::train_files`] and the bundle. The process's interrupt token stops training
/// between fits with nothing written ([`perfcast_select::Error::Interrupted`]); `interrupt`
/// is checked before the first.
pub fn run(
    plan: &TrainPlan,
    observer: Arc<dyn StepObserver>,
    interrupt: &AtomicBool,
) -> Result<TrainReport> {
    check(interrupt, "training")?;
    let trained = train_and_select(plan, observer.clone())?;
    let files = observer
        .train_files(&trained)
        .map_err(|source| Error::Context {
            context: format!("drawing the charts of `{}`", plan.out.display()),
            source,
        })?;
    Ok(trained.write(files)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    use perfcast_core::progress::{Observer, Silent};
    use perfcast_profile::Backend;
    use perfcast_select::pipeline::Trained;

    use crate::observe::ExtraFiles;
    use crate::profile::{self, ProfilePlan};

    /// Names one extra file after the device, as the CLI's charts are drawn per device.
    struct Charts;

    impl Observer for Charts {}

    impl StepObserver for Charts {
        fn train_files(
            &self,
            trained: &Trained,
        ) -> std::result::Result<ExtraFiles, Box<dyn std::error::Error + Send + Sync>> {
            Ok(vec![(
                PathBuf::from("device.txt"),
                trained.device.name.clone().into_bytes(),
            )])
        }
    }

    fn measured(root: &Path) -> PathBuf {
        let data = root.join("data");
        let plan = ProfilePlan {
            sweep: crate::tiny_sweep(&[perfcast_core::ModuleKind::Linear], 12),
            out: data.clone(),
            backend: Backend::Flex,
            device: Some(perfcast_core::testing::cpu_device()),
            resume: true,
            active: None,
        };
        profile::run(&plan, &Silent, &AtomicBool::new(false)).expect("profile");
        data
    }

    #[test]
    fn a_tiny_dataset_trains_into_a_bundle_with_the_observer_s_files_beside_the_models() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let bundle = tmp.path().join("bundle");
        let plan = TrainPlan {
            models: vec!["ridge".into(), "roofline".into()],
            folds: 2,
            bundle: Some(bundle.display().to_string()),
            ..TrainPlan::new(vec![measured(tmp.path())], tmp.path().join("models"))
        };
        let report = run(&plan, Arc::new(Charts), &AtomicBool::new(false)).expect("train");
        assert_eq!(report.kinds.len(), 1, "{report:?}");
        let models: Vec<_> = report.kinds[0]
            .models
            .iter()
            .map(|m| m.model.as_str())
            .collect();
        assert!(
            models.contains(&"ridge") && models.contains(&"roofline"),
            "{models:?}"
        );
        let device = std::fs::read_to_string(plan.out.join("device.txt")).expect("file");
        assert_eq!(device, perfcast_core::testing::cpu_device().name);
        let loaded = perfcast_predict::Bundle::load(&bundle).expect("bundle");
        assert!(loaded.manifest.kinds.contains_key("linear"));
    }

    #[test]
    fn a_stopped_training_writes_nothing() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let plan = TrainPlan::new(vec![tmp.path().join("data")], tmp.path().join("models"));
        let err = run(&plan, Arc::new(Silent), &AtomicBool::new(true)).expect_err("stopped");
        assert!(matches!(err, Error::Stopped(_)), "{err}");
        assert!(!plan.out.exists());
    }
}
