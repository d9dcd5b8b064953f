//! The ONNX importer on hostile and on fixed-batch files: nothing panics on a model file, and a
//! fixed batch is the file's batch.

use std::path::Path;

use perfcast_core::ModuleKind;
use perfcast_graph::onnx::proto::{Attribute, Dim, Graph, Model, Node, Tensor, ValueInfo};
use perfcast_graph::onnx::{ImportOptions, Imported, import_bytes, testing};

const MAX: i64 = i64::MAX;
const MIN: i64 = i64::MIN;

fn input(name: &str, dims: &[i64]) -> ValueInfo {
    ValueInfo::new(name, dims.iter().map(|&d| Dim::Value(d)).collect())
}

/// A model of `nodes` over input `x` of `dims`, with `inits`; the last node's first output is
/// the graph's output.
fn model(dims: &[i64], inits: Vec<Tensor>, nodes: Vec<Node>) -> Vec<u8> {
    let out = nodes
        .last()
        .and_then(|n| n.outputs.first().cloned())
        .unwrap_or_default();
    Model::new(Graph {
        name: "g".into(),
        nodes,
        initializers: inits,
        inputs: vec![input("x", dims)],
        outputs: vec![ValueInfo::new(&out, vec![])],
        value_info: vec![],
    })
    .encode()
}

fn import(bytes: &[u8]) -> perfcast_graph::Result<Imported> {
    import_bytes(bytes, Path::new("case.onnx"), &ImportOptions::default())
}

/// The one-line error of importing `bytes`, which must be refused (a panic fails the test).
fn refused(bytes: &[u8]) -> String {
    match import(bytes) {
        Ok(i) => panic!("imported: {:?}", i.network.layers),
        Err(e) => {
            let text = e.to_string();
            assert!(
                text.starts_with("ONNX file `case.onnx`: "),
                "error does not name the file: {text}"
            );
            text
        }
    }
}

fn assert_names(err: &str, parts: &[&str]) {
    for p in parts {
        assert!(err.contains(p), "`{p}` not in: {err}");
    }
}

const X: &[i64] = &[1, 3, 8, 8];

fn conv(attrs: Vec<Attribute>, weight: &[i64]) -> Vec<u8> {
    let mut node = Node::new("Conv", "conv0", &["x", "w"], &["y"]);
    node.attributes = attrs;
    model(X, vec![Tensor::weight("w", weight)], vec![node])
}

#[test]
fn conv_attributes_past_the_limits_are_refused_by_name_and_value() {
    let err = refused(&conv(
        vec![Attribute::ints("pads", &[MAX, MAX, MAX, MAX])],
        &[8, 3, 3, 3],
    ));
    assert_names(
        &err,
        &[
            "node `conv0` (Conv)",
            "`pads` value 9223372036854775807 is out of range (0 to 16777216)",
        ],
    );
    let err = refused(&conv(
        vec![Attribute::ints("dilations", &[1 << 62, 1])],
        &[8, 3, 3, 3],
    ));
    assert_names(
        &err,
        &["`dilations` value 4611686018427387904 is out of range"],
    );
    let err = refused(&conv(vec![Attribute::int("group", MAX)], &[8, 3, 3, 3]));
    assert_names(
        &err,
        &["`group` value 9223372036854775807 is out of range (1 to 3)"],
    );
    let err = refused(&conv(vec![], &[8, 2, 3, 3]));
    assert_names(
        &err,
        &["weight `w` of shape [8, 2, 3, 3] does not fit input"],
    );
}

#[test]
fn a_conv_weight_of_rank_one_or_zero_is_refused() {
    let err = refused(&conv(vec![], &[3]));
    assert_names(
        &err,
        &["weight `w` has shape [3]: a 2-D Conv takes a rank-4 weight"],
    );
    let err = refused(&conv(vec![Attribute::ints("kernel_shape", &[3, 3])], &[]));
    assert_names(&err, &["weight `w` has shape []"]);
}

#[test]
fn pad_and_slice_arguments_at_the_i64_limits_are_refused() {
    let pad = Node::new("Pad", "pad0", &["x"], &["y"])
        .with(Attribute::ints("pads", &[0, 0, MAX, MAX, 0, 0, MAX, MAX]));
    let err = refused(&model(X, vec![], vec![pad]));
    assert_names(
        &err,
        &["node `pad0` (Pad)", "`pads` value 9223372036854775807"],
    );

    for step in [MAX, MIN] {
        let inits = vec![
            Tensor::from_ints("starts", &[1], &[0]),
            Tensor::from_ints("ends", &[1], &[MAX]),
            Tensor::from_ints("axes", &[1], &[2]),
            Tensor::from_ints("steps", &[1], &[step]),
        ];
        let slice = Node::new(
            "Slice",
            "s",
            &["x", "starts", "ends", "axes", "steps"],
            &["y"],
        );
        let err = refused(&model(X, inits, vec![slice]));
        assert_names(&err, &[&format!("`steps` value {step} is out of range")]);
    }
}

#[test]
fn slice_with_empty_constant_starts_is_refused() {
    let inits = vec![
        Tensor::from_ints("starts", &[0], &[]),
        Tensor::from_ints("ends", &[0], &[]),
    ];
    let slice = Node::new("Slice", "s", &["x", "starts", "ends"], &["y"]);
    assert_names(
        &refused(&model(X, inits.clone(), vec![slice])),
        &["node `s` (Slice): `starts` is empty"],
    );
    // The same on a constant, folded rather than run.
    let inits = [inits, vec![Tensor::from_ints("c", &[3], &[1, 2, 3])]].concat();
    let slice = Node::new("Slice", "s", &["c", "starts", "ends"], &["y"]);
    let relu = Node::new("Relu", "r", &["x"], &["z"]);
    assert_names(
        &refused(&model(X, inits, vec![slice, relu])),
        &["`starts` is empty"],
    );
}

#[test]
fn ops_with_an_axis_on_a_scalar_are_refused() {
    let k = |name: &str, v: &[i64]| Tensor::from_ints(name, &[v.len() as i64], v);
    let cases = [
        (
            Node::new("Slice", "slice0", &["x", "starts", "ends"], &["y"]),
            "a Slice of a scalar input",
        ),
        (
            Node::new("Concat", "concat0", &["x", "x"], &["y"]).with(Attribute::int("axis", 0)),
            "`axis` 0 for a scalar input (rank 0 has no axis)",
        ),
        (
            Node::new("Split", "split0", &["x"], &["y", "z"]),
            "`axis` 0 for a scalar input",
        ),
        (
            Node::new("Gather", "gather0", &["x", "idx"], &["y"]),
            "`axis` 0 for a scalar input",
        ),
        (
            Node::new("ReduceSum", "sum0", &["x"], &["y"]).with(Attribute::ints("axes", &[0])),
            "`axes` 0 for a scalar input",
        ),
    ];
    for (node, message) in cases {
        let label = format!("node `{}` ({})", node.name, node.op);
        let inits = vec![k("starts", &[0]), k("ends", &[1]), k("idx", &[0])];
        let err = refused(&model(&[], inits, vec![node]));
        assert_names(&err, &[&label, message]);
    }
}

#[test]
fn range_neg_and_constant_of_shape_beyond_64_bits_or_the_limits_are_refused() {
    let k = |name: &str, v: &[i64]| Tensor::from_ints(name, &[v.len() as i64], v);
    let relu = || Node::new("Relu", "r", &["x"], &["out"]);
    let range = || Node::new("Range", "range0", &["s", "l", "d"], &["y"]);
    let err = refused(&model(
        X,
        vec![k("s", &[MIN]), k("l", &[1]), k("d", &[1])],
        vec![range(), relu()],
    ));
    assert_names(
        &err,
        &[
            "node `range0` (Range)",
            "a Range from -9223372036854775808 to 1 by 1 holds 9223372036854775809 values",
        ],
    );
    // A step so large that `index * delta` leaves i64 while every value fits: imported.
    let big = model(
        X,
        vec![k("s", &[MIN]), k("l", &[MAX]), k("d", &[1 << 62])],
        vec![range(), relu()],
    );
    assert_eq!(import(&big).expect("imports").folded, 1);
    let err = refused(&model(
        X,
        vec![k("s", &[]), k("l", &[1]), k("d", &[1])],
        vec![range(), relu()],
    ));
    assert_names(&err, &["`start` holds 0 values [], a Range takes one"]);

    let neg = Node::new("Neg", "neg0", &["c"], &["y"]);
    let err = refused(&model(X, vec![k("c", &[MIN])], vec![neg, relu()]));
    assert_names(
        &err,
        &["node `neg0` (Neg): Neg of -9223372036854775808 overflows 64 bits"],
    );

    let fill = Node::new("ConstantOfShape", "fill0", &["shape"], &["y"]);
    let err = refused(&model(
        X,
        vec![k("shape", &[1 << 40, 1 << 40, 1 << 40])],
        vec![fill, relu()],
    ));
    assert_names(
        &err,
        &["`shape` value 1099511627776 is out of range (0 to 16777216)"],
    );
}

#[test]
fn huge_initializers_reshape_targets_and_inputs_are_refused() {
    let relu = Node::new("Relu", "r", &["x"], &["y"]);
    let err = refused(&model(
        X,
        vec![Tensor::weight("big", &[1 << 32, 1 << 32])],
        vec![relu.clone()],
    ));
    assert_names(
        &err,
        &["TensorProto `big`: dims [4294967296, 4294967296] hold more than 1099511627776"],
    );

    let target = Tensor::from_ints("shape", &[2], &[1 << 62, 1 << 62]);
    let reshape = Node::new("Reshape", "reshape0", &["x", "shape"], &["y"]);
    let err = refused(&model(X, vec![target], vec![reshape]));
    assert_names(
        &err,
        &[
            "target shape [4611686018427387904, 4611686018427387904] has 4611686018427387904 on axis 0",
        ],
    );

    let huge = [1 << 32, 1 << 32, 1 << 32];
    let shape = Tensor::from_ints("shape", &[1], &[-1]);
    for node in [
        Node::new("Size", "n", &["x"], &["y"]),
        Node::new("Reshape", "n", &["x", "shape"], &["y"]),
        Node::new("Flatten", "n", &["x"], &["y"]),
    ] {
        let err = refused(&model(&huge, vec![shape.clone()], vec![node, relu.clone()]));
        assert_names(
            &err,
            &["input `x`: axis 0 of [4294967296, 4294967296, 4294967296] is 4294967296"],
        );
    }
}

#[test]
fn shapes_that_do_not_fit_together_are_refused() {
    let two = |nodes: Vec<Node>, inits: Vec<Tensor>| {
        Model::new(Graph {
            name: "g".into(),
            nodes,
            initializers: inits,
            inputs: vec![input("x", X), input("z", &[1, 3, 9, 9])],
            outputs: vec![],
            value_info: vec![],
        })
        .encode()
    };
    let concat = Node::new("Concat", "cat", &["x", "z"], &["y"]).with(Attribute::int("axis", 1));
    assert_names(
        &refused(&two(vec![concat], vec![])),
        &[
            "node `cat` (Concat): input `z` of shape [1, 3, 9, 9] does not match [1, 3, 8, 8] off axis 1",
        ],
    );
    for perm in [&[0, 0, 0, 0][..], &[1], &[0, 1, 2, 4]] {
        let t = Node::new("Transpose", "t", &["x"], &["y"]).with(Attribute::ints("perm", perm));
        assert_names(
            &refused(&model(X, vec![], vec![t])),
            &[&format!("`perm` {perm:?} is not a permutation of 0..4")],
        );
    }
    let split = Node::new("Split", "sp", &["x"], &["a", "b"])
        .with(Attribute::int("axis", 1))
        .with(Attribute::ints("split", &[1, 1]));
    assert_names(
        &refused(&model(X, vec![], vec![split])),
        &["`split` [1, 1] does not divide axis 1 of [1, 3, 8, 8] into 2 outputs"],
    );
    let idx = Tensor::from_ints("idx", &[1], &[7]);
    let gather = Node::new("Gather", "ga", &["x", "idx"], &["y"]).with(Attribute::int("axis", 1));
    assert_names(
        &refused(&model(X, vec![idx], vec![gather])),
        &["index 7 is out of range for axis 1 of [1, 3, 8, 8]"],
    );
    let gemm = Node::new("Gemm", "fc", &["x", "w"], &["y"]);
    assert_names(
        &refused(&model(
            &[1, 16],
            vec![Tensor::weight("w", &[8, 32])],
            vec![gemm],
        )),
        &["Gemm of [1, 16] and [8, 32]: inner sizes 16 and 8 differ"],
    );
    let squeeze = Node::new("Squeeze", "sq", &["x"], &["y"]).with(Attribute::ints("axes", &[1]));
    assert_names(
        &refused(&model(X, vec![], vec![squeeze])),
        &["`axes` [1] for shape [1, 3, 8, 8]"],
    );
}

#[test]
fn many_nodes_sharing_one_name_get_distinct_numbered_names() {
    let n = 20_000;
    let nodes: Vec<Node> = (0..n)
        .map(|i| {
            let from = if i == 0 {
                "x".to_string()
            } else {
                format!("t{}", i - 1)
            };
            Node::new("Relu", "same", &[&from], &[&format!("t{i}")])
        })
        .collect();
    let imported = import(&model(X, vec![], nodes)).expect("imports");
    let names: Vec<&str> = imported
        .network
        .layers
        .iter()
        .map(|l| l.name.as_str())
        .collect();
    assert_eq!(names.len(), n);
    assert_eq!(names[..3], ["same", "same#1", "same#2"]);
    assert_eq!(names[n - 1], format!("same#{}", n - 1));
}

#[test]
fn a_fixed_batch_is_the_files_batch_and_the_graph_is_imported_per_sample() {
    let dynamic = import(&testing::resnet18(None, 64).encode()).expect("dynamic");
    let fixed = import(&testing::resnet18(Some(8), 64).encode()).expect("fixed");
    assert_eq!(dynamic.batch, None);
    assert_eq!(fixed.batch, Some(8));
    // Same layers, same shapes: only the head's Flatten is a Reshape to [8, 512] in the file.
    let kinds = |i: &Imported| -> Vec<(ModuleKind, Vec<usize>)> {
        i.network
            .layers
            .iter()
            .map(|l| (l.spec.kind(), l.spec.output_shape().expect("shape")))
            .collect()
    };
    assert_eq!(kinds(&fixed), kinds(&dynamic));
    assert_eq!(fixed.network.input, vec![3, 64, 64]);
    assert_eq!(
        fixed
            .network
            .layers
            .iter()
            .filter(|l| l.spec.kind() == ModuleKind::Conv2d)
            .count(),
        20
    );
    assert_eq!(fixed.network.output_shape().expect("shape"), vec![1, 1000]);
    assert_eq!(fixed.mapped_flops, dynamic.mapped_flops);

    // A target of [8, -1] is the same head.
    let mut m = testing::resnet18(Some(8), 64);
    for t in &mut m.graph.initializers {
        if t.ints == [8, 512] {
            *t = Tensor::from_ints(&t.name, &[2], &[8, -1]);
        }
    }
    assert_eq!(
        kinds(&import(&m.encode()).expect("[8, -1]")),
        kinds(&dynamic)
    );
}

#[test]
fn a_transformer_input_with_a_fixed_batch_of_two_is_read_per_sample() {
    let w = Tensor::weight("w", &[16, 32]);
    let target = Tensor::from_ints("shape", &[3], &[2, 10, 32]);
    let nodes = vec![
        Node::new("MatMul", "proj", &["x", "w"], &["h"]),
        Node::new("Reshape", "r", &["h", "shape"], &["y"]),
    ];
    let imported = import(&model(&[2, 10, 16], vec![w, target], nodes)).expect("imports");
    assert_eq!(imported.batch, Some(2));
    assert_eq!(imported.network.input, vec![10, 16]);
    assert_eq!(
        imported.network.output_shape().expect("shape"),
        vec![1, 10, 32]
    );
}
