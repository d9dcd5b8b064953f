//! Fused kernels: `--fusion none` is the eager prediction bit for bit, and every fused
//! region lies between its roofline and the sum of its layers' eager predictions.

use perfcast_core::fusion::{Fusion, RegionKind, fuse};
use perfcast_core::{Context, DeviceSpec, Network, Phase};
use perfcast_predict::{Bundle, NetworkPrediction, Predictor};

use crate::{fixtures, repo_root};

fn gpu(device: &str) -> (Predictor, DeviceSpec) {
    let spec = DeviceSpec::read_file(&fixtures().join(format!("devices/{device}.json"))).unwrap();
    let bundle = Bundle::load_for_device(&repo_root().join("checkpoints/gpu"), &spec).unwrap();
    let device = bundle.manifest.device.clone();
    (Predictor::new(bundle), device)
}

fn context(batch: usize, phase: Phase) -> Context {
    Context {
        batch,
        phase,
        threads: 1,
        utilisation: 0.0,
    }
}

fn networks() -> Vec<Network> {
    ["transformer", "resnet18"]
        .into_iter()
        .map(|n| perfcast_core::zoo::build(n, None).unwrap())
        .collect()
}

#[test]
fn fusion_none_is_the_eager_prediction_exactly() {
    let (p, _) = gpu("h100");
    for net in networks() {
        for phase in [Phase::Inference, Phase::Training] {
            let c = context(8, phase);
            let eager = p.predict_network(&net, &c).unwrap();
            let none = p.predict_network_fused(&net, &c, Fusion::None).unwrap();
            assert_eq!(none, eager, "{} {phase:?}", net.name);
            assert_eq!(none.total_ms.to_bits(), eager.total_ms.to_bits());
            assert!(none.fusion.is_none());
            // The JSON of an eager prediction gains no field.
            let json = serde_json::to_string(&none).unwrap();
            assert!(
                !json.contains("fused") && !json.contains("fusion"),
                "{json}"
            );
        }
    }
}

/// Checks one fused prediction against the eager one: every kernel between its region's
/// roofline and its layers' sum, the network's roofline the sum of the regions' bounds.
fn check(net: &Network, p: &Predictor, device: &DeviceSpec, c: &Context, policy: Fusion) {
    let eager = p.predict_network(net, c).unwrap();
    let fused: NetworkPrediction = p.predict_network_fused(net, c, policy).unwrap();
    let regions = fuse(net, policy).unwrap();
    assert_eq!(fused.layers.len(), regions.len());
    if let Some(report) = &fused.fusion {
        assert_eq!(report.policy, policy);
        assert_eq!(report.eager_total_ms, eager.total_ms);
    } else {
        assert_eq!(policy, Fusion::None);
    }
    for (layer, region) in fused.layers.iter().zip(&regions) {
        let parts: f64 = region
            .members
            .iter()
            .map(|&i| eager.layers[i].prediction.ms)
            .sum();
        let ms = layer.prediction.ms;
        let what = format!("{policy} {:?} {} `{}`", c.phase, net.name, layer.name);
        assert!(
            ms <= parts * (1.0 + 1e-12),
            "{what}: {ms} above its parts' {parts}"
        );
        if region.is_fused() {
            let bound = region.least_time_s(net, c, device) * 1e3;
            let own: f64 = region
                .members
                .iter()
                .map(|&i| {
                    perfcast_core::canonical::least_time_s(&net.layers[i].spec, c, device) * 1e3
                })
                .sum();
            // In training a trimmed layer's bound is its forward's: the floor is then the
            // layers' own bounds where those are lower.
            let floor = if c.phase == Phase::Inference {
                bound
            } else {
                bound.min(own)
            };
            assert!(
                ms >= floor * (1.0 - 1e-12),
                "{what}: {ms} below its roofline {floor}"
            );
            assert!(bound > 0.0, "{what}");
            assert_eq!(layer.fused.len(), region.members.len(), "{what}");
            assert_eq!(
                &*layer.fused[0], net.layers[region.members[0]].name,
                "{what}"
            );
        } else {
            assert_eq!(layer, &eager.layers[region.members[0]], "{what}");
        }
    }
    assert!(fused.roofline_ms <= fused.layer_sum_ms, "{policy}");
    assert!(
        fused.roofline_ms <= eager.roofline_ms * (1.0 + 1e-12),
        "{policy}"
    );
    assert!(
        fused.layer_sum_ms <= eager.layer_sum_ms * (1.0 + 1e-12),
        "{policy}"
    );
}

#[test]
fn every_fused_kernel_lies_between_its_roofline_and_its_layers_sum() {
    for device in ["a100-80gb", "h100"] {
        let (p, spec) = gpu(device);
        for net in networks() {
            for phase in [Phase::Inference, Phase::Training] {
                for policy in Fusion::ALL {
                    check(&net, &p, &spec, &context(8, phase), policy);
                }
            }
        }
    }
}

#[test]
fn compiled_attention_is_one_kernel_that_beats_the_eager_layers() {
    let (p, _) = gpu("a100-80gb");
    let block = perfcast_core::zoo::build("transformer", Some(512)).unwrap();
    let c = context(8, Phase::Inference);
    let fused = p
        .predict_network_fused(&block, &c, Fusion::Compile)
        .unwrap();
    let attention = fused
        .layers
        .iter()
        .find(|l| l.name.as_ref() == "attn.scores+softmax+context")
        .unwrap();
    assert_eq!(
        attention.fused.iter().map(|n| &**n).collect::<Vec<_>>(),
        ["attn.scores", "attn.softmax", "attn.context"]
    );
    let regions = fuse(&block, Fusion::Compile).unwrap();
    assert!(regions.iter().any(|r| r.kind == RegionKind::Attention));
    // The softmax over 12 x 512 x 512 scores per sample is gone, so fusion saves time.
    let eager = p.predict_network(&block, &c).unwrap();
    assert!(fused.total_ms < eager.total_ms);
    assert_eq!(fused.fusion.unwrap().kernels, regions.len());
}

#[test]
fn an_engines_half_precision_memory_kernels_are_paced_by_their_sms() {
    use perfcast_core::DType;
    use perfcast_predict::fused::ENGINE_ELEMS_PER_SM_CYCLE;

    let fp32 = perfcast_core::known::lookup("nvidia-a100-sxm4-80gb").unwrap();
    // A gated MLP's activation as an engine runs it: `silu(gate) * up` as one kernel.
    let block: Network = serde_json::from_str(
        r#"{"name": "glu", "input": [1024, 11008], "layers": [
            {"name": "act", "input_from": "input", "spec": {"kind": "silu", "shape": [1, 1024, 11008]}},
            {"name": "gated", "second_from": "input", "spec": {"kind": "mul", "shape": [1, 1024, 11008]}}
        ]}"#,
    )
    .unwrap();
    let c = context(8, Phase::Inference);
    let regions = fuse(&block, Fusion::Engine).unwrap();
    assert!(regions.iter().any(|r| r.kind == RegionKind::Memory));
    let mut paced = 0;
    for dtype in [DType::Fp32, DType::Fp16] {
        let spec = fp32.at_dtype(dtype).unwrap();
        let bundle = Bundle::load_for_device(&repo_root().join("checkpoints/gpu"), &spec).unwrap();
        let device = bundle.manifest.device.clone();
        let p = Predictor::new(bundle);
        check(&block, &p, &device, &c, Fusion::Engine);
        let engine = p.predict_network_fused(&block, &c, Fusion::Engine).unwrap();
        let eager = p.predict_network(&block, &c).unwrap();
        for (region, layer) in regions.iter().zip(&engine.layers) {
            if region.kind != RegionKind::Memory {
                continue;
            }
            let says = layer.module.contains("paced by its SMs' loads");
            if dtype == DType::Fp32 {
                assert!(!says, "{}", layer.module);
                continue;
            }
            let (read, written) = region.bytes(c.batch);
            let per_ms =
                ENGINE_ELEMS_PER_SM_CYCLE * f64::from(device.cores) * device.clock_mhz * 1e3;
            let least = device.launch_us.unwrap_or(0.0) / 1e3 + (read + written) / 4.0 / per_ms;
            let parts: f64 = region
                .members
                .iter()
                .map(|&i| eager.layers[i].prediction.ms)
                .sum();
            // Paced, unless running the layers apart is faster still.
            assert!(
                layer.prediction.ms >= least.min(parts) * (1.0 - 1e-12),
                "{}: {} < {least}",
                layer.name,
                layer.prediction.ms
            );
            paced += usize::from(says);
        }
    }
    // An A100's DRAM moves over twice the half elements per SM-cycle the pace allows, so its
    // large element-wise kernels are paced by their SMs.
    assert!(paced > 0);
}
