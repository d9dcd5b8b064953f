//! The predictor's fast paths against its reference path on MEDN fitted by this build's burn
//! code and written by [`crate::bundle::write_bundle`]: the committed fixtures'
//! (perfcast-predict's `tests/it/fast_paths.rs`, every other family and the GEMM floor) are an
//! older writer's, so only a fresh fit exercises the saved form MEDN has now.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use perfcast_core::Phase;
use perfcast_core::testing::{context, spread};
use perfcast_models::medn::MednParams;
use perfcast_models::{FeatureSchema, Fit, Matrix, Regressor, SavedModel, TrainSet};

use perfcast_core::{ModuleKind, features};
use perfcast_models::features::row;

use crate::Predictor;
use crate::bundle::{Bundle, FORMAT, write_bundle};
use crate::select::Budget;

/// Labels at 20 GFLOP/s plus a fixed cost: slower than the test CPU's 100 GFLOP/s peak, as
/// measurements are.
const MS_PER_FLOP: f64 = 1.0 / 2e7;

/// `n` rows of a kind labelled at `ms_per_flop`.
fn set(kind: ModuleKind, n: usize, ms_per_flop: f64) -> TrainSet {
    let device = perfcast_core::testing::cpu_device();
    let schema = FeatureSchema::for_kind(kind);
    let mut x = Matrix::with_cols(schema.len());
    let (mut y, mut groups) = (Vec::new(), Vec::new());
    for i in 0..n {
        let s = spread(kind, i);
        for phase in [Phase::Inference, Phase::Training] {
            let c = context(1 << (i % 4), phase);
            let d = features::derive(&s, c.batch);
            x.push_row(&row(&s, &c, &device));
            let factor = if phase == Phase::Training { 3.1 } else { 1.0 };
            y.push((0.003 + d.flops * ms_per_flop + d.bytes_read / 8e9) * factor);
            groups.push(i as u64);
        }
    }
    TrainSet {
        schema,
        x,
        y,
        groups,
    }
}

/// A bundle with a shared MEDN (conv2d, linear and maxpool2d) and a single-task MLP
/// (batchnorm2d), trained on labels at `ms_per_flop`; other kinds fall back.
fn bundle(dir: &std::path::Path, ms_per_flop: f64) -> Bundle {
    let quick = MednParams {
        width: 16,
        latent: 8,
        head_width: 8,
        max_steps: 300,
        ..MednParams::default()
    };
    let sets: BTreeMap<ModuleKind, TrainSet> = [
        ModuleKind::Conv2d,
        ModuleKind::Linear,
        ModuleKind::MaxPool2d,
        ModuleKind::BatchNorm2d,
    ]
    .into_iter()
    .map(|k| (k, set(k, 40, ms_per_flop)))
    .collect();
    let shared = quick
        .fit_shared(&[
            sets[&ModuleKind::Linear].clone(),
            sets[&ModuleKind::MaxPool2d].clone(),
            sets[&ModuleKind::Conv2d].clone(),
        ])
        .unwrap();
    let mut models: Vec<(ModuleKind, SavedModel)> = vec![(
        ModuleKind::BatchNorm2d,
        MednParams {
            multi_task: false,
            ..quick.clone()
        }
        .fit(&sets[&ModuleKind::BatchNorm2d])
        .unwrap()
        .to_saved(),
    )];
    for (k, m) in [
        ModuleKind::Linear,
        ModuleKind::MaxPool2d,
        ModuleKind::Conv2d,
    ]
    .into_iter()
    .zip(shared)
    {
        models.push((k, m.to_saved()));
    }
    let mut kinds = serde_json::Map::new();
    let mut files = Vec::new();
    for (kind, saved) in models {
        let model = saved.clone().into_regressor();
        let data = &sets[&kind];
        let file = format!("{kind}/{}.json", model.name());
        let entry = crate::testing::kind_entry(model.name(), &file, model.as_ref(), data).unwrap();
        kinds.insert(kind.name().into(), serde_json::to_value(entry).unwrap());
        files.push((file, saved));
    }
    // Through JSON, so the test does not depend on every manifest field.
    let manifest = serde_json::from_value(serde_json::json!({
        "format": FORMAT,
        "name": "fast-path",
        "perfcast_version": "0",
        "device": perfcast_core::testing::cpu_device(),
        "data": "synthetic",
        "budget": Budget::default(),
        "kinds": kinds,
    }))
    .unwrap();
    write_bundle(dir, &manifest, &files).unwrap();
    Bundle::load(dir).unwrap()
}

#[test]
fn fast_paths_match_the_reference_path_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let predictor = Predictor::new(bundle(&tmp.path().join("b"), MS_PER_FLOP));
    perfcast_predict::testing::assert_fast_paths_match_the_reference(
        &predictor,
        &["medn-shared", "mlp"],
    );
}
