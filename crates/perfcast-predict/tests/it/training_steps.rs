//! A GPU training step on the shipped bundle: the framework's step terms a bundle never
//! calibrated still pays (the input copy, the optimiser update, the host's dispatch as a
//! floor), and a training step on a GPU
//! without training rows of its kind taken from its own forward pass.

use perfcast_core::{Context, Conv2d, DeviceSpec, ModuleSpec, Phase, zoo};
use perfcast_predict::{Bundle, Predictor};

use crate::{fixtures, repo_root};

fn predictor(device: &str) -> Predictor {
    let spec = DeviceSpec::read_file(&fixtures().join(format!("devices/{device}.json"))).unwrap();
    Predictor::new(Bundle::load_for_device(&repo_root().join("checkpoints/gpu"), &spec).unwrap())
}

fn context(batch: usize, phase: Phase) -> Context {
    Context {
        batch,
        phase,
        threads: 1,
        utilisation: 0.0,
    }
}

#[test]
fn an_uncalibrated_gpu_training_step_pays_its_input_copy_and_update() {
    let p = predictor("h100");
    let net = zoo::build("resnet18", Some(224)).unwrap();
    let step = p
        .predict_network(&net, &context(32, Phase::Training))
        .unwrap();
    let c = step
        .composed
        .as_ref()
        .expect("a GPU training step has step terms");
    assert!(c.from_spec);
    // 32 images of 3x224x224 fp32 over an 8 GB/s pageable copy.
    let copy_ms = 32.0 * 3.0 * 224.0 * 224.0 * 4.0 / 8e6;
    assert!(
        (c.copy_ms - copy_ms).abs() < 1e-9 * copy_ms,
        "{}",
        c.copy_ms
    );
    // ResNet-18's 11.69M parameters, 20 bytes each, at half of 3430 GB/s.
    let update_ms = 11_689_512.0 * 20.0 / (0.5 * 3430e9) * 1e3;
    assert!(
        (c.update_ms - update_ms).abs() < 1e-6 * update_ms,
        "{}",
        c.update_ms
    );
    let sum = step.layer_sum_ms + c.per_run_ms + c.update_ms + c.copy_ms;
    assert!((step.total_ms - sum).abs() < 1e-9 * sum);
    // At 224 px the GPU's work outlasts the host's dispatch.
    assert_eq!(c.host_bound_ms, 0.0);
    assert!(c.host_floor_ms > 1.0 && c.host_floor_ms < c.total_ms - c.copy_ms);
    assert!(step.roofline_ms > 0.0 && step.roofline_ms <= step.layer_sum_ms);
    // Inference is the layers alone, never below their roofline either.
    let fwd = p
        .predict_network(&net, &context(32, Phase::Inference))
        .unwrap();
    assert!(fwd.composed.is_none());
    assert_eq!(fwd.total_ms, fwd.layer_sum_ms);
    assert!(fwd.roofline_ms > 0.0 && fwd.roofline_ms <= fwd.layer_sum_ms);
    assert!(fwd.roofline_ms < step.roofline_ms);
}

#[test]
fn a_small_network_s_training_step_on_a_fast_gpu_waits_on_the_host() {
    let p = predictor("h100");
    let net = zoo::build("lenet5", Some(32)).unwrap();
    let step = p
        .predict_network(&net, &context(64, Phase::Training))
        .unwrap();
    let c = step.composed.as_ref().expect("step terms");
    let floor = perfcast_predict::compose::GPU_HOST_FLOOR;
    let host = floor.per_step_ms + floor.per_layer_ms * net.layers.len() as f64;
    assert!((c.host_floor_ms - host).abs() < 1e-12, "{c:?}");
    // The kernels take less than the host's dispatch, so the step is the host's plus the copy.
    assert!(c.host_bound_ms > 0.0, "{c:?}");
    assert!((step.total_ms - (host + c.copy_ms)).abs() < 1e-9, "{c:?}");
    // Never below the GPU's own work either.
    assert!(step.total_ms > step.layer_sum_ms + c.update_ms + c.copy_ms);
}

#[test]
fn a_conv_training_step_on_a_gpu_without_training_rows_follows_its_forward() {
    let conv = ModuleSpec::Conv2d(Conv2d {
        in_channels: 64,
        out_channels: 64,
        input_hw: [56, 56],
        kernel: [3, 3],
        stride: [1, 1],
        padding: [1, 1],
        dilation: [1, 1],
        groups: 1,
        bias: false,
    });
    let transferred = |device: DeviceSpec| {
        let p = Predictor::new(
            Bundle::load_for_device(&repo_root().join("checkpoints/gpu"), &device).unwrap(),
        );
        let fwd = p
            .predict_module(&conv, &context(32, Phase::Inference))
            .unwrap();
        let step = p
            .predict_module(&conv, &context(32, Phase::Training))
            .unwrap();
        // A backward of two GEMM-sized passes: more than twice the forward, under ten times.
        assert!(
            step.ms > 2.0 * fwd.ms && step.ms < 10.0 * fwd.ms,
            "{}: {} vs {}",
            device.name,
            step.ms,
            fwd.ms
        );
        step.warnings
            .iter()
            .any(|w| w.contains("training/forward ratio"))
    };
    let read = |name: &str| {
        DeviceSpec::read_file(&fixtures().join(format!("devices/{name}.json"))).unwrap()
    };
    // DeepBench timed the T4's training steps, and convs on GPUs from 6.6 to 15.7 TFLOP/s and
    // 320 to 900 GB/s; the H100 (3430 GB/s) and the A100 80GB (1935) are beyond twice those.
    assert!(!transferred(read("t4")));
    assert!(transferred(read("a100-80gb")));
    assert!(transferred(read("h100")));
}

#[test]
fn a_cpu_conv_to_few_outputs_trains_in_batch_times_its_one_sample_step() {
    let p = Predictor::new(Bundle::load(&fixtures().join("bundles/cpu-ridge-trees")).unwrap());
    let conv = |out_channels: usize, groups: usize| {
        ModuleSpec::Conv2d(Conv2d {
            in_channels: 64,
            out_channels,
            input_hw: [28, 28],
            kernel: [1, 1],
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
            groups,
            bias: true,
        })
    };
    let ms = |spec: &ModuleSpec, batch: usize, phase: Phase| {
        p.predict_module(spec, &context(batch, phase)).unwrap().ms
    };
    let narrow = conv(16, 1);
    let one = ms(&narrow, 1, Phase::Training);
    for batch in [2, 4] {
        let step = ms(&narrow, batch, Phase::Training);
        assert!(
            (step - batch as f64 * one).abs() <= 1e-12 * step,
            "batch {batch}: {step} against {one}"
        );
    }
    // Not past batch 4, not in inference, not to 17 outputs or for a grouped conv: the
    // models answer as before.
    for (spec, batch, phase) in [
        (&narrow, 8, Phase::Training),
        (&narrow, 4, Phase::Inference),
        (&conv(17, 1), 4, Phase::Training),
        (&conv(16, 16), 4, Phase::Training),
    ] {
        assert_eq!(
            perfcast_predict::predictor::direct_weight_gradient(spec, &context(batch, phase)),
            None
        );
    }
    assert_eq!(
        perfcast_predict::predictor::direct_weight_gradient(&narrow, &context(3, Phase::Training)),
        Some(3)
    );
    // A network holding such a conv answers the same through its prepared plan.
    let net = zoo::build("squeezenet1_1", None).unwrap();
    let c = context(4, Phase::Training);
    let prepared = p.prepare(&net).unwrap();
    assert_eq!(
        p.predict_prepared(&prepared, &c).unwrap(),
        p.predict_network(&net, &c).unwrap()
    );
    let squeeze = net
        .layers
        .iter()
        .position(|l| matches!(&l.spec, ModuleSpec::Conv2d(c) if c.out_channels == 16))
        .unwrap();
    let layer = &p.predict_network(&net, &c).unwrap().layers[squeeze];
    let alone = 4.0 * ms(&net.layers[squeeze].spec, 1, Phase::Training);
    assert!((layer.prediction.ms - alone).abs() <= 1e-12 * alone);
}
