//! `measure`, `calibrate` and `eval networks` end to end.

use crate::train::{small_dataset, train_bundle};
use crate::{run, stderr};

fn examples() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/networks")
}

#[test]
fn measure_calibrate_and_eval_networks_from_saved_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let data = small_dataset(tmp.path(), "30");
    let runs = tmp.path().join("networks.jsonl");
    let tiny = examples().join("tiny-cnn.json");

    // Two networks, two batches, both phases; every layer also timed alone into the dataset.
    let o = run(&[
        "measure",
        "--network",
        "lenet5",
        "--network-file",
        tiny.to_str().unwrap(),
        "--batch",
        "1,2",
        "--phase",
        "inference,training",
        "--max-time-s",
        "0.02",
        "--save",
        runs.to_str().unwrap(),
        "--layers-into",
        data.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 8);
    for r in rows {
        assert!(r["timing"]["median_ms"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["layer_sum_ms"].as_f64().unwrap() > 0.0, "{r}");
    }
    let lenet = rows.iter().find(|r| r["name"] == "lenet5").unwrap();
    assert_eq!(lenet["params"], 61_706);
    assert_eq!(
        std::fs::read_to_string(&runs).unwrap().lines().count(),
        8,
        "one saved line per run"
    );
    // The networks' conv2d, pool and batchnorm layers were profiled into the dataset.
    assert!(data.join("conv2d.parquet").is_file());
    assert!(data.join("maxpool2d.parquet").is_file());

    let bundle = train_bundle(tmp.path(), &data, "knn,ridge");

    // Before calibration: the plain sum only.
    let eval = |extra: &[&str]| {
        let mut args = vec![
            "eval",
            "networks",
            "--bundle",
            bundle.to_str().unwrap(),
            "--from",
            runs.to_str().unwrap(),
            "--format",
            "json",
        ];
        args.extend_from_slice(extra);
        let o = run(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let before = eval(&[]);
    assert_eq!(before["runs"].as_array().unwrap().len(), 8);
    assert!(before["summary"][0]["composed_mape"].is_null());

    let o = run(&[
        "calibrate",
        "--bundle",
        bundle.to_str().unwrap(),
        "--from",
        runs.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let costs: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for phase in ["inference", "training"] {
        let c = &costs[phase];
        assert_eq!(c["runs"], 4, "{costs}");
        // Fitted in-sample with a gentle prior: never worse than the plain sum by much.
        assert!(
            c["fit_mape"].as_f64().unwrap() <= c["plain_mape"].as_f64().unwrap() + 1.0,
            "{costs}"
        );
    }

    let plot = tmp.path().join("networks.svg");
    let after = eval(&["--plot", plot.to_str().unwrap()]);
    for s in after["summary"].as_array().unwrap() {
        assert!(s["composed_mape"].as_f64().unwrap().is_finite(), "{s}");
    }
    let run0 = &after["runs"][0];
    let c = &run0["composed"];
    let sum = c["layer_sum_ms"].as_f64().unwrap()
        + c["per_run_ms"].as_f64().unwrap()
        + c["scale_ms"].as_f64().unwrap()
        + c["dispatch_ms"].as_f64().unwrap()
        + c["update_ms"].as_f64().unwrap();
    let total = c["total_ms"].as_f64().unwrap();
    assert!(
        (sum - total).abs() < 1e-9 * total.max(1.0) || total > sum,
        "terms add up (or the floor applies): {c}"
    );
    assert!(std::fs::read_to_string(&plot).unwrap().contains("<svg"));

    // The terms are in the bundle: `bundle show` and `predict --network` show them.
    let o = run(&["bundle", "show", bundle.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("host-cost terms"));
    let o = run(&[
        "predict",
        "--network",
        "lenet5",
        "--batch",
        "2",
        "--phase",
        "training",
        "--bundle",
        bundle.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("host: per run") && text.contains("host: update"),
        "{text}"
    );

    // One answer for a calibrated bundle: the CLI's JSON, the server's `/v1/predict/network`
    // and the library's `Predictor` give the same composed total, bit for bit,
    // never the plain sum.
    let (_server, addr) = crate::serve::start(&bundle);
    let library = perfcast_predict::Predictor::new(
        perfcast_predict::Bundle::load(&bundle).expect("the calibrated bundle loads"),
    );
    for (net, batch, phase) in [
        ("lenet5", 2, "training"),
        ("lenet5", 1, "inference"),
        ("alexnet", 1, "training"),
        ("resnet18", 1, "inference"),
        ("mobilenetv2", 1, "training"),
        ("vgg16", 1, "inference"),
    ] {
        let o = run(&[
            "predict",
            "--network",
            net,
            "--batch",
            &batch.to_string(),
            "--phase",
            phase,
            "--bundle",
            bundle.to_str().unwrap(),
            "--format",
            "json",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let cli: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let composed = cli["composed"]["total_ms"].as_f64().expect("calibrated");
        assert_eq!(cli["total_ms"].as_f64().unwrap(), composed, "{net}");
        let layers: f64 = cli["layers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["ms"].as_f64().unwrap())
            .sum();
        assert!((cli["layer_sum_ms"].as_f64().unwrap() - layers).abs() <= 1e-9 * layers);
        let body = format!(r#"{{"network": "{net}", "batch": {batch}, "phase": "{phase}"}}"#);
        let (status, body) =
            crate::serve::http(addr, "POST", "/v1/predict/network", body.as_bytes());
        assert_eq!(status, 200, "{body}");
        let served: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(served["total_ms"], cli["total_ms"], "{net} {batch} {phase}");
        let context = perfcast_core::Context {
            batch,
            phase: phase.parse().unwrap(),
            threads: 1,
            utilisation: 0.0,
        };
        let network = perfcast_core::zoo::build(net, None).unwrap();
        let from_library = library.predict_network(&network, &context).unwrap();
        assert_eq!(
            from_library.total_ms.to_bits(),
            cli["total_ms"].as_f64().unwrap().to_bits(),
            "{net} {batch} {phase}: library {} ms, CLI {}",
            from_library.total_ms,
            cli["total_ms"]
        );
    }
}

#[test]
fn a_network_with_a_shape_mismatch_is_rejected_with_the_layer_named() {
    let tmp = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(examples().join("tiny-cnn.json"))
        .unwrap()
        .replace(
            r#""name": "conv2", "spec": {"kind": "conv2d", "in_channels": 16"#,
            r#""name": "conv2", "spec": {"kind": "conv2d", "in_channels": 24"#,
        );
    assert!(text.contains("\"in_channels\": 24"), "the example changed");
    let bad = tmp.path().join("bad.json");
    std::fs::write(&bad, text).unwrap();
    for args in [
        vec!["measure", "--network-file", bad.to_str().unwrap()],
        vec!["predict", "--network-file", bad.to_str().unwrap()],
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = stderr(&o);
        assert!(
            err.contains("bad.json") && err.contains("`conv2`") && err.contains("expects input"),
            "{err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
}

#[test]
fn measure_refuses_bad_values_with_exit_2() {
    for (args, needle) in [
        (
            vec!["measure", "--network", "lenet5", "--batch", "0"],
            "--batch",
        ),
        (vec!["measure", "--network", "nosuchnet"], "nosuchnet"),
        (vec!["measure", "--network", "vgg16@x"], "vgg16@x"),
        (
            vec!["measure", "--network", "lenet5", "--max-time-s", "0"],
            "--max-time-s",
        ),
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
    }
}
