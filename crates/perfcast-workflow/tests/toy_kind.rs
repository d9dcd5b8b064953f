//! What adding a module kind takes (docs/extending.md): `leaky_relu` came in as this test's
//! subject, an element-wise kind written in three places: its variants in perfcast-core's
//! `spec`, its row in perfcast-core's `kinds` (name, work per element, fusion, what the
//! backward keeps) and its burn op in perfcast-profile's `ops`. Every other crate reaches it
//! through those: it is parsed, given features, fused, kept by the memory model, measured in
//! both phases into a dataset, trained, selected into a bundle and predicted by the same code as
//! every other kind.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use perfcast_core::fusion::{Fusion, fuse};
use perfcast_core::progress::Silent;
use perfcast_core::{
    Context, Conv2d, Elementwise, Layer, ModuleKind, ModuleSpec, Network, Phase, features,
};
use perfcast_predict::{Bundle, Predictor};
use perfcast_profile::run::{RunOptions, plan, run_jobs};
use perfcast_profile::{Backend, Sweep};
use perfcast_scale::memory::{Graph, Tensor};
use perfcast_select::pipeline::{TrainPlan, train_and_select};

const SWEEP: &str = r#"
seed = 3
samples = 16
modules = ["leaky_relu"]
phases = ["inference", "training"]
batch = [1, 2]
canary = false
[timing]
warmup_s = 0.0
min_samples = 3
max_time_s = 0.01
[leaky_relu]
c = { min = 1, max = 16 }
h = [4, 8]
w = [4, 8]
"#;

/// A 3 x 3 convolution and the new kind after it.
fn conv_then_leaky() -> Network {
    let conv = ModuleSpec::Conv2d(Conv2d {
        in_channels: 3,
        out_channels: 4,
        input_hw: [8, 8],
        kernel: [3, 3],
        stride: [1, 1],
        padding: [1, 1],
        dilation: [1, 1],
        groups: 1,
        bias: true,
    });
    let act = ModuleSpec::LeakyRelu(Elementwise { shape: [4, 8, 8] });
    Network {
        name: "toy".into(),
        input: vec![3, 8, 8],
        layers: vec![Layer::new("conv", conv), Layer::new("act", act)],
    }
}

#[test]
fn a_kind_added_by_its_row_runs_through_every_crate() {
    // Named and parsed like every kind, and element-wise, so the shared code paths take it.
    let kind: ModuleKind = "leaky_relu".parse().unwrap();
    let spec = ModuleSpec::from_json(r#"{"kind":"leaky_relu","shape":[8,16,16]}"#).unwrap();
    assert_eq!((spec.kind(), kind.name()), (kind, "leaky_relu"));
    assert!(kind.is_elementwise() && ModuleKind::ALL.contains(&kind));
    assert!(
        perfcast_core::testing::one_of_each_kind()
            .iter()
            .any(|s| s.kind() == kind)
    );

    // Its work comes from its row: two operations per element.
    let d = features::derive(&spec, 2);
    assert_eq!(d.flops, 2.0 * 2.0 * (8 * 16 * 16) as f64);

    // Fused into the convolution's epilogue; its backward keeps its input (the conv's output).
    let net = conv_then_leaky();
    net.check().unwrap();
    let regions = fuse(&net, Fusion::Epilogue).unwrap();
    assert_eq!(regions.len(), 1);
    assert_eq!(regions[0].members, [0, 1]);
    let graph = Graph::new(&net).unwrap();
    assert_eq!(graph.nodes[1].keeps, [Tensor::Layer(0)]);

    // Measured in both phases into its own table of a dataset.
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let sweep = Sweep::from_toml(SWEEP, Path::new("toy.toml")).unwrap();
    let options = RunOptions::for_sweep(
        &sweep,
        &data,
        Backend::Flex,
        perfcast_core::testing::cpu_device(),
        false,
    );
    let summary = run_jobs(
        &sweep,
        plan(&sweep).unwrap(),
        &options,
        &mut |_| {},
        &AtomicBool::new(false),
    )
    .unwrap();
    assert_eq!(summary.kinds["leaky_relu"].measured, 32, "{summary:?}");
    assert!(data.join("leaky_relu.parquet").is_file());

    // Trained, selected into a bundle, and predicted by its model.
    let bundle = tmp.path().join("bundle");
    let train = TrainPlan {
        models: vec!["ridge".into(), "roofline".into()],
        bundle: Some(bundle.display().to_string()),
        ..TrainPlan::new(vec![data], tmp.path().join("train"))
    };
    let report = train_and_select(&train, Arc::new(Silent))
        .unwrap()
        .write(Vec::new())
        .unwrap();
    assert_eq!(report.kinds.len(), 1);
    let predictor = Predictor::new(Bundle::load(&bundle).unwrap());
    assert!(predictor.bundle().manifest.kinds.contains_key("leaky_relu"));
    for phase in [Phase::Inference, Phase::Training] {
        let context = Context {
            batch: 2,
            phase,
            threads: 1,
            utilisation: 0.0,
        };
        let p = predictor.predict_module(&spec, &context).unwrap();
        assert!(!p.fallback && p.ms > 0.0 && p.ms.is_finite(), "{p:?}");
    }
}
