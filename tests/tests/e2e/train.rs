use perfcast_core::ModuleKind;
use perfcast_data::{DatasetDir, table};

use crate::{run, stderr, write_fast_sweep};

/// A small measured dataset of relu and linear rows (inference and training).
pub(crate) fn small_dataset(dir: &std::path::Path, samples: &str) -> std::path::PathBuf {
    let sweep = write_fast_sweep(dir, "");
    let text = std::fs::read_to_string(&sweep)
        .unwrap()
        .replace(
            "phases = [\"inference\"]",
            "phases = [\"inference\", \"training\"]",
        )
        .replace("batch = [1, 2]", "batch = [1, 2, 4, 8]")
        .replace(
            "c = { min = 1, max = 8 }",
            "c = { min = 1, max = 64, scale = \"log\" }",
        )
        .replace("h = [4, 8]", "h = { min = 2, max = 32 }")
        .replace(
            "in_features = { min = 4, max = 32 }",
            "in_features = { min = 4, max = 256, scale = \"log\" }",
        );
    std::fs::write(&sweep, text).unwrap();
    let out = dir.join("ds");
    let o = run(&[
        "profile",
        "--modules",
        "relu,linear",
        "--samples",
        samples,
        "--sweep",
        sweep.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    out
}

/// Trains `models` (comma-separated) on `data` with 3 folds into a bundle at `<dir>/bundle`,
/// asserting success; returns the bundle's path.
pub(crate) fn train_bundle(
    dir: &std::path::Path,
    data: &std::path::Path,
    models: &str,
) -> std::path::PathBuf {
    let bundle = dir.join("bundle");
    let o = run(&[
        "train",
        "--data",
        data.to_str().unwrap(),
        "--out",
        dir.join("models").to_str().unwrap(),
        "--models",
        models,
        "--folds",
        "3",
        "--bundle",
        bundle.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    bundle
}

#[test]
fn train_saves_every_model_and_eval_reloads_them() {
    let tmp = tempfile::tempdir().unwrap();
    let data = small_dataset(tmp.path(), "30");
    let models = tmp.path().join("models");
    let o = run(&[
        "train",
        "--data",
        data.to_str().unwrap(),
        "--out",
        models.to_str().unwrap(),
        "--models",
        "ridge,knn,trees,roofline",
        "--folds",
        "3",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let kinds = report["kinds"].as_array().unwrap();
    assert_eq!(kinds.len(), 2);
    for k in kinds {
        let entries = k["models"].as_array().unwrap();
        // The four families, then the best blend of two of them, which names its parts.
        assert_eq!(entries.len(), 5);
        assert_eq!(entries[4]["model"], "blend");
        let parts = entries[4]["parts"].as_str().unwrap();
        assert_eq!(parts.matches(" + ").count(), 1, "{parts}");
        for m in entries {
            let mape = m["test"]["mape"].as_f64().unwrap();
            assert!(mape.is_finite() && mape >= 0.0, "{m}");
            assert!(m["cost"]["one_row_us"].as_f64().unwrap() > 0.0);
            assert!(models.join(m["file"].as_str().unwrap()).is_file(), "{m}");
        }
        let kind = k["kind"].as_str().unwrap();
        assert!(
            models
                .join(format!("plots/{kind}-predicted-vs-measured.svg"))
                .is_file()
        );
        assert!(models.join(format!("plots/{kind}-error-cdf.svg")).is_file());
        let png = std::fs::read(models.join(format!("plots/{kind}-error-cdf.png"))).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        let heldout = std::fs::read_to_string(models.join(format!("{kind}/heldout.csv"))).unwrap();
        let header = heldout.lines().next().unwrap();
        assert!(
            header.contains(",measured_ms,ridge_ms,knn_ms,trees_ms,roofline_ms"),
            "{header}"
        );
        assert_eq!(
            heldout.lines().count(),
            1 + k["rows"][1].as_u64().unwrap() as usize
        );
    }
    assert!(models.join("report.json").is_file());

    let o = run(&[
        "eval",
        "--models",
        models.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // Two kinds x (four families and their blend), each reloaded and scored.
    assert_eq!(rows.as_array().unwrap().len(), 10);

    // A corrupt saved model is refused with its path.
    std::fs::write(models.join("relu/knn.json"), b"{\"model\":\"knn\",").unwrap();
    let o = run(&[
        "eval",
        "--models",
        models.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("knn.json"), "{}", stderr(&o));
}

#[test]
fn bad_training_data_fails_cleanly_without_a_partial_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let data = small_dataset(tmp.path(), "6");
    let models = tmp.path().join("models");

    // Too few rows for the folds.
    let o = run(&[
        "train",
        "--data",
        data.to_str().unwrap(),
        "--out",
        models.to_str().unwrap(),
        "--folds",
        "50",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("50-fold cross-validation needs at least 50"),
        "{}",
        stderr(&o)
    );
    assert!(!models.exists(), "no partial model directory");
    let leftovers: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".perfcast"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // A kind the dataset lacks is named, with the kinds it has.
    let o = run(&[
        "train",
        "--data",
        data.to_str().unwrap(),
        "--out",
        models.to_str().unwrap(),
        "--modules",
        "matmul",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("has no `matmul` table (it has: linear, relu)"),
        "{}",
        stderr(&o)
    );
    assert!(!models.exists());

    // A NaN latency is named with its file and row.
    let dir = DatasetDir::open(&data).unwrap();
    let mut df = table::read_parquet(&dir.module_path(ModuleKind::Relu)).unwrap();
    let mut median: Vec<Option<f64>> = df
        .column("median_ms")
        .unwrap()
        .f64()
        .unwrap()
        .iter()
        .collect();
    median[2] = Some(f64::NAN);
    df.replace(
        "median_ms",
        polars::prelude::Column::new("median_ms".into(), median),
    )
    .unwrap();
    table::write_parquet_atomic(&dir.module_path(ModuleKind::Relu), &mut df).unwrap();
    let o = run(&[
        "train",
        "--data",
        data.to_str().unwrap(),
        "--out",
        models.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("relu.parquet") && err.contains("row 2: `median_ms` is NaN"),
        "{err}"
    );
    assert!(!models.exists());
}

#[test]
fn train_fits_medn_and_the_mlp_saves_checkpoints_and_compares_a_shared_network() {
    let tmp = tempfile::tempdir().unwrap();
    let data = small_dataset(tmp.path(), "30");
    let models = tmp.path().join("models");
    let o = run(&[
        "train",
        "--data",
        data.to_str().unwrap(),
        "--out",
        models.to_str().unwrap(),
        "--models",
        "ridge,medn,mlp",
        "--folds",
        "2",
        "--set",
        "medn.max_steps=300",
        "--set",
        "mlp.max_steps=300",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for k in report["kinds"].as_array().unwrap() {
        let kind = k["kind"].as_str().unwrap();
        for m in k["models"].as_array().unwrap() {
            let mape = m["test"]["mape"].as_f64().unwrap();
            assert!(mape.is_finite() && mape >= 0.0, "{m}");
            // Both targets are scored separately.
            assert!(
                m["test_mape_by_phase"]["training"].as_f64().is_some(),
                "{m}"
            );
        }
        for family in ["medn", "mlp"] {
            assert!(models.join(format!("{kind}/{family}.json")).is_file());
            let ckpt = models.join(format!("{kind}/{family}"));
            assert!(ckpt.join("medn.json").is_file());
            assert!(ckpt.join("net-0.bpk").is_file());
        }
        // The single-task baseline keeps one network per target.
        assert!(models.join(format!("{kind}/mlp/net-1.bpk")).is_file());
    }
    let shared = report["shared"].as_array().unwrap();
    assert_eq!(shared.len(), 4, "two kinds x (medn, mlp)");
    assert!(
        shared
            .iter()
            .all(|s| s["shared_mape"].as_f64().unwrap() >= 0.0)
    );

    // eval reloads the neural models like the others.
    let o = run(&[
        "eval",
        "--models",
        models.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // Two kinds x (ridge, medn, mlp, the networks shared by both kinds, and a blend).
    assert_eq!(rows.as_array().unwrap().len(), 12);

    // A bad hyper-parameter is named before anything is fitted.
    let o = run(&[
        "train",
        "--data",
        data.to_str().unwrap(),
        "--out",
        tmp.path().join("m2").to_str().unwrap(),
        "--models",
        "medn",
        "--set",
        "medn.dropout=1.5",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("dropout must be in [0, 1), got 1.5"),
        "{}",
        stderr(&o)
    );
}

/// A kind with fewer training rows than MEDN needs (`registry::NETWORK_MIN_ROWS`) is trained
/// with the other families and a note, not with a network that cannot win.
#[test]
fn medn_is_skipped_on_a_kind_too_small_for_it() {
    let tmp = tempfile::tempdir().unwrap();
    let data = small_dataset(tmp.path(), "10");
    let models = tmp.path().join("models");
    let o = run(&[
        "train",
        "--data",
        data.to_str().unwrap(),
        "--out",
        models.to_str().unwrap(),
        "--models",
        "ridge,medn",
        "--folds",
        "2",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("too few for medn"), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for k in report["kinds"].as_array().unwrap() {
        let names: Vec<&str> = k["models"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["model"].as_str().unwrap())
            .collect();
        assert!(
            names.contains(&"ridge") && !names.contains(&"medn"),
            "{names:?}"
        );
        assert!(k["rows"][0].as_u64().unwrap() < 40, "{k}");
    }
}
