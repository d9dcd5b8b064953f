//! ONNX models built in Rust for tests and checks elsewhere (the CLI's, the fuzz harness's):
//! a ResNet-18-like graph with a dynamic or a fixed batch, as an exporter writes it.

use super::proto::{Attribute, Dim, Graph, Model, Node, Tensor, ValueInfo};

/// A ResNet-18-like model: conv 7x7/2, batch norms, ReLUs, a max pool, four stages of two basic
/// blocks (64, 128, 256, 512 channels, downsampling 1x1 convs), a global average pool and a
/// 1000-way Gemm, on `[batch, 3, resolution, resolution]`.
///
/// With `batch` `None` the batch axis is symbolic and the head flattens the pooled map
/// (`Flatten`); with `Some(n)` it is `n`, and the head reshapes to `[n, 512]`, the batch baked
/// into the target as a traced export writes it.
pub fn resnet18(batch: Option<usize>, resolution: usize) -> Model {
    let mut b = Builder::default();
    let lead = batch.map_or(Dim::Param("batch".into()), |n| Dim::Value(n as i64));
    let r = resolution as i64;
    b.graph.inputs.push(ValueInfo::new(
        "input",
        vec![lead, Dim::Value(3), Dim::Value(r), Dim::Value(r)],
    ));
    let mut x = b.conv("input", 3, 64, 7, 2, 3);
    x = b.bn_relu(&x, 64, true);
    x = b.node(
        Node::new("MaxPool", "", &[&x], &[])
            .with(Attribute::ints("kernel_shape", &[3, 3]))
            .with(Attribute::ints("strides", &[2, 2]))
            .with(Attribute::ints("pads", &[1, 1, 1, 1])),
    );
    let mut channels = 64;
    for (stage, out) in [64, 128, 256, 512].into_iter().enumerate() {
        for block in 0..2 {
            let stride = if stage > 0 && block == 0 { 2 } else { 1 };
            let mut y = b.conv(&x, channels, out, 3, stride, 1);
            y = b.bn_relu(&y, out, true);
            y = b.conv(&y, out, out, 3, 1, 1);
            y = b.bn_relu(&y, out, false);
            let shortcut = if stride != 1 || channels != out {
                let s = b.conv(&x, channels, out, 1, stride, 0);
                b.bn_relu(&s, out, false)
            } else {
                x.clone()
            };
            let sum = b.node(Node::new("Add", "", &[&y, &shortcut], &[]));
            x = b.node(Node::new("Relu", "", &[&sum], &[]));
            channels = out;
        }
    }
    x = b.node(Node::new("GlobalAveragePool", "", &[&x], &[]));
    x = match batch {
        None => b.node(Node::new("Flatten", "", &[&x], &[]).with(Attribute::int("axis", 1))),
        Some(n) => {
            let shape = b.init(Tensor::from_ints("", &[2], &[n as i64, 512]));
            b.node(Node::new("Reshape", "", &[&x, &shape], &[]))
        }
    };
    let w = b.init(Tensor::weight("", &[1000, 512]));
    let bias = b.init(Tensor::weight("", &[1000]));
    x = b.node(Node::new("Gemm", "", &[&x, &w, &bias], &[]).with(Attribute::int("transB", 1)));
    b.graph.outputs.push(ValueInfo::new(&x, vec![]));
    b.graph.name = "resnet18".into();
    Model::new(b.graph)
}

/// Appends nodes and initializers, naming each output after its node.
#[derive(Default)]
struct Builder {
    graph: Graph,
}

impl Builder {
    fn node(&mut self, mut node: Node) -> String {
        let name = format!("{}_{}", node.op.to_lowercase(), self.graph.nodes.len());
        node.name.clone_from(&name);
        node.outputs = vec![name.clone()];
        self.graph.nodes.push(node);
        name
    }

    fn init(&mut self, mut t: Tensor) -> String {
        let name = format!("init_{}", self.graph.initializers.len());
        t.name.clone_from(&name);
        self.graph.initializers.push(t);
        name
    }

    fn conv(&mut self, x: &str, cin: i64, cout: i64, k: i64, stride: i64, pad: i64) -> String {
        let w = self.init(Tensor::weight("", &[cout, cin, k, k]));
        self.node(
            Node::new("Conv", "", &[x, &w], &[])
                .with(Attribute::ints("kernel_shape", &[k, k]))
                .with(Attribute::ints("strides", &[stride, stride]))
                .with(Attribute::ints("pads", &[pad, pad, pad, pad])),
        )
    }

    fn bn_relu(&mut self, x: &str, channels: i64, relu: bool) -> String {
        let params: Vec<String> = (0..4)
            .map(|_| self.init(Tensor::weight("", &[channels])))
            .collect();
        let bn = self.node(Node::new(
            "BatchNormalization",
            "",
            &[x, &params[0], &params[1], &params[2], &params[3]],
            &[],
        ));
        if relu {
            self.node(Node::new("Relu", "", &[&bn], &[]))
        } else {
            bn
        }
    }
}
