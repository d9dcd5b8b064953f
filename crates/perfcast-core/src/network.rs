//! Whole networks: an ordered list of named layers, each a [`ModuleSpec`] that reads the output
//! of the network input or an earlier layer, with shapes checked layer by layer.
//!
//! Shapes are per sample, as in [`ModuleSpec`]: the batch size belongs to the [`crate::Context`].
//! A network's latency is predicted per layer ([`Network::modules`]) and composed.
//!
//! # JSON format
//!
//! ```json
//! {
//!   "name": "downsample-block",
//!   "input": [64, 56, 56],
//!   "layers": [
//!     {"name": "conv1", "spec": {"kind": "conv2d", "in_channels": 64, "out_channels": 128,
//!                                "input_hw": 56, "kernel": 3, "stride": 2, "padding": 1,
//!                                "bias": false}},
//!     {"name": "bn1", "spec": {"kind": "batchnorm2d", "channels": 128, "input_hw": 28}},
//!     {"name": "down", "input_from": "input",
//!      "spec": {"kind": "conv2d", "in_channels": 64, "out_channels": 128, "input_hw": 56,
//!               "kernel": 1, "stride": 2, "bias": false}},
//!     {"name": "add", "input_from": "bn1", "second_from": "down",
//!      "spec": {"kind": "add", "shape": [128, 28, 28]}},
//!     {"name": "fc", "reshape": true,
//!      "spec": {"kind": "linear", "in_features": 100352, "out_features": 10}}
//!   ]
//! }
//! ```
//!
//! - `name`: the network's name; `input`: its per-sample input shape, e.g. `[3, 224, 224]` for
//!   an image or `[tokens, features]` for a sequence.
//! - `layers`, in execution order, each with:
//!   - `name`: unique within the network; `input` is reserved for the network input.
//!   - `spec`: the layer's [`ModuleSpec`], in its own JSON form (tagged by `kind`).
//!   - `input_from` (optional): the layer whose output this layer reads, or `input` for the
//!     network input. Default: the previous layer (the network input for the first layer).
//!     Only the network input and *earlier* layers can be named, so the list is a valid
//!     execution order.
//!   - `second_from` (required for `add`, `mul` and `matmul`, refused for other kinds): the
//!     layer (or `input`) whose output is the second operand. A residual connection is an `add`
//!     whose `second_from` names the block's input (or the shortcut branch's last layer).
//!   - `detached` (optional, default false): the layer reads tensors the network does not
//!     model (constants, a second model input, an imported op with no kind); its operands are
//!     its spec's own shapes and `input_from` / `second_from` are ignored.
//!   - `parts_from` (optional, concat only): the layers (or `input`) whose outputs follow the
//!     one `input_from` reads, in order along the first per-sample axis; together the parts
//!     hold at most the concat's elements. Parts left unnamed (a learned token, a constant) are
//!     not modelled, but the concat's cost still counts them.
//!   - `reshape` (optional, default false): the layer reads its operand(s) reshaped, i.e.
//!     flattened, split into heads or transposed. Such views are free and not modelled as layers;
//!     only the element count must match. This is how a flatten before a fully connected layer
//!     (`[512, 7, 7]` read by a linear with `in_features` 25088) and the head split of attention
//!     (`[tokens, 768]` read by a matmul as `[12, tokens, 64]`) are written.
//!
//! # Shape rules
//!
//! Without `reshape`, the shape a layer expects ([`ModuleSpec::input_shape`], and for the second
//! operand `[heads, k, n]` of a matmul or the first operand's shape for add and mul) must equal
//! the shape it reads, up to leading dims of 1: a linear's `[1, 4096]` output feeds a relu of
//! shape `[1, 1, 4096]`, and a `[128, 768]` output feeds a gelu of shape `[1, 128, 768]`, since
//! both are the same contiguous tensor. Anything else (including a flatten) needs `reshape`: it
//! is never inferred from matching element counts alone, so a wrong `in_features` is caught.
//!
//! Concat and pad read a part of the tensor they write, and a slice a part of a larger one: a
//! concat or pad layer may read at most its shape's element count, a slice at least (the
//! other parts of a concat are named by `parts_from`, or else counted by its cost alone).
//!
//! Errors name the layer by its index in `layers` (from 0) and its name, with the expected and
//! the actual shape, e.g. ``layer 3 `conv2`: expects input [64, 56, 56], gets [128, 28, 28]
//! from layer 2 `pool1` ``.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::spec::{Dims, ModuleSpec, Reads};

/// The reserved layer name that refers to the network input in `input_from` and `second_from`.
pub const NETWORK_INPUT: &str = "input";

/// A whole network: a per-sample input shape and layers in execution order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Network {
    /// The network's name.
    pub name: String,
    /// Per-sample input shape, e.g. `[3, 224, 224]` or `[tokens, features]`.
    pub input: Vec<usize>,
    /// Layers in execution order.
    pub layers: Vec<Layer>,
}

/// One named layer of a [`Network`] and where its operands come from.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Layer {
    /// Unique name within the network (not `input`).
    pub name: String,
    /// The layer (or [`NETWORK_INPUT`]) whose output this layer reads; default the previous one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_from: Option<String>,
    /// The second operand of an add, mul or matmul; required for those kinds, refused otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub second_from: Option<String>,
    /// A concat's further parts after the one it reads: layers (or [`NETWORK_INPUT`]) whose
    /// outputs follow that one along the first per-sample axis. The parts may hold fewer
    /// elements than the concat (the rest, such as a learned token, is not modelled; its cost
    /// still counts it), never more. Refused for other kinds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts_from: Vec<String>,
    /// Whether the operands are read reshaped (flattened, split into heads, transposed); only
    /// the element count must then match. Default false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub reshape: bool,
    /// Whether the layer reads tensors the network does not model (a constant, a second model
    /// input, the output of an imported op with no kind): its operand shapes are then its
    /// spec's own, checked by the spec alone, and `input_from` / `second_from` are not used.
    /// Default false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub detached: bool,
    /// What the layer computes, with its per-sample input shape.
    pub spec: ModuleSpec,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The per-sample shapes of one checked layer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerShapes {
    /// The (first) operand's shape as the layer's spec reads it.
    pub input: Vec<usize>,
    /// The second operand's shape, for add, mul and matmul.
    pub second: Option<Vec<usize>>,
    /// The output shape.
    pub output: Vec<usize>,
}

impl Layer {
    /// A layer reading the previous layer's output.
    pub fn new(name: impl Into<String>, spec: ModuleSpec) -> Self {
        Layer {
            name: name.into(),
            input_from: None,
            second_from: None,
            parts_from: Vec::new(),
            reshape: false,
            detached: false,
            spec,
        }
    }

    /// A concat that also joins the outputs of the layers `names` after the one it reads.
    pub fn parts<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.parts_from = names.into_iter().map(Into::into).collect();
        self
    }

    /// Reads tensors the network does not model (see [`Layer::detached`]).
    pub fn detach(mut self) -> Self {
        self.detached = true;
        self
    }

    /// Reads the output of the layer `name` (or [`NETWORK_INPUT`]) instead of the previous one.
    pub fn reads(mut self, name: impl Into<String>) -> Self {
        self.input_from = Some(name.into());
        self
    }

    /// Takes its second operand (add, mul, matmul) from the layer `name` (or [`NETWORK_INPUT`]).
    pub fn second(mut self, name: impl Into<String>) -> Self {
        self.second_from = Some(name.into());
        self
    }

    /// Reads its operands reshaped (flatten, head split, transpose): only element counts match.
    pub fn reshaped(mut self) -> Self {
        self.reshape = true;
        self
    }
}

/// The shape of the second operand a two-operand spec expects; `None` for one-operand kinds.
fn second_operand_shape(spec: &ModuleSpec) -> Option<Dims> {
    match spec {
        ModuleSpec::Add(e) | ModuleSpec::Mul(e) | ModuleSpec::Div(e) | ModuleSpec::Pow(e) => {
            Some(Dims::new(e.shape))
        }
        ModuleSpec::Matmul(m) => Some(Dims::new([m.heads, m.k, m.n])),
        _ => None,
    }
}

/// A shape without its leading dims of 1 (the same contiguous tensor at any such rank).
fn squeeze_leading(shape: &[usize]) -> &[usize] {
    let first = shape.iter().position(|&d| d != 1).unwrap_or(shape.len());
    &shape[first..]
}

fn elements(shape: &[usize]) -> u128 {
    shape
        .iter()
        .fold(1u128, |acc, &d| acc.saturating_mul(d as u128))
}

/// Whether a layer expecting `expected` can read a tensor of shape `got`. Concat and pad read
/// one part of what they write, a slice part of a larger tensor ([`crate::ModuleKind::reads`]): for
/// them only the element counts are compared.
fn fits(expected: &[usize], got: &[usize], reshape: bool, reads: Reads) -> bool {
    match reads {
        Reads::AtMost => return elements(got) <= elements(expected),
        Reads::AtLeast => return elements(got) >= elements(expected),
        Reads::Exactly => {}
    }
    if reshape {
        elements(expected) == elements(got)
    } else {
        squeeze_leading(expected) == squeeze_leading(got)
    }
}

/// Where an operand comes from.
#[derive(Clone, Copy)]
enum Source {
    Input,
    Layer(usize),
}

impl Network {
    /// Walks the layers in order, checking every spec and that each layer's expected operand
    /// shapes match the shapes it reads; returns every layer's shapes.
    ///
    /// Errors name the layer (index from 0 and name) with the expected and actual shapes.
    pub fn check(&self) -> Result<Vec<LayerShapes>> {
        let mut shapes = Vec::with_capacity(self.layers.len());
        self.walk(|input, second, output| {
            shapes.push(LayerShapes {
                input: input.to_vec(),
                second: second.map(|s| s.to_vec()),
                output: output.to_vec(),
            });
        })?;
        Ok(shapes)
    }

    /// [`Network::check`] without the shapes: the same errors, and no vector per layer
    /// (what a predictor checks a network with before every query).
    pub fn validate(&self) -> Result<()> {
        self.walk(|_, _, _| {})
    }

    /// Checks the layers in order (see [`Network::check`]), handing each one's input, second
    /// operand and output shapes to `each`.
    fn walk(&self, mut each: impl FnMut(Dims, Option<Dims>, Dims)) -> Result<()> {
        let network_error = |message: String| Error::InvalidNetwork {
            network: self.name.clone(),
            message,
        };
        if self.input.is_empty() || self.input.contains(&0) {
            return Err(network_error(format!(
                "`input` shape {:?} must have at least one dim, each at least 1",
                self.input
            )));
        }
        if self.layers.is_empty() {
            return Err(network_error("it has no layers".to_string()));
        }
        let mut index: HashMap<&str, usize> = HashMap::with_capacity(self.layers.len());
        // Every checked layer's output shape, for the layers that read it.
        let mut outputs: Vec<Dims> = Vec::with_capacity(self.layers.len());
        for (i, layer) in self.layers.iter().enumerate() {
            let layer_error = |message: String| Error::InvalidLayer {
                network: self.name.clone(),
                index: i,
                layer: layer.name.clone(),
                message,
            };
            if layer.name.is_empty() {
                return Err(layer_error("the layer name is empty".to_string()));
            }
            if layer.name == NETWORK_INPUT {
                return Err(layer_error(format!(
                    "the name `{NETWORK_INPUT}` is reserved for the network input"
                )));
            }
            if let Some(&j) = index.get(layer.name.as_str()) {
                return Err(layer_error(format!(
                    "duplicate layer name, also used by layer {j}"
                )));
            }
            let output = layer
                .spec
                .output_dims()
                .map_err(|e| layer_error(e.to_string()))?;

            let resolve = |field: &str, name: &str| -> Result<Source> {
                if name == NETWORK_INPUT {
                    return Ok(Source::Input);
                }
                if let Some(&j) = index.get(name) {
                    return Ok(Source::Layer(j));
                }
                let later = self.layers[i..].iter().position(|l| l.name == name);
                Err(layer_error(match later {
                    Some(k) => format!(
                        "`{field}` names `{name}`, layer {}, which is not an earlier layer",
                        i + k
                    ),
                    None => format!("`{field}` names `{name}`, which is no layer of the network"),
                }))
            };
            let shape_of = |source: Source| -> &[usize] {
                match source {
                    Source::Input => &self.input,
                    Source::Layer(j) => &outputs[j],
                }
            };
            let describe = |source: Source| -> String {
                match source {
                    Source::Input => "the network input".to_string(),
                    Source::Layer(j) => format!("layer {j} `{}`", self.layers[j].name),
                }
            };
            let mismatch = |what: &str, expected: &[usize], got: &[usize], source: Source| {
                let (n_expected, n_got) = (elements(expected), elements(got));
                let message = if layer.reshape {
                    format!(
                        "expects {what} {expected:?} ({n_expected} elements), gets {got:?} \
                         ({n_got} elements) from {}; `reshape` keeps the element count",
                        describe(source)
                    )
                } else if n_expected == n_got {
                    format!(
                        "expects {what} {expected:?}, gets {got:?} from {}; set `reshape` if \
                         the layer reads it flattened or permuted",
                        describe(source)
                    )
                } else {
                    format!(
                        "expects {what} {expected:?}, gets {got:?} from {}",
                        describe(source)
                    )
                };
                layer_error(message)
            };

            if layer.detached {
                index.insert(&layer.name, i);
                each(
                    layer.spec.input_dims(),
                    second_operand_shape(&layer.spec),
                    output,
                );
                outputs.push(output);
                continue;
            }
            let source = match &layer.input_from {
                Some(name) => resolve("input_from", name)?,
                None if i == 0 => Source::Input,
                None => Source::Layer(i - 1),
            };
            let expected = layer.spec.input_dims();
            let got = shape_of(source);
            if !fits(&expected, got, layer.reshape, layer.spec.kind().reads()) {
                return Err(mismatch("input", &expected, got, source));
            }

            let kind = layer.spec.kind();
            if !layer.parts_from.is_empty() {
                if kind != crate::ModuleKind::Concat {
                    return Err(layer_error(format!(
                        "`parts_from` is only for concat layers, not {kind}"
                    )));
                }
                let mut total = elements(got);
                for name in &layer.parts_from {
                    total += elements(shape_of(resolve("parts_from", name)?));
                }
                if total > elements(&output) {
                    return Err(layer_error(format!(
                        "its parts hold {total} elements together, more than its shape {:?} \
                         holds ({})",
                        &output[..],
                        elements(&output)
                    )));
                }
            }
            let second = match (second_operand_shape(&layer.spec), &layer.second_from) {
                (Some(expected), Some(name)) => {
                    let source = resolve("second_from", name)?;
                    let got = shape_of(source);
                    if !fits(&expected, got, layer.reshape, Reads::Exactly) {
                        return Err(mismatch("second operand", &expected, got, source));
                    }
                    Some(expected)
                }
                (Some(_), None) => {
                    return Err(layer_error(format!(
                        "a layer of kind {kind} needs `second_from`, the layer (or `{NETWORK_INPUT}`) \
                         whose output is its second operand"
                    )));
                }
                (None, Some(name)) => {
                    return Err(layer_error(format!(
                        "`second_from` `{name}` is only for add, mul and matmul layers, not {kind}"
                    )));
                }
                (None, None) => None,
            };

            index.insert(&layer.name, i);
            each(expected, second, output);
            outputs.push(output);
        }
        Ok(())
    }

    /// Per layer, whether its first and second operand carry a gradient in a training step
    /// (`[first, second]`; `second` is false for a layer without one).
    ///
    /// The network input is data: no gradient. A layer's output carries one when the layer has
    /// parameters or reads an operand that carries one; a detached layer's operands are
    /// tensors the network does not model, made trainable leaves as the network timer makes
    /// them. Where no operand carries a gradient, the backward pass computes none for it: a
    /// linear layer on the network input runs dW but no dX, and a parameter-free layer there
    /// runs no backward at all. Modules timed alone always compute the input's gradient, so a
    /// predictor needs this to charge each layer only what the network's backward runs.
    /// Names that are no earlier layer count as carrying a gradient (nothing is left out of
    /// an unchecked network).
    pub fn operand_gradients(&self) -> Vec<[bool; 2]> {
        let mut carries: HashMap<&str, bool> = HashMap::with_capacity(self.layers.len());
        let mut out = Vec::with_capacity(self.layers.len());
        let mut previous: Option<&str> = None;
        for layer in &self.layers {
            let of =
                |name: &str| name != NETWORK_INPUT && carries.get(name).copied().unwrap_or(true);
            let grads = if layer.detached {
                [true, second_operand_shape(&layer.spec).is_some()]
            } else {
                let first = match (&layer.input_from, previous) {
                    (Some(name), _) => of(name),
                    (None, Some(name)) => of(name),
                    (None, None) => false,
                };
                [first, layer.second_from.as_deref().is_some_and(of)]
            };
            let parts = !layer.detached && layer.parts_from.iter().any(|n| of(n));
            let has_params = crate::features::derive(&layer.spec, 1).params > 0.0;
            carries.insert(&layer.name, has_params || grads[0] || grads[1] || parts);
            previous = Some(&layer.name);
            out.push(grads);
        }
        out
    }

    /// The per-sample output shape of the last layer, after checking the whole network.
    pub fn output_shape(&self) -> Result<Vec<usize>> {
        let mut shapes = self.check()?;
        Ok(shapes.pop().map(|s| s.output).unwrap_or_default())
    }

    /// Every layer's name and spec, in execution order: what a predictor sums over.
    pub fn modules(&self) -> Vec<(&str, &ModuleSpec)> {
        self.layers
            .iter()
            .map(|l| (l.name.as_str(), &l.spec))
            .collect()
    }

    /// Parses a network from JSON (see the [module docs](self)) and checks it.
    pub fn from_json(text: &str) -> Result<Self> {
        let network: Network = serde_json::from_str(text).map_err(Error::NetworkJson)?;
        network.check()?;
        Ok(network)
    }

    /// Reads, parses and checks a network JSON file; errors name the file.
    pub fn from_json_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let file_error = |message: String| Error::NetworkFile {
            path: path.to_path_buf(),
            message,
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| file_error(format!("cannot read it: {e}")))?;
        Self::from_json(&text).map_err(|e| file_error(e.to_string()))
    }

    /// The network as pretty-printed JSON, in the format [`Network::from_json`] reads.
    pub fn to_json_pretty(&self) -> Result<String> {
        serde_json::to_string_pretty(self).map_err(Error::NetworkJson)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{BatchNorm2d, Conv2d, Elementwise, Linear, Pool2d};

    fn examples_dir() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/networks")
    }

    fn conv(cin: usize, cout: usize, hw: usize, k: usize, s: usize, p: usize) -> ModuleSpec {
        ModuleSpec::Conv2d(Conv2d {
            in_channels: cin,
            out_channels: cout,
            input_hw: [hw, hw],
            kernel: [k, k],
            stride: [s, s],
            padding: [p, p],
            dilation: [1, 1],
            groups: 1,
            bias: false,
        })
    }

    fn relu(shape: [usize; 3]) -> ModuleSpec {
        ModuleSpec::Relu(Elementwise { shape })
    }

    /// conv1 -> relu1 -> pool1 -> conv2: the shape mismatch of the module docs when `bad`.
    fn tiny(bad: bool) -> Network {
        let conv2_in = if bad { 128 } else { 64 };
        Network {
            name: "tiny".into(),
            input: vec![3, 112, 112],
            layers: vec![
                Layer::new("conv1", conv(3, 64, 112, 3, 1, 1)),
                Layer::new("relu1", relu([64, 112, 112])),
                Layer::new(
                    "pool1",
                    ModuleSpec::MaxPool2d(Pool2d {
                        channels: 64,
                        input_hw: [112, 112],
                        kernel: [2, 2],
                        stride: None,
                        padding: [0, 0],
                    }),
                ),
                Layer::new("conv2", conv(conv2_in, 64, 56, 3, 1, 1)),
            ],
        }
    }

    #[test]
    fn shapes_are_inferred_layer_by_layer() {
        let shapes = tiny(false).check().unwrap();
        assert_eq!(shapes.len(), 4);
        assert_eq!(shapes[0].input, vec![3, 112, 112]);
        assert_eq!(shapes[2].output, vec![64, 56, 56]);
        assert_eq!(shapes[3].output, vec![64, 56, 56]);
        assert_eq!(shapes[3].second, None);
        assert_eq!(tiny(false).output_shape().unwrap(), vec![64, 56, 56]);
    }

    #[test]
    fn mismatch_names_layer_expected_and_actual_shapes() {
        let err = tiny(true).check().unwrap_err().to_string();
        assert_eq!(
            err,
            "network `tiny`: layer 3 `conv2`: expects input [128, 56, 56], gets [64, 56, 56] \
             from layer 2 `pool1`"
        );
    }

    #[test]
    fn leading_ones_match_but_flatten_needs_reshape() {
        let fc = |reshape: bool| {
            let layer = Layer::new(
                "fc",
                ModuleSpec::Linear(Linear {
                    tokens: 1,
                    in_features: 64 * 4 * 4,
                    out_features: 10,
                    bias: true,
                }),
            );
            if reshape { layer.reshaped() } else { layer }
        };
        let net = |reshape: bool| Network {
            name: "flat".into(),
            input: vec![64, 4, 4],
            layers: vec![
                fc(reshape),
                // [1, 10] from the linear feeds a relu of shape [1, 1, 10].
                Layer::new("relu", relu([1, 1, 10])),
            ],
        };
        assert_eq!(net(true).output_shape().unwrap(), vec![1, 1, 10]);
        let err = net(false).check().unwrap_err().to_string();
        assert!(
            err.contains("layer 0 `fc`: expects input [1, 1024], gets [64, 4, 4] from the network input; set `reshape`"),
            "{err}"
        );
        // reshape still checks the element count.
        let mut wrong = net(true);
        if let ModuleSpec::Linear(l) = &mut wrong.layers[0].spec {
            l.in_features = 1000;
        }
        let err = wrong.check().unwrap_err().to_string();
        assert!(
            err.contains("(1000 elements), gets [64, 4, 4] (1024 elements)"),
            "{err}"
        );
    }

    #[test]
    fn gradients_start_at_the_first_layer_with_parameters() {
        let e = Elementwise { shape: [8, 6, 6] };
        let net = Network {
            name: "grads".into(),
            input: vec![8, 6, 6],
            layers: vec![
                // Parameter-free on the input: nothing to differentiate, before or after.
                Layer::new("relu0", relu([8, 6, 6])),
                Layer::new("add0", ModuleSpec::Add(e.clone())).second(NETWORK_INPUT),
                Layer::new("conv", conv(8, 8, 6, 3, 1, 1)),
                // From here on the conv's weights need what flows back through these.
                Layer::new("relu1", relu([8, 6, 6])),
                Layer::new("mul", ModuleSpec::Mul(e.clone()))
                    .reads("relu0")
                    .second("relu1"),
                // Detached operands are trainable leaves, as the network timer makes them.
                Layer::new("const", ModuleSpec::Add(e)).detach(),
            ],
        };
        net.check().unwrap();
        assert_eq!(
            net.operand_gradients(),
            vec![
                [false, false],
                [false, false],
                [false, false],
                [true, false],
                [false, true],
                [true, true],
            ]
        );

        // BERT's block: Q, K and V read the input; everything after reads a projection.
        let block = crate::zoo::build("transformer", Some(16)).unwrap();
        let grads = block.operand_gradients();
        for (layer, g) in block.layers.iter().zip(&grads) {
            let on_input = layer.name.starts_with("attn.") && layer.name.len() == 6;
            assert_eq!(g[0], !on_input, "{}", layer.name);
        }
        // The residual add's second operand is the input.
        let add = block
            .layers
            .iter()
            .position(|l| l.name == "attn.add")
            .unwrap();
        assert_eq!(grads[add], [true, false]);
    }

    #[test]
    fn residual_add_reads_two_operands() {
        let bn = ModuleSpec::BatchNorm2d(BatchNorm2d {
            channels: 8,
            input_hw: [6, 6],
        });
        let add = ModuleSpec::Add(Elementwise { shape: [8, 6, 6] });
        let net = Network {
            name: "res".into(),
            input: vec![8, 6, 6],
            layers: vec![
                Layer::new("conv", conv(8, 8, 6, 3, 1, 1)),
                Layer::new("bn", bn),
                Layer::new("add", add.clone()).second(NETWORK_INPUT),
            ],
        };
        let shapes = net.check().unwrap();
        assert_eq!(shapes[2].second, Some(vec![8, 6, 6]));

        let mut missing = net.clone();
        missing.layers[2].second_from = None;
        let err = missing.check().unwrap_err().to_string();
        assert!(
            err.contains("layer 2 `add`: a layer of kind add needs `second_from`"),
            "{err}"
        );

        let mut forward = net.clone();
        forward.layers[1].input_from = Some("add".into());
        let err = forward.check().unwrap_err().to_string();
        assert!(
            err.contains("`add`, layer 2, which is not an earlier layer"),
            "{err}"
        );

        let mut unknown = net.clone();
        unknown.layers[2].second_from = Some("shortcut".into());
        let err = unknown.check().unwrap_err().to_string();
        assert!(err.contains("`shortcut`, which is no layer"), "{err}");

        let mut misplaced = net.clone();
        misplaced.layers[1].second_from = Some("conv".into());
        let err = misplaced.check().unwrap_err().to_string();
        assert!(
            err.contains("only for add, mul and matmul layers, not batchnorm2d"),
            "{err}"
        );

        // conv reads the input (no gradient), bn reads conv (parameters: one), the add's
        // second operand is the input again.
        assert_eq!(
            net.operand_gradients(),
            vec![[false, false], [true, false], [true, false]]
        );

        let mut duplicate = net;
        duplicate.layers[2].name = "conv".into();
        let err = duplicate.check().unwrap_err().to_string();
        assert!(
            err.contains("layer 2 `conv`: duplicate layer name, also used by layer 0"),
            "{err}"
        );
    }

    #[test]
    fn invalid_spec_is_reported_with_its_layer() {
        let mut net = tiny(false);
        net.layers[3].spec = conv(64, 64, 56, 99, 1, 1);
        let err = net.check().unwrap_err().to_string();
        assert!(
            err.starts_with(
                "network `tiny`: layer 3 `conv2`: invalid conv2d spec: kernel height 99"
            ),
            "{err}"
        );
        let empty = Network {
            name: "empty".into(),
            input: vec![3, 0, 4],
            layers: vec![],
        };
        let err = empty.check().unwrap_err().to_string();
        assert!(err.contains("`input` shape [3, 0, 4]"), "{err}");
    }

    #[test]
    fn modules_lists_names_and_specs_in_order() {
        let net = tiny(false);
        let modules = net.modules();
        let names: Vec<&str> = modules.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["conv1", "relu1", "pool1", "conv2"]);
        assert_eq!(modules[1].1, &relu([64, 112, 112]));
    }

    #[test]
    fn example_files_load_and_check() {
        let tiny = Network::from_json_file(examples_dir().join("tiny-cnn.json")).unwrap();
        assert_eq!(tiny.name, "tiny-cnn");
        assert_eq!(tiny.output_shape().unwrap(), vec![1, 10]);

        let block = Network::from_json_file(examples_dir().join("residual-block.json")).unwrap();
        assert_eq!(block.name, "residual-block");
        let shapes = block.check().unwrap();
        assert_eq!(shapes.last().unwrap().output, vec![128, 28, 28]);
        // The shortcut branch reads the network input; the add joins it to the main branch.
        let shortcut = &block.layers[5];
        assert_eq!(shortcut.input_from.as_deref(), Some(NETWORK_INPUT));
        assert_eq!(shapes[5].input, vec![64, 56, 56]);
        assert_eq!(shapes[7].second, Some(vec![128, 28, 28]));

        // Round trip: what we write, we read back identical.
        for net in [tiny, block] {
            let json = net.to_json_pretty().unwrap();
            assert_eq!(Network::from_json(&json).unwrap(), net);
        }
    }

    #[test]
    fn json_with_shape_mismatch_is_rejected_naming_layer_and_file() {
        let json = r#"{
            "name": "broken",
            "input": [3, 32, 32],
            "layers": [
                {"name": "conv1", "spec": {"kind": "conv2d", "in_channels": 3, "out_channels": 16,
                                           "input_hw": 32, "kernel": 3, "padding": 1}},
                {"name": "pool1", "spec": {"kind": "maxpool2d", "channels": 16, "input_hw": 32,
                                           "kernel": 2}},
                {"name": "conv2", "spec": {"kind": "conv2d", "in_channels": 16, "out_channels": 32,
                                           "input_hw": 32, "kernel": 3, "padding": 1}}
            ]
        }"#;
        let err = Network::from_json(json).unwrap_err().to_string();
        assert_eq!(
            err,
            "network `broken`: layer 2 `conv2`: expects input [16, 32, 32], gets [16, 16, 16] \
             from layer 1 `pool1`"
        );

        let dir = std::env::temp_dir().join(format!("perfcast-network-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("broken.json");
        std::fs::write(&path, json).unwrap();
        let err = Network::from_json_file(&path).unwrap_err().to_string();
        assert!(err.starts_with("network file `"), "{err}");
        assert!(
            err.contains("broken.json`: network `broken`: layer 2 `conv2`"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();

        let err = Network::from_json_file(dir.join("missing.json"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("missing.json`: cannot read it"), "{err}");
    }

    #[test]
    fn concat_and_pad_read_a_part_and_slice_a_larger_tensor() {
        use crate::spec::Elementwise;
        let e = |shape| Elementwise { shape };
        let net = |second: [usize; 3]| Network {
            name: "parts".into(),
            input: vec![2, 4, 8],
            layers: vec![
                Layer::new("cat", ModuleSpec::Concat(e([2, 4, 16]))),
                Layer::new("part", ModuleSpec::Slice(e(second))),
                Layer::new("pad", ModuleSpec::Pad(e([2, 6, 10]))).reads(NETWORK_INPUT),
            ],
        };
        assert_eq!(net([2, 4, 4]).output_shape().unwrap(), vec![2, 6, 10]);
        // A slice cannot be larger than what it reads.
        let err = net([2, 4, 32]).check().unwrap_err().to_string();
        assert!(
            err.contains("layer 1 `part`: expects input [2, 4, 32]"),
            "{err}"
        );
        // A concat cannot write fewer elements than one of its parts.
        let mut small = net([2, 4, 4]);
        small.layers[0].spec = ModuleSpec::Concat(e([2, 4, 4]));
        assert!(small.check().is_err());
    }

    #[test]
    fn a_concat_names_its_parts_and_they_fit_in_it() {
        use crate::spec::Elementwise;
        let e = |shape| Elementwise { shape };
        let net =
            |cat: [usize; 3], parts: &[&str], kind_of_cat: fn(Elementwise) -> ModuleSpec| Network {
                name: "fire".into(),
                input: vec![4, 8, 8],
                layers: vec![
                    Layer::new("a", ModuleSpec::Relu(e([4, 8, 8]))),
                    Layer::new("b", ModuleSpec::Relu(e([4, 8, 8]))).reads(NETWORK_INPUT),
                    Layer::new("cat", kind_of_cat(e(cat)))
                        .reads("a")
                        .parts(parts.iter().copied()),
                ],
            };
        let ok = net([12, 8, 8], &["b", NETWORK_INPUT], ModuleSpec::Concat);
        assert_eq!(ok.output_shape().unwrap(), vec![12, 8, 8]);
        let json = ok.to_json_pretty().unwrap();
        assert!(json.contains("\"parts_from\""), "{json}");
        assert_eq!(Network::from_json(&json).unwrap(), ok);
        // Parts may leave a rest unnamed, never hold more; a part must be an earlier layer;
        // only concats have parts.
        assert!(net([16, 8, 8], &["b"], ModuleSpec::Concat).check().is_ok());
        let err = net([8, 8, 8], &["b", NETWORK_INPUT], ModuleSpec::Concat)
            .check()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "its parts hold 768 elements together, more than its shape [8, 8, 8] holds (512)"
            ),
            "{err}"
        );
        let err = net([8, 8, 8], &["c"], ModuleSpec::Concat)
            .check()
            .unwrap_err()
            .to_string();
        assert!(err.contains("`parts_from` names `c`"), "{err}");
        let err = net([4, 8, 8], &["b"], ModuleSpec::Relu)
            .check()
            .unwrap_err()
            .to_string();
        assert!(err.contains("only for concat layers, not relu"), "{err}");
        // A part without a gradient source keeps none; one with it passes it on.
        let grads = ok.operand_gradients();
        assert_eq!(grads[2], [false, false]);
    }

    #[test]
    fn json_rejects_unknown_fields() {
        let json = r#"{"name": "x", "input": [4], "layers": [
            {"name": "fc", "from": "input",
             "spec": {"kind": "linear", "in_features": 4, "out_features": 2}}]}"#;
        let err = Network::from_json(json).unwrap_err().to_string();
        assert!(
            err.starts_with("invalid network JSON: unknown field `from`"),
            "{err}"
        );
    }
}
