//! ONNX graphs into perfcast networks.
//!
//! [`import_file`] reads a `.onnx` file ([`proto`], a small reader of the protobuf messages),
//! fixes its symbolic dims ([`ImportOptions`]), infers every tensor's shape node by node, folds
//! the constant subgraphs exporters leave (shape arithmetic: `Shape`, `Gather`, `Concat`,
//! `Unsqueeze`, ... on constants, and masks built from constants: a runtime computes them once;
//! counted in [`Imported::folded`]), and maps each remaining node to a [`ModuleSpec`] layer. A
//! lookup in a weight table is never folded, even by constant indices (learned positions run
//! per call).
//!
//! # Shapes
//!
//! Shapes are inferred at the dims the inputs get: a symbolic batch axis is 1, so every layer
//! describes one sample (the batch belongs to the [`perfcast_core::Context`]: `--batch`). A
//! fixed batch is read the same way for every op: when the first input's leading dim is a
//! number N above 1 (rank 2 or more), the graph is imported at batch 1 and N is reported in
//! [`Imported::batch`]; other inputs, recorded shapes and `Reshape`, `Expand` and
//! `ConstantOfShape` targets that lead with N get 1 there. A symbolic sequence axis gets `seq`.
//!
//! # Limits
//!
//! Nothing in a file makes the importer panic or allocate without bound: every dim is at most
//! [`MAX_AXIS`] and every tensor at most [`MAX_ELEMENTS`] elements (an initializer is refused
//! by its dims before its values are read), window attributes lie within the sizes a spec
//! takes, axes and permutations are checked against the rank, shape arithmetic is checked, and
//! a constant computed from values holds at most 2^26 elements. Each refusal is one line naming
//! the node, the attribute and the value. A layer's spec takes the tensor's full shape with its
//! leading axes folded into the first (an element-wise op on `[1, T, h]` is `[1, T, h]`; a
//! 4-D attention product `[1, H, T, d] x [1, H, d, T]` is a matmul of `H` heads).
//!
//! # Mapping
//!
//! | ONNX | kind |
//! | --- | --- |
//! | `Conv` (2-D) | conv2d (grouped, depthwise) |
//! | `Gemm`; `MatMul` by a 2-D weight (+ an `Add` of its bias, fused) | linear |
//! | `MatMul` of two activations | matmul (`trans_b` when the right operand is a transpose) |
//! | `MaxPool`, `AveragePool`, `GlobalAveragePool`, `GlobalMaxPool` | maxpool2d / avgpool2d |
//! | `BatchNormalization` | batchnorm2d (folded into the conv's bias with `fuse_conv_bn`) |
//! | `LayerNormalization`; `RMSNormalization`, `SimplifiedLayerNormalization` | layernorm; rmsnorm |
//! | `Relu`, `Sigmoid`, `Tanh`, `Gelu`, `Softmax` | their kinds |
//! | `Add`/`Sub`, `Mul`, `Div`, `Pow` of equal shapes; with a broadcast or constant operand | add, mul, div, pow; add_scalar, mul_scalar, div_scalar, pow_scalar |
//! | `Where` | masked_fill |
//! | `Gather` of a weight by indices; of an activation | embedding; slice |
//! | `Reshape`, `Flatten`, `Squeeze`, `Unsqueeze`, `Transpose`, `Expand`, `Split`, `Identity`, `Dropout` (inference) | view (zero cost) |
//! | `Reshape` / `Flatten` of a transposed tensor | copy (PyTorch's reshape materialises a permuted tensor) |
//! | `Concat`, `Slice`, `Pad` | concat, slice, pad |
//! | `ReduceSum`, `ReduceMean` | sum |
//! | `Cast` | copy; a view when it casts an activation to float (a no-op in eager PyTorch) |
//! | `GatherElements` | slice |
//! | nearest kinds: `Erf` -> gelu (an erf per element), `Exp`/`Log` -> sigmoid, `Sqrt` -> pow_scalar, `Reciprocal` -> div_scalar, `Neg` -> mul_scalar, `Clip`/`LeakyRelu`/`HardSigmoid`/`HardSwish`/`Abs` -> relu | |
//!
//! Every other op is *unmapped*: listed in [`Imported::unmapped`] with its count and its share
//! of FLOPs and bytes (one operation per output element, every operand read and the output
//! written once), never dropped silently; with [`ImportOptions::strict`] it is an error. Its
//! output shape comes from the file's `value_info` when the exporter recorded one; a node that
//! needs a shape nothing gives is an error naming it.
//!
//! A layer that reads a tensor the network does not model (a constant, a second model input,
//! an unmapped op's output) is [`Layer::detached`](perfcast_core::Layer::detached).

pub mod proto;
mod report;
pub mod testing;

pub use report::{ImportReport, UnmappedRow};

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use perfcast_core::{
    BatchNorm2d, Conv2d, Elementwise, Embedding, Layer, LayerNorm, Linear, MAX_AXIS, MAX_ELEMENTS,
    Matmul, ModuleKind, ModuleSpec, NETWORK_INPUT, Network, Pool2d, features,
};
use serde::Serialize;

use crate::error::{Error, Result};
use proto::{Dim, Model, Node};

/// How to import a graph.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ImportOptions {
    /// Tokens for symbolic sequence axes (`seq`, `sequence`, `length`, ... or the second axis
    /// of a 2-D input).
    pub seq: Option<usize>,
    /// Full shapes of named inputs, overriding what the file declares.
    pub inputs: Vec<(String, Vec<usize>)>,
    /// Whether an op without a kind is an error rather than listed.
    pub strict: bool,
    /// Whether a `BatchNormalization` right after a `Conv` is folded into the conv's bias (as
    /// inference runtimes do) rather than kept as its own layer (as PyTorch eager runs it).
    pub fuse_conv_bn: bool,
}

/// Ops of one type that have no kind.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Unmapped {
    /// The op type.
    pub op: String,
    /// Nodes of it.
    pub count: usize,
    /// Estimated FLOPs of those nodes (one per output element).
    pub flops: f64,
    /// Estimated bytes they move (operands read and outputs written once, 4 bytes each).
    pub bytes: f64,
}

/// An imported graph.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Imported {
    /// The network of mapped layers.
    pub network: Network,
    /// Unmapped ops, by type.
    pub unmapped: Vec<Unmapped>,
    /// Nodes evaluated as constants (shape arithmetic) and not run.
    pub folded: usize,
    /// Fusions made, by pattern (`MatMul+Add`, `Conv+BatchNormalization`), with counts.
    pub fused: BTreeMap<String, usize>,
    /// FLOPs of the mapped layers (batch 1).
    pub mapped_flops: f64,
    /// Bytes of the mapped layers (batch 1).
    pub mapped_bytes: f64,
    /// Nodes in the file.
    pub nodes: usize,
    /// The file's default-domain opset.
    pub opset: i64,
    /// Notes: nearest-kind mappings and other approximations, by op, with counts.
    pub notes: BTreeMap<String, usize>,
    /// The batch the file fixes: its first input's leading dim when that is a number above 1
    /// (the network is the per-sample graph, to run at this batch); `None` for batch 1 or a
    /// symbolic batch.
    pub batch: Option<usize>,
}

impl Imported {
    /// Share of all estimated FLOPs that unmapped ops hold, in [0, 1].
    pub fn unmapped_flop_share(&self) -> f64 {
        let u: f64 = self.unmapped.iter().map(|u| u.flops).sum();
        share(u, self.mapped_flops)
    }

    /// Share of all estimated bytes that unmapped ops move, in [0, 1].
    pub fn unmapped_byte_share(&self) -> f64 {
        let u: f64 = self.unmapped.iter().map(|u| u.bytes).sum();
        share(u, self.mapped_bytes)
    }
}

fn share(part: f64, rest: f64) -> f64 {
    if part + rest > 0.0 {
        part / (part + rest)
    } else {
        0.0
    }
}

/// Reads and imports an ONNX file; errors name the file and the node or field.
pub fn import_file(path: impl AsRef<Path>, options: &ImportOptions) -> Result<Imported> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| Error::Onnx {
        path: path.to_path_buf(),
        message: format!("cannot read it: {e}"),
    })?;
    import_bytes(&bytes, path, options)
}

/// Imports an ONNX model from its bytes; `path` names it in errors and gives the network's
/// default name.
pub fn import_bytes(bytes: &[u8], path: &Path, options: &ImportOptions) -> Result<Imported> {
    let model = proto::decode_model(bytes).map_err(|e| Error::Onnx {
        path: path.to_path_buf(),
        message: format!("malformed ONNX protobuf: {}", e.0),
    })?;
    let name = path
        .file_stem()
        .map_or("onnx".into(), |s| s.to_string_lossy().into_owned());
    Importer::new(path, &model, options, name)?.run(&model)
}

/// Where a tensor comes from.
#[derive(Clone, Debug, PartialEq)]
enum Src {
    /// The network input.
    Input,
    /// A layer.
    Layer(String),
    /// Something the network does not model: a constant, another input, an unmapped op.
    External,
}

/// What the importer knows of one tensor.
#[derive(Clone, Debug)]
struct Val {
    /// Full shape (at the dims the inputs got); `None` when unknown.
    shape: Option<Vec<usize>>,
    /// Whether it depends on constants only (its producer is folded, not run).
    constant: bool,
    /// Its values, for small constants.
    ints: Option<Vec<i64>>,
    /// Where it comes from.
    src: Src,
    /// Whether it is a transpose of its producer's input (a permuted view).
    permuted: bool,
    /// Whether that transpose leaves its last two axes in reverse storage order (a matmul
    /// reads it as `trans_b`).
    swapped_last: bool,
}

impl Val {
    fn external(shape: Option<Vec<usize>>) -> Val {
        Val {
            shape,
            constant: false,
            ints: None,
            src: Src::External,
            permuted: false,
            swapped_last: false,
        }
    }
}

struct Importer<'a> {
    path: &'a Path,
    options: &'a ImportOptions,
    name: String,
    vals: HashMap<String, Val>,
    /// Declared shapes of intermediate tensors (value_info), resolved.
    declared: HashMap<String, Vec<usize>>,
    /// Consumers of each tensor (node indices).
    consumers: HashMap<String, Vec<usize>>,
    /// Nodes fused into an earlier one, with the tensor their output aliases.
    skip: HashMap<usize, String>,
    layers: Vec<Layer>,
    names: HashSet<String>,
    /// Next suffix to try per base name, so that uniquifying stays linear in the nodes.
    suffixes: HashMap<String, usize>,
    input_shape: Vec<usize>,
    /// The batch the file fixes (its first input's leading dim, when above 1).
    batch: Option<usize>,
    unmapped: BTreeMap<String, Unmapped>,
    fused: BTreeMap<String, usize>,
    notes: BTreeMap<String, usize>,
    folded: usize,
    symbols: HashMap<String, usize>,
}

/// Most elements of a constant the importer computes from values (`ConstantOfShape`,
/// `Range`): such a tensor's size comes from numbers in the file, not from bytes it holds.
const MAX_CONSTANT: usize = 1 << 26;

/// Elements of a shape; saturating, though every shape is checked against [`MAX_ELEMENTS`].
fn elements(shape: &[usize]) -> usize {
    shape.iter().fold(1usize, |n, &d| n.saturating_mul(d))
}

/// Why a shape is larger than any module spec may describe, if it is.
fn oversized(shape: &[usize]) -> Option<String> {
    if let Some((i, d)) = shape.iter().enumerate().find(|(_, d)| **d > MAX_AXIS) {
        return Some(format!(
            "axis {i} of {shape:?} is {d}, above the largest size perfcast takes ({MAX_AXIS})"
        ));
    }
    (elements(shape) as u64 > MAX_ELEMENTS)
        .then(|| format!("{shape:?} holds more than {MAX_ELEMENTS} elements"))
}

/// A full shape as a spec's `[c, h, w]`: leading axes folded into the first.
fn fold3(shape: &[usize]) -> [usize; 3] {
    match shape {
        [] => [1, 1, 1],
        [w] => [1, 1, *w],
        [h, w] => [1, *h, *w],
        [lead @ .., h, w] => [elements(lead), *h, *w],
    }
}

/// Rows (all leading axes) and the last axis.
fn rows_last(shape: &[usize]) -> (usize, usize) {
    match shape {
        [] => (1, 1),
        [lead @ .., last] => (elements(lead), *last),
    }
}

fn broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let x = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let y = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = match (x, y) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return None,
        };
    }
    Some(out)
}

/// Normalises a possibly negative axis for a rank; `None` when out of range (a scalar has no
/// axis).
fn axis(a: i64, rank: usize) -> Option<usize> {
    let r = i64::try_from(rank).ok()?;
    let a = if a < 0 { a.checked_add(r)? } else { a };
    (0..r).contains(&a).then_some(a as usize)
}

/// What a node maps to.
enum Mapped {
    /// One layer: its spec, the input it reads (index into the node's inputs) and optionally a
    /// second operand's input index.
    Layer {
        spec: ModuleSpec,
        first: usize,
        second: Option<usize>,
    },
    /// A view per output (split): zero-cost layers.
    Views,
    /// No kind.
    Unmapped,
}

impl<'a> Importer<'a> {
    fn new(
        path: &'a Path,
        model: &Model,
        options: &'a ImportOptions,
        name: String,
    ) -> Result<Self> {
        let mut me = Importer {
            path,
            options,
            name,
            vals: HashMap::new(),
            declared: HashMap::new(),
            consumers: HashMap::new(),
            skip: HashMap::new(),
            layers: Vec::new(),
            names: HashSet::new(),
            suffixes: HashMap::new(),
            input_shape: Vec::new(),
            batch: None,
            unmapped: BTreeMap::new(),
            fused: BTreeMap::new(),
            notes: BTreeMap::new(),
            folded: 0,
            symbols: HashMap::new(),
        };
        let g = &model.graph;
        for t in &g.initializers {
            let shape: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
            me.vals.insert(
                t.name.clone(),
                Val {
                    shape: Some(shape),
                    constant: true,
                    ints: t.has_values.then(|| t.ints.clone()),
                    src: Src::External,
                    permuted: false,
                    swapped_last: false,
                },
            );
        }
        for (given, _) in &options.inputs {
            if !g.inputs.iter().any(|i| &i.name == given) {
                let names: Vec<&str> = g
                    .inputs
                    .iter()
                    .filter(|i| !me.vals.contains_key(&i.name))
                    .map(|i| i.name.as_str())
                    .collect();
                return Err(me.file_error(format!(
                    "`--input {given}=...` names no input of the graph (inputs: {})",
                    names.join(", ")
                )));
            }
        }
        let mut primary = true;
        for input in &g.inputs {
            if me.vals.contains_key(&input.name) {
                continue;
            }
            let mut shape = me.input_dims(input)?;
            if let Some(why) = oversized(&shape) {
                return Err(me.file_error(format!("input `{}`: {why}", input.name)));
            }
            // A fixed batch N is run as the per-sample graph (batch 1) at batch N; other
            // inputs sharing that leading dim carry the same batch.
            if primary && shape.len() >= 2 && shape[0] > 1 {
                me.batch = Some(shape[0]);
            }
            if let Some(n) = me.batch
                && shape.len() >= 2
                && shape[0] == n
            {
                shape[0] = 1;
            }
            let src = if primary {
                me.input_shape = {
                    let first = shape.iter().position(|&d| d != 1).unwrap_or(shape.len());
                    let s = shape[first..].to_vec();
                    if s.is_empty() { vec![1] } else { s }
                };
                primary = false;
                Src::Input
            } else {
                Src::External
            };
            me.vals.insert(
                input.name.clone(),
                Val {
                    shape: Some(shape),
                    constant: false,
                    ints: None,
                    src,
                    permuted: false,
                    swapped_last: false,
                },
            );
        }
        if primary {
            return Err(me.file_error("the graph has no input".into()));
        }
        for v in &g.value_info {
            if let Some(dims) = &v.dims {
                let resolved: Option<Vec<usize>> = dims
                    .iter()
                    .map(|d| match d {
                        Dim::Value(v) => usize::try_from(*v).ok().filter(|&v| v <= MAX_AXIS),
                        Dim::Param(p) => me.symbols.get(p).copied(),
                        Dim::Unknown => None,
                    })
                    .collect();
                // A recorded shape past the limits is left unknown, as one never recorded.
                if let Some(mut shape) = resolved.filter(|s| oversized(s).is_none()) {
                    if let Some(n) = me.batch
                        && shape.first() == Some(&n)
                    {
                        shape[0] = 1;
                    }
                    me.declared.insert(v.name.clone(), shape);
                }
            }
        }
        for (i, node) in g.nodes.iter().enumerate() {
            for input in &node.inputs {
                me.consumers.entry(input.clone()).or_default().push(i);
            }
        }
        Ok(me)
    }

    fn file_error(&self, message: String) -> Error {
        Error::Onnx {
            path: self.path.to_path_buf(),
            message,
        }
    }

    fn node_error(&self, node: &Node, message: String) -> Error {
        Error::OnnxNode {
            path: self.path.to_path_buf(),
            node: node.label(),
            op: node.op.clone(),
            message,
        }
    }

    /// `v`, the value of `what`, when it lies in `lo..=hi`; else an error naming both.
    fn ranged(&self, node: &Node, what: &str, v: i64, lo: i64, hi: i64) -> Result<i64> {
        if (lo..=hi).contains(&v) {
            Ok(v)
        } else {
            Err(self.node_error(
                node,
                format!("`{what}` value {v} is out of range ({lo} to {hi})"),
            ))
        }
    }

    /// The axis `a` of a tensor of rank `rank`, or an error naming `what`, the value and the
    /// rank.
    fn need_axis(&self, node: &Node, what: &str, a: i64, rank: usize) -> Result<usize> {
        axis(a, rank).ok_or_else(|| {
            self.node_error(
                node,
                if rank == 0 {
                    format!("`{what}` {a} for a scalar input (rank 0 has no axis)")
                } else {
                    format!("`{what}` {a} is out of range for rank {rank}")
                },
            )
        })
    }

    /// The dims of a graph input: given, declared, or its symbols resolved.
    fn input_dims(&mut self, input: &proto::ValueInfo) -> Result<Vec<usize>> {
        if let Some((_, dims)) = self.options.inputs.iter().find(|(n, _)| *n == input.name) {
            if let Some(declared) = &input.dims
                && declared.len() != dims.len()
            {
                return Err(self.file_error(format!(
                    "`--input {}` gives {} dims, the graph declares {}",
                    input.name,
                    dims.len(),
                    declared.len()
                )));
            }
            if dims.contains(&0) {
                return Err(self.file_error(format!(
                    "`--input {}`: every dim must be at least 1, got {dims:?}",
                    input.name
                )));
            }
            return Ok(dims.clone());
        }
        let Some(declared) = &input.dims else {
            return Err(self
                .file_error(format!("input `{}` declares no shape", input.name))
                .with_hint(format!("pass `--input {}=DIMS`", input.name)));
        };
        let rank = declared.len();
        let mut out = Vec::with_capacity(rank);
        for (i, d) in declared.iter().enumerate() {
            let v = match d {
                Dim::Value(v) if *v > 0 => usize::try_from(*v).unwrap_or(usize::MAX),
                Dim::Param(p) => {
                    let lower = p.to_ascii_lowercase();
                    let seq_like = ["seq", "len", "token", "position", "time", "step"]
                        .iter()
                        .any(|w| lower.contains(w));
                    let v = if lower.contains("batch") || (i == 0 && !seq_like) {
                        1
                    } else if seq_like || (rank == 2 && i == 1) {
                        self.options.seq.ok_or_else(|| {
                            self.file_error(format!(
                                "input `{}` has a symbolic sequence dim `{p}`",
                                input.name
                            ))
                            .with_hint(format!("pass `--seq N` or `--input {}=DIMS`", input.name))
                        })?
                    } else {
                        return Err(self
                            .file_error(format!(
                                "input `{}`: symbolic dim `{p}` (axis {i}) does not resolve",
                                input.name
                            ))
                            .with_hint(format!("pass `--input {}=DIMS`", input.name)));
                    };
                    self.symbols.insert(p.clone(), v);
                    v
                }
                _ => {
                    return Err(self
                        .file_error(format!("input `{}`: axis {i} has no size", input.name))
                        .with_hint(format!("pass `--input {}=DIMS`", input.name)));
                }
            };
            out.push(v);
        }
        Ok(out)
    }

    fn unique_name(&mut self, node: &Node, suffix: &str) -> String {
        let base = if node.name.is_empty() {
            format!("{}_{}", node.op, self.layers.len())
        } else {
            node.name.trim_start_matches('/').to_string()
        };
        let base = format!("{base}{suffix}");
        let mut name = base.clone();
        let mut k = self.suffixes.get(&base).copied().unwrap_or(1);
        while name == NETWORK_INPUT || self.names.contains(&name) {
            name = format!("{base}#{k}");
            k += 1;
        }
        self.suffixes.insert(base, k);
        self.names.insert(name.clone());
        name
    }

    fn note(&mut self, what: String) {
        *self.notes.entry(what).or_default() += 1;
    }

    fn run(mut self, model: &Model) -> Result<Imported> {
        let g = &model.graph;
        for (i, node) in g.nodes.iter().enumerate() {
            if let Some(alias) = self.skip.get(&i).cloned() {
                let v = self
                    .vals
                    .get(&alias)
                    .cloned()
                    .unwrap_or(Val::external(None));
                if let Some(out) = node.outputs.first() {
                    self.vals.insert(out.clone(), v);
                }
                continue;
            }
            self.node(g, i, node)?;
        }
        if self.layers.is_empty() {
            return Err(self.file_error("no node maps to a module: nothing to predict".into()));
        }
        let network = Network {
            name: self.name.clone(),
            input: self.input_shape.clone(),
            layers: std::mem::take(&mut self.layers),
        };
        // Checked before any feature is derived: derived features assume valid specs.
        network.check()?;
        let mapped_flops = network
            .layers
            .iter()
            .map(|l| features::derive(&l.spec, 1).flops)
            .sum();
        let mapped_bytes = network
            .layers
            .iter()
            .map(|l| {
                let d = features::derive(&l.spec, 1);
                d.bytes_read + d.bytes_written
            })
            .sum();
        Ok(Imported {
            batch: self.batch,
            network,
            unmapped: self.unmapped.into_values().collect(),
            folded: self.folded,
            fused: self.fused,
            mapped_flops,
            mapped_bytes,
            nodes: g.nodes.len(),
            opset: model.opset,
            notes: self.notes,
        })
    }

    fn val(&self, node: &Node, i: usize) -> Result<Option<&Val>> {
        let Some(name) = node.inputs.get(i).filter(|n| !n.is_empty()) else {
            return Ok(None);
        };
        self.vals.get(name).map(Some).ok_or_else(|| {
            self.node_error(
                node,
                format!("input `{name}` is produced by no earlier node, initializer or input"),
            )
        })
    }

    fn shape(&self, node: &Node, i: usize) -> Result<Vec<usize>> {
        let Some(v) = self.val(node, i)? else {
            return Err(self.node_error(node, format!("input {i} is missing")));
        };
        v.shape.clone().ok_or_else(|| {
            self.node_error(
                node,
                format!(
                    "the shape of input `{}` does not resolve (it comes from an op perfcast \
                     cannot infer and the file records no shape for it)",
                    node.inputs[i]
                ),
            )
        })
    }

    fn ints(&self, node: &Node, i: usize) -> Result<Option<Vec<i64>>> {
        Ok(self.val(node, i)?.and_then(|v| v.ints.clone()))
    }

    /// Integer values of input `i`, required (shapes, axes, pads).
    fn need_ints(&self, node: &Node, i: usize, what: &str) -> Result<Vec<i64>> {
        self.ints(node, i)?.ok_or_else(|| {
            self.node_error(
                node,
                format!(
                    "its {what} (input `{}`) is not a constant perfcast can evaluate, so the \
                     shape does not resolve",
                    node.inputs.get(i).map_or("", String::as_str)
                ),
            )
        })
    }

    fn node(&mut self, g: &proto::Graph, index: usize, node: &Node) -> Result<()> {
        if !node.domain.is_empty() && node.domain != "ai.onnx" && node.domain != "com.microsoft" {
            return self.unmapped_node(node, None);
        }
        // Constant subgraphs: every input constant (or no inputs: Constant).
        let inputs: Vec<Option<&Val>> = (0..node.inputs.len())
            .map(|i| self.val(node, i))
            .collect::<Result<_>>()?;
        let all_constant = inputs.iter().all(|v| v.is_none_or(|v| v.constant));
        // A lookup in a weight table runs per call even by constant indices (learned positions).
        let lookup = node.op == "Gather"
            && inputs
                .first()
                .copied()
                .flatten()
                .and_then(|v| v.shape.as_deref())
                .is_some_and(|s| s.len() == 2 && elements(s) > proto::SMALL);
        if (node.op == "Shape" || node.op == "Size" || (all_constant && !lookup))
            && let Some(outs) = self.fold(node)?
        {
            self.folded += 1;
            for (name, v) in node.outputs.iter().zip(outs) {
                self.vals.insert(name.clone(), v);
            }
            return Ok(());
        }
        let shapes = self.infer(node)?;
        let mapped = self.map(g, index, node, &shapes)?;
        match mapped {
            Mapped::Layer {
                spec,
                first,
                second,
            } => {
                let name = self.unique_name(node, "");
                let mut layer = Layer::new(name.clone(), spec).reshaped();
                let src = |i: usize| {
                    self.val(node, i)
                        .ok()
                        .flatten()
                        .map_or(Src::External, |v| v.src.clone())
                };
                let srcs: Vec<Src> = std::iter::once(first).chain(second).map(src).collect();
                if srcs.contains(&Src::External) {
                    layer = layer.detach();
                } else {
                    let to_name = |s: &Src| match s {
                        Src::Layer(n) => n.clone(),
                        _ => NETWORK_INPUT.to_string(),
                    };
                    layer = layer.reads(to_name(&srcs[0]));
                    if let Some(s) = srcs.get(1) {
                        layer = layer.second(to_name(s));
                    }
                    if node.op == "Concat" {
                        // The other computed inputs are the concat's further parts; constants
                        // (a learned token) stay unmodelled.
                        let parts: Vec<String> = (0..node.inputs.len())
                            .filter(|&i| i != first)
                            .filter_map(|i| self.val(node, i).ok().flatten())
                            .filter(|v| !v.constant && v.src != Src::External)
                            .map(|v| to_name(&v.src))
                            .collect();
                        layer = layer.parts(parts);
                    }
                }
                let transposed = |v: Option<&Val>| v.is_some_and(|v| v.permuted);
                let (permuted, swapped_last) = match node.op.as_str() {
                    "Transpose" => {
                        let rank = shapes[0].as_ref().map_or(0, Vec::len);
                        let perm = node.ints("perm");
                        // Stored transposed (`trans_b` for a matmul reading it) when its
                        // last two axes come from the input in reverse storage order.
                        let swapped = rank >= 2
                            && (perm.is_empty()
                                || perm.len() == rank && perm[rank - 2] > perm[rank - 1]);
                        (true, swapped)
                    }
                    // A view of a permuted tensor stays permuted.
                    "Unsqueeze" | "Squeeze" | "Identity" => (transposed(self.val(node, 0)?), false),
                    _ => (false, false),
                };
                self.layers.push(layer);
                for (o, shape) in node.outputs.iter().zip(shapes) {
                    self.vals.insert(
                        o.clone(),
                        Val {
                            shape,
                            constant: false,
                            ints: None,
                            src: Src::Layer(name.clone()),
                            permuted,
                            swapped_last,
                        },
                    );
                }
                Ok(())
            }
            Mapped::Views => {
                let from = self.val(node, 0)?.map_or(Src::External, |v| v.src.clone());
                for (k, (o, shape)) in node.outputs.iter().zip(shapes).enumerate() {
                    let Some(shape) = shape else { continue };
                    let name = self.unique_name(node, &format!(".{k}"));
                    let mut layer = Layer::new(name.clone(), ModuleSpec::View(ew(&shape)));
                    layer = match &from {
                        Src::External => layer.detach(),
                        Src::Input => layer.reads(NETWORK_INPUT),
                        Src::Layer(n) => layer.reads(n.clone()),
                    };
                    self.layers.push(layer);
                    self.vals.insert(
                        o.clone(),
                        Val {
                            shape: Some(shape),
                            constant: false,
                            ints: None,
                            src: Src::Layer(name),
                            permuted: false,
                            swapped_last: false,
                        },
                    );
                }
                Ok(())
            }
            Mapped::Unmapped => self.unmapped_node(node, Some(shapes)),
        }
    }

    fn unmapped_node(
        &mut self,
        node: &Node,
        shapes: Option<Vec<Option<Vec<usize>>>>,
    ) -> Result<()> {
        if self.options.strict {
            return Err(self.node_error(
                node,
                "op has no perfcast module kind (`--strict` refuses unmapped ops)".into(),
            ));
        }
        let shapes = shapes.unwrap_or_default();
        let mut read = 0usize;
        for i in 0..node.inputs.len() {
            if let Some(v) = self.val(node, i).ok().flatten() {
                read = read.saturating_add(v.shape.as_deref().map_or(0, elements));
            }
        }
        let mut written = 0usize;
        for (k, o) in node.outputs.iter().enumerate() {
            let shape = shapes
                .get(k)
                .cloned()
                .flatten()
                .or_else(|| self.declared.get(o).cloned());
            written = written.saturating_add(shape.as_deref().map_or(0, elements));
            self.vals.insert(o.clone(), Val::external(shape));
        }
        let e = self
            .unmapped
            .entry(node.op.clone())
            .or_insert_with(|| Unmapped {
                op: node.op.clone(),
                count: 0,
                flops: 0.0,
                bytes: 0.0,
            });
        e.count += 1;
        e.flops += written as f64;
        e.bytes += 4.0 * read.saturating_add(written) as f64;
        Ok(())
    }

    /// Output shapes of a node that is run (not folded); `None` where unknown.
    fn infer(&self, node: &Node) -> Result<Vec<Option<Vec<usize>>>> {
        let n_out = node.outputs.len();
        let same = |s: Vec<usize>| {
            let mut v = vec![Some(s)];
            v.resize(n_out, None);
            v
        };
        let op = node.op.as_str();
        let out = match op {
            "Relu" | "LeakyRelu" | "Sigmoid" | "Tanh" | "Gelu" | "Erf" | "Exp" | "Log" | "Sqrt"
            | "Reciprocal" | "Neg" | "Abs" | "Clip" | "HardSigmoid" | "HardSwish" | "Softmax"
            | "LogSoftmax" | "Cast" | "Identity" | "Dropout" | "Not" | "Floor" | "Ceil" | "Sin"
            | "Cos" | "Trilu" | "Softplus" | "Elu" | "Selu" | "Mish" | "CumSum" | "IsNaN"
            | "Sign" | "Round" => same(self.shape(node, 0)?),
            "LayerNormalization"
            | "BatchNormalization"
            | "RMSNormalization"
            | "SimplifiedLayerNormalization"
            | "InstanceNormalization"
            | "GroupNormalization"
            | "LpNormalization" => same(self.shape(node, 0)?),
            "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Equal" | "Less" | "Greater" | "And" | "Or"
            | "Max" | "Min" | "Mod" | "LessOrEqual" | "GreaterOrEqual" | "Where" | "Sum"
            | "Mean" => {
                let mut s = self.shape(node, 0)?;
                for i in 1..node.inputs.len() {
                    let t = self.shape(node, i)?;
                    s = broadcast(&s, &t).ok_or_else(|| {
                        self.node_error(node, format!("shapes {s:?} and {t:?} do not broadcast"))
                    })?;
                }
                same(s)
            }
            "MatMul" => {
                let (a, b) = (self.shape(node, 0)?, self.shape(node, 1)?);
                same(self.matmul_shape(node, &a, &b)?)
            }
            "Gemm" => {
                let (a, b) = (self.shape(node, 0)?, self.shape(node, 1)?);
                if a.len() != 2 || b.len() != 2 {
                    return Err(self.node_error(node, format!("Gemm of {a:?} and {b:?}")));
                }
                let (m, k) = if node.int("transA", 0) == 1 {
                    (a[1], a[0])
                } else {
                    (a[0], a[1])
                };
                let (k2, n) = if node.int("transB", 0) == 1 {
                    (b[1], b[0])
                } else {
                    (b[0], b[1])
                };
                if k != k2 {
                    return Err(self.node_error(
                        node,
                        format!("Gemm of {a:?} and {b:?}: inner sizes {k} and {k2} differ"),
                    ));
                }
                same(vec![m, n])
            }
            "Conv" | "MaxPool" | "AveragePool" => same(self.window_shape(node)?.0),
            "GlobalAveragePool" | "GlobalMaxPool" => {
                let mut s = self.shape(node, 0)?;
                for d in s.iter_mut().skip(2) {
                    *d = 1;
                }
                same(s)
            }
            "Reshape" => {
                let input = self.shape(node, 0)?;
                let target = self.batch_free(self.need_ints(node, 1, "target shape")?);
                same(self.reshape(node, &input, &target)?)
            }
            "Flatten" => {
                let s = self.shape(node, 0)?;
                let a = self.need_axis(node, "axis", node.int("axis", 1), s.len() + 1)?;
                same(vec![elements(&s[..a]), elements(&s[a..])])
            }
            "Transpose" => {
                let s = self.shape(node, 0)?;
                let perm = node.ints("perm");
                if perm.is_empty() {
                    same(s.iter().rev().copied().collect())
                } else {
                    let mut seen = vec![false; s.len()];
                    let permutation = perm.len() == s.len()
                        && perm.iter().all(|&p| {
                            usize::try_from(p)
                                .ok()
                                .and_then(|p| seen.get_mut(p))
                                .is_some_and(|was| !std::mem::replace(was, true))
                        });
                    if !permutation {
                        return Err(self.node_error(
                            node,
                            format!(
                                "`perm` {perm:?} is not a permutation of 0..{} (input {s:?})",
                                s.len()
                            ),
                        ));
                    }
                    same(perm.iter().map(|&p| s[p as usize]).collect())
                }
            }
            "Squeeze" | "Unsqueeze" => {
                let s = self.shape(node, 0)?;
                let axes = match node.attr("axes") {
                    Some(a) => a.ints.clone(),
                    None if node.inputs.len() > 1 => self.need_ints(node, 1, "axes")?,
                    None => Vec::new(),
                };
                same(squeeze_unsqueeze(op, &s, &axes).ok_or_else(|| {
                    self.node_error(node, format!("`axes` {axes:?} for shape {s:?}"))
                })?)
            }
            "Concat" => {
                let mut s = self.shape(node, 0)?;
                let a = self.need_axis(node, "axis", node.int("axis", 0), s.len())?;
                let first = s.clone();
                for i in 1..node.inputs.len() {
                    let t = self.shape(node, i)?;
                    let fits = t.len() == first.len()
                        && t.iter()
                            .zip(&first)
                            .enumerate()
                            .all(|(j, (x, y))| j == a || x == y);
                    if !fits {
                        return Err(self.node_error(
                            node,
                            format!(
                                "input `{}` of shape {t:?} does not match {first:?} off axis {a}",
                                node.inputs[i]
                            ),
                        ));
                    }
                    s[a] = s[a].saturating_add(t[a]);
                }
                same(s)
            }
            "Split" => {
                let s = self.shape(node, 0)?;
                let a = self.need_axis(node, "axis", node.int("axis", 0), s.len())?;
                let sizes: Vec<i64> = match node.attr("split") {
                    Some(x) => x.ints.clone(),
                    None if node.inputs.len() > 1 && !node.inputs[1].is_empty() => {
                        self.need_ints(node, 1, "split sizes")?
                    }
                    None => {
                        let n = n_out.max(1);
                        let part = s[a].div_ceil(n);
                        (0..n)
                            .map(|k| part.min(s[a].saturating_sub(k * part)) as i64)
                            .collect()
                    }
                };
                let sum = sizes.iter().try_fold(0i64, |sum, &k| {
                    (k >= 0).then(|| sum.checked_add(k)).flatten()
                });
                if sum != i64::try_from(s[a]).ok() || sizes.len() != n_out {
                    return Err(self.node_error(
                        node,
                        format!(
                            "`split` {sizes:?} does not divide axis {a} of {s:?} into {n_out} \
                             outputs"
                        ),
                    ));
                }
                sizes
                    .iter()
                    .map(|&k| {
                        let mut t = s.clone();
                        t[a] = k as usize;
                        Some(t)
                    })
                    .collect()
            }
            "Slice" => {
                let s = self.shape(node, 0)?;
                if s.is_empty() {
                    return Err(self.node_error(node, "a Slice of a scalar input".into()));
                }
                let (starts, ends, axes, steps) = if node.inputs.len() > 1 {
                    let starts = self.need_ints(node, 1, "starts")?;
                    let ends = self.need_ints(node, 2, "ends")?;
                    let axes = match self.val(node, 3)? {
                        Some(_) => self.need_ints(node, 3, "axes")?,
                        None => (0..starts.len() as i64).collect(),
                    };
                    let steps = match self.val(node, 4)? {
                        Some(_) => self.need_ints(node, 4, "steps")?,
                        None => vec![1; starts.len()],
                    };
                    (starts, ends, axes, steps)
                } else {
                    let starts = node.ints("starts");
                    let axes = node.ints("axes");
                    let axes = if axes.is_empty() {
                        (0..starts.len() as i64).collect()
                    } else {
                        axes
                    };
                    let n = starts.len();
                    (starts, node.ints("ends"), axes, vec![1; n])
                };
                same(
                    slice_shape(&s, &starts, &ends, &axes, &steps)
                        .map_err(|why| self.node_error(node, why))?,
                )
            }
            "GatherElements" => same(self.shape(node, 1)?),
            "Gather" => {
                let data = self.shape(node, 0)?;
                let idx = self.shape(node, 1)?;
                let a = self.need_axis(node, "axis", node.int("axis", 0), data.len())?;
                let n = i64::try_from(data[a]).unwrap_or(i64::MAX);
                if let Some(bad) = self
                    .ints(node, 1)?
                    .and_then(|v| v.into_iter().find(|&i| !(-n..n).contains(&i)))
                {
                    return Err(self.node_error(
                        node,
                        format!("index {bad} is out of range for axis {a} of {data:?}"),
                    ));
                }
                let mut s = data[..a].to_vec();
                s.extend(&idx);
                s.extend(&data[a + 1..]);
                same(s)
            }
            "ReduceMean" | "ReduceSum" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceL2"
            | "ArgMax" | "ArgMin" => {
                let s = self.shape(node, 0)?;
                let axes = match node.attr("axes") {
                    Some(a) => a.ints.clone(),
                    None if op.starts_with("Arg") => vec![node.int("axis", 0)],
                    None if node.inputs.len() > 1 => self.need_ints(node, 1, "axes")?,
                    None => (0..s.len() as i64).collect(),
                };
                let keep = node.int("keepdims", 1) == 1;
                let what = if op.starts_with("Arg") {
                    "axis"
                } else {
                    "axes"
                };
                let axes: Vec<usize> = axes
                    .iter()
                    .map(|&a| self.need_axis(node, what, a, s.len()))
                    .collect::<Result<_>>()?;
                let mut out = Vec::new();
                for (i, &d) in s.iter().enumerate() {
                    if axes.contains(&i) {
                        if keep {
                            out.push(1);
                        }
                    } else {
                        out.push(d);
                    }
                }
                same(out)
            }
            "Expand" => {
                let s = self.shape(node, 0)?;
                let target = self.batch_free(self.need_ints(node, 1, "target shape")?);
                let target: Vec<usize> = target
                    .iter()
                    .map(
                        |&d| Ok(self.ranged(node, "shape", d, 0, MAX_AXIS as i64)?.max(1) as usize),
                    )
                    .collect::<Result<_>>()?;
                same(broadcast(&s, &target).ok_or_else(|| {
                    self.node_error(node, format!("cannot expand {s:?} to {target:?}"))
                })?)
            }
            "Pad" => {
                let s = self.shape(node, 0)?;
                let pads = match node.attr("pads") {
                    Some(a) => a.ints.clone(),
                    None => self.need_ints(node, 1, "pads")?,
                };
                let r = s.len();
                let axes: Vec<usize> = match self.val(node, 3)? {
                    Some(_) => self
                        .need_ints(node, 3, "axes")?
                        .iter()
                        .map(|&a| self.need_axis(node, "axes", a, r))
                        .collect::<Result<_>>()?,
                    None => (0..r).collect(),
                };
                if pads.len() != 2 * axes.len() {
                    return Err(self
                        .node_error(node, format!("{} pads for {} axes", pads.len(), axes.len())));
                }
                let limit = MAX_AXIS as i64;
                for &p in &pads {
                    self.ranged(node, "pads", p, -limit, limit)?;
                }
                let mut out = s.clone();
                for (k, &a) in axes.iter().enumerate() {
                    let grown = s[a] as i64 + pads[k] + pads[k + axes.len()];
                    if grown < 0 {
                        return Err(self.node_error(
                            node,
                            format!("`pads` {pads:?} shrink axis {a} of {s:?} below zero"),
                        ));
                    }
                    out[a] = grown as usize;
                }
                same(out)
            }
            _ => node
                .outputs
                .iter()
                .map(|o| self.declared.get(o).cloned())
                .collect(),
        };
        for s in out.iter().flatten() {
            if let Some(why) = oversized(s) {
                return Err(self.node_error(node, format!("output shape: {why}")));
            }
        }
        Ok(out)
    }

    fn matmul_shape(&self, node: &Node, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
        let bad = || self.node_error(node, format!("MatMul of {a:?} and {b:?}"));
        if a.is_empty() || b.is_empty() {
            return Err(bad());
        }
        let a2 = if a.len() == 1 {
            vec![1, a[0]]
        } else {
            a.to_vec()
        };
        let b2 = if b.len() == 1 {
            vec![b[0], 1]
        } else {
            b.to_vec()
        };
        let (m, k) = (a2[a2.len() - 2], a2[a2.len() - 1]);
        let (k2, n) = (b2[b2.len() - 2], b2[b2.len() - 1]);
        if k != k2 {
            return Err(bad());
        }
        let mut out = broadcast(&a2[..a2.len() - 2], &b2[..b2.len() - 2]).ok_or_else(bad)?;
        if a.len() > 1 {
            out.push(m);
        }
        if b.len() > 1 {
            out.push(n);
        }
        Ok(out)
    }

    /// A target shape with the file's fixed batch, when it leads, taken out: the graph is
    /// imported per sample.
    fn batch_free(&self, mut target: Vec<i64>) -> Vec<i64> {
        if let Some(n) = self.batch
            && target.first() == i64::try_from(n).ok().as_ref()
        {
            target[0] = 1;
        }
        target
    }

    fn reshape(&self, node: &Node, input: &[usize], target: &[i64]) -> Result<Vec<usize>> {
        let allow_zero = node.int("allowzero", 0) == 1;
        let mut out: Vec<usize> = Vec::with_capacity(target.len());
        let mut infer = None;
        for (i, &t) in target.iter().enumerate() {
            match t {
                -1 if infer.is_none() => {
                    infer = Some(i);
                    out.push(1);
                }
                0 if !allow_zero => out.push(*input.get(i).ok_or_else(|| {
                    self.node_error(node, format!("target {target:?} copies a missing axis {i}"))
                })?),
                t if t >= 0 => {
                    if t > MAX_AXIS as i64 {
                        return Err(self.node_error(
                            node,
                            format!(
                                "target shape {target:?} has {t} on axis {i}, above the largest \
                                 size perfcast takes ({MAX_AXIS})"
                            ),
                        ));
                    }
                    out.push(t as usize)
                }
                _ => {
                    return Err(
                        self.node_error(node, format!("target shape {target:?} is not valid"))
                    );
                }
            }
        }
        let total = elements(input);
        if let Some(i) = infer {
            let rest = elements(&out);
            if rest == 0 || !total.is_multiple_of(rest) {
                return Err(
                    self.node_error(node, format!("cannot reshape {input:?} to {target:?}"))
                );
            }
            out[i] = total / rest;
        }
        if elements(&out) != total {
            return Err(self.node_error(node, format!("cannot reshape {input:?} to {target:?}")));
        }
        Ok(out)
    }

    /// Output shape of a Conv or pool, with its kernel, strides, symmetric pads and dilations.
    #[allow(clippy::type_complexity)]
    fn window_shape(
        &self,
        node: &Node,
    ) -> Result<(Vec<usize>, [usize; 2], [usize; 2], [usize; 2], [usize; 2])> {
        let x = self.shape(node, 0)?;
        if x.len() != 4 {
            return Err(
                self.node_error(node, format!("only 2-D windows are supported, input {x:?}"))
            );
        }
        let weight = if node.op == "Conv" {
            let w = self.shape(node, 1)?;
            if w.len() != 4 {
                return Err(self.node_error(
                    node,
                    format!(
                        "weight `{}` has shape {w:?}: a 2-D Conv takes a rank-4 weight",
                        node.inputs[1]
                    ),
                ));
            }
            Some(w)
        } else {
            None
        };
        let kernel: Vec<i64> = match (node.attr("kernel_shape"), &weight) {
            (Some(a), _) => a.ints.clone(),
            (None, Some(w)) => w[2..].iter().map(|&d| d as i64).collect(),
            (None, None) => return Err(self.node_error(node, "missing `kernel_shape`".into())),
        };
        // Two values (one per spatial axis), each within the sizes a spec takes.
        let pair = |what: &str, v: &[i64], default: i64, lo: i64| -> Result<[usize; 2]> {
            let v = if v.is_empty() { &[default; 2][..] } else { v };
            if v.len() != 2 {
                return Err(self.node_error(
                    node,
                    format!(
                        "`{what}` {v:?} has {} values, a 2-D window takes 2",
                        v.len()
                    ),
                ));
            }
            let one = |x: i64| self.ranged(node, what, x, lo, MAX_AXIS as i64);
            Ok([one(v[0])? as usize, one(v[1])? as usize])
        };
        let k = pair("kernel_shape", &kernel, 1, 1)?;
        let s = pair("strides", &node.ints("strides"), 1, 1)?;
        let d = pair("dilations", &node.ints("dilations"), 1, 1)?;
        let pads = node.ints("pads");
        if !pads.is_empty() && pads.len() != 4 {
            return Err(self.node_error(
                node,
                format!(
                    "`pads` {pads:?} has {} values, a 2-D window takes 4",
                    pads.len()
                ),
            ));
        }
        for &p in &pads {
            self.ranged(node, "pads", p, 0, MAX_AXIS as i64)?;
        }
        let auto = node
            .attr("auto_pad")
            .and_then(|a| a.s.clone())
            .unwrap_or_default();
        let mut p = [0usize; 2];
        let mut out = vec![x[0], 0, 0, 0];
        for i in 0..2 {
            let ext = d[i] * (k[i].max(1) - 1) + 1;
            let (pb, pe) = if auto.starts_with("SAME") {
                let o = x[2 + i].div_ceil(s[i].max(1));
                let total = (o.saturating_sub(1) * s[i] + ext).saturating_sub(x[2 + i]);
                (total / 2, total - total / 2)
            } else {
                (
                    pads.get(i).copied().unwrap_or(0).max(0) as usize,
                    pads.get(i + 2).copied().unwrap_or(0).max(0) as usize,
                )
            };
            if pb != pe {
                // perfcast's specs pad symmetrically: the larger side is taken.
                p[i] = pb.max(pe);
            } else {
                p[i] = pb;
            }
            let padded = x[2 + i] + pb + pe;
            if ext > padded || s[i] == 0 {
                return Err(self.node_error(
                    node,
                    format!("window {k:?} does not fit input {x:?} with pads {pads:?}"),
                ));
            }
            let ceil = node.int("ceil_mode", 0) == 1;
            let span = padded - ext;
            out[2 + i] = if ceil {
                span.div_ceil(s[i]) + 1
            } else {
                span / s[i] + 1
            };
        }
        out[1] = match &weight {
            Some(w) => {
                let groups = self.ranged(node, "group", node.int("group", 1), 1, x[1] as i64)?;
                let g = groups as usize;
                if w[1].checked_mul(g) != Some(x[1]) || w[0] % g != 0 {
                    return Err(self.node_error(
                        node,
                        format!(
                            "weight `{}` of shape {w:?} does not fit input {x:?} in {g} groups",
                            node.inputs[1]
                        ),
                    ));
                }
                w[0]
            }
            None => x[1],
        };
        Ok((out, k, s, p, d))
    }

    /// Evaluates a node whose inputs are constants; `None` when it cannot (it is then mapped
    /// as a run node).
    fn fold(&self, node: &Node) -> Result<Option<Vec<Val>>> {
        let konst = |shape: Vec<usize>, ints: Option<Vec<i64>>| Val {
            ints: ints.filter(|v| v.len() == elements(&shape)),
            shape: Some(shape),
            constant: true,
            src: Src::External,
            permuted: false,
            swapped_last: false,
        };
        let op = node.op.as_str();
        if op == "Constant" {
            let Some(a) = node.attributes.first() else {
                return Err(self.node_error(node, "a Constant without a value".into()));
            };
            return Ok(Some(vec![match a.name.as_str() {
                "value" => {
                    let t = a.t.clone().unwrap_or_default();
                    let shape: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
                    konst(shape, t.has_values.then_some(t.ints))
                }
                "value_int" => konst(vec![], a.i.map(|v| vec![v])),
                "value_ints" => konst(vec![a.ints.len()], Some(a.ints.clone())),
                "value_float" => konst(vec![], a.f.map(|v| vec![v as i64])),
                "value_floats" => konst(vec![a.floats.len()], None),
                other => {
                    return Err(
                        self.node_error(node, format!("Constant `{other}` is not supported"))
                    );
                }
            }]));
        }
        if op == "Shape" || op == "Size" {
            let s = self.shape(node, 0)?;
            let v: Vec<i64> = s.iter().map(|&d| d as i64).collect();
            if op == "Size" {
                return Ok(Some(vec![konst(vec![], Some(vec![elements(&s) as i64]))]));
            }
            let r = v.len() as i64;
            let clampi = |a: i64| if a < 0 { (a + r).max(0) } else { a.min(r) } as usize;
            let start = clampi(node.int("start", 0));
            let end = clampi(node.int("end", r));
            let part = v[start..end.max(start)].to_vec();
            return Ok(Some(vec![konst(vec![part.len()], Some(part))]));
        }
        // Shapes first (every op the importer knows), then values where they are cheap.
        let shapes = match op {
            "ConstantOfShape" => {
                let dims = self.batch_free(self.need_ints(node, 0, "shape")?);
                let shape: Vec<usize> = dims
                    .iter()
                    .map(|&d| Ok(self.ranged(node, "shape", d, 0, MAX_AXIS as i64)? as usize))
                    .collect::<Result<_>>()?;
                if elements(&shape) > MAX_CONSTANT {
                    return Err(self.node_error(
                        node,
                        format!(
                            "a constant of shape {shape:?} holds more than {MAX_CONSTANT} elements"
                        ),
                    ));
                }
                vec![Some(shape)]
            }
            "Range" => {
                let (Some(s), Some(l), Some(d)) = (
                    self.ints(node, 0)?,
                    self.ints(node, 1)?,
                    self.ints(node, 2)?,
                ) else {
                    return Err(self.node_error(node, "a Range of unknown bounds".into()));
                };
                let one = |v: Vec<i64>, what: &str| match v.as_slice() {
                    [x] => Ok(*x),
                    _ => Err(self.node_error(
                        node,
                        format!("`{what}` holds {} values {v:?}, a Range takes one", v.len()),
                    )),
                };
                let (s, l, d) = (one(s, "start")?, one(l, "limit")?, one(d, "delta")?);
                if d == 0 {
                    return Err(self.node_error(node, "`delta` value 0 never ends".into()));
                }
                // In i128: `limit - start` of two i64 does not overflow there.
                let (span, step) = (i128::from(l) - i128::from(s), i128::from(d));
                let n = if (span > 0) == (step > 0) && span != 0 {
                    (span.abs() + step.abs() - 1) / step.abs()
                } else {
                    0
                };
                if n > MAX_CONSTANT as i128 {
                    return Err(self.node_error(
                        node,
                        format!(
                            "a Range from {s} to {l} by {d} holds {n} values, more than \
                             {MAX_CONSTANT}"
                        ),
                    ));
                }
                let n = n as usize;
                let values = (n <= proto::SMALL)
                    .then(|| {
                        (0..n as i128)
                            .map(|i| i64::try_from(i128::from(s) + i * step).ok())
                            .collect()
                    })
                    .flatten();
                return Ok(Some(vec![konst(vec![n], values)]));
            }
            _ => self.infer(node)?,
        };
        let Some(Some(shape)) = shapes.first().cloned() else {
            return Ok(None);
        };
        let a = self.ints(node, 0)?;
        let values: Option<Vec<i64>> = match op {
            "Identity" | "Cast" | "Reshape" | "Squeeze" | "Unsqueeze" | "Flatten" => a,
            "ConstantOfShape" => {
                let fill = node
                    .attr("value")
                    .and_then(|v| v.t.as_ref())
                    .and_then(|t| t.ints.first().copied())
                    .unwrap_or(0);
                (elements(&shape) <= proto::SMALL).then(|| vec![fill; elements(&shape)])
            }
            "Concat" => {
                let mut all = Vec::new();
                let mut ok = shape.len() == 1;
                for i in 0..node.inputs.len() {
                    match self.ints(node, i)? {
                        Some(v) => all.extend(v),
                        None => ok = false,
                    }
                }
                ok.then_some(all)
            }
            "Gather" => match (a, self.ints(node, 1)?) {
                (Some(data), Some(idx)) if self.shape(node, 0)?.len() == 1 => {
                    let n = data.len() as i64;
                    idx.iter()
                        .map(|&i| {
                            let i = if i < 0 { i + n } else { i };
                            data.get(i as usize).copied()
                        })
                        .collect()
                }
                _ => None,
            },
            "Slice" => match a {
                // Values of a unit-step slice; its arguments were checked by `infer`.
                Some(data)
                    if self.shape(node, 0)?.len() == 1
                        && node.inputs.len() > 2
                        && self.ints(node, 4)?.is_none_or(|v| v == [1]) =>
                {
                    let starts = self.need_ints(node, 1, "starts")?;
                    let ends = self.need_ints(node, 2, "ends")?;
                    let n = data.len() as i64;
                    let c = |v: i64| if v < 0 { (v + n).max(0) } else { v.min(n) };
                    match (starts.first(), ends.first()) {
                        (Some(&s), Some(&e)) => {
                            let (s, e) = (c(s), c(e));
                            data.get(s as usize..e.max(s) as usize).map(<[i64]>::to_vec)
                        }
                        _ => None,
                    }
                }
                _ => None,
            },
            "Add" | "Sub" | "Mul" | "Div" | "Equal" | "Max" | "Min" | "Where" | "Less"
            | "Greater" | "Mod" => {
                let vals: Option<Vec<Vec<i64>>> = (0..node.inputs.len())
                    .map(|i| self.ints(node, i).ok().flatten())
                    .collect();
                vals.and_then(|v| elementwise_ints(op, &v, elements(&shape)))
            }
            "Neg" => match a {
                Some(v) => Some(
                    v.iter()
                        .map(|&x| {
                            x.checked_neg().ok_or_else(|| {
                                self.node_error(node, format!("Neg of {x} overflows 64 bits"))
                            })
                        })
                        .collect::<Result<_>>()?,
                ),
                None => None,
            },
            _ => None,
        };
        let mut out = vec![konst(shape, values)];
        for s in shapes.into_iter().skip(1) {
            out.push(konst(s.unwrap_or_default(), None));
        }
        Ok(Some(out))
    }

    /// Notes a nearest-kind mapping.
    fn nearest(&mut self, node: &Node, kind: ModuleKind) {
        self.note(format!("{} -> {} (nearest kind)", node.op, kind.name()));
    }

    fn map(
        &mut self,
        g: &proto::Graph,
        index: usize,
        node: &Node,
        shapes: &[Option<Vec<usize>>],
    ) -> Result<Mapped> {
        let op = node.op.as_str();
        let out = match shapes.first() {
            Some(Some(s)) => s.clone(),
            _ => return Ok(Mapped::Unmapped),
        };
        let one = |spec: ModuleSpec| Mapped::Layer {
            spec,
            first: 0,
            second: None,
        };
        let e = ew(&out);
        let unary = |kind: ModuleKind| -> Mapped {
            one(ModuleSpec::elementwise(kind, e.clone()).unwrap_or(ModuleSpec::View(e.clone())))
        };
        let mapped = match op {
            "Relu" => unary(ModuleKind::Relu),
            "Sigmoid" => unary(ModuleKind::Sigmoid),
            "Tanh" => unary(ModuleKind::Tanh),
            "Gelu" => unary(ModuleKind::Gelu),
            "Softmax" | "LogSoftmax" => {
                let rank = out.len();
                let a = axis(node.int("axis", -1), rank).unwrap_or(rank.saturating_sub(1));
                if a + 1 != rank {
                    self.note(format!(
                        "{op} over axis {a}, not the last: predicted as the last"
                    ));
                }
                unary(ModuleKind::Softmax)
            }
            "Erf" => {
                self.nearest(node, ModuleKind::Gelu);
                unary(ModuleKind::Gelu)
            }
            "Exp" | "Log" | "Softplus" | "Elu" | "Selu" | "Sin" | "Cos" => {
                self.nearest(node, ModuleKind::Sigmoid);
                unary(ModuleKind::Sigmoid)
            }
            "Sqrt" => {
                self.nearest(node, ModuleKind::PowScalar);
                unary(ModuleKind::PowScalar)
            }
            "Reciprocal" => {
                self.nearest(node, ModuleKind::DivScalar);
                unary(ModuleKind::DivScalar)
            }
            "Neg" => {
                self.nearest(node, ModuleKind::MulScalar);
                unary(ModuleKind::MulScalar)
            }
            "Clip" | "LeakyRelu" | "HardSigmoid" | "HardSwish" | "Abs" => {
                self.nearest(node, ModuleKind::Relu);
                unary(ModuleKind::Relu)
            }
            // A cast of an activation to float is a no-op in eager PyTorch (`.type()` of its own
            // type); other casts convert every element.
            "Cast" => {
                let from_layer = self
                    .val(node, 0)?
                    .is_some_and(|v| matches!(v.src, Src::Layer(_)));
                if from_layer && node.int("to", 0) == i64::from(proto::dtype::FLOAT) {
                    unary(ModuleKind::View)
                } else {
                    unary(ModuleKind::Copy)
                }
            }
            "GatherElements" => unary(ModuleKind::Slice),
            "Identity" | "Expand" | "Squeeze" | "Unsqueeze" | "Transpose" => {
                unary(ModuleKind::View)
            }
            "Dropout" => {
                // Inference exports keep Dropout only in training mode (`training_mode` true).
                let training = self.ints(node, 2)?.is_some_and(|v| v.first() == Some(&1));
                if training {
                    unary(ModuleKind::Dropout)
                } else {
                    unary(ModuleKind::View)
                }
            }
            "Reshape" | "Flatten" => {
                // PyTorch's reshape of a permuted (non-contiguous) tensor copies it.
                if self.val(node, 0)?.is_some_and(|v| v.permuted) {
                    unary(ModuleKind::Copy)
                } else {
                    unary(ModuleKind::View)
                }
            }
            "Split" => Mapped::Views,
            "Concat" => {
                let first = (0..node.inputs.len())
                    .find(|&i| {
                        self.val(node, i)
                            .ok()
                            .flatten()
                            .is_some_and(|v| !v.constant)
                    })
                    .unwrap_or(0);
                Mapped::Layer {
                    spec: ModuleSpec::Concat(e),
                    first,
                    second: None,
                }
            }
            "Slice" => unary(ModuleKind::Slice),
            "Pad" => unary(ModuleKind::Pad),
            "ReduceSum" | "ReduceMean" => {
                let input = self.shape(node, 0)?;
                let spec = ModuleSpec::Sum(ew(&input));
                let last_only = {
                    let axes = match node.attr("axes") {
                        Some(a) => a.ints.clone(),
                        None => self.ints(node, 1)?.unwrap_or_default(),
                    };
                    axes.len() == 1 && axis(axes[0], input.len()) == input.len().checked_sub(1)
                };
                if !last_only {
                    self.note(format!(
                        "{op} over other axes than the last: predicted as sum"
                    ));
                }
                one(spec)
            }
            "Where" => {
                let first = self.largest_operand(node, &out, &[1, 2]);
                Mapped::Layer {
                    spec: ModuleSpec::MaskedFill(e),
                    first,
                    second: None,
                }
            }
            "Add" | "Sub" | "Mul" | "Div" | "Pow" => self.binary(node, &out)?,
            "MatMul" => self.matmul(g, index, node, &out)?,
            "Gemm" => {
                let a = self.shape(node, 0)?;
                let k = if node.int("transA", 0) == 1 {
                    a[0]
                } else {
                    a[1]
                };
                if node.int("transA", 0) == 1 {
                    self.note("Gemm with transA: predicted as a plain linear".into());
                }
                let bias = node.inputs.get(2).is_some_and(|s| !s.is_empty());
                if bias {
                    *self.fused.entry("Gemm+bias".into()).or_default() += 1;
                }
                one(ModuleSpec::Linear(Linear {
                    tokens: out[0],
                    in_features: k,
                    out_features: out[1],
                    bias,
                }))
            }
            "Conv" => self.conv(index, node, g)?,
            "MaxPool" | "AveragePool" => {
                let (_, k, s, p, d) = self.window_shape(node)?;
                let x = self.shape(node, 0)?;
                if x[0] != 1 {
                    return Err(self.batch_error(node, &x));
                }
                if d != [1, 1] {
                    self.note(format!("{op} with dilation: predicted undilated"));
                }
                let pool = Pool2d {
                    channels: x[1],
                    input_hw: [x[2], x[3]],
                    kernel: k,
                    stride: Some(s),
                    padding: p,
                };
                one(if op == "MaxPool" {
                    ModuleSpec::MaxPool2d(pool)
                } else {
                    ModuleSpec::AvgPool2d(pool)
                })
            }
            "GlobalAveragePool" | "GlobalMaxPool" => {
                let x = self.shape(node, 0)?;
                if x.len() != 4 || x[0] != 1 {
                    return Err(self.batch_error(node, &x));
                }
                let pool = Pool2d {
                    channels: x[1],
                    input_hw: [x[2], x[3]],
                    kernel: [x[2], x[3]],
                    stride: None,
                    padding: [0, 0],
                };
                one(if op == "GlobalMaxPool" {
                    ModuleSpec::MaxPool2d(pool)
                } else {
                    ModuleSpec::AvgPool2d(pool)
                })
            }
            "BatchNormalization" => {
                let x = self.shape(node, 0)?;
                if x.len() < 2 || x[0] != 1 {
                    return Err(self.batch_error(node, &x));
                }
                one(ModuleSpec::BatchNorm2d(BatchNorm2d {
                    channels: x[1],
                    input_hw: [
                        x.get(2).copied().unwrap_or(1),
                        elements(x.get(3..).unwrap_or(&[])),
                    ],
                }))
            }
            "LayerNormalization" | "RMSNormalization" | "SimplifiedLayerNormalization" => {
                let (rows, last) = rows_last(&out);
                let rank = out.len();
                let a = axis(node.int("axis", -1), rank).unwrap_or(rank.saturating_sub(1));
                if a + 1 != rank {
                    self.note(format!("{op} over axes from {a}: predicted over the last"));
                }
                let l = LayerNorm {
                    tokens: rows,
                    features: last,
                };
                one(if op == "LayerNormalization" {
                    ModuleSpec::LayerNorm(l)
                } else {
                    ModuleSpec::RmsNorm(l)
                })
            }
            "Gather" => {
                let data = self.val(node, 0)?.cloned();
                let data_shape = self.shape(node, 0)?;
                let idx = self.shape(node, 1)?;
                let is_table = data.as_ref().is_some_and(|v| v.constant)
                    && data_shape.len() == 2
                    && node.int("axis", 0) == 0;
                if is_table {
                    Mapped::Layer {
                        spec: ModuleSpec::Embedding(Embedding {
                            tokens: elements(&idx).max(1),
                            vocab: data_shape[0],
                            features: data_shape[1],
                        }),
                        first: 1,
                        second: None,
                    }
                } else {
                    unary(ModuleKind::Slice)
                }
            }
            _ => Mapped::Unmapped,
        };
        Ok(mapped)
    }

    fn batch_error(&self, node: &Node, x: &[usize]) -> Error {
        self.node_error(
            node,
            format!(
                "input {x:?} has a leading axis above 1 that is not the graph's batch (or no \
                 batch axis): perfcast's specs are per sample"
            ),
        )
        .with_hint("pass `--input NAME=1x...` and `--batch N`")
    }

    /// The operand (among `candidates`) with as many elements as the output and not a
    /// constant; the first candidate otherwise.
    fn largest_operand(&self, node: &Node, out: &[usize], candidates: &[usize]) -> usize {
        let n = elements(out);
        candidates
            .iter()
            .copied()
            .find(|&i| {
                self.val(node, i)
                    .ok()
                    .flatten()
                    .is_some_and(|v| !v.constant && v.shape.as_deref().map(elements) == Some(n))
            })
            .unwrap_or(candidates[0])
    }

    fn binary(&mut self, node: &Node, out: &[usize]) -> Result<Mapped> {
        let op = node.op.as_str();
        if op == "Sub" {
            self.note("Sub -> add (same cost)".into());
        }
        let e = ew(out);
        let n = elements(out);
        let full = |i: usize| -> bool {
            self.val(node, i)
                .ok()
                .flatten()
                .is_some_and(|v| !v.constant && v.shape.as_deref().map(elements) == Some(n))
        };
        let (two, scalar) = match op {
            "Add" | "Sub" => (ModuleKind::Add, ModuleKind::AddScalar),
            "Mul" => (ModuleKind::Mul, ModuleKind::MulScalar),
            "Div" => (ModuleKind::Div, ModuleKind::DivScalar),
            _ => (ModuleKind::Pow, ModuleKind::PowScalar),
        };
        let spec = |k: ModuleKind| {
            ModuleSpec::elementwise(k, e.clone()).unwrap_or(ModuleSpec::View(e.clone()))
        };
        if full(0) && full(1) {
            return Ok(Mapped::Layer {
                spec: spec(two),
                first: 0,
                second: Some(1),
            });
        }
        let first = self.largest_operand(node, out, &[0, 1]);
        let broadcast_both = !full(first);
        if broadcast_both {
            self.note(format!(
                "{op} of two broadcast operands: predicted over its output"
            ));
        }
        Ok(Mapped::Layer {
            spec: spec(scalar),
            first,
            second: None,
        })
    }

    fn matmul(
        &mut self,
        g: &proto::Graph,
        index: usize,
        node: &Node,
        out: &[usize],
    ) -> Result<Mapped> {
        let a = self.shape(node, 0)?;
        let b = self.shape(node, 1)?;
        let b_val = self.val(node, 1)?.cloned();
        let weight = b_val.as_ref().is_some_and(|v| v.constant) && b.len() == 2;
        if weight {
            let (rows, k) = rows_last(&a);
            let mut bias = false;
            // MatMul + Add of a bias vector: one linear with bias.
            if let Some(o) = node.outputs.first()
                && let Some([c]) = self.consumers.get(o).map(Vec::as_slice)
                && let Some(add) = g.nodes.get(*c)
                && add.op == "Add"
                && *c > index
            {
                let other = if add.inputs[0] == *o { 1 } else { 0 };
                if let Some(v) = add.inputs.get(other).and_then(|n| self.vals.get(n))
                    && v.constant
                    && v.shape.as_deref().map(elements) == Some(b[1])
                {
                    bias = true;
                    self.skip.insert(*c, o.clone());
                    *self.fused.entry("MatMul+Add".into()).or_default() += 1;
                }
            }
            return Ok(Mapped::Layer {
                spec: ModuleSpec::Linear(Linear {
                    tokens: rows.max(1),
                    in_features: k,
                    out_features: b[1],
                    bias,
                }),
                first: 0,
                second: None,
            });
        }
        let a2 = if a.len() == 1 {
            vec![1, a[0]]
        } else {
            a.clone()
        };
        let b2 = if b.len() == 1 {
            vec![b[0], 1]
        } else {
            b.clone()
        };
        let (m, k) = (a2[a2.len() - 2], a2[a2.len() - 1]);
        let n = b2[b2.len() - 1];
        let heads = elements(out) / (m * n).max(1);
        let trans_b = b_val.as_ref().is_some_and(|v| v.swapped_last);
        Ok(Mapped::Layer {
            spec: ModuleSpec::Matmul(Matmul {
                heads: heads.max(1),
                m,
                k,
                n,
                trans_a: false,
                trans_b,
            }),
            first: 0,
            second: Some(1),
        })
    }

    fn conv(&mut self, index: usize, node: &Node, g: &proto::Graph) -> Result<Mapped> {
        let x = self.shape(node, 0)?;
        let w = self.shape(node, 1)?;
        if x.len() != 4 {
            return Ok(Mapped::Unmapped);
        }
        if x[0] != 1 {
            return Err(self.batch_error(node, &x));
        }
        let (_, k, s, p, d) = self.window_shape(node)?;
        // Checked in `window_shape`: from 1 to the input channels.
        let groups = node.int("group", 1).max(1) as usize;
        let mut bias = node.inputs.get(2).is_some_and(|s| !s.is_empty());
        if self.options.fuse_conv_bn
            && let Some(o) = node.outputs.first()
            && let Some([c]) = self.consumers.get(o).map(Vec::as_slice)
            && g.nodes
                .get(*c)
                .is_some_and(|n| n.op == "BatchNormalization")
            && *c > index
        {
            bias = true;
            self.skip.insert(*c, o.clone());
            *self
                .fused
                .entry("Conv+BatchNormalization".into())
                .or_default() += 1;
        }
        Ok(Mapped::Layer {
            spec: ModuleSpec::Conv2d(Conv2d {
                in_channels: x[1],
                out_channels: w[0],
                input_hw: [x[2], x[3]],
                kernel: k,
                stride: s,
                padding: p,
                dilation: d,
                groups,
                bias,
            }),
            first: 0,
            second: None,
        })
    }
}

fn ew(shape: &[usize]) -> Elementwise {
    Elementwise {
        shape: fold3(shape),
    }
}

fn squeeze_unsqueeze(op: &str, s: &[usize], axes: &[i64]) -> Option<Vec<usize>> {
    if op == "Squeeze" {
        if axes.is_empty() {
            return Some(s.iter().copied().filter(|&d| d != 1).collect());
        }
        let axes: Vec<usize> = axes
            .iter()
            .map(|&a| axis(a, s.len()).filter(|&a| s[a] == 1))
            .collect::<Option<_>>()?;
        Some(
            s.iter()
                .enumerate()
                .filter(|(i, _)| !axes.contains(i))
                .map(|(_, &d)| d)
                .collect(),
        )
    } else {
        let rank = s.len() + axes.len();
        let mut axes: Vec<usize> = axes.iter().map(|&a| axis(a, rank)).collect::<Option<_>>()?;
        axes.sort_unstable();
        let mut out = s.to_vec();
        for a in axes {
            if a > out.len() {
                return None;
            }
            out.insert(a, 1);
        }
        Some(out)
    }
}

/// The shape of a slice, or why its arguments are not valid (lengths that differ, an axis
/// out of range or twice, a step of 0 or beyond the largest size).
fn slice_shape(
    s: &[usize],
    starts: &[i64],
    ends: &[i64],
    axes: &[i64],
    steps: &[i64],
) -> std::result::Result<Vec<usize>, String> {
    if starts.is_empty() {
        return Err("`starts` is empty".into());
    }
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err(format!(
            "`starts` {starts:?}, `ends` {ends:?}, `axes` {axes:?} and `steps` {steps:?} differ \
             in length"
        ));
    }
    let mut out = s.to_vec();
    let mut seen = vec![false; s.len()];
    for (k, &a) in axes.iter().enumerate() {
        let a = axis(a, s.len())
            .filter(|&a| !std::mem::replace(&mut seen[a], true))
            .ok_or_else(|| format!("`axes` {axes:?} for rank {}", s.len()))?;
        let step = steps[k];
        if step == 0 || step.unsigned_abs() > MAX_AXIS as u64 {
            return Err(format!(
                "`steps` value {step} is out of range (1 to {MAX_AXIS} in magnitude)"
            ));
        }
        // In i128 so that no start, end or step near the i64 limits overflows.
        let (n, step) = (s[a] as i128, i128::from(step));
        let norm = |v: i64| {
            let v = i128::from(v);
            if v < 0 { v + n } else { v }
        };
        let (start, end) = (norm(starts[k]), norm(ends[k]));
        let len = if step > 0 {
            let (st, en) = (start.clamp(0, n), end.clamp(0, n));
            ((en - st).max(0) + step - 1) / step
        } else {
            let (st, en) = (start.clamp(-1, n - 1), end.clamp(-1, n - 1));
            ((st - en).max(0) + (-step) - 1) / (-step)
        };
        out[a] = len as usize;
    }
    Ok(out)
}

/// Element-wise integer arithmetic with broadcasting of scalars and equal lengths.
fn elementwise_ints(op: &str, v: &[Vec<i64>], n: usize) -> Option<Vec<i64>> {
    let at = |x: &Vec<i64>, i: usize| -> Option<i64> {
        match x.len() {
            1 => Some(x[0]),
            l if l == n => Some(x[i]),
            _ => None,
        }
    };
    (0..n)
        .map(|i| {
            let a = at(v.first()?, i)?;
            let b = at(v.get(1)?, i)?;
            Some(match op {
                "Add" => a.checked_add(b)?,
                "Sub" => a.checked_sub(b)?,
                "Mul" => a.checked_mul(b)?,
                "Div" => a.checked_div(b)?,
                "Mod" => a.checked_rem(b)?,
                "Equal" => i64::from(a == b),
                "Less" => i64::from(a < b),
                "Greater" => i64::from(a > b),
                "Max" => a.max(b),
                "Min" => a.min(b),
                "Where" => {
                    let c = at(v.get(2)?, i)?;
                    if a != 0 { b } else { c }
                }
                _ => return None,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn fixture(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/onnx")
            .join(name)
    }

    #[test]
    fn concats_name_every_computed_part() {
        for name in ["squeezenet-mini.onnx", "densenet-mini.onnx"] {
            let net = import_file(fixture(name), &ImportOptions::default())
                .unwrap()
                .network;
            let shapes = net.check().unwrap();
            let cats: Vec<usize> = (0..net.layers.len())
                .filter(|&i| net.layers[i].spec.kind() == ModuleKind::Concat)
                .collect();
            assert!(
                cats.iter().any(|&i| !net.layers[i].parts_from.is_empty()),
                "{name}"
            );
            for i in cats {
                let layer = &net.layers[i];
                // The named parts fill the concat (a one-input concat is a copy): nothing of
                // it is left unmodelled.
                let elems = |n: &str| -> usize {
                    let j = net.layers.iter().position(|l| l.name == n).unwrap();
                    shapes[j].output.iter().product()
                };
                let first = elems(layer.input_from.as_deref().unwrap());
                let parts: usize = layer.parts_from.iter().map(|n| elems(n)).sum();
                assert_eq!(
                    first + parts,
                    shapes[i].output.iter().product::<usize>(),
                    "{name}: {}",
                    layer.name
                );
            }
        }
    }

    fn count(net: &Network, kind: ModuleKind) -> usize {
        net.modules()
            .iter()
            .filter(|(_, s)| s.kind() == kind)
            .count()
    }

    fn seq(n: usize) -> ImportOptions {
        ImportOptions {
            seq: Some(n),
            ..ImportOptions::default()
        }
    }

    #[test]
    fn cnn_fixture_maps_convs_residuals_and_the_head() {
        let imp = import_file(fixture("cnn-residual.onnx"), &ImportOptions::default()).unwrap();
        let net = &imp.network;
        assert_eq!(net.input, vec![3, 64, 64]);
        assert!(imp.unmapped.is_empty());
        assert_eq!(count(net, ModuleKind::Conv2d), 8);
        let depthwise = net
            .modules()
            .iter()
            .filter(|(_, s)| matches!(s, ModuleSpec::Conv2d(c) if c.groups > 1 && c.groups == c.in_channels))
            .count();
        assert_eq!(depthwise, 2);
        assert_eq!(count(net, ModuleKind::Add), 2);
        assert_eq!(count(net, ModuleKind::MaxPool2d), 1);
        // The global average pool covers the whole 8x8 map.
        let pool = net
            .layers
            .iter()
            .find(|l| l.spec.kind() == ModuleKind::AvgPool2d)
            .unwrap();
        assert_eq!(pool.spec.output_shape().unwrap(), vec![32, 1, 1]);
        assert_eq!(imp.fused.get("Gemm+bias"), Some(&1));
        // ReLU6 exports as Clip: the nearest kind, noted.
        assert_eq!(imp.notes.get("Clip -> relu (nearest kind)"), Some(&4));
        assert_eq!(net.output_shape().unwrap(), vec![1, 10]);
        // The residual add reads both branches.
        let add = net
            .layers
            .iter()
            .find(|l| l.spec.kind() == ModuleKind::Add)
            .unwrap();
        assert!(add.input_from.is_some() && add.second_from.is_some() && !add.detached);
    }

    #[test]
    fn encoder_and_decoder_fixtures_map_attention_per_head() {
        let enc = import_file(fixture("encoder-2l.onnx"), &seq(32)).unwrap();
        let net = &enc.network;
        assert!(enc.unmapped.is_empty(), "{:?}", enc.unmapped);
        assert_eq!(count(net, ModuleKind::Linear), 12);
        assert_eq!(count(net, ModuleKind::Matmul), 4);
        assert_eq!(count(net, ModuleKind::Softmax), 2);
        assert_eq!(count(net, ModuleKind::LayerNorm), 5);
        // Token and (constant-index) position lookups both run.
        assert_eq!(count(net, ModuleKind::Embedding), 2);
        assert_eq!(enc.fused.get("MatMul+Add"), Some(&12));
        // The merge of heads (transpose then reshape) is a copy; the head split is views.
        assert_eq!(count(net, ModuleKind::Copy), 2);
        assert!(count(net, ModuleKind::View) >= 8);

        let dec = import_file(fixture("decoder-2l.onnx"), &seq(64)).unwrap();
        let net = &dec.network;
        assert!(dec.unmapped.is_empty(), "{:?}", dec.unmapped);
        assert_eq!(count(net, ModuleKind::MaskedFill), 2);
        let scores: Vec<&ModuleSpec> = net
            .modules()
            .into_iter()
            .map(|(_, s)| s)
            .filter(|s| matches!(s, ModuleSpec::Matmul(m) if m.n == 64))
            .collect();
        assert_eq!(
            scores[0],
            &ModuleSpec::Matmul(Matmul {
                heads: 4,
                m: 64,
                k: 16,
                n: 64,
                trans_a: false,
                trans_b: true
            })
        );
        assert_eq!(net.output_shape().unwrap(), vec![64, 500]);
    }

    #[test]
    fn shapes_follow_the_options_and_errors_name_file_and_node() {
        let err = import_file(fixture("decoder-2l.onnx"), &ImportOptions::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("decoder-2l.onnx`: input `ids` has a symbolic sequence dim `sequence`"),
            "{err}"
        );
        let given = ImportOptions {
            inputs: vec![("ids".into(), vec![1, 16])],
            ..ImportOptions::default()
        };
        let net = import_file(fixture("decoder-2l.onnx"), &given)
            .unwrap()
            .network;
        assert_eq!(net.input, vec![16]);
        let wrong = ImportOptions {
            inputs: vec![("ids".into(), vec![16])],
            ..ImportOptions::default()
        };
        let err = import_file(fixture("decoder-2l.onnx"), &wrong)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`--input ids` gives 1 dims, the graph declares 2"),
            "{err}"
        );

        let listed = import_file(fixture("unknown-op.onnx"), &ImportOptions::default()).unwrap();
        assert_eq!(listed.unmapped.len(), 1);
        assert_eq!(listed.unmapped[0].op, "Hardmax");
        assert!(listed.unmapped_byte_share() > 0.3);
        let strict = ImportOptions {
            strict: true,
            ..ImportOptions::default()
        };
        let err = import_file(fixture("unknown-op.onnx"), &strict)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "unknown-op.onnx`: node `hardmax0` (Hardmax): op has no perfcast module kind"
            ),
            "{err}"
        );

        let err = import_file(fixture("dynamic-reshape.onnx"), &ImportOptions::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("node `reshape0` (Reshape)") && err.contains("does not resolve"),
            "{err}"
        );

        let err = import_bytes(
            b"\x0a\x05abc",
            Path::new("bad.onnx"),
            &ImportOptions::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("ONNX file `bad.onnx`: malformed ONNX protobuf"),
            "{err}"
        );
    }

    #[test]
    fn folding_evaluates_shape_arithmetic() {
        assert_eq!(fold3(&[1, 12, 128, 64]), [12, 128, 64]);
        assert_eq!(fold3(&[7]), [1, 1, 7]);
        assert_eq!(broadcast(&[1, 1, 4], &[3, 1]), Some(vec![1, 3, 4]));
        assert_eq!(broadcast(&[2, 4], &[3, 4]), None);
        assert_eq!(
            squeeze_unsqueeze("Unsqueeze", &[4, 5], &[0, -1]),
            Some(vec![1, 4, 5, 1])
        );
        assert_eq!(
            slice_shape(&[10, 8], &[0, 2], &[i64::MAX, -2], &[0, 1], &[2, 1]),
            Ok(vec![5, 4])
        );
        assert_eq!(
            slice_shape(&[10], &[i64::MIN], &[i64::MAX], &[0], &[-3]),
            Ok(vec![0])
        );
        assert_eq!(
            slice_shape(&[10], &[i64::MAX], &[i64::MIN], &[0], &[-3]),
            Ok(vec![4])
        );
        assert_eq!(
            elementwise_ints("Mul", &[vec![2, 3], vec![4]], 2),
            Some(vec![8, 12])
        );
    }
}
