//! Whole networks measured against a bundle's predictions: the host-cost terms fitted to
//! measured runs (`perfcast calibrate`) and measured runs set beside the plain sum of layer
//! predictions and the composed prediction (`perfcast eval networks`).
//!
//! ```no_run
//! use perfcast_calibrate::calibrate::{calibrate, labelled};
//! use perfcast_calibrate::{Bundle, Predictor};
//!
//! let predictor = Predictor::new(Bundle::load("checkpoints/local".as_ref())?);
//! let runs = labelled(perfcast_data::networks::read_networks("runs.jsonl".as_ref())?);
//! let costs = calibrate(&predictor, &runs, None)?;
//! println!("{} networks", costs.networks.len());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::Path;

use perfcast_core::progress::Observer;
use perfcast_core::{Context, Network, Phase};
use perfcast_data::networks::NetworkRecord;
use serde::Serialize;

use crate::compose::{self, Composed, FRESH_TENSOR_UPDATE_BYTES, HostCosts, RunShape};
use crate::error::{Error, Result};
use crate::predictor::{LayerPrediction, Predictor, linear_ms_of};
use crate::{Bundle, Manifest};

/// Each run with its label (`vgg16@112` for a zoo network built at another resolution, its
/// name otherwise).
pub fn labelled(records: Vec<NetworkRecord>) -> Vec<(String, NetworkRecord)> {
    records
        .into_iter()
        .map(|r| {
            let label = match r.resolution {
                Some(res) => format!("{}@{res}", r.network.name),
                None => r.network.name.clone(),
            };
            (label, r)
        })
        .collect()
}

/// One network run measured and predicted.
#[derive(Clone, Debug, Serialize)]
pub struct Compared {
    /// The run's label.
    pub network: String,
    /// Batch size.
    pub batch: usize,
    /// Phase.
    pub phase: Phase,
    /// Measured median, ms.
    pub measured_ms: f64,
    /// The layers measured one by one and summed, when measured.
    pub measured_layer_sum_ms: Option<f64>,
    /// The plain sum of the layers' predictions, ms.
    pub plain_ms: f64,
    /// Its error against the measurement, percent.
    pub plain_error_pct: f64,
    /// With the host-cost terms; absent when there are none for the phase.
    pub composed: Option<Composed>,
    /// Its error against the measurement, percent.
    pub composed_error_pct: Option<f64>,
    /// Layers the bundle has no model for (predicted from the spec roofline).
    pub fallback_layers: usize,
    /// What its linear layers pay for weights read from memory, ms (in `composed` too).
    pub uncached_weights_ms: f64,
    /// Each distinct layer measured alone beside its prediction, furthest first (empty
    /// unless the run was measured with `--layers`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub layers: Vec<LayerError>,
}

/// One distinct layer of a run (every layer with its module), measured alone and predicted.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LayerError {
    /// The first layer's name.
    pub name: String,
    /// The module, in words.
    pub module: String,
    /// Layers of the run with this module.
    pub count: usize,
    /// Their measured times summed, ms.
    pub measured_ms: f64,
    /// Their predictions summed, ms.
    pub predicted_ms: f64,
    /// Its error against the measurement, percent (0 for a layer measured at 0).
    pub error_pct: f64,
}

/// The distinct layers of a run, each one's measured times (`measured`, per layer in order)
/// beside its predictions, sorted by how far the prediction is from the measurement in ms,
/// so the layers that move the network's error most come first. Empty when the two lists
/// are not one entry per layer.
pub fn layer_errors(predicted: &[LayerPrediction], measured: &[f64]) -> Vec<LayerError> {
    if predicted.len() != measured.len() {
        return Vec::new();
    }
    let mut out: Vec<LayerError> = Vec::new();
    let mut at: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (p, &m) in predicted.iter().zip(measured) {
        let i = *at.entry(&p.module).or_insert_with(|| {
            out.push(LayerError {
                name: p.name.to_string(),
                module: p.module.to_string(),
                count: 0,
                measured_ms: 0.0,
                predicted_ms: 0.0,
                error_pct: 0.0,
            });
            out.len() - 1
        });
        let e = &mut out[i];
        e.count += 1;
        e.measured_ms += m;
        e.predicted_ms += p.prediction.ms;
    }
    for e in &mut out {
        if e.measured_ms > 0.0 {
            e.error_pct = 100.0 * (e.predicted_ms - e.measured_ms) / e.measured_ms;
        }
    }
    let gap = |e: &LayerError| (e.predicted_ms - e.measured_ms).abs();
    out.sort_by(|a, b| gap(b).total_cmp(&gap(a)));
    out
}

/// Predicts every run as the sum of its layers and, with `costs`, composed with them.
pub fn compare(
    predictor: &Predictor,
    runs: &[(String, NetworkRecord)],
    costs: Option<&HostCosts>,
) -> Result<Vec<Compared>> {
    runs.iter()
        .map(|(label, r)| {
            let context = run_context(r);
            let p = predictor.predict_network(&r.network, &context)?;
            // Plain: the layers alone; composed: with the host costs under evaluation (the
            // bundle's, or those of a leave-one-network-out fit).
            let shape = predictor.run_shape(&r.network, p.layer_sum_ms, &context);
            let uncached =
                predictor.uncached_weights_ms(&shape, &context, || linear_ms_of(&p.layers));
            let composed = costs
                .and_then(|c| c.phase(r.phase))
                .map(|c| c.compose(&shape).with_uncached_weights(uncached));
            let m = r.timing.median_ms;
            let err = |x: f64| 100.0 * (x - m) / m;
            Ok(Compared {
                network: label.clone(),
                batch: r.batch,
                phase: r.phase,
                measured_ms: m,
                measured_layer_sum_ms: r.layer_sum_ms,
                plain_ms: p.layer_sum_ms,
                plain_error_pct: err(p.layer_sum_ms),
                composed_error_pct: composed.as_ref().map(|c| err(c.total_ms)),
                composed,
                fallback_layers: p.fallback_layers,
                uncached_weights_ms: uncached,
                layers: r
                    .layer_ms
                    .as_deref()
                    .map_or_else(Vec::new, |m| layer_errors(&p.layers, m)),
            })
        })
        .collect()
}

/// Refuses a prior strength that is negative or not a number.
pub fn check_lambda(lambda: Option<f64>) -> Result<()> {
    match lambda {
        Some(l) if !(l.is_finite() && l >= 0.0) => Err(Error::Input(format!(
            "`--lambda` must be a non-negative number, got {l}"
        ))),
        _ => Ok(()),
    }
}

/// Fits the host-cost terms of the predictor's bundle to measured `runs`: per phase a per-run
/// cost, a per-layer cost, a scale on the layer sum and (training) the optimiser update per
/// parameter, with the prior's strength `lambda` (default: chosen by leave-one-network-out
/// cross-validation). A phase the runs do not cover keeps the bundle's earlier terms.
pub fn calibrate(
    predictor: &Predictor,
    runs: &[(String, NetworkRecord)],
    lambda: Option<f64>,
) -> Result<HostCosts> {
    check_lambda(lambda)?;
    let manifest = &predictor.bundle().manifest;
    let compared = compare(predictor, runs, None)?;
    let threads = runs.first().map(|(_, r)| r.threads).unwrap_or(1);
    if !runs.iter().all(|(_, r)| r.threads == threads) {
        return Err(Error::Input(
            "calibration runs must share one thread count".into(),
        ));
    }
    let mut costs = HostCosts {
        inference: None,
        training: None,
        networks: Vec::new(),
        threads,
    };
    for (label, _) in runs {
        if !costs.networks.contains(label) {
            costs.networks.push(label.clone());
        }
    }
    for phase in [Phase::Inference, Phase::Training] {
        let (data, groups): (Vec<(RunShape, f64)>, Vec<String>) = runs
            .iter()
            .zip(&compared)
            .filter(|((_, r), _)| r.phase == phase)
            .map(|((label, r), c)| {
                // The uncached-weights term is measured by the device probe, not fitted: the
                // other terms explain what it leaves.
                let shape = predictor.run_shape(&r.network, c.plain_ms, &run_context(r));
                (
                    (shape, r.timing.median_ms - c.uncached_weights_ms),
                    label.clone(),
                )
            })
            .unzip();
        if data.is_empty() {
            continue;
        }
        let lambdas: Vec<f64> = match lambda {
            Some(l) => vec![l],
            None => compose::LAMBDAS.to_vec(),
        };
        // The update's own duration is measured inside every training step: fit its cost per
        // parameter directly (tensors the allocator maps afresh every step apart) rather than
        // leave it to the network-level fit.
        let update = compose::fit_update(
            &runs
                .iter()
                .zip(&compared)
                .filter(|((_, r), _)| r.phase == Phase::Training)
                .filter_map(|((_, r), c)| {
                    Some((
                        RunShape::of(&r.network, c.plain_ms),
                        r.update_ms?,
                        r.timing.median_ms,
                    ))
                })
                .collect::<Vec<_>>(),
            FRESH_TENSOR_UPDATE_BYTES,
        );
        let fitted = compose::fit_phase_cv(phase, &data, &groups, &lambdas, 0.01, update.as_ref())
            .map_err(|e| Error::Input(format!("calibrating {phase}: {e}")))?;
        match phase {
            Phase::Inference => costs.inference = Some(fitted),
            Phase::Training => costs.training = Some(fitted),
        }
    }
    if let Some(old) = &manifest.host_costs {
        // Keep a phase calibrated earlier when this run did not cover it.
        costs.inference = costs.inference.or_else(|| old.inference.clone());
        costs.training = costs.training.or_else(|| old.training.clone());
    }
    Ok(costs)
}

/// The context a measured run was timed in.
fn run_context(r: &NetworkRecord) -> Context {
    Context {
        batch: r.batch,
        phase: r.phase,
        threads: r.threads,
        utilisation: 0.0,
    }
}

/// Fits the host-cost terms of `bundle` (loaded from `dir`) to measured `runs` and, unless
/// `dry_run`, stores them in its manifest: `perfcast calibrate` and the quickstart's last step.
pub fn calibrate_bundle(
    bundle: Bundle,
    dir: &Path,
    runs: &[(String, NetworkRecord)],
    lambda: Option<f64>,
    dry_run: bool,
) -> Result<HostCosts> {
    let mut manifest = bundle.manifest.clone();
    let costs = calibrate(&Predictor::new(bundle), runs, lambda)?;
    manifest.host_costs = Some(costs.clone());
    if !dry_run {
        rewrite_manifest(dir, &manifest)?;
    }
    Ok(costs)
}

/// Replaces an existing bundle's `manifest.json` atomically (the model files stay), so
/// calibration never rewrites the models. The bundle must load before.
pub fn rewrite_manifest(dir: &Path, manifest: &Manifest) -> Result<()> {
    Bundle::read_manifest(dir)?;
    let path = dir.join("manifest.json");
    let err = |message: String| Error::Bundle {
        path: path.clone(),
        message,
    };
    let json = serde_json::to_vec_pretty(manifest).map_err(|e| err(e.to_string()))?;
    perfcast_data::write_atomic(&path, &json).map_err(|e| err(e.to_string()))?;
    Ok(())
}

/// One phase's runs and errors.
#[derive(Clone, Debug, Serialize)]
pub struct PhaseSummary {
    /// Phase.
    pub phase: Phase,
    /// Runs of the phase.
    pub runs: usize,
    /// MAPE of the plain sum, percent.
    pub plain_mape: f64,
    /// MAPE of the composed prediction, percent (none without host-cost terms).
    pub composed_mape: Option<f64>,
}

/// Measured runs beside a bundle's predictions (`perfcast eval networks`).
#[derive(Clone, Debug, Serialize)]
pub struct NetworksEval {
    /// The bundle.
    pub bundle: std::path::PathBuf,
    /// Its host-cost terms.
    pub host_costs: Option<HostCosts>,
    /// Every run.
    pub runs: Vec<Compared>,
    /// Per phase: runs, plain-sum MAPE, composed MAPE.
    pub summary: Vec<PhaseSummary>,
}

/// Sets every run beside the predictor's plain sum and its composed prediction (with the
/// bundle's host-cost terms, when it has them), with the MAPE per phase. A warning goes to
/// `observer` when the terms were fitted at another thread count than the runs use.
pub fn evaluate_networks(
    predictor: &Predictor,
    bundle: &std::path::Path,
    runs: &[(String, NetworkRecord)],
    observer: &dyn Observer,
) -> Result<NetworksEval> {
    let costs = predictor.bundle().manifest.host_costs.clone();
    let compared = compare(predictor, runs, costs.as_ref())?;
    if let (Some(c), Some((_, r))) = (&costs, runs.first())
        && c.threads != r.threads
    {
        observer.note(&format!(
            "warning: the host-cost terms were fitted at {} thread(s), these runs use {}",
            c.threads, r.threads
        ));
    }
    let mut summary = Vec::new();
    for phase in [Phase::Inference, Phase::Training] {
        let rows: Vec<&Compared> = compared.iter().filter(|c| c.phase == phase).collect();
        if rows.is_empty() {
            continue;
        }
        let measured: Vec<f64> = rows.iter().map(|c| c.measured_ms).collect();
        let plain: Vec<f64> = rows.iter().map(|c| c.plain_ms).collect();
        let composed: Option<Vec<f64>> = rows
            .iter()
            .map(|c| c.composed.as_ref().map(|x| x.total_ms))
            .collect();
        summary.push(PhaseSummary {
            phase,
            runs: rows.len(),
            plain_mape: compose::mape(&plain, &measured),
            composed_mape: composed.map(|p| compose::mape(&p, &measured)),
        });
    }
    Ok(NetworksEval {
        bundle: bundle.to_path_buf(),
        host_costs: costs,
        runs: compared,
        summary,
    })
}

/// A network's predicted time: the sum of its layers, composed with the bundle's host-cost
/// terms for the phase when it has them.
pub fn network_ms(predictor: &Predictor, network: &Network, context: &Context) -> Result<f64> {
    let p = predictor.predict_network(network, context)?;
    let shape = predictor.run_shape(network, p.layer_sum_ms, context);
    let uncached = predictor.uncached_weights_ms(&shape, context, || linear_ms_of(&p.layers));
    let sum = p.layer_sum_ms;
    Ok(predictor
        .bundle()
        .manifest
        .host_costs
        .as_ref()
        .and_then(|c| c.phase(context.phase))
        .map_or(sum, |c| {
            c.compose(&shape).with_uncached_weights(uncached).total_ms
        }))
}

/// Each network's composed inference and training-step time (ms) at each batch size, on
/// `threads` threads: the quickstart's closing table, as (label, batch, inference, training).
pub fn network_table(
    predictor: &Predictor,
    networks: &[perfcast_core::NetworkChoice],
    batches: &[usize],
    threads: usize,
) -> Result<Vec<(String, usize, f64, f64)>> {
    let mut rows = Vec::new();
    for choice in networks {
        for &batch in batches {
            let at = |phase| {
                let context = Context {
                    batch,
                    phase,
                    threads,
                    utilisation: 0.0,
                };
                network_ms(predictor, &choice.network, &context)
            };
            rows.push((
                choice.label.clone(),
                batch,
                at(Phase::Inference)?,
                at(Phase::Training)?,
            ));
        }
    }
    Ok(rows)
}
