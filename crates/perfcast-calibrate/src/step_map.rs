//! A whole step timed on one GPU (the anchor) carried to others with a bundle, PROFET's use:
//! the measured time times the bundle's target/anchor ratio for the same network, beside the
//! plain ratio of peak FLOP/s and the measured time split into the parts the bundle attributes
//! to compute, memory and overhead, each scaled by its own device ratio (`perfcast map
//! --measured-ms`).

use std::path::Path;

use perfcast_core::canonical::least_time_parts_s;
use perfcast_core::{Context, DeviceSpec, Elementwise, ModuleSpec, Network, Phase};
use serde::Serialize;

use crate::error::Result;
use crate::{Bundle, NetworkPrediction, Predictor};

/// What the bundle attributes a step to on one device, ms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct StepParts {
    /// Kernel time of layers paced by their arithmetic (each layer's kernel time shared out by
    /// its least compute and least traffic times).
    pub compute_ms: f64,
    /// Kernel time paced by memory traffic, and the optimizer's update.
    pub memory_ms: f64,
    /// The layers' launch floors.
    pub launch_ms: f64,
    /// Host costs: per step, per layer, the input's copy, the wait on the host's dispatch.
    pub host_ms: f64,
    /// The device's launch floor the layers' floors were counted with, ms per layer.
    pub floor_ms: f64,
}

impl StepParts {
    /// The parts' sum, ms.
    pub fn total_ms(&self) -> f64 {
        self.compute_ms + self.memory_ms + self.launch_ms + self.host_ms
    }

    /// Launch floors and host costs together, ms.
    pub fn overhead_ms(&self) -> f64 {
        self.launch_ms + self.host_ms
    }
}

/// The bundle's answer for the smallest kernel of `phase`: the device's launch floor, ms.
fn launch_floor_ms(predictor: &Predictor, phase: Phase, device: &DeviceSpec) -> f64 {
    let tiny = ModuleSpec::Add(Elementwise { shape: [1, 1, 1] });
    let context = Context {
        batch: 1,
        phase,
        threads: 1,
        utilisation: 0.0,
    };
    match predictor.predict_module(&tiny, &context) {
        Ok(p) if !p.fallback => p.ms,
        _ => device.launch_us.unwrap_or(0.0) / 1e3,
    }
}

/// Splits `prediction` (of `network` at `context` on `device`) into [`StepParts`]. A layer's
/// floor `f` and kernel `k` combine as `sqrt(f^2 + k^2)` in the GPU models, so a layer of `p`
/// ms holds `sqrt(p^2 - f^2)` of kernel; the kernel is shared between compute and memory as
/// the layer's least compute and least traffic times are.
pub fn step_parts(
    predictor: &Predictor,
    network: &Network,
    context: &Context,
    prediction: &NetworkPrediction,
    device: &DeviceSpec,
) -> StepParts {
    let floor = launch_floor_ms(predictor, context.phase, device);
    // Fused layers do not line up with the network's: their shares are the whole network's.
    let whole = (prediction.layers.len() != network.layers.len()).then(|| {
        network.layers.iter().fold((0.0, 0.0), |(c, m), l| {
            let (lc, lm) = least_time_parts_s(&l.spec, context, device);
            (c + lc, m + lm)
        })
    });
    let mut parts = StepParts {
        floor_ms: floor,
        ..StepParts::default()
    };
    for (i, layer) in prediction.layers.iter().enumerate() {
        let p = layer.prediction.ms;
        let kernel = if p > floor {
            (p * p - floor * floor).sqrt()
        } else {
            0.0
        };
        parts.launch_ms += p - kernel;
        let (c, m) =
            whole.unwrap_or_else(|| least_time_parts_s(&network.layers[i].spec, context, device));
        let compute = if c + m > 0.0 { c / (c + m) } else { 0.5 };
        parts.compute_ms += kernel * compute;
        parts.memory_ms += kernel * (1.0 - compute);
    }
    if let Some(c) = &prediction.composed {
        let kernels = parts.compute_ms + parts.memory_ms + parts.launch_ms;
        // The layer scale stretches every part alike.
        let stretch = if kernels > 0.0 {
            1.0 + c.scale_ms / kernels
        } else {
            1.0
        };
        parts.compute_ms *= stretch;
        parts.launch_ms *= stretch;
        parts.memory_ms = parts.memory_ms * stretch + c.update_ms + c.uncached_weights_ms;
        parts.host_ms = c.per_run_ms + c.dispatch_ms + c.copy_ms + c.host_bound_ms;
    }
    parts
}

/// One target of a mapped network step.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MappedStep {
    /// The target (its slug).
    pub device: String,
    /// The bundle's prediction for the target, ms.
    pub predicted_ms: f64,
    /// The measured step times the bundle's target/anchor ratio, ms.
    pub bundle_ratio_ms: f64,
    /// The measured step times the anchor's over the target's peak FLOP/s, ms.
    pub flop_ratio_ms: f64,
    /// The measured step split as the bundle's [`StepParts`] on the anchor, each part scaled
    /// by its own device ratio (peak FLOP/s, memory bandwidth, the specs' measured launch
    /// floors where both have one; host costs as they are), ms.
    pub parts_ratio_ms: f64,
    /// The bundle's parts of the step on the target.
    pub parts: StepParts,
    /// What `map` answers: the bundle ratio on a device the bundle was trained on (or in another
    /// data type than the anchor's); on another, the geometric mean of the two ratios, which
    /// scored better than either with the target left out of training (docs/accuracy.md,
    /// "Anchor mapping on DeepBench").
    pub mapped_ms: f64,
    /// How `mapped_ms` was formed.
    pub method: &'static str,
    /// The spec roofline of the step on the target, ms (no answer is below it).
    pub roofline_ms: f64,
}

/// The anchor's side of a mapping: the bundle's prediction there and its parts.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AnchorStep {
    /// The bundle's prediction on the anchor, ms.
    pub predicted_ms: f64,
    /// The spec roofline of the step on the anchor, ms: no run of it there is faster.
    pub roofline_ms: f64,
    /// Its parts.
    pub parts: StepParts,
}

/// `network` at `context` measured `measured_ms` on `anchor`, mapped to each of `targets` with
/// the bundle at `bundle`; returns the bundle's account of the anchor too.
pub fn map_step(
    bundle: &Path,
    network: &Network,
    context: &Context,
    measured_ms: f64,
    anchor: &DeviceSpec,
    targets: &[DeviceSpec],
) -> Result<(AnchorStep, Vec<MappedStep>)> {
    let predict = |device: &DeviceSpec| -> Result<_> {
        let bundle = Bundle::load_for_device(bundle, device)?;
        let trained = bundle
            .manifest
            .trained_devices
            .iter()
            .any(|d| d.name == device.name && d.dtype == device.dtype);
        let predictor = Predictor::new(bundle);
        let p = predictor.predict_network(network, context)?;
        let parts = step_parts(&predictor, network, context, &p, device);
        Ok((p.total_ms, p.roofline_ms, trained, parts))
    };
    let (anchor_ms, anchor_roofline_ms, _, anchor_parts) = predict(anchor)?;
    // The measured time shared out as the bundle shares its own answer on the anchor.
    let share = measured_ms / anchor_parts.total_ms().max(f64::MIN_POSITIVE);
    let mut out = Vec::with_capacity(targets.len());
    for target in targets {
        let (predicted_ms, roofline_ms, trained, parts) = predict(target)?;
        let bundle_ratio_ms = measured_ms * predicted_ms / anchor_ms;
        let flop_ratio_ms = measured_ms * anchor.peak_gflops / target.peak_gflops;
        // Launches are the host's and the driver's work: alike across GPUs unless both specs
        // carry a measured floor.
        let launch_ratio = match (anchor.launch_us, target.launch_us) {
            (Some(a), Some(t)) if a > 0.0 && t > 0.0 => t / a,
            _ => 1.0,
        };
        let parts_ratio_ms = share
            * (anchor_parts.compute_ms * anchor.peak_gflops / target.peak_gflops
                + anchor_parts.memory_ms * anchor.mem_bandwidth_gbs / target.mem_bandwidth_gbs
                + anchor_parts.launch_ms * launch_ratio
                + anchor_parts.host_ms);
        let (mapped_ms, method) = if trained {
            (
                bundle_ratio_ms,
                "bundle ratio (a training device of the bundle)",
            )
        } else if target.dtype != anchor.dtype {
            // Peaks of two data types do not compare the way the same kernels do.
            (
                bundle_ratio_ms,
                "bundle ratio (another data type than the anchor's)",
            )
        } else {
            (
                (bundle_ratio_ms * flop_ratio_ms).sqrt(),
                "geometric mean of the bundle and FLOP ratios (target not trained on)",
            )
        };
        out.push(MappedStep {
            device: target.slug(),
            predicted_ms,
            bundle_ratio_ms,
            flop_ratio_ms,
            parts_ratio_ms,
            parts,
            mapped_ms: mapped_ms.max(roofline_ms),
            method,
            roofline_ms,
        });
    }
    Ok((
        AnchorStep {
            predicted_ms: anchor_ms,
            roofline_ms: anchor_roofline_ms,
            parts: anchor_parts,
        },
        out,
    ))
}
