use super::*;
use crate::features::row;
use crate::regressor::{Regressor, SavedModel};
use perfcast_core::{Context, ModuleKind, ModuleSpec};

fn device_spec() -> perfcast_core::DeviceSpec {
    perfcast_core::testing::cpu_device()
}

/// Linear layers with a latency that is a smooth function of their work, in both phases
/// (training costs about three forwards plus a fixed overhead).
fn linear_set(n: usize) -> TrainSet {
    let schema = FeatureSchema::for_kind(ModuleKind::Linear);
    let mut x = Matrix::with_cols(schema.len());
    let mut y = Vec::new();
    let mut groups = Vec::new();
    for i in 0..n {
        let spec = ModuleSpec::Linear(perfcast_core::Linear {
            in_features: 16 + (i * 37) % 500,
            out_features: 8 + (i * 53) % 700,
            tokens: 1 + (i % 7),
            bias: true,
        });
        for phase in TASKS {
            let ctx = Context {
                batch: 1 << (i % 5),
                phase,
                threads: 1,
                utilisation: 0.0,
            };
            let f = perfcast_core::features::derive(&spec, ctx.batch);
            let ms = match phase {
                Phase::Inference => 0.002 + f.flops / 5e7,
                Phase::Training => 0.01 + 3.0 * f.flops / 5e7,
            };
            x.push_row(&row(&spec, &ctx, &device_spec()));
            y.push(ms);
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

fn quick() -> MednParams {
    MednParams {
        width: 32,
        latent: 16,
        head_width: 16,
        max_steps: 1500,
        ..MednParams::default()
    }
}

#[test]
fn samples_pair_the_phases_of_one_module() {
    let data = linear_set(30);
    let GroupedSamples {
        inputs,
        targets,
        groups,
    } = group_samples(&data).unwrap();
    assert_eq!(inputs.rows(), 30);
    assert!(targets.iter().all(|t| t[0].is_some() && t[1].is_some()));
    // Each sample keeps its rows' configuration group.
    assert_eq!(
        groups,
        (0..30).map(|i| data.groups[2 * i]).collect::<Vec<_>>()
    );
    // Forward rows only: one head has no data and a training-phase query is refused.
    let fwd: Vec<usize> = (0..data.len()).step_by(2).collect();
    let model = quick().fit(&data.select(&fwd)).unwrap();
    let train_row = data.x.row(1);
    let err = model.predict_row(train_row).unwrap_err().to_string();
    assert!(err.contains("without training rows"), "{err}");
    assert!(model.predict_row(data.x.row(0)).unwrap() > 0.0);
}

#[test]
fn batch_predict_equals_row_by_row() {
    // Both phases interleaved: forward rows are rewritten, training rows go straight in.
    let data = linear_set(50);
    for multi_task in [true, false] {
        let model = MednParams {
            multi_task,
            max_steps: 200,
            ..quick()
        }
        .fit(&data)
        .unwrap();
        let batch = model.predict(&data.x).unwrap();
        for (i, p) in batch.iter().enumerate() {
            assert_eq!(
                p.to_bits(),
                model.predict_row(data.x.row(i)).unwrap().to_bits()
            );
        }
    }
}

#[test]
fn learns_both_targets() {
    let data = linear_set(120);
    let model = quick().fit(&data).unwrap();
    let pred = model.predict(&data.x).unwrap();
    let m = perfcast_core::Metrics::compute(&pred, &data.y).unwrap();
    assert!(m.mape < 15.0, "training-set MAPE {:.2}%", m.mape);
    assert!(model.history[0].epochs >= 1);
}

#[test]
fn fit_is_deterministic_under_a_seed() {
    let data = linear_set(40);
    let params = MednParams {
        max_steps: 200,
        ..quick()
    };
    let a = params.fit(&data).unwrap();
    let b = params.fit(&data).unwrap();
    assert_eq!(a.predict(&data.x).unwrap(), b.predict(&data.x).unwrap());
    let c = MednParams { seed: 7, ..params }.fit(&data).unwrap();
    assert_ne!(a.predict(&data.x).unwrap(), c.predict(&data.x).unwrap());
}

#[test]
fn fast_path_matches_burn() {
    let data = linear_set(40);
    let model = MednParams {
        max_steps: 300,
        ..MednParams::default()
    }
    .fit(&data)
    .unwrap();
    let fast = model.predict(&data.x).unwrap();
    let reference = model.predict_burn(&data.x, &Device::flex()).unwrap();
    for (f, r) in fast.iter().zip(&reference) {
        assert!(((f - r) / r).abs() < 1e-5, "fast {f} vs burn {r}");
    }
}

#[test]
fn checkpoint_round_trip_gives_identical_predictions() {
    let data = linear_set(40);
    for params in [quick(), MednParams::mlp()] {
        let model = MednParams {
            max_steps: 100,
            ..params
        }
        .fit(&data)
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        model.save_checkpoint(dir.path()).unwrap();
        let loaded = FittedMedn::load_checkpoint(dir.path(), Some(&data.schema)).unwrap();
        assert_eq!(loaded, model);
        assert_eq!(
            loaded.predict(&data.x).unwrap(),
            model.predict(&data.x).unwrap()
        );
        // The JSON form round-trips too.
        let json = serde_json::to_string(&model.to_saved()).unwrap();
        let back: SavedModel = serde_json::from_str(&json).unwrap();
        assert_eq!(
            back.into_regressor().predict(&data.x).unwrap(),
            model.predict(&data.x).unwrap()
        );
    }
}

#[test]
fn checkpoint_of_another_schema_or_corrupt_is_refused() {
    let data = linear_set(20);
    let model = MednParams {
        max_steps: 20,
        ..quick()
    }
    .fit(&data)
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    model.save_checkpoint(dir.path()).unwrap();
    let other = FeatureSchema::for_kind(ModuleKind::Conv2d);
    let err = FittedMedn::load_checkpoint(dir.path(), Some(&other))
        .unwrap_err()
        .to_string();
    assert!(err.contains("different feature schema"), "{err}");
    let record = dir.path().join("net-0.bpk");
    let bytes = std::fs::read(&record).unwrap();
    std::fs::write(&record, &bytes[..bytes.len() / 2]).unwrap();
    let err = FittedMedn::load_checkpoint(dir.path(), None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("net-0.bpk"), "{err}");
}

#[test]
fn bad_parameters_are_named() {
    let err = MednParams {
        width: 0,
        ..MednParams::default()
    }
    .validate()
    .unwrap_err()
    .to_string();
    assert!(err.contains("width must be in 1..=512, got 0"), "{err}");
    let err = MednParams {
        backend: "tpu".into(),
        ..MednParams::default()
    }
    .validate()
    .unwrap_err()
    .to_string();
    assert!(err.contains("`tpu`"), "{err}");
}

#[test]
fn one_network_serves_several_kinds() {
    let linear = linear_set(40);
    // ReLU rows: a kind with other configuration columns.
    let schema = FeatureSchema::for_kind(ModuleKind::Relu);
    let mut x = Matrix::with_cols(schema.len());
    let (mut y, mut groups) = (Vec::new(), Vec::new());
    for i in 0..40 {
        let spec = ModuleSpec::Relu(perfcast_core::Elementwise {
            shape: [1 + i % 8, 4 + i, 16],
        });
        for phase in TASKS {
            let ctx = Context {
                batch: 1 + i % 4,
                phase,
                threads: 1,
                utilisation: 0.0,
            };
            let elems = perfcast_core::features::derive(&spec, ctx.batch).output_elems;
            x.push_row(&row(&spec, &ctx, &device_spec()));
            y.push(0.001 + elems / 1e9 * if phase == Phase::Training { 2.0 } else { 1.0 });
            groups.push(i as u64);
        }
    }
    let relu = TrainSet {
        schema,
        x,
        y,
        groups,
    };
    let models = MednParams {
        max_steps: 300,
        ..quick()
    }
    .fit_shared(&[linear.clone(), relu.clone()])
    .unwrap();
    assert_eq!(models.len(), 2);
    assert_eq!(models[0].nets, models[1].nets, "one set of weights");
    for (model, set) in models.iter().zip([&linear, &relu]) {
        let p = model.predict(&set.x).unwrap();
        assert!(p.iter().all(|v| v.is_finite() && *v > 0.0));
        // Checkpoints keep the shared-input map.
        let dir = tempfile::tempdir().unwrap();
        model.save_checkpoint(dir.path()).unwrap();
        let loaded = FittedMedn::load_checkpoint(dir.path(), Some(&set.schema)).unwrap();
        assert_eq!(loaded.predict(&set.x).unwrap(), p);
    }
}

#[test]
fn tile_inputs_widen_the_network_and_older_checkpoints_load_without_them() {
    let data = linear_set(40);
    let with = MednParams {
        max_steps: 50,
        ..quick()
    }
    .fit(&data)
    .unwrap();
    assert_eq!(with.configs[0].d_input, data.schema.len() + TILE_INPUTS);
    // Training saw the tile columns as the prediction path encodes them.
    let fast = with.predict(&data.x).unwrap();
    let reference = with.predict_burn(&data.x, &Device::flex()).unwrap();
    for (f, r) in fast.iter().zip(&reference) {
        assert!(((f - r) / r).abs() < 1e-5, "fast {f} vs burn {r}");
    }
    let grouped = group_samples(&data).unwrap();
    let inputs = grouped.inputs;
    let samples = to_samples(
        &widen(&with.tiles.unwrap(), &inputs),
        data.schema.len(),
        &grouped.targets,
        &with.scaler,
        &with.targets,
        &[0, 1],
    );
    let mut z = [0.0f32; MAX_WIDTH];
    let width = with.input_width();
    for (row, x) in inputs.iter_rows().zip(samples.x.chunks_exact(width)) {
        with.encode(row, &mut z);
        assert_eq!(&z[..width], x);
    }
    let without = MednParams {
        max_steps: 50,
        gemm_tiles: false,
        ..quick()
    }
    .fit(&data)
    .unwrap();
    assert_eq!(without.configs[0].d_input, data.schema.len());
    // A checkpoint written before tile inputs existed has no `tiles` key.
    let dir = tempfile::tempdir().unwrap();
    without.save_checkpoint(dir.path()).unwrap();
    let meta = dir.path().join("medn.json");
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&meta).unwrap()).unwrap();
    assert!(json.as_object_mut().unwrap().remove("tiles").is_some());
    std::fs::write(&meta, serde_json::to_vec(&json).unwrap()).unwrap();
    let loaded = FittedMedn::load_checkpoint(dir.path(), Some(&data.schema)).unwrap();
    assert_eq!(
        loaded.predict(&data.x).unwrap(),
        without.predict(&data.x).unwrap()
    );
}

/// Early stopping validated on random samples of layers it also trained on (other
/// batches of one configuration); it holds out whole configurations now, as trees do.
#[test]
fn early_stopping_holds_out_whole_configurations() {
    // 40 layers at 3 batches each: 120 samples in 40 groups.
    let groups: Vec<u64> = (0..120).map(|i| (i / 3) as u64 * 0x9e37_79b9).collect();
    let params = MednParams::default();
    for seed in 0..5 {
        let (train, val) = params.early_stopping_split(&groups, 120, seed);
        // round(0.1 * 40) = 4 groups of 3 samples.
        assert_eq!((train.len(), val.len()), (108, 12));
        for &v in &val {
            assert!(train.iter().all(|&t| groups[t] != groups[v]));
        }
    }
    assert_eq!(
        params.early_stopping_split(&groups, 120, 3),
        params.early_stopping_split(&groups, 120, 3)
    );
    // Below 20 samples nothing is held out, as before; nor with the share at 0.
    let (train, val) = params.early_stopping_split(&groups[..18], 18, 0);
    assert_eq!((train.len(), val.len()), (18, 0));
    let off = MednParams {
        val_share: 0.0,
        ..MednParams::default()
    };
    assert_eq!(
        off.early_stopping_split(&groups, 120, 0).1,
        Vec::<usize>::new()
    );
}
