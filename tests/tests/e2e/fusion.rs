//! `predict --fusion`: kernels fused as a compiler runs them, named after their layers, never
//! slower than eager and never below the fused graph's roofline; a bad policy is one line.

use std::path::PathBuf;

use crate::{run, stderr};

fn path(rel: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(rel)
        .to_string_lossy()
        .into_owned()
}

/// BERT-base at 128 tokens, batch 8, on an A100 from the shipped GPU bundle, JSON.
fn bert(fusion: &[&str]) -> std::process::Output {
    let bundle = path("checkpoints/gpu");
    let config = path("examples/transformers/bert-base.json");
    let mut args = vec![
        "predict",
        "--bundle",
        &bundle,
        "--device",
        "a100",
        "--transformer",
        &config,
        "--seq",
        "128",
        "--batch",
        "8",
        "--format",
        "json",
    ];
    args.extend_from_slice(fusion);
    run(&args)
}

fn json(o: &std::process::Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", stderr(o));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn predict_fusion_compile_fuses_attention_and_epilogues_below_eager() {
    let eager = json(&bert(&[]));
    assert_eq!(eager, json(&bert(&["--fusion", "none"])));
    let compiled = json(&bert(&["--fusion", "compile"]));
    let layers = compiled["layers"].as_array().unwrap();
    assert!(layers.len() < eager["layers"].as_array().unwrap().len());
    let attention = layers
        .iter()
        .find(|l| l["name"] == "h0.attn.scores+scale+mask+softmax+context+merge_heads")
        .unwrap_or_else(|| panic!("no fused attention in {compiled}"));
    assert_eq!(
        attention["fused"],
        serde_json::json!([
            "h0.attn.scores",
            "h0.attn.scale",
            "h0.attn.mask",
            "h0.attn.softmax",
            "h0.attn.context",
            "h0.attn.merge_heads"
        ])
    );
    assert!(layers.iter().any(|l| l["name"] == "h0.mlp.fc1+act"));
    let total = compiled["total_ms"].as_f64().unwrap();
    let roofline = compiled["roofline_ms"].as_f64().unwrap();
    assert!(total < eager["total_ms"].as_f64().unwrap());
    assert!(roofline > 0.0 && roofline <= total, "{roofline} > {total}");
    assert_eq!(compiled["fusion"]["policy"], "compile");
    assert_eq!(compiled["fusion"]["eager_total_ms"], eager["total_ms"]);
}

#[test]
fn an_unknown_fusion_policy_is_refused_in_one_line() {
    let o = bert(&["--fusion", "xla"]);
    assert_eq!(o.status.code(), Some(2));
    let first = stderr(&o).lines().next().unwrap_or("").to_string();
    assert!(
        first.contains("unknown fusion policy `xla`: expected one of none, epilogue"),
        "{}",
        stderr(&o)
    );
}

/// `plan` of GPT-2 (small) at 256 tokens on one A100, no recomputation, in `format`.
fn plan_gpt2(fusion: &str, format: &str) -> std::process::Output {
    let bundle = path("checkpoints/gpu");
    let config = path("examples/transformers/gpt2.json");
    run(&[
        "plan",
        "--bundle",
        &bundle,
        "--transformer",
        &config,
        "--seq",
        "256",
        "--global-batch",
        "4",
        "--devices",
        "a100",
        "--gpus",
        "1",
        "--micro-batches",
        "1",
        "--recompute",
        "none",
        "--fusion",
        fusion,
        "--format",
        format,
    ])
}

#[test]
fn plan_fusion_names_the_graph_and_keeps_no_score_matrix() {
    let row = |fusion: &str| {
        let v = json(&plan_gpt2(fusion, "json"));
        assert_eq!(v["config"]["fusion"], fusion);
        v["rows"][0].clone()
    };
    let (eager, compiled) = (row("none"), row("compile"));
    let act = |r: &serde_json::Value| r["memory"]["activations"].as_f64().unwrap();
    // 12 heads of 256 x 256 scores, softmax and dropout outputs among them, per block.
    assert!(act(&compiled) < act(&eager), "{compiled} vs {eager}");
    assert!(compiled["step_s"].as_f64().unwrap() < eager["step_s"].as_f64().unwrap());
    let o = plan_gpt2("megatron", "text");
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    let header = text.lines().next().unwrap_or("");
    assert!(
        header.contains("graph: Megatron (fused QKV, bias-GeLU, dropout-add"),
        "{header}"
    );
}
