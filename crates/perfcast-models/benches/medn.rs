//! MEDN's two forward passes side by side: the plain `f32` fast path that serving uses, and
//! burn's own forward (the reference the fast path is tested against), for one row and for a
//! batch of 10,000 rows, on the default architecture (width 64, 2 residual blocks, latent 32,
//! heads 32, skip path, 2 tasks) with 64 inputs, about what a GEMM kind's row holds.
//!
//! `cargo bench -p perfcast-models --bench medn`. Weights are burn's random initialisation:
//! the cost of a forward pass does not depend on their values.

use burn::tensor::{Device, Tensor, TensorData};
use divan::Bencher;
use divan::counter::ItemsCount;
use perfcast_models::medn::{FastNet, MednConfig};

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
