use std::path::{Path, PathBuf};

use perfcast_core::ModuleKind;
use perfcast_data::DatasetDir;

use crate::{run, stderr};

/// The committed NeuSight sample of perfcast-data's tests.
fn neusight_sample() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/perfcast-data/tests/data/neusight")
}

#[test]
fn import_neusight_writes_datasets_that_show_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("neusight");
    let sample = neusight_sample();
    let args = [
        "import",
        "neusight",
        sample.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--format",
        "json",
    ];
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let summary: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(summary["source"], "neusight");
    assert_eq!(summary["imported"], 78);
    assert_eq!(summary["skipped"], 0);
    let v100 = &summary["devices"][1];
    assert_eq!(v100["dataset"], "tesla-v100-pcie-32gb");
    assert_eq!(v100["kinds"][0]["kind"], "conv2d");
    assert_eq!(v100["kinds"][0]["imported"], 10);

    let dataset = out.join("tesla-v100-pcie-32gb");
    let o = run(&[
        "datasets",
        "show",
        dataset.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let shown: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(shown["device"]["name"], "Tesla V100-PCIE-32GB");
    assert_eq!(shown["device"]["source"], "published");
    let kinds: Vec<(String, u64)> = shown["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["kind"].as_str().unwrap().to_string(),
                k["rows"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("conv2d".to_string(), 10),
            ("linear".to_string(), 20),
            ("matmul".to_string(), 20),
            ("layernorm".to_string(), 5),
            ("add".to_string(), 5),
            ("softmax".to_string(), 5),
            ("add_scalar".to_string(), 5)
        ]
    );
    let o = run(&["datasets", "show", dataset.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("neusight:pytorch-2.1"));

    // Again: refused without --force (exit 2, a hint), replaced with it.
    let o = run(&args);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--force"), "{}", stderr(&o));
    let mut forced = args.to_vec();
    forced.push("--force");
    let o = run(&forced);
    assert!(o.status.success(), "{}", stderr(&o));
    let dir = DatasetDir::open(&dataset).unwrap();
    assert_eq!(dir.read(ModuleKind::Linear).unwrap().len(), 20);
}

#[test]
fn import_csv_bad_cell_is_a_one_line_error_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let csv = tmp.path().join("lab.csv");
    std::fs::write(&csv, "b,m,k,n,ms\n1,8,8,8,0.1\n1,16,16,16,NaN\n").unwrap();
    let device = tmp.path().join("gpu.json");
    std::fs::write(
        &device,
        r#"{"name":"Lab GPU","kind":"gpu","peak_gflops":1000.0,"mem_bandwidth_gbs":100.0,
            "cores":10,"threads":640,"clock_mhz":1000.0,"memory_gb":8.0,"cache_mb":4.0,
            "source":"published"}"#,
    )
    .unwrap();
    let mapping = tmp.path().join("map.toml");
    std::fs::write(
        &mapping,
        "kind = \"matmul\"\ndevice = \"gpu.json\"\nbackend = \"lab\"\nunit = \"ms\"\n\
         phase = \"inference\"\n[columns]\nbatch = \"b\"\nm = \"m\"\nk = \"k\"\nn = \"n\"\n\
         median_ms = \"ms\"\n[defaults]\nheads = 1\n",
    )
    .unwrap();
    let out = tmp.path().join("ds");
    let args = [
        "import",
        "csv",
        csv.to_str().unwrap(),
        "--mapping",
        mapping.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    let o = run(&args);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    let last = err.trim().lines().last().unwrap();
    assert!(last.starts_with("error:"), "{err}");
    assert!(
        last.contains("lab.csv") && last.contains("line 3") && last.contains("`ms`"),
        "{err}"
    );
    assert!(last.contains("NaN"), "{err}");
    assert!(!out.exists(), "nothing written on a bad input");

    std::fs::write(&csv, "b,m,k,n,ms\n1,8,8,8,0.1\n1,16,16,16,0.2\n").unwrap();
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("2 rows imported"), "{text}");
    let dir = DatasetDir::open(&out).unwrap();
    assert_eq!(dir.read(ModuleKind::Matmul).unwrap().len(), 2);
}

#[test]
fn eval_bundle_scores_the_gpu_bundle_on_imported_rows_and_never_beats_the_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("neusight");
    let sample = neusight_sample();
    let o = run(&[
        "import",
        "neusight",
        sample.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let bundle = Path::new(env!("CARGO_MANIFEST_DIR")).join("../checkpoints/gpu");
    let o = run(&[
        "eval",
        "bundle",
        "--bundle",
        bundle.to_str().unwrap(),
        "--data",
        out.to_str().unwrap(),
        "--rows",
        tmp.path().join("rows.csv").to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    // Every scored row, each at or above its bound.
    let text = std::fs::read_to_string(tmp.path().join("rows.csv")).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("device,kind,phase,module,batch,measured_ms,predicted_ms,bound_ms")
    );
    let scored: Vec<&str> = lines.collect();
    assert_eq!(scored.len(), 78);
    for line in &scored {
        let cells: Vec<f64> = line
            .rsplit(',')
            .take(2)
            .map(|c| c.parse().unwrap())
            .collect();
        assert!(cells[1] >= cells[0] * (1.0 - 1e-12), "{line}");
    }
    let scores: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let devices = scores.as_array().unwrap();
    assert!(devices.len() >= 2);
    let mut rows = 0;
    for d in devices {
        for k in d["kinds"].as_array().unwrap() {
            rows += k["metrics"]["n"].as_u64().unwrap();
            assert_eq!(k["below_bound"], 0, "{k}");
            let mape = k["metrics"]["mape"].as_f64().unwrap();
            assert!(mape.is_finite() && mape >= 0.0, "{k}");
        }
    }
    assert_eq!(rows, 78);
    // A missing bundle is a one-line error, exit 2.
    let o = run(&[
        "eval",
        "bundle",
        "--bundle",
        tmp.path().join("nope").to_str().unwrap(),
        "--data",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn strip_overhead_turns_framework_rows_into_kernel_rows_beside_their_factors() {
    let tmp = tempfile::tempdir().unwrap();
    let justus = tmp.path().join("justus");
    let sample =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/perfcast-data/tests/data/justus");
    let o = run(&[
        "import",
        "justus",
        sample.to_str().unwrap(),
        "--out",
        justus.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let bundle = Path::new(env!("CARGO_MANIFEST_DIR")).join("../checkpoints/gpu");
    let out = tmp.path().join("kernels");
    let strip = |reference: &str, multiple: &str, out: &Path| {
        run(&[
            "datasets",
            "strip-overhead",
            "--data",
            justus.to_str().unwrap(),
            "--bundle",
            bundle.to_str().unwrap(),
            "--reference",
            reference,
            "--modules",
            "conv2d",
            "--min-floor-multiple",
            multiple,
            "--min-reference-rows",
            "1",
            "--out",
            out.to_str().unwrap(),
            "--format",
            "json",
        ])
    };
    // The sample holds a few rows per GPU: every row above its GPU's floor counts.
    let o = strip(
        "geforce-gtx-1080-ti,tesla-p100-pcie-16gb,tesla-v100-pcie-16gb",
        "1",
        &out,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for f in report["factors"].as_array().unwrap() {
        assert_eq!(f["kind"], "conv2d");
        let factor = f["factor"].as_f64().unwrap();
        assert!(factor.is_finite() && factor > 0.0, "{f}");
    }
    assert!(out.join("overhead.json").is_file());
    let k40 = DatasetDir::open(out.join("tesla-k40")).unwrap();
    let rows = k40.read(ModuleKind::Conv2d).unwrap();
    assert!(!rows.is_empty());
    assert!(
        rows.iter()
            .all(|r| r.backend.ends_with("(overhead removed)"))
    );
    assert!(!out.join("tesla-p100-pcie-16gb").exists());

    // A reference that is not among the datasets, an impossible floor multiple, and an output
    // that exists: one-line errors, exit 2, and the output left as it was.
    let fresh = tmp.path().join("fresh");
    for (reference, multiple, dest, says) in [
        ("tesla-h100", "1", &fresh, "tesla-h100"),
        ("tesla-p100-pcie-16gb", "0.5", &fresh, "0.5"),
        ("tesla-p100-pcie-16gb", "1", &out, "already exists"),
    ] {
        let o = strip(reference, multiple, dest);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        let err = stderr(&o);
        let lines: Vec<&str> = err
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with("hint:"))
            .collect();
        assert_eq!(lines.len(), 1, "{err}");
        assert!(
            lines[0].starts_with("error:") && lines[0].contains(says),
            "{err}"
        );
    }
    assert_eq!(k40.read(ModuleKind::Conv2d).unwrap(), rows);
    assert!(!fresh.exists());
}
