//! Stripping a framework's overhead: rows made up from a ridge bundle's own answers, a floor
//! and a known factor, so the factor and the stripped device's level are known.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use perfcast_calibrate::overhead::{REPORT_FILE, StripSettings, strip_overhead};
use perfcast_calibrate::{Bundle, Predictor};
use perfcast_core::{ModuleKind, Phase};
use perfcast_data::{DatasetDir, Outcome, Record, Timing};
use perfcast_select::testing::{ctx, device, linear};

/// A dataset at `dir` whose rows take `floor + factor x level x answer` ms (the factor three
/// halves of itself in training).
fn dataset(dir: &Path, predictor: &Predictor, floor: f64, factor: f64, level: f64) -> DatasetDir {
    let d = DatasetDir::create_or_open(dir, &device()).unwrap();
    let mut rows = Vec::new();
    for i in 0..120 {
        let spec = linear(16 + 8 * i, 32 + 4 * i);
        for phase in [Phase::Inference, Phase::Training] {
            let c = ctx(1 + (i * 7) % 64, phase);
            let answer = predictor.predict_module(&spec, &c).unwrap().ms;
            let f = if phase == Phase::Training {
                1.5 * factor
            } else {
                factor
            };
            rows.push(Record {
                spec: spec.clone(),
                context: c,
                backend: "tensorflow".into(),
                outcome: Outcome::Ok(Timing::median_only(floor + f * level * answer)),
                perfcast_version: "0".into(),
                timestamp: 0,
            });
        }
    }
    d.write(ModuleKind::Linear, &rows).unwrap();
    d
}

#[test]
fn the_framework_factor_comes_from_the_references_and_the_level_survives() {
    let tmp = tempfile::tempdir().unwrap();
    let bundle = tmp.path().join("bundle");
    perfcast_select::testing::write_ridge_bundle(&bundle, "test", 60).unwrap();
    let predictor = Predictor::new(Bundle::load(&bundle).unwrap());
    let dirs = vec![
        dataset(&tmp.path().join("ref-a"), &predictor, 0.2, 2.2, 1.0),
        dataset(
            &tmp.path().join("ref-b"),
            &predictor,
            0.1,
            2.0 * 2.0 / 2.2,
            1.0,
        ),
        dataset(&tmp.path().join("slow"), &predictor, 0.3, 2.0, 1.5),
    ];
    let refs = ["ref-a".to_string(), "ref-b".to_string()];
    let settings = StripSettings {
        max_rows: None,
        ..StripSettings::default()
    };
    let (report, rows) = strip_overhead(&bundle, &dirs, &refs, &[], &settings).unwrap();

    assert_eq!(report.factors.len(), 2, "{report:?}");
    for f in &report.factors {
        let want = if f.phase == Phase::Training { 3.0 } else { 2.0 };
        assert!((f.factor / want - 1.0).abs() < 0.05, "{f:?}");
        assert_eq!(f.references.len(), 2);
    }
    assert_eq!(rows.devices.len(), 1);
    let stripped = &rows.devices[0].tables[&ModuleKind::Linear];
    assert!(!stripped.is_empty());
    for table in &report.tables {
        assert!(table.rows_written < table.rows_read, "{table:?}");
        assert!(table.floor_ms >= 0.3, "{table:?}");
    }
    // What is left of each row is the device's own level over the bundle's answer, and no row
    // near the floor is kept.
    for r in stripped {
        let answer = predictor.predict_module(&r.spec, &r.context).unwrap().ms;
        let ms = r.timing().unwrap().median_ms;
        assert!((ms / answer / 1.5 - 1.0).abs() < 0.12, "{ms} vs {answer}");
        assert!(r.backend.ends_with("(overhead removed)"), "{}", r.backend);
    }

    // Written whole, with the factors beside the datasets; a cap keeps a sample.
    let out = tmp.path().join("out");
    let json = serde_json::to_string(&report).unwrap();
    rows.write_with(&out, false, &[(REPORT_FILE, json.as_bytes())])
        .unwrap();
    assert!(out.join(REPORT_FILE).is_file());
    let written = DatasetDir::open(out.join(device().slug())).unwrap();
    assert_eq!(
        written.read(ModuleKind::Linear).unwrap().len(),
        stripped.len()
    );
    rows.write_with(&out, true, &[(REPORT_FILE, json.as_bytes())])
        .unwrap();
    let capped = StripSettings {
        max_rows: Some(10),
        ..StripSettings::default()
    };
    let (report, _) = strip_overhead(&bundle, &dirs, &refs, &[], &capped).unwrap();
    assert!(report.tables.iter().all(|t| t.rows_written == 10));
    // References with too few rows above their floor give no factor, and nothing is stripped
    // without one.
    let strict = StripSettings {
        min_reference_rows: 10_000,
        ..StripSettings::default()
    };
    let (report, rows) = strip_overhead(&bundle, &dirs, &refs, &[], &strict).unwrap();
    assert!(report.factors.is_empty(), "{report:?}");
    assert_eq!(rows.imported(), 0);
}

#[test]
fn references_must_be_given_and_something_must_be_left_to_strip() {
    let tmp = tempfile::tempdir().unwrap();
    let bundle = tmp.path().join("bundle");
    perfcast_select::testing::write_ridge_bundle(&bundle, "test", 60).unwrap();
    let predictor = Predictor::new(Bundle::load(&bundle).unwrap());
    let dirs = vec![dataset(&tmp.path().join("a"), &predictor, 0.2, 2.0, 1.0)];
    let s = StripSettings::default();
    let err = strip_overhead(&bundle, &dirs, &["b".into()], &[], &s).unwrap_err();
    assert!(err.to_string().contains("reference `b`"), "{err}");
    let err = strip_overhead(&bundle, &dirs, &["a".into()], &[], &s).unwrap_err();
    assert!(err.to_string().contains("nothing to strip"), "{err}");
    let bad = StripSettings {
        min_floor_multiple: 0.5,
        ..StripSettings::default()
    };
    let err = strip_overhead(&bundle, &dirs, &["a".into()], &[], &bad).unwrap_err();
    assert!(err.to_string().contains("0.5"), "{err}");
}
