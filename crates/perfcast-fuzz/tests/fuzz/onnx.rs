//! perfcast-graph's ONNX importer: random small graphs of valid structure (ops the importer
//! knows, attributes at the i64 limits, ranks 0 to 5, odd initializer dims) encoded as ONNX
//! protobuf, the hostile files of the regression tests mutated, and byte changes to encoded
//! models. Nothing may panic; an accepted import must give finite, non-negative totals.

use std::path::Path;

use perfcast_graph::onnx::proto::{Attribute, Dim, Graph, Model, Node, Tensor, ValueInfo};
use perfcast_graph::onnx::{ImportOptions, import_bytes, testing};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::TestCaseError;

use crate::harness::{Cost, Outcome, finite_non_negative, fuzz};
use crate::mutate::{apply_bytes, byte_ops};

const OPS: &[&str] = &[
    "Conv",
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "BatchNormalization",
    "LayerNormalization",
    "Relu",
    "Sigmoid",
    "Gelu",
    "Softmax",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Where",
    "Equal",
    "Mod",
    "Gather",
    "GatherElements",
    "Gemm",
    "MatMul",
    "Reshape",
    "Flatten",
    "Squeeze",
    "Unsqueeze",
    "Transpose",
    "Expand",
    "Split",
    "Identity",
    "Dropout",
    "Concat",
    "Slice",
    "Pad",
    "ReduceSum",
    "ReduceMean",
    "ArgMax",
    "Cast",
    "Neg",
    "Sqrt",
    "Clip",
    "Shape",
    "Size",
    "ConstantOfShape",
    "Range",
    "Constant",
    "Hardmax",
];

const ATTRIBUTES: &[&str] = &[
    "axis",
    "axes",
    "perm",
    "pads",
    "strides",
    "dilations",
    "kernel_shape",
    "group",
    "split",
    "starts",
    "ends",
    "keepdims",
    "transA",
    "transB",
    "allowzero",
    "ceil_mode",
    "start",
    "end",
    "to",
    "value",
    "value_int",
    "value_ints",
];

/// Integers at and near every limit the importer meets.
const EXTREMES: &[i64] = &[
    0,
    -1,
    1,
    i64::MAX,
    i64::MIN,
    i64::MAX - 1,
    i64::MIN + 1,
    1 << 62,
    -(1 << 62),
    1 << 40,
    1 << 32,
    1 << 26,
    1 << 24,
    (1 << 24) + 1,
    -(1 << 24),
];

fn int() -> impl Strategy<Value = i64> {
    prop_oneof![4 => -3i64..10, 1 => select(EXTREMES)]
}

fn ints(max: usize) -> impl Strategy<Value = Vec<i64>> {
    vec(int(), 0..=max)
}

/// A dim of an input or an initializer: mostly small, sometimes at the limits.
fn dim() -> impl Strategy<Value = i64> {
    prop_oneof![24 => 1i64..9, 1 => Just(0i64), 2 => select(EXTREMES)]
}

fn tensor(name: String) -> impl Strategy<Value = Tensor> {
    (vec(dim(), 0..=3), ints(6), any::<bool>()).prop_map(move |(dims, values, with_values)| {
        if with_values {
            Tensor::from_ints(&name, &dims, &values)
        } else {
            Tensor::weight(&name, &dims)
        }
    })
}

fn attribute() -> impl Strategy<Value = Attribute> {
    (select(ATTRIBUTES), 0..3u8, ints(8), tensor(String::new())).prop_map(
        |(name, form, values, t)| match form {
            0 => Attribute::int(name, values.first().copied().unwrap_or(0)),
            1 => Attribute::ints(name, &values),
            _ => Attribute::tensor(name, t),
        },
    )
}

/// A node before its inputs are named: op, picks among the tensors so far, outputs and
/// attributes.
#[derive(Clone, Debug)]
struct RawNode {
    op: &'static str,
    inputs: Vec<usize>,
    outputs: usize,
    attributes: Vec<Attribute>,
}

fn raw_node() -> impl Strategy<Value = RawNode> {
    (
        select(OPS),
        vec(any::<usize>(), 1..=4),
        1..=2usize,
        vec(attribute(), 0..=3),
    )
        .prop_map(|(op, inputs, outputs, attributes)| RawNode {
            op,
            inputs,
            outputs,
            attributes,
        })
}

/// A graph over one input of rank 0 to 5 (a symbolic batch or not), up to four initializers
/// and up to eight nodes, each reading tensors defined before it.
fn graph() -> impl Strategy<Value = Model> {
    let input = prop_oneof![
        2 => Just(vec![1, 3, 8, 8]),
        1 => Just(vec![1, 4, 6]),
        3 => vec(dim(), 0..=5),
    ];
    (
        input,
        any::<bool>(),
        vec(tensor(String::new()), 0..=4),
        vec(raw_node(), 1..=8),
        vec((any::<usize>(), vec(dim(), 0..=4)), 0..=2),
    )
        .prop_map(|(dims, symbolic, inits, raw, value_info)| {
            let mut g = Graph {
                name: "fuzz".into(),
                ..Graph::default()
            };
            let mut dims: Vec<Dim> = dims.into_iter().map(Dim::Value).collect();
            if symbolic && !dims.is_empty() {
                dims[0] = Dim::Param("batch".into());
            }
            g.inputs.push(ValueInfo::new("x", dims));
            let mut names = vec!["x".to_string()];
            for (i, mut t) in inits.into_iter().enumerate() {
                t.name = format!("c{i}");
                names.push(t.name.clone());
                g.initializers.push(t);
            }
            for (i, r) in raw.into_iter().enumerate() {
                // The first input is mostly the latest tensor, so that chains of ops form.
                let inputs: Vec<String> = r
                    .inputs
                    .iter()
                    .enumerate()
                    .map(|(j, &k)| {
                        let pick = if j == 0 && k % 4 != 0 {
                            names.len() - 1
                        } else {
                            k % names.len()
                        };
                        names[pick].clone()
                    })
                    .collect();
                let outputs: Vec<String> = (0..r.outputs).map(|k| format!("t{i}_{k}")).collect();
                names.extend(outputs.iter().cloned());
                g.nodes.push(Node {
                    inputs,
                    outputs,
                    name: format!("n{i}"),
                    op: r.op.into(),
                    domain: String::new(),
                    attributes: r.attributes,
                });
            }
            for (k, d) in value_info {
                let name = names[k % names.len()].clone();
                g.value_info.push(ValueInfo::new(
                    &name,
                    d.into_iter().map(Dim::Value).collect(),
                ));
            }
            Model::new(g)
        })
}

/// The hostile files of the regression tests (and a ResNet-18-like export), to mutate.
fn seeds() -> Vec<Model> {
    let x = || ValueInfo::new("x", [1, 3, 8, 8].map(Dim::Value).to_vec());
    let k = |name: &str, v: &[i64]| Tensor::from_ints(name, &[v.len() as i64], v);
    let one = |inits: Vec<Tensor>, node: Node| {
        Model::new(Graph {
            name: "seed".into(),
            nodes: vec![node, Node::new("Relu", "r", &["x"], &["out"])],
            initializers: inits,
            inputs: vec![x()],
            ..Graph::default()
        })
    };
    let conv = |attr: Attribute, w: &[i64]| {
        one(
            vec![Tensor::weight("w", w)],
            Node::new("Conv", "conv", &["x", "w"], &["y"]).with(attr),
        )
    };
    let (max, min) = (i64::MAX, i64::MIN);
    vec![
        conv(Attribute::ints("pads", &[max; 4]), &[8, 3, 3, 3]),
        conv(Attribute::ints("dilations", &[1 << 62, 1]), &[8, 3, 3, 3]),
        conv(Attribute::int("group", 1), &[3]),
        conv(Attribute::ints("kernel_shape", &[3, 3]), &[]),
        one(
            vec![],
            Node::new("Pad", "pad", &["x"], &["y"])
                .with(Attribute::ints("pads", &[0, 0, max, max, 0, 0, max, max])),
        ),
        one(
            vec![k("s", &[0]), k("e", &[max]), k("a", &[2]), k("st", &[max])],
            Node::new("Slice", "slice", &["x", "s", "e", "a", "st"], &["y"]),
        ),
        one(
            vec![k("s", &[0]), k("e", &[1]), k("a", &[2]), k("st", &[min])],
            Node::new("Slice", "slice", &["x", "s", "e", "a", "st"], &["y"]),
        ),
        one(
            vec![k("s", &[]), k("e", &[])],
            Node::new("Slice", "slice", &["x", "s", "e"], &["y"]),
        ),
        one(
            vec![k("s", &[min]), k("l", &[1]), k("d", &[1])],
            Node::new("Range", "range", &["s", "l", "d"], &["y"]),
        ),
        one(
            vec![k("s", &[]), k("l", &[1]), k("d", &[1])],
            Node::new("Range", "range", &["s", "l", "d"], &["y"]),
        ),
        one(
            vec![k("s", &[min]), k("l", &[max]), k("d", &[1 << 62])],
            Node::new("Range", "range", &["s", "l", "d"], &["y"]),
        ),
        one(
            vec![k("c", &[min])],
            Node::new("Neg", "neg", &["c"], &["y"]),
        ),
        one(
            vec![Tensor::weight("big", &[1 << 32, 1 << 32])],
            Node::new("Identity", "id", &["x"], &["y"]),
        ),
        one(
            vec![k("shape", &[1 << 40, 1 << 40, 1 << 40])],
            Node::new("ConstantOfShape", "fill", &["shape"], &["y"]),
        ),
        one(
            vec![k("shape", &[1 << 62, 1 << 62])],
            Node::new("Reshape", "reshape", &["x", "shape"], &["y"]),
        ),
        one(
            vec![],
            Node::new("Concat", "cat", &["x", "x"], &["y"]).with(Attribute::int("axis", 1)),
        ),
        one(
            vec![],
            Node::new("Transpose", "t", &["x"], &["y"]).with(Attribute::ints("perm", &[0; 4])),
        ),
        one(
            vec![k("i", &[0])],
            Node::new("Gather", "g", &["x", "i"], &["y"]).with(Attribute::int("axis", 1)),
        ),
        one(
            vec![],
            Node::new("Split", "sp", &["x"], &["y", "z"]).with(Attribute::int("axis", 1)),
        ),
        one(
            vec![],
            Node::new("ReduceSum", "sum", &["x"], &["y"]).with(Attribute::ints("axes", &[0])),
        ),
        testing::resnet18(Some(8), 32),
        testing::resnet18(None, 32),
    ]
}

/// A change to a seed: one attribute of one node replaced or added, or one initializer's or
/// the input's dims replaced.
#[derive(Clone, Debug)]
enum SeedOp {
    Attribute(usize, Attribute),
    InitDims(usize, Vec<i64>),
    InputDims(Vec<i64>),
    Values(usize, Vec<i64>),
}

fn seed_op() -> impl Strategy<Value = SeedOp> {
    prop_oneof![
        3 => (any::<usize>(), attribute()).prop_map(|(n, a)| SeedOp::Attribute(n, a)),
        1 => (any::<usize>(), vec(dim(), 0..=5)).prop_map(|(n, d)| SeedOp::InitDims(n, d)),
        1 => vec(dim(), 0..=5).prop_map(SeedOp::InputDims),
        1 => (any::<usize>(), ints(4)).prop_map(|(n, v)| SeedOp::Values(n, v)),
    ]
}

fn mutate(model: &mut Model, ops: &[SeedOp]) {
    let g = &mut model.graph;
    for op in ops {
        match op {
            SeedOp::Attribute(n, a) => {
                let len = g.nodes.len();
                let node = &mut g.nodes[n % len];
                match node.attributes.iter_mut().find(|x| x.name == a.name) {
                    Some(x) => *x = a.clone(),
                    None => node.attributes.push(a.clone()),
                }
            }
            SeedOp::InitDims(n, d) if !g.initializers.is_empty() => {
                let len = g.initializers.len();
                g.initializers[n % len].dims.clone_from(d);
            }
            SeedOp::Values(n, v) if !g.initializers.is_empty() => {
                let len = g.initializers.len();
                let t = &mut g.initializers[n % len];
                *t = Tensor::from_ints(&t.name, &[v.len() as i64], v);
            }
            SeedOp::InputDims(d) => {
                g.inputs[0].dims = Some(d.iter().map(|&v| Dim::Value(v)).collect());
            }
            _ => {}
        }
    }
}

/// Imports `bytes`; a panic fails the case, an accepted import must have finite totals.
fn check_import(bytes: &[u8]) -> Outcome {
    let options = ImportOptions {
        seq: Some(4),
        ..ImportOptions::default()
    };
    let result = std::panic::catch_unwind(|| import_bytes(bytes, Path::new("fuzz.onnx"), &options))
        .map_err(|panic| {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            TestCaseError::fail(format!("the importer panicked: {message}"))
        })?;
    match result {
        Ok(imported) => {
            finite_non_negative("mapped_flops", imported.mapped_flops)?;
            finite_non_negative("mapped_bytes", imported.mapped_bytes)?;
            finite_non_negative("unmapped share", imported.unmapped_flop_share())?;
            Ok(true)
        }
        Err(e) => {
            let text = e.to_string();
            crate::harness::check(!text.is_empty(), || "an empty error".into())?;
            Ok(false)
        }
    }
}

/// Every seed, as it is, is refused or imported without a panic.
#[test]
fn onnx_seeds() {
    for (i, seed) in seeds().iter().enumerate() {
        if let Err(e) = check_import(&seed.encode()) {
            panic!("seed {i}: {e}");
        }
    }
}

/// Random graphs of valid structure.
#[test]
fn onnx_graphs() {
    fuzz("onnx_graphs", Cost::Cheap, graph(), |model| {
        check_import(&model.encode())
    });
}

/// The seeds with attributes, dims and values changed.
#[test]
fn onnx_seed_mutations() {
    let seeds = seeds();
    let n = seeds.len();
    fuzz(
        "onnx_seed_mutations",
        Cost::Cheap,
        (0..n, vec(seed_op(), 1..=4)),
        move |(i, ops)| {
            let mut model = seeds[i].clone();
            mutate(&mut model, &ops);
            check_import(&model.encode())
        },
    );
}

/// Encoded seeds and random graphs with bytes flipped, cut, inserted or repeated.
#[test]
fn onnx_bytes() {
    let seeds: Vec<Vec<u8>> = seeds().iter().map(Model::encode).collect();
    let n = seeds.len();
    fuzz(
        "onnx_bytes",
        Cost::Cheap,
        (0..n, byte_ops(6)),
        move |(i, ops)| {
            let mut bytes = seeds[i].clone();
            apply_bytes(&mut bytes, &ops);
            check_import(&bytes)
        },
    );
}
