//! Memory of a training step on one device: weights, gradients, optimiser state, the
//! activations the backward pass needs, and the transient tensors around them.
//!
//! Activations are counted by tensor, not by layer: every layer kind says which tensors its
//! backward pass keeps (a linear its input, ReLU its output, softmax its output, dropout a
//! one-byte mask, an add nothing), and a tensor kept by several layers (the input Q, K and V
//! projections share) is counted once. For a GPT block with dropout and 16-bit activations this
//! is exactly the `sbh (34 + 5 a s / h)` bytes per layer of Korthikanti et al. (2022,
//! "Reducing Activation Recomputation in Large Transformer Models", eq. 1), `sbh (10 + 24/t +
//! 5 a s / (h t))` under tensor parallelism of `t` and `sbh (34/t + 5 a s / (h t))` with
//! sequence parallelism too (tests below).
//!
//! The peak is found by walking the step: the forward pass in order (kept tensors accumulate,
//! tensors nobody keeps live from their producer to their last reader, or only while they are
//! made when no layer names them: the parts of a concat after its first), then the backward pass
//! in reverse (a kept tensor is freed after the backward of the first layer that keeps it;
//! parameter gradients accumulate; an activation's gradient lives from its last reader's
//! backward to its producer's). Persistent state (weights, optimiser state) is added on top,
//! and a fixed reserve for the runtime (CUDA context, library workspaces) on GPUs.
//!
//! Recomputation trades memory for a second forward pass:
//! - [`Recompute::Selective`] (Korthikanti et al.): the attention core (`QK^T`, softmax,
//!   dropout, the product with V) is not kept but recomputed in the backward pass; it keeps
//!   `34 sbh` per layer.
//! - [`Recompute::Full`] (Chen et al., 2016): only segment inputs are kept, at cut points of
//!   the graph (a layer output after which nothing reads an earlier tensor: block boundaries),
//!   segments chosen to minimise the peak; a segment's activations are rebuilt during its
//!   backward.

use std::ops::Range;

use perfcast_core::fusion::{Region, RegionKind};
use perfcast_core::{ModuleKind, ModuleSpec, Network, features};
use serde::{Deserialize, Serialize};

use crate::analytic::Optimizer;
use crate::error::{Error, Result};

/// Bytes of a dropout or attention mask element (a `bool`).
pub const MASK_BYTES: f64 = 1.0;
/// Bytes of a max-pool index (PyTorch stores `int64`).
pub const INDEX_BYTES: f64 = 8.0;

/// A tensor of the step: the network input or a layer's output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tensor {
    /// The network input.
    Input,
    /// The output of layer `i`.
    Layer(usize),
}

impl Tensor {
    fn slot(self) -> usize {
        match self {
            Tensor::Input => 0,
            Tensor::Layer(i) => i + 1,
        }
    }
}

/// One layer as the memory model sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// Layer name.
    pub name: String,
    /// Its kind.
    pub kind: ModuleKind,
    /// The tensors it reads.
    pub reads: Vec<Tensor>,
    /// The tensors its backward pass keeps (its own output is `Tensor::Layer(self)`).
    pub keeps: Vec<Tensor>,
    /// Bytes per sample it keeps besides tensors (a dropout mask, max-pool indices).
    pub private_bytes: f64,
    /// Activation-sized elements per sample it keeps besides tensors (intermediates of a norm
    /// composed of element-wise ops).
    pub private_elems: f64,
    /// Activation elements per sample its backward pass allocates and frees again (beyond
    /// the gradients of its operands).
    pub backward_transient: f64,
    /// Output elements per sample.
    pub out_elems: f64,
    /// Parameters.
    pub params: f64,
}

/// A network's layers as tensors read and kept, per sample.
#[derive(Clone, Debug, PartialEq)]
pub struct Graph {
    /// The layers, in execution order.
    pub nodes: Vec<Node>,
    /// Elements per sample of the network input.
    pub input_elems: f64,
    /// Per tensor ([`Tensor::Input`] first, then each layer's output): what its kept copy is
    /// divided by (sequence parallelism keeps a `1/t` shard), 1 otherwise.
    pub keep_divisor: Vec<f64>,
}

/// What the backward pass keeps of a layer, and what it keeps besides tensors, per sample, as
/// the kind's row says ([`perfcast_core::kinds::Keeps`]).
fn keeps_of(kind: ModuleKind, i: usize, reads: &[Tensor], out_elems: f64) -> (Vec<Tensor>, f64) {
    use perfcast_core::kinds::Keeps;
    let first = reads[0];
    let all = reads.to_vec();
    let own = Tensor::Layer(i);
    match kind.info().keeps {
        Keeps::Input => (vec![first], 0.0),
        Keeps::Inputs => (all, 0.0),
        Keeps::InputsAndOutput => {
            let mut v = all;
            v.push(own);
            (v, 0.0)
        }
        Keeps::Output => (vec![own], 0.0),
        Keeps::InputAndIndices => (vec![first], out_elems * INDEX_BYTES),
        Keeps::Mask => (Vec::new(), out_elems * MASK_BYTES),
        Keeps::Nothing => (Vec::new(), 0.0),
    }
}

fn product(shape: &[usize]) -> f64 {
    shape.iter().map(|&d| d as f64).product()
}

impl Graph {
    /// The graph of a network (checked first), with what [`Framework::Reference`] keeps.
    pub fn new(network: &Network) -> Result<Graph> {
        Graph::for_framework(network, Framework::Reference)
    }

    /// The graph of a network with what `framework` keeps and allocates.
    pub fn for_framework(network: &Network, framework: Framework) -> Result<Graph> {
        let shapes = network
            .check()
            .map_err(|e| Error::invalid("network", e.to_string()))?;
        let mut index = std::collections::HashMap::new();
        let mut nodes = Vec::with_capacity(network.layers.len());
        for (i, (layer, shape)) in network.layers.iter().zip(&shapes).enumerate() {
            let resolve = |name: &str| -> Tensor {
                if name == perfcast_core::NETWORK_INPUT {
                    Tensor::Input
                } else {
                    // `check` guarantees an earlier layer.
                    Tensor::Layer(index[name])
                }
            };
            let first = match &layer.input_from {
                Some(n) => resolve(n),
                None if i == 0 => Tensor::Input,
                None => Tensor::Layer(i - 1),
            };
            let mut reads = vec![first];
            if let Some(n) = &layer.second_from {
                reads.push(resolve(n));
            }
            if !layer.detached {
                reads.extend(layer.parts_from.iter().map(|n| resolve(n)));
            }
            let kind = layer.spec.kind();
            let out_elems = product(&shape.output);
            let (mut keeps, private_bytes) = keeps_of(kind, i, &reads, out_elems);
            let (mut private_elems, mut backward_transient) = (0.0, 0.0);
            if framework == Framework::Burn {
                match &layer.spec {
                    ModuleSpec::BatchNorm2d(_) | ModuleSpec::LayerNorm(_) => {
                        keeps.clear();
                        private_elems = 2.0 * out_elems;
                    }
                    ModuleSpec::Linear(l) if l.tokens > 1 => {
                        backward_transient = 2.0 * (l.in_features * l.out_features) as f64;
                    }
                    _ => {}
                }
            }
            nodes.push(Node {
                name: layer.name.clone(),
                kind,
                reads,
                keeps,
                private_bytes,
                private_elems,
                backward_transient,
                out_elems,
                params: features::derive(&layer.spec, 1).params,
            });
            index.insert(layer.name.as_str(), i);
        }
        Ok(Graph {
            keep_divisor: vec![1.0; nodes.len() + 1],
            nodes,
            input_elems: product(&network.input),
        })
    }

    /// Elements per sample of a tensor.
    pub fn elems(&self, t: Tensor) -> f64 {
        match t {
            Tensor::Input => self.input_elems,
            Tensor::Layer(i) => self.nodes[i].out_elems,
        }
    }

    /// Parameters of layers `range`.
    pub fn params(&self, range: Range<usize>) -> f64 {
        self.nodes[range].iter().map(|n| n.params).sum()
    }

    /// Layers after whose output nothing reads an earlier tensor: where a network can be cut
    /// into pipeline stages or recomputation segments (block boundaries). The last layer is
    /// always one.
    pub fn cut_points(&self) -> Vec<usize> {
        let n = self.nodes.len();
        // min_read[i]: the earliest tensor slot read by any layer after i.
        let mut cuts = Vec::new();
        let mut earliest = usize::MAX;
        for i in (0..n).rev() {
            if earliest > i {
                cuts.push(i);
            }
            for t in &self.nodes[i].reads {
                earliest = earliest.min(t.slot());
            }
        }
        cuts.reverse();
        cuts
    }

    /// Drops the attention core from what is kept (selective recomputation): the output of a
    /// matmul whose result reaches another matmul's first operand through softmax, masks,
    /// dropout or scalar ops, and those ops' outputs and masks. Returns the recomputed layers.
    pub fn drop_attention_core(&mut self) -> Vec<usize> {
        use ModuleKind as K;
        let mut core = Vec::new();
        for j in 0..self.nodes.len() {
            if self.nodes[j].kind != K::Matmul {
                continue;
            }
            let mut chain = Vec::new();
            let mut t = self.nodes[j].reads[0];
            while let Tensor::Layer(i) = t {
                let k = self.nodes[i].kind;
                if matches!(
                    k,
                    K::Softmax
                        | K::Dropout
                        | K::MaskedFill
                        | K::AddScalar
                        | K::MulScalar
                        | K::DivScalar
                ) {
                    chain.push(i);
                    t = self.nodes[i].reads[0];
                } else {
                    if k == K::Matmul {
                        chain.push(i);
                        core.extend(chain.iter().copied());
                    }
                    break;
                }
            }
        }
        core.sort_unstable();
        core.dedup();
        let dropped: Vec<Tensor> = core.iter().map(|&i| Tensor::Layer(i)).collect();
        for (i, node) in self.nodes.iter_mut().enumerate() {
            node.keeps.retain(|t| !dropped.contains(t));
            if core.contains(&i) {
                node.private_bytes = 0.0;
                node.private_elems = 0.0;
            }
        }
        core
    }

    /// Keeps what a compiler's fused backward keeps of `regions` (the fusion pass's regions
    /// of this graph's network): an element-wise or norm chain, alone or in a GEMM's epilogue,
    /// is recomputed from its sources instead of keeping its intermediates. The sources are
    /// the tensors its members read from outside the region and, for an epilogue, the GEMM's
    /// own output; they are kept only if a recomputed member kept anything. Masks and other
    /// private bytes go too (regenerated from the RNG seed). The GEMM keeps what it kept.
    /// Returns how many regions changed.
    pub fn recompute_fused_chains(&mut self, regions: &[Region]) -> usize {
        let mut changed = 0;
        for region in regions {
            let first = match region.kind {
                RegionKind::Epilogue => 1,
                RegionKind::Memory => 0,
                _ => continue,
            };
            if !region.is_fused() || region.members.iter().any(|&i| i >= self.nodes.len()) {
                continue;
            }
            let chain = &region.members[first..];
            let inside = |t: &Tensor| matches!(t, Tensor::Layer(i) if region.members.contains(i));
            let needed = chain.iter().any(|&i| {
                let n = &self.nodes[i];
                !n.keeps.is_empty() || n.private_elems > 0.0 || n.private_bytes > 0.0
            });
            let mut sources: Vec<Tensor> = Vec::new();
            if first == 1 {
                sources.push(Tensor::Layer(region.members[0]));
            }
            for &i in chain {
                for t in &self.nodes[i].reads {
                    if !inside(t) && !sources.contains(t) {
                        sources.push(*t);
                    }
                }
            }
            for &i in chain {
                let node = &mut self.nodes[i];
                node.keeps.clear();
                node.private_elems = 0.0;
                node.private_bytes = 0.0;
            }
            if needed {
                self.nodes[chain[0]].keeps = sources;
                changed += 1;
            }
        }
        changed
    }

    fn kept_bytes(&self, t: Tensor, act_bytes: f64) -> f64 {
        self.elems(t) * act_bytes / self.keep_divisor[t.slot()]
    }

    /// Bytes per sample the backward pass of layers `range` keeps (no recomputation).
    pub fn kept_per_sample(&self, range: Range<usize>, act_bytes: f64) -> f64 {
        let mut seen = std::collections::BTreeSet::new();
        let mut bytes = 0.0;
        for node in &self.nodes[range] {
            bytes += node.private_bytes + node.private_elems * act_bytes;
            for &t in &node.keeps {
                if seen.insert(t) {
                    bytes += self.kept_bytes(t, act_bytes);
                }
            }
        }
        bytes
    }

    /// Walks one micro-batch of `batch` samples through layers `range` (a pipeline stage or
    /// the whole network) and returns its peak: (peak, kept at the peak, parameter
    /// gradients at the peak, everything else at the peak), bytes.
    fn sweep(&self, range: Range<usize>, batch: f64, act_bytes: f64, grad_bytes: f64) -> Peak {
        let (a, b) = (range.start, range.end);
        let n_total = self.nodes.len();
        let slots = n_total + 1;
        // Per tensor: last reader, first keeper within the range.
        let mut last_read = vec![None::<usize>; slots];
        let mut first_keeper = vec![None::<usize>; slots];
        for i in a..b {
            for t in &self.nodes[i].reads {
                let s = t.slot();
                last_read[s] = Some(last_read[s].map_or(i, |l: usize| l.max(i)));
            }
            for t in &self.nodes[i].keeps {
                let s = t.slot();
                first_keeper[s].get_or_insert(i);
            }
        }
        // An output no layer names (a concat's unnamed part) reaches the loss through that
        // concat: it is read, and gets its gradient, where it is made.
        let mut named = vec![false; slots];
        for node in &self.nodes {
            for t in &node.reads {
                named[t.slot()] = true;
            }
        }
        for i in a..b {
            if !named[i + 1] {
                last_read[i + 1] = Some(i);
            }
        }
        // The range's output is held until the loss (or the next stage) takes it.
        let out_slot = b; // Tensor::Layer(b - 1)
        last_read[out_slot] = Some(usize::MAX);
        let size = |s: usize| -> f64 {
            let t = if s == 0 {
                Tensor::Input
            } else {
                Tensor::Layer(s - 1)
            };
            self.elems(t) * act_bytes * batch
        };
        let kept_size = |s: usize| -> f64 {
            let t = if s == 0 {
                Tensor::Input
            } else {
                Tensor::Layer(s - 1)
            };
            self.kept_bytes(t, act_bytes) * batch
        };
        // Tensors that come from before the range (the stage input), live from the start.
        let produced = |s: usize| -> usize { if s == 0 { 0 } else { s - 1 } };
        let active: Vec<usize> = (0..slots).filter(|&s| last_read[s].is_some()).collect();
        let mut best = Peak::default();
        let mut consider = |kept: f64, grads: f64, other: f64| {
            let total = kept + grads + other;
            if total > best.total {
                best = Peak {
                    total,
                    kept,
                    grads,
                    other,
                };
            }
        };
        // Forward: kept tensors accumulate; the others live from producer to last reader.
        let mut private = 0.0;
        for i in a..b {
            private +=
                (self.nodes[i].private_bytes + self.nodes[i].private_elems * act_bytes) * batch;
            let (mut kept, mut unkept) = (0.0, 0.0);
            for &s in &active {
                let Some(last) = last_read[s] else { continue };
                let p = produced(s);
                // From before the range (the stage input): there from the start.
                let born = s == 0 || p < a || p <= i;
                if !born {
                    continue;
                }
                if first_keeper[s].is_some() {
                    kept += kept_size(s);
                    // A sharded keep still needs its full copy while it is being read.
                    if last >= i {
                        unkept += size(s) - kept_size(s);
                    }
                } else if last >= i {
                    unkept += size(s);
                }
            }
            consider(kept + private, 0.0, unkept);
        }
        // Backward, from the last layer to the first.
        let private_before: Vec<f64> = (a..b)
            .scan(0.0, |acc, i| {
                *acc +=
                    (self.nodes[i].private_bytes + self.nodes[i].private_elems * act_bytes) * batch;
                Some(*acc)
            })
            .collect();
        let mut grads = 0.0;
        for k in (a..b).rev() {
            grads += self.nodes[k].params * grad_bytes;
            let mut kept_now = 0.0;
            let mut act_grads = 0.0;
            for &s in &active {
                let Some(last) = last_read[s] else { continue };
                if let Some(fk) = first_keeper[s]
                    && fk <= k
                {
                    kept_now += kept_size(s);
                }
                // Gradients flow to every tensor produced in the range, and to the stage
                // input unless it is the network input.
                if s == 0 {
                    continue;
                }
                let p = s - 1;
                let starts = if last == usize::MAX { b - 1 } else { last };
                if k <= starts && (p < a || p <= k) {
                    act_grads += size(s);
                }
            }
            let transient = self.nodes[k].backward_transient * act_bytes * batch;
            consider(
                kept_now + private_before[k - a],
                grads,
                act_grads + transient,
            );
        }
        best
    }
}

/// The peak of one micro-batch's step.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Peak {
    total: f64,
    kept: f64,
    grads: f64,
    other: f64,
}

/// Whose rules say what a layer's backward pass keeps and allocates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Framework {
    /// PyTorch with cuDNN/cuBLAS, as Megatron-LM and Korthikanti et al. account it: fused
    /// norms keep their input, GEMMs fold tokens into rows.
    #[default]
    Reference,
    /// burn's autodiff on its CPU backends (what `perfcast measure` runs): batch and layer norms
    /// are composed of element-wise ops and keep two activation-sized intermediates instead of
    /// their input; a linear over a token sequence broadcasts its weight over the batch, and its
    /// backward allocates the per-sample weight gradient (and its operand) before summing it.
    /// Found from this CPU's measurements (docs/plan.md), not from burn's documentation.
    Burn,
}

/// What the backward pass keeps, and what is recomputed instead.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Recompute {
    /// Everything the backward pass needs is kept.
    #[default]
    None,
    /// The attention core is recomputed (Korthikanti et al., 2022).
    Selective,
    /// Only segment inputs are kept; each segment's forward runs again in the backward pass.
    Full,
}

impl Recompute {
    /// Its name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Recompute::None => "none",
            Recompute::Selective => "selective",
            Recompute::Full => "full",
        }
    }
}

/// Precision and optimiser, for memory.
///
/// Mixed precision ([`MemoryConfig::mixed`]) as frameworks run it: half-precision weights,
/// gradients and activations, an fp32 master copy of the weights and fp32 optimiser state.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryConfig {
    /// Optimiser, for its state (SGD none, momentum one buffer, Adam two).
    pub optimizer: Optimizer,
    /// Bytes per activation element (4: fp32; 2: fp16/bf16).
    pub activation_bytes: f64,
    /// Bytes per parameter, and per parameter gradient (4: fp32).
    pub param_bytes: f64,
    /// Bytes per parameter of a master copy kept beside the working weights: 4 under mixed
    /// precision (fp32 master weights, whose type the optimiser state takes too), 0 otherwise.
    #[serde(default)]
    pub master_bytes: f64,
    /// Recomputation.
    pub recompute: Recompute,
    /// Bytes the runtime holds besides tensors (CUDA context, cuBLAS/cuDNN workspaces).
    pub reserve_bytes: f64,
    /// Whose rules say what is kept.
    pub framework: Framework,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            optimizer: Optimizer::Adam,
            activation_bytes: 4.0,
            param_bytes: 4.0,
            master_bytes: 0.0,
            recompute: Recompute::None,
            reserve_bytes: 0.0,
            framework: Framework::Reference,
        }
    }
}

impl MemoryConfig {
    /// This config for modules computing in elements of `bytes` (2: fp16/bf16): mixed
    /// precision, with fp32 master weights and optimiser state; 4 or more: unchanged.
    pub fn mixed(self, bytes: f64) -> MemoryConfig {
        if bytes >= 4.0 {
            return self;
        }
        MemoryConfig {
            activation_bytes: bytes,
            param_bytes: bytes,
            master_bytes: 4.0,
            ..self
        }
    }
}

/// One GiB.
pub const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// CUDA context plus library workspaces a GPU process holds before its first tensor (about
/// 0.3-0.5 GiB of context on recent drivers, and cuBLAS/cuDNN workspaces).
pub const GPU_RESERVE_BYTES: f64 = 0.75 * GIB;

impl Optimizer {
    /// Bytes of optimiser state per parameter at `param_bytes` per value.
    pub fn state_bytes_per_param(self, param_bytes: f64) -> f64 {
        param_bytes
            * match self {
                Optimizer::Sgd => 0.0,
                Optimizer::Momentum => 1.0,
                Optimizer::Adam => 2.0,
            }
    }
}

/// Peak memory of one device's training step, bytes, by what holds it at the peak.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryEstimate {
    /// Weights.
    pub weights: f64,
    /// Optimiser state.
    pub optimizer: f64,
    /// Parameter gradients alive at the peak.
    pub gradients: f64,
    /// Activations kept for the backward pass at the peak (every micro-batch in flight).
    pub activations: f64,
    /// Transient tensors at the peak: outputs not kept, activation gradients.
    pub workspace: f64,
    /// The runtime's reserve.
    pub reserve: f64,
    /// The peak: the sum of the above.
    pub total: f64,
}

/// Peak memory of layers `range` of `graph` (a pipeline stage, or `0..len` for the whole
/// network) training on micro-batches of `batch` samples with `in_flight` micro-batches'
/// activations held at once (1 without pipelining; GPipe `m`, 1F1B up to `p`).
pub fn stage_memory(
    graph: &Graph,
    range: Range<usize>,
    batch: usize,
    in_flight: usize,
    config: &MemoryConfig,
) -> Result<MemoryEstimate> {
    if in_flight == 0 {
        return Err(Error::invalid(
            "batch",
            "micro-batches in flight must be at least 1, got 0",
        ));
    }
    let (one, held) = stage_peak(graph, range, batch, config)?;
    Ok(one.with_in_flight(in_flight, held))
}

impl MemoryEstimate {
    /// This one-micro-batch estimate with `in_flight` micro-batches each holding `held` bytes
    /// between their forward and backward passes.
    pub fn with_in_flight(mut self, in_flight: usize, held: f64) -> MemoryEstimate {
        let extra = in_flight.saturating_sub(1) as f64 * held;
        self.activations += extra;
        self.total += extra;
        self
    }
}

/// The peak of one micro-batch of `batch` samples through layers `range`, and the bytes each
/// further micro-batch in flight holds (what it keeps between its forward and backward).
pub fn stage_peak(
    graph: &Graph,
    range: Range<usize>,
    batch: usize,
    config: &MemoryConfig,
) -> Result<(MemoryEstimate, f64)> {
    if range.is_empty() || range.end > graph.nodes.len() {
        return Err(Error::invalid(
            "layer range",
            format!(
                "{range:?} is not a non-empty range of the {} layers",
                graph.nodes.len()
            ),
        ));
    }
    if batch == 0 {
        return Err(Error::invalid(
            "batch",
            "the micro-batch must be at least 1, got 0",
        ));
    }
    let b = batch as f64;
    let (act, pb) = (config.activation_bytes, config.param_bytes);
    let params = graph.params(range.clone());
    let weights = params * (pb + config.master_bytes);
    let state_bytes = if config.master_bytes > 0.0 {
        config.master_bytes
    } else {
        pb
    };
    let optimizer = params * config.optimizer.state_bytes_per_param(state_bytes);
    let (peak, held_per_mb) = match config.recompute {
        Recompute::None => (
            graph.sweep(range.clone(), b, act, pb),
            graph.kept_per_sample(range.clone(), act) * b,
        ),
        Recompute::Selective => {
            let mut g = graph.clone();
            g.drop_attention_core();
            (
                g.sweep(range.clone(), b, act, pb),
                g.kept_per_sample(range.clone(), act) * b,
            )
        }
        Recompute::Full => full_recompute_peak(graph, range.clone(), b, act, pb),
    };
    let activations = peak.kept;
    let estimate = MemoryEstimate {
        weights,
        optimizer,
        gradients: peak.grads,
        activations,
        workspace: peak.other,
        reserve: config.reserve_bytes,
        total: weights + optimizer + peak.grads + activations + peak.other + config.reserve_bytes,
    };
    Ok((estimate, held_per_mb))
}

/// The fewest bytes a run of `network` at `batch` can hold on a CPU: a training step's peak
/// under burn's rules ([`cpu_training_peak`]); a forward pass's largest layer's operands and
/// result, a bound no run goes under. What `measure` checks against the machine's memory.
pub fn cpu_run_bytes(network: &Network, batch: usize, training: bool) -> f64 {
    let largest_layer = network
        .layers
        .iter()
        .map(|l| {
            let d = features::derive(&l.spec, batch);
            d.bytes_read + d.bytes_written
        })
        .fold(0.0, f64::max);
    if training {
        cpu_training_peak(network, batch, Framework::Burn).unwrap_or(largest_layer)
    } else {
        largest_layer
    }
}

/// The peak of one training step as `perfcast measure` runs it on a CPU (fp32, SGD with
/// momentum, no runtime reserve) under `framework`'s rules, in bytes; `None` when the network
/// cannot be modelled.
pub fn cpu_training_peak(network: &Network, batch: usize, framework: Framework) -> Option<f64> {
    let config = MemoryConfig {
        optimizer: Optimizer::Momentum,
        reserve_bytes: 0.0,
        framework,
        ..Default::default()
    };
    training_memory(network, batch, &config)
        .ok()
        .map(|m| m.total)
}

/// Peak memory of a whole network's training step on one device at `batch`.
pub fn training_memory(
    network: &Network,
    batch: usize,
    config: &MemoryConfig,
) -> Result<MemoryEstimate> {
    let graph = Graph::for_framework(network, config.framework)?;
    let n = graph.nodes.len();
    stage_memory(&graph, 0..n, batch, 1, config)
}

/// Full recomputation: segments between cut points, chosen to minimise the peak. Returns the
/// peak and the bytes one micro-batch holds between its forward and backward passes (the
/// segment inputs).
fn full_recompute_peak(
    graph: &Graph,
    range: Range<usize>,
    batch: f64,
    act: f64,
    grad_bytes: f64,
) -> (Peak, f64) {
    let cuts: Vec<usize> = graph
        .cut_points()
        .into_iter()
        .filter(|&c| c >= range.start && c + 1 < range.end)
        .collect();
    // Pieces: [start, cut0], (cut0, cut1], ..., (last, end).
    let mut bounds = vec![range.start];
    bounds.extend(cuts.iter().map(|c| c + 1));
    bounds.push(range.end);
    let pieces: Vec<Range<usize>> = bounds.windows(2).map(|w| w[0]..w[1]).collect();
    let piece_kept: Vec<f64> = pieces
        .iter()
        .map(|p| graph.kept_per_sample(p.clone(), act) * batch)
        .collect();
    let total_kept: f64 = piece_kept.iter().sum();
    let mut best: Option<(Peak, f64)> = None;
    for k in 1..=pieces.len() {
        // Greedy: close a segment once it holds about total / k.
        let target = total_kept / k as f64;
        let mut segments: Vec<Range<usize>> = Vec::new();
        let (mut start, mut acc) = (pieces[0].start, 0.0);
        for (p, kept) in pieces.iter().zip(&piece_kept) {
            acc += kept;
            if acc >= target {
                segments.push(start..p.end);
                start = p.end;
                acc = 0.0;
            }
        }
        if start < range.end {
            segments.push(start..range.end);
        }
        // Kept between passes: each segment's input (the stage input is held by whoever sent
        // it, so only inner boundaries count).
        let boundaries: f64 = segments
            .iter()
            .skip(1)
            .map(|s| graph.elems(Tensor::Layer(s.start - 1)) * act * batch)
            .sum();
        let mut peak = Peak::default();
        for s in &segments {
            let later_grads = graph.params(s.end..range.end) * grad_bytes;
            let inner = graph.sweep(s.clone(), batch, act, grad_bytes);
            let total = boundaries + inner.total + later_grads;
            if total > peak.total {
                peak = Peak {
                    total,
                    kept: boundaries + inner.kept,
                    grads: inner.grads + later_grads,
                    other: inner.other,
                };
            }
        }
        if best.as_ref().is_none_or(|(b, _)| peak.total < b.total) {
            best = Some((peak, boundaries));
        }
    }
    best.unwrap_or_default()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use perfcast_core::network::Layer;
    use perfcast_core::{Elementwise, LayerNorm, Linear, Matmul, ModuleSpec};

    /// One GPT block as Korthikanti et al. count it (pre-norm, dropout after the attention
    /// softmax and after both residual branches), `s` tokens, width `h`, `a` heads.
    pub(crate) fn gpt_block(s: usize, h: usize, a: usize) -> Network {
        let dh = h / a;
        let lin = |i, o| {
            ModuleSpec::Linear(Linear {
                tokens: s,
                in_features: i,
                out_features: o,
                bias: true,
            })
        };
        let ew = |shape| Elementwise { shape };
        let ln = ModuleSpec::LayerNorm(LayerNorm {
            tokens: s,
            features: h,
        });
        let mm = |m, k, n| {
            ModuleSpec::Matmul(Matmul {
                heads: a,
                m,
                k,
                n,
                trans_a: false,
                trans_b: false,
            })
        };
        Network {
            name: "gpt-block".into(),
            input: vec![s, h],
            layers: vec![
                Layer::new("ln1", ln.clone()),
                Layer::new("q", lin(h, h)),
                Layer::new("k", lin(h, h)).reads("ln1"),
                Layer::new("v", lin(h, h)).reads("ln1"),
                Layer::new("scores", mm(s, dh, s))
                    .reads("q")
                    .second("k")
                    .reshaped(),
                Layer::new("softmax", ModuleSpec::Softmax(ew([a, s, s]))),
                Layer::new("attn_drop", ModuleSpec::Dropout(ew([a, s, s]))),
                Layer::new("context", mm(s, s, dh)).second("v").reshaped(),
                Layer::new("proj", lin(h, h)).reshaped(),
                Layer::new("proj_drop", ModuleSpec::Dropout(ew([1, s, h]))),
                Layer::new("add1", ModuleSpec::Add(ew([1, s, h]))).second("input"),
                Layer::new("ln2", ln),
                Layer::new("fc1", lin(h, 4 * h)),
                Layer::new("gelu", ModuleSpec::Gelu(ew([1, s, 4 * h]))),
                Layer::new("fc2", lin(4 * h, h)),
                Layer::new("mlp_drop", ModuleSpec::Dropout(ew([1, s, h]))),
                Layer::new("add2", ModuleSpec::Add(ew([1, s, h]))).second("add1"),
            ],
        }
    }

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * a.abs().max(b.abs())
    }

    #[test]
    fn kept_activations_equal_korthikanti_per_layer() {
        // 16-bit activations, 1-byte masks: sbh (34 + 5 a s / h) per sample (b = 1).
        for (s, h, a) in [
            (1024usize, 1280usize, 20usize),
            (2048, 12288, 96),
            (128, 768, 12),
        ] {
            let g = Graph::new(&gpt_block(s, h, a)).unwrap();
            let (s_, h_, a_) = (s as f64, h as f64, a as f64);
            let formula = s_ * h_ * (34.0 + 5.0 * a_ * s_ / h_);
            let got = g.kept_per_sample(0..g.nodes.len(), 2.0);
            assert!(
                close(got, formula, 1e-12),
                "s={s} h={h}: {got} vs {formula}"
            );
            // Selective recomputation keeps 34 sbh.
            let mut sel = g.clone();
            let core = sel.drop_attention_core();
            let names: Vec<&str> = core.iter().map(|&i| sel.nodes[i].name.as_str()).collect();
            assert_eq!(names, ["scores", "softmax", "attn_drop"]);
            let got = sel.kept_per_sample(0..sel.nodes.len(), 2.0);
            assert!(close(got, 34.0 * s_ * h_, 1e-12), "{got}");
        }
    }

    #[test]
    fn a_compiled_chain_keeps_its_sources_not_its_intermediates() {
        use perfcast_core::fusion::{Fusion, fuse};
        let linear = |i: usize, o: usize| {
            ModuleSpec::Linear(Linear {
                tokens: 128,
                in_features: i,
                out_features: o,
                bias: true,
            })
        };
        let e = || Elementwise {
            shape: [1, 128, 1024],
        };
        // `x * (0.5 * x + 1)` after a GEMM: eager keeps the product's two inputs, a compiled
        // backward recomputes the scaled copy from the GEMM's output.
        let net = Network {
            name: "chain".into(),
            input: vec![128, 256],
            layers: vec![
                Layer::new("fc1", linear(256, 1024)),
                Layer::new("half", ModuleSpec::MulScalar(e())),
                Layer::new("shift", ModuleSpec::AddScalar(e())),
                Layer::new("gate", ModuleSpec::Mul(e())).second("fc1"),
                Layer::new("fc2", linear(1024, 256)),
            ],
        };
        let eager = Graph::new(&net).unwrap();
        let kept = |g: &Graph| g.kept_per_sample(0..g.nodes.len(), 4.0);
        let regions = fuse(&net, Fusion::Compile).unwrap();
        assert!(
            regions
                .iter()
                .any(|r| r.kind == RegionKind::Epilogue && r.members.len() == 4),
            "{regions:?}"
        );
        let mut compiled = eager.clone();
        assert_eq!(compiled.recompute_fused_chains(&regions), 1);
        // fc1 keeps the input, fc2 its own; between them eager keeps fc1's output and the shifted
        // copy, the compiled chain fc1's output alone.
        let (fc_in, act) = (128.0 * 256.0 * 4.0, 128.0 * 1024.0 * 4.0);
        assert_eq!(kept(&eager), fc_in + 2.0 * act + act);
        assert_eq!(kept(&compiled), fc_in + act + act);
        // Regions with nothing kept inside change nothing.
        let mut again = compiled.clone();
        assert_eq!(
            again.recompute_fused_chains(&fuse(&net, Fusion::None).unwrap()),
            0
        );
        assert_eq!(again, compiled);
    }

    #[test]
    fn a_concats_unnamed_part_counts_what_its_layer_keeps() {
        // A concat that names only its first part (an older network file): the other part's
        // ReLU output is still kept for the backward pass.
        let conv = |cin: usize, cout: usize, k: usize| {
            ModuleSpec::Conv2d(perfcast_core::Conv2d {
                in_channels: cin,
                out_channels: cout,
                input_hw: [16, 16],
                kernel: [k, k],
                stride: [1, 1],
                padding: [k / 2, k / 2],
                dilation: [1, 1],
                groups: 1,
                bias: true,
            })
        };
        let relu = |c: usize| ModuleSpec::Relu(Elementwise { shape: [c, 16, 16] });
        let fire = Network {
            name: "fire".into(),
            input: vec![16, 16, 16],
            layers: vec![
                Layer::new("squeeze", conv(16, 4, 1)),
                Layer::new("squeeze_relu", relu(4)),
                Layer::new("e1", conv(4, 8, 1)),
                Layer::new("e1_relu", relu(8)),
                Layer::new("e3", conv(4, 24, 3)).reads("squeeze_relu"),
                Layer::new("e3_relu", relu(24)),
                Layer::new(
                    "cat",
                    ModuleSpec::Concat(Elementwise {
                        shape: [32, 16, 16],
                    }),
                )
                .reads("e1_relu"),
                Layer::new("head", conv(32, 2, 1)),
            ],
        };
        let g = Graph::new(&fire).unwrap();
        let kept = g.kept_per_sample(0..g.nodes.len(), 4.0);
        // The squeeze and head convs keep their inputs, the three ReLUs their outputs.
        assert_eq!(kept, 4.0 * 256.0 * (16.0 + 4.0 + 8.0 + 24.0 + 32.0));
        let m = training_memory(&fire, 2, &MemoryConfig::default()).unwrap();
        assert_eq!(m.activations, 2.0 * kept);
        // Named as the concat's second part, the 3x3 branch is read there: what the backward
        // pass keeps is the same, and it lives until the concat.
        let mut named = fire.clone();
        named.layers[6].parts_from = vec!["e3_relu".into()];
        let g = Graph::new(&named).unwrap();
        assert_eq!(g.nodes[6].reads.len(), 2);
        assert_eq!(g.kept_per_sample(0..g.nodes.len(), 4.0), kept);
        let n = training_memory(&named, 2, &MemoryConfig::default()).unwrap();
        assert_eq!(n.activations, m.activations);
    }

    #[test]
    fn block_boundaries_are_cut_points() {
        let g = Graph::new(&gpt_block(64, 128, 4)).unwrap();
        let names: Vec<&str> = g
            .cut_points()
            .iter()
            .map(|&i| g.nodes[i].name.as_str())
            .collect();
        // After add1 nothing reads the block input; after add2 the block ends.
        assert_eq!(names, ["add1", "add2"]);
        let resnet = Graph::new(&perfcast_core::zoo::build("resnet18", Some(64)).unwrap()).unwrap();
        assert!(resnet.cut_points().len() >= 8 + 4);
    }

    #[test]
    fn persistent_state_is_exact_per_optimiser() {
        let net = perfcast_core::zoo::build("resnet50", None).unwrap();
        let params = 25_557_032.0;
        for (opt, per) in [
            (Optimizer::Sgd, 0.0),
            (Optimizer::Momentum, 4.0),
            (Optimizer::Adam, 8.0),
        ] {
            let m = training_memory(
                &net,
                2,
                &MemoryConfig {
                    optimizer: opt,
                    ..MemoryConfig::default()
                },
            )
            .unwrap();
            assert_eq!(m.weights, 4.0 * params);
            assert_eq!(m.optimizer, per * params);
            assert!(m.gradients <= 4.0 * params && m.gradients > 0.0);
            let sum = m.weights + m.optimizer + m.gradients + m.activations + m.workspace;
            assert!(close(m.total, sum, 1e-12));
        }
    }

    #[test]
    fn mixed_precision_keeps_fp32_masters_and_halves_activations() {
        let net = perfcast_core::zoo::build("resnet18", Some(64)).unwrap();
        let fp32 = training_memory(&net, 8, &MemoryConfig::default()).unwrap();
        let half = training_memory(&net, 8, &MemoryConfig::default().mixed(2.0)).unwrap();
        // 2-byte weights plus a 4-byte master; Adam's two moments in fp32 either way.
        assert!(close(half.weights, 1.5 * fp32.weights, 1e-12));
        assert!(close(half.optimizer, fp32.optimizer, 1e-12));
        // Half the bytes per element; the peak's moment may move, as the weights do not halve.
        let ratio = half.activations / fp32.activations;
        assert!((0.5 - 1e-9..0.6).contains(&ratio), "activations {ratio}x");
        assert!(half.total < fp32.total);
        assert_eq!(MemoryConfig::default().mixed(4.0), MemoryConfig::default());
    }

    #[test]
    fn peak_grows_with_batch_and_recomputation_lowers_it() {
        let net = perfcast_core::zoo::build("resnet50", Some(112)).unwrap();
        let at = |b, r| {
            training_memory(
                &net,
                b,
                &MemoryConfig {
                    recompute: r,
                    ..MemoryConfig::default()
                },
            )
            .unwrap()
        };
        let (m1, m8) = (at(1, Recompute::None), at(8, Recompute::None));
        // What is kept scales with the batch; weights do not.
        let g = Graph::new(&net).unwrap();
        let n = g.nodes.len();
        assert!(close(
            g.kept_per_sample(0..n, 4.0) * 8.0,
            stage_memory(&g, 0..n, 8, 2, &MemoryConfig::default())
                .unwrap()
                .activations
                - m8.activations,
            1e-9
        ));
        assert!(m8.activations > 4.0 * m1.activations);
        assert_eq!(m8.weights, m1.weights);
        let full = at(8, Recompute::Full);
        assert!(
            full.activations < 0.5 * m8.activations,
            "{full:?} vs {m8:?}"
        );
        assert!(full.total < m8.total);
    }

    #[test]
    fn burn_rules_keep_two_norm_intermediates_and_a_per_sample_weight_gradient() {
        let net = gpt_block(64, 128, 4);
        let reference = Graph::new(&net).unwrap();
        let burn = Graph::for_framework(&net, Framework::Burn).unwrap();
        let n = net.layers.len();
        // Each layer norm keeps two [s, h] intermediates instead of its input: the block input
        // and add1 are no longer kept by anyone; 2 x 2 s h more.
        let sh = 64.0 * 128.0;
        let diff = burn.kept_per_sample(0..n, 4.0) - reference.kept_per_sample(0..n, 4.0);
        assert!(close(diff, 4.0 * (4.0 * sh - 2.0 * sh), 1e-12), "{diff}");
        // fc1's backward allocates 2 x 128 x 512 elements per sample.
        let fc1 = net.layers.iter().position(|l| l.name == "fc1").unwrap();
        assert_eq!(burn.nodes[fc1].backward_transient, 2.0 * 128.0 * 512.0);
        assert_eq!(reference.nodes[fc1].backward_transient, 0.0);
        let at = |framework| {
            training_memory(
                &net,
                8,
                &MemoryConfig {
                    framework,
                    ..MemoryConfig::default()
                },
            )
            .unwrap()
            .total
        };
        assert!(at(Framework::Burn) > at(Framework::Reference));
    }

    #[test]
    fn in_flight_micro_batches_add_their_kept_activations() {
        let g = Graph::new(&gpt_block(128, 256, 4)).unwrap();
        let n = g.nodes.len();
        let c = MemoryConfig::default();
        let one = stage_memory(&g, 0..n, 2, 1, &c).unwrap();
        let four = stage_memory(&g, 0..n, 2, 4, &c).unwrap();
        let held = g.kept_per_sample(0..n, 4.0) * 2.0;
        assert!(close(four.total - one.total, 3.0 * held, 1e-12));
        let e = stage_memory(&g, 0..0, 2, 1, &c).unwrap_err().to_string();
        assert!(e.contains("0..0"), "{e}");
    }
}
