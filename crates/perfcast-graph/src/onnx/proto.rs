//! A small reader (and writer) of the ONNX protobuf messages the importer needs (ModelProto,
//! GraphProto, NodeProto, AttributeProto, TensorProto, ValueInfoProto), after
//! `onnx/onnx.proto3`.
//!
//! Hand-written over the protobuf wire format (varints, length-delimited fields, packed and
//! unpacked repeated scalars), borrowing from the file's bytes: a weight tensor's data is
//! never copied, only the small integer tensors shape arithmetic needs are decoded. Fields it
//! does not know are skipped, as protobuf readers do; a truncated or malformed message is an
//! error naming the message and the byte offset.

/// A decoding error: what was being read and where.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodeError(pub String);

type R<T> = std::result::Result<T, DecodeError>;

/// A cursor over one message's bytes.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

/// One field's value on the wire.
enum Wire<'a> {
    Varint(u64),
    /// A fixed64 field (doubles, fixed ints): no message the importer reads uses one.
    Fixed64,
    Bytes(&'a [u8]),
    Fixed32(u32),
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader { buf, pos: 0, what }
    }

    fn error(&self, message: &str) -> DecodeError {
        DecodeError(format!("{} at byte {}: {message}", self.what, self.pos))
    }

    fn varint(&mut self) -> R<u64> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(self.error("truncated varint"));
            };
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.error("varint longer than 10 bytes"))
    }

    fn take(&mut self, n: usize) -> R<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| self.error(&format!("a field of {n} bytes runs past the end")))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// The next field number and value, or `None` at the end.
    fn field(&mut self) -> R<Option<(u32, Wire<'a>)>> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let number = u32::try_from(key >> 3).map_err(|_| self.error("field number too large"))?;
        let wire = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Wire::Fixed64
            }
            2 => {
                let n = self.varint()?;
                let n = usize::try_from(n).map_err(|_| self.error("length too large"))?;
                Wire::Bytes(self.take(n)?)
            }
            5 => {
                let b = self.take(4)?;
                Wire::Fixed32(u32::from_le_bytes(b.try_into().unwrap_or([0; 4])))
            }
            other => return Err(self.error(&format!("unknown wire type {other}"))),
        };
        Ok(Some((number, wire)))
    }
}

fn string(bytes: &[u8], what: &'static str) -> R<String> {
    std::str::from_utf8(bytes)
        .map(str::to_string)
        .map_err(|_| DecodeError(format!("{what}: a name is not UTF-8")))
}

/// Repeated int64 values: packed (one length-delimited field) or one varint per field.
fn push_ints(wire: Wire<'_>, out: &mut Vec<i64>, what: &'static str) -> R<()> {
    match wire {
        Wire::Varint(v) => out.push(v as i64),
        Wire::Bytes(b) => {
            let mut r = Reader::new(b, what);
            while r.pos < b.len() {
                out.push(r.varint()? as i64);
            }
        }
        _ => {
            return Err(DecodeError(format!(
                "{what}: integers of the wrong wire type"
            )));
        }
    }
    Ok(())
}

/// Repeated floats: packed or one fixed32 per field.
fn push_floats(wire: Wire<'_>, out: &mut Vec<f32>, what: &'static str) -> R<()> {
    match wire {
        Wire::Fixed32(v) => out.push(f32::from_bits(v)),
        Wire::Bytes(b) => out.extend(
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        ),
        _ => {
            return Err(DecodeError(format!(
                "{what}: floats of the wrong wire type"
            )));
        }
    }
    Ok(())
}

/// ONNX element types the importer tells apart.
pub mod dtype {
    /// float32.
    pub const FLOAT: i32 = 1;
    /// int32.
    pub const INT32: i32 = 6;
    /// int64.
    pub const INT64: i32 = 7;
    /// bool.
    pub const BOOL: i32 = 9;
    /// float64.
    pub const DOUBLE: i32 = 11;
}

/// A tensor: its dims and, for small integer tensors, its values.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tensor {
    /// Name (initializers).
    pub name: String,
    /// Dims.
    pub dims: Vec<i64>,
    /// Element type.
    pub data_type: i32,
    /// Integer values (int64, int32, bool: decoded when the tensor has at most
    /// [`SMALL`] elements; shapes and indices), else empty.
    pub ints: Vec<i64>,
    /// Float values (float32, float64: decoded when small), else empty.
    pub floats: Vec<f32>,
    /// Whether the values were decoded (a small tensor with its data inside the file).
    pub has_values: bool,
}

/// Largest tensor whose values are decoded: shape arithmetic and indices are far smaller.
pub const SMALL: usize = 4096;

/// Most elements a tensor may declare: the largest tensor a module spec may describe.
pub const MAX_ELEMENTS: u64 = perfcast_core::MAX_ELEMENTS;

impl Tensor {
    fn decode(b: &[u8]) -> R<Tensor> {
        let mut r = Reader::new(b, "TensorProto");
        let mut t = Tensor::default();
        let mut raw: Option<&[u8]> = None;
        let mut ints = Vec::new();
        let mut floats = Vec::new();
        let mut external = false;
        while let Some((n, w)) = r.field()? {
            match (n, w) {
                (1, w) => push_ints(w, &mut t.dims, "TensorProto.dims")?,
                (2, Wire::Varint(v)) => t.data_type = v as i32,
                (4, w) => push_floats(w, &mut floats, "TensorProto.float_data")?,
                (5, w) | (7, w) => push_ints(w, &mut ints, "TensorProto.int_data")?,
                (8, Wire::Bytes(s)) => t.name = string(s, "TensorProto.name")?,
                (9, Wire::Bytes(s)) => raw = Some(s),
                (10, Wire::Bytes(s)) => floats.extend(s.chunks_exact(8).map(|c| {
                    f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f32
                })),
                (14, Wire::Varint(v)) => external = v == 1,
                _ => {}
            }
        }
        if t.dims.iter().any(|&d| d < 0) {
            return Err(DecodeError(format!(
                "TensorProto `{}`: negative dim in {:?}",
                t.name, t.dims
            )));
        }
        // Refused by its dims before any value is read, so no size can overflow or allocate.
        let elements = t
            .dims
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d.unsigned_abs()))
            .filter(|&n| n <= MAX_ELEMENTS)
            .filter(|_| t.dims.iter().all(|&d| d.unsigned_abs() <= MAX_ELEMENTS))
            .ok_or_else(|| {
                DecodeError(format!(
                    "TensorProto `{}`: dims {:?} hold more than {MAX_ELEMENTS} elements",
                    t.name, t.dims
                ))
            })?;
        let elements = elements as i64;
        if external || elements as usize > SMALL {
            return Ok(t);
        }
        if let Some(raw) = raw {
            match t.data_type {
                dtype::INT64 => {
                    ints = raw
                        .chunks_exact(8)
                        .map(|c| {
                            i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])
                        })
                        .collect();
                }
                dtype::INT32 => {
                    ints = raw
                        .chunks_exact(4)
                        .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                        .collect();
                }
                dtype::BOOL | 2 | 3 => ints = raw.iter().map(|&b| i64::from(b)).collect(),
                dtype::FLOAT => {
                    floats = raw
                        .chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .collect();
                }
                dtype::DOUBLE => {
                    floats = raw
                        .chunks_exact(8)
                        .map(|c| {
                            f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])
                                as f32
                        })
                        .collect();
                }
                _ => {}
            }
        }
        if !ints.is_empty() && ints.len() as i64 == elements {
            t.ints = ints;
            t.floats = t.ints.iter().map(|&v| v as f32).collect();
            t.has_values = true;
        } else if !floats.is_empty() && floats.len() as i64 == elements {
            t.ints = floats.iter().map(|&v| v as i64).collect();
            t.floats = floats;
            t.has_values = true;
        } else if elements == 0 {
            t.has_values = true;
        }
        Ok(t)
    }
}

/// One attribute of a node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attribute {
    /// Name.
    pub name: String,
    /// `f`.
    pub f: Option<f32>,
    /// `i`.
    pub i: Option<i64>,
    /// `s`.
    pub s: Option<String>,
    /// `t`.
    pub t: Option<Tensor>,
    /// `ints`.
    pub ints: Vec<i64>,
    /// `floats`.
    pub floats: Vec<f32>,
}

impl Attribute {
    fn decode(b: &[u8]) -> R<Attribute> {
        let mut r = Reader::new(b, "AttributeProto");
        let mut a = Attribute::default();
        while let Some((n, w)) = r.field()? {
            match (n, w) {
                (1, Wire::Bytes(s)) => a.name = string(s, "AttributeProto.name")?,
                (2, Wire::Fixed32(v)) => a.f = Some(f32::from_bits(v)),
                (3, Wire::Varint(v)) => a.i = Some(v as i64),
                (4, Wire::Bytes(s)) => a.s = Some(String::from_utf8_lossy(s).into_owned()),
                (5, Wire::Bytes(s)) => a.t = Some(Tensor::decode(s)?),
                (7, w) => push_floats(w, &mut a.floats, "AttributeProto.floats")?,
                (8, w) => push_ints(w, &mut a.ints, "AttributeProto.ints")?,
                _ => {}
            }
        }
        Ok(a)
    }
}

/// One node of the graph.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Node {
    /// Input tensor names (empty for an omitted optional input).
    pub inputs: Vec<String>,
    /// Output tensor names.
    pub outputs: Vec<String>,
    /// Name (may be empty).
    pub name: String,
    /// Op type, e.g. `Conv`.
    pub op: String,
    /// Domain (empty: the default ONNX domain).
    pub domain: String,
    /// Attributes.
    pub attributes: Vec<Attribute>,
}

impl Node {
    fn decode(b: &[u8]) -> R<Node> {
        let mut r = Reader::new(b, "NodeProto");
        let mut node = Node::default();
        while let Some((n, w)) = r.field()? {
            match (n, w) {
                (1, Wire::Bytes(s)) => node.inputs.push(string(s, "NodeProto.input")?),
                (2, Wire::Bytes(s)) => node.outputs.push(string(s, "NodeProto.output")?),
                (3, Wire::Bytes(s)) => node.name = string(s, "NodeProto.name")?,
                (4, Wire::Bytes(s)) => node.op = string(s, "NodeProto.op_type")?,
                (5, Wire::Bytes(s)) => node.attributes.push(Attribute::decode(s)?),
                (7, Wire::Bytes(s)) => node.domain = string(s, "NodeProto.domain")?,
                _ => {}
            }
        }
        Ok(node)
    }

    /// The attribute `name`.
    pub fn attr(&self, name: &str) -> Option<&Attribute> {
        self.attributes.iter().find(|a| a.name == name)
    }

    /// Integer attribute `name`, or `default`.
    pub fn int(&self, name: &str, default: i64) -> i64 {
        self.attr(name).and_then(|a| a.i).unwrap_or(default)
    }

    /// Integer-list attribute `name` (empty when absent).
    pub fn ints(&self, name: &str) -> Vec<i64> {
        self.attr(name).map(|a| a.ints.clone()).unwrap_or_default()
    }

    /// A name for messages: the node's own, else its first output's.
    pub fn label(&self) -> String {
        if !self.name.is_empty() {
            self.name.clone()
        } else {
            self.outputs.first().cloned().unwrap_or_else(|| "?".into())
        }
    }
}

/// One dim of a declared shape.
#[derive(Clone, Debug, PartialEq)]
pub enum Dim {
    /// A fixed size.
    Value(i64),
    /// A symbolic size (`batch`, `sequence`), resolved by the importer.
    Param(String),
    /// Neither given.
    Unknown,
}

/// A graph input, output or value_info entry.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ValueInfo {
    /// Tensor name.
    pub name: String,
    /// Element type (0 when not a tensor type).
    pub elem_type: i32,
    /// Declared dims; `None` when no shape is declared.
    pub dims: Option<Vec<Dim>>,
}

impl ValueInfo {
    fn decode(b: &[u8]) -> R<ValueInfo> {
        let mut r = Reader::new(b, "ValueInfoProto");
        let mut v = ValueInfo::default();
        while let Some((n, w)) = r.field()? {
            match (n, w) {
                (1, Wire::Bytes(s)) => v.name = string(s, "ValueInfoProto.name")?,
                (2, Wire::Bytes(type_proto)) => {
                    let mut tr = Reader::new(type_proto, "TypeProto");
                    while let Some((n, w)) = tr.field()? {
                        if let (1, Wire::Bytes(tensor)) = (n, w) {
                            let mut tt = Reader::new(tensor, "TypeProto.Tensor");
                            while let Some((n, w)) = tt.field()? {
                                match (n, w) {
                                    (1, Wire::Varint(e)) => v.elem_type = e as i32,
                                    (2, Wire::Bytes(shape)) => {
                                        v.dims = Some(decode_shape(shape)?);
                                    }
                                    _ => {}
                                }
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(v)
    }
}

fn decode_shape(b: &[u8]) -> R<Vec<Dim>> {
    let mut r = Reader::new(b, "TensorShapeProto");
    let mut dims = Vec::new();
    while let Some((n, w)) = r.field()? {
        if let (1, Wire::Bytes(d)) = (n, w) {
            let mut dr = Reader::new(d, "TensorShapeProto.Dimension");
            let mut dim = Dim::Unknown;
            while let Some((n, w)) = dr.field()? {
                match (n, w) {
                    (1, Wire::Varint(v)) => dim = Dim::Value(v as i64),
                    (2, Wire::Bytes(s)) => {
                        dim = Dim::Param(string(s, "TensorShapeProto.Dimension")?)
                    }
                    _ => {}
                }
            }
            dims.push(dim);
        }
    }
    Ok(dims)
}

/// The graph of a model.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Graph {
    /// Name.
    pub name: String,
    /// Nodes, in the file's (topological) order.
    pub nodes: Vec<Node>,
    /// Initializers (weights and constants).
    pub initializers: Vec<Tensor>,
    /// Declared inputs (initializers may be listed here too, in older files).
    pub inputs: Vec<ValueInfo>,
    /// Declared outputs.
    pub outputs: Vec<ValueInfo>,
    /// Shapes an exporter or shape inference recorded for intermediate tensors.
    pub value_info: Vec<ValueInfo>,
}

/// A model: its graph and the default-domain opset.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Model {
    /// The IR version.
    pub ir_version: i64,
    /// The default domain's opset version (0 when not declared).
    pub opset: i64,
    /// The producer (`pytorch`, ...).
    pub producer: String,
    /// The graph.
    pub graph: Graph,
}

/// Decodes a whole `ModelProto`.
pub fn decode_model(bytes: &[u8]) -> R<Model> {
    let mut r = Reader::new(bytes, "ModelProto");
    let mut model = Model::default();
    let mut has_graph = false;
    while let Some((n, w)) = r.field()? {
        match (n, w) {
            (1, Wire::Varint(v)) => model.ir_version = v as i64,
            (2, Wire::Bytes(s)) => model.producer = String::from_utf8_lossy(s).into_owned(),
            (7, Wire::Bytes(g)) => {
                model.graph = decode_graph(g)?;
                has_graph = true;
            }
            (8, Wire::Bytes(o)) => {
                let mut or = Reader::new(o, "OperatorSetIdProto");
                let (mut domain, mut version) = (String::new(), 0);
                while let Some((n, w)) = or.field()? {
                    match (n, w) {
                        (1, Wire::Bytes(s)) => domain = String::from_utf8_lossy(s).into_owned(),
                        (2, Wire::Varint(v)) => version = v as i64,
                        _ => {}
                    }
                }
                if domain.is_empty() || domain == "ai.onnx" {
                    model.opset = version;
                }
            }
            _ => {}
        }
    }
    if !has_graph || model.ir_version == 0 {
        return Err(DecodeError(
            "not an ONNX model (no `ir_version` or no graph in the ModelProto)".into(),
        ));
    }
    Ok(model)
}

fn decode_graph(b: &[u8]) -> R<Graph> {
    let mut r = Reader::new(b, "GraphProto");
    let mut g = Graph::default();
    while let Some((n, w)) = r.field()? {
        match (n, w) {
            (1, Wire::Bytes(s)) => g.nodes.push(Node::decode(s)?),
            (2, Wire::Bytes(s)) => g.name = String::from_utf8_lossy(s).into_owned(),
            (5, Wire::Bytes(s)) => g.initializers.push(Tensor::decode(s)?),
            (11, Wire::Bytes(s)) => g.inputs.push(ValueInfo::decode(s)?),
            (12, Wire::Bytes(s)) => g.outputs.push(ValueInfo::decode(s)?),
            (13, Wire::Bytes(s)) => g.value_info.push(ValueInfo::decode(s)?),
            _ => {}
        }
    }
    Ok(g)
}

/// Protobuf writing of the same messages: what tests, the fuzz harness and tools use to build
/// ONNX files without Python. A tensor's values are written as typed fields (`int64_data`,
/// `int32_data`, `float_data`, `double_data`), a tensor without values as its dims only.
#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn varint(&mut self, mut v: u64) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                self.0.push(b);
                break;
            }
            self.0.push(b | 0x80);
        }
    }

    fn key(&mut self, field: u32, wire: u64) {
        self.varint((u64::from(field) << 3) | wire);
    }

    fn int(&mut self, field: u32, v: i64) {
        self.key(field, 0);
        self.varint(v as u64);
    }

    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }

    fn packed_ints(&mut self, field: u32, values: &[i64]) {
        if values.is_empty() {
            return;
        }
        let mut body = Writer::default();
        for &v in values {
            body.varint(v as u64);
        }
        self.bytes(field, &body.0);
    }

    fn packed_bytes(&mut self, field: u32, values: impl Iterator<Item = u8>) {
        let body: Vec<u8> = values.collect();
        if !body.is_empty() {
            self.bytes(field, &body);
        }
    }
}

impl Tensor {
    /// An integer tensor with its values (int64).
    pub fn from_ints(name: &str, dims: &[i64], values: &[i64]) -> Tensor {
        Tensor {
            name: name.into(),
            dims: dims.to_vec(),
            data_type: dtype::INT64,
            ints: values.to_vec(),
            floats: values.iter().map(|&v| v as f32).collect(),
            has_values: true,
        }
    }

    /// A float tensor whose values the file leaves out (a weight, by its dims only).
    pub fn weight(name: &str, dims: &[i64]) -> Tensor {
        Tensor {
            name: name.into(),
            dims: dims.to_vec(),
            data_type: dtype::FLOAT,
            ..Tensor::default()
        }
    }

    /// The `TensorProto` bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.packed_ints(1, &self.dims);
        w.int(2, i64::from(self.data_type));
        if self.has_values {
            match self.data_type {
                dtype::FLOAT => {
                    w.packed_bytes(4, self.floats.iter().flat_map(|v| v.to_le_bytes()));
                }
                dtype::DOUBLE => w.packed_bytes(
                    10,
                    self.floats.iter().flat_map(|&v| f64::from(v).to_le_bytes()),
                ),
                dtype::INT64 => w.packed_ints(7, &self.ints),
                _ => w.packed_ints(5, &self.ints),
            }
        }
        if !self.name.is_empty() {
            w.bytes(8, self.name.as_bytes());
        }
        w.0
    }
}

impl Attribute {
    /// An integer attribute.
    pub fn int(name: &str, v: i64) -> Attribute {
        Attribute {
            name: name.into(),
            i: Some(v),
            ..Attribute::default()
        }
    }

    /// An integer-list attribute.
    pub fn ints(name: &str, v: &[i64]) -> Attribute {
        Attribute {
            name: name.into(),
            ints: v.to_vec(),
            ..Attribute::default()
        }
    }

    /// A tensor attribute.
    pub fn tensor(name: &str, t: Tensor) -> Attribute {
        Attribute {
            name: name.into(),
            t: Some(t),
            ..Attribute::default()
        }
    }

    /// The `AttributeProto` bytes (with its `type`, as ONNX readers want).
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.bytes(1, self.name.as_bytes());
        let mut kind = 0;
        if let Some(f) = self.f {
            w.key(2, 5);
            w.0.extend_from_slice(&f.to_le_bytes());
            kind = 1;
        }
        if let Some(i) = self.i {
            w.int(3, i);
            kind = 2;
        }
        if let Some(s) = &self.s {
            w.bytes(4, s.as_bytes());
            kind = 3;
        }
        if let Some(t) = &self.t {
            w.bytes(5, &t.encode());
            kind = 4;
        }
        if !self.floats.is_empty() {
            w.packed_bytes(7, self.floats.iter().flat_map(|v| v.to_le_bytes()));
            kind = 6;
        }
        if !self.ints.is_empty() {
            w.packed_ints(8, &self.ints);
            kind = 7;
        }
        w.int(20, kind);
        w.0
    }
}

impl Node {
    /// A node of the default domain, named `name`.
    pub fn new(op: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> Node {
        Node {
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: outputs.iter().map(|s| s.to_string()).collect(),
            name: name.into(),
            op: op.into(),
            ..Node::default()
        }
    }

    /// The node with one more attribute.
    pub fn with(mut self, attribute: Attribute) -> Node {
        self.attributes.push(attribute);
        self
    }

    /// The `NodeProto` bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        for i in &self.inputs {
            w.bytes(1, i.as_bytes());
        }
        for o in &self.outputs {
            w.bytes(2, o.as_bytes());
        }
        if !self.name.is_empty() {
            w.bytes(3, self.name.as_bytes());
        }
        w.bytes(4, self.op.as_bytes());
        for a in &self.attributes {
            w.bytes(5, &a.encode());
        }
        if !self.domain.is_empty() {
            w.bytes(7, self.domain.as_bytes());
        }
        w.0
    }
}

impl ValueInfo {
    /// A float tensor named `name` of dims `dims`.
    pub fn new(name: &str, dims: Vec<Dim>) -> ValueInfo {
        ValueInfo {
            name: name.into(),
            elem_type: dtype::FLOAT,
            dims: Some(dims),
        }
    }

    /// The `ValueInfoProto` bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut tensor = Writer::default();
        tensor.int(1, i64::from(self.elem_type));
        if let Some(dims) = &self.dims {
            let mut shape = Writer::default();
            for d in dims {
                let mut dim = Writer::default();
                match d {
                    Dim::Value(v) => dim.int(1, *v),
                    Dim::Param(p) => dim.bytes(2, p.as_bytes()),
                    Dim::Unknown => {}
                }
                shape.bytes(1, &dim.0);
            }
            tensor.bytes(2, &shape.0);
        }
        let mut type_proto = Writer::default();
        type_proto.bytes(1, &tensor.0);
        let mut w = Writer::default();
        w.bytes(1, self.name.as_bytes());
        w.bytes(2, &type_proto.0);
        w.0
    }
}

impl Graph {
    /// The `GraphProto` bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        for n in &self.nodes {
            w.bytes(1, &n.encode());
        }
        w.bytes(2, self.name.as_bytes());
        for t in &self.initializers {
            w.bytes(5, &t.encode());
        }
        for v in &self.inputs {
            w.bytes(11, &v.encode());
        }
        for v in &self.outputs {
            w.bytes(12, &v.encode());
        }
        for v in &self.value_info {
            w.bytes(13, &v.encode());
        }
        w.0
    }
}

impl Model {
    /// A model of `graph` at IR version 8 and default-domain opset 17.
    pub fn new(graph: Graph) -> Model {
        Model {
            ir_version: 8,
            opset: 17,
            producer: "perfcast".into(),
            graph,
        }
    }

    /// The `ModelProto` bytes: what [`decode_model`] reads back as `self`.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.int(1, self.ir_version);
        w.bytes(2, self.producer.as_bytes());
        w.bytes(7, &self.graph.encode());
        let mut opset = Writer::default();
        opset.int(2, self.opset);
        w.bytes(8, &opset.0);
        w.0
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A tiny protobuf writer for tests.
    pub(crate) struct W(pub Vec<u8>);

    impl W {
        pub fn new() -> Self {
            W(Vec::new())
        }
        fn varint(&mut self, mut v: u64) {
            loop {
                let b = (v & 0x7f) as u8;
                v >>= 7;
                if v == 0 {
                    self.0.push(b);
                    break;
                }
                self.0.push(b | 0x80);
            }
        }
        pub fn int(mut self, field: u32, v: i64) -> Self {
            self.varint(u64::from(field) << 3);
            self.varint(v as u64);
            self
        }
        pub fn bytes(mut self, field: u32, b: &[u8]) -> Self {
            self.varint((u64::from(field) << 3) | 2);
            self.varint(b.len() as u64);
            self.0.extend_from_slice(b);
            self
        }
        pub fn str(self, field: u32, s: &str) -> Self {
            self.bytes(field, s.as_bytes())
        }
        pub fn msg(self, field: u32, m: W) -> Self {
            self.bytes(field, &m.0)
        }
    }

    #[test]
    fn decodes_a_node_with_packed_and_unpacked_ints() {
        let attr = W::new().str(1, "kernel_shape").bytes(8, &[3, 3]);
        let attr2 = W::new().str(1, "pads").int(8, 1).int(8, 1);
        let node = W::new()
            .str(1, "x")
            .str(1, "w")
            .str(2, "y")
            .str(3, "conv0")
            .str(4, "Conv")
            .msg(5, attr)
            .msg(5, attr2);
        let n = Node::decode(&node.0).unwrap();
        assert_eq!(n.inputs, ["x", "w"]);
        assert_eq!(n.op, "Conv");
        assert_eq!(n.ints("kernel_shape"), [3, 3]);
        assert_eq!(n.ints("pads"), [1, 1]);
        assert_eq!(n.int("group", 1), 1);
    }

    #[test]
    fn decodes_small_int64_raw_data_and_skips_large_weights() {
        let raw: Vec<u8> = [2i64, -1].iter().flat_map(|v| v.to_le_bytes()).collect();
        let t = W::new().int(1, 2).int(2, 7).str(8, "shape").bytes(9, &raw);
        let t = Tensor::decode(&t.0).unwrap();
        assert_eq!(t.ints, [2, -1]);
        assert!(t.has_values);
        let big = W::new().int(1, 5000).int(2, 1).bytes(9, &vec![0u8; 20000]);
        let t = Tensor::decode(&big.0).unwrap();
        assert_eq!(t.dims, [5000]);
        assert!(!t.has_values);
    }

    #[test]
    fn truncated_input_is_an_error_with_an_offset() {
        let node = W::new().str(4, "Conv");
        let mut bytes = node.0.clone();
        bytes.truncate(3);
        let err = Node::decode(&bytes).unwrap_err();
        assert!(err.0.starts_with("NodeProto at byte"), "{}", err.0);
        let err = decode_model(b"hello world, not protobuf").unwrap_err();
        assert!(!err.0.is_empty());
    }

    #[test]
    fn a_written_model_reads_back_as_itself() {
        let graph = Graph {
            name: "g".into(),
            nodes: vec![
                Node::new("Conv", "conv0", &["x", "w"], &["y"])
                    .with(Attribute::ints("pads", &[1, 1, 1, 1]))
                    .with(Attribute::int("group", -3)),
                Node::new("Constant", "", &[], &["c"]).with(Attribute::tensor(
                    "value",
                    Tensor::from_ints("", &[2], &[i64::MIN, i64::MAX]),
                )),
            ],
            initializers: vec![
                Tensor::weight("w", &[8, 3, 3, 3]),
                Tensor::from_ints("shape", &[2], &[1, -1]),
            ],
            inputs: vec![ValueInfo::new(
                "x",
                vec![
                    Dim::Param("batch".into()),
                    Dim::Value(3),
                    Dim::Unknown,
                    Dim::Value(8),
                ],
            )],
            outputs: vec![ValueInfo::new("y", vec![])],
            value_info: vec![],
        };
        let model = Model::new(graph);
        assert_eq!(decode_model(&model.encode()).unwrap(), model);
    }

    #[test]
    fn a_tensor_too_large_to_hold_is_refused_before_its_values_are_read() {
        let t = W::new()
            .int(1, 1 << 32)
            .int(1, 1 << 32)
            .int(2, 1)
            .str(8, "huge");
        let err = Tensor::decode(&t.0).unwrap_err();
        assert_eq!(
            err.0,
            "TensorProto `huge`: dims [4294967296, 4294967296] hold more than 1099511627776 \
             elements"
        );
        let t = W::new().int(1, 0).int(1, 1 << 62).str(8, "wide");
        assert!(
            Tensor::decode(&t.0)
                .unwrap_err()
                .0
                .contains("[0, 4611686018427387904]")
        );
    }
}
