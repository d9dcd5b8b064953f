//! Specimens for tests and examples in every crate: one small valid spec per kind, a conv2d
//! builder, made-up CPU and GPU device specs, and spread-out queries for the predictor's
//! fast-path tests.

use crate::spec::*;
use crate::{Layer, Network, Phase};

/// One small, valid spec of every [`ModuleKind`], in [`ModuleKind::ALL`] order.
pub fn one_of_each_kind() -> Vec<ModuleSpec> {
    ModuleKind::ALL.iter().map(|&kind| specimen(kind)).collect()
}

/// A small, valid spec of `kind`: an element-wise kind on a 4 x 6 x 8 tensor (so a new one
/// needs nothing here), every other kind as written below.
pub fn specimen(kind: ModuleKind) -> ModuleSpec {
    if let Some(spec) = ModuleSpec::elementwise(kind, Elementwise { shape: [4, 6, 8] }) {
        return spec;
    }
    let pool = Pool2d {
        channels: 4,
        input_hw: [8, 8],
        kernel: [2, 2],
        stride: Some([2, 2]),
        padding: [0, 0],
    };
    match kind {
        ModuleKind::Conv2d => ModuleSpec::Conv2d(Conv2d {
            in_channels: 4,
            out_channels: 8,
            input_hw: [8, 8],
            kernel: [3, 3],
            stride: [1, 1],
            padding: [1, 1],
            dilation: [1, 1],
            groups: 2,
            bias: true,
        }),
        ModuleKind::Linear => ModuleSpec::Linear(Linear {
            tokens: 3,
            in_features: 16,
            out_features: 8,
            bias: true,
        }),
        ModuleKind::Matmul => ModuleSpec::Matmul(Matmul {
            heads: 2,
            m: 4,
            k: 8,
            n: 6,
            trans_a: false,
            trans_b: true,
        }),
        ModuleKind::MaxPool2d => ModuleSpec::MaxPool2d(pool),
        ModuleKind::AvgPool2d => ModuleSpec::AvgPool2d(pool),
        ModuleKind::BatchNorm2d => ModuleSpec::BatchNorm2d(BatchNorm2d {
            channels: 4,
            input_hw: [6, 6],
        }),
        ModuleKind::LayerNorm => ModuleSpec::LayerNorm(LayerNorm {
            tokens: 5,
            features: 16,
        }),
        ModuleKind::RmsNorm => ModuleSpec::RmsNorm(LayerNorm {
            tokens: 4,
            features: 16,
        }),
        ModuleKind::Embedding => ModuleSpec::Embedding(Embedding {
            tokens: 8,
            vocab: 100,
            features: 16,
        }),
        other => unreachable!("`{other}` is neither element-wise nor listed here"),
    }
}

/// A small made-up CPU (100 GFLOP/s, 10 GB/s, 2 cores) for tests that need a device.
pub fn cpu_device() -> crate::DeviceSpec {
    crate::DeviceSpec {
        name: "test cpu".into(),
        kind: crate::DeviceKind::Cpu,
        peak_gflops: 100.0,
        mem_bandwidth_gbs: 10.0,
        cores: 2,
        threads: 2,
        clock_mhz: 3000.0,
        memory_gb: 8.0,
        cache_mb: 16.0,
        caches: crate::Caches::default(),
        source: crate::SpecSource::Measured,
        software: None,
        launch_us: None,
        tdp_w: None,
        dtype: Default::default(),
        peaks: Default::default(),
        links: Default::default(),
    }
}

/// A made-up GPU for tests: `peak` GFLOP/s, `bw` GB/s, 40 SMs of 64 lanes at 1.5 GHz, 16 GB,
/// 4 MB of cache, published specs, no launch cost.
pub fn gpu(name: &str, peak: f64, bw: f64) -> crate::DeviceSpec {
    crate::DeviceSpec {
        name: name.into(),
        kind: crate::DeviceKind::Gpu,
        peak_gflops: peak,
        mem_bandwidth_gbs: bw,
        cores: 40,
        threads: 2560,
        clock_mhz: 1500.0,
        memory_gb: 16.0,
        cache_mb: 4.0,
        caches: crate::Caches::default(),
        source: crate::SpecSource::Published,
        software: None,
        launch_us: None,
        tdp_w: None,
        dtype: Default::default(),
        peaks: Default::default(),
        links: Default::default(),
    }
}

/// [`gpu`] with `sms` SMs of 64 lanes at 1.4 GHz.
pub fn gpu_with_sms(name: &str, peak: f64, bw: f64, sms: u32) -> crate::DeviceSpec {
    crate::DeviceSpec {
        cores: sms,
        threads: sms * 64,
        clock_mhz: 1400.0,
        ..gpu(name, peak, bw)
    }
}

/// A square conv2d with bias and "same" padding (`k / 2`): `cin` -> `cout` channels on a
/// `hw` x `hw` input, kernel `k`, `stride`, `groups`.
pub fn conv(
    cin: usize,
    cout: usize,
    hw: usize,
    k: usize,
    stride: usize,
    groups: usize,
) -> ModuleSpec {
    ModuleSpec::Conv2d(Conv2d {
        in_channels: cin,
        out_channels: cout,
        input_hw: [hw, hw],
        kernel: [k, k],
        stride: [stride, stride],
        padding: [k / 2, k / 2],
        dilation: [1, 1],
        groups,
        bias: true,
    })
}

/// A one-thread, idle-machine context.
pub fn context(batch: usize, phase: Phase) -> crate::Context {
    crate::Context {
        batch,
        phase,
        threads: 1,
        utilisation: 0.0,
    }
}

/// The `i`-th module of `kind` (conv2d, linear, matmul, maxpool2d, batchnorm2d; relu for any
/// other): sizes spread over a range, so queries can leave it.
pub fn spread(kind: ModuleKind, i: usize) -> ModuleSpec {
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

/// Queries of the six kinds [`spread`] builds, in and out of a model's range, both phases,
/// several batch sizes; more conv2d queries than a batch predicts at once, two far outside,
/// and a kind few bundles hold (gelu).
pub fn spread_queries() -> Vec<(ModuleSpec, crate::Context)> {
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
                out.push((spread(kind, i), context(batch, phase)));
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
        out.push((spread(ModuleKind::Conv2d, i), context(1 + i % 5, phase)));
    }
    // Rows per sample filling whole 32-row tiles: a CPU backend runs one GEMM per sample.
    for phase in [Phase::Inference, Phase::Training] {
        out.push((
            ModuleSpec::Linear(Linear {
                tokens: 64,
                in_features: 96,
                out_features: 40,
                bias: true,
            }),
            context(4, phase),
        ));
    }
    // Far outside: extrapolated at the nearest trained configuration.
    out.push((
        ModuleSpec::Linear(Linear {
            tokens: 1,
            in_features: 25088,
            out_features: 4096,
            bias: true,
        }),
        context(2, Phase::Inference),
    ));
    out.push((
        ModuleSpec::MaxPool2d(Pool2d {
            channels: 512,
            input_hw: [224, 224],
            kernel: [2, 2],
            stride: None,
            padding: [0, 0],
        }),
        context(1, Phase::Training),
    ));
    // A kind without a model: the spec roofline.
    out.push((
        ModuleSpec::Gelu(Elementwise { shape: [1, 16, 64] }),
        context(4, Phase::Inference),
    ));
    out
}

/// A small network of the kinds [`spread`] builds (a reshaped linear among them) and one it
/// does not (gelu).
pub fn mixed_network() -> Network {
    let relu = |name: &str| {
        Layer::new(
            name,
            ModuleSpec::Relu(Elementwise {
                shape: [16, 16, 16],
            }),
        )
    };
    Network {
        name: "mixed".into(),
        input: vec![8, 16, 16],
        layers: vec![
            Layer::new("conv", conv(8, 16, 16, 3, 1, 1)),
            Layer::new(
                "bn",
                ModuleSpec::BatchNorm2d(BatchNorm2d {
                    channels: 16,
                    input_hw: [16, 16],
                }),
            ),
            relu("relu"),
            Layer::new("conv2", conv(16, 16, 16, 3, 1, 1)),
            relu("relu2"),
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
    }
}
