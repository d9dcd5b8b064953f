//! Network plans: a repeated network query is answered from the predictor's cache of prepared
//! networks and their per-context plans (rows built once, models run on every call), and
//! every answer equals the plan-free paths': a fresh preparation, and each layer's module
//! predicted through the reference path.

use perfcast_core::{Context, Phase, zoo};
use perfcast_predict::{Bundle, NetworkPrediction, Predictor};

use crate::{fixtures, repo_root};

/// Every fixture bundle and the shipped GPU bundle.
fn bundles() -> Vec<std::path::PathBuf> {
    let mut out: Vec<_> = std::fs::read_dir(fixtures().join("bundles"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("manifest.json").is_file())
        .collect();
    out.sort();
    out.push(repo_root().join("checkpoints/gpu"));
    out
}

fn ctx(batch: usize, phase: Phase) -> Context {
    Context {
        batch,
        phase,
        threads: 1,
        utilisation: 0.0,
    }
}

/// Each layer of `p` (of `net` in `context`) as the reference path predicts its module alone,
/// where the network runs the module as timed alone (a trimmed training layer says so in its
/// description and is left out).
fn layers_match_the_reference(
    predictor: &Predictor,
    net: &perfcast_core::Network,
    context: &Context,
    p: &NetworkPrediction,
    what: &str,
) {
    for (layer, l) in net.layers.iter().zip(&p.layers) {
        if *l.module != *layer.spec.describe() {
            continue;
        }
        let reference = predictor
            .predict_module_reference(&layer.spec, context)
            .unwrap();
        assert_eq!(l.prediction, reference, "{what}: layer `{}`", layer.name);
    }
}

#[test]
fn repeated_network_queries_answer_as_the_plan_free_paths() {
    let networks = [
        zoo::build("vgg16", None).unwrap(),
        zoo::build("resnet18", None).unwrap(),
        zoo::build("transformer", None).unwrap(),
    ];
    // Batch 512 leaves every fixture's trained range: stand-ins inside the plans.
    let contexts = [
        ctx(1, Phase::Inference),
        ctx(8, Phase::Training),
        ctx(512, Phase::Inference),
        ctx(512, Phase::Training),
    ];
    for dir in bundles() {
        let predictor = Predictor::new(Bundle::load(&dir).unwrap());
        for net in &networks {
            for c in &contexts {
                let what = format!("{} {} b{} {:?}", dir.display(), net.name, c.batch, c.phase);
                let first = predictor.predict_network(net, c).unwrap();
                let again = predictor.predict_network(net, c).unwrap();
                assert_eq!(first, again, "{what}");
                // A network prepared afresh starts with no plans.
                let fresh = predictor
                    .predict_prepared(&predictor.prepare(net).unwrap(), c)
                    .unwrap();
                assert_eq!(first, fresh, "{what}");
                layers_match_the_reference(&predictor, net, c, &first, &what);
            }
        }
    }
}

#[test]
fn a_network_prepared_by_one_predictor_is_answered_by_another_as_its_own() {
    let cpu = Predictor::new(Bundle::load(&fixtures().join("bundles/cpu-medn-shared")).unwrap());
    let gpu = Predictor::new(Bundle::load(&repo_root().join("checkpoints/gpu")).unwrap());
    let net = zoo::build("resnet18", None).unwrap();
    let prepared = cpu.prepare(&net).unwrap();
    let c = ctx(4, Phase::Inference);
    // The CPU predictor's plan is made first; the GPU predictor must not use it.
    let on_cpu = cpu.predict_prepared(&prepared, &c).unwrap();
    let on_gpu = gpu.predict_prepared(&prepared, &c).unwrap();
    assert_eq!(on_cpu, cpu.predict_network(&net, &c).unwrap());
    assert_eq!(on_gpu, gpu.predict_network(&net, &c).unwrap());
    assert_ne!(on_cpu.total_ms, on_gpu.total_ms);
}

#[test]
fn a_changed_network_is_prepared_again() {
    let predictor =
        Predictor::new(Bundle::load(&fixtures().join("bundles/cpu-medn-shared")).unwrap());
    let c = ctx(1, Phase::Inference);
    let net = zoo::build("vgg16", None).unwrap();
    let before = predictor.predict_network(&net, &c).unwrap();
    // The same layers at another resolution: equal names, other shapes.
    let smaller = zoo::build("vgg16", Some(112)).unwrap();
    let after = predictor.predict_network(&smaller, &c).unwrap();
    assert!(after.total_ms < before.total_ms);
    assert_eq!(
        after,
        predictor
            .predict_prepared(&predictor.prepare(&smaller).unwrap(), &c)
            .unwrap()
    );
    // A network whose shapes no longer fit is refused, not answered from the cache.
    let mut broken = net.clone();
    broken.layers.swap(0, 1);
    assert!(predictor.predict_network(&broken, &c).is_err());
}
