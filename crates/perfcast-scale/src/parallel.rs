//! Tensor and pipeline parallelism: how a network is split over devices, and what the split
//! communicates.
//!
//! **Tensor parallelism** as Megatron-LM lays it out (Shoeybi et al., 2019): a linear that reads
//! a replicated tensor is column-parallel (each of `t` devices computes `out/t` features), the
//! per-head work after it (attention matmuls, softmax, dropout, activations) runs on `1/t` of
//! the heads or features, and the next linear is row-parallel (`in/t` features in, a partial
//! sum out) followed by an all-reduce that makes its output whole again. In the backward pass
//! the column-parallel linears' input gradient is all-reduced instead (Megatron's `f`/`g`
//! operators). A transformer layer thus all-reduces its `s h` activations twice in the
//! forward pass (after attention and after the MLP) and twice in the backward pass. Layers
//! with no such split (convolutions, norms, pools) run replicated. The split network is built as a [`Network`] of smaller specs
//! and checked, so the per-layer compute comes from the same predictor as any other. A layer
//! that would have to all-gather a split tensor (a norm right after a column-parallel linear)
//! is refused: that is not Megatron's layout. A split last layer (a vocabulary- or
//! class-parallel head) stays split: the loss is computed in parallel, as Megatron does.
//!
//! **Pipeline parallelism**: the layers are cut into `p` contiguous stages at cut points
//! (where only one tensor crosses, [`crate::memory::Graph::cut_points`]), balanced by
//! predicted per-layer times; a batch is split into `m` micro-batches. GPipe runs all forward
//! passes then all backward passes (each stage holds `m` micro-batches' activations); 1F1B
//! (PipeDream-Flush) alternates once the pipeline is full (stage `i` holds at most `p - i`).
//! Both take `(m + p - 1)` slots of the slowest stage: the bubble is `(p-1)/(m+p-1)` of the
//! step. Each micro-batch sends its activation forward and its gradient backward across each
//! stage boundary.

use std::ops::Range;

use perfcast_core::Network;
use perfcast_core::network::Layer;
use perfcast_core::{Elementwise, ModuleKind, ModuleSpec};
use serde::{Deserialize, Serialize};

use crate::collective::ring_allreduce_s;
use crate::error::{Error, Result};
use crate::link::Link;
use crate::memory::{Graph, Tensor};

/// Where a layer's output lives under tensor parallelism.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// Every device holds all of it.
    Replicated,
    /// Each device holds `1/t` of it (features or heads).
    Sharded,
}

/// What one layer communicates under tensor parallelism, in elements per sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TpComm {
    /// All-reduced after the layer in the forward pass (a row-parallel linear's output).
    pub forward_allreduce: f64,
    /// All-reduced in the backward pass (the input gradient of the column-parallel linears
    /// that read a replicated tensor, counted once per tensor, at its first such reader).
    pub backward_allreduce: f64,
}

impl TpComm {
    /// Seconds on `t` devices over `link` for `batch` samples at `bytes` per element (ring
    /// all-reduce: `2 (t-1)/t S/B + 2 (t-1) alpha`).
    pub fn seconds(&self, t: usize, batch: f64, bytes: f64, link: &Link) -> f64 {
        self.seconds_by(t, batch, bytes, &|p, b| ring_allreduce_s(p, b, link))
    }

    /// As [`TpComm::seconds`], with `allreduce(devices, bytes)` pricing each all-reduce.
    pub fn seconds_by(
        &self,
        t: usize,
        batch: f64,
        bytes: f64,
        allreduce: &dyn Fn(usize, f64) -> f64,
    ) -> f64 {
        if t <= 1 {
            return 0.0;
        }
        let ar = |elems: f64| {
            if elems > 0.0 {
                allreduce(t, elems * batch * bytes)
            } else {
                0.0
            }
        };
        ar(self.forward_allreduce) + ar(self.backward_allreduce)
    }

    /// Bytes one device sends for `batch` samples at `bytes` per element on `t` devices (a
    /// ring all-reduce sends `2 (t-1)/t S`).
    pub fn bytes_sent(&self, t: usize, batch: f64, bytes: f64) -> f64 {
        if t <= 1 {
            return 0.0;
        }
        let f = (t as f64 - 1.0) / t as f64 * batch * bytes;
        f * 2.0 * (self.forward_allreduce + self.backward_allreduce)
    }
}

/// A network split `t` ways by tensor parallelism: what each device runs.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorParallel {
    /// Devices the tensors are split over.
    pub t: usize,
    /// The network one device runs (split specs), checked.
    pub network: Network,
    /// Per layer: where its output lives.
    pub placement: Vec<Placement>,
    /// Per layer: what it communicates.
    pub comm: Vec<TpComm>,
}

fn pad3(shape: &[usize]) -> Option<[usize; 3]> {
    if shape.len() > 3 {
        return None;
    }
    let mut out = [1; 3];
    out[3 - shape.len()..].copy_from_slice(shape);
    Some(out)
}

/// Splits `network` over `t` devices as Megatron-LM does (see the module docs).
pub fn tensor_parallel(network: &Network, t: usize) -> Result<TensorParallel> {
    if t == 0 {
        return Err(Error::invalid(
            "tensor parallelism",
            "the degree must be at least 1, got 0",
        ));
    }
    let graph = Graph::new(network)?;
    let n = network.layers.len();
    let mut layers: Vec<Layer> = Vec::with_capacity(n);
    let mut placement = vec![Placement::Replicated; n];
    let mut comm = vec![TpComm::default(); n];
    let mut shapes: Vec<Vec<usize>> = Vec::with_capacity(n);
    // Replicated tensors whose gradient is already all-reduced for a column-parallel reader.
    let mut reduced = std::collections::HashSet::new();
    let place = |t: Tensor, placement: &[Placement]| match t {
        Tensor::Input => Placement::Replicated,
        Tensor::Layer(j) => placement[j],
    };
    let split_err = |layer: &str, what: String| {
        Error::invalid(
            "tensor parallelism",
            format!("{t}-way: layer `{layer}`: {what}"),
        )
    };
    for (i, layer) in network.layers.iter().enumerate() {
        let node = &graph.nodes[i];
        let ins: Vec<Placement> = node.reads.iter().map(|&r| place(r, &placement)).collect();
        let any_split = ins.contains(&Placement::Sharded);
        let all_split = ins.iter().all(|&p| p == Placement::Sharded);
        let mut spec = layer.spec.clone();
        let mut out = Placement::Replicated;
        let kind = spec.kind();
        if t > 1 {
            match &mut spec {
                ModuleSpec::Linear(l) if !any_split && l.out_features % t == 0 => {
                    l.out_features /= t;
                    out = Placement::Sharded;
                    if reduced.insert(node.reads[0]) {
                        comm[i].backward_allreduce += graph.elems(node.reads[0]);
                    }
                }
                // Features that do not divide: the layer runs replicated.
                ModuleSpec::Linear(_) if !any_split => {}
                ModuleSpec::Linear(l) => {
                    if l.in_features % t != 0 {
                        return Err(split_err(
                            &layer.name,
                            format!("`in_features` {} is not divisible", l.in_features),
                        ));
                    }
                    l.in_features /= t;
                    comm[i].forward_allreduce += node.out_elems;
                }
                ModuleSpec::Matmul(m) if all_split => {
                    if m.heads % t != 0 {
                        return Err(split_err(
                            &layer.name,
                            format!("{} heads are not divisible", m.heads),
                        ));
                    }
                    m.heads /= t;
                    out = Placement::Sharded;
                }
                // A reshape of a split tensor: its split axis is the producer's split size, a
                // factor of it (heads of a fused QKV projection) or a multiple (heads merged).
                ModuleSpec::View(v) if all_split => {
                    let (from, orig) = match node.reads[0] {
                        Tensor::Layer(j) => (&shapes[j], &network.layers[j].spec),
                        Tensor::Input => unreachable!("the input is replicated"),
                    };
                    let full = orig.output_shape().unwrap_or_default();
                    // Compared from the last axis: the shapes may differ in leading ones.
                    let split = full
                        .iter()
                        .rev()
                        .zip(from.iter().rev())
                        .find(|(a, b)| a != b)
                        .map_or(0, |(a, _)| *a);
                    let dims = v.shape;
                    let fits = |d: usize| d > 0 && d.is_multiple_of(t);
                    let axis = (split > 0)
                        .then(|| {
                            dims.iter()
                                .position(|&d| fits(d) && d == split)
                                .or_else(|| {
                                    dims.iter()
                                        .position(|&d| fits(d) && split.is_multiple_of(d))
                                })
                                .or_else(|| {
                                    dims.iter()
                                        .position(|&d| fits(d) && d.is_multiple_of(split))
                                })
                        })
                        .flatten()
                        .ok_or_else(|| {
                            split_err(
                                &layer.name,
                                format!("cannot tell which axis of the view {dims:?} is split"),
                            )
                        })?;
                    v.shape[axis] /= t;
                    out = Placement::Sharded;
                }
                _ if kind.is_elementwise() && kind != ModuleKind::Sum && all_split && any_split => {
                    // The split shape the producer hands over, at rank 3.
                    let from = match node.reads[0] {
                        Tensor::Layer(j) => &shapes[j],
                        Tensor::Input => unreachable!("the input is replicated"),
                    };
                    let shape = pad3(from).ok_or_else(|| {
                        split_err(&layer.name, format!("input {from:?} has more than 3 dims"))
                    })?;
                    let e = Elementwise { shape };
                    spec = ModuleSpec::elementwise(kind, e).ok_or_else(|| {
                        split_err(&layer.name, "not an element-wise kind".to_string())
                    })?;
                    out = Placement::Sharded;
                }
                _ if any_split => {
                    return Err(split_err(
                        &layer.name,
                        format!(
                            "a {kind} reads a split tensor and cannot be split itself; tensor \
                             parallelism needs a column-parallel linear followed by a \
                             row-parallel one"
                        ),
                    ));
                }
                _ => {}
            }
        }
        let shape = spec
            .output_shape()
            .map_err(|e| split_err(&layer.name, e.to_string()))?;
        shapes.push(shape);
        placement[i] = out;
        layers.push(Layer {
            spec,
            // A split operand read whole after its all-gather, or a split read as heads.
            ..layer.clone()
        });
    }
    let split = Network {
        name: if t > 1 {
            format!("{}/tp{t}", network.name)
        } else {
            network.name.clone()
        },
        input: network.input.clone(),
        layers,
    };
    // Element-wise layers reading a split tensor now state its shape; the rest keeps its own.
    split
        .check()
        .map_err(|e| Error::invalid("tensor parallelism", format!("{t}-way: {e}")))?;
    Ok(TensorParallel {
        t,
        network: split,
        placement,
        comm,
    })
}

impl TensorParallel {
    /// The memory graph of one device's share, with sequence parallelism (Korthikanti et
    /// al.) when asked: the replicated activations of norms, dropout and residual adds (and
    /// the input the column-parallel linears keep) are kept as `1/t` sequence shards.
    pub fn graph(&self, sequence_parallel: bool) -> Result<Graph> {
        let mut g = Graph::new(&self.network)?;
        if sequence_parallel && self.t > 1 {
            let t = self.t as f64;
            let token_kind = |k: ModuleKind| {
                matches!(
                    k,
                    ModuleKind::LayerNorm
                        | ModuleKind::Dropout
                        | ModuleKind::Add
                        | ModuleKind::Linear
                )
            };
            let uses_tokens = g.nodes.iter().any(|n| n.kind == ModuleKind::LayerNorm);
            if uses_tokens {
                g.keep_divisor[0] = t;
                for (i, node) in g.nodes.iter_mut().enumerate() {
                    if self.placement[i] == Placement::Replicated && token_kind(node.kind) {
                        g.keep_divisor[i + 1] = t;
                        node.private_bytes /= t;
                    }
                }
            }
        }
        Ok(g)
    }
}

/// Splits layer costs into `stages` contiguous stages ending at cut points, minimising the
/// slowest stage; `None` when there are fewer cut points than stages.
pub fn partition(costs: &[f64], cuts: &[usize], stages: usize) -> Option<Vec<Range<usize>>> {
    let n = costs.len();
    if stages == 0 || n == 0 {
        return None;
    }
    // Pieces end at cut points (the last layer always is one).
    let mut ends: Vec<usize> = cuts.iter().map(|&c| c + 1).filter(|&e| e < n).collect();
    ends.push(n);
    ends.dedup();
    let k = ends.len();
    if k < stages {
        return None;
    }
    let mut prefix = vec![0.0; n + 1];
    for i in 0..n {
        prefix[i + 1] = prefix[i] + costs[i];
    }
    let start_of = |piece: usize| if piece == 0 { 0 } else { ends[piece - 1] };
    let cost = |from: usize, to: usize| prefix[ends[to]] - prefix[start_of(from)];
    // best[s][j]: the least slowest stage covering pieces 0..=j with s + 1 stages.
    let inf = f64::INFINITY;
    let mut best = vec![vec![inf; k]; stages];
    let mut choice = vec![vec![0usize; k]; stages];
    for (j, b) in best[0].iter_mut().enumerate() {
        *b = cost(0, j);
    }
    for s in 1..stages {
        for j in s..k {
            for split in (s - 1)..j {
                let v = best[s - 1][split].max(cost(split + 1, j));
                if v < best[s][j] {
                    best[s][j] = v;
                    choice[s][j] = split;
                }
            }
        }
    }
    let mut out = Vec::with_capacity(stages);
    let mut j = k - 1;
    for s in (0..stages).rev() {
        let from = if s == 0 { 0 } else { choice[s][j] + 1 };
        out.push(start_of(from)..ends[j]);
        if s > 0 {
            j = choice[s][j];
        }
    }
    out.reverse();
    Some(out)
}

/// A pipeline schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Schedule {
    /// All forward passes, then all backward passes (Huang et al., 2019).
    GPipe,
    /// One forward, one backward once the pipeline is full (PipeDream-Flush; Megatron-LM).
    #[serde(rename = "1f1b")]
    OneFOneB,
}

impl Schedule {
    /// Its name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Schedule::GPipe => "gpipe",
            Schedule::OneFOneB => "1f1b",
        }
    }

    /// Micro-batches whose activations stage `stage` (from 0) of `p` holds at once, of `m`.
    pub fn in_flight(self, p: usize, m: usize, stage: usize) -> usize {
        match self {
            Schedule::GPipe => m,
            Schedule::OneFOneB => m.min(p.saturating_sub(stage)).max(1),
        }
    }
}

/// The share of a pipelined step the devices idle: `(p-1)/(m+p-1)`.
pub fn bubble_fraction(p: usize, m: usize) -> f64 {
    if p <= 1 {
        return 0.0;
    }
    (p as f64 - 1.0) / (m as f64 + p as f64 - 1.0)
}

/// Seconds of a pipelined step whose slowest stage takes `stage_s` per micro-batch (forward
/// and backward): `(m + p - 1) stage_s`.
pub fn pipeline_s(p: usize, m: usize, stage_s: f64) -> f64 {
    (m + p.max(1) - 1) as f64 * stage_s
}

/// Bytes crossing one stage boundary per micro-batch of `batch` samples: the activation
/// forward and its gradient backward.
pub fn boundary_bytes(boundary_elems: f64, batch: f64, bytes: f64) -> f64 {
    2.0 * boundary_elems * batch * bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::tests::gpt_block;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1e-300)
    }

    #[test]
    fn megatron_split_of_a_gpt_block() {
        let (s, h, a) = (128usize, 512usize, 8usize);
        let net = gpt_block(s, h, a);
        let tp = tensor_parallel(&net, 4).unwrap();
        let get = |name: &str| {
            let i = net.layers.iter().position(|l| l.name == name).unwrap();
            (&tp.network.layers[i].spec, tp.placement[i], tp.comm[i])
        };
        // Column-parallel Q, K, V and fc1; row-parallel proj and fc2.
        for name in ["q", "k", "v", "fc1"] {
            let (spec, p, _) = get(name);
            let ModuleSpec::Linear(l) = spec else {
                panic!()
            };
            assert_eq!(l.in_features, h, "{name}");
            assert_eq!(p, Placement::Sharded, "{name}");
        }
        for name in ["proj", "fc2"] {
            let (spec, p, c) = get(name);
            let ModuleSpec::Linear(l) = spec else {
                panic!()
            };
            assert_eq!((l.out_features, p), (h, Placement::Replicated), "{name}");
            assert_eq!(c.forward_allreduce, (s * h) as f64, "{name}");
        }
        let (spec, ..) = get("scores");
        let ModuleSpec::Matmul(m) = spec else {
            panic!()
        };
        assert_eq!(m.heads, 2);
        // Two all-reduces of s h forward (after attention, after the MLP), two backward (the
        // inputs of QKV and of fc1).
        let fwd: f64 = tp.comm.iter().map(|c| c.forward_allreduce).sum();
        let bwd: f64 = tp.comm.iter().map(|c| c.backward_allreduce).sum();
        assert_eq!((fwd, bwd), (2.0 * (s * h) as f64, 2.0 * (s * h) as f64));
        // Each device does 1/t of the linear and attention FLOPs (all but the row-parallel
        // biases, added once after the all-reduce).
        let flops = |n: &Network| -> f64 {
            n.modules()
                .iter()
                .filter(|(_, s)| matches!(s.kind(), ModuleKind::Linear | ModuleKind::Matmul))
                .map(|(_, s)| perfcast_core::features::derive(s, 1).flops)
                .sum()
        };
        let ratio = flops(&tp.network) * 4.0 / flops(&net);
        assert!((ratio - 1.0).abs() < 1e-3, "{ratio}");
    }

    #[test]
    fn tp_communication_time_is_the_closed_form() {
        // Per layer and micro-batch: 4 ring all-reduces of b s h elements (Megatron-LM):
        // 4 [2 (t-1)/t * b s h bytes / B + 2 (t-1) alpha].
        let (s, h, a) = (256usize, 1024usize, 16usize);
        let net = gpt_block(s, h, a);
        let link = Link::custom(300.0, 3.4).unwrap();
        for t in [2usize, 4, 8] {
            let tp = tensor_parallel(&net, t).unwrap();
            for b in [1.0, 4.0] {
                let got: f64 = tp.comm.iter().map(|c| c.seconds(t, b, 2.0, &link)).sum();
                let (tf, bytes) = (t as f64, b * (s * h) as f64 * 2.0);
                let closed =
                    4.0 * (2.0 * (tf - 1.0) / tf * bytes / 300e9 + 2.0 * (tf - 1.0) * 3.4e-6);
                assert!(close(got, closed), "t={t}: {got} vs {closed}");
                let sent: f64 = tp.comm.iter().map(|c| c.bytes_sent(t, b, 2.0)).sum();
                assert!(close(sent, 8.0 * (tf - 1.0) / tf * bytes));
            }
        }
        // One device communicates nothing.
        let one = tensor_parallel(&net, 1).unwrap();
        assert_eq!(one.network, net);
        assert!(one.comm.iter().all(|c| *c == TpComm::default()));
    }

    #[test]
    fn tp_activation_memory_is_korthikanti() {
        // 16-bit: sbh (10 + 24/t + 5as/(ht)); with sequence parallelism sbh (34/t + 5as/(ht)).
        let (s, h, a) = (1024usize, 1280usize, 20usize);
        let (sf, hf, af) = (s as f64, h as f64, a as f64);
        let net = gpt_block(s, h, a);
        for t in [1usize, 2, 4] {
            let tf = t as f64;
            let tp = tensor_parallel(&net, t).unwrap();
            let g = tp.graph(false).unwrap();
            let got = g.kept_per_sample(0..g.nodes.len(), 2.0);
            let want = sf * hf * (10.0 + 24.0 / tf + 5.0 * af * sf / (hf * tf));
            assert!((got - want).abs() < 1e-6 * want, "t={t}: {got} vs {want}");
            let g = tp.graph(true).unwrap();
            let got = g.kept_per_sample(0..g.nodes.len(), 2.0);
            let want = sf * hf * (34.0 / tf + 5.0 * af * sf / (hf * tf));
            assert!(
                (got - want).abs() < 1e-6 * want,
                "t={t} sp: {got} vs {want}"
            );
        }
    }

    #[test]
    fn cnn_layers_stay_replicated_and_bad_splits_are_named() {
        let net = perfcast_core::zoo::build("resnet18", Some(64)).unwrap();
        let tp = tensor_parallel(&net, 4).unwrap();
        let last = net.layers.len() - 1;
        // Only the classifier splits (1000 / 4 classes per device).
        assert_eq!(tp.placement[last], Placement::Sharded);
        assert!(
            tp.placement[..last]
                .iter()
                .all(|&p| p == Placement::Replicated)
        );
        let e = tensor_parallel(&gpt_block(64, 96, 3), 2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("3 heads are not divisible"), "{e}");
    }

    #[test]
    fn stages_are_balanced_at_cut_points() {
        // Eight equal pieces over four stages: two each.
        let costs = vec![1.0; 8];
        let cuts: Vec<usize> = (0..8).collect();
        let p = partition(&costs, &cuts, 4).unwrap();
        assert_eq!(p, vec![0..2, 2..4, 4..6, 6..8]);
        // Uneven costs: the slowest stage is as small as it can be.
        let costs = [5.0, 1.0, 1.0, 1.0, 1.0, 1.0];
        let p = partition(&costs, &[0, 1, 2, 3, 4, 5], 2).unwrap();
        assert_eq!(p, vec![0..1, 1..6]);
        // Cuts only after layers 2 and 5: stages end there.
        let p = partition(&[1.0; 6], &[2, 5], 2).unwrap();
        assert_eq!(p, vec![0..3, 3..6]);
        assert!(partition(&[1.0; 6], &[2, 5], 3).is_none());
    }

    #[test]
    fn bubble_and_in_flight_are_the_closed_forms() {
        for p in 1..=8usize {
            for m in 1..=32usize {
                let want = if p == 1 {
                    0.0
                } else {
                    (p - 1) as f64 / (m + p - 1) as f64
                };
                assert!(close(bubble_fraction(p, m), want));
                // The idle share of the pipelined step is the bubble.
                let total = pipeline_s(p, m, 0.01);
                assert!(close((total - m as f64 * 0.01) / total, want) || p == 1);
                assert_eq!(Schedule::GPipe.in_flight(p, m, 0), m);
                assert_eq!(Schedule::OneFOneB.in_flight(p, m, 0), m.min(p));
                assert_eq!(Schedule::OneFOneB.in_flight(p, m, p - 1), 1);
            }
        }
        // 2 (activation + gradient) x elements x batch x bytes.
        assert_eq!(
            boundary_bytes(1024.0 * 1280.0, 2.0, 4.0),
            2.0 * 1024.0 * 1280.0 * 8.0
        );
    }
}
