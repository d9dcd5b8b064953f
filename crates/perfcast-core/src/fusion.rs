//! Kernel fusion: which layers of a [`Network`] run as one kernel when a compiler or an
//! inference engine runs the network rather than eager PyTorch, and the least time such a
//! kernel allows on a device.
//!
//! A [`Fusion`] policy groups the layers into [`Region`]s, each one kernel. A region moves
//! only its external inputs and outputs: intermediates stay in registers or shared memory,
//! so its least time ([`Region::least_time_s`]) counts the FLOPs of every member but only
//! the bytes that cross the region's boundary.
//!
//! ```
//! use perfcast_core::fusion::{Fusion, RegionKind, fuse};
//!
//! let block = perfcast_core::zoo::build("transformer", Some(128)).unwrap();
//! let regions = fuse(&block, Fusion::Compile).unwrap();
//! assert!(regions.iter().any(|r| r.kind == RegionKind::Attention));
//! assert!(regions.len() < block.layers.len());
//! ```

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::canonical::least_flops;
use crate::error::{Error, Result};
use crate::features::{self, F32_BYTES};
use crate::network::{NETWORK_INPUT, Network};
use crate::spec::{Linear, ModuleKind, ModuleSpec};
use crate::{Context, DeviceSpec, Phase};

/// How a framework groups a network's layers into kernels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fusion {
    /// Eager: every layer its own kernel (the graph as given).
    #[default]
    None,
    /// Element-wise ops right after a GEMM-like op (linear, matmul, conv2d) run in its epilogue.
    Epilogue,
    /// torch.compile-like: epilogues, chains of element-wise and normalisation ops as one
    /// memory-bound kernel each, and attention as one FlashAttention-style kernel.
    Compile,
    /// Inference-engine-like: `compile`, and a normalisation after a GEMM's residual add
    /// fused into that GEMM's region (bias, residual and norm in one pass).
    Engine,
    /// Megatron-LM's transformer graph: sibling projections of one input as one GEMM (fused
    /// QKV), bias-GeLU, dropout-add and scale-mask-softmax as one kernel each, GEMMs alone.
    Megatron,
}

impl Fusion {
    /// Every policy, in the order the help lists them.
    pub const ALL: [Fusion; 5] = [
        Fusion::None,
        Fusion::Epilogue,
        Fusion::Compile,
        Fusion::Engine,
        Fusion::Megatron,
    ];

    /// The policy's name, as `--fusion` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Fusion::None => "none",
            Fusion::Epilogue => "epilogue",
            Fusion::Compile => "compile",
            Fusion::Engine => "engine",
            Fusion::Megatron => "megatron",
        }
    }

    /// The graph style the policy stands for, in words (what output names).
    pub fn graph_style(self) -> &'static str {
        match self {
            Fusion::None => "eager (one kernel per layer)",
            Fusion::Epilogue => "GEMM epilogues fused",
            Fusion::Compile => "compiled (epilogues, fused element-wise chains, flash attention)",
            Fusion::Engine => "inference engine (compile + residual-norm fusion)",
            Fusion::Megatron => "Megatron (fused QKV, bias-GeLU, dropout-add, scale-mask-softmax)",
        }
    }

    fn rules(self) -> Rules {
        let compile = Rules {
            epilogue: true,
            epilogue_norms: false,
            memory: true,
            memory_norms: true,
            attention: true,
            merge: false,
        };
        match self {
            Fusion::None => Rules::default(),
            Fusion::Epilogue => Rules {
                epilogue: true,
                ..Rules::default()
            },
            Fusion::Compile => compile,
            Fusion::Engine => Rules {
                epilogue_norms: true,
                ..compile
            },
            Fusion::Megatron => Rules {
                memory: true,
                merge: true,
                ..Rules::default()
            },
        }
    }
}

impl fmt::Display for Fusion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Fusion {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Fusion::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| Error::UnknownFusion(s.to_string()))
    }
}

/// What a policy lets fuse.
#[derive(Clone, Copy, Default)]
struct Rules {
    /// Element-wise ops join the GEMM they follow.
    epilogue: bool,
    /// Normalisations join a GEMM's epilogue too.
    epilogue_norms: bool,
    /// Chains of element-wise ops (and softmax) fuse into one memory-bound kernel.
    memory: bool,
    /// Normalisations and copies join those chains.
    memory_norms: bool,
    /// Scores matmul, scale/mask, softmax, dropout and context matmul run as one kernel.
    attention: bool,
    /// Linear layers reading one tensor with one input width run as one GEMM.
    merge: bool,
}

/// How a region runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RegionKind {
    /// One layer, as eager runs it.
    Single,
    /// A GEMM-like layer with element-wise ops (and under `engine`, a norm) in its epilogue.
    Epilogue,
    /// Element-wise and normalisation ops as one memory-bound kernel.
    Memory,
    /// Scores matmul through context matmul as one kernel; no score matrix in memory.
    Attention,
    /// Linear layers of one input as one GEMM of their summed output width.
    Merged,
}

impl RegionKind {
    /// The kind in words, for tables.
    pub fn name(self) -> &'static str {
        match self {
            RegionKind::Single => "single",
            RegionKind::Epilogue => "epilogue",
            RegionKind::Memory => "memory-bound",
            RegionKind::Attention => "attention",
            RegionKind::Merged => "merged GEMM",
        }
    }
}

/// Layers of a network that run as one kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct Region {
    /// How the kernel runs.
    pub kind: RegionKind,
    /// Indices of the member layers, ascending; the first is the anchor (the GEMM of an
    /// epilogue, the scores matmul of attention).
    pub members: Vec<usize>,
    /// Activation bytes per sample the kernel reads from outside the region (fp32), each
    /// external tensor once.
    pub read_per_sample: f64,
    /// Activation bytes per sample the kernel writes: members' outputs read outside it.
    pub written_per_sample: f64,
    /// Parameter bytes the members read (fp32), independent of the batch.
    pub param_bytes: f64,
    /// Of `read_per_sample`, the bytes read as members' first operands: what a training
    /// step's input gradients write back.
    pub input_per_sample: f64,
}

/// The network input's tensor id.
const INPUT: usize = usize::MAX;

impl Region {
    /// Whether the region is more than one layer.
    pub fn is_fused(&self) -> bool {
        self.members.len() > 1
    }

    /// The region's name: the anchor's name, then each other member's name less the prefix
    /// (up to a `.`) all members share, joined by `+` (`h0.mlp.fc1+act`).
    pub fn name(&self, network: &Network) -> String {
        let names: Vec<&str> = self
            .members
            .iter()
            .map(|&i| network.layers[i].name.as_str())
            .collect();
        let mut prefix = names[0].len();
        for n in &names[1..] {
            prefix = prefix.min(
                names[0]
                    .bytes()
                    .zip(n.bytes())
                    .take_while(|(a, b)| a == b)
                    .count(),
            );
        }
        // Searched in bytes: a common byte prefix may end inside a multi-byte character, but
        // a `.` is one byte, so the cut after it is a boundary in every name.
        let prefix = names[0].as_bytes()[..prefix]
            .iter()
            .rposition(|&b| b == b'.')
            .map_or(0, |p| p + 1);
        let mut name = names[0].to_string();
        for n in &names[1..] {
            name.push('+');
            name.push_str(&n[prefix..]);
        }
        name
    }

    /// The one GEMM a merged region runs: its members' linear layers side by side.
    pub fn merged_linear(&self, network: &Network) -> Option<ModuleSpec> {
        if self.kind != RegionKind::Merged {
            return None;
        }
        let mut merged: Option<Linear> = None;
        for &i in &self.members {
            let ModuleSpec::Linear(l) = &network.layers[i].spec else {
                return None;
            };
            match &mut merged {
                None => merged = Some(l.clone()),
                Some(m) => {
                    m.out_features += l.out_features;
                    m.bias |= l.bias;
                }
            }
        }
        merged.map(ModuleSpec::Linear)
    }

    /// Activation and parameter bytes the kernel moves at `batch`, read and written (fp32).
    pub fn bytes(&self, batch: usize) -> (f64, f64) {
        let b = batch as f64;
        (
            self.param_bytes + b * self.read_per_sample,
            b * self.written_per_sample,
        )
    }

    /// The least time, seconds, in which `device` can run the region in `context`: the
    /// members' least FLOPs at its peak or the region's boundary bytes at its bandwidth,
    /// whichever is longer; in training, as [`crate::canonical::least_time_s`] counts a
    /// layer, the outputs' gradients and the inputs' gradients move as well.
    pub fn least_time_s(&self, network: &Network, context: &Context, device: &DeviceSpec) -> f64 {
        let flops: f64 = self
            .members
            .iter()
            .map(|&i| &network.layers[i].spec)
            .filter(|spec| !spec.kind().is_zero_cost())
            .map(|spec| least_flops(spec, &features::derive(spec, context.batch), context.phase))
            .sum();
        let (read, written) = self.bytes(context.batch);
        let moved = read + written;
        let bytes = match context.phase {
            Phase::Training => moved + written + context.batch as f64 * self.input_per_sample,
            Phase::Inference => moved,
        } * device.element_scale();
        (flops / (device.peak_gflops * 1e9)).max(bytes / (device.mem_bandwidth_gbs * 1e9))
    }
}

fn pointwise(kind: ModuleKind) -> bool {
    kind.info().pointwise
}

fn norm(kind: ModuleKind) -> bool {
    matches!(
        kind,
        ModuleKind::LayerNorm | ModuleKind::RmsNorm | ModuleKind::BatchNorm2d
    )
}

fn gemm(kind: ModuleKind) -> bool {
    matches!(
        kind,
        ModuleKind::Linear | ModuleKind::Matmul | ModuleKind::Conv2d
    )
}

/// The network as tensors: views resolved to the tensor they present.
struct Graph<'a> {
    network: &'a Network,
    /// Per layer: the tensors it reads (producer index or [`INPUT`]) with the bytes per
    /// sample it reads of each; empty for views and detached layers.
    operands: Vec<Vec<(usize, f64)>>,
    /// Per tensor (producer index): the non-view layers reading it.
    readers: Vec<Vec<usize>>,
    /// Per layer: output elements per sample.
    out_elems: Vec<f64>,
    /// The tensor the network returns.
    last: usize,
}

impl<'a> Graph<'a> {
    fn new(network: &'a Network) -> Graph<'a> {
        let n = network.layers.len();
        let index: HashMap<&str, usize> = network
            .layers
            .iter()
            .enumerate()
            .map(|(i, l)| (l.name.as_str(), i))
            .collect();
        let mut alias = Vec::with_capacity(n);
        let mut operands = Vec::with_capacity(n);
        let mut readers = vec![Vec::new(); n];
        let mut out_elems = Vec::with_capacity(n);
        for (i, layer) in network.layers.iter().enumerate() {
            let tensor = |alias: &[usize], name: Option<&str>| -> usize {
                match name {
                    Some(NETWORK_INPUT) => INPUT,
                    Some(name) => index.get(name).map_or(INPUT, |&j| alias[j]),
                    None if i == 0 => INPUT,
                    None => alias[i - 1],
                }
            };
            let d = features::derive(&layer.spec, 1);
            out_elems.push(d.output_elems);
            let first = tensor(&alias, layer.input_from.as_deref());
            if layer.spec.kind().is_zero_cost() && !layer.detached {
                alias.push(first);
                operands.push(Vec::new());
                continue;
            }
            alias.push(i);
            let mut ops = Vec::new();
            if !layer.detached {
                ops.push((first, F32_BYTES * d.input_elems));
                if layer.second_from.is_some() {
                    let second = tensor(&alias, layer.second_from.as_deref());
                    let second_bytes = d.bytes_read
                        - F32_BYTES * (d.input_elems + d.params)
                        - mask_bytes(&layer.spec, &d);
                    ops.push((second, second_bytes.max(0.0)));
                }
                // A concat's named parts are operands too; the bytes it reads are counted once.
                for name in &layer.parts_from {
                    ops.push((tensor(&alias, Some(name)), 0.0));
                }
            }
            for &(t, _) in &ops {
                if t != INPUT && !readers[t].contains(&i) {
                    readers[t].push(i);
                }
            }
            operands.push(ops);
        }
        let last = alias.last().copied().unwrap_or(INPUT);
        Graph {
            network,
            operands,
            readers,
            out_elems,
            last,
        }
    }

    fn kind(&self, i: usize) -> ModuleKind {
        self.network.layers[i].spec.kind()
    }

    fn joinable(&self, i: usize, assigned: &[bool]) -> bool {
        let layer = &self.network.layers[i];
        !assigned[i] && !layer.detached && !layer.spec.kind().is_zero_cost()
    }

    /// Grows a region from `anchor` through the layers reading its members, in order,
    /// taking those `allowed` admits whose other operands exist before the anchor runs.
    /// With `siblings`, the other readers of the anchor's operands are candidates too (a
    /// generated kernel computes `x^3` and `0.5 x` from one read of `x`).
    fn grow(
        &self,
        anchor: usize,
        assigned: &[bool],
        allowed: &dyn Fn(usize) -> bool,
        siblings: bool,
    ) -> Vec<usize> {
        let mut members = vec![anchor];
        let mut next: BinaryHeap<Reverse<usize>> =
            self.readers[anchor].iter().map(|&r| Reverse(r)).collect();
        if siblings {
            for &(t, _) in &self.operands[anchor] {
                if t != INPUT {
                    next.extend(
                        self.readers[t]
                            .iter()
                            .filter(|&&r| r > anchor)
                            .map(|&r| Reverse(r)),
                    );
                }
            }
        }
        while let Some(Reverse(c)) = next.pop() {
            if members.contains(&c) || !self.joinable(c, assigned) || !allowed(c) {
                continue;
            }
            let ready = self.operands[c]
                .iter()
                .all(|&(t, _)| t == INPUT || t < anchor || members.contains(&t));
            if !ready {
                continue;
            }
            members.push(c);
            next.extend(self.readers[c].iter().map(|&r| Reverse(r)));
        }
        members.sort_unstable();
        members
    }

    /// Whether tensor `t` is read outside `members` (or returned by the network).
    fn escapes(&self, t: usize, members: &[usize]) -> bool {
        t == self.last
            || self.readers[t].is_empty()
            || self.readers[t].iter().any(|r| !members.contains(r))
    }

    /// The attention region anchored at the scores matmul `s`, if the layers after it are
    /// scale/mask, softmax, dropout and a context matmul whose score matrix nothing else reads.
    fn attention(&self, s: usize, assigned: &[bool]) -> Option<Vec<usize>> {
        let scores = self.out_elems[s];
        let core = |i: usize| {
            use ModuleKind::*;
            matches!(
                self.kind(i),
                MulScalar | DivScalar | AddScalar | Add | MaskedFill | Softmax | Dropout
            ) && self.out_elems[i] == scores
        };
        let mut members = self.grow(s, assigned, &core, false);
        if !members.iter().any(|&i| self.kind(i) == ModuleKind::Softmax) {
            return None;
        }
        let context = members
            .iter()
            .flat_map(|&m| self.readers[m].iter().copied())
            .filter(|&r| {
                !members.contains(&r)
                    && self.joinable(r, assigned)
                    && self.kind(r) == ModuleKind::Matmul
                    && self.operands[r].len() == 2
                    && members.contains(&self.operands[r][0].0)
                    && (self.operands[r][1].0 == INPUT || self.operands[r][1].0 < s)
            })
            .min()?;
        members.push(context);
        // The score matrix and what follows it stay inside the kernel.
        if members[..members.len() - 1]
            .iter()
            .any(|&m| self.escapes(m, &members))
        {
            return None;
        }
        // The kernel writes its output in the merged-head layout the copy would make.
        if let [copy] = self.readers[context][..]
            && self.kind(copy) == ModuleKind::Copy
            && self.joinable(copy, assigned)
            && self.out_elems[copy] == self.out_elems[context]
        {
            members.push(copy);
        }
        Some(members)
    }

    /// Linear layers right after `anchor` that read its tensor with its rows and width.
    fn siblings(&self, anchor: usize, assigned: &[bool]) -> Vec<usize> {
        let layers = &self.network.layers;
        let ModuleSpec::Linear(first) = &layers[anchor].spec else {
            return vec![anchor];
        };
        let source = self.operands[anchor].first().map(|o| o.0);
        let mut members = vec![anchor];
        for j in anchor + 1..layers.len() {
            let same = matches!(&layers[j].spec, ModuleSpec::Linear(l)
                if l.tokens == first.tokens && l.in_features == first.in_features)
                && self.joinable(j, assigned)
                && self.operands[j].first().map(|o| o.0) == source
                && layers[j].reshape == layers[anchor].reshape;
            if !same {
                break;
            }
            members.push(j);
        }
        members
    }

    fn region(&self, kind: RegionKind, members: Vec<usize>) -> Region {
        let layers = &self.network.layers;
        let mut external: HashMap<usize, f64> = HashMap::new();
        let (mut other_reads, mut written, mut param_bytes) = (0.0, 0.0, 0.0);
        let mut inputs = 0.0;
        for &m in &members {
            let d = features::derive(&layers[m].spec, 1);
            if layers[m].spec.kind().is_zero_cost() {
                continue;
            }
            match self.operands[m].first() {
                Some(&(t, bytes)) if t == INPUT || !members.contains(&t) => inputs += bytes,
                Some(_) => {}
                None => inputs += F32_BYTES * d.input_elems,
            }
            param_bytes += F32_BYTES * d.params;
            let activations = d.bytes_read - F32_BYTES * d.params;
            let mut operand_bytes = 0.0;
            for &(t, bytes) in &self.operands[m] {
                operand_bytes += bytes;
                if t == INPUT || !members.contains(&t) {
                    let e = external.entry(t).or_insert(0.0);
                    *e = e.max(bytes);
                }
            }
            // What a member reads beside its graph operands (a mask; a detached layer's
            // operands) comes from outside.
            other_reads += (activations - operand_bytes).max(0.0);
            if self.escapes(m, &members) {
                written += d.bytes_written;
            }
        }
        Region {
            kind,
            members,
            read_per_sample: external.values().sum::<f64>() + other_reads,
            written_per_sample: written,
            param_bytes,
            input_per_sample: inputs,
        }
    }
}

/// The boolean mask a masked fill reads beside its operand, bytes per sample.
fn mask_bytes(spec: &ModuleSpec, d: &features::Derived) -> f64 {
    if spec.kind() == ModuleKind::MaskedFill {
        F32_BYTES * d.input_elems / 4.0
    } else {
        0.0
    }
}

/// Groups `network`'s layers into the kernels `policy` runs, in execution order (each region
/// at its first member's place); every layer is in exactly one region. Under
/// [`Fusion::None`] every layer is its own region.
pub fn fuse(network: &Network, policy: Fusion) -> Result<Vec<Region>> {
    network.validate()?;
    let g = Graph::new(network);
    let rules = policy.rules();
    let n = network.layers.len();
    let mut assigned = vec![false; n];
    let mut regions = Vec::new();
    for i in 0..n {
        if assigned[i] {
            continue;
        }
        let kind = g.kind(i);
        let joinable = g.joinable(i, &assigned);
        let mut found: Option<(RegionKind, Vec<usize>)> = None;
        if joinable && rules.merge && kind == ModuleKind::Linear {
            let members = g.siblings(i, &assigned);
            if members.len() > 1 {
                found = Some((RegionKind::Merged, members));
            }
        }
        if found.is_none() && joinable && rules.attention && kind == ModuleKind::Matmul {
            found = g
                .attention(i, &assigned)
                .map(|m| (RegionKind::Attention, m));
        }
        if found.is_none() && joinable && rules.epilogue && gemm(kind) {
            let out = g.out_elems[i];
            let epilogue = |c: usize| {
                let k = g.kind(c);
                (pointwise(k) || (rules.epilogue_norms && norm(k))) && g.out_elems[c] == out
            };
            let members = g.grow(i, &assigned, &epilogue, false);
            if members.len() > 1 {
                found = Some((RegionKind::Epilogue, members));
            }
        }
        let chain = |k: ModuleKind| {
            pointwise(k)
                || k == ModuleKind::Softmax
                || (rules.memory_norms
                    && (norm(k)
                        || matches!(
                            k,
                            ModuleKind::Copy
                                | ModuleKind::Concat
                                | ModuleKind::Slice
                                | ModuleKind::Pad
                        )))
        };
        if found.is_none() && joinable && rules.memory && chain(kind) {
            let members = g.grow(i, &assigned, &|c| chain(g.kind(c)), true);
            if members.len() > 1 {
                found = Some((RegionKind::Memory, members));
            }
        }
        let (kind, members) = found.unwrap_or((RegionKind::Single, vec![i]));
        for &m in &members {
            assigned[m] = true;
        }
        regions.push(g.region(kind, members));
    }
    Ok(regions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zoo;

    fn names(net: &Network, regions: &[Region]) -> Vec<String> {
        regions.iter().map(|r| r.name(net)).collect()
    }

    #[test]
    fn policies_parse_and_unknown_names_say_what_is_known() {
        for f in Fusion::ALL {
            assert_eq!(f.name().parse::<Fusion>().unwrap(), f);
        }
        let err = "xla".parse::<Fusion>().unwrap_err().to_string();
        assert_eq!(
            err,
            "unknown fusion policy `xla`: expected one of none, epilogue, compile, engine, megatron"
        );
    }

    #[test]
    fn names_cut_shared_prefixes_at_a_dot_even_among_multibyte_names() {
        let mut net = gelu_new_mlp();
        // `а` and `б` share their first byte: the common byte prefix ends inside a character.
        let rename = |n: &str| match n {
            "fc1" => "блок.а".to_string(),
            "pow" => "блок.б".to_string(),
            other => format!("блок.{other}"),
        };
        for layer in &mut net.layers {
            layer.name = rename(&layer.name);
            layer.input_from = layer.input_from.as_deref().map(rename);
            layer.second_from = layer.second_from.as_deref().map(rename);
        }
        net.check().unwrap();
        let regions = fuse(&net, Fusion::Epilogue).unwrap();
        assert_eq!(
            regions[0].name(&net),
            "блок.а+б+mul1+add1+mul2+tanh+add2+mul3+mul4"
        );
    }

    #[test]
    fn none_keeps_every_layer_alone() {
        let block = zoo::build("transformer", Some(64)).unwrap();
        let regions = fuse(&block, Fusion::None).unwrap();
        assert_eq!(regions.len(), block.layers.len());
        assert!(regions.iter().all(|r| r.kind == RegionKind::Single));
    }

    #[test]
    fn bert_block_fuses_as_each_policy_says() {
        let block = zoo::build("transformer", Some(64)).unwrap();
        let epilogue = fuse(&block, Fusion::Epilogue).unwrap();
        assert_eq!(
            names(&block, &epilogue),
            [
                "attn.q",
                "attn.k",
                "attn.v",
                "attn.scores",
                "attn.softmax",
                "attn.context",
                "attn.out+add",
                "attn.norm",
                "mlp.fc1+gelu",
                "mlp.fc2+add",
                "mlp.norm"
            ]
        );
        let compile = fuse(&block, Fusion::Compile).unwrap();
        assert_eq!(
            names(&block, &compile),
            [
                "attn.q",
                "attn.k",
                "attn.v",
                "attn.scores+softmax+context",
                "attn.out+add",
                "attn.norm",
                "mlp.fc1+gelu",
                "mlp.fc2+add",
                "mlp.norm"
            ]
        );
        assert_eq!(compile[3].kind, RegionKind::Attention);
        let engine = fuse(&block, Fusion::Engine).unwrap();
        assert_eq!(
            names(&block, &engine),
            [
                "attn.q",
                "attn.k",
                "attn.v",
                "attn.scores+softmax+context",
                "attn.out+add+norm",
                "mlp.fc1+gelu",
                "mlp.fc2+add+norm"
            ]
        );
        let megatron = fuse(&block, Fusion::Megatron).unwrap();
        assert_eq!(
            names(&block, &megatron),
            [
                "attn.q+k+v",
                "attn.scores",
                "attn.softmax",
                "attn.context",
                "attn.out",
                "attn.add",
                "attn.norm",
                "mlp.fc1",
                "mlp.gelu",
                "mlp.fc2",
                "mlp.add",
                "mlp.norm"
            ]
        );
        let ModuleSpec::Linear(qkv) = megatron[0].merged_linear(&block).unwrap() else {
            panic!("not a linear")
        };
        assert_eq!((qkv.in_features, qkv.out_features), (768, 3 * 768));
    }

    /// A linear, then `gelu_new` as eager PyTorch runs it (eight kernels, `x` read three
    /// times), then a second linear.
    fn gelu_new_mlp() -> Network {
        use crate::network::Layer;
        use crate::spec::{Elementwise, Linear};
        let e = || Elementwise { shape: [1, 16, 64] };
        let fc = |i, o| {
            ModuleSpec::Linear(Linear {
                tokens: 16,
                in_features: i,
                out_features: o,
                bias: true,
            })
        };
        Network {
            name: "mlp".into(),
            input: vec![16, 32],
            layers: vec![
                Layer::new("fc1", fc(32, 64)),
                Layer::new("pow", ModuleSpec::PowScalar(e())),
                Layer::new("mul1", ModuleSpec::MulScalar(e())),
                Layer::new("add1", ModuleSpec::Add(e()))
                    .reads("fc1")
                    .second("mul1"),
                Layer::new("mul2", ModuleSpec::MulScalar(e())),
                Layer::new("tanh", ModuleSpec::Tanh(e())),
                Layer::new("add2", ModuleSpec::AddScalar(e())),
                Layer::new("mul3", ModuleSpec::MulScalar(e())).reads("fc1"),
                Layer::new("mul4", ModuleSpec::Mul(e())).second("add2"),
                Layer::new("fc2", fc(64, 32)),
            ],
        }
    }

    #[test]
    fn an_eight_kernel_activation_is_one_kernel_in_the_epilogue_or_apart() {
        let net = gelu_new_mlp();
        net.check().unwrap();
        let compile = fuse(&net, Fusion::Compile).unwrap();
        assert_eq!(
            names(&net, &compile),
            ["fc1+pow+mul1+add1+mul2+tanh+add2+mul3+mul4", "fc2"]
        );
        // Megatron's bias-GeLU kernel: the GEMM alone, the activation one kernel reading
        // `x` once and writing its result once.
        let megatron = fuse(&net, Fusion::Megatron).unwrap();
        assert_eq!(
            names(&net, &megatron),
            ["fc1", "pow+mul1+add1+mul2+tanh+add2+mul3+mul4", "fc2"]
        );
        let act = &megatron[1];
        assert_eq!(act.kind, RegionKind::Memory);
        assert_eq!(act.read_per_sample, F32_BYTES * 16.0 * 64.0);
        assert_eq!(act.written_per_sample, F32_BYTES * 16.0 * 64.0);
    }

    #[test]
    fn a_region_moves_only_what_crosses_its_boundary() {
        let block = zoo::build("transformer", Some(64)).unwrap();
        let compile = fuse(&block, Fusion::Compile).unwrap();
        let attention = &compile[3];
        // Q, K and V in, the context out; the 12 x 64 x 64 scores never leave the kernel.
        let qkv = 3.0 * F32_BYTES * 64.0 * 768.0;
        assert_eq!(attention.read_per_sample, qkv);
        assert_eq!(attention.written_per_sample, F32_BYTES * 64.0 * 768.0);
        assert_eq!(attention.param_bytes, 0.0);
        // fc2 + residual add: the MLP activation and the residual in, one output.
        let fc2 = &compile[7];
        assert_eq!(fc2.read_per_sample, F32_BYTES * 64.0 * (3072.0 + 768.0));
        assert_eq!(fc2.written_per_sample, F32_BYTES * 64.0 * 768.0);
        assert_eq!(fc2.param_bytes, F32_BYTES * 768.0 * 3073.0);
    }

    #[test]
    fn a_fused_region_is_bounded_by_its_boundary_not_its_intermediates() {
        let block = zoo::build("transformer", Some(128)).unwrap();
        let device = crate::known::lookup("a100").unwrap();
        for phase in [Phase::Inference, Phase::Training] {
            let context = Context {
                batch: 8,
                phase,
                threads: 1,
                utilisation: 0.0,
            };
            for policy in Fusion::ALL {
                for r in fuse(&block, policy).unwrap() {
                    if block.layers[r.members[0]].spec.kind().is_zero_cost() {
                        continue;
                    }
                    let parts: f64 = r
                        .members
                        .iter()
                        .map(|&i| {
                            crate::canonical::least_time_s(&block.layers[i].spec, &context, &device)
                        })
                        .sum();
                    let fused = r.least_time_s(&block, &context, &device);
                    assert!(fused > 0.0, "{}", r.name(&block));
                    assert!(
                        fused <= parts * (1.0 + 1e-12),
                        "{policy} {phase:?} {}: {fused} > {parts}",
                        r.name(&block)
                    );
                    if !r.is_fused() && r.kind == RegionKind::Single {
                        assert!((fused / parts - 1.0).abs() < 1e-12, "{}", r.name(&block));
                    }
                }
            }
        }
    }
}
