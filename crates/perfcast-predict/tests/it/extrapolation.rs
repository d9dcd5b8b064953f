//! Outside its trained ranges the GPU utilisation model answers for itself: the work beyond
//! the range is counted by the roofline, and the launch floor stays a floor. Scaling the
//! nearest trained answer by the work ratio scaled the floor too, and predicted a ResNet's
//! large activations at several times their memory time.

use perfcast_core::canonical::least_time_s;
use perfcast_core::{Context, DeviceSpec, Elementwise, ModuleSpec, Phase};
use perfcast_predict::{Bundle, Predictor};

use crate::{fixtures, repo_root};

#[test]
fn large_elementwise_ops_stay_near_their_roofline() {
    let h100 = DeviceSpec::read_file(&fixtures().join("devices/h100.json")).unwrap();
    let p = Predictor::new(
        Bundle::load_for_device(&repo_root().join("checkpoints/gpu"), &h100).unwrap(),
    );
    for (batch, shape) in [
        (64, [64, 112, 112]),
        (256, [256, 56, 56]),
        (8, [64, 224, 224]),
    ] {
        for phase in [Phase::Inference, Phase::Training] {
            let relu = ModuleSpec::Relu(Elementwise { shape });
            let context = Context {
                batch,
                phase,
                threads: 1,
                utilisation: 0.0,
            };
            let predicted = p.predict_module(&relu, &context).unwrap().ms;
            let roofline = least_time_s(&relu, &context, &h100) * 1e3;
            // Far outside NeuSight's element-wise sizes: a memory-bound op a GPU streams
            // near its bandwidth, never below the roofline and within a few times of it.
            assert!(
                predicted >= roofline && predicted < 3.0 * roofline,
                "relu {shape:?} b{batch} {phase:?}: {predicted} ms, roofline {roofline} ms"
            );
        }
    }
}
