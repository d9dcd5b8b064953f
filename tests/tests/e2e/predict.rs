//! `train --bundle`, `bundle show` and `predict` end to end.

use crate::train::small_dataset;
use crate::{run, stderr};

#[test]
fn train_writes_a_bundle_that_predict_and_bundle_show_use() {
    let tmp = tempfile::tempdir().unwrap();
    let data = small_dataset(tmp.path(), "30");
    let bundle = tmp.path().join("bundle");
    let o = run(&[
        "train",
        "--data",
        data.to_str().unwrap(),
        "--out",
        tmp.path().join("models").to_str().unwrap(),
        "--models",
        "ridge,trees,knn",
        "--folds",
        "3",
        "--bundle",
        bundle.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let sel = &report["selection"];
    assert_eq!(sel["kinds"].as_array().unwrap().len(), 2);
    // Three families and their blend.
    assert_eq!(sel["single"].as_array().unwrap().len(), 4);
    // Auto-selection is never worse in cross-validation than one family everywhere, and its
    // held-out figure is reported beside theirs.
    assert!(sel["overall"]["mape"].as_f64().unwrap().is_finite());
    assert!(bundle.join("manifest.json").is_file());

    let o = run(&[
        "bundle",
        "show",
        bundle.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let manifest: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(manifest["format"], 1);
    let linear = &manifest["kinds"]["linear"];
    assert_eq!(linear["candidates"].as_array().unwrap().len(), 4);
    assert!(linear["ranges"].as_array().unwrap().len() > 10);

    // One module from flags.
    let o = run(&[
        "predict",
        "linear",
        "--input",
        "16",
        "--out-features",
        "8",
        "--batch",
        "2",
        "--bundle",
        bundle.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(rows[0]["ms"].as_f64().unwrap() > 0.0);
    assert_eq!(rows[0]["fallback"], false);

    // Far outside the trained range: predicted, with a warning on stderr.
    let o = run(&[
        "predict",
        "linear",
        "--input",
        "4096",
        "--out-features",
        "8",
        "--bundle",
        bundle.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("`in_features` = 4096 is outside"),
        "{}",
        stderr(&o)
    );

    // A zoo network: every layer, the total, the kinds without a model marked.
    let o = run(&[
        "predict",
        "--network",
        "lenet5",
        "--batch",
        "4",
        "--bundle",
        bundle.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let p: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let layers = p["layers"].as_array().unwrap();
    let sum: f64 = layers.iter().map(|l| l["ms"].as_f64().unwrap()).sum();
    assert!((p["total_ms"].as_f64().unwrap() - sum).abs() < 1e-9 * sum);
    assert!(p["fallback_layers"].as_u64().unwrap() > 0);

    // A network JSON with a shape mismatch names the layer; exit 2.
    let net = tmp.path().join("bad.json");
    std::fs::write(
        &net,
        r#"{"name": "bad", "input": [3, 8, 8], "layers": [
            {"name": "c1", "spec": {"kind": "conv2d", "in_channels": 3, "out_channels": 4, "input_hw": 8, "kernel": 3, "padding": 1}},
            {"name": "c2", "spec": {"kind": "conv2d", "in_channels": 5, "out_channels": 4, "input_hw": 8, "kernel": 3, "padding": 1}}]}"#,
    )
    .unwrap();
    let o = run(&[
        "predict",
        "--network-file",
        net.to_str().unwrap(),
        "--bundle",
        bundle.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("layer 1 `c2`"), "{}", stderr(&o));

    // A modules file: one row per entry, each with its own batch; a bad entry is refused with
    // the file and its index, whether the spec or the entry's context is wrong.
    let modules = tmp.path().join("modules.json");
    std::fs::write(
        &modules,
        r#"[{"kind": "linear", "tokens": 1, "in_features": 16, "out_features": 8},
            {"kind": "linear", "tokens": 1, "in_features": 16, "out_features": 8, "batch": 4}]"#,
    )
    .unwrap();
    let o = run(&[
        "predict",
        "--modules-file",
        modules.to_str().unwrap(),
        "--bundle",
        bundle.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["context"]["batch"], 1);
    assert_eq!(rows[1]["context"]["batch"], 4);
    for (text, named) in [
        (
            r#"[{"kind": "linear", "tokens": 1, "in_features": 16, "out_features": 8},
                {"kind": "linear", "tokens": 1, "in_features": 16, "out_features": 8, "batch": 0}]"#,
            "module 1",
        ),
        (
            r#"[{"kind": "conv2d", "in_channels": 3, "out_channels": 4, "input_hw": 4, "kernel": 7}]"#,
            "module 0",
        ),
    ] {
        std::fs::write(&modules, text).unwrap();
        let o = run(&[
            "predict",
            "--modules-file",
            modules.to_str().unwrap(),
            "--bundle",
            bundle.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains("modules.json") && err.contains(named), "{err}");
        assert!(o.stdout.is_empty());
    }

    // A bad value is named; a corrupt bundle is refused with its file.
    let o = run(&[
        "predict",
        "conv2d",
        "--input",
        "3x0x8",
        "--out-channels",
        "4",
        "--kernel",
        "3",
        "--bundle",
        bundle.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("`0` is not a positive size"),
        "{}",
        stderr(&o)
    );
    std::fs::write(bundle.join("manifest.json"), b"{\"format\": 1, \"na").unwrap();
    let o = run(&["bundle", "show", bundle.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("manifest.json"), "{}", stderr(&o));
}

#[test]
fn dtype_predicts_a_gpu_in_half_precision_and_refuses_what_it_cannot() {
    let bundle = concat!(env!("CARGO_MANIFEST_DIR"), "/../checkpoints/gpu");
    let gemm = |extra: &[&str]| {
        let mut args = vec![
            "predict",
            "linear",
            "--input",
            "2048x4096",
            "--out-features",
            "4096",
            "--bundle",
            bundle,
            "--format",
            "json",
        ];
        args.extend_from_slice(extra);
        run(&args)
    };
    let ms = |o: &std::process::Output| {
        assert!(o.status.success(), "{}", stderr(o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v[0]["ms"].as_f64().unwrap()
    };
    let fp32 = ms(&gemm(&["--device", "a40"]));
    let fp16 = ms(&gemm(&["--device", "a40", "--dtype", "fp16"]));
    assert_eq!(fp16, ms(&gemm(&["--device", "a40:fp16"])));
    // The fp16 tensor peak is 4x the fp32 one, and the bundle learned fp16 GEMMs on it.
    assert!(fp16 < fp32 / 2.0, "fp16 {fp16} ms against fp32 {fp32} ms");
    for (extra, says) in [
        (vec!["--dtype", "fp16"], "needs a GPU"),
        (vec!["--device", "a40", "--dtype", "fp8"], "fp8"),
        (vec!["--device", "k80", "--dtype", "bf16"], "no `bf16` peak"),
        (vec!["--device", "a40", "--dtype", "int4"], "int4"),
    ] {
        let o = gemm(&extra);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{extra:?}: {}", stderr(&o));
    }
}

#[test]
fn map_carries_a_measured_step_to_other_gpus_beside_the_flop_ratio() {
    let bundle = concat!(env!("CARGO_MANIFEST_DIR"), "/../checkpoints/gpu");
    let o = run(&[
        "map",
        "--network",
        "resnet18@64",
        "--batch",
        "16",
        "--measured-ms",
        "40",
        "--anchor",
        "t4",
        "--device",
        "v100,l4",
        "--bundle",
        bundle,
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rows.len(), 2);
    let f = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap();
    // The FLOP ratio is the anchor's peak over the target's (T4 8,141 GFLOP/s).
    assert!((f(&rows[0], "flop_ratio_ms") - 40.0 * 8141.0 / 14029.0).abs() < 1e-9);
    assert!((f(&rows[1], "flop_ratio_ms") - 40.0 * 8141.0 / 31334.0).abs() < 1e-9);
    for r in &rows {
        assert!(f(r, "mapped_ms") >= f(r, "roofline_ms"), "{r}");
        assert!(f(r, "bundle_ratio_ms") > 0.0);
    }
    // A training GPU of the bundle takes the bundle's ratio; an unseen one the blend.
    assert_eq!(f(&rows[0], "mapped_ms"), f(&rows[0], "bundle_ratio_ms"));
    let blend = (f(&rows[1], "bundle_ratio_ms") * f(&rows[1], "flop_ratio_ms")).sqrt();
    assert!((f(&rows[1], "mapped_ms") - blend.max(f(&rows[1], "roofline_ms"))).abs() < 1e-9);
    let o = run(&[
        "map",
        "--network",
        "resnet18",
        "--measured-ms",
        "40",
        "--anchor",
        "iphone",
        "--device",
        "v100",
        "--bundle",
        bundle,
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("`--anchor`"), "{}", stderr(&o));
}
