//! Every bundle in the repository's `checkpoints/` (the shipped `gpu` one, and any a user wrote
//! there, such as `perfcast quickstart`'s `local`) loads and predicts: one module of every
//! kind in both phases, and a zoo network; a cross-device bundle also for a GPU it never
//! measured.

use perfcast_core::canonical::least_time_s;
use perfcast_core::{Context, DeviceKind, DeviceSpec, Phase, testing, zoo};
use perfcast_predict::{Bundle, Predictor, ZERO_COST_MODEL};

use crate::{fixtures, repo_root};

/// Bundle directories under `checkpoints/`.
fn bundles() -> Vec<std::path::PathBuf> {
    let mut out: Vec<_> = std::fs::read_dir(repo_root().join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("manifest.json").is_file())
        .collect();
    out.sort();
    out
}

/// Checks every answer of `predictor`: a model's where the bundle has one for the kind, a
/// positive finite time (zero for views), at least the spec's least time on a GPU.
fn predicts_everything(predictor: &Predictor, what: &str) {
    let manifest = &predictor.bundle().manifest;
    let device = &manifest.device;
    for spec in testing::one_of_each_kind() {
        for phase in [Phase::Inference, Phase::Training] {
            let context = Context {
                batch: 4,
                phase,
                threads: 1,
                utilisation: 0.0,
            };
            let p = predictor.predict_module(&spec, &context).unwrap();
            let at = format!("{what}: {} {phase}", spec.describe());
            if spec.kind().is_zero_cost() {
                assert_eq!((p.ms, p.model.as_ref()), (0.0, ZERO_COST_MODEL), "{at}");
                continue;
            }
            assert!(p.ms.is_finite() && p.ms > 0.0, "{at}: {} ms", p.ms);
            match manifest.kinds.get(spec.kind().name()) {
                Some(entry) => {
                    assert!(!p.fallback, "{at}");
                    assert_eq!(p.model, entry.chosen.as_str(), "{at}");
                }
                None => assert!(p.fallback, "{at}"),
            }
            if device.kind == DeviceKind::Gpu {
                let floor = least_time_s(&spec, &context, device) * 1e3;
                assert!(p.ms >= floor * (1.0 - 1e-12), "{at}: {} < {floor}", p.ms);
            }
        }
    }
    let net = zoo::build("resnet18", None).unwrap();
    let context = Context {
        batch: 2,
        phase: Phase::Training,
        threads: 1,
        utilisation: 0.0,
    };
    let p = predictor.predict_network(&net, &context).unwrap();
    assert_eq!(p.layers.len(), net.layers.len(), "{what}");
    assert!(p.total_ms.is_finite() && p.total_ms > 0.0, "{what}");
    let sum: f64 = p.layers.iter().map(|l| l.prediction.ms).sum();
    assert_eq!(p.layer_sum_ms, sum, "{what}");
}

#[test]
fn every_bundle_in_checkpoints_loads_and_predicts() {
    let bundles = bundles();
    // The GPU bundle is committed; others are the user's.
    assert!(bundles.iter().any(|b| b.ends_with("gpu")), "{bundles:?}");
    let h100 = DeviceSpec::read_file(&fixtures().join("devices/h100.json")).unwrap();
    for dir in &bundles {
        let what = dir.display().to_string();
        let predictor = Predictor::new(Bundle::load(dir).unwrap());
        predicts_everything(&predictor, &what);
        if predictor.bundle().manifest.cross_device() {
            let predictor = Predictor::new(Bundle::load_for_device(dir, &h100).unwrap());
            assert_eq!(predictor.bundle().manifest.device, h100);
            predicts_everything(&predictor, &format!("{what} for {}", h100.name));
        } else {
            let err = Bundle::load_for_device(dir, &h100).unwrap_err().to_string();
            assert!(err.contains("cannot predict"), "{err}");
        }
    }
}

#[test]
fn a_single_device_bundle_answers_for_its_machine_probed_again_and_refuses_others() {
    let dir = fixtures().join("bundles/cpu-ridge-trees");
    let own = Bundle::load(&dir).unwrap().manifest.device.clone();
    // Another dataset of the same CPU, its peaks a little apart.
    let again = DeviceSpec {
        peak_gflops: own.peak_gflops * 1.05,
        mem_bandwidth_gbs: own.mem_bandwidth_gbs / 1.08,
        ..own.clone()
    };
    let bundle = Bundle::load_for_device(&dir, &again).unwrap();
    assert_eq!(
        bundle.manifest.device, own,
        "keeps the spec its models learned"
    );
    // Twice the peak is another machine, whatever its name.
    let other = DeviceSpec {
        peak_gflops: own.peak_gflops * 2.0,
        ..own.clone()
    };
    let err = Bundle::load_for_device(&dir, &other)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("cannot predict") && err.contains("GFLOP/s"),
        "{err}"
    );
}
