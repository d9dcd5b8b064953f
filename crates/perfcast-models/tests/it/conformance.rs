//! Every family in the registry behaves alike behind the one interface. Fitted,
//! saved and loaded it predicts the same bits; a row of the wrong width is an error, not a
//! panic; a bad hyper-parameter is refused naming the parameter. A family added to the
//! registry without a case here fails [`every_registry_family_conforms`].

use perfcast_core::testing::gpu;
use perfcast_core::{Context, DeviceSpec, Linear, ModuleKind, ModuleSpec, Phase};
use perfcast_models::device_features::{CrossDeviceParams, concat};
use perfcast_models::features::{FeatureSchema, TrainSet, row};
use perfcast_models::registry::{self, CrossDevice, Family};
use perfcast_models::{Matrix, ModelParams, SavedModel};

/// Settings that keep the slow families quick, and for each family one `--set` it refuses
/// with the name of the parameter in the error.
const CASES: &[(&str, &str, &str)] = &[
    ("ridge", "ridge.lambda=-1", "lambda"),
    ("knn", "knn.k=0", "k must"),
    ("trees", "trees.learning_rate=0", "learning_rate"),
    ("ridge-trees", "ridge-trees.bags=0", "bags"),
    ("roofline", "roofline.iterations=0", "iterations"),
    ("medn", "medn.width=0", "width"),
    ("mlp", "mlp.width=0", "width"),
    ("util", "util.tile=0", "tile"),
];

/// Keeps the neural families to a few steps: conformance, not accuracy.
const QUICK: &[&str] = &[
    "medn.max_steps=30",
    "mlp.max_steps=30",
    "trees.n_trees=20",
    "ridge-trees.n_trees=20",
    "roofline.iterations=40",
];

/// Linear layers on `device`, both phases, latency a roofline at 60% / 70% plus 5 us.
fn device_rows(device: &DeviceSpec, n: usize, seed: usize) -> TrainSet {
    let schema = FeatureSchema::for_kind(ModuleKind::Linear);
    let mut x = Matrix::with_cols(schema.len());
    let (mut y, mut groups) = (Vec::new(), Vec::new());
    for i in 0..n {
        let j = i + seed * n;
        let spec = ModuleSpec::Linear(Linear {
            tokens: 1 + (j * 7) % 64,
            in_features: 64 + (j * 131) % 4000,
            out_features: 64 + (j * 257) % 4000,
            bias: true,
        });
        let ctx = Context {
            batch: 1 << (j % 6),
            phase: if j.is_multiple_of(3) {
                Phase::Training
            } else {
                Phase::Inference
            },
            threads: 1,
            utilisation: 0.0,
        };
        let d = perfcast_core::features::derive(&spec, ctx.batch);
        let factor = if ctx.phase == Phase::Training {
            3.0
        } else {
            1.0
        };
        let ms = factor
            * (d.flops / (0.6 * device.peak_gflops * 1e6))
                .max((d.bytes_read + d.bytes_written) / (0.7 * device.mem_bandwidth_gbs * 1e6))
            + 0.005;
        x.push_row(&row(&spec, &ctx, device));
        y.push(ms);
        groups.push((j / 2) as u64);
    }
    TrainSet {
        schema,
        x,
        y,
        groups,
    }
}

/// Rows of two GPUs, and their specs.
pub fn two_devices(n: usize) -> (TrainSet, Vec<DeviceSpec>) {
    let devices = vec![gpu("a", 10_000.0, 500.0), gpu("b", 6_000.0, 300.0)];
    let sets: Vec<TrainSet> = devices
        .iter()
        .enumerate()
        .map(|(i, d)| device_rows(d, n, i))
        .collect();
    (concat(&[&sets[0], &sets[1]]).unwrap(), devices)
}

/// The defaults of `name` with the quick settings, knowing the training devices' specs.
fn quick_params(name: &str, devices: &[DeviceSpec], extra: &[String]) -> ModelParams {
    let mut sets: Vec<String> = QUICK.iter().map(|s| (*s).to_string()).collect();
    sets.extend_from_slice(extra);
    let mut p = ModelParams::by_name(name)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .with_sets(&sets)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    if let Some(xdev) = p.downcast_mut::<CrossDeviceParams>() {
        xdev.devices = devices.to_vec();
    }
    p
}

/// The conformance checks of one family: fit -> save -> load gives the same bits, row by
/// row and batched; a row of the wrong width is an error on both; `bad` (a `--set`) is
/// refused naming `named`; an unknown `--set` field is refused naming it.
pub fn conforms(family: &Family, bad: &str, named: &str, data: &TrainSet, devices: &[DeviceSpec]) {
    let name = family.name;
    let params = quick_params(name, devices, &[]);
    assert_eq!(params.name(), name);
    let model = params
        .fit(data)
        .unwrap_or_else(|e| panic!("{name}: fit: {e}"));
    let saved = model.to_saved();
    assert!(
        family.saved.contains(&saved.tag()),
        "{name}: saved as `{}`, the registry says {:?}",
        saved.tag(),
        family.saved
    );
    let json = serde_json::to_string(&saved).unwrap();
    let back: SavedModel = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{name}: {e}"));
    back.check().unwrap();
    assert_eq!(
        serde_json::to_string(&back).unwrap(),
        json,
        "{name}: saved again"
    );
    let loaded = back.into_regressor();
    assert_eq!(loaded.name(), model.name());
    assert_eq!(loaded.size_bytes(), model.size_bytes(), "{name}");
    let width = data.schema.len();
    let all: Vec<f64> = data.x.iter_rows().flatten().copied().collect();
    let (mut a, mut b) = (vec![0.0; data.len()], vec![0.0; data.len()]);
    model.predict_rows(&all, &mut a).unwrap();
    loaded.predict_rows(&all, &mut b).unwrap();
    for (i, r) in data.x.iter_rows().enumerate() {
        let want = model.predict_row(r).unwrap();
        assert!(want.is_finite() && want > 0.0, "{name}: row {i}: {want}");
        assert_eq!(
            loaded.predict_row(r).unwrap().to_bits(),
            want.to_bits(),
            "{name}: row {i}"
        );
        assert_eq!(a[i].to_bits(), b[i].to_bits(), "{name}: batched row {i}");
    }
    for m in [&model, &loaded] {
        let short = m.predict_row(&data.x.row(0)[..width - 1]);
        assert!(
            matches!(short, Err(perfcast_predict::Error::FeatureWidth { .. })),
            "{name}: {short:?}"
        );
        let wide = Matrix::with_cols(width + 1);
        assert!(
            m.predict(&wide).is_err(),
            "{name}: a matrix one column wider"
        );
    }
    let err = ModelParams::by_name(name)
        .unwrap()
        .with_sets(&[bad.to_string()])
        .expect_err(bad)
        .to_string();
    assert!(err.contains(named), "{name}: `{bad}` gave: {err}");
    let err = ModelParams::by_name(name)
        .unwrap()
        .with_sets(&[format!("{name}.no_such_field=1")])
        .map(|p| p.fit(data).map(|_| ()))
        .err()
        .map(|e| e.to_string());
    if let Some(err) = err {
        assert!(err.contains("no_such_field"), "{name}: {err}");
    }
}

#[test]
fn every_registry_family_conforms() {
    let (data, devices) = two_devices(120);
    for family in registry::FAMILIES {
        let (_, bad, named) = CASES
            .iter()
            .find(|c| c.0 == family.name)
            .unwrap_or_else(|| panic!("no conformance case for `{}`", family.name));
        conforms(family, bad, named, &data, &devices);
    }
}

#[test]
fn every_wrapped_family_conforms_across_devices() {
    let (data, devices) = two_devices(120);
    for family in registry::FAMILIES {
        if family.cross_device != CrossDevice::Wrap || ["medn", "mlp"].contains(&family.name) {
            continue;
        }
        let name = format!("{}-xdev", family.name);
        let params = quick_params(&name, &devices, &[]);
        assert_eq!(params.name(), name);
        let model = params.fit(&data).unwrap();
        assert_eq!(model.name(), name);
        let json = serde_json::to_string(&model.to_saved()).unwrap();
        let loaded = serde_json::from_str::<SavedModel>(&json)
            .unwrap()
            .into_regressor();
        assert_eq!(loaded.name(), name);
        for r in data.x.iter_rows() {
            assert_eq!(
                loaded.predict_row(r).unwrap().to_bits(),
                model.predict_row(r).unwrap().to_bits(),
                "{name}"
            );
        }
    }
}

#[test]
fn unknown_names_list_the_registry() {
    let err = ModelParams::by_name("lasso").unwrap_err().to_string();
    for family in registry::FAMILIES {
        assert!(err.contains(family.name), "{err}");
    }
    assert!(err.contains("<family>-xdev"), "{err}");
    assert_eq!(ModelParams::by_name("gbdt").unwrap().name(), "trees");
    // The families that read the device columns themselves are never wrapped.
    assert_eq!(
        ModelParams::by_name("roofline-xdev").unwrap().name(),
        "roofline"
    );
    let saved = serde_json::from_str::<SavedModel>(r#"{"model":"lasso"}"#)
        .unwrap_err()
        .to_string();
    assert!(
        saved.contains("unknown model `lasso`") && saved.contains("ridge-trees"),
        "{saved}"
    );
}

/// The two halves of a family agree: every saved-form tag a family's row names is one the
/// light predictor reads (`perfcast_predict::registry::FAMILIES`), and every tag it reads
/// belongs to a family or is one of the forms composed from fitted models
/// (`registry::COMPOSED`).
#[test]
fn every_saved_tag_is_read_by_the_predictor() {
    let readable = perfcast_predict::registry::tags();
    let mut named = Vec::new();
    for family in registry::FAMILIES {
        assert!(
            !family.saved.is_empty(),
            "`{}` names no saved form",
            family.name
        );
        for tag in family.saved {
            assert!(
                readable.contains(tag),
                "`{}` saves as unreadable `{tag}`",
                family.name
            );
            named.push(*tag);
        }
    }
    for tag in registry::COMPOSED {
        assert!(readable.contains(tag), "composed `{tag}` is unreadable");
        assert!(!named.contains(tag), "composed `{tag}` is also a family's");
    }
    for row in perfcast_predict::registry::FAMILIES {
        for tag in row.tags {
            assert!(
                named.contains(tag) || registry::COMPOSED.contains(tag),
                "no family saves as `{tag}`"
            );
        }
    }
}

#[test]
fn params_round_trip_through_their_serde_form() {
    for family in registry::FAMILIES {
        let p = (family.defaults)();
        let json = serde_json::to_string(&p).unwrap();
        let back: ModelParams = serde_json::from_str(&json).unwrap();
        assert_eq!(back, p, "{json}");
        assert_eq!(back.name(), family.name);
    }
    let xdev = ModelParams::by_name("knn-xdev").unwrap();
    let back: ModelParams = serde_json::from_str(&serde_json::to_string(&xdev).unwrap()).unwrap();
    assert_eq!(back, xdev);
}
