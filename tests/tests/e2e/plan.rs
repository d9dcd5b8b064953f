//! `perfcast plan` end to end: JSON shape, sort order, a plan that fits nowhere,
//! bad input.

use crate::{run, stderr};

const GPU_BUNDLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../checkpoints/gpu");
const PRICES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/prices.toml");

fn plan(extra: &[&str]) -> std::process::Output {
    let mut args = vec!["plan", "--bundle", GPU_BUNDLE];
    args.extend_from_slice(extra);
    run(&args)
}

#[test]
fn plan_lists_every_layout_sorted_with_breakdown_memory_and_cost() {
    let tmp = tempfile::tempdir().unwrap();
    let svg = tmp.path().join("pareto.svg");
    let o = plan(&[
        "--network",
        "resnet18@64",
        "--global-batch",
        "64",
        "--devices",
        "a100,t4",
        "--gpus",
        "1,2,4",
        "--price-file",
        PRICES,
        "--sort",
        "cost",
        "--format",
        "json",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["network"], "resnet18");
    assert_eq!(r["fits_anywhere"], true);
    assert!(r["message"].is_null());
    let rows = r["rows"].as_array().unwrap();
    // Per device: 1 + 2 layouts (dp2, pp2 x two schedules... minus what cannot be cut) and
    // more for 4 GPUs; at least the pure data-parallel ones are there for both devices.
    for device in ["a100", "t4"] {
        for g in [1, 2, 4] {
            assert!(
                rows.iter()
                    .any(|x| x["device"] == device && x["gpus"] == g && x["layout"]["dp"] == g),
                "{device} x {g}"
            );
        }
    }
    let f = |x: &serde_json::Value, k: &str| x[k].as_f64().unwrap();
    for x in rows {
        let l = &x["layout"];
        let g = l["dp"].as_u64().unwrap() * l["tp"].as_u64().unwrap() * l["pp"].as_u64().unwrap();
        assert_eq!(x["gpus"].as_u64().unwrap(), g);
        let parts =
            f(x, "compute_s") + f(x, "exposed_comm_s") + f(x, "bubble_s") + f(x, "update_s");
        assert!(
            (parts - f(x, "step_s")).abs() <= 1e-9 * f(x, "step_s"),
            "{x}"
        );
        assert!(f(&x["memory"], "total") > f(&x["memory"], "weights"));
        assert!(x["cost_per_1000_steps"].as_f64().unwrap() > 0.0);
        assert!(
            (f(x, "samples_per_s") - 64.0 / f(x, "step_s")).abs() < 1e-6 * f(x, "samples_per_s")
        );
    }
    // Sorted by cost among the fitting plans, which come first.
    let fits: Vec<bool> = rows.iter().map(|x| x["fits"].as_bool().unwrap()).collect();
    assert!(fits.windows(2).all(|w| w[0] >= w[1]));
    let costs: Vec<f64> = rows
        .iter()
        .filter(|x| x["fits"] == true)
        .map(|x| f(x, "cost_per_1000_steps"))
        .collect();
    assert!(costs.windows(2).all(|w| w[0] <= w[1]), "{costs:?}");
    assert!(rows.iter().any(|x| x["pareto"] == true));
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg") && text.contains("Pareto front"));

    // Text: a table with the breakdown's columns, sorted by time by default.
    let o = plan(&[
        "--network",
        "resnet18@64",
        "--global-batch",
        "64",
        "--devices",
        "a100",
        "--gpus",
        "1,2",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for col in [
        "layout",
        "compute",
        "p2p",
        "all-reduce",
        "bubble",
        "update",
        "mem/GPU GiB",
        "samples/s",
    ] {
        assert!(out.contains(col), "{out}");
    }
}

#[test]
fn a_plan_that_fits_nowhere_says_so_and_exits_0() {
    let o = plan(&[
        "--network",
        "resnet18",
        "--global-batch",
        "8",
        "--devices",
        "t4",
        "--gpus",
        "1,2",
        "--max-memory-fraction",
        "0.05",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("no plan fits: the smallest peak is") && out.contains("GiB per GPU"),
        "{out}"
    );
    let o = plan(&[
        "--network",
        "resnet18",
        "--global-batch",
        "8",
        "--devices",
        "t4",
        "--gpus",
        "1,2",
        "--max-memory-fraction",
        "0.05",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["fits_anywhere"], false);
    // Weights, gradients and Adam state of 11.7 M parameters plus the runtime reserve do not
    // fit in 5% of a T4 (0.75 GiB), whatever the layout, micro-batch or recomputation.
    let smallest = r["smallest"]["memory"]["total"].as_f64().unwrap();
    assert!(smallest > 0.75 * 1024f64.powi(3));
    let rows = r["rows"].as_array().unwrap();
    assert!(rows.iter().all(|x| x["fits"] == false));
    assert!(
        rows.iter()
            .all(|x| x["memory"]["total"].as_f64().unwrap() >= smallest)
    );
    assert!(r["message"].as_str().unwrap().starts_with("no plan fits"));
}

const DGX_FITS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../examples/collectives/a100-dgx.json"
);
const GPT2_LARGE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../examples/transformers/gpt2-large.json"
);

/// `plan` of GPT-2 large on 4 A100s with the arguments after it, as JSON.
fn gpt2_large_on_4(extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "--transformer",
        GPT2_LARGE,
        "--seq",
        "1024",
        "--global-batch",
        "4",
        "--gpus",
        "4",
        "--devices",
        "a100-sxm4-40gb",
        "--link",
        "nvlink",
        "--recompute",
        "none",
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    let o = plan(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn one_micro_batch_runs_the_pipeline_serially_and_fits_price_the_collectives() {
    let r = gpt2_large_on_4(&["--micro-batches", "1"]);
    let f = |x: &serde_json::Value, k: &str| x[k].as_f64().unwrap();
    let rows = r["rows"].as_array().unwrap();
    assert!(rows.iter().all(|x| x["layout"]["micro_batches"] == 1));
    let pp4 = rows
        .iter()
        .find(|x| x["layout"]["pp"] == 4 && x["layout"]["schedule"] == "1f1b")
        .unwrap();
    // Serial: the three other stages idle the slowest one's GPU for about three stages.
    assert!(f(pp4, "bubble_s") > 2.0 * f(pp4, "compute_s"), "{pp4}");
    assert!(f(pp4, "pp_comm_s") > 0.0);
    // More micro-batches, a smaller bubble share.
    let r8 = gpt2_large_on_4(&["--micro-batches", "4"]);
    let pp4_m4 = r8["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["layout"]["pp"] == 4 && x["layout"]["schedule"] == "1f1b")
        .unwrap();
    assert!(f(pp4_m4, "bubble_fraction") < f(pp4, "bubble_fraction"));

    // The fits change what the collectives cost, and the text says which priced them.
    let fitted = gpt2_large_on_4(&["--micro-batches", "1", "--collectives", DGX_FITS]);
    assert_eq!(fitted["config"]["collectives"]["name"], "a100-dgx");
    let tp4 = |r: &serde_json::Value| {
        let row = r["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["layout"]["tp"] == 4)
            .unwrap()
            .clone();
        f(&row, "tp_comm_s")
    };
    assert_ne!(tp4(&fitted), tp4(&r));
    let base = [
        "--transformer",
        GPT2_LARGE,
        "--seq",
        "1024",
        "--global-batch",
        "4",
        "--gpus",
        "4",
        "--devices",
        "a100-sxm4-40gb",
    ];
    let o = plan(&[&base[..], &["--collectives", DGX_FITS]].concat());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("fit `a100-dgx`"), "{out}");
    let o = plan(&base);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("the link's alpha-beta formula"), "{out}");
}

#[test]
fn bad_input_is_one_line_naming_the_value() {
    let tmp = tempfile::tempdir().unwrap();
    let bad_prices = tmp.path().join("prices.toml");
    std::fs::write(&bad_prices, "[per_gpu_hour]\na100 = -3\n").unwrap();
    let bad_prices = bad_prices.to_str().unwrap().to_string();
    let missing = tmp.path().join("nope.json");
    let missing = missing.to_str().unwrap().to_string();
    for (args, expect) in [
        (
            vec![
                "--network",
                "resnet18",
                "--global-batch",
                "8",
                "--devices",
                "a999",
            ],
            "`a999`",
        ),
        (
            vec![
                "--network",
                "resnet18",
                "--global-batch",
                "8",
                "--gpus",
                "0",
            ],
            "`--gpus 0`",
        ),
        (
            vec![
                "--network",
                "resnet18",
                "--global-batch",
                "8",
                "--max-memory-fraction",
                "1.5",
            ],
            "1.5",
        ),
        (
            vec![
                "--network",
                "resnet18",
                "--global-batch",
                "8",
                "--price-file",
                &bad_prices,
            ],
            "`per_gpu_hour.a100`",
        ),
        (
            vec!["--network-file", &missing, "--global-batch", "8"],
            "nope.json",
        ),
        // One device twice would plan every row twice; a link no wire has, 300-digit times.
        (
            vec![
                "--network",
                "resnet18",
                "--global-batch",
                "8",
                "--devices",
                "a100,h100,a100",
            ],
            "`a100` and `a100` are both",
        ),
        (
            vec![
                "--network",
                "resnet18",
                "--global-batch",
                "8",
                "--gpus",
                "1,2,1",
            ],
            "`--gpus`: 1 is named twice",
        ),
        (
            vec![
                "--network",
                "resnet18",
                "--global-batch",
                "8",
                "--link",
                "1e308:5",
            ],
            "1e308",
        ),
        (
            vec![
                "--network",
                "resnet18",
                "--global-batch",
                "8",
                "--plot",
                "x.txt",
            ],
            "`--plot x.txt`",
        ),
        (
            vec![
                "--network",
                "resnet18",
                "--global-batch",
                "8",
                "--micro-batches",
                "0",
            ],
            "`--micro-batches 0`",
        ),
        (
            vec![
                "--network",
                "resnet18",
                "--global-batch",
                "8",
                "--collectives",
                &bad_prices,
            ],
            "prices.toml",
        ),
    ] {
        let o = plan(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        let e = stderr(&o);
        // One line, and at most a `hint:` after a blank line.
        let lines: Vec<&str> = e
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with("hint:"))
            .collect();
        assert_eq!(lines.len(), 1, "{args:?}: {e}");
        assert!(
            lines[0].starts_with("error: ") && lines[0].contains(expect),
            "{args:?}: {e}"
        );
    }
}

#[test]
fn measure_reports_peak_memory_beside_the_prediction() {
    let o = run(&[
        "measure",
        "--network",
        "lenet5",
        "--batch",
        "2",
        "--phase",
        "training",
        "--max-time-s",
        "0.05",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let row = &r[0];
    // At least the weights, their gradients and the momentum (3 x 61,706 fp32 values).
    let peak = row["peak_bytes"].as_u64().unwrap();
    assert!(peak > 3 * 61_706 * 4, "{peak}");
    let predicted = row["predicted_peak_bytes"].as_f64().unwrap();
    let reference = row["predicted_peak_bytes_reference"].as_f64().unwrap();
    assert!(predicted >= 3.0 * 61_706.0 * 4.0 && reference > 0.0);
}

#[test]
fn a_transformer_config_plans_every_layout_tensor_parallel_included() {
    // GPT-2 from its Hugging Face config: its fused QKV projection is split by heads through
    // the reshapes (views) the config graph has, so TP layouts are planned, not refused.
    let config = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/transformers/gpt2.json"
    );
    let o = plan(&[
        "--transformer",
        config,
        "--seq",
        "128",
        "--global-batch",
        "8",
        "--devices",
        "a100",
        "--gpus",
        "2",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = r["rows"].as_array().unwrap();
    let has = |dp: u64, tp: u64, pp: u64| {
        rows.iter().any(|x| {
            let l = &x["layout"];
            l["dp"] == dp && l["tp"] == tp && l["pp"] == pp
        })
    };
    assert!(has(2, 1, 1) && has(1, 2, 1) && has(1, 1, 2), "{r}");
    // The TP layout all-reduces activations; the DP one does not split a layer.
    let tp = rows.iter().find(|x| x["layout"]["tp"] == 2).unwrap();
    assert!(tp["exposed_comm_s"].as_f64().unwrap() > 0.0, "{tp}");
}

#[test]
fn a_device_in_bf16_plans_mixed_precision_at_its_tensor_peak() {
    // Data parallel: every GPU holds the whole model, so memory ratios are the formats'.
    let at = |device: &str| {
        let o = plan(&[
            "--transformer",
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../examples/transformers/gpt2-large.json"
            ),
            "--seq",
            "1024",
            "--global-batch",
            "4",
            "--gpus",
            "4",
            "--micro-batches",
            "1",
            "--recompute",
            "none",
            "--devices",
            device,
            "--format",
            "json",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let rows = r["rows"].as_array().unwrap().clone();
        let pp4 = rows
            .into_iter()
            .find(|row| row["layout"]["dp"] == 4)
            .unwrap_or_else(|| panic!("no dp4 row for {device}"));
        (
            pp4["step_s"].as_f64().unwrap(),
            pp4["memory"]["activations"].as_f64().unwrap(),
            pp4["memory"]["weights"].as_f64().unwrap(),
        )
    };
    let (fp32_s, fp32_act, fp32_w) = at("h100");
    let (bf16_s, bf16_act, bf16_w) = at("h100:bf16");
    assert!(
        bf16_s < fp32_s / 2.0,
        "bf16 {bf16_s} s against fp32 {fp32_s} s"
    );
    // Half-width activations; 2-byte weights beside 4-byte masters.
    let ratio = bf16_act / fp32_act;
    assert!((0.5 - 1e-9..0.6).contains(&ratio), "activations {ratio}x");
    assert!((bf16_w / fp32_w - 1.5).abs() < 1e-6, "{bf16_w} / {fp32_w}");
    let o = plan(&[
        "--network",
        "resnet18@64",
        "--global-batch",
        "64",
        "--devices",
        "k80:bf16",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no `bf16` peak"), "{}", stderr(&o));
}
