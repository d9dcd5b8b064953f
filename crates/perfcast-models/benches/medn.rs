//! MEDN's two forward passes side by side: the plain `f32` fast path that serving uses, and
//! burn's own forward (the reference the fast path is tested against), for one row and for a
//! batch of 10,000 rows, on the default architecture (width 64, 2 residual blocks, latent 32,
//! heads 32, skip path, 2 tasks) with 64 inputs, about what a GEMM kind's row holds.
//!
//! `cargo bench -p perfcast-models --bench medn`. Weights are burn's random initialisation:
//! the cost of a forward pass does not depend on their values. `model_batch_10k` is the whole
//! model's batch entry (`Regressor::predict_tasks`, what serving calls: log1p, standardisation,
//! GEMM tile inputs and the network) on a MEDN fitted here to generated linear-layer rows.

use burn::tensor::{Device, Tensor, TensorData};
use divan::Bencher;
use divan::counter::ItemsCount;
use perfcast_core::{Context, Linear, ModuleKind, ModuleSpec, Phase};
use perfcast_models::medn::{BurnWeights, FastNet, InitNet, MednConfig, MednParams};
use perfcast_models::{FeatureSchema, Fit, Matrix, Regressor, TrainSet, features};

const INPUTS: usize = 64;
const ROWS: usize = 10_000;

fn main() {
    divan::main();
}

/// Rows of standardised features in [-2, 2), deterministic.
fn rows(n: usize) -> Vec<f32> {
    let mut state = 0x9E37_79B9_u32;
    (0..n * INPUTS)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            (state as f32 / u32::MAX as f32) * 4.0 - 2.0
        })
        .collect()
}

fn nets() -> (
    burn::tensor::Device,
    perfcast_models::medn::model::MednNet,
    FastNet,
) {
    let device = Device::flex();
    let net = MednConfig::new(INPUTS, 2).init(&device);
    let fast = FastNet::from_burn(&net).expect("a freshly initialised network exports");
    (device, net, fast)
}

#[divan::bench]
fn fast_one_row(b: Bencher) {
    let (_, _, fast) = nets();
    let x = rows(1);
    b.bench_local(|| fast.forward_one(divan::black_box(&x), 0));
}

#[divan::bench]
fn fast_batch_10k(b: Bencher) {
    let (_, _, fast) = nets();
    let x = rows(ROWS);
    let heads: Vec<usize> = (0..ROWS).map(|i| i % 2).collect();
    let mut out = vec![0.0f32; ROWS];
    b.counter(ItemsCount::new(ROWS))
        .bench_local(|| fast.forward_batch(divan::black_box(&x), INPUTS, &heads, &mut out));
}

#[divan::bench]
fn burn_one_row(b: Bencher) {
    let (device, net, _) = nets();
    let x = rows(1);
    b.bench_local(|| {
        let t = Tensor::<2>::from_data(TensorData::new(x.clone(), [1, INPUTS]), &device);
        net.forward(t).into_data()
    });
}

#[divan::bench]
fn burn_batch_10k(b: Bencher) {
    let (device, net, _) = nets();
    let x = rows(ROWS);
    b.counter(ItemsCount::new(ROWS)).bench_local(|| {
        let t = Tensor::<2>::from_data(TensorData::new(x.clone(), [ROWS, INPUTS]), &device);
        net.forward(t).into_data()
    });
}

/// Training-phase rows of linear layers (the form multi-task MEDN reads), both phases asked.
fn linear_rows(n: usize) -> (TrainSet, Vec<f64>, Vec<Phase>) {
    let schema = FeatureSchema::for_kind(ModuleKind::Linear);
    let device = perfcast_core::testing::cpu_device();
    let mut x = Matrix::with_cols(schema.len());
    let (mut y, mut groups, mut flat, mut phases) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        let spec = ModuleSpec::Linear(Linear {
            in_features: 16 + (i * 37) % 2000,
            out_features: 8 + (i * 53) % 3000,
            tokens: 1 + (i % 64),
            bias: true,
        });
        let flops = perfcast_core::features::derive(&spec, 1 << (i % 6)).flops;
        for phase in [Phase::Inference, Phase::Training] {
            let ctx = Context {
                batch: 1 << (i % 6),
                phase,
                threads: 1,
                utilisation: 0.0,
            };
            let row = features::row(&spec, &ctx, &device);
            x.push_row(&row);
            y.push(0.002 + flops / 5e7 * if phase == Phase::Training { 3.0 } else { 1.0 });
            groups.push(i as u64);
            if phase == Phase::Training {
                // Serving asks both phases of one training-phase row.
                flat.extend_from_slice(&row);
                flat.extend_from_slice(&row);
                phases.extend([Phase::Inference, Phase::Training]);
            }
        }
    }
    (
        TrainSet {
            schema,
            x,
            y,
            groups,
        },
        flat,
        phases,
    )
}

#[divan::bench]
fn model_batch_10k(b: Bencher) {
    let (train, _, _) = linear_rows(400);
    let model = MednParams {
        max_steps: 200,
        ..MednParams::default()
    }
    .fit(&train)
    .expect("MEDN fits generated rows");
    let (_, rows, phases) = linear_rows(ROWS / 2);
    let mut out = vec![0.0; ROWS];
    b.counter(ItemsCount::new(ROWS)).bench_local(|| {
        model
            .predict_tasks(divan::black_box(&rows), &phases, &mut out)
            .expect("valid rows")
    });
}
