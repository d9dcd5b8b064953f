//! Real models end to end: `predict --transformer` and `predict --onnx` on the
//! shipped GPU bundle, and their bad inputs (one line naming the file and the field or node,
//! exit 2).

use std::path::PathBuf;

use crate::{run, stderr};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn path(rel: &str) -> String {
    root().join(rel).to_string_lossy().into_owned()
}

/// `predict` on the shipped GPU bundle for an A100, JSON.
fn predict_gpu(extra: &[&str]) -> std::process::Output {
    let bundle = path("checkpoints/gpu");
    let mut args = vec![
        "predict",
        "--bundle",
        bundle.as_str(),
        "--device",
        "a100",
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    run(&args)
}

fn json(o: &std::process::Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", stderr(o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Every layer is predicted above zero, except views, which are exactly zero and marked.
fn check_layers(v: &serde_json::Value) -> usize {
    let layers = v["layers"].as_array().unwrap();
    let mut views = 0;
    for l in layers {
        let ms = l["ms"].as_f64().unwrap();
        if l["kind"] == "view" {
            assert_eq!(ms, 0.0, "{l}");
            assert_eq!(l["model"], "zero-cost", "{l}");
            assert_eq!(l["fallback"], false, "{l}");
            views += 1;
        } else {
            assert!(ms > 0.0, "a layer predicted as zero: {l}");
        }
    }
    views
}

#[test]
fn transformer_configs_predict_with_their_new_kinds_marked() {
    let gpt2 = path("examples/transformers/gpt2.json");
    let o = predict_gpu(&["--transformer", &gpt2, "--seq", "128", "--batch", "8"]);
    let v = json(&o);
    assert_eq!(v["network"], "gpt2-seq128");
    assert_eq!(v["context"]["batch"], 8);
    let layers = v["layers"].as_array().unwrap();
    // 12 blocks of 27 layers (the views among them), embeddings and head.
    assert!(layers.len() > 12 * 20, "{}", layers.len());
    assert!(layers.iter().any(|l| l["name"] == "h11.mlp.act.tanh"));
    assert!(check_layers(&v) > 0);
    // Embeddings are learned (Vidur's kernels); the GPU bundle has no `copy` model: the spec
    // roofline answers those, marked.
    let tokens = layers.iter().find(|l| l["name"] == "embed.tokens").unwrap();
    assert_eq!(tokens["kind"], "embedding");
    assert_eq!(tokens["fallback"], false);
    let copy = layers.iter().find(|l| l["kind"] == "copy").unwrap();
    assert_eq!(copy["fallback"], true);
    assert_eq!(copy["model"], "roofline-spec");
    let qkv = layers.iter().find(|l| l["name"] == "h0.attn.qkv").unwrap();
    assert_eq!(qkv["fallback"], false);
    assert!(v["fallback_layers"].as_u64().unwrap() >= 1);

    // A larger model costs more; a training step more than inference.
    let xl = path("examples/transformers/gpt2-xl.json");
    let big = json(&predict_gpu(&[
        "--transformer",
        &xl,
        "--seq",
        "128",
        "--batch",
        "8",
    ]));
    assert!(big["total_ms"].as_f64().unwrap() > 5.0 * v["total_ms"].as_f64().unwrap());
    let train = json(&predict_gpu(&[
        "--transformer",
        &gpt2,
        "--seq",
        "128",
        "--batch",
        "8",
        "--phase",
        "training",
    ]));
    assert!(train["total_ms"].as_f64().unwrap() > 2.0 * v["total_ms"].as_f64().unwrap());
    // Training graphs carry the config's dropout layers.
    assert!(
        train["layers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["kind"] == "dropout")
    );

    // Llama: RMSNorm learned from Vidur's kernels, SiLU without a GPU model, marked.
    let llama = path("examples/transformers/llama-7b.json");
    let v = json(&predict_gpu(&["--transformer", &llama, "--seq", "256"]));
    let layers = v["layers"].as_array().unwrap();
    let rms = layers.iter().find(|l| l["kind"] == "rmsnorm").unwrap();
    assert_eq!(rms["fallback"], false);
    let silu = layers.iter().find(|l| l["kind"] == "silu").unwrap();
    assert_eq!(silu["fallback"], true);
    check_layers(&v);

    // Text output says which layers are zero-cost.
    let bundle = path("checkpoints/gpu");
    let o = run(&[
        "predict",
        "--bundle",
        &bundle,
        "--device",
        "a100",
        "--transformer",
        &gpt2,
        "--seq",
        "64",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("zero-cost"), "{text}");
    assert!(text.contains("(fallback)"), "{text}");
}

#[test]
fn onnx_fixtures_import_with_every_node_accounted_for() {
    let decoder = path("tests/fixtures/onnx/decoder-2l.onnx");
    let v = json(&predict_gpu(&[
        "--onnx", &decoder, "--seq", "32", "--batch", "4",
    ]));
    let import = &v["import"];
    assert_eq!(import["unmapped"].as_array().unwrap().len(), 0, "{import}");
    assert_eq!(import["fused"]["MatMul+Add"], 12);
    assert!(import["folded"].as_u64().unwrap() > 0);
    check_layers(&v);
    let kinds: Vec<&str> = v["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["kind"].as_str().unwrap())
        .collect();
    for kind in [
        "embedding",
        "linear",
        "matmul",
        "softmax",
        "masked_fill",
        "layernorm",
    ] {
        assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
    }
    // Causal scores are per head: 4 heads of 32 x 32.
    let scores = v["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| {
            l["module"]
                .as_str()
                .unwrap()
                .starts_with("matmul 4x[32x16]")
        })
        .unwrap();
    assert!(
        scores["module"].as_str().unwrap().contains("^T"),
        "{scores}"
    );

    let cnn = path("tests/fixtures/onnx/cnn-residual.onnx");
    let v = json(&predict_gpu(&["--onnx", &cnn, "--batch", "8"]));
    let layers = v["layers"].as_array().unwrap();
    assert!(
        layers
            .iter()
            .any(|l| l["module"].as_str().unwrap().contains(" g64 "))
    );
    assert_eq!(layers.iter().filter(|l| l["kind"] == "add").count(), 2);

    // An op without a kind is listed with its share, never dropped.
    let unknown = path("tests/fixtures/onnx/unknown-op.onnx");
    let v = json(&predict_gpu(&["--onnx", &unknown]));
    let unmapped = v["import"]["unmapped"].as_array().unwrap();
    assert_eq!(unmapped.len(), 1);
    assert_eq!(unmapped[0]["op"], "Hardmax");
    assert_eq!(unmapped[0]["count"], 1);
    assert!(unmapped[0]["byte_share_pct"].as_f64().unwrap() > 0.0);
}

/// Runs `predict` and checks it failed with exit 2 and one error line containing `parts`.
fn fails_naming(args: &[&str], parts: &[&str]) {
    let bundle = path("checkpoints/gpu");
    let mut all = vec!["predict", "--bundle", bundle.as_str(), "--device", "a100"];
    all.extend_from_slice(args);
    let o = run(&all);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    // One error line naming the file and the field or node; a `hint:` may follow it.
    let line = err.lines().find(|l| l.starts_with("error")).unwrap_or("");
    assert!(
        line.contains(parts[0]),
        "the error line `{line}` does not name `{}`",
        parts[0]
    );
    for p in parts {
        assert!(err.contains(p), "`{p}` not in:\n{err}");
    }
}

#[test]
fn bad_models_are_one_line_errors_naming_file_and_field_or_node() {
    let tmp = tempfile::tempdir().unwrap();
    // A malformed ONNX file.
    let garbage = tmp.path().join("garbage.onnx");
    std::fs::write(&garbage, b"\x0a\xff\xff\xff\xff\x0fnot an onnx model").unwrap();
    fails_naming(
        &["--onnx", garbage.to_str().unwrap()],
        &["garbage.onnx", "malformed ONNX protobuf"],
    );
    // An op without a kind under --strict.
    let unknown = path("tests/fixtures/onnx/unknown-op.onnx");
    fails_naming(
        &["--onnx", &unknown, "--strict"],
        &["unknown-op.onnx", "node `hardmax0` (Hardmax)", "--strict"],
    );
    // A shape that does not resolve.
    let dynamic = path("tests/fixtures/onnx/dynamic-reshape.onnx");
    fails_naming(
        &["--onnx", &dynamic],
        &[
            "dynamic-reshape.onnx",
            "node `reshape0` (Reshape)",
            "does not resolve",
        ],
    );
    // A symbolic sequence axis without --seq.
    let decoder = path("tests/fixtures/onnx/decoder-2l.onnx");
    fails_naming(
        &["--onnx", &decoder],
        &["decoder-2l.onnx", "`sequence`", "--seq"],
    );
    // A config with a missing field.
    let config = tmp.path().join("broken.json");
    std::fs::write(
        &config,
        r#"{"model_type": "gpt2", "n_layer": 2, "n_head": 2, "vocab_size": 10, "n_positions": 8}"#,
    )
    .unwrap();
    fails_naming(
        &["--transformer", config.to_str().unwrap(), "--seq", "4"],
        &["broken.json", "missing field `hidden_size`"],
    );
    // A sequence longer than the config's positions.
    let gpt2 = path("examples/transformers/gpt2.json");
    fails_naming(
        &["--transformer", &gpt2, "--seq", "4096"],
        &["`--seq` 4096 exceeds the 1024 positions"],
    );
    fails_naming(
        &["--transformer", &gpt2],
        &["`--transformer` needs `--seq N`"],
    );
}

#[test]
fn concat_networks_train_every_branch_within_the_memory_model() {
    // A concat names only its first part: a measured step that stops its backward pass there
    // keeps the unreached branches alive from step to step, far past the memory model's peak.
    for fixture in ["squeezenet-mini.onnx", "densenet-mini.onnx"] {
        let onnx = path(&format!("tests/fixtures/onnx/{fixture}"));
        let o = run(&[
            "measure",
            "--onnx",
            &onnx,
            "--phase",
            "inference,training",
            "--batch",
            "2",
            "--max-time-s",
            "0.3",
            "--format",
            "json",
        ]);
        let v = json(&o);
        // Inference runs first, so the process's one-off allocations are not in the step's peak.
        let r = &v[1];
        assert_eq!(r["phase"], "training");
        let measured = r["peak_bytes"].as_f64().unwrap();
        let predicted = r["predicted_peak_bytes"].as_f64().unwrap();
        assert!(
            r["timing"]["repetitions"].as_u64().unwrap() >= 5,
            "{fixture}: {r}"
        );
        assert!(
            measured < 2.0 * predicted && predicted < 2.0 * measured,
            "{fixture}: measured peak {measured} bytes, the memory model {predicted}"
        );
    }
}
