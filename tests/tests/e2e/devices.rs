//! Cross-device prediction: training across devices, leave-one-device-out and anchor
//! evaluation, and predicting devices never measured from their specs.

use std::path::{Path, PathBuf};

use perfcast_core::testing::gpu_with_sms as gpu;
use perfcast_core::{Context, Linear, ModuleKind, ModuleSpec, Phase};
use perfcast_data::{DatasetDir, Outcome, Record, Timing};

use crate::{run, stderr};

/// Four GPUs that measured the same linear layers; every kernel reaches 60% of peak FLOP/s
/// and 75% of bandwidth, plus 8 us per call, so a model of efficiency transfers.
fn gpu_datasets(root: &Path) -> PathBuf {
    let parent = root.join("gpus");
    for d in [
        gpu("Small GPU", 5_000.0, 200.0, 20),
        gpu("Mid GPU", 9_000.0, 500.0, 40),
        gpu("Big GPU", 14_000.0, 900.0, 80),
        gpu("Huge GPU", 20_000.0, 1_500.0, 108),
    ] {
        let dir = DatasetDir::create_or_open(parent.join(d.slug()), &d).unwrap();
        let records: Vec<Record> = (0..120)
            .map(|i| {
                let spec = ModuleSpec::Linear(Linear {
                    tokens: 1 + (i * 7) % 32,
                    in_features: 64 + (i * 131) % 3000,
                    out_features: 64 + (i * 257) % 3000,
                    bias: true,
                });
                let batch = 1 << (i % 5);
                let f = perfcast_core::features::derive(&spec, batch);
                let ms = (f.flops / (0.6 * d.peak_gflops * 1e6))
                    .max((f.bytes_read + f.bytes_written) / (0.75 * d.mem_bandwidth_gbs * 1e6))
                    + 0.008;
                Record {
                    spec,
                    context: Context {
                        batch,
                        phase: Phase::Inference,
                        threads: 1,
                        utilisation: 0.0,
                    },
                    backend: "synthetic".into(),
                    outcome: Outcome::Ok(Timing::median_only(ms)),
                    perfcast_version: "0".into(),
                    timestamp: 0,
                }
            })
            .collect();
        dir.write(ModuleKind::Linear, &records).unwrap();
    }
    parent
}

fn json(out: &std::process::Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", stderr(out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn leave_one_device_out_prints_a_mape_per_device() {
    let tmp = tempfile::tempdir().unwrap();
    let data = gpu_datasets(tmp.path());
    let v = json(&run(&[
        "eval",
        "devices",
        "--data",
        data.to_str().unwrap(),
        "--models",
        "trees,trees-raw",
        "--format",
        "json",
    ]));
    let models = v[0]["models"].as_array().unwrap();
    assert_eq!(models[0]["model"], "trees-xdev");
    assert_eq!(models[0]["devices"].as_array().unwrap().len(), 4);
    let mean = |m: &serde_json::Value| m["mean_mape"].as_f64().unwrap();
    assert!(mean(&models[0]) < 10.0, "{}", mean(&models[0]));
    // The plain family cannot place a device it has not seen.
    assert!(mean(&models[0]) < mean(&models[1]));

    // The flag form of the same evaluation.
    let o = run(&[
        "eval",
        "--leave-one-device-out",
        "--data",
        data.to_str().unwrap(),
        "--models",
        "ridge",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("Huge GPU") && text.contains("ridge-xdev"),
        "{text}"
    );
}

#[test]
fn anchor_mapping_predicts_each_held_out_device() {
    let tmp = tempfile::tempdir().unwrap();
    let data = gpu_datasets(tmp.path());
    let v = json(&run(&[
        "eval",
        "anchor",
        "--data",
        data.to_str().unwrap(),
        "--anchor",
        "all",
        "--format",
        "json",
    ]));
    let devices = v[0]["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 4);
    // Three anchors each, one prediction per target configuration (their geometric mean).
    assert_eq!(devices[0]["anchors"].as_array().unwrap().len(), 3);
    assert_eq!(devices[0]["pairs"], 120);
    assert!(v[0]["mean_mape"]["learned"].as_f64().unwrap() < 10.0, "{v}");
}

#[test]
fn a_cross_device_bundle_predicts_any_gpu_and_rejects_absurd_specs() {
    let tmp = tempfile::tempdir().unwrap();
    let data = gpu_datasets(tmp.path());
    let bundle = tmp.path().join("bundle");
    let o = run(&[
        "train",
        "--data",
        data.to_str().unwrap(),
        "--models",
        "ridge,trees",
        "--folds",
        "2",
        "--out",
        tmp.path().join("models").to_str().unwrap(),
        "--bundle",
        bundle.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bundle.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["trained_devices"].as_array().unwrap().len(), 4);
    assert!(
        manifest["kinds"]["linear"]["chosen"]
            .as_str()
            .unwrap()
            .ends_with("-xdev")
    );

    // A known GPU by name: linear layers from the model, other kinds from the spec roofline.
    let predict = |device: &[&str]| {
        let mut args = vec![
            "predict",
            "--bundle",
            bundle.to_str().unwrap(),
            "--network",
            "resnet50",
            "--batch",
            "32",
            "--format",
            "json",
        ];
        args.extend_from_slice(device);
        run(&args)
    };
    let h100 = json(&predict(&["--device", "h100"]));
    let v100 = json(&predict(&["--device", "v100"]));
    let layers = h100["layers"].as_array().unwrap();
    let fc = layers.iter().find(|l| l["kind"] == "linear").unwrap();
    assert_eq!(fc["fallback"], false);
    assert!(fc["model"].as_str().unwrap().ends_with("-xdev"));
    assert!(layers.iter().any(|l| l["fallback"] == true));
    assert!(h100["total_ms"].as_f64().unwrap() < v100["total_ms"].as_f64().unwrap());

    // A spec file in perfcast's format.
    let spec = tmp.path().join("gpu.json");
    let good = serde_json::json!({
        "name": "Some GPU", "peak_gflops": 30000.0, "mem_bandwidth_gbs": 2000.0,
        "cores": 100, "threads": 6400, "clock_mhz": 1700.0, "memory_gb": 48.0, "cache_mb": 32.0
    });
    std::fs::write(&spec, good.to_string()).unwrap();
    json(&predict(&["--device-spec", spec.to_str().unwrap()]));

    // Zero bandwidth, negative SMs, a missing field: one line naming field and file, exit 2.
    for (field, value, expect) in [
        (
            "mem_bandwidth_gbs",
            serde_json::json!(0),
            "`mem_bandwidth_gbs` must be greater than 0",
        ),
        (
            "cores",
            serde_json::json!(-4),
            "`cores` must be at least 1, got -4",
        ),
        (
            "peak_gflops",
            serde_json::Value::Null,
            "`peak_gflops` must be a number",
        ),
    ] {
        let mut bad = good.clone();
        bad[field] = value;
        std::fs::write(&spec, bad.to_string()).unwrap();
        let o = predict(&["--device-spec", spec.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2));
        let err = stderr(&o);
        assert!(err.contains(expect) && err.contains("gpu.json"), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
    let o = predict(&["--device", "no-such-gpu"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("unknown device"), "{}", stderr(&o));
}

#[test]
fn a_single_device_bundle_refuses_another_device() {
    let tmp = tempfile::tempdir().unwrap();
    let data = gpu_datasets(tmp.path());
    let bundle = tmp.path().join("one");
    let o = run(&[
        "train",
        "--data",
        data.join("big-gpu").to_str().unwrap(),
        "--models",
        "ridge",
        "--folds",
        "2",
        "--out",
        tmp.path().join("m").to_str().unwrap(),
        "--bundle",
        bundle.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(&[
        "predict",
        "linear",
        "--input",
        "512",
        "--out-features",
        "512",
        "--bundle",
        bundle.to_str().unwrap(),
        "--device",
        "t4",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("trained on `Big GPU` (")
            && stderr(&o).contains("only and cannot predict `Tesla T4`"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn map_predicts_a_profile_on_a_device_left_out_of_the_mapping() {
    let tmp = tempfile::tempdir().unwrap();
    let data = gpu_datasets(tmp.path());
    // The target, "Big GPU", is not among the devices the mapping is fitted on.
    let big = tmp.path().join("big");
    std::fs::rename(data.join("big-gpu"), &big).unwrap();
    let spec = big.join("device.json");
    let csv = tmp.path().join("mapped.csv");
    let mapped = json(&run(&[
        "map",
        "--from",
        data.join("mid-gpu").to_str().unwrap(),
        "--train",
        data.to_str().unwrap(),
        "--device-spec",
        spec.to_str().unwrap(),
        "--out",
        csv.to_str().unwrap(),
        "--format",
        "json",
    ]));
    assert_eq!(mapped["anchor"], "Mid GPU");
    assert_eq!(mapped["target"], "Big GPU");
    let rows = mapped["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 120);
    // The measured times on the target, in the same row order (the same generator).
    let truth = DatasetDir::open(&big)
        .unwrap()
        .read(ModuleKind::Linear)
        .unwrap();
    let mut ape = 0.0;
    for (row, t) in rows.iter().zip(&truth) {
        assert_eq!(row["module"], t.spec.describe());
        let measured = t.timing().unwrap().median_ms;
        ape += (row["predicted_ms"].as_f64().unwrap() - measured).abs() / measured;
    }
    let mape = 100.0 * ape / rows.len() as f64;
    assert!(mape < 10.0, "mapped MAPE {mape}");
    let text = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(text.lines().count(), 121, "header and one line per row");

    // No target, or an absurd one: one line, exit 2, no CSV.
    let bad = tmp.path().join("bad.json");
    let good = std::fs::read_to_string(&spec).unwrap();
    let absurd = good.replace("\"mem_bandwidth_gbs\": 900.0", "\"mem_bandwidth_gbs\": 0.0");
    assert_ne!(good, absurd);
    std::fs::write(&bad, absurd).unwrap();
    let out = tmp.path().join("never.csv");
    for target in [vec![], vec!["--device-spec", bad.to_str().unwrap()]] {
        let mut args = vec![
            "map",
            "--from",
            big.to_str().unwrap(),
            "--train",
            data.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend(target);
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert_eq!(stderr(&o).trim().lines().count(), 1, "{}", stderr(&o));
        assert!(!out.exists());
    }
}
