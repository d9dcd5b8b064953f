//! The request and response bodies of the HTTP API, and their validation.
//!
//! Parsing is two-speed: a well-formed body deserialises straight into its typed form; only a
//! body that fails is parsed again, slowly, to find and name the field at fault, so valid
//! requests pay nothing for good error messages.

use perfcast_core::fusion::Fusion;
use perfcast_core::{
    BatchNorm2d, Context, Conv2d, Elementwise, LayerNorm, Linear, Matmul, ModuleKind, ModuleSpec,
    Network, Phase, Pool2d,
};
use perfcast_predict::ModulePrediction;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Largest batch a query may ask for.
pub const MAX_BATCH: usize = 1 << 20;
/// Most compute threads a query may ask for.
pub const MAX_THREADS: usize = 4096;
/// Largest value of any configuration column of a module (channels, sizes, kernel, ...).
/// Keeps the feature arithmetic (element counts times batch, in integers) far from overflow.
pub const MAX_DIM: i64 = 1 << 24;
/// Largest zoo-network resolution.
pub const MAX_RESOLUTION: usize = 8192;

/// A refused request: HTTP status, the message and the field at fault (`null` when the
/// request as a whole is at fault: an unknown path, a wrong method).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ApiError {
    /// HTTP status code.
    #[serde(skip)]
    pub status: u16,
    /// What is wrong, naming the value.
    pub error: String,
    /// The field at fault, as a path into the request (`modules[2].kernel`), or `body`.
    pub field: Option<String>,
}

impl ApiError {
    /// 422: the body is well-formed JSON but a field is wrong.
    pub fn field(field: impl Into<String>, error: impl Into<String>) -> ApiError {
        ApiError {
            status: 422,
            error: error.into(),
            field: Some(field.into()),
        }
    }

    /// An error with a status and no field.
    pub fn status(status: u16, error: impl Into<String>) -> ApiError {
        ApiError {
            status,
            error: error.into(),
            field: None,
        }
    }
}

/// One module of a `/v1/predict` request: a module spec as `ModuleSpec` serialises it
/// (`{"kind": "conv2d", ...}`), optionally with its own `batch`, `phase` and `threads`
/// (the same form as `perfcast predict --modules-file`).
pub use perfcast_core::ModuleQuery;

/// The body of `POST /v1/predict`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PredictRequest {
    /// Several modules.
    pub modules: Option<Vec<ModuleQuery>>,
    /// One module.
    pub module: Option<ModuleQuery>,
    /// Batch size of every module without its own; default 1.
    pub batch: Option<usize>,
    /// Phase of every module without its own; default `inference`.
    pub phase: Option<Phase>,
    /// Compute threads of every module without its own; default 1.
    pub threads: Option<usize>,
    /// Background load while measuring, in [0, 1); default 0.
    pub utilisation: Option<f64>,
}

const PREDICT_FIELDS: &[&str] = &[
    "modules",
    "module",
    "batch",
    "phase",
    "threads",
    "utilisation",
];

/// The body of `POST /v1/predict/network`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkRequest {
    /// A zoo name (`vgg16`) or a network in its JSON form; or give `transformer`.
    #[serde(default)]
    pub network: Option<NetworkRef>,
    /// A Hugging Face style transformer config (the object of a `config.json`), built with
    /// `seq` tokens per sample (perfcast-graph's builder).
    #[serde(default)]
    pub transformer: Option<serde_json::Value>,
    /// Tokens per sample of a `transformer`.
    pub seq: Option<usize>,
    /// Input resolution of a zoo network (tokens for the transformer); default the network's.
    pub resolution: Option<usize>,
    /// Batch size; default 1.
    pub batch: Option<usize>,
    /// Phase; default `inference`.
    pub phase: Option<Phase>,
    /// Compute threads; default 1.
    pub threads: Option<usize>,
    /// Background load, in [0, 1); default 0.
    pub utilisation: Option<f64>,
    /// Kernel fusion policy (`none`, `epilogue`, `compile`, `engine`, `megatron`); default none.
    #[serde(default)]
    pub fusion: Fusion,
}

const NETWORK_FIELDS: &[&str] = &[
    "network",
    "transformer",
    "seq",
    "resolution",
    "batch",
    "phase",
    "threads",
    "utilisation",
    "fusion",
];

/// A zoo network by name, or a whole network.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum NetworkRef {
    /// A built-in network.
    Zoo(String),
    /// A network in its JSON form (`examples/networks/`).
    Inline(Box<Network>),
}

/// The response of `POST /v1/predict`: one prediction per module, in request order.
#[derive(Clone, Debug, Serialize)]
pub struct PredictResponse {
    /// Per module.
    pub predictions: Vec<ModulePrediction>,
    /// Sum over the modules, ms.
    pub total_ms: f64,
}

/// A validated `/v1/predict` request: every module with its context.
#[derive(Clone, Debug, PartialEq)]
pub struct ModuleQueries(pub Vec<(ModuleSpec, Context)>);

/// A validated `/v1/predict/network` request.
#[derive(Clone, Debug)]
pub enum NetworkQuery {
    /// A zoo network at a resolution (`None`: its default).
    Zoo {
        /// Zoo name, lower case.
        name: String,
        /// Resolution.
        resolution: Option<usize>,
        /// Context.
        context: Context,
        /// Kernel fusion policy.
        fusion: Fusion,
    },
    /// A network given inline (checked when prepared).
    Inline {
        /// The network.
        network: Box<Network>,
        /// Context.
        context: Context,
        /// Kernel fusion policy.
        fusion: Fusion,
    },
}

fn context_of(
    prefix: &str,
    batch: Option<usize>,
    phase: Option<Phase>,
    threads: Option<usize>,
    utilisation: Option<f64>,
) -> Result<Context, ApiError> {
    let batch = batch.unwrap_or(1);
    if !(1..=MAX_BATCH).contains(&batch) {
        return Err(ApiError::field(
            format!("{prefix}batch"),
            format!("`batch` must be in 1..={MAX_BATCH}, got {batch}"),
        ));
    }
    let threads = threads.unwrap_or(1);
    if !(1..=MAX_THREADS).contains(&threads) {
        return Err(ApiError::field(
            format!("{prefix}threads"),
            format!("`threads` must be in 1..={MAX_THREADS}, got {threads}"),
        ));
    }
    let utilisation = utilisation.unwrap_or(0.0);
    if !(utilisation.is_finite() && (0.0..1.0).contains(&utilisation)) {
        return Err(ApiError::field(
            format!("{prefix}utilisation"),
            format!("`utilisation` must be in [0, 1), got {utilisation}"),
        ));
    }
    Ok(Context {
        batch,
        phase: phase.unwrap_or(Phase::Inference),
        threads,
        utilisation,
    })
}

/// Validates one spec: every hyper-parameter, the shapes, and the size caps.
fn check_spec(field: &str, spec: &ModuleSpec) -> Result<(), ApiError> {
    spec.validate()
        .map_err(|e| ApiError::field(field, e.to_string()))?;
    let kind = spec.kind();
    for (name, v) in kind.config_columns().iter().zip(spec.config()) {
        // A size past `i64::MAX` reads as negative here.
        if !(0..=MAX_DIM).contains(&v) {
            return Err(ApiError::field(
                field,
                format!(
                    "`{name}` = {} is larger than perfcast accepts ({MAX_DIM})",
                    v as u64
                ),
            ));
        }
    }
    Ok(())
}

/// Parses and validates a `/v1/predict` body.
pub fn parse_predict(body: &[u8]) -> Result<ModuleQueries, ApiError> {
    let req: PredictRequest = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => return Err(diagnose_predict(body, &e)),
    };
    let (batch, phase, threads, utilisation) = (req.batch, req.phase, req.threads, req.utilisation);
    let base = |prefix: &str, q: &ModuleQuery| {
        context_of(
            prefix,
            q.batch.or(batch),
            q.phase.or(phase),
            q.threads.or(threads),
            utilisation,
        )
    };
    // The request-level context is checked even when every module overrides it.
    context_of("", batch, phase, threads, utilisation)?;
    match (req.module, req.modules) {
        (Some(_), Some(_)) => Err(ApiError::field(
            "module",
            "give either `module` (one spec) or `modules` (an array of specs), not both",
        )),
        (None, None) => Err(ApiError::field(
            "modules",
            "nothing to predict: give `module` (one spec) or `modules` (an array of specs)",
        )),
        (Some(q), None) => {
            check_spec("module", &q.spec)?;
            let context = base("module.", &q)?;
            Ok(ModuleQueries(vec![(q.spec, context)]))
        }
        (None, Some(list)) => {
            if list.is_empty() {
                return Err(ApiError::field("modules", "`modules` is empty"));
            }
            let mut out = Vec::with_capacity(list.len());
            for (i, q) in list.into_iter().enumerate() {
                check_spec(&format!("modules[{i}]"), &q.spec)?;
                let context = base(&format!("modules[{i}]."), &q)?;
                out.push((q.spec, context));
            }
            Ok(ModuleQueries(out))
        }
    }
}

/// Parses and validates a `/v1/predict/network` body.
pub fn parse_network(body: &[u8]) -> Result<NetworkQuery, ApiError> {
    let req: NetworkRequest = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => return Err(diagnose_network(body, &e)),
    };
    let context = context_of("", req.batch, req.phase, req.threads, req.utilisation)?;
    if let Some(r) = req.resolution
        && !(1..=MAX_RESOLUTION).contains(&r)
    {
        return Err(ApiError::field(
            "resolution",
            format!("`resolution` must be in 1..={MAX_RESOLUTION}, got {r}"),
        ));
    }
    let network = match (req.network, req.transformer) {
        (Some(_), Some(_)) => {
            return Err(ApiError::field(
                "transformer",
                "give `network` or `transformer`, not both",
            ));
        }
        (None, None) => {
            return Err(ApiError::field(
                "network",
                "missing field `network` (a zoo name or a network object) or `transformer` (a \
                 config object, with `seq`)",
            ));
        }
        (Some(n), None) => n,
        (None, Some(config)) => {
            let Some(seq) = req.seq else {
                return Err(ApiError::field(
                    "seq",
                    "a `transformer` needs `seq`, the tokens per sample",
                ));
            };
            if req.resolution.is_some() {
                return Err(ApiError::field(
                    "resolution",
                    "`resolution` applies to zoo networks only; a transformer takes `seq`",
                ));
            }
            let text = config.to_string();
            let built = perfcast_graph::transformer::TransformerConfig::from_json(
                &text,
                std::path::Path::new("request"),
            )
            .and_then(|c| {
                // As the CLI builds it: a training step runs the dropout layers.
                c.build(&perfcast_graph::transformer::BuildOptions {
                    dropout: context.phase == Phase::Training,
                    ..perfcast_graph::transformer::BuildOptions::new(seq)
                })
            });
            return match built {
                Ok(network) => Ok(NetworkQuery::Inline {
                    network: Box::new(network),
                    context,
                    fusion: req.fusion,
                }),
                Err(e) => Err(ApiError::field("transformer", e.to_string())),
            };
        }
    };
    if req.seq.is_some() {
        return Err(ApiError::field(
            "seq",
            "`seq` applies to a `transformer` only",
        ));
    }
    match network {
        NetworkRef::Zoo(name) => {
            let key = name.trim().to_ascii_lowercase();
            if perfcast_core::zoo::default_resolution(&key).is_none() {
                return Err(ApiError::field(
                    "network",
                    format!(
                        "unknown zoo network `{name}`; known networks are {}",
                        perfcast_core::zoo::names().join(", ")
                    ),
                ));
            }
            Ok(NetworkQuery::Zoo {
                name: key,
                resolution: req.resolution,
                context,
                fusion: req.fusion,
            })
        }
        NetworkRef::Inline(network) => {
            if req.resolution.is_some() {
                return Err(ApiError::field(
                    "resolution",
                    "`resolution` applies to zoo networks only; a network in JSON states its shapes",
                ));
            }
            for (i, layer) in network.layers.iter().enumerate() {
                check_spec(&format!("network.layers[{i}].spec"), &layer.spec)?;
            }
            Ok(NetworkQuery::Inline {
                network,
                context,
                fusion: req.fusion,
            })
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The slow path: find the field a failed body got wrong.

/// 400 for a body that is not JSON at all, otherwise the first field at fault.
fn parse_value(body: &[u8]) -> Result<serde_json::Map<String, Value>, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| ApiError {
        status: 400,
        error: format!("the body is not valid JSON: {e}"),
        field: Some("body".into()),
    })?;
    match value {
        Value::Object(map) => Ok(map),
        other => Err(ApiError::field(
            "body",
            format!("the body must be a JSON object, got {}", type_name(&other)),
        )),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Deserialises `value` as `T`; an error names `field` (and the path inside it).
fn typed<T: DeserializeOwned>(field: &str, value: Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." || path.is_empty() {
            field.to_string()
        } else {
            format!("{field}.{path}")
        };
        ApiError::field(field, e.into_inner().to_string())
    })
}

fn unknown_fields(map: &serde_json::Map<String, Value>, known: &[&str]) -> Result<(), ApiError> {
    if let Some(k) = map.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(ApiError::field(
            k.clone(),
            format!("unknown field `{k}`, expected one of {}", known.join(", ")),
        ));
    }
    Ok(())
}

fn context_fields(map: &mut serde_json::Map<String, Value>, prefix: &str) -> Result<(), ApiError> {
    for key in ["batch", "threads"] {
        if let Some(v) = map.remove(key) {
            typed::<Option<usize>>(&format!("{prefix}{key}"), v)?;
        }
    }
    if let Some(v) = map.remove("phase") {
        typed::<Option<Phase>>(&format!("{prefix}phase"), v)?;
    }
    if let Some(v) = map.remove("utilisation") {
        typed::<Option<f64>>(&format!("{prefix}utilisation"), v)?;
    }
    Ok(())
}

/// Names the field of one module spec at fault: its kind, or the parameter of that kind.
fn diagnose_module(field: &str, value: Value) -> Result<(), ApiError> {
    let Value::Object(mut map) = value else {
        return Err(ApiError::field(
            field,
            format!("a module must be an object, got {}", type_name(&value)),
        ));
    };
    let Some(kind) = map.remove("kind") else {
        return Err(ApiError::field(
            format!("{field}.kind"),
            format!(
                "missing field `kind` (one of {})",
                ModuleKind::names().join(", ")
            ),
        ));
    };
    let kind: ModuleKind = typed(&format!("{field}.kind"), kind)?;
    context_fields(&mut map, &format!("{field}."))?;
    let rest = Value::Object(map);
    match kind {
        ModuleKind::Conv2d => typed::<Conv2d>(field, rest).map(drop),
        ModuleKind::Linear => typed::<Linear>(field, rest).map(drop),
        ModuleKind::Matmul => typed::<Matmul>(field, rest).map(drop),
        ModuleKind::MaxPool2d | ModuleKind::AvgPool2d => typed::<Pool2d>(field, rest).map(drop),
        ModuleKind::BatchNorm2d => typed::<BatchNorm2d>(field, rest).map(drop),
        ModuleKind::LayerNorm | ModuleKind::RmsNorm => typed::<LayerNorm>(field, rest).map(drop),
        ModuleKind::Embedding => typed::<perfcast_core::Embedding>(field, rest).map(drop),
        _ => typed::<Elementwise>(field, rest).map(drop),
    }
}

fn diagnose_predict(body: &[u8], original: &serde_json::Error) -> ApiError {
    let result = (|| {
        let mut map = parse_value(body)?;
        unknown_fields(&map, PREDICT_FIELDS)?;
        if let Some(v) = map.remove("module")
            && !v.is_null()
        {
            diagnose_module("module", v)?;
        }
        if let Some(v) = map.remove("modules") {
            match v {
                Value::Array(items) => {
                    for (i, item) in items.into_iter().enumerate() {
                        diagnose_module(&format!("modules[{i}]"), item)?;
                    }
                }
                Value::Null => {}
                other => {
                    return Err(ApiError::field(
                        "modules",
                        format!(
                            "`modules` must be an array of module specs, got {}",
                            type_name(&other)
                        ),
                    ));
                }
            }
        }
        context_fields(&mut map, "")
    })();
    result
        .err()
        .unwrap_or_else(|| ApiError::field("body", original.to_string()))
}

fn diagnose_network(body: &[u8], original: &serde_json::Error) -> ApiError {
    let result = (|| {
        let mut map = parse_value(body)?;
        unknown_fields(&map, NETWORK_FIELDS)?;
        if let Some(v) = map.remove("seq") {
            typed::<Option<usize>>("seq", v)?;
        }
        if let Some(v) = map.remove("transformer")
            && !v.is_null()
            && !v.is_object()
        {
            return Err(ApiError::field(
                "transformer",
                format!(
                    "`transformer` must be a config object, got {}",
                    type_name(&v)
                ),
            ));
        }
        match map.remove("network") {
            // Whether `network` or `transformer` is given is checked once the body parses.
            None | Some(Value::Null) => {}
            Some(Value::String(_)) => {}
            Some(v @ Value::Object(_)) => {
                typed::<Network>("network", v)?;
            }
            Some(other) => {
                return Err(ApiError::field(
                    "network",
                    format!(
                        "`network` must be a zoo name or a network object, got {}",
                        type_name(&other)
                    ),
                ));
            }
        }
        if let Some(v) = map.remove("resolution") {
            typed::<Option<usize>>("resolution", v)?;
        }
        context_fields(&mut map, "")
    })();
    result
        .err()
        .unwrap_or_else(|| ApiError::field("body", original.to_string()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn err(body: &str) -> ApiError {
        parse_predict(body.as_bytes()).unwrap_err()
    }

    const CONV: &str = r#"{"kind": "conv2d", "in_channels": 3, "out_channels": 64, "input_hw": 224, "kernel": 7, "stride": 2, "padding": 3}"#;

    #[test]
    fn one_module_and_many_modules_parse_with_their_contexts() {
        let q = parse_predict(format!(r#"{{"module": {CONV}, "batch": 8}}"#).as_bytes()).unwrap();
        assert_eq!(q.0.len(), 1);
        assert_eq!(q.0[0].1.batch, 8);
        assert_eq!(q.0[0].1.phase, Phase::Inference);
        assert_eq!(q.0[0].0.kind(), ModuleKind::Conv2d);

        let body = format!(
            r#"{{"modules": [{CONV}, {{"kind": "relu", "shape": [1, 2, 3], "batch": 2, "phase": "training"}}],
                "phase": "inference", "threads": 2}}"#
        );
        let q = parse_predict(body.as_bytes()).unwrap();
        assert_eq!(q.0.len(), 2);
        assert_eq!((q.0[0].1.batch, q.0[0].1.threads), (1, 2));
        assert_eq!(q.0[1].1.batch, 2);
        assert_eq!(q.0[1].1.phase, Phase::Training);
        assert_eq!(q.0[1].1.threads, 2);
    }

    #[test]
    fn the_modules_file_format_of_the_cli_is_accepted() {
        // `perfcast predict --modules-file` reads an array of such entries.
        let body = r#"{"modules": [{"kind": "linear", "in_features": 512, "out_features": 256, "batch": 4, "phase": "training"}]}"#;
        let q = parse_predict(body.as_bytes()).unwrap();
        assert_eq!(q.0[0].1.batch, 4);
    }

    #[test]
    fn malformed_json_is_400_naming_the_body() {
        let e = err(r#"{"module": "#);
        assert_eq!(e.status, 400);
        assert_eq!(e.field.as_deref(), Some("body"));
        let e = err("[1, 2]");
        assert_eq!((e.status, e.field.as_deref()), (422, Some("body")));
    }

    #[test]
    fn wrong_fields_are_422_naming_the_field() {
        let e = err(r#"{"modulez": []}"#);
        assert_eq!(e.field.as_deref(), Some("modulez"));
        assert_eq!(e.status, 422);
        let e = err(r#"{"modules": [{"kind": "conv9d"}]}"#);
        assert_eq!(e.field.as_deref(), Some("modules[0].kind"), "{e:?}");
        let e = err(
            r#"{"modules": [{"kind": "relu", "shape": [1, 1, 1]}, {"kind": "linear", "in_features": "x", "out_features": 2}]}"#,
        );
        assert_eq!(e.field.as_deref(), Some("modules[1].in_features"), "{e:?}");
        let e = err(r#"{"module": {"kind": "linear", "in_features": 4}}"#);
        assert_eq!(e.field.as_deref(), Some("module"), "{e:?}");
        assert!(e.error.contains("out_features"), "{e:?}");
        let e = err(
            r#"{"module": {"kind": "linear", "in_features": 4, "out_features": 2, "bogus": 1}}"#,
        );
        assert!(e.error.contains("bogus"), "{e:?}");
        let e = err(r#"{"module": {"kind": "relu", "shape": [1, 1, 1]}, "phase": "sideways"}"#);
        assert_eq!(e.field.as_deref(), Some("phase"), "{e:?}");
        let e = err(r#"{"module": {"kind": "relu", "shape": [1, 1, 1], "batch": -1}}"#);
        assert_eq!(e.field.as_deref(), Some("module.batch"), "{e:?}");
        let e = err(r#"{"modules": {"kind": "relu"}}"#);
        assert_eq!(e.field.as_deref(), Some("modules"), "{e:?}");
    }

    #[test]
    fn impossible_values_are_422_naming_the_module_or_context_field() {
        let e = err(
            r#"{"module": {"kind": "conv2d", "in_channels": 3, "out_channels": 8, "input_hw": 4, "kernel": 9}}"#,
        );
        assert_eq!(e.field.as_deref(), Some("module"));
        assert!(e.error.contains("kernel"), "{e:?}");
        let e = err(r#"{"modules": [{"kind": "relu", "shape": [1, 0, 1]}]}"#);
        assert_eq!(e.field.as_deref(), Some("modules[0]"));
        let e = err(r#"{"module": {"kind": "relu", "shape": [1, 1, 1]}, "batch": 0}"#);
        assert_eq!(e.field.as_deref(), Some("batch"));
        let e = err(r#"{"modules": [{"kind": "relu", "shape": [1, 1, 1], "threads": 0}]}"#);
        assert_eq!(e.field.as_deref(), Some("modules[0].threads"));
        let e = err(r#"{"module": {"kind": "relu", "shape": [1, 1, 1]}, "utilisation": 1.5}"#);
        assert_eq!(e.field.as_deref(), Some("utilisation"));
        // Refused by the spec's own bounds (perfcast-core) or the cap here, naming the value.
        let e = err(r#"{"module": {"kind": "relu", "shape": [1, 1, 99999999999]}}"#);
        assert_eq!((e.status, e.field.as_deref()), (422, Some("module")));
        assert!(e.error.contains("99999999999"), "{e:?}");
        // A matmul whose operands would hold 2^48 elements is refused before any product.
        let e = err(
            r#"{"module": {"kind": "matmul", "m": 16777216, "k": 16777216, "n": 16777216}, "batch": 1048576}"#,
        );
        assert_eq!(
            (e.status, e.field.as_deref()),
            (422, Some("module")),
            "{e:?}"
        );
        let e = err(r#"{"module": {"kind": "relu", "shape": [1, 1, 18446744073709551615]}}"#);
        assert!(e.error.contains("18446744073709551615"), "{e:?}");
        let e = err(r#"{"modules": []}"#);
        assert_eq!(e.field.as_deref(), Some("modules"));
        let e = err(r#"{"batch": 2}"#);
        assert_eq!(e.field.as_deref(), Some("modules"));
        let e = err(&format!(r#"{{"module": {CONV}, "modules": [{CONV}]}}"#));
        assert_eq!(e.field.as_deref(), Some("module"));
    }

    #[test]
    fn network_requests_build_transformer_configs() {
        let body = br#"{"transformer": {"model_type": "gpt2", "n_embd": 64, "n_layer": 2,
            "n_head": 4, "vocab_size": 100, "n_positions": 32}, "seq": 16, "batch": 2}"#;
        let NetworkQuery::Inline {
            network, context, ..
        } = parse_network(body).unwrap()
        else {
            panic!("a transformer is an inline network")
        };
        assert_eq!(network.input, vec![16]);
        assert_eq!(context.batch, 2);
        let e = parse_network(br#"{"transformer": {"model_type": "gpt2"}}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("seq"));
        let e = parse_network(br#"{"transformer": {"model_type": "gpt2"}, "seq": 4}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("transformer"));
        assert!(
            e.error.contains("missing field `hidden_size`"),
            "{}",
            e.error
        );
        let e = parse_network(br#"{"network": "vgg16", "transformer": {}}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("transformer"));
        let e = parse_network(br#"{"batch": 2}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("network"));
    }

    #[test]
    fn network_requests_take_a_fusion_policy() {
        let q = parse_network(br#"{"network": "transformer", "fusion": "compile"}"#).unwrap();
        assert!(matches!(
            q,
            NetworkQuery::Zoo {
                fusion: Fusion::Compile,
                ..
            }
        ));
        let q = parse_network(br#"{"network": "transformer"}"#).unwrap();
        assert!(matches!(
            q,
            NetworkQuery::Zoo {
                fusion: Fusion::None,
                ..
            }
        ));
        let e = parse_network(br#"{"network": "transformer", "fusion": "xla"}"#).unwrap_err();
        assert!(e.error.contains("xla"), "{}", e.error);
    }

    #[test]
    fn network_requests_name_zoo_or_inline_networks() {
        let q = parse_network(br#"{"network": "VGG16", "batch": 4, "resolution": 112}"#).unwrap();
        let NetworkQuery::Zoo {
            name,
            resolution,
            context,
            ..
        } = q
        else {
            panic!("zoo")
        };
        assert_eq!(
            (name.as_str(), resolution, context.batch),
            ("vgg16", Some(112), 4)
        );
        let inline = r#"{"network": {"name": "n", "input": [4], "layers": [
            {"name": "fc", "spec": {"kind": "linear", "in_features": 4, "out_features": 2}}]}}"#;
        assert!(matches!(
            parse_network(inline.as_bytes()).unwrap(),
            NetworkQuery::Inline { .. }
        ));
        let e = parse_network(br#"{"network": "vgg17"}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("network"));
        assert!(e.error.contains("vgg16"));
        let e = parse_network(br#"{"network": "vgg16", "resolution": 0}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("resolution"));
        let e = parse_network(br#"{"network": 3}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("network"));
        let e = parse_network(br#"{"batch": 3}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("network"));
        let e = parse_network(br#"{"network": {"name": "n", "input": [4], "layers": "x"}}"#)
            .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("network.layers"), "{e:?}");
        let e = parse_network(br#"{"network": "vgg16", "phase": 1}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("phase"));
    }
}

/// A validated `POST /v1/predict/onnx` request: the imported graph, its import report and the
/// context. The body is the ONNX file's bytes; everything else comes in the query string.
#[derive(Clone, Debug)]
pub struct OnnxQuery {
    /// The mapped layers.
    pub network: Box<Network>,
    /// What the import found (fusions, notes, unmapped ops with their shares).
    pub report: perfcast_graph::onnx::ImportReport,
    /// Context.
    pub context: Context,
}

/// The query-string parameters `/v1/predict/onnx` takes.
pub const ONNX_PARAMS: &[&str] = &[
    "batch",
    "phase",
    "threads",
    "utilisation",
    "seq",
    "input",
    "strict",
    "fuse_conv_bn",
    "name",
];

/// Decodes `%XX` and `+` of one query-string component.
fn percent_decode(field: &str, text: &str) -> Result<String, ApiError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = text
                    .get(i + 1..i + 3)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| ApiError::field(field, format!("bad `%` escape in `{text}`")))?;
                out.push(hex);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| ApiError::field(field, "not UTF-8 after decoding"))
}

/// Parses and validates a `/v1/predict/onnx` request: `query` is the URI's query string
/// (`batch=8&phase=training&seq=128&input=ids%3D1x128`), `body` the ONNX file.
pub fn parse_onnx(query: Option<&str>, body: &[u8]) -> Result<OnnxQuery, ApiError> {
    let mut params: Vec<(String, String)> = Vec::new();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = percent_decode("query", key)?;
        if !ONNX_PARAMS.contains(&key.as_str()) {
            return Err(ApiError::field(
                key.clone(),
                format!(
                    "unknown parameter `{key}`; `/v1/predict/onnx` takes {}",
                    ONNX_PARAMS.join(", ")
                ),
            ));
        }
        let value = percent_decode(&key, value)?;
        if key != "input" && params.iter().any(|(k, _)| *k == key) {
            return Err(ApiError::field(
                key.clone(),
                format!("`{key}` is given twice"),
            ));
        }
        params.push((key, value));
    }
    let get = |k: &str| params.iter().find(|(p, _)| p == k).map(|(_, v)| v.as_str());
    fn parsed<T: std::str::FromStr>(key: &str, v: Option<&str>) -> Result<Option<T>, ApiError> {
        v.map(|v| {
            v.trim()
                .parse()
                .map_err(|_| ApiError::field(key, format!("`{key}={v}` is not a valid value")))
        })
        .transpose()
    }
    let context = context_of(
        "",
        parsed("batch", get("batch"))?,
        parsed("phase", get("phase"))?,
        parsed("threads", get("threads"))?,
        parsed("utilisation", get("utilisation"))?,
    )?;
    let inputs = params
        .iter()
        .filter(|(k, _)| k == "input")
        .map(|(_, v)| {
            perfcast_graph::named_dims(v).map_err(|e| ApiError::field("input", e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let options = perfcast_graph::onnx::ImportOptions {
        seq: parsed("seq", get("seq"))?,
        inputs,
        strict: parsed("strict", get("strict"))?.unwrap_or(false),
        fuse_conv_bn: parsed("fuse_conv_bn", get("fuse_conv_bn"))?.unwrap_or(false),
    };
    if body.is_empty() {
        return Err(ApiError::field(
            "body",
            "the body is empty: send the ONNX file's bytes",
        ));
    }
    let name = std::path::PathBuf::from(format!("{}.onnx", get("name").unwrap_or("request")));
    let imported = perfcast_graph::onnx::import_bytes(body, &name, &options)
        .map_err(|e| ApiError::field("body", e.to_string()))?;
    let report = perfcast_graph::onnx::ImportReport::new(name, &imported);
    Ok(OnnxQuery {
        network: Box::new(imported.network),
        report,
        context,
    })
}
