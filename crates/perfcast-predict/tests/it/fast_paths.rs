//! The predictor's fast paths (single query, batches grouped by kind, multi-task rows in their
//! training-phase form, threads, prepared networks) against its reference path, and the CPU
//! GEMM floor, on a bundle that mixes the committed fixtures' saved models (a blend of ridge
//! and trees, a shared MEDN, an MLP, k-NN, the roofline), so no model is fitted here.

use std::path::Path;

use perfcast_core::testing::spread_queries;
use perfcast_core::{Context, ModuleKind, ModuleSpec};
use perfcast_predict::blend::Blend;
use perfcast_predict::predictor::is_raised;
use perfcast_predict::{Bundle, Predictor, Regressor, SavedModel};
use serde_json::Value;

use crate::fixtures;

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn saved(bundle: &str, file: &str) -> SavedModel {
    serde_json::from_slice(
        &std::fs::read(fixtures().join("bundles").join(bundle).join(file)).unwrap(),
    )
    .unwrap()
}

/// A bundle in `dir` of the fixtures' models: conv2d a blend of ridge and trees, relu the
/// MLP, linear the shared MEDN, maxpool2d k-NN, batchnorm2d the roofline; matmul has no model
/// (the spec roofline answers). The device's peak is divided by `slower`, which raises the
/// floor every CPU GEMM answer is held to.
fn bundle(dir: &Path, slower: f64) -> Bundle {
    let mut manifest = read_json(&fixtures().join("bundles/cpu-ridge-calibrated/manifest.json"));
    let peak = manifest["device"]["peak_gflops"].as_f64().unwrap();
    manifest["device"]["peak_gflops"] = (peak / slower).into();
    let mut kinds = serde_json::Map::new();
    let mut write = |kind: &str, source: &str, model: &str, saved: SavedModel| {
        let mut entry =
            read_json(&fixtures().join(format!("bundles/{source}/manifest.json")))["kinds"][kind]
                .clone();
        let file = format!("{kind}/{model}.json");
        entry["chosen"] = model.into();
        entry["file"] = file.clone().into();
        std::fs::create_dir_all(dir.join(kind)).unwrap();
        std::fs::write(dir.join(&file), serde_json::to_vec(&saved).unwrap()).unwrap();
        kinds.insert(kind.into(), entry);
    };
    let blend = Blend::new(
        vec![
            saved("cpu-ridge-calibrated", "conv2d/ridge.json").into_regressor(),
            saved("cpu-trees", "conv2d/trees.json").into_regressor(),
        ],
        vec![0.4, 0.6],
    )
    .unwrap();
    write("conv2d", "cpu-ridge-calibrated", "blend", blend.to_saved());
    write("relu", "cpu-mlp", "mlp", saved("cpu-mlp", "relu/mlp.json"));
    let shared = saved("cpu-medn-shared", "linear/medn-shared.json");
    write("linear", "cpu-medn-shared", "medn-shared", shared);
    let knn = saved("cpu-knn", "maxpool2d/knn.json");
    write("maxpool2d", "cpu-knn", "knn", knn);
    let roofline = saved("cpu-roofline", "batchnorm2d/roofline.json");
    write("batchnorm2d", "cpu-roofline", "roofline", roofline);
    manifest["kinds"] = Value::Object(kinds);
    std::fs::write(
        dir.join("manifest.json"),
        serde_json::to_vec(&manifest).unwrap(),
    )
    .unwrap();
    Bundle::load(dir).unwrap()
}

#[test]
fn fast_paths_match_the_reference_path_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let predictor = Predictor::new(bundle(tmp.path(), 1.0));
    perfcast_predict::testing::assert_fast_paths_match_the_reference(
        &predictor,
        &["medn-shared", "mlp", "blend", "knn", "roofline"],
    );
}

#[test]
fn cpu_gemms_are_never_predicted_faster_than_the_device_peak() {
    let tmp = tempfile::tempdir().unwrap();
    let floor_ms = |p: &Predictor, s: &ModuleSpec, c: &Context| {
        let device = &p.bundle().manifest.device;
        perfcast_core::canonical::least_cpu_compute_time_s(s, c, device) * 1e3
    };
    let gemm = |s: &ModuleSpec| {
        matches!(
            s.kind(),
            ModuleKind::Conv2d | ModuleKind::Linear | ModuleKind::Matmul
        )
    };
    let queries = spread_queries();
    // A device a thousand times slower than the one measured: the large GEMMs' answers are
    // raised to its floor and say so; other kinds (no floor) are left alone.
    let slow = Predictor::new(bundle(&tmp.path().join("slow"), 1000.0));
    let mut raised_gemms = 0;
    for ((s, c), p) in queries.iter().zip(slow.predict_modules(&queries).unwrap()) {
        let floor = floor_ms(&slow, s, c);
        assert!(p.ms >= floor, "{}", s.describe());
        if p.warnings.iter().any(|w| is_raised(w)) {
            assert!(
                gemm(s) && (p.ms - floor).abs() <= 1e-12 * floor,
                "{}",
                s.describe()
            );
            raised_gemms += 1;
        }
    }
    assert!(raised_gemms >= 10, "{raised_gemms} raised");
    // The device measured: the floor still holds for every answer.
    let own = Predictor::new(bundle(&tmp.path().join("own"), 1.0));
    for ((s, c), p) in queries.iter().zip(own.predict_modules(&queries).unwrap()) {
        assert!(p.ms >= floor_ms(&own, s, c), "{}", s.describe());
    }
}
