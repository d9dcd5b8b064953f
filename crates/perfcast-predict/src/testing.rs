//! Checks the predictor's tests share, here and in perfcast-select (hidden: tests only).
#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

use perfcast_core::Phase;
use perfcast_core::testing::{context, mixed_network, spread_queries};

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
}
