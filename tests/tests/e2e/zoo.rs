//! The zoo families beyond torchvision's classics (SqueezeNet 1.1, DenseNet-121,
//! EfficientNet-B0, ViT-B/16, a Llama block) predicted end to end.

use crate::train::{small_dataset, train_bundle};
use crate::{run, stderr};

const FAMILIES: [&str; 5] = [
    "squeezenet1_1",
    "densenet121",
    "efficientnet_b0",
    "vit_b_16",
    "llama_block",
];

fn predict(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["predict", "--format", "json"];
    all.extend_from_slice(args);
    let o = run(&all);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn zoo_families_predict_every_layer_in_both_phases() {
    let tmp = tempfile::tempdir().unwrap();
    let data = small_dataset(tmp.path(), "20");
    let bundle = train_bundle(tmp.path(), &data, "ridge");
    let bundle = bundle.to_str().unwrap();
    for name in FAMILIES {
        let layers = perfcast_core::zoo::build(name, None).unwrap().layers.len();
        let mut totals = Vec::new();
        for phase in ["inference", "training"] {
            let p = predict(&[
                "--network",
                name,
                "--batch",
                "2",
                "--phase",
                phase,
                "--bundle",
                bundle,
            ]);
            let rows = p["layers"].as_array().unwrap();
            assert_eq!(rows.len(), layers, "{name} {phase}");
            let sum: f64 = rows.iter().map(|l| l["ms"].as_f64().unwrap()).sum();
            let total = p["total_ms"].as_f64().unwrap();
            assert!(total.is_finite() && total > 0.0, "{name} {phase}: {p}");
            assert!(
                (total - sum).abs() <= 1e-9 * sum,
                "{name} {phase}: {total} vs {sum}"
            );
            // The bundle knows relu and linear only: the rest are marked as fallbacks.
            assert!(p["fallback_layers"].as_u64().unwrap() > 0, "{name}");
            totals.push(total);
        }
        assert!(totals[1] > totals[0], "{name}: training {totals:?}");
    }

    // Another input size, and one too small for the patch embedding: exit 2 naming the layer.
    let small = predict(&[
        "--network",
        "vit_b_16",
        "--resolution",
        "64",
        "--bundle",
        bundle,
    ]);
    let full = predict(&["--network", "vit_b_16", "--bundle", bundle]);
    assert!(small["total_ms"].as_f64().unwrap() < full["total_ms"].as_f64().unwrap());
    let o = run(&[
        "predict",
        "--network",
        "vit_b_16",
        "--resolution",
        "8",
        "--bundle",
        bundle,
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("`conv_proj`"), "{}", stderr(&o));
}

#[test]
fn zoo_families_predict_on_a_gpu_bundle() {
    let bundle = concat!(env!("CARGO_MANIFEST_DIR"), "/../checkpoints/gpu");
    for name in FAMILIES {
        let p = predict(&[
            "--network",
            name,
            "--batch",
            "8",
            "--device",
            "a100",
            "--bundle",
            bundle,
        ]);
        let total = p["total_ms"].as_f64().unwrap();
        assert!(total.is_finite() && total > 0.0, "{name}: {p}");
    }
}
