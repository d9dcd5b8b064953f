//! `scale fit` and `scale predict` end to end.

use std::path::{Path, PathBuf};

use crate::{perfcast, run, stderr};

/// startup, compute, serial, step, sync, contention: the default expression's terms.
const TRUTH: [f64; 6] = [0.2, 2e-3, 1e-3, 5e-3, 2e-3, 1e-4];

fn truth_at(p: f64, b: f64, n: f64) -> f64 {
    let [c0, c1, c2, c3, c4, c5] = TRUTH;
    c0 + c1 * n / p + c2 * n + c3 * n / b + c4 * (n / b) * p.log2() + c5 * n * (p - 1.0)
}

/// Runs from the known expression with 2% Gaussian noise (xorshift + Box-Muller, fixed
/// seed), and an extra column the reader must ignore.
fn synthetic_runs(dir: &Path) -> PathBuf {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut uniform = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut csv = String::from("host,p,b,n,time_s\n");
    for p in [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0] {
        for b in [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0] {
            for n in [32.0, 128.0, 512.0, 2048.0, 8192.0] {
                let (u1, u2) = (uniform(), uniform());
                let z = (-2.0 * (1.0 - u1).ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                let t = truth_at(p, b, n) * (1.0 + 0.02 * z);
                csv.push_str(&format!("node-a,{p},{b},{n},{t}\n"));
            }
        }
    }
    let path = dir.join("runs.csv");
    std::fs::write(&path, csv).unwrap();
    path
}

#[test]
fn scale_fit_recovers_the_constants_and_reports_the_holdout() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = synthetic_runs(tmp.path());
    let plot = tmp.path().join("curves.svg");
    let o = run(&[
        "scale",
        "fit",
        "--runs",
        runs.to_str().unwrap(),
        "--holdout",
        "0.25",
        "--seed",
        "3",
        "--predict",
        "p=24,b=32,n=20000",
        "--plot",
        plot.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["runs"], 450);
    assert_eq!(r["holdout"]["runs"], 113);
    assert_eq!(r["fitted_runs"], 450 - 113);
    let constants = r["constants"].as_array().unwrap();
    let names: Vec<&str> = constants
        .iter()
        .map(|c| c["term"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["startup", "compute", "serial", "step", "sync", "contention"]
    );
    for (c, truth) in constants.iter().zip(TRUTH) {
        let v = c["value"].as_f64().unwrap();
        assert!(
            (v / truth - 1.0).abs() < 0.05,
            "`{}` = {v}, truth {truth}",
            c["term"]
        );
        assert!(!c["meaning"].as_str().unwrap().is_empty());
    }
    let holdout = r["holdout"]["mape"].as_f64().unwrap();
    assert!(holdout > 0.5 && holdout < 3.0, "{holdout}");
    // Beyond the runs (p = 24): the prediction follows the known expression.
    let predicted = r["predictions"][0]["time_s"].as_f64().unwrap();
    let truth = truth_at(24.0, 32.0, 20000.0);
    assert!(
        (predicted / truth - 1.0).abs() < 0.05,
        "{predicted} vs {truth}"
    );
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("b=1 n=32"));
    assert!(tmp.path().join("curves-fit.svg").is_file());

    // The text form names every constant with its meaning and the holdout.
    let o = run(&[
        "scale",
        "fit",
        "--runs",
        runs.to_str().unwrap(),
        "--holdout-runs",
        "p>8",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.contains("Amdahl's serial part"), "{text}");
    assert!(
        text.contains("held out the runs with p>8 (135 runs): MAPE"),
        "{text}"
    );
}

#[test]
fn scale_fit_on_bad_runs_exits_2_naming_the_column_or_line() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("missing.csv");
    std::fs::write(&missing, "p,b,time_s\n1,8,2.5\n2,8,1.4\n").unwrap();
    let o = run(&["scale", "fit", "--runs", missing.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains(&format!("`{}`", missing.display())) && e.contains("missing column `n`"),
        "{e}"
    );

    let negative = tmp.path().join("negative.csv");
    std::fs::write(&negative, "p,b,n,time_s\n1,8,64,2.5\n2,8,64,-1\n").unwrap();
    let o = run(&["scale", "fit", "--runs", negative.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("line 3: `time_s` must be a positive number of seconds, got -1"),
        "{e}"
    );
}

#[test]
fn scale_predict_with_a_measured_compute_time_needs_no_bundle() {
    let tmp = tempfile::tempdir().unwrap();
    let plot = tmp.path().join("scaling.png");
    // In an empty directory: there is no `checkpoints/local` to fall back on.
    let o = perfcast()
        .current_dir(tmp.path())
        .args([
            "scale",
            "predict",
            "--network",
            "resnet50",
            "--batch",
            "256",
            "--gpus",
            "1,2,4,8",
            "--link",
            "nvlink",
            "--strategy",
            "ring",
            "--overlap",
            "none",
            "--compute-ms",
            "600",
            "--update-ms",
            "1",
            "--plot",
            plot.to_str().unwrap(),
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["parameters"], 25_557_032.0);
    let rows = r["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    let s = 4.0 * 25_557_032.0;
    let mut last_efficiency = f64::INFINITY;
    for row in rows {
        let p = row["gpus"].as_f64().unwrap();
        assert_eq!(row["per_device_batch"].as_f64().unwrap(), 256.0 / p);
        // No overlap: the whole ring all-reduce, 2(P-1)/P S/B + 2(P-1) alpha, is exposed.
        let ring = 2.0 * (p - 1.0) / p * s / 300e9 + 2.0 * (p - 1.0) * 3.4e-6;
        let comm = row["exposed_comm_ms"].as_f64().unwrap() * 1e-3;
        assert!(
            (comm - ring).abs() <= 1e-12 + 1e-9 * ring,
            "P={p}: {comm} vs {ring}"
        );
        // Compute scales per sample; the iteration adds comm and the update.
        let compute = row["forward_ms"].as_f64().unwrap() + row["backward_ms"].as_f64().unwrap();
        assert!((compute - 600.0 / p).abs() < 1e-9, "{compute}");
        let iteration = row["iteration_ms"].as_f64().unwrap();
        assert!((iteration - (compute + comm * 1e3 + 1.0)).abs() < 1e-9);
        let efficiency = row["efficiency"].as_f64().unwrap();
        assert!(efficiency <= last_efficiency && efficiency <= 1.0);
        last_efficiency = efficiency;
    }
    assert_eq!(rows[0]["efficiency"], 1.0);
    assert!(std::fs::read(&plot).unwrap().starts_with(b"\x89PNG"));

    // Model parallelism has a place but no model yet: a clear error, exit 2.
    let o = perfcast()
        .current_dir(tmp.path())
        .args([
            "scale",
            "predict",
            "--network",
            "resnet18",
            "--batch",
            "64",
            "--compute-ms",
            "100",
            "--parallel",
            "model",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("model parallelism is not modelled yet"),
        "{}",
        stderr(&o)
    );

    // Without `--compute-ms` and without a bundle: the hint says how to get one.
    let o = perfcast()
        .current_dir(tmp.path())
        .args(["scale", "predict", "--network", "resnet18", "--batch", "64"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("perfcast quickstart"), "{}", stderr(&o));
}

#[test]
fn scale_measure_writes_runs_that_scale_fit_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("runs.csv");
    let o = run(&[
        "scale",
        "measure",
        "--network",
        "lenet5",
        "--threads",
        "1",
        "--batch",
        "2,4",
        "--samples",
        "8",
        "--repeats",
        "1",
        "--out",
        out.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["network"], "lenet5");
    let runs = r["runs"].as_array().unwrap();
    let got: Vec<(u64, u64, u64, u64)> = runs
        .iter()
        .map(|x| {
            let v = |k: &str| x[k].as_u64().unwrap();
            (v("p"), v("b"), v("n"), v("steps"))
        })
        .collect();
    assert_eq!(got, [(1, 2, 8, 4), (1, 4, 8, 2)]);
    for x in runs {
        let (t, lo, hi) = (
            x["time_s"].as_f64().unwrap(),
            x["min_s"].as_f64().unwrap(),
            x["max_s"].as_f64().unwrap(),
        );
        assert!(t > 0.0 && lo <= t && t <= hi, "{x}");
    }

    // The file: a provenance comment, the header, one line per run, and what `scale fit`
    // reads.
    let text = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("# perfcast scale measure: lenet5"),
        "{text}"
    );
    assert_eq!(
        lines[1],
        "network,resolution,backend,p,b,n,steps,repeats,time_s,min_s,max_s"
    );
    assert_eq!(lines.len(), 4, "{text}");
    assert!(lines[2].starts_with("lenet5,,flex,1,2,8,4,1,"), "{text}");
    let o = run(&[
        "scale",
        "fit",
        "--runs",
        out.to_str().unwrap(),
        "--terms",
        "compute,step",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let fit: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(fit["runs"], 2);
    assert!(fit["fit_mape"].as_f64().unwrap().is_finite());

    // n is rounded up to whole batches, and says so.
    let o = run(&[
        "scale",
        "measure",
        "--network",
        "lenet5",
        "--threads",
        "1",
        "--batch",
        "4",
        "--samples",
        "6",
        "--repeats",
        "1",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("n=6 is not a whole number of batches of 4: 2 steps, recorded as n=8"),
        "{}",
        stderr(&o)
    );
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("\nlenet5,,flex,1,4,8,2,1,"), "{text}");
}

#[test]
fn scale_measure_refuses_bad_values_before_measuring() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("runs.csv");
    for (args, message) in [
        (
            ["--threads", "0"],
            "`--threads` values must be at least 1, got 0",
        ),
        (["--repeats", "0"], "`--repeats` must be at least 1, got 0"),
        (["--network", "lenet5@x"], "the resolution after `@`"),
    ] {
        let mut all = vec!["scale", "measure", "--out", out.to_str().unwrap()];
        all.extend(args);
        let o = run(&all);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(stderr(&o).contains(message), "{args:?}: {}", stderr(&o));
    }
    assert!(!out.exists());
}

#[test]
fn scale_predict_reads_the_device_specs_predict_reads() {
    // A NeuSight config, which `predict --device-spec` accepts, sets the update's memory speed.
    let tmp = tempfile::tempdir().unwrap();
    let spec = tmp.path().join("NVIDIA_L4.json");
    std::fs::write(
        &spec,
        r#"{"Device":"NVIDIA L4","Dev_Mem":24,"Mem_Bw":300,"Num_Sm":60,
            "Core_Per_SM":128,"Freq":2040,"SingleFLOPs":31334,"L2Cache":48}"#,
    )
    .unwrap();
    let args = |spec: &Path| {
        vec![
            "scale".to_string(),
            "predict".into(),
            "--network".into(),
            "resnet18".into(),
            "--batch".into(),
            "64".into(),
            "--gpus".into(),
            "1,2".into(),
            "--compute-ms".into(),
            "100".into(),
            "--device-spec".into(),
            spec.to_str().unwrap().into(),
            "--format".into(),
            "json".into(),
        ]
    };
    let o = perfcast()
        .current_dir(tmp.path())
        .args(args(&spec))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["rows"].as_array().unwrap().len(), 2);
    // A broken one is a one-line error naming the file and the field, exit 2.
    std::fs::write(&spec, r#"{"Device":"X","Mem_Bw":-1,"Num_Sm":60}"#).unwrap();
    let o = perfcast()
        .current_dir(tmp.path())
        .args(args(&spec))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("NVIDIA_L4.json") && err.trim().lines().count() == 1,
        "{err}"
    );
}

/// `scale predict` on real models and on a device the bundle never measured: a
/// transformer config and an ONNX graph load as in `predict`, a cross-device bundle predicts
/// compute for the named device, a one-device bundle refuses another device.
#[test]
fn scale_predict_takes_real_models_and_predicts_for_the_named_device() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let gpu = root.join("checkpoints/gpu");
    let per_iteration = |model: &[&str], device: &str| -> f64 {
        let mut args = vec!["scale", "predict", "--batch", "8", "--gpus", "1,2"];
        args.extend_from_slice(model);
        args.extend_from_slice(&["--bundle", gpu.to_str().unwrap(), "--device", device]);
        args.extend_from_slice(&["--format", "json"]);
        let o = run(&args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let device_name = r["compute_device"].as_str().unwrap().to_lowercase();
        assert!(
            device_name.contains(device),
            "{device}: computed for {device_name}"
        );
        r["rows"][0]["iteration_ms"].as_f64().unwrap()
    };
    let gpt2 = root.join("examples/transformers/gpt2.json");
    let gpt2 = ["--transformer", gpt2.to_str().unwrap(), "--seq", "128"];
    // H100 has 3.4x A100-40GB's fp32 peak and 2.2x its bandwidth: faster, not beyond the ratio.
    let (h100, a100) = (per_iteration(&gpt2, "h100"), per_iteration(&gpt2, "a100"));
    assert!(
        h100 < a100 && a100 < 4.0 * h100,
        "H100 {h100} s, A100 {a100} s"
    );
    let onnx = root.join("tests/fixtures/onnx/cnn-residual.onnx");
    assert!(per_iteration(&["--onnx", onnx.to_str().unwrap()], "l4") > 0.0);
    // Two networks at once are refused; a bundle of one device cannot answer for another.
    let o = run(&[
        "scale",
        "predict",
        "--network",
        "resnet18",
        "--onnx",
        onnx.to_str().unwrap(),
        "--batch",
        "8",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("give one network"), "{}", stderr(&o));
    let cpu = root.join("crates/perfcast-predict/tests/fixtures/bundles/cpu-ridge-trees");
    let o = run(&[
        "scale",
        "predict",
        "--network",
        "lenet5",
        "--batch",
        "8",
        "--bundle",
        cpu.to_str().unwrap(),
        "--device",
        "h100",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot predict"), "{}", stderr(&o));
}
