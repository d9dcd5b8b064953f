//! The process's interrupt token stops training between fits. Its own test binary: the token
//! is process-wide and stays set, so no other test may share the process.

use std::sync::Arc;

use perfcast_core::progress::Silent;
use perfcast_core::{Context, ModuleKind, ModuleSpec, Phase};
use perfcast_data::{DatasetDir, Outcome, Record, Timing};
use perfcast_select::Error;
use perfcast_select::pipeline::{TrainPlan, train_and_select};

#[test]
fn an_interrupt_stops_training_before_the_next_fit_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let ds = DatasetDir::create_or_open(&data, &perfcast_core::testing::cpu_device()).unwrap();
    let records: Vec<Record> = (0..40)
        .map(|i| {
            let spec = ModuleSpec::from_json(&format!(
                r#"{{"kind":"linear","in_features":{},"out_features":{}}}"#,
                16 + 8 * i,
                32 + 4 * i
            ))
            .unwrap();
            Record {
                spec,
                context: Context {
                    batch: 1 + i % 4,
                    phase: Phase::Inference,
                    threads: 1,
                    utilisation: 0.0,
                },
                backend: "flex".into(),
                outcome: Outcome::Ok(Timing::median_only(0.002 + i as f64 * 1e-4)),
                perfcast_version: "test".into(),
                timestamp: 0,
            }
        })
        .collect();
    ds.write(ModuleKind::Linear, &records).unwrap();
    let plan = TrainPlan {
        models: vec!["ridge".into()],
        folds: 2,
        ..TrainPlan::new(vec![data], tmp.path().join("models"))
    };
    // Trains while nobody asked to stop.
    assert!(train_and_select(&plan, Arc::new(Silent)).is_ok());
    perfcast_core::interrupt::request();
    let err = train_and_select(&plan, Arc::new(Silent)).err().unwrap();
    assert!(matches!(err, Error::Interrupted(_)), "{err}");
    assert!(err.to_string().contains("linear: ridge"), "{err}");
    assert!(!tmp.path().join("models").exists());
}
