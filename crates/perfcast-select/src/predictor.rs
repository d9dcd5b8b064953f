//! Answers latency queries from a bundle: one module, many modules, or a whole network, in the
//! inference or training phase, with warnings where a query leaves the trained ranges.

use std::collections::BTreeMap;

use perfcast_core::{Context, ModuleKind, ModuleSpec, Network, features};
use perfcast_models::features::row;
use serde::{Deserialize, Serialize};

use crate::bundle::Bundle;
use crate::error::{Error, Result};

/// Efficiencies of the spec-only roofline used for kinds a bundle has no model for.
const FALLBACK_COMPUTE_EFFICIENCY: f64 = 0.5;
const FALLBACK_MEMORY_EFFICIENCY: f64 = 0.6;
/// Fixed cost per call of the fallback, ms.
const FALLBACK_OVERHEAD_MS: f64 = 0.002;

/// One module's predicted latency.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModulePrediction {
    /// Module kind.
    pub kind: ModuleKind,
    /// Predicted latency, ms.
    pub ms: f64,
    /// Model that answered (`roofline-spec` for the fallback).
    pub model: String,
    /// Whether the bundle had no model for the kind and the spec roofline answered.
    pub fallback: bool,
    /// Features outside the ranges the model was trained on.
    pub warnings: Vec<String>,
}

/// One layer of a network prediction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayerPrediction {
    /// Layer name.
    pub name: String,
    /// The module, in words.
    pub module: String,
    /// Its prediction.
    #[serde(flatten)]
    pub prediction: ModulePrediction,
}

/// A network's predicted latency: per layer and the sum.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NetworkPrediction {
    /// Network name.
    pub network: String,
    /// Context of every layer.
    pub context: Context,
    /// Per layer, in order.
    pub layers: Vec<LayerPrediction>,
    /// Sum of the layers, ms.
    pub total_ms: f64,
    /// Layers answered by the fallback.
    pub fallback_layers: usize,
}

/// Predicts from a loaded bundle.
#[derive(Debug)]
pub struct Predictor {
    bundle: Bundle,
    /// Per kind: the feature columns users set (configuration, batch, threads, utilisation)
    /// with their trained range, so a query is range-checked without a name lookup.
    checks: BTreeMap<ModuleKind, Vec<(usize, f64, f64)>>,
}

impl Predictor {
    /// A predictor over `bundle`.
    pub fn new(bundle: Bundle) -> Predictor {
        let mut checks = BTreeMap::new();
        for kind in bundle.kinds() {
            let Some(entry) = bundle.manifest.kinds.get(kind.name()) else {
                continue;
            };
            let user: Vec<&str> = kind
                .config_columns()
                .iter()
                .copied()
                .chain(["batch", "threads", "utilisation"])
                .collect();
            let cols = entry
                .ranges
                .iter()
                .enumerate()
                .filter(|(_, r)| user.contains(&r.name.as_str()))
                .map(|(i, r)| (i, r.min, r.max))
                .collect();
            checks.insert(kind, cols);
        }
        Predictor { bundle, checks }
    }

    /// The bundle behind it.
    pub fn bundle(&self) -> &Bundle {
        &self.bundle
    }

    /// One module in one context.
    pub fn predict_module(&self, spec: &ModuleSpec, context: &Context) -> Result<ModulePrediction> {
        spec.validate()?;
        context.validate()?;
        self.predict_valid(spec, context)
    }

    /// [`Predictor::predict_module`] for a spec and context already validated.
    fn predict_valid(&self, spec: &ModuleSpec, context: &Context) -> Result<ModulePrediction> {
        let kind = spec.kind();
        let device = &self.bundle.manifest.device;
        let Some(model) = self.bundle.model(kind) else {
            let d = features::derive(spec, context.batch);
            let training = context.phase == perfcast_core::Phase::Training;
            let flops = if training { d.train_flops } else { d.flops };
            let bytes = (d.bytes_read + d.bytes_written) * if training { 3.0 } else { 1.0 };
            let s = (flops / (FALLBACK_COMPUTE_EFFICIENCY * device.peak_gflops * 1e9))
                .max(bytes / (FALLBACK_MEMORY_EFFICIENCY * device.mem_bandwidth_gbs * 1e9));
            return Ok(ModulePrediction {
                kind,
                ms: s * 1e3 + FALLBACK_OVERHEAD_MS,
                model: "roofline-spec".into(),
                fallback: true,
                warnings: vec![format!(
                    "the bundle has no `{kind}` model; a roofline from the device spec answered"
                )],
            });
        };
        let x = row(spec, context, device);
        let mut warnings = Vec::new();
        let mut ms = model.predict_row(&x)?;
        // Inputs a user sets; derived features leave the range only through these.
        let outside = self.checks.get(&kind).is_some_and(|cols| {
            cols.iter().any(|&(i, lo, hi)| {
                let v = x.get(i).copied().unwrap_or(f64::NAN);
                v < lo - 1e-9 * lo.abs() || v > hi + 1e-9 * hi.abs()
            })
        });
        if outside && let Some(entry) = self.bundle.manifest.kinds.get(kind.name()) {
            for &(i, lo, hi) in &self.checks[&kind] {
                let v = x[i];
                if v < lo - 1e-9 * lo.abs() || v > hi + 1e-9 * hi.abs() {
                    warnings.push(format!(
                        "`{}` = {v} is outside the trained range {lo}..{hi}",
                        entry.ranges[i].name
                    ));
                }
            }
            if let Some(scaled) = self.extrapolate(spec, context, &x, entry, model)? {
                ms = scaled;
                warnings.push(
                    "predicted at the nearest trained configuration and scaled by the roofline \
                     work ratio"
                        .into(),
                );
            }
        }
        Ok(ModulePrediction {
            kind,
            ms,
            model: model.name().to_string(),
            fallback: false,
            warnings,
        })
    }

    /// Learned models do not extrapolate: ridge's squares grow without bound and trees stay
    /// flat. Outside the trained ranges, predict the nearest trained configuration (each
    /// input clamped into its range) and scale by how much more work the query is, as the
    /// roofline sees it. `None` when the clamped configuration is not a valid module.
    fn extrapolate(
        &self,
        spec: &ModuleSpec,
        context: &Context,
        x: &[f64],
        entry: &crate::bundle::KindEntry,
        model: &dyn perfcast_models::Regressor,
    ) -> Result<Option<f64>> {
        let kind = spec.kind();
        let range = |name: &str| entry.ranges.iter().find(|r| r.name == name);
        let clamp = |name: &str, v: f64| match range(name) {
            Some(r) if r.min <= r.max => v.clamp(r.min, r.max),
            _ => v,
        };
        let config: Vec<i64> = kind
            .config_columns()
            .iter()
            .zip(spec.config())
            .map(|(name, v)| clamp(name, v as f64).round() as i64)
            .collect();
        let Ok(near) = ModuleSpec::from_config(kind, &config) else {
            return Ok(None);
        };
        if near.validate().is_err() {
            return Ok(None);
        }
        let near_context = Context {
            batch: clamp("batch", context.batch as f64).round().max(1.0) as usize,
            threads: clamp("threads", context.threads as f64).round().max(1.0) as usize,
            utilisation: clamp("utilisation", context.utilisation),
            phase: context.phase,
        };
        let device = &self.bundle.manifest.device;
        let xn = row(&near, &near_context, device);
        let Some(roof) = model.schema().index("roofline_ms") else {
            return Ok(None);
        };
        if !(xn[roof] > 0.0 && x[roof] > 0.0) {
            return Ok(None);
        }
        Ok(Some(model.predict_row(&xn)? * x[roof] / xn[roof]))
    }

    /// Many modules, each in its own context.
    pub fn predict_modules(
        &self,
        queries: &[(ModuleSpec, Context)],
    ) -> Result<Vec<ModulePrediction>> {
        queries
            .iter()
            .map(|(s, c)| self.predict_module(s, c))
            .collect()
    }

    /// Checks a network's shapes once and finds its distinct modules, so repeated queries
    /// (other batch sizes, phases) skip both: a VGG-16 has 36 layers but 22 distinct modules.
    pub fn prepare(&self, network: &Network) -> Result<PreparedNetwork> {
        network.check()?;
        let mut unique: Vec<ModuleSpec> = Vec::new();
        let mut layers = Vec::new();
        for (name, spec) in network.modules() {
            let index = match unique.iter().position(|u| u == spec) {
                Some(i) => i,
                None => {
                    unique.push(spec.clone());
                    unique.len() - 1
                }
            };
            layers.push((name.to_string(), spec.describe(), index));
        }
        Ok(PreparedNetwork {
            name: network.name.clone(),
            layers,
            unique,
        })
    }

    /// Every layer of a prepared network in `context`, and their sum.
    pub fn predict_prepared(
        &self,
        network: &PreparedNetwork,
        context: &Context,
    ) -> Result<NetworkPrediction> {
        context.validate()?;
        // `prepare` validated every spec.
        let unique: Vec<ModulePrediction> = network
            .unique
            .iter()
            .map(|spec| {
                self.predict_valid(spec, context).map_err(|e| {
                    let layer = network
                        .layers
                        .iter()
                        .find(|l| &network.unique[l.2] == spec)
                        .map_or("?", |l| l.0.as_str());
                    Error::Query(format!("network `{}`: layer `{layer}`: {e}", network.name))
                })
            })
            .collect::<Result<_>>()?;
        let layers: Vec<LayerPrediction> = network
            .layers
            .iter()
            .map(|(name, module, i)| LayerPrediction {
                name: name.clone(),
                module: module.clone(),
                prediction: unique[*i].clone(),
            })
            .collect();
        let total_ms = layers.iter().map(|l| l.prediction.ms).sum();
        let fallback_layers = layers.iter().filter(|l| l.prediction.fallback).count();
        Ok(NetworkPrediction {
            network: network.name.clone(),
            context: context.clone(),
            layers,
            total_ms,
            fallback_layers,
        })
    }

    /// Every layer of `network` in `context`, and their sum ([`Predictor::prepare`] then
    /// [`Predictor::predict_prepared`]).
    pub fn predict_network(
        &self,
        network: &Network,
        context: &Context,
    ) -> Result<NetworkPrediction> {
        self.predict_prepared(&self.prepare(network)?, context)
    }
}

/// A network checked once, with its distinct modules found ([`Predictor::prepare`]).
#[derive(Clone, Debug)]
pub struct PreparedNetwork {
    name: String,
    /// Per layer: name, description, index into `unique`.
    layers: Vec<(String, String, usize)>,
    unique: Vec<ModuleSpec>,
}

impl PreparedNetwork {
    /// Layers.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// Whether there are no layers.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// Distinct modules among the layers.
    pub fn distinct_modules(&self) -> usize {
        self.unique.len()
    }
}
