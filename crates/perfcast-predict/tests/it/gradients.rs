//! A network's training step charges each layer only the backward kernels the network runs:
//! operands that carry no gradient (the network input, or what only parameter-free layers made
//! of it) compute none, where a module timed alone always does.

use perfcast_core::{
    Context, DeviceSpec, Elementwise, Layer, Linear, Matmul, ModuleSpec, NETWORK_INPUT, Network,
    Phase,
};
use perfcast_predict::{Bundle, Predictor};

use crate::{fixtures, repo_root};

fn context(phase: Phase) -> Context {
    Context {
        batch: 4,
        phase,
        threads: 1,
        utilisation: 0.0,
    }
}

#[test]
fn layers_without_gradient_flowing_in_pay_no_backward_for_it() {
    // The shipped GPU bundle composes training steps from forward kernels, so each trim is
    // one of its kernels exactly.
    let h100 = DeviceSpec::read_file(&fixtures().join("devices/h100.json")).unwrap();
    let p = Predictor::new(
        Bundle::load_for_device(&repo_root().join("checkpoints/gpu"), &h100).unwrap(),
    );
    let (tokens, d) = (64, 256);
    let relu = ModuleSpec::Relu(Elementwise {
        shape: [1, tokens, d],
    });
    let proj = ModuleSpec::Linear(Linear {
        tokens,
        in_features: d,
        out_features: d,
        bias: true,
    });
    let scores = Matmul {
        heads: 1,
        m: tokens,
        k: d,
        n: tokens,
        trans_a: false,
        trans_b: false,
    };
    let net = Network {
        name: "grads".into(),
        input: vec![tokens, d],
        layers: vec![
            // Parameter-free on the input: no backward at all.
            Layer::new("relu0", relu.clone()),
            // Reads only the relu of the input: dW but no dX.
            Layer::new("proj0", proj.clone()),
            // The same module where a gradient flows in: the full step.
            Layer::new("proj1", proj.clone()),
            // First operand the input (no dA), second the projection (dB).
            Layer::new("scores", ModuleSpec::Matmul(scores.clone()))
                .reads(NETWORK_INPUT)
                .second("proj1")
                .reshaped(),
        ],
    };
    let train = p.predict_network(&net, &context(Phase::Training)).unwrap();
    let ms = |name: &str| {
        let l = train.layers.iter().find(|l| &*l.name == name).unwrap();
        (l.prediction.ms, l.module.to_string())
    };
    let one = |spec: &ModuleSpec, phase| p.predict_module(spec, &context(phase)).unwrap().ms;

    let (relu0, described) = ms("relu0");
    assert_eq!(relu0, one(&relu, Phase::Inference), "{described}");
    assert!(described.contains("no backward"), "{described}");

    let (proj0, described) = ms("proj0");
    let dx = ModuleSpec::Linear(Linear {
        tokens,
        in_features: d,
        out_features: d,
        bias: false,
    });
    let full = one(&proj, Phase::Training);
    let want = (full - one(&dx, Phase::Inference)).max(one(&proj, Phase::Inference));
    assert_eq!(proj0, want, "{described}");
    assert!(proj0 < full, "{proj0} against the full step {full}");
    assert!(described.contains("no input gradient"), "{described}");
    assert_eq!(ms("proj1").0, full);

    let (scores_ms, _) = ms("scores");
    let da = ModuleSpec::Matmul(Matmul {
        k: scores.n,
        n: scores.k,
        trans_b: true,
        ..scores.clone()
    });
    let full = one(&ModuleSpec::Matmul(scores.clone()), Phase::Training);
    assert_eq!(scores_ms, full - one(&da, Phase::Inference));

    // Inference is untouched, and the sum is the layers'.
    let infer = p.predict_network(&net, &context(Phase::Inference)).unwrap();
    assert_eq!(infer.layers[1].prediction.ms, infer.layers[2].prediction.ms);
    let sum: f64 = train.layers.iter().map(|l| l.prediction.ms).sum();
    assert_eq!(train.layer_sum_ms, sum);
}
