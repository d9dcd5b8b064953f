//! The analytical multi-device model: one training iteration as computation plus
//! communication under a parallel strategy and a communication strategy.
//!
//! Data parallel with a *global* batch `b` on `P` devices: each device runs forward and
//! backward on `ceil(b / P)` samples (the fullest device decides), the gradients (`S` bytes,
//! 4 per fp32 parameter) are all-reduced under a [`Strategy`] over a [`Link`], and every
//! device applies the optimiser update to its full replica:
//!
//! ```text
//! T(P) = forward(b/P) + backward(b/P) + exposed communication + update
//! ```
//!
//! How much communication is exposed depends on the [`Overlap`]:
//!
//! - `none`: `backward + comm`, the gradients exchanged after the backward pass.
//! - `full`: `max(backward, comm)`, the ideal bound where every byte hides behind compute.
//! - `bucketed` (default; PyTorch DDP, Horovod tensor fusion): the backward pass runs from
//!   the last layer to the first; gradients are packed into buckets of `bucket_bytes` in
//!   that order, a bucket is all-reduced as soon as its last layer's backward is done, and
//!   buckets share the link one after another. What is still on the link when the backward
//!   pass ends is exposed. Each bucket pays the collective's latency term once.
//!
//! Throughput is `b / T(P)` samples per second; scaling efficiency is `T(1) / (P T(P))`:
//! 1 when `P` devices are `P` times as fast as one.
//!
//! Compute comes from a [`ComputeModel`]: per-layer forward and backward seconds at a
//! per-device batch, e.g. a bundle's per-layer predictions, or a measured step spread over
//! the layers by their FLOPs ([`layers_from_measurement`]).

use perfcast_core::{Network, features};
use serde::{Deserialize, Serialize};

use crate::collective::Strategy;
use crate::error::{Error, Result};
use crate::link::Link;

/// PyTorch DDP's default bucket size (`bucket_cap_mb = 25`), bytes.
pub const DEFAULT_BUCKET_BYTES: f64 = 25.0 * 1024.0 * 1024.0;

/// Most devices one estimate spreads a step over (2^20).
pub const MAX_DEVICES: usize = 1 << 20;

/// One layer's part of a training step on one device, at the per-device batch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayerCost {
    /// Layer name.
    pub name: String,
    /// Forward seconds.
    pub forward_s: f64,
    /// Backward seconds (input and weight gradients).
    pub backward_s: f64,
    /// Bytes of this layer's gradients (4 per fp32 parameter).
    pub grad_bytes: f64,
}

/// Where compute time comes from: per-layer costs of one training step on one device.
pub trait ComputeModel {
    /// The layers' costs, in forward order, at `per_device_batch` samples.
    fn step(&self, per_device_batch: usize) -> Result<Vec<LayerCost>>;
}

impl<F> ComputeModel for F
where
    F: Fn(usize) -> Result<Vec<LayerCost>>,
{
    fn step(&self, per_device_batch: usize) -> Result<Vec<LayerCost>> {
        self(per_device_batch)
    }
}

/// How gradient communication overlaps the backward pass.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Overlap {
    /// Communication after the backward pass.
    None,
    /// Communication hidden behind the backward pass up to its length: `max(backward, comm)`.
    Full,
    /// Buckets all-reduced as soon as their gradients are ready, one after another.
    Bucketed {
        /// Bucket size, bytes.
        bucket_bytes: f64,
    },
}

impl Default for Overlap {
    fn default() -> Self {
        Overlap::Bucketed {
            bucket_bytes: DEFAULT_BUCKET_BYTES,
        }
    }
}

/// How the work is split over devices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Parallelism {
    /// Every device holds the whole model and a share of the batch.
    #[default]
    Data,
    /// Layers (or tensors) split over devices. Not modelled yet.
    Model,
    /// Layers split into stages, micro-batches pipelined through them. Not modelled yet.
    Pipeline,
}

/// Optimisers, by the memory traffic of their update.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Optimizer {
    /// Plain SGD: read parameter and gradient, write parameter.
    Sgd,
    /// SGD with momentum: also read and write the momentum.
    Momentum,
    /// Adam: read parameter, gradient and both moments, write parameter and both moments.
    Adam,
}

impl Optimizer {
    /// fp32 bytes moved per parameter by one update (a streaming, memory-bound kernel).
    pub fn bytes_per_param(self) -> f64 {
        4.0 * match self {
            Optimizer::Sgd => 3.0,
            Optimizer::Momentum => 5.0,
            Optimizer::Adam => 7.0,
        }
    }

    /// Seconds for one update of `params` parameters on a device with `mem_bandwidth_gbs`.
    pub fn update_s(self, params: f64, mem_bandwidth_gbs: f64) -> f64 {
        params * self.bytes_per_param() / (mem_bandwidth_gbs * 1e9)
    }
}

/// The analytical model of data-parallel training.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DataParallelModel {
    /// How work is split; only [`Parallelism::Data`] is modelled.
    pub parallelism: Parallelism,
    /// Gradient exchange.
    pub strategy: Strategy,
    /// The link between devices (inside a node, for the hierarchical strategy).
    pub link: Link,
    /// Overlap of communication with the backward pass.
    pub overlap: Overlap,
    /// Seconds of one optimiser update on one device.
    pub update_s: f64,
}

/// One iteration on `devices` devices.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IterationEstimate {
    /// Devices.
    pub devices: usize,
    /// Samples per device.
    pub per_device_batch: usize,
    /// Forward seconds.
    pub forward_s: f64,
    /// Backward seconds.
    pub backward_s: f64,
    /// Seconds the link is busy with gradients (hidden or not).
    pub comm_s: f64,
    /// Seconds of communication not hidden behind the backward pass.
    pub exposed_comm_s: f64,
    /// Optimiser update seconds.
    pub update_s: f64,
    /// Seconds per iteration.
    pub iteration_s: f64,
    /// Samples per second (global batch / iteration).
    pub throughput: f64,
    /// Iteration time on one device over this one.
    pub speedup: f64,
    /// Speedup over device count.
    pub efficiency: f64,
    /// All-reduce calls per iteration (buckets).
    pub messages: usize,
}

impl DataParallelModel {
    /// Checks the model's parameters.
    pub fn validate(&self) -> Result<()> {
        match self.parallelism {
            Parallelism::Data => {}
            Parallelism::Model => return Err(Error::NotYet("model")),
            Parallelism::Pipeline => return Err(Error::NotYet("pipeline")),
        }
        self.strategy.validate()?;
        self.link.validate()?;
        if let Overlap::Bucketed { bucket_bytes } = self.overlap
            && !(bucket_bytes.is_finite() && bucket_bytes > 0.0)
        {
            return Err(Error::invalid(
                "overlap",
                format!("bucket size must be positive, got {bucket_bytes} bytes"),
            ));
        }
        if !(self.update_s.is_finite() && self.update_s >= 0.0) {
            return Err(Error::invalid(
                "update time",
                format!("must not be negative, got {} s", self.update_s),
            ));
        }
        Ok(())
    }

    /// One iteration with `global_batch` samples over `devices` devices. `speedup` and
    /// `efficiency` are left at 1: [`DataParallelModel::scaling`] fills them.
    pub fn iteration(
        &self,
        devices: usize,
        global_batch: usize,
        compute: &dyn ComputeModel,
    ) -> Result<IterationEstimate> {
        self.validate()?;
        if devices == 0 {
            return Err(Error::invalid(
                "device count",
                "at least 1 device is needed, got 0",
            ));
        }
        if global_batch > perfcast_core::MAX_BATCH {
            return Err(Error::invalid(
                "batch",
                format!(
                    "the global batch must be at most {} (2^24), got {global_batch}",
                    perfcast_core::MAX_BATCH
                ),
            ));
        }
        if devices > MAX_DEVICES {
            return Err(Error::invalid(
                "device count",
                format!("at most {MAX_DEVICES} devices are modelled, got {devices}"),
            ));
        }
        if global_batch < devices {
            return Err(Error::invalid(
                "batch",
                format!("a global batch of {global_batch} cannot be split over {devices} devices"),
            ));
        }
        let per_device_batch = global_batch.div_ceil(devices);
        let layers = compute.step(per_device_batch)?;
        for l in &layers {
            for (what, v) in [
                ("forward_s", l.forward_s),
                ("backward_s", l.backward_s),
                ("grad_bytes", l.grad_bytes),
            ] {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(Error::Compute {
                        batch: per_device_batch,
                        message: format!("layer `{}`: `{what}` is {v}", l.name),
                    });
                }
            }
        }
        let forward_s: f64 = layers.iter().map(|l| l.forward_s).sum();
        let backward_s: f64 = layers.iter().map(|l| l.backward_s).sum();
        let total_bytes: f64 = layers.iter().map(|l| l.grad_bytes).sum();
        let allreduce = |bytes: f64| self.strategy.allreduce_s(devices, bytes, &self.link);
        let (comm_s, exposed_comm_s, messages) = if devices == 1 || total_bytes == 0.0 {
            (0.0, 0.0, 0)
        } else {
            match self.overlap {
                Overlap::None => {
                    let c = allreduce(total_bytes)?;
                    (c, c, 1)
                }
                Overlap::Full => {
                    let c = allreduce(total_bytes)?;
                    (c, (c - backward_s).max(0.0), 1)
                }
                Overlap::Bucketed { bucket_bytes } => {
                    let buckets = buckets(&layers, bucket_bytes);
                    let (mut link_free, mut busy) = (0.0f64, 0.0);
                    for &(ready, bytes) in &buckets {
                        let c = allreduce(bytes)?;
                        link_free = link_free.max(ready) + c;
                        busy += c;
                    }
                    (busy, (link_free - backward_s).max(0.0), buckets.len())
                }
            }
        };
        let iteration_s = forward_s + backward_s + exposed_comm_s + self.update_s;
        Ok(IterationEstimate {
            devices,
            per_device_batch,
            forward_s,
            backward_s,
            comm_s,
            exposed_comm_s,
            update_s: self.update_s,
            iteration_s,
            throughput: global_batch as f64 / iteration_s,
            speedup: 1.0,
            efficiency: 1.0,
            messages,
        })
    }

    /// Iterations for each device count, with speedup and efficiency against one device
    /// (computed even when 1 is not among `devices`).
    pub fn scaling(
        &self,
        devices: &[usize],
        global_batch: usize,
        compute: &dyn ComputeModel,
    ) -> Result<Vec<IterationEstimate>> {
        let one = self.iteration(1, global_batch, compute)?;
        devices
            .iter()
            .map(|&p| {
                let mut it = if p == 1 {
                    one.clone()
                } else {
                    self.iteration(p, global_batch, compute)?
                };
                it.speedup = one.iteration_s / it.iteration_s;
                it.efficiency = it.speedup / p as f64;
                Ok(it)
            })
            .collect()
    }
}

/// Buckets in backward order: (seconds into the backward pass when its last gradient is
/// ready, bytes). Layers without parameters add time but no bytes.
pub(crate) fn buckets(layers: &[LayerCost], bucket_bytes: f64) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    let (mut t, mut bytes) = (0.0, 0.0);
    for l in layers.iter().rev() {
        t += l.backward_s;
        bytes += l.grad_bytes;
        if bytes >= bucket_bytes {
            out.push((t, bytes));
            bytes = 0.0;
        }
    }
    if bytes > 0.0 {
        out.push((t, bytes));
    }
    out
}

/// Parameters per layer of a network, in forward order (fp32 gradients are 4 bytes each).
pub fn layer_params(network: &Network) -> Vec<(String, f64)> {
    network
        .modules()
        .into_iter()
        .map(|(name, spec)| (name.to_string(), features::derive(spec, 1).params))
        .collect()
}

/// Per-layer costs from a measured (or otherwise known) step: `forward_s` and `backward_s`
/// of the whole network at some batch, spread over the layers by their forward and backward
/// FLOPs at that batch. For a measured number without a per-layer breakdown.
pub fn layers_from_measurement(
    network: &Network,
    forward_s: f64,
    backward_s: f64,
) -> Vec<LayerCost> {
    let derived: Vec<(String, features::Derived)> = network
        .modules()
        .into_iter()
        .map(|(name, spec)| (name.to_string(), features::derive(spec, 1)))
        .collect();
    let fwd: f64 = derived.iter().map(|(_, d)| d.flops).sum();
    let bwd: f64 = derived.iter().map(|(_, d)| d.train_flops - d.flops).sum();
    let n = derived.len().max(1) as f64;
    let share = |part: f64, total: f64| if total > 0.0 { part / total } else { 1.0 / n };
    derived
        .into_iter()
        .map(|(name, d)| LayerCost {
            name,
            forward_s: forward_s * share(d.flops, fwd),
            backward_s: backward_s * share(d.train_flops - d.flops, bwd),
            grad_bytes: d.params * features::F32_BYTES,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::ring_allreduce_s;

    /// A four-layer network whose compute scales linearly with the batch.
    fn toy(per_device_batch: usize) -> Result<Vec<LayerCost>> {
        let b = per_device_batch as f64;
        Ok([("a", 1e6), ("b", 0.0), ("c", 4e6), ("d", 2e6)]
            .iter()
            .map(|&(name, bytes)| LayerCost {
                name: name.into(),
                forward_s: 1e-4 * b,
                backward_s: 2e-4 * b,
                grad_bytes: bytes,
            })
            .collect())
    }

    fn model(overlap: Overlap) -> DataParallelModel {
        DataParallelModel {
            parallelism: Parallelism::Data,
            strategy: Strategy::Ring,
            link: Link::custom(1.0, 10.0).unwrap(),
            overlap,
            update_s: 1e-3,
        }
    }

    #[test]
    fn no_overlap_adds_the_ring_all_reduce() {
        let m = model(Overlap::None);
        let it = m.iteration(4, 64, &toy).unwrap();
        assert_eq!(it.per_device_batch, 16);
        let comm = ring_allreduce_s(4, 7e6, &m.link);
        assert!((it.comm_s - comm).abs() < 1e-15);
        let want = 4.0 * 1e-4 * 16.0 + 4.0 * 2e-4 * 16.0 + comm + 1e-3;
        assert!((it.iteration_s - want).abs() < 1e-12, "{}", it.iteration_s);
        assert!((it.throughput - 64.0 / want).abs() < 1e-9);
    }

    #[test]
    fn overlap_orders_none_bucketed_full() {
        let global = 64;
        let times: Vec<f64> = [
            Overlap::None,
            Overlap::Bucketed { bucket_bytes: 3e6 },
            Overlap::Full,
        ]
        .into_iter()
        .map(|o| model(o).iteration(8, global, &toy).unwrap().iteration_s)
        .collect();
        assert!(times[0] > times[1] && times[1] >= times[2], "{times:?}");
        // Full overlap is exactly forward + max(backward, comm) + update.
        let m = model(Overlap::Full);
        let it = m.iteration(8, global, &toy).unwrap();
        let comm = ring_allreduce_s(8, 7e6, &m.link);
        let want = it.forward_s + it.backward_s.max(comm) + 1e-3;
        assert!((it.iteration_s - want).abs() < 1e-12);
    }

    #[test]
    fn buckets_follow_the_backward_order() {
        let layers = toy(8).unwrap();
        // Backward: d (2e6, ready at 1.6 ms), c (4e6 -> bucket of 6e6 at 3.2 ms), b, a.
        let b = buckets(&layers, 5e6);
        assert_eq!(b.len(), 2);
        assert!((b[0].0 - 3.2e-3).abs() < 1e-12 && b[0].1 == 6e6);
        assert!((b[1].0 - 6.4e-3).abs() < 1e-12 && b[1].1 == 1e6);
        // A bucket at least as large as everything: one message at the end of backward.
        let one = buckets(&layers, 1e9);
        assert_eq!(one, vec![(6.4e-3, 7e6)]);
        // Bucketed with one bucket equals no overlap.
        let none = model(Overlap::None).iteration(4, 32, &toy).unwrap();
        let big = model(Overlap::Bucketed { bucket_bytes: 1e9 })
            .iteration(4, 32, &toy)
            .unwrap();
        assert!((none.iteration_s - big.iteration_s).abs() < 1e-15);
    }

    #[test]
    fn scaling_efficiency_is_against_one_device() {
        let m = model(Overlap::default());
        let rows = m.scaling(&[2, 4], 64, &toy).unwrap();
        let one = m.iteration(1, 64, &toy).unwrap();
        assert_eq!(one.comm_s, 0.0);
        for r in &rows {
            assert!((r.speedup - one.iteration_s / r.iteration_s).abs() < 1e-12);
            assert!((r.efficiency - r.speedup / r.devices as f64).abs() < 1e-12);
            assert!(r.efficiency < 1.0 && r.efficiency > 0.0);
        }
        // Free communication and no update: perfect linear scaling.
        let free = DataParallelModel {
            link: Link::custom(crate::link::MAX_LINK_GBS, 0.0).unwrap(),
            update_s: 0.0,
            ..model(Overlap::None)
        };
        let rows = free.scaling(&[1, 2, 4, 8], 64, &toy).unwrap();
        for r in rows {
            assert!((r.efficiency - 1.0).abs() < 1e-4, "{r:?}");
        }
    }

    #[test]
    fn model_and_pipeline_parallel_are_not_yet() {
        for (p, word) in [
            (Parallelism::Model, "model"),
            (Parallelism::Pipeline, "pipeline"),
        ] {
            let m = DataParallelModel {
                parallelism: p,
                ..model(Overlap::None)
            };
            let e = m.iteration(2, 8, &toy).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("{word} parallelism is not modelled yet")),
                "{e}"
            );
        }
    }

    #[test]
    fn bad_batches_are_refused() {
        let e = model(Overlap::None).iteration(8, 4, &toy).unwrap_err();
        assert!(
            e.to_string().contains("batch of 4 cannot be split over 8"),
            "{e}"
        );
    }

    #[test]
    fn measurement_is_spread_by_flops_and_params_are_exact() {
        let net = perfcast_core::zoo::build("resnet50", None).unwrap();
        let layers = layers_from_measurement(&net, 0.1, 0.2);
        let f: f64 = layers.iter().map(|l| l.forward_s).sum();
        let b: f64 = layers.iter().map(|l| l.backward_s).sum();
        assert!((f - 0.1).abs() < 1e-12 && (b - 0.2).abs() < 1e-12);
        let bytes: f64 = layers.iter().map(|l| l.grad_bytes).sum();
        // torchvision's ResNet-50 has 25,557,032 parameters.
        assert_eq!(bytes, 4.0 * 25_557_032.0);
        let params: f64 = layer_params(&net).iter().map(|(_, p)| p).sum();
        assert_eq!(params, 25_557_032.0);
    }

    #[test]
    fn optimiser_update_is_memory_bound() {
        // 25.6 M parameters, momentum SGD: 20 bytes each over 900 GB/s.
        let s = Optimizer::Momentum.update_s(25_557_032.0, 900.0);
        assert!((s - 25_557_032.0 * 20.0 / 9e11).abs() < 1e-15);
        assert!(Optimizer::Adam.update_s(1e6, 1.0) > Optimizer::Sgd.update_s(1e6, 1.0));
    }
}
