//! "Nothing lost, nothing panics": destructive paths, concurrent writers, overflow,
//! bundle containment and nonsense inputs, each through the real binary.

use std::collections::HashSet;
use std::path::Path;
use std::process::Output;

use perfcast_core::ModuleKind;
use perfcast_data::DatasetDir;

use crate::train::small_dataset;
use crate::{perfcast, run, stderr, write_fast_sweep};

/// Asserts a clean refusal: exit 2, an `error:` line naming `needle`, no panic, nothing on
/// stdout.
#[track_caller]
fn refused(o: &Output, needle: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(
        err.lines().next().unwrap_or("").contains(needle),
        "{needle}: {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn train_never_replaces_a_folder_it_did_not_write_nor_its_input() {
    let tmp = tempfile::tempdir().unwrap();
    let data = small_dataset(tmp.path(), "12");
    let before = names(&data);
    let docs = tmp.path().join("mydocs");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(docs.join("thesis.tex"), "years of work").unwrap();
    let train = |out: &Path, extra: &[&str]| {
        let mut args = vec![
            "train",
            "--data",
            data.to_str().unwrap(),
            "--modules",
            "relu",
            "--models",
            "ridge",
            "--folds",
            "2",
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        run(&args)
    };
    let models = tmp.path().join("m");
    // `--bundle` onto a folder that is not a bundle: refused, the folder intact.
    let o = train(&models, &["--bundle", docs.to_str().unwrap()]);
    refused(&o, "mydocs");
    assert!(stderr(&o).contains("not replacing it"), "{}", stderr(&o));
    assert_eq!(names(&docs), vec!["thesis.tex"]);
    // `--out <input> --force`: refused, the dataset intact.
    let o = train(&data, &["--force"]);
    refused(&o, "input");
    assert_eq!(names(&data), before);
    // `--out <any folder> --force`: refused.
    let o = train(&docs, &["--force"]);
    refused(&o, "not replacing it");
    assert_eq!(names(&docs), vec!["thesis.tex"]);
    // Nothing was staged beside them.
    assert!(
        !names(tmp.path())
            .iter()
            .any(|n| n.starts_with(".perfcast-")),
        "{:?}",
        names(tmp.path())
    );
    // Its own outputs are replaced: the models with --force, the bundle always.
    let bundle = tmp.path().join("b");
    let o = train(&models, &["--bundle", bundle.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = train(&models, &["--bundle", bundle.to_str().unwrap()]);
    refused(&o, "--force");
    let o = train(&models, &["--force", "--bundle", bundle.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(bundle.join("manifest.json").is_file() && models.join("report.json").is_file());
    // A bundle may not be written over the models directory or the other way round.
    let o = train(&models, &["--force", "--bundle", models.to_str().unwrap()]);
    refused(&o, "not replacing it");
}

/// Leftover staging directories of killed runs are removed by the next run beside them.
#[test]
fn a_killed_train_leaves_the_old_outputs_and_the_next_run_cleans_up() {
    let tmp = tempfile::tempdir().unwrap();
    let data = small_dataset(tmp.path(), "12");
    let bundle = tmp.path().join("b");
    let args = [
        "train",
        "--data",
        data.to_str().unwrap(),
        "--modules",
        "relu,linear",
        "--models",
        "ridge,trees",
        "--folds",
        "2",
        "--out",
        tmp.path().join("m").to_str().unwrap(),
        "--force",
        "--bundle",
        bundle.to_str().unwrap(),
    ]
    .map(str::to_string);
    let o = perfcast().args(&args).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    for delay_ms in [30, 120, 300] {
        let mut child = perfcast().args(&args).spawn().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        child.kill().unwrap();
        child.wait().unwrap();
        // The old bundle or the new one, whole.
        let now = std::fs::read(bundle.join("manifest.json")).expect("a manifest is there");
        assert!(serde_json::from_slice::<serde_json::Value>(&now).is_ok());
    }
    let o = perfcast().args(&args).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let left: Vec<String> = names(tmp.path())
        .into_iter()
        .filter(|n| n.starts_with(".perfcast-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Two and four `profile --resume` writers on one dataset: every row stored once.
#[test]
fn concurrent_profile_writers_store_every_row_once() {
    for writers in [2, 4] {
        for repeat in 0..5 {
            let tmp = tempfile::tempdir().unwrap();
            let sweep = write_fast_sweep(tmp.path(), "");
            let out = tmp.path().join("d");
            let children: Vec<_> = (0..writers)
                .map(|_| {
                    perfcast()
                        .args([
                            "profile",
                            "--modules",
                            "relu",
                            "--samples",
                            "10",
                            "--max-time-s",
                            "0.005",
                            "--sweep",
                            sweep.to_str().unwrap(),
                            "--out",
                            out.to_str().unwrap(),
                            "--resume",
                            "--format",
                            "json",
                        ])
                        .output_async()
                })
                .collect();
            let mut measured = 0;
            for child in children {
                let o = child.wait_with_output().unwrap();
                assert!(o.status.success(), "{}", stderr(&o));
                let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
                measured += s["kinds"]["relu"]["measured"].as_u64().unwrap();
            }
            let rows = DatasetDir::open(&out)
                .unwrap()
                .read(ModuleKind::Relu)
                .unwrap();
            let keys: HashSet<String> = rows.iter().map(|r| r.key()).collect();
            assert_eq!(keys.len(), rows.len(), "{writers} writers, repeat {repeat}");
            assert_eq!(rows.len(), 10, "{writers} writers, repeat {repeat}");
            // What the runs report as measured is what was stored.
            assert_eq!(measured, 10, "{writers} writers, repeat {repeat}");
        }
    }
}

/// `Command::spawn` with piped output, so several runs go at once.
trait SpawnPiped {
    fn output_async(&mut self) -> std::process::Child;
}

impl SpawnPiped for std::process::Command {
    fn output_async(&mut self) -> std::process::Child {
        self.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }
}

/// The shipped cross-device GPU bundle: any valid query has an answer to overflow on.
const GPU_BUNDLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../checkpoints/gpu");

/// Sizes that overflowed 64-bit arithmetic (exit 101) or aborted an allocation (134).
#[test]
fn huge_sizes_are_refused_in_one_line_not_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let predict = |extra: &[&str]| {
        let mut args = vec!["predict", "--bundle", GPU_BUNDLE, "--device", "v100"];
        args.extend_from_slice(extra);
        run(&args)
    };
    let big = "4294967296";
    let max = "18446744073709551615";
    refused(
        &predict(&[
            "conv2d",
            "--input",
            "4x4294967296x4294967296",
            "--out-channels",
            "4",
            "--kernel",
            big,
        ]),
        big,
    );
    refused(
        &predict(&["matmul", "--heads", big, "--m", big, "--k", big, "--n", big]),
        big,
    );
    // Each axis within bounds, the tensor too large: named by its element count.
    refused(
        &predict(&[
            "matmul", "--heads", "65536", "--m", "65536", "--k", "65536", "--n", "8",
        ]),
        "2^40",
    );
    refused(
        &predict(&["--network", "resnet50", "--resolution", big]),
        big,
    );
    refused(&predict(&["--network", "resnet50", "--batch", max]), max);
    let modules = tmp.path().join("m.json");
    std::fs::write(
        &modules,
        format!(r#"[{{"kind":"linear","in_features":{max},"out_features":4}}]"#),
    )
    .unwrap();
    refused(
        &predict(&["--modules-file", modules.to_str().unwrap()]),
        "m.json",
    );
    let network = tmp.path().join("n.json");
    std::fs::write(
        &network,
        format!(
            r#"{{"name":"x","input":[3,8,8],"layers":[{{"name":"fc","spec":{{"kind":"linear","tokens":3,"in_features":{max},"out_features":2}}}}]}}"#
        ),
    )
    .unwrap();
    let o = predict(&["--network-file", network.to_str().unwrap()]);
    refused(&o, "n.json");
    for args in [
        vec![
            "scale",
            "predict",
            "--network",
            "resnet50",
            "--batch",
            max,
            "--gpus",
            "1,2",
            "--compute-ms",
            "600",
        ],
        vec![
            "profile",
            "--modules",
            "relu",
            "--samples",
            "100000000",
            "--out",
        ],
    ] {
        let mut args = args;
        let out = tmp.path().join("never");
        if args.last() == Some(&"--out") {
            args.push(out.to_str().unwrap());
        }
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
        assert!(!out.exists());
    }
    let sweep = tmp.path().join("s.toml");
    std::fs::write(
        &sweep,
        "samples = 9223372036854775807\nmodules = [\"relu\"]\n",
    )
    .unwrap();
    let o = run(&[
        "profile",
        "--sweep",
        sweep.to_str().unwrap(),
        "--out",
        tmp.path().join("never").to_str().unwrap(),
    ]);
    refused(&o, "9223372036854775807");
}

/// Values that used to be taken silently (or turned into `NaN%` and `inf%`).
#[test]
fn nonsense_inputs_are_refused_naming_the_value_and_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    for (body, needle) in [
        ("kernel = [0]", "`conv2d.kernel` values must be in [1"),
        ("groups = [0]", "`conv2d.groups` values must be in [1"),
    ] {
        let sweep = tmp.path().join("s.toml");
        std::fs::write(
            &sweep,
            format!("modules = [\"conv2d\"]\n[conv2d]\n{body}\n"),
        )
        .unwrap();
        let o = run(&[
            "profile",
            "--sweep",
            sweep.to_str().unwrap(),
            "--out",
            tmp.path().join("never").to_str().unwrap(),
        ]);
        refused(&o, needle);
        assert!(stderr(&o).contains("s.toml"), "{}", stderr(&o));
    }
    let spec = |edit: &dyn Fn(&mut serde_json::Value)| {
        let mut v = serde_json::json!({
            "name": "Odd GPU", "kind": "gpu", "peak_gflops": 1000.0, "mem_bandwidth_gbs": 100.0,
            "cores": 10, "threads": 640, "clock_mhz": 1000.0, "memory_gb": 8.0, "cache_mb": 4.0,
            "source": "published"
        });
        edit(&mut v);
        let path = tmp.path().join("spec.json");
        std::fs::write(&path, v.to_string()).unwrap();
        run(&[
            "predict",
            "--bundle",
            GPU_BUNDLE,
            "--device-spec",
            path.to_str().unwrap(),
            "--network",
            "lenet5",
        ])
    };
    let o = spec(&|v| v["peak_gflops"] = serde_json::json!(1e-300));
    refused(&o, "peak_gflops");
    assert!(stderr(&o).contains("spec.json"), "{}", stderr(&o));
    let o = spec(&|v| v["caches"] = serde_json::json!({"l2_kb": -5.0}));
    refused(&o, "caches.l2_kb");
    // A width of 2^64-1 was echoed as -1.
    let o = run(&[
        "predict",
        "--bundle",
        GPU_BUNDLE,
        "--device",
        "v100",
        "relu",
        "--input",
        "18446744073709551615x1x1",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(!stderr(&o).contains("-1"), "{}", stderr(&o));
}

/// Settings and stored values that panicked or trained into `inf%`.
#[test]
fn bad_settings_and_absurd_stored_values_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs.csv");
    let mut csv = String::from("host,p,b,n,time_s\n");
    for p in [1, 2, 4, 8] {
        for b in [8, 16, 32] {
            csv.push_str(&format!(
                "a,{p},{b},1024,{}\n",
                1.0 + f64::from(b) / f64::from(p)
            ));
        }
    }
    std::fs::write(&runs, csv).unwrap();
    let o = run(&[
        "scale",
        "fit",
        "--runs",
        runs.to_str().unwrap(),
        "--population",
        "4294967295",
    ]);
    refused(&o, "4294967295");

    let data = small_dataset(tmp.path(), "6");
    let o = run(&[
        "datasets",
        "remeasure",
        data.to_str().unwrap(),
        "--rows",
        "0",
    ]);
    refused(&o, "`--rows` must be at least 1");

    // A stored latency of 1e308 or a size of 2^62: named with the file, the row and the value.
    let dir = DatasetDir::open(&data).unwrap();
    let mut rows = dir.read(ModuleKind::Relu).unwrap();
    if let perfcast_data::Outcome::Ok(t) = &mut rows[0].outcome {
        t.median_ms = 1e308;
    }
    dir.write(ModuleKind::Relu, &rows).unwrap();
    let o = run(&[
        "train",
        "--data",
        data.to_str().unwrap(),
        "--models",
        "ridge",
        "--out",
        tmp.path().join("m").to_str().unwrap(),
    ]);
    refused(&o, "relu.parquet");
    assert!(stderr(&o).contains("median_ms"), "{}", stderr(&o));
    assert!(!tmp.path().join("m").exists());
}

/// `datasets merge` indexed out of bounds on a dataset holding a row twice (written by two
/// writers before datasets were locked); it now merges the copies and says how many.
#[test]
fn merge_and_remeasure_tolerate_duplicate_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let data = small_dataset(tmp.path(), "6");
    let dir = DatasetDir::open(&data).unwrap();
    let mut rows = dir.read(ModuleKind::Relu).unwrap();
    rows.push(rows[0].clone());
    dir.write(ModuleKind::Relu, &rows).unwrap();
    let out = tmp.path().join("merged");
    let other = tmp.path().join("copy");
    std::fs::create_dir_all(&other).unwrap();
    for entry in std::fs::read_dir(&data).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), other.join(entry.file_name())).unwrap();
    }
    let o = run(&[
        "datasets",
        "merge",
        data.to_str().unwrap(),
        other.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let relu = report["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kind"] == "relu")
        .unwrap()
        .clone();
    assert_eq!(relu["duplicates"], 2, "{relu}");
    let merged = DatasetDir::open(&out)
        .unwrap()
        .read(ModuleKind::Relu)
        .unwrap();
    assert_eq!(merged.len(), rows.len() - 1);
}

/// Counts sized by the user are bounded before anything is allocated or started.
#[test]
fn counts_that_would_take_the_machine_are_refused_before_any_work() {
    refused(
        &run(&["measure", "--network", "resnet18", "--batch", "100000"]),
        "`--batch 100000`: `resnet18` needs about",
    );
    refused(
        &run(&["measure", "--network", "lenet5", "--threads", "100000"]),
        "`--threads` must be from 1 to 1024, got 100000",
    );
    refused(
        &run(&["serve", "--threads", "100000"]),
        "`--threads` must be from 1 to 1024, got 100000",
    );
    refused(
        &run(&["loadtest", "--concurrency", "100000"]),
        "`--concurrency` must be from 1 to 4096, got 100000",
    );
}

/// A few-node ONNX file with an extreme attribute, dims or shape panicked every entry
/// point (exit 101 from the CLI, 500 from the server). Each is now one line naming the node or
/// tensor, and a 422 naming the body.
#[test]
fn hostile_onnx_files_are_refused_in_one_line_by_the_cli_and_422_by_the_server() {
    use perfcast_graph::onnx::proto::{Attribute, Dim, Graph, Model, Node, Tensor, ValueInfo};
    let model = |inits: Vec<Tensor>, nodes: Vec<Node>| {
        let out = nodes[nodes.len() - 1].outputs[0].clone();
        Model::new(Graph {
            name: "g".into(),
            nodes,
            initializers: inits,
            inputs: vec![ValueInfo::new(
                "x",
                [1, 3, 8, 8].into_iter().map(Dim::Value).collect(),
            )],
            outputs: vec![ValueInfo::new(&out, vec![])],
            value_info: vec![],
        })
        .encode()
    };
    let max = i64::MAX;
    let cases = [
        (
            "conv pads",
            model(
                vec![Tensor::weight("w", &[8, 3, 3, 3])],
                vec![
                    Node::new("Conv", "conv0", &["x", "w"], &["y"])
                        .with(Attribute::ints("pads", &[max, max, max, max])),
                ],
            ),
            "`pads` value 9223372036854775807",
        ),
        (
            "huge initializer",
            model(
                vec![Tensor::weight("w", &[1 << 32, 1 << 32])],
                vec![Node::new("MatMul", "mm", &["x", "w"], &["y"])],
            ),
            "`w`",
        ),
        (
            "transpose perm",
            model(
                vec![],
                vec![
                    Node::new("Transpose", "tr", &["x"], &["y"])
                        .with(Attribute::ints("perm", &[0, 0, 0, 0])),
                ],
            ),
            "perm",
        ),
    ];
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let bundle = root.join("checkpoints/gpu");
    let tmp = tempfile::tempdir().unwrap();
    let (_server, addr) = crate::serve::start(&bundle);
    for (name, bytes, says) in &cases {
        let file = tmp.path().join("case.onnx");
        std::fs::write(&file, bytes).unwrap();
        let o = run(&[
            "predict",
            "--bundle",
            bundle.to_str().unwrap(),
            "--onnx",
            file.to_str().unwrap(),
        ]);
        refused(&o, says);
        assert_eq!(stderr(&o).lines().count(), 1, "{name}: {}", stderr(&o));
        let (status, body) = crate::serve::http(addr, "POST", "/v1/predict/onnx", bytes);
        assert_eq!(status, 422, "{name}: {body}");
        let e: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(e["field"], "body", "{name}: {body}");
        assert!(
            e["error"].as_str().unwrap().contains(says),
            "{name}: {body}"
        );
    }
    // A transformer past the block limit is refused at once, not built until memory runs out.
    let mut config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("examples/transformers/gpt2.json")).unwrap(),
    )
    .unwrap();
    for n_layer in [16_777_216, 1_000_000] {
        config["n_layer"] = serde_json::json!(n_layer);
        let body = serde_json::json!({"transformer": config, "seq": 128}).to_string();
        let (status, answer) =
            crate::serve::http(addr, "POST", "/v1/predict/network", body.as_bytes());
        assert_eq!(status, 422, "{answer}");
        assert!(answer.contains(&n_layer.to_string()), "{answer}");
    }
}
