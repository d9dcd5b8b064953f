//! Speed of the in-process [`Predictor`]: one module, a VGG-16 query (prepared and not), and
//! batched throughput over 10,000 module rows.
//!
//! `cargo bench -p perfcast-select --bench predictor`. The bundle is `checkpoints/local` when
//! it exists (what `perfcast quickstart` writes: the figures then describe the shipped model
//! mix, MEDN included), otherwise a small one trained here from generated rows with the same
//! model families per kind (ridge for conv2d, a shared MEDN for linear and pooling, trees and
//! roofline for the element-wise kinds), so the bench never needs a download. The first line
//! of output says which.

use std::sync::OnceLock;

use divan::Bencher;
use divan::counter::ItemsCount;
use perfcast_core::{Context, ModuleKind, ModuleSpec, Network, Phase, zoo};
use perfcast_select::{Bundle, Predictor, PreparedNetwork};

fn main() {
    let p = predictor();
    eprintln!(
        "bundle: `{}` ({} kinds)",
        p.bundle().dir.display(),
        p.bundle().kinds().count()
    );
    divan::main();
}

struct Fixture {
    predictor: Predictor,
    vgg: Network,
    prepared: PreparedNetwork,
    /// 10,000 queries: every VGG-16 layer at batch sizes 1..32 (the `bundle bench` mix).
    vgg_rows: Vec<(ModuleSpec, Context)>,
    /// 10,000 distinct queries of every kind the bundle holds.
    distinct_rows: Vec<(ModuleSpec, Context)>,
    _tmp: Option<tempfile::TempDir>,
}

fn one() -> Context {
    Context {
        batch: 1,
        phase: Phase::Inference,
        threads: 1,
        utilisation: 0.0,
    }
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let local =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../checkpoints/local");
        let (bundle, tmp) = match Bundle::load(&local) {
            Ok(b) => (b, None),
            Err(_) => {
                let tmp = tempfile::tempdir().expect("temp dir");
                let dir = tmp.path().join("bench-bundle");
                small::write(&dir);
                (
                    Bundle::load(&dir).expect("the generated bundle loads"),
                    Some(tmp),
                )
            }
        };
        let predictor = Predictor::new(bundle);
        let vgg = zoo::build("vgg16", None).expect("vgg16");
        let prepared = predictor.prepare(&vgg).expect("prepare");
        let modules = vgg.modules();
        let vgg_rows = (0..10_000)
            .map(|i| {
                let (_, spec) = modules[i % modules.len()];
                (
                    spec.clone(),
                    Context {
                        batch: 1 << (i % 6),
                        ..one()
                    },
                )
            })
            .collect();
        let kinds: Vec<ModuleKind> = predictor.bundle().kinds().collect();
        let distinct_rows = (0..10_000)
            .map(|i| {
                let kind = kinds[i % kinds.len()];
                (
                    small::spec(kind, i / kinds.len()),
                    Context {
                        batch: 1 + i % 32,
                        phase: if i % 2 == 0 {
                            Phase::Inference
                        } else {
                            Phase::Training
                        },
                        ..one()
                    },
                )
            })
            .collect();
        Fixture {
            predictor,
            vgg,
            prepared,
            vgg_rows,
            distinct_rows,
            _tmp: tmp,
        }
    })
}

fn predictor() -> &'static Predictor {
    &fixture().predictor
}

/// conv2d 64->64, 3x3, 56x56, batch 1: the `bundle bench` single query.
#[divan::bench]
fn one_module(bencher: Bencher) {
    let spec: ModuleSpec = serde_json::from_str(
        r#"{"kind": "conv2d", "in_channels": 64, "out_channels": 64, "input_hw": 56, "kernel": 3, "padding": 1}"#,
    )
    .expect("spec");
    let p = predictor();
    let c = one();
    bencher.bench(|| p.predict_module(divan::black_box(&spec), &c));
}

/// One module of each kind in the bundle, in turn (inference, batch 8).
#[divan::bench]
fn one_module_each_kind(bencher: Bencher) {
    let p = predictor();
    let specs: Vec<ModuleSpec> = p.bundle().kinds().map(|k| small::spec(k, 3)).collect();
    let c = Context { batch: 8, ..one() };
    let mut i = 0;
    bencher.bench_local(|| {
        i = (i + 1) % specs.len();
        p.predict_module(divan::black_box(&specs[i]), &c)
    });
}

/// VGG-16 at batch 1, prepared once (shapes checked, distinct modules found).
#[divan::bench]
fn vgg16_prepared(bencher: Bencher) {
    let f = fixture();
    let c = one();
    bencher.bench(|| {
        f.predictor
            .predict_prepared(divan::black_box(&f.prepared), &c)
    });
}

/// VGG-16 at batch 1 from the network itself (shape checks and de-duplication each call).
#[divan::bench]
fn vgg16_unprepared(bencher: Bencher) {
    let f = fixture();
    let c = one();
    bencher.bench(|| f.predictor.predict_network(divan::black_box(&f.vgg), &c));
}

/// 10,000 module rows (VGG-16 layers at batch 1..32), on 1 and 2 threads.
#[divan::bench(args = [1, 2])]
fn batch_10k_vgg_rows(bencher: Bencher, threads: usize) {
    let f = fixture();
    bencher
        .counter(ItemsCount::new(f.vgg_rows.len()))
        .bench(|| {
            f.predictor
                .predict_modules_threads(divan::black_box(&f.vgg_rows), threads)
        });
}

/// 10,000 distinct module rows of every kind in the bundle, on 1 and 2 threads.
#[divan::bench(args = [1, 2])]
fn batch_10k_distinct_rows(bencher: Bencher, threads: usize) {
    let f = fixture();
    bencher
        .counter(ItemsCount::new(f.distinct_rows.len()))
        .bench(|| {
            f.predictor
                .predict_modules_threads(divan::black_box(&f.distinct_rows), threads)
        });
}

/// Where a batch's time goes: the feature rows of the 10,000 VGG-16 queries (one buffer, as
/// the predictor builds them).
#[divan::bench]
fn parts_feature_rows(bencher: Bencher) {
    let f = fixture();
    let device = &f.predictor.bundle().manifest.device;
    let mut rows = Vec::new();
    bencher
        .counter(ItemsCount::new(f.vgg_rows.len()))
        .bench_local(|| {
            rows.clear();
            for (spec, context) in &f.vgg_rows {
                perfcast_models::features::row_into(spec, context, device, &mut rows);
            }
            divan::black_box(rows.len())
        });
}

/// Where a batch's time goes: checking the 10,000 VGG-16 queries (what the predictor does
/// before predicting any).
#[divan::bench]
fn parts_validate(bencher: Bencher) {
    let f = fixture();
    bencher
        .counter(ItemsCount::new(f.vgg_rows.len()))
        .bench_local(|| {
            f.vgg_rows
                .iter()
                .all(|(s, c)| s.validate().is_ok() && c.validate().is_ok())
        });
}

/// Where a batch's time goes: each kind's model on that kind's share of the 10,000 VGG-16
/// queries, rows built beforehand in the form the predictor passes (multi-task models read
/// the training-phase row).
#[divan::bench(args = ["conv2d", "relu", "maxpool2d", "linear"])]
fn parts_model(bencher: Bencher, kind: &str) {
    let f = fixture();
    let device = &f.predictor.bundle().manifest.device;
    let Some(kind) = ModuleKind::ALL.into_iter().find(|k| k.name() == kind) else {
        return;
    };
    let Some(model) = f.predictor.bundle().model(kind) else {
        return;
    };
    let (mut rows, mut phases) = (Vec::new(), Vec::new());
    for (spec, context) in f.vgg_rows.iter().filter(|(s, _)| s.kind() == kind) {
        let c = if model.multi_task() {
            Context {
                phase: Phase::Training,
                ..context.clone()
            }
        } else {
            context.clone()
        };
        perfcast_models::features::row_into(spec, &c, device, &mut rows);
        phases.push(context.phase);
    }
    let mut out = vec![0.0; phases.len()];
    bencher
        .counter(ItemsCount::new(phases.len()))
        .bench_local(|| {
            if model.multi_task() {
                model.predict_tasks(&rows, &phases, &mut out)
            } else {
                model.predict_rows(&rows, &mut out)
            }
        });
}

/// Where a batch's time goes: a MEDN network of the default shape (73 inputs, 64 wide, 2
/// blocks, 32-wide latent and heads, skip) on 4,096 standardised rows, without the encoding.
#[divan::bench]
fn parts_medn_forward(bencher: Bencher) {
    use perfcast_models::medn::infer::{Dense, FastNet, Norm};
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut rnd = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    let mut dense = |i: usize, o: usize| Dense {
        d_in: i,
        d_out: o,
        w: (0..i * o).map(|_| rnd() * 0.4).collect(),
        b: (0..o).map(|_| rnd() * 0.1).collect(),
    };
    let norm = |d: usize| Norm {
        gamma: vec![1.0; d],
        beta: vec![0.0; d],
    };
    let net = FastNet {
        input: dense(73, 64),
        blocks: vec![(norm(64), dense(64, 64)), (norm(64), dense(64, 64))],
        out_norm: norm(64),
        latent: dense(64, 32),
        heads: vec![(dense(32, 32), dense(32, 1)), (dense(32, 32), dense(32, 1))],
        skip: Some(dense(73, 2)),
    };
    let rows = 4096;
    let xs: Vec<f32> = (0..rows * 73)
        .map(|i| ((i * 7919) % 1001) as f32 / 400.0 - 1.2)
        .collect();
    let heads = vec![0; rows];
    let mut out = vec![0.0f32; rows];
    bencher
        .counter(ItemsCount::new(rows))
        .bench_local(|| net.forward_batch(&xs, 73, &heads, &mut out));
}

/// A small bundle trained from generated rows, for machines without `checkpoints/local`.
mod small {
    use perfcast_core::{
        BatchNorm2d, Context, Conv2d, Elementwise, LayerNorm, Linear, Matmul, ModuleKind,
        ModuleSpec, Phase, Pool2d, features,
    };
    use perfcast_models::features::row;
    use perfcast_models::medn::MednParams;
    use perfcast_models::ridge::RidgeParams;
    use perfcast_models::roofline::RooflineParams;
    use perfcast_models::trees::TreeParams;
    use perfcast_models::{FeatureSchema, Fit, Matrix, Regressor, SavedModel, TrainSet};
    use perfcast_select::bundle::{FORMAT, write_bundle};
    use perfcast_select::{Budget, Manifest};

    /// The `i`-th module of a kind, sizes spread over typical CNN and transformer layers.
    pub fn spec(kind: ModuleKind, i: usize) -> ModuleSpec {
        let c = 8 << (i % 6);
        let hw = [7, 14, 28, 56, 112][i % 5];
        let e = Elementwise { shape: [c, hw, hw] };
        let pool = Pool2d {
            channels: c,
            input_hw: [hw, hw],
            kernel: [2 + i % 2, 2 + i % 2],
            stride: Some([2, 2]),
            padding: [i % 2, i % 2],
        };
        match kind {
            ModuleKind::Conv2d => ModuleSpec::Conv2d(Conv2d {
                in_channels: c,
                out_channels: 8 << ((i / 3) % 6),
                input_hw: [hw, hw],
                kernel: [[1, 3, 5][i % 3], [1, 3, 5][i % 3]],
                stride: [1 + (i / 7) % 2, 1 + (i / 7) % 2],
                padding: [[0, 1, 2][i % 3], [0, 1, 2][i % 3]],
                dilation: [1, 1],
                groups: 1,
                bias: i.is_multiple_of(2),
            }),
            ModuleKind::Linear => ModuleSpec::Linear(Linear {
                tokens: 1 << (i % 8),
                in_features: 64 + (i * 97) % 4000,
                out_features: 16 + (i * 61) % 4000,
                bias: true,
            }),
            ModuleKind::Matmul => ModuleSpec::Matmul(Matmul {
                heads: 1 + i % 12,
                m: 16 + (i * 13) % 256,
                k: 16 + (i * 7) % 128,
                n: 16 + (i * 17) % 256,
                trans_a: false,
                trans_b: false,
            }),
            ModuleKind::MaxPool2d => ModuleSpec::MaxPool2d(pool),
            ModuleKind::AvgPool2d => ModuleSpec::AvgPool2d(pool),
            ModuleKind::BatchNorm2d => ModuleSpec::BatchNorm2d(BatchNorm2d {
                channels: c,
                input_hw: [hw, hw],
            }),
            ModuleKind::LayerNorm => ModuleSpec::LayerNorm(LayerNorm {
                tokens: 1 << (i % 9),
                features: 64 + (i * 97) % 2000,
            }),
            ModuleKind::RmsNorm => ModuleSpec::RmsNorm(LayerNorm {
                tokens: 1 << (i % 9),
                features: 64 + (i * 97) % 2000,
            }),
            ModuleKind::Embedding => ModuleSpec::Embedding(perfcast_core::Embedding {
                tokens: 1 << (i % 9),
                vocab: 1000 + (i * 97) % 50_000,
                features: 64 + (i * 97) % 2000,
            }),
            elementwise => ModuleSpec::elementwise(elementwise, e).expect("element-wise kind"),
        }
    }

    fn set(kind: ModuleKind) -> TrainSet {
        let device = perfcast_core::testing::cpu_device();
        let schema = FeatureSchema::for_kind(kind);
        let mut x = Matrix::with_cols(schema.len());
        let (mut y, mut groups) = (Vec::new(), Vec::new());
        for i in 0..120 {
            let s = spec(kind, i);
            for phase in [Phase::Inference, Phase::Training] {
                let c = Context {
                    batch: 1 << (i % 6),
                    phase,
                    threads: 1,
                    utilisation: 0.0,
                };
                let d = features::derive(&s, c.batch);
                x.push_row(&row(&s, &c, &device));
                let factor = if phase == Phase::Training { 3.0 } else { 1.0 };
                y.push((0.002 + d.flops / 5e10 + (d.bytes_read + d.bytes_written) / 1e10) * factor);
                groups.push(i as u64);
            }
        }
        TrainSet {
            schema,
            x,
            y,
            groups,
        }
    }

    pub fn write(dir: &std::path::Path) {
        let mut models: Vec<(ModuleKind, SavedModel, TrainSet)> = Vec::new();
        let conv = set(ModuleKind::Conv2d);
        let m = RidgeParams::default().fit(&conv).expect("ridge").to_saved();
        models.push((ModuleKind::Conv2d, m, conv));
        for kind in [ModuleKind::Relu, ModuleKind::Add] {
            let s = set(kind);
            let m = RooflineParams::default()
                .fit(&s)
                .expect("roofline")
                .to_saved();
            models.push((kind, m, s));
        }
        for kind in [ModuleKind::Matmul, ModuleKind::Tanh] {
            let s = set(kind);
            let m = TreeParams::default().fit(&s).expect("trees").to_saved();
            models.push((kind, m, s));
        }
        let shared_kinds = [
            ModuleKind::Linear,
            ModuleKind::MaxPool2d,
            ModuleKind::BatchNorm2d,
        ];
        let sets: Vec<TrainSet> = shared_kinds.iter().map(|k| set(*k)).collect();
        let medn = MednParams {
            max_steps: 600,
            ..MednParams::default()
        }
        .fit_shared(&sets)
        .expect("medn");
        for ((kind, s), m) in shared_kinds.into_iter().zip(sets).zip(medn) {
            models.push((kind, m.to_saved(), s));
        }
        let mut kinds = serde_json::Map::new();
        let mut files = Vec::new();
        for (kind, saved, data) in models {
            let model = saved.clone().into_regressor();
            let file = format!("{kind}/{}.json", model.name());
            let entry =
                perfcast_select::testing::kind_entry(model.name(), &file, model.as_ref(), &data)
                    .expect("entry");
            kinds.insert(
                kind.name().into(),
                serde_json::to_value(entry).expect("entry"),
            );
            files.push((file, saved));
        }
        let manifest: Manifest = serde_json::from_value(serde_json::json!({
            "format": FORMAT,
            "name": "bench",
            "perfcast_version": perfcast_core::VERSION,
            "device": perfcast_core::testing::cpu_device(),
            "data": "generated",
            "budget": Budget::default(),
            "kinds": kinds,
        }))
        .expect("manifest");
        write_bundle(dir, &manifest, &files).expect("write bundle");
    }
}
