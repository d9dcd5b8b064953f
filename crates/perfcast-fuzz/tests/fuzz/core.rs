//! perfcast-core and perfcast-models: module specs, networks, the zoo, device specs and the
//! feature rows every prediction reads.

use perfcast_core::{
    Context, DeviceSpec, MAX_BATCH, ModuleKind, ModuleSpec, Network, Phase, features, zoo,
};
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::TestCaseError;

use crate::harness::{Cost, check, finite_non_negative, fuzz};
use crate::mutate::{byte_ops, json_ops, mutate_json_text};

/// Checks what every accepted spec promises: a shape, finite non-negative derived numbers at
/// the smallest and the largest batch, and a JSON and flat-configuration round trip.
pub fn check_spec(spec: &ModuleSpec) -> Result<(), TestCaseError> {
    let shape = spec
        .output_shape()
        .map_err(|e| TestCaseError::fail(format!("validated spec has no shape: {e}")))?;
    check(shape.iter().all(|&d| d > 0), || {
        format!("output shape {shape:?}")
    })?;
    for batch in [1, MAX_BATCH] {
        let d = features::derive(spec, batch);
        for (name, v) in [
            ("flops", d.flops),
            ("train_flops", d.train_flops),
            ("bytes_read", d.bytes_read),
            ("bytes_written", d.bytes_written),
            ("params", d.params),
            ("output_elems", d.output_elems),
            ("input_elems", d.input_elems),
            ("arithmetic_intensity", d.arithmetic_intensity),
        ] {
            finite_non_negative(&format!("{name} at batch {batch}"), v)?;
        }
    }
    let json = serde_json::to_string(spec).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let back = ModuleSpec::from_json(&json)
        .map_err(|e| TestCaseError::fail(format!("{json} does not read back: {e}")))?;
    check(&back == spec, || format!("{json} reads back as {back:?}"))?;
    let config = spec.config();
    let rebuilt = ModuleSpec::from_config(spec.kind(), &config)
        .and_then(|s| s.with_layout(&spec.layout()))
        .map_err(|e| TestCaseError::fail(format!("config {config:?} does not rebuild: {e}")))?;
    check(
        rebuilt.config() == config && rebuilt.layout() == spec.layout(),
        || format!("config {config:?} rebuilds as {rebuilt:?}"),
    )
}

fn spec_texts() -> Vec<String> {
    perfcast_core::testing::one_of_each_kind()
        .iter()
        .map(|s| serde_json::to_string(s).expect("specs serialise"))
        .collect()
}

/// `ModuleSpec::from_json` on valid specs of every kind after structural and byte changes.
#[test]
fn module_spec_json() {
    let texts = spec_texts();
    let strategy = (0..texts.len(), json_ops(4), byte_ops(2));
    fuzz(
        "module_spec_json",
        Cost::Cheap,
        strategy,
        |(i, json, bytes)| {
            let text = mutate_json_text(&texts[i], &json, &bytes);
            match ModuleSpec::from_json(&text) {
                Ok(spec) => check_spec(&spec).map(|()| true),
                Err(_) => Ok(false),
            }
        },
    );
}

/// Field values: extreme integers (0, 1, 2^24 +- 1, 2^32, 2^63, u64::MAX, 2^64, negative,
/// fractional, strings) and ordinary sizes, spread log-uniformly.
fn field_token(extreme: u32) -> impl Strategy<Value = String> {
    prop_oneof![
        6 => (0u32..25).prop_flat_map(|bits| 1usize..=(1usize << bits)).prop_map(|v| v.to_string()),
        3 => (1usize..=64).prop_map(|v| v.to_string()),
        extreme => select(vec![
            "0", "1", "2", "3", "16777215", "16777216", "16777217", "4294967296",
            "9223372036854775808", "18446744073709551615", "18446744073709551616", "-1",
            "1.5", "1e3", "null", "\"3\"", "true", "[]", "[1]", "[1, 2, 3]", "[16777216, 1]",
        ])
        .prop_map(str::to_string),
    ]
}

/// A per-kind JSON object: each field present or (when optional) left out, scalar or pair.
fn spec_fields_text(extreme: u32) -> impl Strategy<Value = String> {
    let kinds: Vec<ModuleKind> = ModuleKind::ALL.to_vec();
    (
        select(kinds),
        proptest::collection::vec((field_token(extreme), field_token(extreme), 0u8..8), 12),
    )
        .prop_map(|(kind, values)| {
            // (name, optional, pair-able)
            let fields: &[(&str, bool, bool)] = match kind {
                ModuleKind::Conv2d => &[
                    ("in_channels", false, false),
                    ("out_channels", false, false),
                    ("input_hw", false, true),
                    ("kernel", false, true),
                    ("stride", true, true),
                    ("padding", true, true),
                    ("dilation", true, true),
                    ("groups", true, false),
                    ("bias", true, false),
                ],
                ModuleKind::Linear => &[
                    ("tokens", true, false),
                    ("in_features", false, false),
                    ("out_features", false, false),
                    ("bias", true, false),
                ],
                ModuleKind::Matmul => &[
                    ("heads", true, false),
                    ("m", false, false),
                    ("k", false, false),
                    ("n", false, false),
                    ("trans_a", true, false),
                    ("trans_b", true, false),
                ],
                ModuleKind::MaxPool2d | ModuleKind::AvgPool2d => &[
                    ("channels", false, false),
                    ("input_hw", false, true),
                    ("kernel", false, true),
                    ("stride", true, true),
                    ("padding", true, true),
                ],
                ModuleKind::BatchNorm2d => &[("channels", false, false), ("input_hw", false, true)],
                ModuleKind::LayerNorm | ModuleKind::RmsNorm => {
                    &[("tokens", true, false), ("features", false, false)]
                }
                ModuleKind::Embedding => &[
                    ("tokens", true, false),
                    ("vocab", false, false),
                    ("features", false, false),
                ],
                _ => &[("shape", false, false)],
            };
            let mut parts = vec![format!("\"kind\":\"{}\"", kind.name())];
            for ((name, optional, pairable), (a, b, mode)) in fields.iter().zip(&values) {
                let value = match (*name, mode) {
                    (_, 0) if *optional => continue,
                    ("bias" | "trans_a" | "trans_b", m) => {
                        if m % 2 == 0 {
                            "true".to_string()
                        } else {
                            "false".to_string()
                        }
                    }
                    ("shape", 1) => format!("[{a}, {b}]"),
                    ("shape", _) => format!("[{a}, {b}, {a}]"),
                    (_, 1..=3) if *pairable => format!("[{a}, {b}]"),
                    _ => a.clone(),
                };
                parts.push(format!("\"{name}\":{value}"));
            }
            format!("{{{}}}", parts.join(","))
        })
}

/// `ModuleSpec::from_json` on structurally valid specs with extreme integers in every field.
#[test]
fn module_spec_fields() {
    fuzz(
        "module_spec_fields",
        Cost::Cheap,
        spec_fields_text(4),
        |text| match ModuleSpec::from_json(&text) {
            Ok(spec) => check_spec(&spec).map(|()| true),
            Err(_) => Ok(false),
        },
    );
}

/// A spec strategy for the feature rows: the field strategy, kept when it validates.
fn valid_spec() -> impl Strategy<Value = Option<ModuleSpec>> {
    spec_fields_text(1).prop_map(|text| ModuleSpec::from_json(&text).ok())
}

fn context() -> impl Strategy<Value = Context> {
    (
        prop_oneof![Just(1usize), Just(MAX_BATCH), 1..=MAX_BATCH, 1usize..64],
        any::<bool>(),
        prop_oneof![
            Just(1usize),
            Just(usize::MAX),
            1usize..=4096,
            any::<usize>()
        ],
        prop_oneof![Just(0.0f64), Just(0.999_999_999), 0.0f64..1.0],
    )
        .prop_map(|(batch, training, threads, utilisation)| Context {
            batch,
            phase: if training {
                Phase::Training
            } else {
                Phase::Inference
            },
            threads,
            utilisation,
        })
}

/// A device spanning the ranges `DeviceSpec::validate` accepts, endpoints included.
fn device() -> impl Strategy<Value = DeviceSpec> {
    let log_range = |lo: f64, hi: f64| {
        prop_oneof![
            Just(lo),
            Just(hi),
            (0.0f64..=1.0)
                .prop_map(move |u| (lo.ln() + u * (hi.ln() - lo.ln())).exp().clamp(lo, hi)),
        ]
    };
    (
        log_range(1e-3, 1e9),
        log_range(1e-3, 1e8),
        log_range(1.0, 1e6),
        log_range(1e-6, 1e7),
        prop_oneof![Just(0.0f64), Just(1e6), 0.0f64..1e6],
        1u32..=u32::MAX,
        any::<bool>(),
    )
        .prop_map(|(peak, bw, clock, mem, cache, cores, gpu)| DeviceSpec {
            peak_gflops: peak,
            mem_bandwidth_gbs: bw,
            clock_mhz: clock,
            memory_gb: mem,
            cache_mb: cache,
            cores,
            threads: cores,
            kind: if gpu {
                perfcast_core::DeviceKind::Gpu
            } else {
                perfcast_core::DeviceKind::Cpu
            },
            ..perfcast_core::testing::cpu_device()
        })
}

/// `perfcast_models::features::row` for validated specs, contexts and devices: every feature a
/// prediction reads is finite.
#[test]
fn feature_rows() {
    let strategy = (valid_spec(), context(), device());
    fuzz(
        "feature_rows",
        Cost::Cheap,
        strategy,
        |(spec, context, device)| {
            let Some(spec) = spec else { return Ok(false) };
            if context.validate().is_err() || device.validate().is_err() {
                return Ok(false);
            }
            let row = perfcast_models::features::row(&spec, &context, &device);
            let schema = perfcast_models::FeatureSchema::for_kind(spec.kind());
            check(row.len() == schema.len(), || {
                format!("row of {} values, schema of {}", row.len(), schema.len())
            })?;
            for (name, v) in schema.names.iter().zip(&row) {
                check(v.is_finite(), || format!("feature `{name}` is {v}"))?;
            }
            Ok(true)
        },
    );
}

fn network_texts() -> Vec<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/networks");
    let mut texts: Vec<String> = std::fs::read_dir(&dir)
        .map(|entries| {
            let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).collect();
            paths.sort();
            paths
                .iter()
                .filter(|p| p.extension().is_some_and(|e| e == "json"))
                .filter_map(|p| std::fs::read_to_string(p).ok())
                .collect()
        })
        .unwrap_or_default();
    for name in ["lenet5", "resnet18", "mobilenetv2", "transformer"] {
        let network = zoo::build(name, None).expect("zoo networks build");
        texts.push(network.to_json_pretty().expect("networks serialise"));
    }
    texts
}

fn check_network(network: &Network) -> Result<(), TestCaseError> {
    let shapes = network
        .check()
        .map_err(|e| TestCaseError::fail(format!("accepted network fails its check: {e}")))?;
    check(shapes.len() == network.layers.len(), || {
        format!(
            "{} shapes for {} layers",
            shapes.len(),
            network.layers.len()
        )
    })?;
    for (name, spec) in network.modules() {
        check_spec(spec).map_err(|e| TestCaseError::fail(format!("layer `{name}`: {e}")))?;
    }
    let json = network
        .to_json_pretty()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let back = Network::from_json(&json)
        .map_err(|e| TestCaseError::fail(format!("network does not read back: {e}")))?;
    check(&back == network, || "network reads back changed".into())
}

/// `Network::from_json` on example and zoo networks after structural and byte changes.
#[test]
fn network_json() {
    let texts = network_texts();
    let strategy = (0..texts.len(), json_ops(4), byte_ops(1));
    fuzz("network_json", Cost::Cheap, strategy, |(i, json, bytes)| {
        let text = mutate_json_text(&texts[i], &json, &bytes);
        match Network::from_json(&text) {
            Ok(network) => check_network(&network).map(|()| true),
            Err(_) => Ok(false),
        }
    });
}

/// `zoo::build` at any resolution, and names that are almost right.
#[test]
fn zoo_build() {
    let mut names: Vec<String> = zoo::names().iter().map(|s| (*s).to_string()).collect();
    names.extend(
        [
            "",
            " ResNet50 ",
            "resnet",
            "VGG16",
            "lenet5\0",
            "transformerx",
            "é",
        ]
        .iter()
        .map(|s| (*s).to_string()),
    );
    let resolution = prop_oneof![
        Just(None),
        (0usize..600).prop_map(Some),
        select(vec![
            (1usize << 24) - 1,
            1 << 24,
            (1 << 24) + 1,
            1 << 32,
            usize::MAX,
            usize::MAX / 2,
        ])
        .prop_map(Some),
        (0u32..64)
            .prop_flat_map(|b| 0usize..=(1usize << b).saturating_sub(1).max(1))
            .prop_map(Some),
    ];
    fuzz(
        "zoo_build",
        Cost::Cheap,
        (select(names), resolution),
        |(name, r)| match zoo::build(&name, r) {
            Ok(network) => {
                for (layer, spec) in network.modules() {
                    for batch in [1, MAX_BATCH] {
                        let d = features::derive(spec, batch);
                        finite_non_negative(&format!("`{layer}` flops"), d.flops)?;
                        finite_non_negative(&format!("`{layer}` bytes"), d.bytes_read)?;
                    }
                }
                network
                    .check()
                    .map_err(|e| TestCaseError::fail(format!("built network fails: {e}")))?;
                Ok(true)
            }
            Err(_) => Ok(false),
        },
    );
}

/// Float tokens for device fields: subnormal, huge, out of `f64`, negative, not numbers.
fn float_token() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => (-3.0f64..10.0).prop_map(|e| format!("{}", 10f64.powf(e))),
        3 => select(vec![
            "0", "-0.0", "-1", "1e-300", "5e-324", "1e308", "1.7976931348623157e308", "1e309",
            "-1e308", "NaN", "\"NaN\"", "Infinity", "null", "1e-3", "1e9", "1e8", "1e-6", "1e7",
            "1e6", "1000000.0000001", "4294967296", "18446744073709551616", "true", "\"1\"",
        ])
        .prop_map(str::to_string),
    ]
}

/// `DeviceSpec::from_json` with extreme floats in every numeric field, and mutated specs.
#[test]
fn device_spec_json() {
    let base = serde_json::to_value(perfcast_core::testing::cpu_device()).expect("serialises");
    let fields = [
        "peak_gflops",
        "mem_bandwidth_gbs",
        "clock_mhz",
        "memory_gb",
        "cache_mb",
        "cores",
        "threads",
    ];
    let strategy = (
        proptest::collection::vec(float_token(), fields.len()),
        proptest::collection::vec(proptest::bool::weighted(0.2), fields.len()),
        json_ops(2),
        byte_ops(1),
    );
    fuzz(
        "device_spec_json",
        Cost::Cheap,
        strategy,
        |(tokens, replace, json, bytes)| {
            let mut text =
                serde_json::to_string(&base).map_err(|e| TestCaseError::fail(e.to_string()))?;
            text = mutate_json_text(&text, &json, &[]);
            // Raw tokens (`1e309`, `NaN`) are spliced as text: no JSON value holds them.
            if let Ok(serde_json::Value::Object(mut m)) =
                serde_json::from_str::<serde_json::Value>(&text)
            {
                let mut raw = Vec::new();
                for ((field, token), on) in fields.iter().zip(&tokens).zip(&replace) {
                    if *on {
                        let marker = format!("@@{field}@@");
                        m.insert(
                            (*field).to_string(),
                            serde_json::Value::String(marker.clone()),
                        );
                        raw.push((format!("\"{marker}\""), token.clone()));
                    }
                }
                text = serde_json::Value::Object(m).to_string();
                for (marker, token) in raw {
                    text = text.replace(&marker, &token);
                }
            }
            let text = crate::mutate::apply_text(&text, &bytes);
            match DeviceSpec::from_json(&text) {
                Ok(spec) => {
                    for (name, v) in [
                        ("peak_gflops", spec.peak_gflops),
                        ("mem_bandwidth_gbs", spec.mem_bandwidth_gbs),
                    ] {
                        check(v.is_finite() && v > 0.0, || {
                            format!("accepted `{name}` {v}")
                        })?;
                    }
                    check(spec.validate().is_ok(), || {
                        "accepted spec fails validate".into()
                    })?;
                    let json = serde_json::to_string(&spec)
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                    let back = DeviceSpec::from_json(&json).map_err(|e| {
                        TestCaseError::fail(format!("spec does not read back: {e}"))
                    })?;
                    check(back == spec, || "spec reads back changed".into())?;
                    Ok(true)
                }
                Err(_) => Ok(false),
            }
        },
    );
}
