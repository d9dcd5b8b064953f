//! The predictor's fast paths (single query, batches grouped by kind, multi-task rows in their
//! training-phase form, threads, prepared networks) against its reference path, on a bundle
//! holding every model family, fitted here and written by [`crate::bundle::write_bundle`].
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use perfcast_core::{
    BatchNorm2d, Conv2d, Elementwise, Layer, Linear, Matmul, ModuleSpec, Phase, Pool2d,
};
use perfcast_models::knn::KnnParams;
use perfcast_models::medn::MednParams;
use perfcast_models::ridge::RidgeParams;
use perfcast_models::trees::TreeParams;
use perfcast_models::{FeatureSchema, Fit, Matrix, Regressor, SavedModel, TrainSet};

use perfcast_core::{Context, ModuleKind, Network, features};
use perfcast_models::features::row;

use crate::bundle::{Bundle, FORMAT, write_bundle};
use crate::select::Budget;
use crate::{ModulePrediction, Predictor};
use perfcast_predict::blend::Blend;
use perfcast_predict::predictor::is_raised;

fn ctx(batch: usize, phase: Phase) -> Context {
    Context {
        batch,
        phase,
        threads: 1,
        utilisation: 0.0,
    }
}

/// The `i`-th module of a kind: sizes spread over a range, so queries can leave it.
fn spec(kind: ModuleKind, i: usize) -> ModuleSpec {
    let c = 4 + (i * 7) % 60;
    let hw = 6 + (i * 5) % 26;
    match kind {
        ModuleKind::Conv2d => ModuleSpec::Conv2d(Conv2d {
            in_channels: c,
            out_channels: 4 + (i * 11) % 60,
            input_hw: [hw, hw],
            kernel: [1 + 2 * (i % 2), 1 + 2 * (i % 2)],
            stride: [1 + i % 2, 1 + i % 2],
            padding: [i % 2, i % 2],
            dilation: [1, 1],
            groups: 1,
            bias: !i.is_multiple_of(3),
        }),
        ModuleKind::Linear => ModuleSpec::Linear(Linear {
            tokens: 1 + i % 4,
            in_features: 8 + (i * 37) % 500,
            out_features: 8 + (i * 53) % 400,
            bias: true,
        }),
        ModuleKind::Matmul => ModuleSpec::Matmul(Matmul {
            heads: 1 + i % 4,
            m: 4 + (i * 13) % 100,
            k: 4 + (i * 7) % 64,
            n: 4 + (i * 17) % 100,
            trans_a: false,
            trans_b: false,
        }),
        ModuleKind::MaxPool2d => ModuleSpec::MaxPool2d(Pool2d {
            channels: c,
            input_hw: [hw, hw],
            kernel: [2 + i % 2, 2 + i % 2],
            stride: None,
            padding: [0, 0],
        }),
        ModuleKind::BatchNorm2d => ModuleSpec::BatchNorm2d(BatchNorm2d {
            channels: c,
            input_hw: [hw, hw],
        }),
        _ => ModuleSpec::Relu(Elementwise { shape: [c, hw, hw] }),
    }
}

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
        let s = spec(kind, i);
        for phase in [Phase::Inference, Phase::Training] {
            let c = ctx(1 << (i % 4), phase);
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

/// A bundle with a blend of ridge and a shared MEDN (conv2d), a blend of trees and ridge
/// (relu), k-NN (matmul), the shared MEDN (linear and maxpool2d) and a single-task MLP
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
        ModuleKind::Relu,
        ModuleKind::Matmul,
        ModuleKind::Linear,
        ModuleKind::MaxPool2d,
        ModuleKind::BatchNorm2d,
    ]
    .into_iter()
    .map(|k| (k, set(k, 40, ms_per_flop)))
    .collect();
    let mut shared = quick
        .fit_shared(&[
            sets[&ModuleKind::Linear].clone(),
            sets[&ModuleKind::MaxPool2d].clone(),
            sets[&ModuleKind::Conv2d].clone(),
        ])
        .unwrap();
    let ridge = |k: ModuleKind| -> Box<dyn Regressor> {
        Box::new(RidgeParams::default().fit(&sets[&k]).unwrap())
    };
    let conv_medn: Box<dyn Regressor> = Box::new(shared.pop().unwrap());
    let mut models: Vec<(ModuleKind, SavedModel)> = vec![
        (
            ModuleKind::Conv2d,
            Blend::new(vec![ridge(ModuleKind::Conv2d), conv_medn], vec![0.4, 0.6])
                .unwrap()
                .to_saved(),
        ),
        (
            ModuleKind::Relu,
            Blend::new(
                vec![
                    Box::new(TreeParams::default().fit(&sets[&ModuleKind::Relu]).unwrap()),
                    ridge(ModuleKind::Relu),
                ],
                vec![2.0 / 3.0, 1.0 / 3.0],
            )
            .unwrap()
            .to_saved(),
        ),
        (
            ModuleKind::Matmul,
            KnnParams::default()
                .fit(&sets[&ModuleKind::Matmul])
                .unwrap()
                .to_saved(),
        ),
        (
            ModuleKind::BatchNorm2d,
            MednParams {
                multi_task: false,
                ..quick.clone()
            }
            .fit(&sets[&ModuleKind::BatchNorm2d])
            .unwrap()
            .to_saved(),
        ),
    ];
    for (k, m) in [ModuleKind::Linear, ModuleKind::MaxPool2d]
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

/// In-range and out-of-range queries of every kind, both phases, several batch sizes.
fn queries() -> Vec<(ModuleSpec, Context)> {
    let mut out = Vec::new();
    for kind in [
        ModuleKind::Conv2d,
        ModuleKind::Relu,
        ModuleKind::Matmul,
        ModuleKind::Linear,
        ModuleKind::MaxPool2d,
        ModuleKind::BatchNorm2d,
    ] {
        for i in [0, 3, 17, 38, 61, 250] {
            for (batch, phase) in [
                (1, Phase::Inference),
                (8, Phase::Training),
                (3, Phase::Training),
                (64, Phase::Inference),
            ] {
                out.push((spec(kind, i), ctx(batch, phase)));
            }
        }
    }
    // More conv2d queries than a blend predicts its other parts for at once (64).
    for i in 0..150 {
        let phase = if i % 3 == 0 {
            Phase::Training
        } else {
            Phase::Inference
        };
        out.push((spec(ModuleKind::Conv2d, i), ctx(1 + i % 5, phase)));
    }
    // Far outside: extrapolated at the nearest trained configuration.
    out.push((
        ModuleSpec::Linear(Linear {
            tokens: 1,
            in_features: 25088,
            out_features: 4096,
            bias: true,
        }),
        ctx(2, Phase::Inference),
    ));
    out.push((
        ModuleSpec::MaxPool2d(Pool2d {
            channels: 512,
            input_hw: [224, 224],
            kernel: [2, 2],
            stride: None,
            padding: [0, 0],
        }),
        ctx(1, Phase::Training),
    ));
    // A kind without a model: the spec roofline.
    out.push((
        ModuleSpec::Gelu(Elementwise { shape: [1, 16, 64] }),
        ctx(4, Phase::Inference),
    ));
    out
}

#[test]
fn fast_paths_match_the_reference_path_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let predictor = Predictor::new(bundle(&tmp.path().join("b"), MS_PER_FLOP));
    let queries = queries();
    let reference: Vec<ModulePrediction> = queries
        .iter()
        .map(|(s, c)| predictor.predict_module_reference(s, c).unwrap())
        .collect();
    assert!(reference.iter().any(|p| !p.warnings.is_empty()));
    assert!(reference.iter().any(|p| p.fallback));
    assert!(reference.iter().any(|p| p.model == "medn-shared"));
    assert!(reference.iter().any(|p| p.model == "mlp"));
    assert!(reference.iter().any(|p| p.model == "blend"));
    for ((s, c), r) in queries.iter().zip(&reference) {
        assert_eq!(
            &predictor.predict_module(s, c).unwrap(),
            r,
            "{}",
            s.describe()
        );
    }
    assert_eq!(predictor.predict_modules(&queries).unwrap(), reference);
    assert_eq!(
        predictor.predict_modules_threads(&queries, 3).unwrap(),
        reference
    );

    // A network of these kinds, prepared: every layer as the reference predicts it.
    let net = Network {
        name: "mixed".into(),
        input: vec![8, 16, 16],
        layers: vec![
            Layer::new("conv", spec_conv(8, 16, 16)),
            Layer::new(
                "bn",
                ModuleSpec::BatchNorm2d(BatchNorm2d {
                    channels: 16,
                    input_hw: [16, 16],
                }),
            ),
            Layer::new(
                "relu",
                ModuleSpec::Relu(Elementwise {
                    shape: [16, 16, 16],
                }),
            ),
            Layer::new("conv2", spec_conv(16, 16, 16)),
            Layer::new(
                "relu2",
                ModuleSpec::Relu(Elementwise {
                    shape: [16, 16, 16],
                }),
            ),
            Layer::new(
                "pool",
                ModuleSpec::MaxPool2d(Pool2d {
                    channels: 16,
                    input_hw: [16, 16],
                    kernel: [2, 2],
                    stride: None,
                    padding: [0, 0],
                }),
            ),
            Layer::new(
                "fc",
                ModuleSpec::Linear(Linear {
                    tokens: 1,
                    in_features: 1024,
                    out_features: 10,
                    bias: true,
                }),
            )
            .reshaped(),
            Layer::new("gelu", ModuleSpec::Gelu(Elementwise { shape: [1, 1, 10] })),
        ],
    };
    let prepared = predictor.prepare(&net).unwrap();
    for c in [ctx(1, Phase::Inference), ctx(16, Phase::Training)] {
        let p = predictor.predict_prepared(&prepared, &c).unwrap();
        assert_eq!(p, predictor.predict_network(&net, &c).unwrap());
        for (layer, l) in net.layers.iter().zip(&p.layers) {
            assert_eq!(
                l.prediction,
                predictor.predict_module_reference(&layer.spec, &c).unwrap(),
                "{}",
                layer.name
            );
        }
    }
}

#[test]
fn cpu_gemms_are_never_predicted_faster_than_the_measured_peak() {
    let tmp = tempfile::tempdir().unwrap();
    let device = perfcast_core::testing::cpu_device();
    let floor_ms = |s: &ModuleSpec, c: &Context| {
        perfcast_core::canonical::least_cpu_compute_time_s(s, c, &device) * 1e3
    };
    let gemm = |s: &ModuleSpec| {
        matches!(
            s.kind(),
            ModuleKind::Conv2d | ModuleKind::Linear | ModuleKind::Matmul
        )
    };
    // Labels at 4 TFLOP/s plus 3 us, far beyond the device's 100 GFLOP/s on large layers: those
    // answers are raised to the floor and say so; other kinds are left alone.
    let fast = Predictor::new(bundle(&tmp.path().join("fast"), 1.0 / 4e9));
    let queries = queries();
    let answers = fast.predict_modules(&queries).unwrap();
    let mut raised_gemms = 0;
    for ((s, c), p) in queries.iter().zip(&answers) {
        let raised = p.warnings.iter().any(|w| is_raised(w));
        let floor = floor_ms(s, c);
        assert!(p.ms >= floor, "{}", s.describe());
        if raised {
            assert!(
                gemm(s) && (p.ms - floor).abs() <= 1e-12 * floor,
                "{}",
                s.describe()
            );
            raised_gemms += 1;
        }
    }
    assert!(raised_gemms >= 10, "{raised_gemms} raised");
    // Labels slower than the peak: the floor still holds for every answer.
    let slow = Predictor::new(bundle(&tmp.path().join("slow"), MS_PER_FLOP));
    for ((s, c), p) in queries.iter().zip(slow.predict_modules(&queries).unwrap()) {
        assert!(p.ms >= floor_ms(s, c), "{}", s.describe());
    }
}

fn spec_conv(cin: usize, cout: usize, hw: usize) -> ModuleSpec {
    ModuleSpec::Conv2d(Conv2d {
        in_channels: cin,
        out_channels: cout,
        input_hw: [hw, hw],
        kernel: [3, 3],
        stride: [1, 1],
        padding: [1, 1],
        dilation: [1, 1],
        groups: 1,
        bias: true,
    })
}
