//! Checks the predictor's tests share, here and in perfcast-select (hidden: tests only).
#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

use perfcast_core::testing::{context, mixed_network, spread_queries};
use perfcast_core::{Layer, Linear, ModuleSpec, Network, Phase};

use crate::{ModulePrediction, Predictor};

/// Asserts that every fast path (one module, a batch, threads, a prepared network) answers
/// exactly as the reference path over the spread queries, that the queries reach warnings,
/// fallbacks and each family in `models`.
pub fn assert_fast_paths_match_the_reference(predictor: &Predictor, models: &[&str]) {
    let queries = spread_queries();
    let reference: Vec<ModulePrediction> = queries
        .iter()
        .map(|(s, c)| predictor.predict_module_reference(s, c).unwrap())
        .collect();
    assert!(reference.iter().any(|p| !p.warnings.is_empty()));
    assert!(reference.iter().any(|p| p.fallback));
    for model in models {
        assert!(reference.iter().any(|p| p.model == *model), "{model}");
    }
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
    let net = mixed_network();
    let prepared = predictor.prepare(&net).unwrap();
    for c in [context(1, Phase::Inference), context(16, Phase::Training)] {
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

    // A linear layer a CPU backend runs once per sample: in a network as alone, and (on a CPU
    // bundle, unless raised to its floor) the batch times its answer at batch 1.
    let spec = ModuleSpec::Linear(Linear {
        tokens: 64,
        in_features: 96,
        out_features: 40,
        bias: true,
    });
    let net = Network {
        name: "per-sample".into(),
        input: vec![64, 96],
        layers: vec![Layer::new("proj", spec.clone())],
    };
    let prepared = predictor.prepare(&net).unwrap();
    for phase in [Phase::Inference, Phase::Training] {
        let (four, one) = (context(4, phase), context(1, phase));
        let reference = predictor.predict_module_reference(&spec, &four).unwrap();
        // In training the network's first layer runs no input gradient (trimmed).
        if phase == Phase::Inference {
            let p = predictor.predict_prepared(&prepared, &four).unwrap();
            assert_eq!(p.layers[0].prediction, reference);
        }
        let many = predictor
            .predict_modules(&[(spec.clone(), four.clone())])
            .unwrap();
        assert_eq!(many[0], reference);
        let at_one = predictor.predict_module_reference(&spec, &one).unwrap();
        let cpu = predictor.bundle().manifest.device.kind == perfcast_core::DeviceKind::Cpu;
        if cpu
            && !reference
                .warnings
                .iter()
                .any(|w| crate::predictor::is_raised(w))
        {
            let ratio = reference.ms / at_one.ms;
            assert!((ratio - 4.0).abs() < 1e-9, "{phase}: {ratio}");
        }
    }
}
