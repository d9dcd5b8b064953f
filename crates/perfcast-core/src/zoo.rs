//! Built-in networks, layer by layer as torchvision (or BERT, for the transformer) runs them.
//!
//! Every network is a [`Network`] that passes [`Network::check`]. Conventions:
//!
//! - Dropout is left out (the identity at inference) and so are flatten, head splits and
//!   transposes, which are views: the layer that reads them has `reshape` set.
//! - torchvision's adaptive average pool before the classifier of AlexNet and VGG is the identity
//!   at the default resolution and is left out; at other resolutions the first linear's
//!   `in_features` follows the feature map (torchvision would resample it to 6x6 or 7x7).
//!   ResNet's and MobileNetV2's global pool is an `avgpool2d` over the whole feature map.
//! - Convolutions followed by batch norm have no bias, as in torchvision.
//! - MobileNetV2's ReLU6 is a `relu`, the nearest kind perfcast measures.
//! - The transformer is one BERT-base encoder block (post-norm): separate Q, K and V projections,
//!   `QK^T` and `attention x V` as per-head matmuls, softmax, output projection, residual add,
//!   layer norm, MLP 768 -> 3072 -> 768 with GELU, residual add, layer norm. The `1/sqrt(d)`
//!   scaling is left out (frameworks fold it into Q or the softmax).
//! - SqueezeNet 1.1's fire modules and DenseNet-121's dense layers join branches by channel
//!   concatenation. A concat reads its first part and names the others (`parts_from`); its shape
//!   is the whole output, so its cost counts every part. DenseNet's `torch.cat` of all earlier
//!   features before each dense layer is a chain: each concat reads the previous one and the
//!   newest layer's 32 channels, the same elements torchvision copies. SqueezeNet's max pools
//!   use floor rounding where torchvision uses `ceil_mode`; both give the same sizes at 224.
//! - EfficientNet-B0's squeeze-excitation scales the feature map by a per-channel gate (a
//!   broadcast multiply): a `mul_scalar` over the feature map, as the ONNX importer maps a
//!   broadcast `Mul`; the gate's branch (pool, 1x1 convs, SiLU, sigmoid) is its own layers.
//! - ViT-B/16 is torchvision's `vit_b_16`: the patch embedding a 16x16 convolution of stride 16,
//!   the class token joined by a concat (which also copies the patches from channel-major into
//!   token-major order), the learned position embedding added as an `add_scalar` (a parameter,
//!   not a layer's output), twelve pre-norm encoder blocks written like the transformer's, the
//!   class token read by the head as a view. The class token and position embedding
//!   (152,064 parameters) belong to no layer kind and are not counted.
//! - `llama_block` is one decoder block of TinyLlama-1.1B (a Llama-2 architecture: width 2,048,
//!   32 heads, 4 key/value heads, SwiGLU FFN 5,632, no biases), as perfcast-graph builds a
//!   Llama-style config: RMSNorm, rotary embeddings as element-wise ops (`x cos`, rotate-half as a
//!   negated half and a concat, `x sin`, an add), the K/V heads repeated by a concat, scale and
//!   causal mask as scalar ops, `silu(gate) * up`, residual adds.
//!
//! `resolution` is the input height and width for the CNNs and the token count for the
//! transformer and the Llama block; `None` takes the network's default (see
//! [`default_resolution`]). Batch size is not part of a network: it belongs to the
//! [`crate::Context`].

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::network::{Layer, NETWORK_INPUT, Network};
use crate::spec::{
    BatchNorm2d, Conv2d, Elementwise, LayerNorm, Linear, Matmul, ModuleSpec, Pool2d,
};

const NAMES: [&str; 13] = [
    "lenet5",
    "alexnet",
    "vgg11",
    "vgg16",
    "resnet18",
    "resnet50",
    "mobilenetv2",
    "transformer",
    "squeezenet1_1",
    "densenet121",
    "efficientnet_b0",
    "vit_b_16",
    "llama_block",
];

/// The names of the built-in networks.
pub fn names() -> &'static [&'static str] {
    &NAMES
}

/// The default resolution of a built-in network (input height and width, or tokens for the
/// transformer), or `None` for an unknown name.
pub fn default_resolution(name: &str) -> Option<usize> {
    match name {
        "lenet5" => Some(32),
        "alexnet" | "vgg11" | "vgg16" | "resnet18" | "resnet50" | "mobilenetv2"
        | "squeezenet1_1" | "densenet121" | "efficientnet_b0" | "vit_b_16" => Some(224),
        "transformer" | "llama_block" => Some(128),
        _ => None,
    }
}

/// Builds the built-in network `name` at `resolution` (its default when `None`), checked.
///
/// A resolution too small for the network is an error naming the first layer that does not
/// fit.
pub fn build(name: &str, resolution: Option<usize>) -> Result<Network> {
    let key = name.trim().to_ascii_lowercase();
    let default = default_resolution(&key).ok_or_else(|| Error::UnknownNetwork {
        name: name.to_string(),
        hint: crate::error::Hint::new(format!("known networks are {}", names().join(", "))),
    })?;
    let r = resolution.unwrap_or(default);
    // Checked before any layer is built: the builders multiply the resolution out.
    if r > crate::MAX_AXIS {
        return Err(Error::InvalidNetwork {
            network: key,
            message: format!(
                "`resolution` must be at most {} (2^24), got {r}",
                crate::MAX_AXIS
            ),
        });
    }
    let network = match key.as_str() {
        "lenet5" => lenet5(r),
        "alexnet" => alexnet(r),
        "vgg11" => vgg("vgg11", &VGG11, r),
        "vgg16" => vgg("vgg16", &VGG16, r),
        "resnet18" => resnet18(r),
        "resnet50" => resnet50(r),
        "mobilenetv2" => mobilenetv2(r),
        "squeezenet1_1" => squeezenet1_1(r),
        "densenet121" => densenet121(r),
        "efficientnet_b0" => efficientnet_b0(r),
        "vit_b_16" => vit_b_16(r),
        "llama_block" => llama_block(r),
        _ => transformer(r),
    }?;
    network.check()?;
    Ok(network)
}

/// Builds a network layer by layer, inferring each spec's input shape from what it reads.
struct Builder {
    name: String,
    input: Vec<usize>,
    layers: Vec<Layer>,
    shapes: HashMap<String, Vec<usize>>,
    /// The layer the next layer reads.
    current: String,
}

impl Builder {
    fn new(name: &str, input: Vec<usize>) -> Self {
        let mut shapes = HashMap::new();
        shapes.insert(NETWORK_INPUT.to_string(), input.clone());
        Builder {
            name: name.to_string(),
            input,
            layers: Vec::new(),
            shapes,
            current: NETWORK_INPUT.to_string(),
        }
    }

    fn error(&self, layer: &str, message: String) -> Error {
        Error::InvalidLayer {
            network: self.name.clone(),
            index: self.layers.len(),
            layer: layer.to_string(),
            message,
        }
    }

    /// The output shape of `layer` (or the network input).
    fn shape_of(&self, layer: &str) -> Vec<usize> {
        self.shapes.get(layer).cloned().unwrap_or_default()
    }

    fn current_shape(&self) -> Vec<usize> {
        self.shape_of(&self.current)
    }

    /// The current `[c, h, w]`, for a layer that needs an image.
    fn chw(&self, layer: &str) -> Result<(usize, usize, usize)> {
        match self.current_shape()[..] {
            [c, h, w] => Ok((c, h, w)),
            ref other => Err(self.error(
                layer,
                format!("needs a [channels, height, width] input, gets {other:?}"),
            )),
        }
    }

    /// The current shape folded to the `[c, h, w]` of an element-wise op.
    fn elementwise(&self, layer: &str, of: &str) -> Result<Elementwise> {
        let shape = self.shape_of(of);
        if shape.len() > 3 {
            return Err(self.error(layer, format!("cannot fold {shape:?} into [c, h, w]")));
        }
        let mut padded = [1; 3];
        padded[3 - shape.len()..].copy_from_slice(&shape);
        Ok(Elementwise { shape: padded })
    }

    /// Reads the output of `layer` next (a branch).
    fn from(&mut self, layer: &str) -> &mut Self {
        self.current = layer.to_string();
        self
    }

    /// Appends a layer reading the current one, or `layer` as given when it says `input_from`.
    fn push(&mut self, mut layer: Layer) -> Result<()> {
        let output = layer
            .spec
            .output_shape()
            .map_err(|e| self.error(&layer.name, e.to_string()))?;
        let previous = self
            .layers
            .last()
            .map_or(NETWORK_INPUT, |l| l.name.as_str());
        if layer.input_from.is_none() && self.current != previous {
            layer.input_from = Some(self.current.clone());
        }
        self.current = layer.name.clone();
        self.shapes.insert(layer.name.clone(), output);
        self.layers.push(layer);
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn conv_full(
        &mut self,
        name: &str,
        out: usize,
        kernel: usize,
        stride: usize,
        padding: usize,
        groups: usize,
        bias: bool,
    ) -> Result<()> {
        let (c, h, w) = self.chw(name)?;
        let spec = ModuleSpec::Conv2d(Conv2d {
            in_channels: c,
            out_channels: out,
            input_hw: [h, w],
            kernel: [kernel, kernel],
            stride: [stride, stride],
            padding: [padding, padding],
            dilation: [1, 1],
            groups,
            bias,
        });
        self.push(Layer::new(name, spec))
    }

    /// A convolution with bias (no batch norm after it).
    fn conv(&mut self, name: &str, out: usize, k: usize, s: usize, p: usize) -> Result<()> {
        self.conv_full(name, out, k, s, p, 1, true)
    }

    /// A convolution without bias, for a batch norm to follow.
    fn conv_nb(&mut self, name: &str, out: usize, k: usize, s: usize, p: usize) -> Result<()> {
        self.conv_full(name, out, k, s, p, 1, false)
    }

    fn bn(&mut self, name: &str) -> Result<()> {
        let (c, h, w) = self.chw(name)?;
        self.push(Layer::new(
            name,
            ModuleSpec::BatchNorm2d(BatchNorm2d {
                channels: c,
                input_hw: [h, w],
            }),
        ))
    }

    fn activation(&mut self, name: &str, make: fn(Elementwise) -> ModuleSpec) -> Result<()> {
        let e = self.elementwise(name, &self.current.clone())?;
        self.push(Layer::new(name, make(e)))
    }

    fn relu(&mut self, name: &str) -> Result<()> {
        self.activation(name, ModuleSpec::Relu)
    }

    fn pool(&mut self, name: &str, max: bool, k: usize, s: usize, p: usize) -> Result<()> {
        let (c, h, w) = self.chw(name)?;
        let pool = Pool2d {
            channels: c,
            input_hw: [h, w],
            kernel: [k, k],
            stride: Some([s, s]),
            padding: [p, p],
        };
        let spec = if max {
            ModuleSpec::MaxPool2d(pool)
        } else {
            ModuleSpec::AvgPool2d(pool)
        };
        self.push(Layer::new(name, spec))
    }

    /// Average pool over the whole feature map: `[c, h, w] -> [c, 1, 1]`.
    fn global_avgpool(&mut self, name: &str) -> Result<()> {
        let (c, h, w) = self.chw(name)?;
        let spec = ModuleSpec::AvgPool2d(Pool2d {
            channels: c,
            input_hw: [h, w],
            kernel: [h, w],
            stride: Some([h, w]),
            padding: [0, 0],
        });
        self.push(Layer::new(name, spec))
    }

    /// A fully connected layer: over the last dim of a `[tokens, features]` input, or over the
    /// flattened input of an image (`reshape`).
    fn fc(&mut self, name: &str, out: usize) -> Result<()> {
        let shape = self.current_shape();
        let squeezed: Vec<usize> = match shape.iter().position(|&d| d != 1) {
            Some(first) => shape[first..].to_vec(),
            None => vec![1],
        };
        let (tokens, in_features, reshape) = match squeezed[..] {
            [f] => (1, f, false),
            [t, f] => (t, f, false),
            _ => (1, squeezed.iter().product(), true),
        };
        let layer = Layer::new(
            name,
            ModuleSpec::Linear(Linear {
                tokens,
                in_features,
                out_features: out,
                bias: true,
            }),
        );
        self.push(if reshape { layer.reshaped() } else { layer })
    }

    /// An element-wise layer over the output of `from`.
    fn unary(&mut self, name: &str, from: &str, make: fn(Elementwise) -> ModuleSpec) -> Result<()> {
        let e = self.elementwise(name, from)?;
        self.push(Layer::new(name, make(e)).reads(from))
    }

    /// A layer of its own spec reading `from`.
    fn op(&mut self, name: &str, from: &str, spec: ModuleSpec) -> Result<()> {
        self.push(Layer::new(name, spec).reads(from))
    }

    /// Concatenation of `[c, h, w]` parts along channels: the layer reads the first part and
    /// names the others in `parts_from`.
    fn concat(&mut self, name: &str, parts: &[&str]) -> Result<()> {
        let mut channels = 0;
        let mut hw = None;
        for part in parts {
            match self.shape_of(part)[..] {
                [c, h, w] if hw.is_none_or(|s| s == [h, w]) => {
                    channels += c;
                    hw = Some([h, w]);
                }
                ref other => {
                    return Err(self.error(
                        name,
                        format!("cannot join part `{part}` of shape {other:?} along channels"),
                    ));
                }
            }
        }
        let (first, [h, w]) = match (parts.first(), hw) {
            (Some(first), Some(hw)) => (*first, hw),
            _ => return Err(self.error(name, "has no parts".to_string())),
        };
        let spec = ModuleSpec::Concat(Elementwise {
            shape: [channels, h, w],
        });
        self.push(
            Layer::new(name, spec)
                .reads(first)
                .parts(parts[1..].iter().copied()),
        )
    }

    /// `a + b`, reading `a` and `b` (same shape).
    fn add(&mut self, name: &str, a: &str, b: &str) -> Result<()> {
        self.add_like(name, a, b, ModuleSpec::Add)
    }

    /// A two-operand element-wise layer (add, mul) reading `a` and `b` (same shape).
    fn add_like(
        &mut self,
        name: &str,
        a: &str,
        b: &str,
        make: fn(Elementwise) -> ModuleSpec,
    ) -> Result<()> {
        let e = self.elementwise(name, a)?;
        self.push(Layer::new(name, make(e)).reads(a).second(b))
    }

    fn finish(self) -> Result<Network> {
        let network = Network {
            name: self.name,
            input: self.input,
            layers: self.layers,
        };
        network.check()?;
        Ok(network)
    }
}

/// LeNet-5 (LeCun et al. 1998) on a 1 x r x r image: tanh, average pooling, 10 classes.
fn lenet5(r: usize) -> Result<Network> {
    let mut b = Builder::new("lenet5", vec![1, r, r]);
    b.conv("conv1", 6, 5, 1, 0)?;
    b.activation("tanh1", ModuleSpec::Tanh)?;
    b.pool("pool1", false, 2, 2, 0)?;
    b.conv("conv2", 16, 5, 1, 0)?;
    b.activation("tanh2", ModuleSpec::Tanh)?;
    b.pool("pool2", false, 2, 2, 0)?;
    b.fc("fc1", 120)?;
    b.activation("tanh3", ModuleSpec::Tanh)?;
    b.fc("fc2", 84)?;
    b.activation("tanh4", ModuleSpec::Tanh)?;
    b.fc("fc3", 10)?;
    b.finish()
}

/// torchvision's AlexNet (the one-GPU variant of Krizhevsky et al. 2012).
fn alexnet(r: usize) -> Result<Network> {
    let mut b = Builder::new("alexnet", vec![3, r, r]);
    b.conv("features.0", 64, 11, 4, 2)?;
    b.relu("features.1")?;
    b.pool("features.2", true, 3, 2, 0)?;
    b.conv("features.3", 192, 5, 1, 2)?;
    b.relu("features.4")?;
    b.pool("features.5", true, 3, 2, 0)?;
    b.conv("features.6", 384, 3, 1, 1)?;
    b.relu("features.7")?;
    b.conv("features.8", 256, 3, 1, 1)?;
    b.relu("features.9")?;
    b.conv("features.10", 256, 3, 1, 1)?;
    b.relu("features.11")?;
    b.pool("features.12", true, 3, 2, 0)?;
    b.fc("classifier.1", 4096)?;
    b.relu("classifier.2")?;
    b.fc("classifier.4", 4096)?;
    b.relu("classifier.5")?;
    b.fc("classifier.6", 1000)?;
    b.finish()
}

/// A VGG configuration: output channels of 3x3 convolutions, 0 for a 2x2 max pool.
const VGG11: [usize; 13] = [64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0];
const VGG16: [usize; 18] = [
    64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0,
];

/// torchvision's VGG without batch norm (Simonyan and Zisserman 2014).
fn vgg(name: &str, config: &[usize], r: usize) -> Result<Network> {
    let mut b = Builder::new(name, vec![3, r, r]);
    let mut i = 0;
    for &channels in config {
        if channels == 0 {
            b.pool(&format!("features.{i}"), true, 2, 2, 0)?;
            i += 1;
        } else {
            b.conv(&format!("features.{i}"), channels, 3, 1, 1)?;
            b.relu(&format!("features.{}", i + 1))?;
            i += 2;
        }
    }
    b.fc("classifier.0", 4096)?;
    b.relu("classifier.1")?;
    b.fc("classifier.3", 4096)?;
    b.relu("classifier.4")?;
    b.fc("classifier.6", 1000)?;
    b.finish()
}

/// ResNet stem: 7x7/2 convolution, batch norm, relu, 3x3/2 max pool.
fn resnet_stem(b: &mut Builder) -> Result<()> {
    b.conv_nb("conv1", 64, 7, 2, 3)?;
    b.bn("bn1")?;
    b.relu("relu")?;
    b.pool("maxpool", true, 3, 2, 1)
}

/// The shortcut of a ResNet block: the block input, or a 1x1 convolution and batch norm when
/// the stride or the channel count changes. Returns the name of the shortcut's output.
fn resnet_shortcut(
    b: &mut Builder,
    block: &str,
    input: &str,
    out: usize,
    stride: usize,
) -> Result<String> {
    let in_channels = b.shape_of(input).first().copied().unwrap_or_default();
    if stride == 1 && in_channels == out {
        return Ok(input.to_string());
    }
    b.from(input);
    b.conv_nb(&format!("{block}.downsample.0"), out, 1, stride, 0)?;
    b.bn(&format!("{block}.downsample.1"))?;
    Ok(format!("{block}.downsample.1"))
}

/// ResNet's head: global average pool and a 1000-way linear.
fn resnet_head(mut b: Builder) -> Result<Network> {
    b.global_avgpool("avgpool")?;
    b.fc("fc", 1000)?;
    b.finish()
}

/// torchvision's ResNet-18 (He et al. 2015): basic blocks [2, 2, 2, 2].
fn resnet18(r: usize) -> Result<Network> {
    let mut b = Builder::new("resnet18", vec![3, r, r]);
    resnet_stem(&mut b)?;
    for (stage, (width, stride)) in [(64, 1), (128, 2), (256, 2), (512, 2)]
        .into_iter()
        .enumerate()
    {
        for block in 0..2 {
            let p = format!("layer{}.{block}", stage + 1);
            let stride = if block == 0 { stride } else { 1 };
            let input = b.current.clone();
            b.conv_nb(&format!("{p}.conv1"), width, 3, stride, 1)?;
            b.bn(&format!("{p}.bn1"))?;
            b.relu(&format!("{p}.relu1"))?;
            b.conv_nb(&format!("{p}.conv2"), width, 3, 1, 1)?;
            b.bn(&format!("{p}.bn2"))?;
            let main = b.current.clone();
            let shortcut = resnet_shortcut(&mut b, &p, &input, width, stride)?;
            b.add(&format!("{p}.add"), &main, &shortcut)?;
            b.relu(&format!("{p}.relu2"))?;
        }
    }
    resnet_head(b)
}

/// torchvision's ResNet-50 (v1.5: the stride sits on the 3x3 convolution): bottleneck blocks
/// [3, 4, 6, 3] with expansion 4.
fn resnet50(r: usize) -> Result<Network> {
    let mut b = Builder::new("resnet50", vec![3, r, r]);
    resnet_stem(&mut b)?;
    let stages = [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)];
    for (stage, (width, blocks, stride)) in stages.into_iter().enumerate() {
        for block in 0..blocks {
            let p = format!("layer{}.{block}", stage + 1);
            let stride = if block == 0 { stride } else { 1 };
            let input = b.current.clone();
            b.conv_nb(&format!("{p}.conv1"), width, 1, 1, 0)?;
            b.bn(&format!("{p}.bn1"))?;
            b.relu(&format!("{p}.relu1"))?;
            b.conv_nb(&format!("{p}.conv2"), width, 3, stride, 1)?;
            b.bn(&format!("{p}.bn2"))?;
            b.relu(&format!("{p}.relu2"))?;
            b.conv_nb(&format!("{p}.conv3"), 4 * width, 1, 1, 0)?;
            b.bn(&format!("{p}.bn3"))?;
            let main = b.current.clone();
            let shortcut = resnet_shortcut(&mut b, &p, &input, 4 * width, stride)?;
            b.add(&format!("{p}.add"), &main, &shortcut)?;
            b.relu(&format!("{p}.relu3"))?;
        }
    }
    resnet_head(b)
}

/// torchvision's MobileNetV2 (Sandler et al. 2018), width 1.0, ReLU6 as ReLU.
fn mobilenetv2(r: usize) -> Result<Network> {
    let mut b = Builder::new("mobilenetv2", vec![3, r, r]);
    b.conv_nb("features.0.0", 32, 3, 2, 1)?;
    b.bn("features.0.1")?;
    b.relu("features.0.2")?;
    // (expand ratio t, output channels c, repeats n, first stride s), as in the paper.
    let settings = [
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ];
    let mut index = 1;
    let mut channels = 32;
    for (t, c, n, s) in settings {
        for repeat in 0..n {
            let stride = if repeat == 0 { s } else { 1 };
            let hidden = channels * t;
            let p = format!("features.{index}.conv");
            let input = b.current.clone();
            let mut i = 0;
            if t != 1 {
                b.conv_nb(&format!("{p}.{i}.0"), hidden, 1, 1, 0)?;
                b.bn(&format!("{p}.{i}.1"))?;
                b.relu(&format!("{p}.{i}.2"))?;
                i += 1;
            }
            // Depthwise: one 3x3 filter per channel.
            b.conv_full(&format!("{p}.{i}.0"), hidden, 3, stride, 1, hidden, false)?;
            b.bn(&format!("{p}.{i}.1"))?;
            b.relu(&format!("{p}.{i}.2"))?;
            // Linear bottleneck: projection without activation.
            b.conv_nb(&format!("{p}.{}", i + 1), c, 1, 1, 0)?;
            b.bn(&format!("{p}.{}", i + 2))?;
            if stride == 1 && channels == c {
                let main = b.current.clone();
                b.add(&format!("features.{index}.add"), &main, &input)?;
            }
            channels = c;
            index += 1;
        }
    }
    b.conv_nb(&format!("features.{index}.0"), 1280, 1, 1, 0)?;
    b.bn(&format!("features.{index}.1"))?;
    b.relu(&format!("features.{index}.2"))?;
    b.global_avgpool("avgpool")?;
    b.fc("classifier.1", 1000)?;
    b.finish()
}

/// Multi-head self-attention over the `[tokens, d]` output of `from`, with biases: Q, K and V
/// projections, `QK^T` and `attention x V` as per-head matmuls, softmax, output projection
/// (`{p}.q` ... `{p}.out`). Ends on the output projection.
fn attention(
    b: &mut Builder,
    p: &str,
    from: &str,
    tokens: usize,
    d: usize,
    heads: usize,
) -> Result<()> {
    let dh = d / heads;
    for proj in ["q", "k", "v"] {
        b.from(from);
        b.fc(&format!("{p}.{proj}"), d)?;
    }
    // Q K^T per head: Q read as [heads, tokens, dh], K as [heads, dh, tokens].
    let scores = ModuleSpec::Matmul(Matmul {
        heads,
        m: tokens,
        k: dh,
        n: tokens,
        trans_a: false,
        trans_b: false,
    });
    b.push(
        Layer::new(format!("{p}.scores"), scores)
            .reads(format!("{p}.q"))
            .second(format!("{p}.k"))
            .reshaped(),
    )?;
    b.activation(&format!("{p}.softmax"), ModuleSpec::Softmax)?;
    // Attention x V per head: V read as [heads, tokens, dh].
    let context = ModuleSpec::Matmul(Matmul {
        heads,
        m: tokens,
        k: tokens,
        n: dh,
        trans_a: false,
        trans_b: false,
    });
    b.push(
        Layer::new(format!("{p}.context"), context)
            .second(format!("{p}.v"))
            .reshaped(),
    )?;
    // The output projection reads the heads merged back into [tokens, d].
    let out = ModuleSpec::Linear(Linear {
        tokens,
        in_features: d,
        out_features: d,
        bias: true,
    });
    b.push(Layer::new(format!("{p}.out"), out).reshaped())
}

/// One BERT-base encoder block on `tokens` tokens: d_model 768, 12 heads, MLP 3072.
fn transformer(tokens: usize) -> Result<Network> {
    const D: usize = 768;
    const HEADS: usize = 12;
    const MLP: usize = 3072;
    let mut b = Builder::new("transformer", vec![tokens, D]);
    attention(&mut b, "attn", NETWORK_INPUT, tokens, D, HEADS)?;
    b.add("attn.add", "attn.out", NETWORK_INPUT)?;
    let norm = ModuleSpec::LayerNorm(LayerNorm {
        tokens,
        features: D,
    });
    b.push(Layer::new("attn.norm", norm.clone()))?;
    b.fc("mlp.fc1", MLP)?;
    b.activation("mlp.gelu", ModuleSpec::Gelu)?;
    b.fc("mlp.fc2", D)?;
    b.add("mlp.add", "mlp.fc2", "attn.norm")?;
    b.push(Layer::new("mlp.norm", norm))?;
    b.finish()
}

/// A SqueezeNet fire module: a 1x1 squeeze, then 1x1 and 3x3 expands joined along channels.
fn fire(b: &mut Builder, p: &str, squeeze: usize, expand: usize) -> Result<()> {
    b.conv(&format!("{p}.squeeze"), squeeze, 1, 1, 0)?;
    b.relu(&format!("{p}.squeeze_activation"))?;
    let squeezed = b.current.clone();
    b.conv(&format!("{p}.expand1x1"), expand, 1, 1, 0)?;
    b.relu(&format!("{p}.expand1x1_activation"))?;
    b.from(&squeezed);
    b.conv(&format!("{p}.expand3x3"), expand, 3, 1, 1)?;
    b.relu(&format!("{p}.expand3x3_activation"))?;
    b.concat(
        &format!("{p}.cat"),
        &[
            &format!("{p}.expand1x1_activation"),
            &format!("{p}.expand3x3_activation"),
        ],
    )
}

/// torchvision's SqueezeNet 1.1 (Iandola et al. 2016): eight fire modules, a 1x1 convolution
/// classifier and a global average pool.
fn squeezenet1_1(r: usize) -> Result<Network> {
    let mut b = Builder::new("squeezenet1_1", vec![3, r, r]);
    b.conv("features.0", 64, 3, 2, 0)?;
    b.relu("features.1")?;
    b.pool("features.2", true, 3, 2, 0)?;
    fire(&mut b, "features.3", 16, 64)?;
    fire(&mut b, "features.4", 16, 64)?;
    b.pool("features.5", true, 3, 2, 0)?;
    fire(&mut b, "features.6", 32, 128)?;
    fire(&mut b, "features.7", 32, 128)?;
    b.pool("features.8", true, 3, 2, 0)?;
    fire(&mut b, "features.9", 48, 192)?;
    fire(&mut b, "features.10", 48, 192)?;
    fire(&mut b, "features.11", 64, 256)?;
    fire(&mut b, "features.12", 64, 256)?;
    b.conv("classifier.1", 1000, 1, 1, 0)?;
    b.relu("classifier.2")?;
    b.global_avgpool("classifier.3")?;
    b.finish()
}

/// torchvision's DenseNet-121 (Huang et al. 2017): growth rate 32, bottleneck width 4 x 32,
/// dense blocks of [6, 12, 24, 16] layers, transitions halving channels and resolution.
fn densenet121(r: usize) -> Result<Network> {
    const GROWTH: usize = 32;
    let mut b = Builder::new("densenet121", vec![3, r, r]);
    b.conv_nb("features.conv0", 64, 7, 2, 3)?;
    b.bn("features.norm0")?;
    b.relu("features.relu0")?;
    b.pool("features.pool0", true, 3, 2, 1)?;
    let blocks = [6, 12, 24, 16];
    for (i, &layers) in blocks.iter().enumerate() {
        let p = format!("features.denseblock{}", i + 1);
        // Each dense layer reads the concatenation of every feature so far.
        let input = b.current.clone();
        b.concat(&format!("{p}.cat0"), &[&input])?;
        for l in 1..=layers {
            let q = format!("{p}.denselayer{l}");
            let joined = b.current.clone();
            b.bn(&format!("{q}.norm1"))?;
            b.relu(&format!("{q}.relu1"))?;
            b.conv_nb(&format!("{q}.conv1"), 4 * GROWTH, 1, 1, 0)?;
            b.bn(&format!("{q}.norm2"))?;
            b.relu(&format!("{q}.relu2"))?;
            b.conv_nb(&format!("{q}.conv2"), GROWTH, 3, 1, 1)?;
            let new = b.current.clone();
            b.concat(&format!("{p}.cat{l}"), &[&joined, &new])?;
        }
        if i + 1 < blocks.len() {
            let t = format!("features.transition{}", i + 1);
            let (c, _, _) = b.chw(&t)?;
            b.bn(&format!("{t}.norm"))?;
            b.relu(&format!("{t}.relu"))?;
            b.conv_nb(&format!("{t}.conv"), c / 2, 1, 1, 0)?;
            b.pool(&format!("{t}.pool"), false, 2, 2, 0)?;
        }
    }
    b.bn("features.norm5")?;
    b.relu("relu")?;
    b.global_avgpool("avgpool")?;
    b.fc("classifier", 1000)?;
    b.finish()
}

/// A convolution without bias, batch norm and SiLU (torchvision's `Conv2dNormActivation`).
fn conv_bn_silu(
    b: &mut Builder,
    p: &str,
    out: usize,
    k: usize,
    s: usize,
    groups: usize,
) -> Result<()> {
    b.conv_full(&format!("{p}.0"), out, k, s, (k - 1) / 2, groups, false)?;
    b.bn(&format!("{p}.1"))?;
    b.activation(&format!("{p}.2"), ModuleSpec::Silu)
}

/// torchvision's EfficientNet-B0 (Tan and Le 2019): MBConv blocks of depthwise convolutions
/// with squeeze-excitation and SiLU, width and depth 1.0.
fn efficientnet_b0(r: usize) -> Result<Network> {
    let mut b = Builder::new("efficientnet_b0", vec![3, r, r]);
    conv_bn_silu(&mut b, "features.0", 32, 3, 2, 1)?;
    // (expand ratio, kernel, first stride, output channels, blocks), as torchvision.
    let stages = [
        (1, 3, 1, 16, 1),
        (6, 3, 2, 24, 2),
        (6, 5, 2, 40, 2),
        (6, 3, 2, 80, 3),
        (6, 5, 1, 112, 3),
        (6, 5, 2, 192, 4),
        (6, 3, 1, 320, 1),
    ];
    let mut channels = 32;
    for (stage, (t, k, s, out, blocks)) in stages.into_iter().enumerate() {
        for block in 0..blocks {
            let p = format!("features.{}.{block}.block", stage + 1);
            let stride = if block == 0 { s } else { 1 };
            let input = b.current.clone();
            let hidden = channels * t;
            let mut i = 0;
            if t != 1 {
                conv_bn_silu(&mut b, &format!("{p}.{i}"), hidden, 1, 1, 1)?;
                i += 1;
            }
            conv_bn_silu(&mut b, &format!("{p}.{i}"), hidden, k, stride, hidden)?;
            let features = b.current.clone();
            // Squeeze-excitation: a gate per channel from the pooled map, squeezed to a quarter
            // of the block's input channels.
            let se = format!("{p}.{}", i + 1);
            b.global_avgpool(&format!("{se}.avgpool"))?;
            b.conv(&format!("{se}.fc1"), (channels / 4).max(1), 1, 1, 0)?;
            b.activation(&format!("{se}.activation"), ModuleSpec::Silu)?;
            b.conv(&format!("{se}.fc2"), hidden, 1, 1, 0)?;
            b.activation(&format!("{se}.scale_activation"), ModuleSpec::Sigmoid)?;
            b.unary(&format!("{se}.scale"), &features, ModuleSpec::MulScalar)?;
            b.conv_nb(&format!("{p}.{}.0", i + 2), out, 1, 1, 0)?;
            b.bn(&format!("{p}.{}.1", i + 2))?;
            if stride == 1 && channels == out {
                let main = b.current.clone();
                b.add(
                    &format!("features.{}.{block}.add", stage + 1),
                    &main,
                    &input,
                )?;
            }
            channels = out;
        }
    }
    conv_bn_silu(&mut b, "features.8", 1280, 1, 1, 1)?;
    b.global_avgpool("avgpool")?;
    b.fc("classifier.1", 1000)?;
    b.finish()
}

/// torchvision's ViT-B/16 (Dosovitskiy et al. 2020): 16x16 patches, width 768, 12 pre-norm
/// encoder blocks of 12 heads and MLP 3072, the class token's output classified.
fn vit_b_16(r: usize) -> Result<Network> {
    const D: usize = 768;
    const HEADS: usize = 12;
    const MLP: usize = 3072;
    let mut b = Builder::new("vit_b_16", vec![3, r, r]);
    b.conv("conv_proj", D, 16, 16, 0)?;
    let (_, h, w) = b.chw("conv_proj")?;
    let tokens = h * w + 1;
    let e = |shape: [usize; 3]| Elementwise { shape };
    b.op(
        "encoder.class_token",
        "conv_proj",
        ModuleSpec::Concat(e([1, tokens, D])),
    )?;
    b.activation("encoder.pos_embedding", ModuleSpec::AddScalar)?;
    let norm = ModuleSpec::LayerNorm(LayerNorm {
        tokens,
        features: D,
    });
    for i in 0..12 {
        let p = format!("encoder.layers.encoder_layer_{i}");
        let input = b.current.clone();
        b.push(Layer::new(format!("{p}.ln_1"), norm.clone()))?;
        let ln = b.current.clone();
        attention(
            &mut b,
            &format!("{p}.self_attention"),
            &ln,
            tokens,
            D,
            HEADS,
        )?;
        b.add(
            &format!("{p}.add1"),
            &format!("{p}.self_attention.out"),
            &input,
        )?;
        let residual = b.current.clone();
        b.push(Layer::new(format!("{p}.ln_2"), norm.clone()))?;
        b.fc(&format!("{p}.mlp.0"), MLP)?;
        b.activation(&format!("{p}.mlp.1"), ModuleSpec::Gelu)?;
        b.fc(&format!("{p}.mlp.3"), D)?;
        b.add(&format!("{p}.add2"), &format!("{p}.mlp.3"), &residual)?;
    }
    b.push(Layer::new("encoder.ln", norm))?;
    b.op(
        "class_token_out",
        "encoder.ln",
        ModuleSpec::View(e([1, 1, D])),
    )?;
    b.fc("heads.head", 1000)?;
    b.finish()
}

/// TinyLlama-1.1B's width, heads, key/value heads and FFN width.
const LLAMA: (usize, usize, usize, usize) = (2048, 32, 4, 5632);

/// One TinyLlama-1.1B decoder block on `tokens` tokens (see the module docs).
fn llama_block(tokens: usize) -> Result<Network> {
    let (d, heads, kv, ffn) = LLAMA;
    let dh = d / heads;
    let e = |shape: [usize; 3]| Elementwise { shape };
    let linear = |inf: usize, outf: usize| {
        ModuleSpec::Linear(Linear {
            tokens,
            in_features: inf,
            out_features: outf,
            bias: false,
        })
    };
    let norm = ModuleSpec::RmsNorm(LayerNorm {
        tokens,
        features: d,
    });
    let mut b = Builder::new("llama_block", vec![tokens, d]);
    b.push(Layer::new("input_layernorm", norm.clone()))?;
    let a = "self_attn";
    for (proj, heads) in [("q", heads), ("k", kv), ("v", kv)] {
        b.op(
            &format!("{a}.{proj}_proj"),
            "input_layernorm",
            linear(d, heads * dh),
        )?;
        b.op(
            &format!("{a}.{proj}_heads"),
            &format!("{a}.{proj}_proj"),
            ModuleSpec::View(e([heads, tokens, dh])),
        )?;
    }
    // Rotary positions on Q and K: x cos + rotate_half(x) sin.
    for (x, heads) in [("q", heads), ("k", kv)] {
        let p = format!("{a}.{x}_rope");
        let from = format!("{a}.{x}_heads");
        let full = e([heads, tokens, dh]);
        let half = e([heads, tokens, dh / 2]);
        b.op(
            &format!("{p}.cos"),
            &from,
            ModuleSpec::MulScalar(full.clone()),
        )?;
        b.op(&format!("{p}.half"), &from, ModuleSpec::View(half.clone()))?;
        b.op(
            &format!("{p}.neg"),
            &format!("{p}.half"),
            ModuleSpec::MulScalar(half),
        )?;
        b.op(
            &format!("{p}.rotate"),
            &format!("{p}.neg"),
            ModuleSpec::Concat(full.clone()),
        )?;
        b.op(
            &format!("{p}.sin"),
            &format!("{p}.rotate"),
            ModuleSpec::MulScalar(full.clone()),
        )?;
        b.push(
            Layer::new(format!("{p}.add"), ModuleSpec::Add(full))
                .reads(format!("{p}.cos"))
                .second(format!("{p}.sin")),
        )?;
    }
    // Grouped K/V heads repeated to every query head, materialised.
    let all = e([heads, tokens, dh]);
    b.op(
        &format!("{a}.k_repeat"),
        &format!("{a}.k_rope.add"),
        ModuleSpec::Concat(all.clone()),
    )?;
    b.op(
        &format!("{a}.v_repeat"),
        &format!("{a}.v_heads"),
        ModuleSpec::Concat(all),
    )?;
    b.op(
        &format!("{a}.k_t"),
        &format!("{a}.k_repeat"),
        ModuleSpec::View(e([heads, dh, tokens])),
    )?;
    let scores = ModuleSpec::Matmul(Matmul {
        heads,
        m: tokens,
        k: dh,
        n: tokens,
        trans_a: false,
        trans_b: true,
    });
    b.push(
        Layer::new(format!("{a}.scores"), scores)
            .reads(format!("{a}.q_rope.add"))
            .second(format!("{a}.k_t")),
    )?;
    b.activation(&format!("{a}.scale"), ModuleSpec::MulScalar)?;
    b.activation(&format!("{a}.mask"), ModuleSpec::AddScalar)?;
    b.activation(&format!("{a}.softmax"), ModuleSpec::Softmax)?;
    let context = ModuleSpec::Matmul(Matmul {
        heads,
        m: tokens,
        k: tokens,
        n: dh,
        trans_a: false,
        trans_b: false,
    });
    b.push(Layer::new(format!("{a}.context"), context).second(format!("{a}.v_repeat")))?;
    b.push(
        Layer::new(
            format!("{a}.merge_heads"),
            ModuleSpec::Copy(e([1, tokens, d])),
        )
        .reshaped(),
    )?;
    b.push(Layer::new(format!("{a}.o_proj"), linear(d, d)))?;
    b.add("residual1", &format!("{a}.o_proj"), NETWORK_INPUT)?;
    b.push(Layer::new("post_attention_layernorm", norm))?;
    b.op("mlp.gate_proj", "post_attention_layernorm", linear(d, ffn))?;
    b.op("mlp.up_proj", "post_attention_layernorm", linear(d, ffn))?;
    b.unary("mlp.act", "mlp.gate_proj", ModuleSpec::Silu)?;
    b.add_like("mlp.mul", "mlp.act", "mlp.up_proj", ModuleSpec::Mul)?;
    b.op("mlp.down_proj", "mlp.mul", linear(ffn, d))?;
    b.add("residual2", "mlp.down_proj", "residual1")?;
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::derive;
    use crate::network::LayerShapes;
    use crate::spec::ModuleKind;

    fn flops(net: &Network) -> f64 {
        net.modules().iter().map(|(_, s)| derive(s, 1).flops).sum()
    }

    fn params(net: &Network) -> f64 {
        net.modules().iter().map(|(_, s)| derive(s, 1).params).sum()
    }

    fn count(net: &Network, kind: ModuleKind) -> usize {
        net.layers.iter().filter(|l| l.spec.kind() == kind).count()
    }

    fn within(actual: f64, expected: f64, tolerance: f64) -> bool {
        (actual / expected - 1.0).abs() <= tolerance
    }

    #[test]
    fn every_network_checks_at_default_and_reduced_resolution() {
        for &name in names() {
            let default = default_resolution(name).unwrap();
            let reduced = if name == "lenet5" { 28 } else { default / 2 };
            for r in [None, Some(default), Some(reduced)] {
                let net = build(name, r).unwrap_or_else(|e| panic!("{name} at {r:?}: {e}"));
                assert_eq!(net.name, name);
                net.check().unwrap();
            }
            assert_eq!(
                build(name, None).unwrap(),
                build(name, Some(default)).unwrap()
            );
        }
    }

    #[test]
    fn zoo_networks_round_trip_through_json() {
        for &name in names() {
            let net = build(name, None).unwrap();
            let json = net.to_json_pretty().unwrap();
            assert_eq!(Network::from_json(&json).unwrap(), net, "{name}");
        }
    }

    #[test]
    fn output_shapes_are_the_class_scores() {
        for (name, out) in [
            ("lenet5", vec![1, 10]),
            ("alexnet", vec![1, 1000]),
            ("vgg16", vec![1, 1000]),
            ("resnet50", vec![1, 1000]),
            ("mobilenetv2", vec![1, 1000]),
            ("transformer", vec![128, 768]),
            ("squeezenet1_1", vec![1000, 1, 1]),
            ("densenet121", vec![1, 1000]),
            ("efficientnet_b0", vec![1, 1000]),
            ("vit_b_16", vec![1, 1000]),
            ("llama_block", vec![1, 128, 2048]),
        ] {
            assert_eq!(
                build(name, None).unwrap().output_shape().unwrap(),
                out,
                "{name}"
            );
        }
        assert_eq!(
            build("transformer", Some(64))
                .unwrap()
                .output_shape()
                .unwrap(),
            vec![64, 768]
        );
    }

    #[test]
    fn parameter_counts_match_torchvision_exactly() {
        // torchvision's published parameter counts (batch-norm running stats are buffers);
        // the transformer block is one BERT-base layer.
        for (name, expected) in [
            ("lenet5", 61_706.0),
            ("alexnet", 61_100_840.0),
            ("vgg11", 132_863_336.0),
            ("vgg16", 138_357_544.0),
            ("resnet18", 11_689_512.0),
            ("resnet50", 25_557_032.0),
            ("mobilenetv2", 3_504_872.0),
            ("transformer", 7_087_872.0),
            ("squeezenet1_1", 1_235_496.0),
            ("densenet121", 7_978_856.0),
            ("efficientnet_b0", 5_288_548.0),
            // torchvision's 86,567,656 less the class token (768) and the position embedding
            // (197 x 768), which are parameters of no layer.
            ("vit_b_16", 86_567_656.0 - 768.0 - 197.0 * 768.0),
            // TinyLlama-1.1B's block from its config: Q and O 2048^2, K and V 2048 x 256 (4 of
            // 32 heads), gate, up and down 2048 x 5632, two RMSNorm weights, no biases.
            (
                "llama_block",
                2.0 * 2048.0 * 2048.0 + 2.0 * 2048.0 * 256.0 + 3.0 * 2048.0 * 5632.0 + 2.0 * 2048.0,
            ),
        ] {
            let net = build(name, None).unwrap();
            assert_eq!(params(&net), expected, "{name}");
        }
    }

    #[test]
    fn flops_match_published_figures() {
        // Published multiply-accumulates per 224x224 image (torchvision's "GFLOPS" column);
        // FLOPs are two per MAC plus the element-wise work, within 15%.
        for (name, gmacs) in [
            ("alexnet", 0.714),
            ("vgg11", 7.61),
            ("vgg16", 15.47),
            ("resnet18", 1.81),
            ("resnet50", 4.09),
            ("mobilenetv2", 0.301),
            // 128 tokens x (4 x 768^2 + 2 x 768 x 3072) + 2 x 12 x 128^2 x 64.
            ("transformer", 0.931),
            ("lenet5", 0.000_416_5),
            ("squeezenet1_1", 0.349),
            ("densenet121", 2.834),
            ("efficientnet_b0", 0.386),
            ("vit_b_16", 17.564),
            // 128 tokens x 44.04 M projection weights + 2 x 32 heads x 128^2 x 64.
            ("llama_block", 5.704),
        ] {
            let net = build(name, None).unwrap();
            let f = flops(&net);
            assert!(
                within(f, 2.0 * gmacs * 1e9, 0.15),
                "{name}: {:.3} GFLOP vs {:.3} expected",
                f / 1e9,
                2.0 * gmacs
            );
        }
        // Work scales with pixels: half the resolution, about a quarter of the FLOPs.
        let full = flops(&build("resnet50", None).unwrap());
        let half = flops(&build("resnet50", Some(112)).unwrap());
        assert!(within(half / full, 0.25, 0.15), "{}", half / full);
    }

    #[test]
    fn layer_counts_match_the_architectures() {
        let convs_fcs_adds = |name: &str| {
            let net = build(name, None).unwrap();
            (
                count(&net, ModuleKind::Conv2d),
                count(&net, ModuleKind::Linear),
                count(&net, ModuleKind::Add),
            )
        };
        assert_eq!(convs_fcs_adds("lenet5"), (2, 3, 0));
        assert_eq!(convs_fcs_adds("alexnet"), (5, 3, 0));
        assert_eq!(convs_fcs_adds("vgg11"), (8, 3, 0));
        assert_eq!(convs_fcs_adds("vgg16"), (13, 3, 0));
        // 17 + 3 downsample convolutions; 8 blocks.
        assert_eq!(convs_fcs_adds("resnet18"), (20, 1, 8));
        // 49 + 4 downsample convolutions; 16 blocks.
        assert_eq!(convs_fcs_adds("resnet50"), (53, 1, 16));
        // 10 of 17 inverted residual blocks keep stride 1 and channels.
        assert_eq!(convs_fcs_adds("mobilenetv2"), (52, 1, 10));
        let t = build("transformer", None).unwrap();
        assert_eq!(count(&t, ModuleKind::Linear), 6);
        assert_eq!(count(&t, ModuleKind::Matmul), 2);
        assert_eq!(count(&t, ModuleKind::LayerNorm), 2);
        assert_eq!(count(&t, ModuleKind::Add), 2);
        // Stem and classifier plus three convolutions per fire module, one concat each.
        assert_eq!(convs_fcs_adds("squeezenet1_1"), (2 + 8 * 3, 0, 0));
        assert_eq!(
            count(&build("squeezenet1_1", None).unwrap(), ModuleKind::Concat),
            8
        );
        // Two convolutions per dense layer, the stem and three transitions; a concat before
        // every dense layer and at the end of every block.
        let d = build("densenet121", None).unwrap();
        assert_eq!(convs_fcs_adds("densenet121"), (58 * 2 + 1 + 3, 1, 0));
        assert_eq!(count(&d, ModuleKind::Concat), 58 + 4);
        assert_eq!(count(&d, ModuleKind::BatchNorm2d), 58 * 2 + 1 + 3 + 1);
        // 16 MBConv blocks (15 with an expansion): depthwise, two SE convs and a projection
        // each; 9 keep stride 1 and channels.
        let e = build("efficientnet_b0", None).unwrap();
        assert_eq!(
            convs_fcs_adds("efficientnet_b0"),
            (1 + 16 * 4 + 15 + 1, 1, 9)
        );
        assert_eq!(count(&e, ModuleKind::Sigmoid), 16);
        assert_eq!(count(&e, ModuleKind::MulScalar), 16);
        assert_eq!(count(&e, ModuleKind::Silu), 1 + 15 + 16 + 16 + 1);
        let v = build("vit_b_16", None).unwrap();
        assert_eq!(convs_fcs_adds("vit_b_16"), (1, 12 * 6 + 1, 24));
        assert_eq!(count(&v, ModuleKind::Matmul), 24);
        assert_eq!(count(&v, ModuleKind::LayerNorm), 25);
        let l = build("llama_block", None).unwrap();
        // Q, K, V, O, gate, up, down; rotary adds on Q and K, two residual adds.
        assert_eq!(convs_fcs_adds("llama_block"), (0, 7, 4));
        assert_eq!(count(&l, ModuleKind::RmsNorm), 2);
        assert_eq!(count(&l, ModuleKind::Silu), 1);
        assert_eq!(count(&l, ModuleKind::Mul), 1);
        // Two rotate-halves and two K/V repeats.
        assert_eq!(count(&l, ModuleKind::Concat), 4);
        assert!(l.layers.iter().all(|l| match &l.spec {
            ModuleSpec::Linear(f) => !f.bias,
            _ => true,
        }));
    }

    fn shapes_of(net: &Network) -> HashMap<String, LayerShapes> {
        let shapes = net.check().unwrap();
        net.layers
            .iter()
            .map(|l| l.name.clone())
            .zip(shapes)
            .collect()
    }

    #[test]
    fn concats_join_every_branch_along_channels() {
        let net = build("squeezenet1_1", None).unwrap();
        let shapes = shapes_of(&net);
        let cat = net
            .layers
            .iter()
            .find(|l| l.name == "features.3.cat")
            .unwrap();
        assert_eq!(
            cat.input_from.as_deref(),
            Some("features.3.expand1x1_activation")
        );
        // 64 + 64 channels at 55x55; the 3x3 expand's output is the second part.
        assert_eq!(cat.parts_from, ["features.3.expand3x3_activation"]);
        assert_eq!(shapes["features.3.cat"].output, vec![128, 55, 55]);
        assert_eq!(
            shapes["features.3.expand3x3_activation"].output,
            vec![64, 55, 55]
        );
        assert_eq!(shapes["features.12.cat"].output, vec![512, 13, 13]);

        let net = build("densenet121", Some(64)).unwrap();
        let shapes = shapes_of(&net);
        // Every dense layer adds 32 channels; transitions halve them.
        for (block, first, layers) in [(1, 64, 6), (2, 128, 12), (3, 256, 24), (4, 512, 16)] {
            for l in 0..=layers {
                let cat = &shapes[&format!("features.denseblock{block}.cat{l}")];
                assert_eq!(cat.output[0], first + 32 * l, "block {block} concat {l}");
            }
        }
        assert_eq!(shapes["features.transition3.conv"].output[0], 512);
        let cat = net
            .layers
            .iter()
            .find(|l| l.name == "features.denseblock2.cat5")
            .unwrap();
        assert_eq!(cat.input_from.as_deref(), Some("features.denseblock2.cat4"));
        assert_eq!(cat.parts_from, ["features.denseblock2.denselayer5.conv2"]);
        assert_eq!(
            shapes["features.denseblock2.denselayer5.conv2"].output,
            vec![32, 8, 8]
        );
    }

    #[test]
    fn efficientnet_depthwise_convs_have_one_group_per_channel_and_a_gate() {
        let net = build("efficientnet_b0", None).unwrap();
        let shapes = shapes_of(&net);
        let depthwise: Vec<&Conv2d> = net
            .layers
            .iter()
            .filter_map(|l| match &l.spec {
                ModuleSpec::Conv2d(c) if c.groups > 1 => Some(c),
                _ => None,
            })
            .collect();
        assert_eq!(depthwise.len(), 16);
        for c in &depthwise {
            assert_eq!((c.groups, c.out_channels), (c.in_channels, c.in_channels));
            assert!(c.kernel == [3, 3] || c.kernel == [5, 5], "{c:?}");
            assert_eq!(c.padding[0], (c.kernel[0] - 1) / 2);
        }
        // Stage 6's first block: 112 -> 672 channels, a 5x5 stride-2 depthwise to 7x7, its
        // gate squeezed to 112 / 4 = 28 channels, the map scaled, projected to 192.
        let p = "features.6.0.block";
        assert_eq!(shapes[&format!("{p}.1.0")].output, vec![672, 7, 7]);
        assert_eq!(shapes[&format!("{p}.2.fc1")].output, vec![28, 1, 1]);
        assert_eq!(
            shapes[&format!("{p}.2.scale_activation")].output,
            vec![672, 1, 1]
        );
        let scale = net
            .layers
            .iter()
            .find(|l| l.name == format!("{p}.2.scale"))
            .unwrap();
        assert_eq!(scale.input_from.as_deref(), Some("features.6.0.block.1.2"));
        assert_eq!(shapes[&format!("{p}.2.scale")].output, vec![672, 7, 7]);
        assert_eq!(shapes[&format!("{p}.3.0")].output, vec![192, 7, 7]);
    }

    #[test]
    fn vit_embeds_patches_with_kernel_equal_to_stride_and_a_class_token() {
        for (r, patches) in [(224, 196), (64, 16)] {
            let net = build("vit_b_16", Some(r)).unwrap();
            let shapes = shapes_of(&net);
            let ModuleSpec::Conv2d(c) = &net.layers[0].spec else {
                panic!("the patch embedding is a convolution")
            };
            assert_eq!(
                (c.kernel, c.stride, c.out_channels),
                ([16, 16], [16, 16], 768)
            );
            let tokens = patches + 1;
            assert_eq!(shapes["encoder.class_token"].output, vec![1, tokens, 768]);
            let last = "encoder.layers.encoder_layer_11";
            assert_eq!(
                shapes[&format!("{last}.self_attention.scores")].output,
                vec![12, tokens, tokens]
            );
            assert_eq!(
                shapes[&format!("{last}.mlp.1")].output,
                vec![1, tokens, 3072]
            );
            // The head reads the class token alone.
            assert_eq!(shapes["heads.head"].input, vec![1, 768]);
        }
    }

    #[test]
    fn llama_block_has_rotary_grouped_heads_and_a_gated_mlp() {
        let net = build("llama_block", Some(32)).unwrap();
        let shapes = shapes_of(&net);
        assert_eq!(shapes["self_attn.k_proj"].output, vec![32, 256]);
        assert_eq!(shapes["self_attn.q_rope.add"].output, vec![32, 32, 64]);
        assert_eq!(shapes["self_attn.k_rope.add"].output, vec![4, 32, 64]);
        assert_eq!(shapes["self_attn.k_repeat"].output, vec![32, 32, 64]);
        assert_eq!(shapes["self_attn.scores"].output, vec![32, 32, 32]);
        assert_eq!(shapes["mlp.mul"].second, Some(vec![1, 32, 5632]));
        assert_eq!(shapes["residual2"].output, vec![1, 32, 2048]);
    }

    #[test]
    fn mobilenetv2_depthwise_convs_have_one_group_per_channel() {
        let net = build("mobilenetv2", None).unwrap();
        let depthwise: Vec<&Conv2d> = net
            .layers
            .iter()
            .filter_map(|l| match &l.spec {
                ModuleSpec::Conv2d(c) if c.groups > 1 => Some(c),
                _ => None,
            })
            .collect();
        assert_eq!(depthwise.len(), 17);
        for c in depthwise {
            assert_eq!((c.groups, c.out_channels), (c.in_channels, c.in_channels));
            assert_eq!(c.kernel, [3, 3]);
        }
    }

    #[test]
    fn attention_matmuls_split_heads() {
        let net = build("transformer", Some(64)).unwrap();
        let shapes = net.check().unwrap();
        let at = |name: &str| net.layers.iter().position(|l| l.name == name).unwrap();
        assert_eq!(shapes[at("attn.scores")].output, vec![12, 64, 64]);
        assert_eq!(shapes[at("attn.scores")].second, Some(vec![12, 64, 64]));
        assert_eq!(shapes[at("attn.context")].output, vec![12, 64, 64]);
        assert_eq!(shapes[at("mlp.gelu")].output, vec![1, 64, 3072]);
    }

    #[test]
    fn bad_names_and_resolutions_are_errors() {
        let err = build("resnet101", None).unwrap_err().to_string();
        assert!(err.contains("unknown zoo network `resnet101`"), "{err}");
        assert!(
            err.contains("hint: known networks are lenet5, alexnet"),
            "{err}"
        );
        assert_eq!(build("ResNet18", None).unwrap().name, "resnet18");
        // AlexNet's third max pool no longer fits at 32x32.
        let err = build("alexnet", Some(32)).unwrap_err().to_string();
        assert!(err.starts_with("network `alexnet`: layer "), "{err}");
        assert!(err.contains("larger than the padded input"), "{err}");
        let err = build("vgg16", Some(0)).unwrap_err().to_string();
        assert!(err.contains("network `vgg16`"), "{err}");
        // A huge resolution must be refused, not multiplied out into an overflow.
        for name in names() {
            let err = build(name, Some(4_294_967_296)).unwrap_err().to_string();
            assert!(err.contains("4294967296"), "{name}: {err}");
        }
        // Within the bound but too large for its layers: an error naming the layer.
        let err = build("resnet50", Some(1 << 24)).unwrap_err().to_string();
        assert!(err.contains("2^40"), "{err}");
    }
}
