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
//!         + uncached weights                                  (inference, see below)
//! ```
//!
//! A GPU step's host side ([`HostFloor`]) runs ahead of the GPU, so it is not a term but a
//! floor: the step waits for the host only when the host's work is longer than the rest.
//!
//! A layer timed alone keeps weights that fit the cache hot between repetitions; in a network
//! whose weights pass the last-level cache they come from memory on every pass. The device's
//! probe ([`perfcast_core::UncachedWeights`]) says what that costs a linear layer's GEMM per MB
//! at its rows per call, and [`uncached_weights_ms`] adds it for every linear layer whose
//! weights fit the cache alone. Training steps are left alone: their measured steps showed no
//! such gap (docs/accuracy.md).
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
    /// Optimiser update per million parameters held in tensors below `large_tensor_bytes`, ms
    /// (training; 0 for inference).
    pub update_ms_per_mparam: f64,
    /// Optimiser update per million parameters held in large tensors (`large_tensor_bytes`),
    /// ms.
    #[serde(default)]
    pub update_large_ms_per_mparam: f64,
    /// Optimiser update per million parameters held in convolution weights below
    /// `large_tensor_bytes`, ms: a CPU backend updates them slower than a linear layer's
    /// weights of the same size. `None`: the small tensors' rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_conv_ms_per_mparam: Option<f64>,
    /// A parameter tensor is large when its update streams at least this many bytes
    /// (parameter, gradient, velocity: 12 bytes per parameter); calibration sets
    /// [`FRESH_TENSOR_UPDATE_BYTES`] (bundles calibrated before it: the last-level cache).
    /// `None`: one rate for every tensor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub large_tensor_bytes: Option<f64>,
    /// Host-to-device rate of the input batch, GB/s: a GPU step copies its input over the
    /// instance's link (`copy = batch x input bytes / rate`). `None`: no copy term (calibrated
    /// terms fold the copy into `per_run_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_gbs: Option<f64>,
    /// A GPU step's host side, which the GPU runs behind ([`HostFloor`]); `None`: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_floor: Option<HostFloor>,
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

/// The framework's host work in a GPU step: launching every layer's kernels (forward and
/// backward), the loss, the optimiser and the gradients' reset. The GPU runs behind it, so a
/// step takes the longer of the host's work and the GPU's; small networks and small inputs are
/// paced by the host.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostFloor {
    /// Host work per step besides the layers, ms.
    pub per_step_ms: f64,
    /// Host work per layer, ms.
    pub per_layer_ms: f64,
}

/// A GPU training step's host work per step and per layer, ms: PyTorch eager on the H100's
/// host, fitted on its whole CNN steps (docs/accuracy.md).
pub const GPU_HOST_FLOOR: HostFloor = HostFloor {
    per_step_ms: 1.0,
    per_layer_ms: 0.08,
};

/// Bytes one parameter's update streams: the parameter, its gradient and its velocity.
pub const UPDATE_BYTES_PER_PARAM: f64 = 12.0;

/// The smallest buffer glibc's malloc maps afresh on every allocation from a worker thread (the
/// size of its thread arenas' heaps), bytes: such a tensor's new buffers page-fault on every
/// step, where smaller ones reuse memory the step freed.
pub const FRESH_BUFFER_BYTES: f64 = 64.0 * 1024.0 * 1024.0;

/// The update bytes ([`UPDATE_BYTES_PER_PARAM`]) of a tensor whose fp32 buffer is
/// [`FRESH_BUFFER_BYTES`]: calibration's `large_tensor_bytes`, because the page faults, not the
/// cache, set the large tensors' rate on a CPU.
pub const FRESH_TENSOR_UPDATE_BYTES: f64 =
    FRESH_BUFFER_BYTES / perfcast_core::features::F32_BYTES * UPDATE_BYTES_PER_PARAM;

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
    /// bandwidth, a fixed per-step cost, and the host's dispatch ([`GPU_HOST_FLOOR`]) as the
    /// least the rest can take; layers as predicted.
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
            update_conv_ms_per_mparam: None,
            large_tensor_bytes: None,
            input_gbs: Some(GPU_PAGEABLE_COPY_GBS),
            host_floor: Some(GPU_HOST_FLOOR),
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
    /// Elements of every convolution weight tensor (also in `tensors`).
    pub conv_tensors: Vec<usize>,
    /// Elements of one sample's input.
    pub input_elems: usize,
    /// Samples per run (the input copy's multiple).
    pub batch: usize,
    /// Every linear layer's weights, for the uncached-weights term.
    pub linears: Vec<LinearWeights>,
    /// Elements of each weight-gradient buffer a training step's per-sample GEMMs write
    /// before summing them over the batch ([`RunShape::with_per_sample_grads`]; empty
    /// otherwise).
    pub per_sample_grads: Vec<usize>,
}

/// A linear layer's weight matrix and the rows it multiplies per sample.
#[derive(Clone, Debug, PartialEq)]
pub struct LinearWeights {
    /// Bytes of the weight matrix (fp32).
    pub bytes: f64,
    /// Rows (tokens) per sample.
    pub tokens: usize,
    /// Output features (the GEMM's columns).
    pub out_features: usize,
}

impl LinearWeights {
    /// GEMM calls of the layer over `batch` samples: one, or one per sample where the backend
    /// keeps them apart ([`linear_gemm_rows`]).
    pub fn gemm_calls(&self, batch: usize) -> usize {
        let rows = linear_gemm_rows(batch, self.tokens, self.out_features).max(1);
        (batch.max(1) * self.tokens.max(1)).div_ceil(rows).max(1)
    }
}

/// Rows per GEMM call of a linear layer over `batch` samples of `tokens` rows each, as burn
/// runs it: one GEMM over every row, except where its matmul policy keeps the samples apart
/// (one sample; rows already a whole number of 32-row tiles; folding that does not bring the
/// output closer to square), which runs one GEMM of `tokens` rows per sample.
pub fn linear_gemm_rows(batch: usize, tokens: usize, out_features: usize) -> usize {
    let merged = batch.saturating_mul(tokens);
    let squarer = |new: usize, old: usize, cols: usize| {
        new.min(cols) as u128 * old.max(cols) as u128
            > old.min(cols) as u128 * new.max(cols) as u128
    };
    if batch <= 1 || tokens.is_multiple_of(32) || !squarer(merged, tokens, out_features) {
        tokens
    } else {
        merged
    }
}

/// What a run's linear layers pay for weights that come from memory, ms: zero unless the
/// network's parameters pass `cache_bytes`; then every linear layer whose weights fit the cache
/// alone (so its isolated timing had them cached) pays for reading them from memory at its rows
/// per call. With a probe's floors, that is whatever the floor (ms per MB times the layer's MB)
/// exceeds the layer's first GEMM call as predicted (`linear_ms`, the layers' predictions in
/// the order of `run.linears`); with an older probe's extras, the extra per MB. A layer's
/// weights come from memory once per pass even when it runs one GEMM per sample: the later
/// samples find them cached.
pub fn uncached_weights_ms(
    run: &RunShape,
    batch: usize,
    probe: &perfcast_core::UncachedWeights,
    cache_bytes: f64,
    linear_ms: &[f64],
) -> f64 {
    let weights = run.params as f64 * perfcast_core::features::F32_BYTES;
    if cache_bytes.is_nan() || cache_bytes <= 0.0 || weights <= cache_bytes {
        return 0.0;
    }
    run.linears
        .iter()
        .enumerate()
        .filter(|(_, l)| l.bytes <= cache_bytes)
        .map(|(i, l)| {
            let rows = linear_gemm_rows(batch, l.tokens, l.out_features);
            let mb = l.bytes / 1e6;
            if probe.floor_ms_per_mb.is_empty() {
                return probe.ms_per_mb_at(rows) * mb;
            }
            // A layer whose prediction is unknown is charged nothing rather than guessed at.
            let Some(&ms) = linear_ms.get(i) else {
                return 0.0;
            };
            (probe.floor_ms_per_mb_at(rows) * mb - ms / l.gemm_calls(batch) as f64).max(0.0)
        })
        .sum()
}

impl RunShape {
    /// Parameters in tensors whose update streams at least `large_bytes`.
    pub fn large_params(&self, large_bytes: f64) -> usize {
        self.tensors
            .iter()
            .filter(|&&n| n as f64 * UPDATE_BYTES_PER_PARAM >= large_bytes)
            .sum()
    }

    /// Parameters in convolution weights whose update streams less than `large_bytes`.
    pub fn small_conv_params(&self, large_bytes: f64) -> usize {
        self.conv_tensors
            .iter()
            .filter(|&&n| (n as f64 * UPDATE_BYTES_PER_PARAM) < large_bytes)
            .sum()
    }

    /// This run with the weight gradients its per-sample GEMMs write at `batch` (a CPU
    /// training step): burn's backward of a linear layer that runs one GEMM per sample
    /// computes each sample's weight gradient into one `[calls, in, out]` buffer and then
    /// sums it over the calls, so the step writes and reads `calls` times the weights.
    pub fn with_per_sample_grads(mut self, batch: usize) -> RunShape {
        self.per_sample_grads = self
            .linears
            .iter()
            .filter_map(|l| {
                let calls = l.gemm_calls(batch);
                let weights = (l.bytes / perfcast_core::features::F32_BYTES).round() as usize;
                (calls > 1).then(|| calls * weights)
            })
            .collect();
        self
    }

    /// Millions of per-sample gradient elements in buffers the update's split would call
    /// small and large (`large_bytes` streamed per update of a tensor that size).
    pub fn per_sample_grad_split(&self, large_bytes: f64) -> [f64; 2] {
        let large: usize = self
            .per_sample_grads
            .iter()
            .filter(|&&n| n as f64 * UPDATE_BYTES_PER_PARAM >= large_bytes)
            .sum();
        let all: usize = self.per_sample_grads.iter().sum();
        [(all - large) as f64 / 1e6, large as f64 / 1e6]
    }

    /// Millions of parameters the update prices at each rate: other tensors under
    /// `large_bytes`, convolution weights under it, and tensors at or above it.
    pub fn update_split(&self, large_bytes: f64) -> [f64; 3] {
        let large = self.large_params(large_bytes);
        let conv = self.small_conv_params(large_bytes);
        [self.params - large - conv, conv, large].map(|n| n as f64 / 1e6)
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
            out.push(conv_weights(c));
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

/// Elements of a convolution's weight tensor.
fn conv_weights(c: &perfcast_core::Conv2d) -> usize {
    c.out_channels * (c.in_channels / c.groups.max(1)) * c.kernel[0] * c.kernel[1]
}

/// The update of `run` at `rates` (ms per million parameters, in [`RunShape::update_split`]'s
/// order) with tensors large from `large_bytes` on, ms.
pub fn update_ms_at(run: &RunShape, rates: [f64; 3], large_bytes: f64) -> f64 {
    run.update_split(large_bytes)
        .iter()
        .zip(rates)
        .map(|(p, r)| p * r)
        .sum()
}

/// The per-sample weight gradients of `run` at the update's small and large `rates` (ms per
/// million elements: the buffers are written, read and, from the allocator's fresh-mapping
/// size on, page-faulted like an update's), ms.
pub fn per_sample_grads_ms_at(run: &RunShape, rates: [f64; 2], large_bytes: f64) -> f64 {
    run.per_sample_grad_split(large_bytes)
        .iter()
        .zip(rates)
        .map(|(n, r)| n * r)
        .sum()
}

/// The update of `run` and its per-sample weight gradients, ms, at the update's `rates`
/// ([`update_ms_at`]'s order; the gradients take the small and large ones).
pub fn update_terms_ms(run: &RunShape, rates: [f64; 3], large_bytes: f64) -> (f64, f64) {
    (
        update_ms_at(run, rates, large_bytes),
        per_sample_grads_ms_at(run, [rates[0], rates[2]], large_bytes),
    )
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
    /// Per-sample weight gradients written and summed (CPU training steps whose linear
    /// layers run one GEMM per sample), ms.
    #[serde(default)]
    pub per_sample_grads_ms: f64,
    /// Linear layers' weights read from memory instead of cache, ms ([`uncached_weights_ms`]).
    #[serde(default)]
    pub uncached_weights_ms: f64,
    /// The host's work in the step ([`HostFloor`]), ms; 0 without one.
    #[serde(default)]
    pub host_floor_ms: f64,
    /// What the step waits on the host beyond the GPU's own work (the host floor less
    /// everything but the copy, when positive), ms.
    #[serde(default)]
    pub host_bound_ms: f64,
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
    /// The optimiser update's share of a training run and its per-sample weight gradients,
    /// ms ([`update_terms_ms`]; 0 for inference terms).
    pub fn update_terms_ms(&self, run: &RunShape) -> (f64, f64) {
        let rates = [
            self.update_ms_per_mparam,
            self.update_conv_ms_per_mparam
                .unwrap_or(self.update_ms_per_mparam),
            self.update_large_ms_per_mparam,
        ];
        update_terms_ms(run, rates, self.large_tensor_bytes.unwrap_or(f64::INFINITY))
    }

    /// The optimiser update's share of a training run, ms (0 for inference terms).
    pub fn update_ms(&self, run: &RunShape) -> f64 {
        self.update_terms_ms(run).0
    }

    /// Composes a run from its layers' sum and shape.
    pub fn compose(&self, run: &RunShape) -> Composed {
        self.compose_sum(run, run.layer_sum_ms, run.batch)
    }

    /// [`PhaseCosts::compose`] of `run` with its layers summing to `layer_sum_ms` at `batch`
    /// (a prepared network's shape, reused without a copy).
    pub(crate) fn compose_sum(&self, run: &RunShape, layer_sum_ms: f64, batch: usize) -> Composed {
        let scale_ms = (self.layer_scale - 1.0) * layer_sum_ms;
        let dispatch_ms = self.per_layer_ms * run.layers as f64;
        let (update_ms, per_sample_grads_ms) = self.update_terms_ms(run);
        let copy_ms = self.input_gbs.map_or(0.0, |gbs| {
            (batch * run.input_elems) as f64 * perfcast_core::features::F32_BYTES
                / (gbs.max(1e-9) * 1e6)
        });
        let device = layer_sum_ms
            + self.per_run_ms
            + scale_ms
            + dispatch_ms
            + update_ms
            + per_sample_grads_ms;
        let host_floor_ms = self
            .host_floor
            .as_ref()
            .map_or(0.0, |h| h.per_step_ms + h.per_layer_ms * run.layers as f64);
        // The copy from pageable memory holds the host, so it adds to either side.
        let host_bound_ms = (host_floor_ms - device).max(0.0);
        let total = device + host_bound_ms + copy_ms;
        Composed {
            layer_sum_ms,
            per_run_ms: self.per_run_ms,
            scale_ms,
            dispatch_ms,
            update_ms,
            copy_ms,
            per_sample_grads_ms,
            uncached_weights_ms: 0.0,
            host_floor_ms,
            host_bound_ms,
            from_spec: self.runs == 0,
            total_ms: total.max(FLOOR_SHARE * layer_sum_ms),
        }
    }
}

impl Composed {
    /// This composition with `ms` of uncached weights added ([`uncached_weights_ms`]).
    pub fn with_uncached_weights(mut self, ms: f64) -> Composed {
        self.uncached_weights_ms += ms;
        self.total_ms += ms;
        self
    }
}

impl RunShape {
    /// The shape of a run of `network` whose layers' predictions sum to `layer_sum_ms`.
    pub fn of(network: &Network, layer_sum_ms: f64) -> RunShape {
        let mut tensors = Vec::new();
        let mut linears = Vec::new();
        let mut conv_tensors = Vec::new();
        for l in &network.layers {
            push_param_tensors(&l.spec, &mut tensors);
            if let perfcast_core::ModuleSpec::Conv2d(c) = &l.spec {
                conv_tensors.push(conv_weights(c));
            }
            if let perfcast_core::ModuleSpec::Linear(lin) = &l.spec {
                linears.push(LinearWeights {
                    bytes: (lin.in_features * lin.out_features) as f64
                        * perfcast_core::features::F32_BYTES,
                    tokens: lin.tokens,
                    out_features: lin.out_features,
                });
            }
        }
        RunShape {
            layer_sum_ms,
            layers: network.layers.len(),
            params: tensors.iter().sum(),
            tensors,
            conv_tensors,
            input_elems: network.input.iter().product(),
            batch: 1,
            linears,
            per_sample_grads: Vec::new(),
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
        per_sample_grads_ms: 0.0,
        uncached_weights_ms: 0.0,
        host_floor_ms: 0.0,
        host_bound_ms: 0.0,
        from_spec: false,
        total_ms: run.layer_sum_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfcast_core::UncachedWeights;

    /// A linear layer of `tokens` rows, `in_features` -> `out_features`, in a network of
    /// `layers` of them.
    fn run_of(layers: usize, tokens: usize, in_features: usize, out_features: usize) -> RunShape {
        let w = in_features * out_features;
        RunShape {
            layer_sum_ms: 1.0,
            layers,
            params: layers * w,
            tensors: vec![w; layers],
            conv_tensors: Vec::new(),
            input_elems: tokens * in_features,
            batch: 1,
            linears: vec![
                LinearWeights {
                    bytes: w as f64 * 4.0,
                    tokens,
                    out_features,
                };
                layers
            ],
            per_sample_grads: Vec::new(),
        }
    }

    fn probe() -> UncachedWeights {
        UncachedWeights {
            rows: vec![1, 16, 64],
            ms_per_mb: vec![0.01, 0.12, 0.02],
            floor_ms_per_mb: Vec::new(),
        }
    }

    fn floors() -> UncachedWeights {
        UncachedWeights {
            rows: vec![1, 16, 64],
            ms_per_mb: Vec::new(),
            floor_ms_per_mb: vec![0.05, 0.25, 0.1],
        }
    }

    #[test]
    fn uncached_weights_cost_only_layers_that_fit_the_cache_in_a_network_that_does_not() {
        let cache = 32e6;
        // 4 MB per layer: one alone fits, ten pass the cache.
        let small = run_of(1, 17, 1000, 1000);
        assert_eq!(uncached_weights_ms(&small, 1, &probe(), cache, &[]), 0.0);
        let big = run_of(10, 17, 1000, 1000);
        let ms = uncached_weights_ms(&big, 1, &probe(), cache, &[]);
        assert!((ms - 10.0 * 4.0 * 0.12).abs() < 1e-9, "{ms}");
        // Layers too large for the cache were timed uncached already.
        let huge = run_of(2, 17, 4000, 4000);
        assert_eq!(uncached_weights_ms(&huge, 1, &probe(), cache, &[]), 0.0);
        // No cache size known: no term.
        assert_eq!(uncached_weights_ms(&big, 1, &probe(), 0.0, &[]), 0.0);
    }

    #[test]
    fn a_floor_charges_what_it_exceeds_the_layers_own_prediction_by() {
        let cache = 32e6;
        // Ten 4 MB layers at 17 rows: the floor is 0.25 ms per MB, 1.0 ms a layer.
        let big = run_of(10, 17, 1000, 1000);
        let ms = uncached_weights_ms(&big, 1, &floors(), cache, &[0.6; 10]);
        assert!((ms - 10.0 * 0.4).abs() < 1e-9, "{ms}");
        // A layer predicted above its floor pays nothing more.
        assert_eq!(
            uncached_weights_ms(&big, 1, &floors(), cache, &[1.5; 10]),
            0.0
        );
        // Per-sample GEMMs (64 rows each, batch 4): only the first call reads from memory.
        let tiled = run_of(10, 64, 1000, 1000);
        let ms = uncached_weights_ms(&tiled, 4, &floors(), cache, &[1.2; 10]);
        assert!((ms - 10.0 * (0.4 - 0.3)).abs() < 1e-9, "{ms}");
        // Layers whose predictions are not given are charged nothing.
        assert_eq!(uncached_weights_ms(&big, 1, &floors(), cache, &[]), 0.0);
    }

    #[test]
    fn per_sample_gemms_write_a_weight_gradient_per_sample() {
        // 64 tokens fill whole tiles: at batch 4 each of the two 1000 x 1000 layers runs four
        // GEMMs and its backward writes four gradients of its million weights.
        let tiled = run_of(2, 64, 1000, 1000).with_per_sample_grads(4);
        assert_eq!(tiled.per_sample_grads, vec![4_000_000; 2]);
        // 17 tokens fold into one GEMM, and batch 1 has one sample: no per-sample gradients.
        assert!(
            run_of(2, 17, 1000, 1000)
                .with_per_sample_grads(4)
                .per_sample_grads
                .is_empty()
        );
        assert!(
            run_of(2, 64, 1000, 1000)
                .with_per_sample_grads(1)
                .per_sample_grads
                .is_empty()
        );
        // Priced at the update's rates: 4 M elements stream 48 MB, large from 32 MB on.
        let ms = per_sample_grads_ms_at(&tiled, [1.0, 3.0], 32e6);
        assert!((ms - 2.0 * 4.0 * 3.0).abs() < 1e-9, "{ms}");
        let ms = per_sample_grads_ms_at(&tiled, [1.0, 3.0], 64e6);
        assert!((ms - 2.0 * 4.0 * 1.0).abs() < 1e-9, "{ms}");
        // A training composition carries them in its total; inference terms price them at 0.
        let costs = PhaseCosts {
            update_ms_per_mparam: 1.0,
            update_large_ms_per_mparam: 3.0,
            large_tensor_bytes: Some(32e6),
            ..PhaseCosts::gpu_defaults(&perfcast_core::testing::cpu_device())
        };
        let with = costs.compose(&tiled);
        let without = costs.compose(&run_of(2, 64, 1000, 1000));
        assert!((with.per_sample_grads_ms - 24.0).abs() < 1e-9, "{with:?}");
        assert!((with.total_ms - without.total_ms - 24.0).abs() < 1e-9);
    }

    #[test]
    fn the_rows_per_call_follow_the_backends_batching() {
        // One sample: its tokens.
        assert_eq!(linear_gemm_rows(1, 17, 768), 17);
        // Samples fold into one GEMM when that makes the output squarer ...
        assert_eq!(linear_gemm_rows(4, 17, 768), 68);
        // ... but not when each sample's rows fill whole 32-row tiles.
        assert_eq!(linear_gemm_rows(4, 64, 768), 64);
        // Nor when the folded output would be taller than square by more.
        assert_eq!(linear_gemm_rows(64, 100, 10), 100);
        let big = run_of(10, 17, 1000, 1000);
        let at = |batch| uncached_weights_ms(&big, batch, &probe(), 32e6, &[]);
        assert!(at(4) < at(1), "{} {}", at(4), at(1));
    }

    #[test]
    fn a_composition_carries_the_uncached_weights_in_its_total() {
        let costs = PhaseCosts {
            per_run_ms: 1.0,
            ..PhaseCosts::gpu_defaults(&perfcast_core::testing::cpu_device())
        };
        let run = run_of(10, 17, 1000, 1000);
        let plain = costs.compose(&run);
        let with = plain.clone().with_uncached_weights(2.5);
        assert_eq!(with.uncached_weights_ms, 2.5);
        assert!((with.total_ms - plain.total_ms - 2.5).abs() < 1e-12);
    }

    #[test]
    fn large_tensors_are_those_the_allocator_maps_afresh() {
        // A Llama FFN projection (44 MiB) reuses freed memory; a 4,096 x 4,096 one (64 MiB)
        // and AlexNet's first FC (144 MiB) are mapped afresh on every step.
        let mut run = run_of(1, 64, 2048, 5632);
        assert_eq!(run.large_params(FRESH_TENSOR_UPDATE_BYTES), 0);
        run.tensors = vec![2048 * 5632, 4096 * 4096, 9216 * 4096, 4096];
        run.params = run.tensors.iter().sum();
        assert_eq!(
            run.large_params(FRESH_TENSOR_UPDATE_BYTES),
            4096 * 4096 + 9216 * 4096
        );
        let costs = PhaseCosts {
            update_ms_per_mparam: 1.0,
            update_large_ms_per_mparam: 3.0,
            large_tensor_bytes: Some(FRESH_TENSOR_UPDATE_BYTES),
            ..PhaseCosts::gpu_defaults(&perfcast_core::testing::cpu_device())
        };
        let small = (2048 * 5632 + 4096) as f64 / 1e6;
        let large = (4096 * 4096 + 9216 * 4096) as f64 / 1e6;
        let c = costs.compose(&run);
        assert!((c.update_ms - (small + 3.0 * large)).abs() < 1e-9, "{c:?}");
    }
}
