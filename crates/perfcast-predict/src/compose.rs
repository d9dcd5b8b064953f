//! Network composition beyond a plain sum of layer predictions (PerfNetV2's pre + Σ + post).
//!
//! Layers timed alone miss costs a whole network pays, and include costs it does not: a network
//! run has per-run setup and a loss, dispatch and allocation between layers, one backward pass
//! over the whole graph instead of one per layer, and in training the optimiser update over every
//! parameter. [`PhaseCosts`] models a run as
//!
//! ```text
//! total = per_run_ms + layer_scale * Σ layer predictions + per_layer_ms * layers
//!         + update_ms_per_mparam * parameters / 1e6          (training only)
//! ```
//!
//! with the terms fitted per phase from measured networks (perfcast-calibrate's `compose::fit_phase`,
//! behind `perfcast calibrate`) and stored in the bundle's manifest ([`HostCosts`]). The terms are
//! kept apart in every prediction ([`Composed`]), so a user sees what the host costs add.

use perfcast_core::{Network, Phase};
use serde::{Deserialize, Serialize};

/// The fitted host-cost terms of one phase.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhaseCosts {
    /// Fixed cost per run (setup, input, loss, output), ms.
    pub per_run_ms: f64,
    /// Cost per layer that isolated layer timings miss (negative when isolated timings carry a
    /// per-call cost a network pays once, such as a backward pass per layer), ms.
    pub per_layer_ms: f64,
    /// Factor on the sum of layer predictions (cache effects between layers).
    pub layer_scale: f64,
    /// Optimiser update per million parameters held in tensors that fit in cache, ms
    /// (training; 0 for inference).
    pub update_ms_per_mparam: f64,
    /// Optimiser update per million parameters held in tensors too large for cache (their
    /// parameters, gradients and velocities stream from memory), ms.
    #[serde(default)]
    pub update_large_ms_per_mparam: f64,
    /// A parameter tensor is large when its update streams more than this many bytes
    /// (parameter, gradient, velocity: 12 bytes per parameter); the device's last-level cache.
    /// `None`: one rate for every tensor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub large_tensor_bytes: Option<f64>,
    /// Host-to-device rate of the input batch, GB/s: a GPU step copies its input over the
    /// instance's link (`copy = batch x input bytes / rate`). `None`: no copy term (calibrated
    /// terms fold the copy into `per_run_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_gbs: Option<f64>,
    /// Calibration runs the terms were fitted on (0: [`PhaseCosts::gpu_defaults`]).
    pub runs: usize,
    /// MAPE (%) of the plain sum on the calibration runs.
    pub plain_mape: f64,
    /// MAPE (%) of the composed prediction on the calibration runs (in-sample).
    pub fit_mape: f64,
    /// The prior's strength the terms were fitted with.
    #[serde(default)]
    pub lambda: f64,
    /// Leave-one-network-out MAPE (%) of the composed prediction at that strength: each
    /// network predicted by terms fitted on the others (absent with fewer than 3 networks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cv_mape: Option<f64>,
    /// Leave-one-network-out MAPE (%) of the plain sum, for comparison.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cv_plain_mape: Option<f64>,
}

/// Bytes one parameter's update streams: the parameter, its gradient and its velocity.
const UPDATE_BYTES_PER_PARAM: f64 = 12.0;

/// A GPU's SGD-with-momentum update per parameter: parameter, gradient and velocity read,
/// parameter and velocity written, 4 bytes each.
const GPU_UPDATE_BYTES_PER_PARAM: f64 = 20.0;
/// Share of the memory bandwidth a framework's fused optimiser update reaches (measured on the
/// H100, docs/accuracy.md).
const GPU_UPDATE_EFFICIENCY: f64 = 0.5;
/// Fixed cost of a GPU step besides its layers (the loss, the optimiser's launches), ms.
const GPU_PER_STEP_MS: f64 = 0.1;
/// Host-to-device rate of an input batch copied from pageable memory, GB/s (the H100 host's
/// copies, docs/accuracy.md; a pinned, prefetched pipeline hides it).
pub const GPU_PAGEABLE_COPY_GBS: f64 = 8.0;

/// Host-cost terms per phase, and what they were fitted on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostCosts {
    /// Terms for inference runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inference: Option<PhaseCosts>,
    /// Terms for training steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub training: Option<PhaseCosts>,
    /// Calibration networks (names with resolution), for the record.
    pub networks: Vec<String>,
    /// Threads the calibration runs used.
    pub threads: usize,
}

impl PhaseCosts {
    /// A GPU training step's framework terms from the device's spec alone, for a bundle never
    /// calibrated on whole networks: the input batch copied host to device at
    /// [`GPU_PAGEABLE_COPY_GBS`], the optimiser update streaming its state at half the memory
    /// bandwidth, a fixed per-step cost; layers as predicted.
    pub fn gpu_defaults(device: &perfcast_core::DeviceSpec) -> PhaseCosts {
        PhaseCosts {
            per_run_ms: GPU_PER_STEP_MS,
            per_layer_ms: 0.0,
            layer_scale: 1.0,
            // ms per million parameters: bytes / (GB/s x 1e9) s, x 1e3 ms.
            update_ms_per_mparam: 1e6 * GPU_UPDATE_BYTES_PER_PARAM
                / (GPU_UPDATE_EFFICIENCY * device.mem_bandwidth_gbs.max(1e-9) * 1e9)
                * 1e3,
            update_large_ms_per_mparam: 0.0,
            large_tensor_bytes: None,
            input_gbs: Some(GPU_PAGEABLE_COPY_GBS),
            runs: 0,
            plain_mape: 0.0,
            fit_mape: 0.0,
            lambda: 0.0,
            cv_mape: None,
            cv_plain_mape: None,
        }
    }
}

impl HostCosts {
    /// The terms of a phase, if calibrated.
    pub fn phase(&self, phase: Phase) -> Option<&PhaseCosts> {
        match phase {
            Phase::Inference => self.inference.as_ref(),
            Phase::Training => self.training.as_ref(),
        }
    }
}

/// What a network run is made of, besides its layers' predictions.
#[derive(Clone, Debug, PartialEq)]
pub struct RunShape {
    /// Sum of the layers' predicted latencies, ms.
    pub layer_sum_ms: f64,
    /// Layers per forward pass.
    pub layers: usize,
    /// Trainable parameters.
    pub params: usize,
    /// Elements of every trainable parameter tensor.
    pub tensors: Vec<usize>,
    /// Elements of one sample's input.
    pub input_elems: usize,
    /// Samples per run (the input copy's multiple).
    pub batch: usize,
}

impl RunShape {
    /// Parameters in tensors whose update streams more than `large_bytes`.
    pub fn large_params(&self, large_bytes: f64) -> usize {
        self.tensors
            .iter()
            .filter(|&&n| n as f64 * UPDATE_BYTES_PER_PARAM > large_bytes)
            .sum()
    }
}

/// The trainable parameter tensors of a module, by element count (as burn's layers hold them).
pub fn param_tensors(spec: &perfcast_core::ModuleSpec) -> Vec<usize> {
    let mut t = Vec::new();
    push_param_tensors(spec, &mut t);
    t
}

/// [`param_tensors`] appended to `out`.
fn push_param_tensors(spec: &perfcast_core::ModuleSpec, out: &mut Vec<usize>) {
    use perfcast_core::ModuleSpec as M;
    match spec {
        M::Conv2d(c) => {
            out.push(
                c.out_channels * (c.in_channels / c.groups.max(1)) * c.kernel[0] * c.kernel[1],
            );
            if c.bias {
                out.push(c.out_channels);
            }
        }
        M::Linear(l) => {
            out.push(l.in_features * l.out_features);
            if l.bias {
                out.push(l.out_features);
            }
        }
        M::BatchNorm2d(b) => out.extend([b.channels, b.channels]),
        M::LayerNorm(l) => out.extend([l.features, l.features]),
        _ => {}
    }
}

/// A composed network prediction, term by term.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Composed {
    /// Sum of the layers' predictions, ms.
    pub layer_sum_ms: f64,
    /// Per-run cost, ms.
    pub per_run_ms: f64,
    /// Layer-scale adjustment `(layer_scale - 1) * layer_sum_ms`, ms.
    pub scale_ms: f64,
    /// Per-layer costs `per_layer_ms * layers`, ms.
    pub dispatch_ms: f64,
    /// Optimiser update, ms.
    pub update_ms: f64,
    /// The input batch copied host to device, ms (GPU steps).
    #[serde(default)]
    pub copy_ms: f64,
    /// Whether the terms are [`PhaseCosts::gpu_defaults`] rather than calibrated.
    #[serde(default)]
    pub from_spec: bool,
    /// The composed total, ms.
    pub total_ms: f64,
}

/// The composed total never falls below this share of the plain sum: terms fitted on other
/// networks must not cancel a large network's layers.
const FLOOR_SHARE: f64 = 0.5;

impl PhaseCosts {
    /// Composes a run from its layers' sum and shape.
    pub fn compose(&self, run: &RunShape) -> Composed {
        self.compose_sum(run, run.layer_sum_ms, run.batch)
    }

    /// [`PhaseCosts::compose`] of `run` with its layers summing to `layer_sum_ms` at `batch`
    /// (a prepared network's shape, reused without a copy).
    pub(crate) fn compose_sum(&self, run: &RunShape, layer_sum_ms: f64, batch: usize) -> Composed {
        let scale_ms = (self.layer_scale - 1.0) * layer_sum_ms;
        let dispatch_ms = self.per_layer_ms * run.layers as f64;
        let large = run.large_params(self.large_tensor_bytes.unwrap_or(f64::INFINITY));
        let update_ms = (self.update_ms_per_mparam * (run.params - large) as f64
            + self.update_large_ms_per_mparam * large as f64)
            / 1e6;
        let copy_ms = self.input_gbs.map_or(0.0, |gbs| {
            (batch * run.input_elems) as f64 * perfcast_core::features::F32_BYTES
                / (gbs.max(1e-9) * 1e6)
        });
        let total = layer_sum_ms + self.per_run_ms + scale_ms + dispatch_ms + update_ms + copy_ms;
        Composed {
            layer_sum_ms,
            per_run_ms: self.per_run_ms,
            scale_ms,
            dispatch_ms,
            update_ms,
            copy_ms,
            from_spec: self.runs == 0,
            total_ms: total.max(FLOOR_SHARE * layer_sum_ms),
        }
    }
}

impl RunShape {
    /// The shape of a run of `network` whose layers' predictions sum to `layer_sum_ms`.
    pub fn of(network: &Network, layer_sum_ms: f64) -> RunShape {
        let mut tensors = Vec::new();
        for l in &network.layers {
            push_param_tensors(&l.spec, &mut tensors);
        }
        RunShape {
            layer_sum_ms,
            layers: network.layers.len(),
            params: tensors.iter().sum(),
            tensors,
            input_elems: network.input.iter().product(),
            batch: 1,
        }
    }
}

/// A plain sum, as a [`Composed`] with no host terms.
pub fn plain(run: &RunShape) -> Composed {
    Composed {
        layer_sum_ms: run.layer_sum_ms,
        per_run_ms: 0.0,
        scale_ms: 0.0,
        dispatch_ms: 0.0,
        update_ms: 0.0,
        copy_ms: 0.0,
        from_spec: false,
        total_ms: run.layer_sum_ms,
    }
}
