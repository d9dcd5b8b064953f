//! Sweeps: which configurations to measure. Built-in default ranges per module kind, overridden
//! by a TOML file, sampled by Latin hypercube (default) or plain random, under a seed.
//!
//! ```toml
//! seed = 7
//! samples = 200                  # configurations per module kind
//! method = "lhs"                 # or "random"
//! modules = ["conv2d", "linear"]
//! phases = ["inference", "training"]
//! batch = [1, 2, 4, 8, 16, 32]   # a list: one value per sample, uniformly
//! threads = [1]
//! utilisation = [0.0, 0.5]       # share of the cores kept busy by background load
//! max_gflop = 1.0                # skip configurations above this forward work ...
//! max_mib = 256.0                # ... or touching more memory than this
//!
//! [canary]                       # interference detection (`canary = false`: off)
//! every_s = 8.0                  # seconds of measuring between canary readings
//! tolerance = 0.07               # a reading this much above the run's best is disturbed
//! retries = 2                    # extra visits of rows measured while disturbed
//!
//! [conv2d]
//! in_channels = { min = 3, max = 256, scale = "log" }   # a range: uniform or log-uniform
//! kernel = [1, 3, 5]
//! padding = ["same", "valid"]
//! groups = [1, "depthwise"]
//! # stride = ["kernel"]        # stride = kernel: patch embeddings (ViT's 16x16 of stride 16)
//! channel_ratio = { min = 0.5, max = 4, scale = "log" }   # out_channels = in x ratio (default)
//! # out_channels = { min = 1, max = 2048, scale = "log" } # or drawn on its own
//! ```
//!
//! Every value is checked before anything is measured; an error names the key and the file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use perfcast_core::rng::SplitMix64;
use perfcast_core::{
    BatchNorm2d, Context, Conv2d, Elementwise, Embedding, LayerNorm, Linear, Matmul, ModuleKind,
    ModuleSpec, Phase, Pool2d, features,
};

use crate::canary::CanaryConfig;
use crate::error::{Error, Result};
use crate::ops::estimated_bytes;
use crate::timer::TimingConfig;

/// One value of a list parameter.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A number.
    Num(f64),
    /// A keyword such as `same`, `valid`, `depthwise`.
    Word(String),
    /// A flag.
    Flag(bool),
}

/// How one parameter is sampled.
#[derive(Clone, Debug, PartialEq)]
pub enum Param {
    /// One of these values, uniformly (repeat a value to weight it).
    Choice(Vec<Value>),
    /// A number in `[min, max]`, uniform or log-uniform; integer parameters round.
    Range {
        /// Lower bound.
        min: f64,
        /// Upper bound.
        max: f64,
        /// Log-uniform when true.
        log: bool,
    },
}

impl Param {
    fn choice(values: &[f64]) -> Param {
        Param::Choice(values.iter().map(|&v| Value::Num(v)).collect())
    }
    fn log(min: f64, max: f64) -> Param {
        Param::Range {
            min,
            max,
            log: true,
        }
    }
    /// The value at quantile `u` in [0, 1).
    fn at(&self, u: f64) -> Value {
        match self {
            Param::Choice(values) => {
                let i = ((u * values.len() as f64) as usize).min(values.len() - 1);
                values[i].clone()
            }
            Param::Range { min, max, log } => {
                if *log {
                    Value::Num((min.ln() + u * (max.ln() - min.ln())).exp())
                } else {
                    Value::Num(min + u * (max - min))
                }
            }
        }
    }
}

/// Sampling method.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// Latin hypercube: every parameter's range is covered evenly.
    Lhs,
    /// Independent uniform draws.
    Random,
}

/// Most configurations one sweep draws per kind: the draws are held in memory up front.
pub const MAX_SAMPLES: usize = 100_000;

/// A complete, validated sweep.
#[derive(Clone, Debug, PartialEq)]
pub struct Sweep {
    /// RNG seed.
    pub seed: u64,
    /// Configurations per module kind.
    pub samples: usize,
    /// Sampling method.
    pub method: Method,
    /// Kinds to measure.
    pub modules: Vec<ModuleKind>,
    /// Phases each configuration is measured in.
    pub phases: Vec<Phase>,
    /// Batch sizes.
    pub batch: Param,
    /// Thread counts.
    pub threads: Param,
    /// Background utilisation shares.
    pub utilisation: Param,
    /// Largest forward work of one configuration, GFLOP.
    pub max_gflop: f64,
    /// Largest memory footprint of one configuration, MiB.
    pub max_mib: f64,
    /// Per-kind parameter overrides (name -> param), merged over the defaults.
    pub params: BTreeMap<ModuleKind, BTreeMap<String, Param>>,
    /// Timing harness settings.
    pub timing: TimingConfig,
    /// Interference detection (`[canary]` in TOML, `canary = false` to turn it off).
    pub canary: Option<CanaryConfig>,
    /// Where the sweep came from, for messages.
    pub source: PathBuf,
}

/// One configuration to measure (phases expand it into rows).
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The module.
    pub spec: ModuleSpec,
    /// Batch size.
    pub batch: usize,
    /// Threads.
    pub threads: usize,
    /// Background utilisation.
    pub utilisation: f64,
}

impl Sample {
    /// Identity of the configuration and its context (phase aside).
    pub fn key(&self) -> (Vec<i64>, usize, usize, u64) {
        Sample::key_of(&self.spec, &self.context(Phase::Inference))
    }

    /// The [`Sample::key`] of a configuration measured in `context` (any phase).
    pub fn key_of(spec: &ModuleSpec, context: &Context) -> (Vec<i64>, usize, usize, u64) {
        (
            spec.config(),
            context.batch,
            context.threads,
            context.utilisation.to_bits(),
        )
    }

    /// The context of this sample in `phase`.
    pub fn context(&self, phase: Phase) -> Context {
        Context {
            batch: self.batch,
            phase,
            threads: self.threads,
            utilisation: self.utilisation,
        }
    }
}

/// The built-in parameters of a kind.
///
/// Maxima sit above the sizes standard networks use (512-1280 channels, 224x224 inputs, 4096
/// features): log-uniform draws rarely reach a range's top, and a network layer just outside
/// the trained range has to be extrapolated.
pub fn default_params(kind: ModuleKind) -> BTreeMap<String, Param> {
    let mut p = BTreeMap::new();
    let mut set = |k: &str, v: Param| {
        p.insert(k.to_string(), v);
    };
    let words = |w: &[&str]| Param::Choice(w.iter().map(|s| Value::Word((*s).into())).collect());
    match kind {
        ModuleKind::Conv2d => {
            set("in_channels", Param::log(1.0, 2048.0));
            // Output channels follow the input's as networks grow them (x 1/8 to x 16: a
            // bottleneck's squeeze to a stem's 3 -> 48), not drawn apart: independent draws
            // spent a sixth of the sweep on shapes such as 1245 -> 1 that no network runs and
            // the backend times erratically. A number or range for `out_channels` draws it
            // directly instead.
            set("out_channels", words(&["ratio"]));
            set("channel_ratio", Param::log(0.125, 16.0));
            set("input_hw", Param::log(4.0, 256.0));
            set("kernel", Param::choice(&[1.0, 3.0, 3.0, 5.0, 7.0]));
            set("stride", Param::choice(&[1.0, 1.0, 2.0]));
            set("padding", words(&["same", "same", "valid"]));
            set("dilation", Param::choice(&[1.0]));
            set(
                "groups",
                Param::Choice(vec![
                    Value::Num(1.0),
                    Value::Num(1.0),
                    Value::Num(1.0),
                    Value::Num(1.0),
                    Value::Word("depthwise".into()),
                ]),
            );
            // Layers followed by a norm have no bias (every conv of ResNet and MobileNetV2).
            set(
                "bias",
                Param::Choice(vec![Value::Flag(true), Value::Flag(false)]),
            );
        }
        ModuleKind::Linear => {
            // Transformers run 128-512 tokens a sequence: 128 sits inside the range, not at its
            // rarely drawn top.
            set("tokens", Param::log(1.0, 512.0));
            set("in_features", Param::log(16.0, 32768.0));
            set("out_features", Param::log(16.0, 8192.0));
            // Layers followed by a norm have no bias (every conv of ResNet and MobileNetV2).
            set(
                "bias",
                Param::Choice(vec![Value::Flag(true), Value::Flag(false)]),
            );
        }
        ModuleKind::Matmul => {
            set("heads", Param::choice(&[1.0, 2.0, 4.0, 8.0, 12.0, 16.0]));
            set("m", Param::log(8.0, 1024.0));
            set("k", Param::log(8.0, 1024.0));
            set("n", Param::log(8.0, 1024.0));
        }
        ModuleKind::MaxPool2d | ModuleKind::AvgPool2d => {
            set("channels", Param::log(1.0, 2048.0));
            set("input_hw", Param::log(4.0, 256.0));
            // 7: the global pool at the end of ResNets.
            set("kernel", Param::choice(&[2.0, 3.0, 3.0, 7.0]));
            set("stride", Param::choice(&[1.0, 2.0, 2.0]));
            set("padding", words(&["valid", "same"]));
        }
        ModuleKind::BatchNorm2d => {
            set("channels", Param::log(1.0, 2048.0));
            set("input_hw", Param::log(4.0, 256.0));
        }
        ModuleKind::LayerNorm | ModuleKind::RmsNorm => {
            set("tokens", Param::log(1.0, 512.0));
            set("features", Param::log(16.0, 8192.0));
        }
        ModuleKind::Embedding => {
            set("tokens", Param::log(1.0, 512.0));
            set("vocab", Param::log(16.0, 65536.0));
            set("features", Param::log(16.0, 8192.0));
        }
        _ => {
            set("c", Param::log(1.0, 2048.0));
            set("h", Param::log(1.0, 512.0));
            set("w", Param::log(1.0, 8192.0));
        }
    }
    p
}

impl Default for Sweep {
    fn default() -> Self {
        Sweep {
            seed: 0,
            samples: 100,
            method: Method::Lhs,
            modules: vec![
                ModuleKind::Conv2d,
                ModuleKind::Linear,
                ModuleKind::MaxPool2d,
                ModuleKind::BatchNorm2d,
                ModuleKind::Relu,
            ],
            phases: vec![Phase::Inference, Phase::Training],
            batch: Param::choice(&[1.0, 2.0, 4.0, 8.0, 16.0, 32.0]),
            threads: Param::choice(&[1.0]),
            utilisation: Param::choice(&[0.0]),
            max_gflop: 1.0,
            max_mib: 256.0,
            params: BTreeMap::new(),
            timing: TimingConfig::default(),
            canary: Some(CanaryConfig::default()),
            source: builtin_path(),
        }
    }
}

fn toml_location(text: &str, span: Option<std::ops::Range<usize>>) -> String {
    match span {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("line {line}, column {col}: ")
        }
        None => String::new(),
    }
}

impl Sweep {
    /// Reads a sweep file; every error names the file and the key.
    pub fn from_file(path: &Path) -> Result<Sweep> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::Sweep {
            path: path.to_path_buf(),
            message: format!("cannot read it: {e}"),
        })?;
        Sweep::from_toml(&text, path)
    }

    /// Parses sweep TOML (`path` only names the source in errors).
    pub fn from_toml(text: &str, path: &Path) -> Result<Sweep> {
        let fail = |message: String| Error::Sweep {
            path: path.to_path_buf(),
            message,
        };
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            fail(format!(
                "{}{}",
                toml_location(text, e.span()),
                e.message().trim().replace('\n', " ")
            ))
        })?;
        let mut sweep = Sweep {
            source: path.to_path_buf(),
            ..Sweep::default()
        };
        for (key, value) in &table {
            match key.as_str() {
                "seed" => sweep.seed = non_negative_int(key, value).map_err(&fail)? as u64,
                "samples" => {
                    sweep.samples = non_negative_int(key, value).map_err(&fail)? as usize;
                    if sweep.samples == 0 {
                        return Err(fail("`samples` must be at least 1, got 0".into()));
                    }
                }
                "method" => {
                    sweep.method = match value.as_str() {
                        Some("lhs") | Some("latin-hypercube") => Method::Lhs,
                        Some("random") => Method::Random,
                        _ => {
                            return Err(fail(format!(
                                "`method` must be \"lhs\" or \"random\", got {value}"
                            )));
                        }
                    }
                }
                "modules" => {
                    let names = string_list(key, value).map_err(&fail)?;
                    sweep.modules = names
                        .iter()
                        .map(|n| {
                            n.parse::<ModuleKind>()
                                .map_err(|e| fail(format!("`modules`: {e}")))
                        })
                        .collect::<Result<_>>()?;
                }
                "phases" => {
                    let names = string_list(key, value).map_err(&fail)?;
                    sweep.phases = names
                        .iter()
                        .map(|n| {
                            n.parse::<Phase>()
                                .map_err(|e| fail(format!("`phases`: {e}")))
                        })
                        .collect::<Result<_>>()?;
                }
                "batch" => sweep.batch = parse_param(key, value).map_err(&fail)?,
                "threads" => sweep.threads = parse_param(key, value).map_err(&fail)?,
                "utilisation" | "utilization" => {
                    sweep.utilisation = parse_param(key, value).map_err(&fail)?
                }
                "max_gflop" => sweep.max_gflop = positive_float(key, value).map_err(&fail)?,
                "max_mib" => sweep.max_mib = positive_float(key, value).map_err(&fail)?,
                "timing" => {
                    sweep.timing = value.clone().try_into().map_err(|e: toml::de::Error| {
                        fail(format!("`timing`: {}", e.message().trim()))
                    })?;
                }
                "canary" => {
                    sweep.canary = match value {
                        toml::Value::Boolean(false) => None,
                        toml::Value::Boolean(true) => Some(CanaryConfig::default()),
                        table => Some(table.clone().try_into().map_err(|e: toml::de::Error| {
                            fail(format!("`canary`: {}", e.message().trim()))
                        })?),
                    };
                }
                other => {
                    let kind: ModuleKind = other.parse().map_err(|_| {
                        fail(format!(
                            "unknown key `{other}` (not a setting nor a module kind)"
                        ))
                    })?;
                    let Some(params) = value.as_table() else {
                        return Err(fail(format!("`{other}` must be a table of parameters")));
                    };
                    let defaults = default_params(kind);
                    let mut parsed = BTreeMap::new();
                    for (name, v) in params {
                        if !defaults.contains_key(name) {
                            let known: Vec<&str> = defaults.keys().map(String::as_str).collect();
                            return Err(fail(format!(
                                "unknown parameter `{other}.{name}` (known: {})",
                                known.join(", ")
                            )));
                        }
                        parsed.insert(
                            name.clone(),
                            parse_param(&format!("{other}.{name}"), v).map_err(&fail)?,
                        );
                    }
                    sweep.params.insert(kind, parsed);
                }
            }
        }
        sweep.validate().map_err(fail)?;
        Ok(sweep)
    }

    /// Checks ranges of the context parameters and the timing settings.
    pub fn validate(&self) -> std::result::Result<(), String> {
        check_numbers("batch", &self.batch, 1.0, 1e6)?;
        check_numbers("threads", &self.threads, 1.0, 4096.0)?;
        check_numbers("utilisation", &self.utilisation, 0.0, 0.999)?;
        if self.modules.is_empty() {
            return Err("`modules` is empty".into());
        }
        if self.phases.is_empty() {
            return Err("`phases` is empty".into());
        }
        if self.samples == 0 || self.samples > MAX_SAMPLES {
            return Err(format!(
                "`samples` must be in [1, {MAX_SAMPLES}], got {}",
                self.samples
            ));
        }
        self.timing.validate()?;
        if let Some(canary) = &self.canary {
            canary.validate()?;
        }
        for kind in &self.modules {
            for (name, param) in self.params_of(*kind) {
                if let Param::Range { min, max, .. } = param {
                    if !(min.is_finite() && max.is_finite() && min <= max) {
                        return Err(format!(
                            "`{kind}.{name}`: range min {min} is above max {max}"
                        ));
                    }
                    if min < 0.0 {
                        return Err(format!("`{kind}.{name}` must not be negative, got {min}"));
                    }
                }
                if let Param::Choice(values) = &param {
                    for v in values {
                        if let Value::Num(x) = v
                            && *x < 0.0
                        {
                            return Err(format!("`{kind}.{name}` must not be negative, got {x}"));
                        }
                    }
                }
                // Sizes are at least 1 (a kernel or groups of 0 used to run as 1), padding and
                // flags at least 0; none above what a spec accepts.
                // A channel ratio is a factor, not a size.
                let (lowest, highest) = match name.as_str() {
                    "padding" | "bias" => (0.0, perfcast_core::MAX_AXIS as f64),
                    "channel_ratio" => (0.001, 1000.0),
                    _ => (1.0, perfcast_core::MAX_AXIS as f64),
                };
                let in_range = |x: f64| x >= lowest && x <= highest;
                let bad = |x: f64| {
                    Err(format!(
                        "`{kind}.{name}` values must be in [{lowest}, {highest}], got {x:?}"
                    ))
                };
                match &param {
                    Param::Range { min, max, .. } => {
                        for x in [*min, *max] {
                            if !in_range(x) {
                                return bad(x);
                            }
                        }
                    }
                    Param::Choice(values) => {
                        for v in values {
                            if let Value::Num(x) = v
                                && !in_range(*x)
                            {
                                return bad(*x);
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Defaults of a kind with this sweep's overrides applied.
    pub fn params_of(&self, kind: ModuleKind) -> BTreeMap<String, Param> {
        let mut p = default_params(kind);
        if let Some(over) = self.params.get(&kind) {
            for (k, v) in over {
                p.insert(k.clone(), v.clone());
            }
        }
        p
    }

    /// Draws `self.samples` valid configurations of `kind` within the work and memory budgets.
    ///
    /// Configurations that are invalid (a kernel larger than its input) or over budget are
    /// redrawn; after many rounds the sweep gives up with an error naming the kind, so an
    /// impossible sweep cannot loop forever.
    pub fn sample(&self, kind: ModuleKind) -> std::result::Result<Vec<Sample>, String> {
        let params = self.params_of(kind);
        // Dimension order: context first, then the kind's parameters (BTreeMap order).
        let mut dims: Vec<(&str, &Param)> = vec![
            ("batch", &self.batch),
            ("threads", &self.threads),
            ("utilisation", &self.utilisation),
        ];
        dims.extend(params.iter().map(|(k, v)| (k.as_str(), v)));
        let mut rng =
            SplitMix64::new(self.seed ^ (kind as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut out = Vec::with_capacity(self.samples);
        // Distinct configurations only: measuring one twice in a sweep wastes time and would
        // make a row's identity ambiguous.
        let mut seen = std::collections::HashSet::new();
        let mut last_error = String::new();
        for _round in 0..200 {
            let n = self.samples;
            let points = match self.method {
                Method::Lhs => latin_hypercube(&mut rng, n, dims.len()),
                Method::Random => (0..n)
                    .map(|_| (0..dims.len()).map(|_| rng.unit()).collect())
                    .collect(),
            };
            for point in points {
                let values: BTreeMap<&str, Value> = dims
                    .iter()
                    .zip(&point)
                    .map(|((name, p), &u)| (*name, p.at(u)))
                    .collect();
                match build_sample(kind, &values) {
                    Ok(sample) => {
                        let work = features::derive(&sample.spec, sample.batch).flops / 1e9;
                        let mib = estimated_bytes(&sample.spec, &sample.context(Phase::Training))
                            / 1048576.0;
                        if work > self.max_gflop {
                            last_error = format!("{work:.2} GFLOP is above max_gflop");
                        } else if mib > self.max_mib {
                            last_error = format!("{mib:.0} MiB is above max_mib");
                        } else if !seen.insert(sample.key()) {
                            last_error = "the space has too few distinct configurations".into();
                        } else {
                            out.push(sample);
                            if out.len() == self.samples {
                                return Ok(out);
                            }
                        }
                    }
                    Err(e) => last_error = e,
                }
            }
        }
        Err(format!(
            "could draw only {} of {} distinct valid `{kind}` configurations; the last rejected one: {last_error}",
            out.len(),
            self.samples
        ))
    }
}

/// `n` points in `[0, 1)^d`, one per stratum of every dimension.
pub fn latin_hypercube(rng: &mut SplitMix64, n: usize, d: usize) -> Vec<Vec<f64>> {
    let mut points = vec![vec![0.0; d]; n];
    for j in 0..d {
        let mut strata: Vec<usize> = (0..n).collect();
        rng.shuffle(&mut strata);
        for (point, s) in points.iter_mut().zip(strata) {
            point[j] = (s as f64 + rng.unit()) / n as f64;
        }
    }
    points
}

fn num(values: &BTreeMap<&str, Value>, name: &str) -> std::result::Result<usize, String> {
    match values.get(name) {
        Some(Value::Num(v)) => Ok(v.round().max(0.0) as usize),
        Some(other) => Err(format!("`{name}` must be a number, got {other:?}")),
        None => Err(format!("missing parameter `{name}`")),
    }
}

fn flag(values: &BTreeMap<&str, Value>, name: &str) -> std::result::Result<bool, String> {
    match values.get(name) {
        Some(Value::Flag(b)) => Ok(*b),
        Some(Value::Num(v)) => Ok(*v != 0.0),
        Some(other) => Err(format!("`{name}` must be true or false, got {other:?}")),
        None => Err(format!("missing parameter `{name}`")),
    }
}

/// Padding from a number or `same` (kernel / 2) / `valid` (0).
fn padding(
    values: &BTreeMap<&str, Value>,
    kernel: usize,
    dilation: usize,
) -> std::result::Result<usize, String> {
    match values.get("padding") {
        Some(Value::Word(w)) if w == "same" => Ok(dilation * (kernel - 1) / 2),
        Some(Value::Word(w)) if w == "valid" => Ok(0),
        Some(Value::Num(v)) => Ok(v.round().max(0.0) as usize),
        other => Err(format!(
            "`padding` must be a number, \"same\" or \"valid\", got {other:?}"
        )),
    }
}

fn build_sample(
    kind: ModuleKind,
    v: &BTreeMap<&str, Value>,
) -> std::result::Result<Sample, String> {
    let utilisation = match v.get("utilisation") {
        Some(Value::Num(u)) => *u,
        other => return Err(format!("`utilisation` must be a number, got {other:?}")),
    };
    let elementwise = || -> std::result::Result<Elementwise, String> {
        Ok(Elementwise {
            shape: [num(v, "c")?, num(v, "h")?, num(v, "w")?],
        })
    };
    let spec = match kind {
        ModuleKind::Conv2d => {
            let kernel = num(v, "kernel")?.max(1);
            let dilation = num(v, "dilation")?.max(1);
            let mut cin = num(v, "in_channels")?;
            let mut cout = match v.get("out_channels") {
                Some(Value::Word(w)) if w == "ratio" => {
                    let ratio = match v.get("channel_ratio") {
                        Some(Value::Num(r)) if r.is_finite() && *r > 0.0 => *r,
                        other => {
                            return Err(format!(
                                "`channel_ratio` must be a positive number, got {other:?}"
                            ));
                        }
                    };
                    ((cin as f64 * ratio).round() as usize).clamp(4, 2048)
                }
                _ => num(v, "out_channels")?,
            };
            let groups = match v.get("groups") {
                Some(Value::Word(w)) if w == "depthwise" => {
                    cout = cin;
                    cin
                }
                Some(Value::Num(g)) => {
                    let g = g.round().max(1.0) as usize;
                    // Round channels up to multiples of the groups so the draw stays valid.
                    cin = cin.div_ceil(g) * g;
                    cout = cout.div_ceil(g) * g;
                    g
                }
                other => {
                    return Err(format!(
                        "`groups` must be a number or \"depthwise\", got {other:?}"
                    ));
                }
            };
            let hw = num(v, "input_hw")?;
            // `"kernel"`: non-overlapping windows, as patch embeddings run them.
            let stride = match v.get("stride") {
                Some(Value::Word(w)) if w == "kernel" => kernel,
                _ => num(v, "stride")?,
            };
            ModuleSpec::Conv2d(Conv2d {
                in_channels: cin,
                out_channels: cout,
                input_hw: [hw, hw],
                kernel: [kernel, kernel],
                stride: [stride; 2],
                padding: [padding(v, kernel, dilation)?; 2],
                dilation: [dilation; 2],
                groups,
                bias: flag(v, "bias")?,
            })
        }
        ModuleKind::Linear => ModuleSpec::Linear(Linear {
            tokens: num(v, "tokens")?,
            in_features: num(v, "in_features")?,
            out_features: num(v, "out_features")?,
            bias: flag(v, "bias")?,
        }),
        ModuleKind::Matmul => ModuleSpec::Matmul(Matmul {
            heads: num(v, "heads")?,
            m: num(v, "m")?,
            k: num(v, "k")?,
            n: num(v, "n")?,
            trans_a: false,
            trans_b: false,
        }),
        ModuleKind::MaxPool2d | ModuleKind::AvgPool2d => {
            let kernel = num(v, "kernel")?.max(1);
            let hw = num(v, "input_hw")?;
            let pool = Pool2d {
                channels: num(v, "channels")?,
                input_hw: [hw, hw],
                kernel: [kernel; 2],
                stride: Some([num(v, "stride")?; 2]),
                padding: [padding(v, kernel, 1)?; 2],
            };
            if kind == ModuleKind::MaxPool2d {
                ModuleSpec::MaxPool2d(pool)
            } else {
                ModuleSpec::AvgPool2d(pool)
            }
        }
        ModuleKind::BatchNorm2d => {
            let hw = num(v, "input_hw")?;
            ModuleSpec::BatchNorm2d(BatchNorm2d {
                channels: num(v, "channels")?,
                input_hw: [hw, hw],
            })
        }
        ModuleKind::LayerNorm => ModuleSpec::LayerNorm(LayerNorm {
            tokens: num(v, "tokens")?,
            features: num(v, "features")?,
        }),
        ModuleKind::RmsNorm => ModuleSpec::RmsNorm(LayerNorm {
            tokens: num(v, "tokens")?,
            features: num(v, "features")?,
        }),
        ModuleKind::Embedding => ModuleSpec::Embedding(Embedding {
            tokens: num(v, "tokens")?,
            vocab: num(v, "vocab")?,
            features: num(v, "features")?,
        }),
        elementwise_kind => ModuleSpec::elementwise(elementwise_kind, elementwise()?)
            .ok_or_else(|| format!("`{elementwise_kind}` has no sweep parameters"))?,
    };
    spec.validate().map_err(|e| e.to_string())?;
    Ok(Sample {
        spec,
        batch: num(v, "batch")?.max(1),
        threads: num(v, "threads")?.max(1),
        utilisation,
    })
}

fn non_negative_int(key: &str, value: &toml::Value) -> std::result::Result<i64, String> {
    match value.as_integer() {
        Some(v) if v >= 0 => Ok(v),
        _ => Err(format!(
            "`{key}` must be a non-negative integer, got {value}"
        )),
    }
}

fn positive_float(key: &str, value: &toml::Value) -> std::result::Result<f64, String> {
    let v = value
        .as_float()
        .or_else(|| value.as_integer().map(|i| i as f64));
    match v {
        Some(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("`{key}` must be a positive number, got {value}")),
    }
}

fn string_list(key: &str, value: &toml::Value) -> std::result::Result<Vec<String>, String> {
    let err = || format!("`{key}` must be a list of strings, got {value}");
    let list = value.as_array().ok_or_else(err)?;
    list.iter()
        .map(|v| v.as_str().map(str::to_string).ok_or_else(err))
        .collect()
}

fn parse_value(key: &str, value: &toml::Value) -> std::result::Result<Value, String> {
    match value {
        toml::Value::Integer(i) => Ok(Value::Num(*i as f64)),
        toml::Value::Float(f) if f.is_finite() => Ok(Value::Num(*f)),
        toml::Value::String(s) => Ok(Value::Word(s.clone())),
        toml::Value::Boolean(b) => Ok(Value::Flag(*b)),
        other => Err(format!("`{key}`: unsupported value {other}")),
    }
}

/// A parameter from TOML: a scalar, a list, or `{ min, max, scale = "linear" | "log" }`.
fn parse_param(key: &str, value: &toml::Value) -> std::result::Result<Param, String> {
    match value {
        toml::Value::Array(list) => {
            if list.is_empty() {
                return Err(format!("`{key}` is an empty list"));
            }
            Ok(Param::Choice(
                list.iter()
                    .map(|v| parse_value(key, v))
                    .collect::<std::result::Result<_, _>>()?,
            ))
        }
        toml::Value::Table(t) => {
            for k in t.keys() {
                if !["min", "max", "scale"].contains(&k.as_str()) {
                    return Err(format!(
                        "`{key}`: unknown range field `{k}` (expected min, max, scale)"
                    ));
                }
            }
            let bound = |name: &str| -> std::result::Result<f64, String> {
                let v = t
                    .get(name)
                    .ok_or_else(|| format!("`{key}` range needs `{name}`"))?;
                v.as_float()
                    .or_else(|| v.as_integer().map(|i| i as f64))
                    .ok_or_else(|| format!("`{key}.{name}` must be a number, got {v}"))
            };
            let (min, max) = (bound("min")?, bound("max")?);
            let log = match t.get("scale").and_then(|s| s.as_str()) {
                None | Some("linear") | Some("uniform") => false,
                Some("log") | Some("log-uniform") => true,
                Some(other) => {
                    return Err(format!(
                        "`{key}.scale` must be \"linear\" or \"log\", got \"{other}\""
                    ));
                }
            };
            if log && min <= 0.0 {
                return Err(format!("`{key}`: a log range needs min > 0, got {min}"));
            }
            if min > max || min.is_nan() || max.is_nan() {
                return Err(format!("`{key}`: range min {min} is above max {max}"));
            }
            Ok(Param::Range { min, max, log })
        }
        scalar => Ok(Param::Choice(vec![parse_value(key, scalar)?])),
    }
}

fn check_numbers(name: &str, param: &Param, min: f64, max: f64) -> std::result::Result<(), String> {
    let check = |v: f64| {
        if v.is_finite() && v >= min && v <= max {
            Ok(())
        } else {
            Err(format!(
                "`{name}` values must be in [{min}, {max}], got {v}"
            ))
        }
    };
    match param {
        Param::Choice(values) => {
            for v in values {
                match v {
                    Value::Num(x) => check(*x)?,
                    other => return Err(format!("`{name}` values must be numbers, got {other:?}")),
                }
            }
            Ok(())
        }
        Param::Range {
            min: lo, max: hi, ..
        } => {
            check(*lo)?;
            check(*hi)
        }
    }
}

/// The path shown for the built-in sweep in messages.
pub fn builtin_path() -> PathBuf {
    PathBuf::from("<built-in sweep>")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Sweep> {
        Sweep::from_toml(text, Path::new("sweep.toml"))
    }

    #[test]
    fn lhs_covers_every_stratum_once() {
        let mut rng = SplitMix64::new(1);
        let pts = latin_hypercube(&mut rng, 10, 3);
        for j in 0..3 {
            let mut strata: Vec<usize> = pts.iter().map(|p| (p[j] * 10.0) as usize).collect();
            strata.sort();
            assert_eq!(strata, (0..10).collect::<Vec<_>>());
        }
    }

    #[test]
    fn samples_are_valid_within_budget_and_deterministic() {
        let sweep = Sweep {
            samples: 50,
            ..Sweep::default()
        };
        for kind in ModuleKind::ALL {
            let a = sweep.sample(kind).unwrap();
            assert_eq!(a.len(), 50, "{kind}");
            for s in &a {
                assert!(s.spec.validate().is_ok());
                assert_eq!(s.spec.kind(), kind);
                assert!(features::derive(&s.spec, s.batch).flops / 1e9 <= sweep.max_gflop);
            }
            assert_eq!(a, sweep.sample(kind).unwrap(), "same seed, same draw");
            let distinct: std::collections::HashSet<_> = a.iter().map(Sample::key).collect();
            assert_eq!(distinct.len(), a.len(), "{kind}: duplicate configurations");
        }
        let other = Sweep {
            seed: 9,
            ..sweep.clone()
        };
        assert_ne!(
            other.sample(ModuleKind::Conv2d).unwrap(),
            sweep.sample(ModuleKind::Conv2d).unwrap()
        );
    }

    #[test]
    fn default_convs_grow_channels_as_networks_do_unless_told_otherwise() {
        let sweep = parse("seed = 5\nsamples = 200\nmodules = [\"conv2d\"]\n").unwrap();
        let mut outside_band = 0;
        for s in sweep.sample(ModuleKind::Conv2d).unwrap() {
            let ModuleSpec::Conv2d(c) = &s.spec else {
                panic!("not a conv")
            };
            let ratio = c.out_channels as f64 / c.in_channels as f64;
            assert!(c.out_channels >= 4 || c.groups == c.in_channels, "{c:?}");
            // The clamp to [4, 2048] and rounding to the groups may leave the band.
            if !(0.1..=20.0).contains(&ratio) {
                outside_band += 1;
            }
        }
        assert!(
            outside_band <= 10,
            "{outside_band} of 200 outside x 1/8..16"
        );
        let drawn = parse(
            "seed = 5\nsamples = 50\nmodules = [\"conv2d\"]\n[conv2d]\ngroups = [1]\nin_channels = [512]\nout_channels = { min = 1, max = 2 }\n",
        )
        .unwrap();
        for s in drawn.sample(ModuleKind::Conv2d).unwrap() {
            let ModuleSpec::Conv2d(c) = &s.spec else {
                panic!("not a conv")
            };
            assert!((1..=2).contains(&c.out_channels), "{c:?}");
        }
    }

    #[test]
    fn toml_overrides_defaults() {
        let sweep = parse(
            "seed = 3\nsamples = 5\nmodules = [\"conv2d\"]\nbatch = 2\n[conv2d]\nkernel = [3]\ngroups = [\"depthwise\"]\nin_channels = { min = 8, max = 16 }\n",
        )
        .unwrap();
        let samples = sweep.sample(ModuleKind::Conv2d).unwrap();
        assert_eq!(samples.len(), 5);
        for s in samples {
            let ModuleSpec::Conv2d(c) = &s.spec else {
                panic!("not a conv")
            };
            assert_eq!(c.kernel, [3, 3]);
            assert_eq!(c.groups, c.in_channels);
            assert!((8..=16).contains(&c.in_channels));
            assert_eq!(s.batch, 2);
        }
    }

    #[test]
    fn malformed_toml_names_file_and_line() {
        let err = parse("seed = 3\nsamples = [oops\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("invalid sweep `sweep.toml`: line 2"),
            "{err}"
        );
        assert!(!err.contains('\n'), "one line: {err}");
    }

    #[test]
    fn bad_values_are_named() {
        let cases = [
            ("samples = 0", "`samples` must be at least 1"),
            ("batch = [0]", "`batch` values must be in [1"),
            ("utilisation = [1.5]", "`utilisation` values must be in"),
            ("modules = [\"conv9d\"]", "unknown module kind `conv9d`"),
            (
                "[conv2d]\nkernal = [3]",
                "unknown parameter `conv2d.kernal`",
            ),
            (
                "[linear]\nin_features = { min = 0, max = 9, scale = \"log\" }",
                "log range needs min > 0",
            ),
            (
                "[linear]\nin_features = [-4]",
                "`linear.in_features` must not be negative, got -4",
            ),
            ("colour = 3", "unknown key `colour`"),
            // These ran as 1, or allocated the draws up front.
            (
                "[conv2d]\nkernel = [0]",
                "`conv2d.kernel` values must be in [1, 16777216], got 0",
            ),
            (
                "[conv2d]\ngroups = [0]",
                "`conv2d.groups` values must be in [1",
            ),
            (
                "[linear]\nin_features = { min = 1, max = 1e30 }",
                "`linear.in_features` values must be in [1, 16777216], got 1e30",
            ),
            (
                "samples = 9223372036854775807",
                "`samples` must be in [1, 100000], got 9223372036854775807",
            ),
            ("[timing]\nmax_time_s = -1.0", "timing.max_time_s"),
        ];
        for (text, expected) in cases {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn too_small_a_space_is_an_error_not_duplicates() {
        let sweep =
            parse("samples = 5\nbatch = [1]\n[relu]\nc = [1, 2]\nh = [1]\nw = [1]\n").unwrap();
        let err = sweep.sample(ModuleKind::Relu).unwrap_err();
        assert!(err.contains("could draw only 2 of 5 distinct"), "{err}");
    }

    #[test]
    fn impossible_sweep_gives_up_with_a_reason() {
        let sweep = parse(
            "samples = 3\nmodules = [\"conv2d\"]\n[conv2d]\ninput_hw = [2]\nkernel = [7]\npadding = [\"valid\"]\n",
        )
        .unwrap();
        let err = sweep.sample(ModuleKind::Conv2d).unwrap_err();
        assert!(err.contains("kernel height 7"), "{err}");
    }
}
