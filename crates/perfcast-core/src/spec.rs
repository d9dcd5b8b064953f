//! Module specifications: one layer as the user states it, validated on construction.
//!
//! Shapes here are *per sample*: the batch size belongs to the [`crate::Context`], so the same
//! spec can be measured or predicted at many batch sizes. A spec has a canonical flat form
//! ([`ModuleSpec::config`]), the integer columns a dataset stores for it.

use serde::{Deserialize, Deserializer, Serialize};

use crate::error::{Error, Result};

/// Every module kind perfcast measures and predicts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModuleKind {
    /// 2-D convolution, grouped and depthwise included.
    Conv2d,
    /// Fully connected layer over the last dimension.
    Linear,
    /// Batched matrix multiplication (bmm).
    Matmul,
    /// 2-D max pooling.
    MaxPool2d,
    /// 2-D average pooling.
    AvgPool2d,
    /// Batch normalisation over channels.
    BatchNorm2d,
    /// Layer normalisation over the last dimension.
    LayerNorm,
    /// max(x, 0).
    Relu,
    /// Gaussian error linear unit (erf form).
    Gelu,
    /// Logistic sigmoid.
    Sigmoid,
    /// Hyperbolic tangent.
    Tanh,
    /// Element-wise addition of two tensors of one shape.
    Add,
    /// Element-wise multiplication of two tensors of one shape.
    Mul,
    /// Softmax over the last dimension.
    Softmax,
    /// Element-wise division of two tensors of one shape.
    Div,
    /// Element-wise power of two tensors of one shape.
    Pow,
    /// A scalar added to every element.
    #[serde(rename = "add_scalar")]
    AddScalar,
    /// Every element multiplied by a scalar.
    #[serde(rename = "mul_scalar")]
    MulScalar,
    /// Every element divided by a scalar.
    #[serde(rename = "div_scalar")]
    DivScalar,
    /// Every element raised to a scalar power.
    #[serde(rename = "pow_scalar")]
    PowScalar,
    /// Dropout in training mode: a random mask applied and the survivors rescaled.
    Dropout,
    /// `where(mask, x, value)`: a boolean mask of the same shape picks a fill value (attention masks).
    #[serde(rename = "masked_fill")]
    MaskedFill,
    /// A copy of a permuted tensor into contiguous memory (`contiguous()` after a transpose).
    Copy,
    /// A sum over the last dimension (reductions: losses, pooling of tokens).
    Sum,
    /// x * sigmoid(x) (SiLU / swish, Llama's gated MLP).
    Silu,
    /// A view (reshape, flatten, squeeze, unsqueeze, transpose read as strides): metadata only,
    /// predicted as zero cost and marked so.
    View,
    /// Concatenation of parts into one tensor: every element read and written once.
    Concat,
    /// A slice (or one part of a split) copied out of a larger tensor.
    Slice,
    /// Constant padding into a larger tensor.
    Pad,
    /// RMS normalisation of `[tokens, features]` over `features` (Llama).
    #[serde(rename = "rmsnorm")]
    RmsNorm,
    /// Embedding lookup: `tokens` rows gathered from a `[vocab, features]` table.
    Embedding,
    /// Leaky ReLU: max(x, 0.01 x) (PyTorch's default slope).
    #[serde(rename = "leaky_relu")]
    LeakyRelu,
}

impl ModuleKind {
    /// All kinds, in a stable order.
    pub const ALL: [ModuleKind; 32] = [
        ModuleKind::Conv2d,
        ModuleKind::Linear,
        ModuleKind::Matmul,
        ModuleKind::MaxPool2d,
        ModuleKind::AvgPool2d,
        ModuleKind::BatchNorm2d,
        ModuleKind::LayerNorm,
        ModuleKind::Relu,
        ModuleKind::Gelu,
        ModuleKind::Sigmoid,
        ModuleKind::Tanh,
        ModuleKind::Add,
        ModuleKind::Mul,
        ModuleKind::Softmax,
        ModuleKind::Div,
        ModuleKind::Pow,
        ModuleKind::AddScalar,
        ModuleKind::MulScalar,
        ModuleKind::DivScalar,
        ModuleKind::PowScalar,
        ModuleKind::Dropout,
        ModuleKind::MaskedFill,
        ModuleKind::Copy,
        ModuleKind::Sum,
        ModuleKind::Silu,
        ModuleKind::View,
        ModuleKind::Concat,
        ModuleKind::Slice,
        ModuleKind::Pad,
        ModuleKind::RmsNorm,
        ModuleKind::Embedding,
        ModuleKind::LeakyRelu,
    ];

    /// The kind's name, as used in file names, JSON and the CLI.
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// Names of all kinds.
    pub fn names() -> Vec<&'static str> {
        Self::ALL.iter().map(|k| k.name()).collect()
    }

    /// The integer configuration columns a dataset stores for this kind, in order.
    pub fn config_columns(self) -> &'static [&'static str] {
        match self {
            ModuleKind::Conv2d => &[
                "in_channels",
                "out_channels",
                "in_h",
                "in_w",
                "kernel_h",
                "kernel_w",
                "stride_h",
                "stride_w",
                "pad_h",
                "pad_w",
                "dilation_h",
                "dilation_w",
                "groups",
                "bias",
            ],
            ModuleKind::Linear => &["tokens", "in_features", "out_features", "bias"],
            ModuleKind::Matmul => &["heads", "m", "k", "n"],
            ModuleKind::MaxPool2d | ModuleKind::AvgPool2d => &[
                "channels", "in_h", "in_w", "kernel_h", "kernel_w", "stride_h", "stride_w",
                "pad_h", "pad_w",
            ],
            ModuleKind::BatchNorm2d => &["channels", "in_h", "in_w"],
            ModuleKind::LayerNorm | ModuleKind::RmsNorm => &["tokens", "features"],
            ModuleKind::Embedding => &["tokens", "vocab", "features"],
            _ => &["c", "h", "w"],
        }
    }

    /// Columns a dataset stores beside [`ModuleKind::config_columns`] for how a module's
    /// operands are laid out (a matmul's `trans_a` and `trans_b`, 0 or 1), in order.
    ///
    /// They change the time but neither the shapes nor the work, and they are not part of the
    /// configuration: the feature rows of the single-device and cross-device models (and so the
    /// schema hash every saved model checks) stay those of the configuration, and a dataset
    /// written before they existed reads as the default layout (all 0). The anchor mapping
    /// reads them, since DeepBench measured the same GEMM shapes in several layouts.
    pub fn layout_columns(self) -> &'static [&'static str] {
        match self {
            ModuleKind::Matmul => &["trans_a", "trans_b"],
            _ => &[],
        }
    }

    /// Whether the kind's spec is an [`Elementwise`] shape (activations, binary and scalar
    /// element-wise ops, softmax).
    pub fn is_elementwise(self) -> bool {
        ModuleSpec::elementwise(self, Elementwise { shape: [1, 1, 1] }).is_some()
    }

    /// Whether the kind has trainable parameters (its training step computes weight gradients).
    pub fn has_parameters(self) -> bool {
        matches!(
            self,
            ModuleKind::Conv2d
                | ModuleKind::Linear
                | ModuleKind::BatchNorm2d
                | ModuleKind::LayerNorm
                | ModuleKind::RmsNorm
                | ModuleKind::Embedding
        )
    }

    /// Whether the kind does no work at all (a view): predictors answer it as zero cost, marked
    /// so, whatever a bundle holds, and sweeps do not measure it.
    pub fn is_zero_cost(self) -> bool {
        self == ModuleKind::View
    }

    /// How the element count of the tensor a layer of this kind reads relates to its spec's
    /// own [`ModuleSpec::input_shape`]: concat and pad read one part of what they write (at
    /// most as many elements); a slice copies, and a view presents, part of a larger tensor or
    /// all of it (at least as many: a split's parts are views in PyTorch); every other kind
    /// reads exactly its input shape.
    pub fn reads(self) -> Reads {
        match self {
            ModuleKind::Concat | ModuleKind::Pad => Reads::AtMost,
            ModuleKind::Slice | ModuleKind::View => Reads::AtLeast,
            _ => Reads::Exactly,
        }
    }
}

impl std::fmt::Display for ModuleKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for ModuleKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let lower = s.trim().to_ascii_lowercase();
        let alias = match lower.as_str() {
            "conv" | "conv2d" | "depthwise" | "dwconv" => "conv2d",
            "fc" | "dense" | "linear" => "linear",
            "bmm" | "matmul" | "gemm" => "matmul",
            "maxpool" | "max_pool2d" | "maxpool2d" => "maxpool2d",
            "avgpool" | "avg_pool2d" | "avgpool2d" => "avgpool2d",
            "batchnorm" | "bn" | "batch_norm" | "batchnorm2d" => "batchnorm2d",
            "layer_norm" | "ln" | "layernorm" => "layernorm",
            // NeuSight's names of the scalar forms.
            "addu" | "add_scalar" => "add_scalar",
            "mulu" | "mul_scalar" => "mul_scalar",
            "divu" | "div_scalar" => "div_scalar",
            "powu" | "pow_scalar" => "pow_scalar",
            "where" | "masked_fill" => "masked_fill",
            "contiguous" | "copy" => "copy",
            "reduce_sum" | "sum" => "sum",
            "swish" | "silu" => "silu",
            "reshape" | "flatten" | "squeeze" | "unsqueeze" | "transpose" | "view" => "view",
            "cat" | "concat" | "concatenate" => "concat",
            "split" | "narrow" | "slice" => "slice",
            "pad" | "constant_pad" => "pad",
            "rms_norm" | "rmsnorm" => "rmsnorm",
            "gather" | "embedding" => "embedding",
            other => other,
        };
        Self::ALL
            .iter()
            .copied()
            .find(|k| k.name() == alias)
            .ok_or_else(|| Error::UnknownKind {
                name: s.to_string(),
                hint: crate::error::Hint::new(format!(
                    "known kinds are {}",
                    Self::names().join(", ")
                )),
            })
    }
}

/// 2-D convolution. Input `[in_channels, in_h, in_w]` per sample.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Conv2d {
    /// Input channels.
    pub in_channels: usize,
    /// Output channels.
    pub out_channels: usize,
    /// Input height and width.
    #[serde(deserialize_with = "pair")]
    pub input_hw: [usize; 2],
    /// Kernel height and width (a number means a square kernel).
    #[serde(deserialize_with = "pair")]
    pub kernel: [usize; 2],
    /// Stride; default 1.
    #[serde(default = "ones", deserialize_with = "pair")]
    pub stride: [usize; 2],
    /// Zero padding on each side; default 0.
    #[serde(default, deserialize_with = "pair")]
    pub padding: [usize; 2],
    /// Dilation; default 1.
    #[serde(default = "ones", deserialize_with = "pair")]
    pub dilation: [usize; 2],
    /// Groups; default 1 (groups = in_channels = out_channels is a depthwise conv).
    #[serde(default = "one")]
    pub groups: usize,
    /// Whether a bias is added; default true.
    #[serde(default = "yes")]
    pub bias: bool,
}

/// Fully connected layer: `[tokens, in_features] -> [tokens, out_features]` per sample.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Linear {
    /// Rows per sample (sequence length; 1 for a plain MLP layer); default 1.
    #[serde(default = "one")]
    pub tokens: usize,
    /// Input features.
    pub in_features: usize,
    /// Output features.
    pub out_features: usize,
    /// Whether a bias is added; default true.
    #[serde(default = "yes")]
    pub bias: bool,
}

/// Batched matmul: `[heads, m, k] @ [heads, k, n] -> [heads, m, n]` per sample.
///
/// `trans_a` / `trans_b` say how the operands are stored, as BLAS's `transa` / `transb` do: a
/// transposed left operand is stored `[k, m]` and read transposed. Shapes and work stay the
/// same, but the kernel a library runs does not (DeepBench's cuBLAS GEMMs differ up to 5x
/// between `N,N` and `T,N`), so a dataset stores them beside the configuration
/// ([`ModuleKind::layout_columns`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Matmul {
    /// Independent products per sample (attention heads); default 1.
    #[serde(default = "one")]
    pub heads: usize,
    /// Rows of the left operand.
    pub m: usize,
    /// Shared (reduction) dimension.
    pub k: usize,
    /// Columns of the right operand.
    pub n: usize,
    /// Whether the left operand is stored transposed (`[k, m]`); default false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub trans_a: bool,
    /// Whether the right operand is stored transposed (`[n, k]`); default false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub trans_b: bool,
}

/// 2-D pooling (max or average). Input `[channels, in_h, in_w]` per sample.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pool2d {
    /// Channels.
    pub channels: usize,
    /// Input height and width.
    #[serde(deserialize_with = "pair")]
    pub input_hw: [usize; 2],
    /// Window height and width.
    #[serde(deserialize_with = "pair")]
    pub kernel: [usize; 2],
    /// Stride; default: the kernel size.
    #[serde(default, deserialize_with = "opt_pair")]
    pub stride: Option<[usize; 2]>,
    /// Padding on each side; default 0 (at most half the kernel).
    #[serde(default, deserialize_with = "pair")]
    pub padding: [usize; 2],
}

/// Batch normalisation over the channels of `[channels, in_h, in_w]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchNorm2d {
    /// Channels.
    pub channels: usize,
    /// Input height and width.
    #[serde(deserialize_with = "pair")]
    pub input_hw: [usize; 2],
}

/// Layer normalisation of `[tokens, features]` over `features`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerNorm {
    /// Rows per sample; default 1.
    #[serde(default = "one")]
    pub tokens: usize,
    /// Normalised features.
    pub features: usize,
}

/// Embedding lookup: `tokens` indices per sample gather rows of a `[vocab, features]` table.
///
/// Input `[1, tokens]` (the indices), output `[tokens, features]`. Only the rows read move:
/// bytes are the gathered rows, the indices (8 bytes each) and the output, not the table.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Embedding {
    /// Indices per sample (sequence length); default 1.
    #[serde(default = "one")]
    pub tokens: usize,
    /// Rows of the table.
    pub vocab: usize,
    /// Columns of the table (the embedding width).
    pub features: usize,
}

/// How many elements a layer may read against its spec's input shape ([`ModuleKind::reads`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reads {
    /// The input shape itself (up to leading ones, or its element count when reshaped).
    Exactly,
    /// One part of the input shape: concat and pad read a part of what they write.
    AtMost,
    /// At least the input shape: a slice copies, a view presents, part of a larger tensor.
    AtLeast,
}

/// An element-wise op (activation, add, mul) or softmax on a `[c, h, w]` tensor per sample.
///
/// Concat, slice and pad are element-wise shaped too: their `shape` is the tensor they write
/// (the concatenation, the slice, the padded tensor), which they read as a copy; a view's is
/// the shape it presents.
///
/// Any per-sample rank folds into three dims: a `[tokens, features]` activation is `[1, tokens,
/// features]`. Softmax runs over the last dim.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Elementwise {
    /// Per-sample shape `[c, h, w]`.
    pub shape: [usize; 3],
}

/// Every element-wise variant of [`ModuleSpec`] (an [`Elementwise`] shape), its shape bound
/// to `$e`: the one list of them for the matches that treat them alike, which stay exhaustive.
macro_rules! elementwise_spec {
    ($e:ident) => {
        ModuleSpec::Relu($e)
            | ModuleSpec::Gelu($e)
            | ModuleSpec::Sigmoid($e)
            | ModuleSpec::Tanh($e)
            | ModuleSpec::Add($e)
            | ModuleSpec::Mul($e)
            | ModuleSpec::Softmax($e)
            | ModuleSpec::Div($e)
            | ModuleSpec::Pow($e)
            | ModuleSpec::AddScalar($e)
            | ModuleSpec::MulScalar($e)
            | ModuleSpec::DivScalar($e)
            | ModuleSpec::PowScalar($e)
            | ModuleSpec::Dropout($e)
            | ModuleSpec::MaskedFill($e)
            | ModuleSpec::Copy($e)
            | ModuleSpec::Sum($e)
            | ModuleSpec::Silu($e)
            | ModuleSpec::View($e)
            | ModuleSpec::Concat($e)
            | ModuleSpec::Slice($e)
            | ModuleSpec::Pad($e)
            | ModuleSpec::LeakyRelu($e)
    };
}

/// One layer as the user states it: its kind, hyper-parameters and per-sample input shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ModuleSpec {
    /// See [`Conv2d`].
    Conv2d(Conv2d),
    /// See [`Linear`].
    Linear(Linear),
    /// See [`Matmul`].
    Matmul(Matmul),
    /// Max pooling, see [`Pool2d`].
    MaxPool2d(Pool2d),
    /// Average pooling, see [`Pool2d`].
    AvgPool2d(Pool2d),
    /// See [`BatchNorm2d`].
    BatchNorm2d(BatchNorm2d),
    /// See [`LayerNorm`].
    LayerNorm(LayerNorm),
    /// ReLU on an [`Elementwise`] shape.
    Relu(Elementwise),
    /// GELU on an [`Elementwise`] shape.
    Gelu(Elementwise),
    /// Sigmoid on an [`Elementwise`] shape.
    Sigmoid(Elementwise),
    /// Tanh on an [`Elementwise`] shape.
    Tanh(Elementwise),
    /// Addition of two tensors of an [`Elementwise`] shape.
    Add(Elementwise),
    /// Multiplication of two tensors of an [`Elementwise`] shape.
    Mul(Elementwise),
    /// Softmax over the last dim of an [`Elementwise`] shape.
    Softmax(Elementwise),
    /// Element-wise division of two tensors of one shape, on an [`Elementwise`] shape.
    Div(Elementwise),
    /// Element-wise power of two tensors of one shape, on an [`Elementwise`] shape.
    Pow(Elementwise),
    /// A scalar added to every element, on an [`Elementwise`] shape.
    #[serde(rename = "add_scalar")]
    AddScalar(Elementwise),
    /// Every element multiplied by a scalar, on an [`Elementwise`] shape.
    #[serde(rename = "mul_scalar")]
    MulScalar(Elementwise),
    /// Every element divided by a scalar, on an [`Elementwise`] shape.
    #[serde(rename = "div_scalar")]
    DivScalar(Elementwise),
    /// Every element raised to a scalar power, on an [`Elementwise`] shape.
    #[serde(rename = "pow_scalar")]
    PowScalar(Elementwise),
    /// Dropout in training mode: a random mask applied and the survivors rescaled, on an [`Elementwise`] shape.
    Dropout(Elementwise),
    /// `where(mask, x, value)`: a boolean mask of the same shape picks a fill value (attention masks), on an [`Elementwise`] shape.
    #[serde(rename = "masked_fill")]
    MaskedFill(Elementwise),
    /// A copy of a permuted tensor into contiguous memory (`contiguous()` after a transpose), on an [`Elementwise`] shape.
    Copy(Elementwise),
    /// A sum over the last dimension (reductions: losses, pooling of tokens), on an [`Elementwise`] shape.
    Sum(Elementwise),
    /// SiLU on an [`Elementwise`] shape.
    Silu(Elementwise),
    /// A zero-cost view presenting an [`Elementwise`] shape.
    View(Elementwise),
    /// A concatenation writing an [`Elementwise`] shape.
    Concat(Elementwise),
    /// A slice copied out into an [`Elementwise`] shape.
    Slice(Elementwise),
    /// Constant padding writing an [`Elementwise`] shape.
    Pad(Elementwise),
    /// RMS normalisation, see [`LayerNorm`] (the same shape, no mean and no shift).
    #[serde(rename = "rmsnorm")]
    RmsNorm(LayerNorm),
    /// See [`Embedding`].
    Embedding(Embedding),
    /// Leaky ReLU on an [`Elementwise`] shape.
    #[serde(rename = "leaky_relu")]
    LeakyRelu(Elementwise),
}

fn one() -> usize {
    1
}
fn ones() -> [usize; 2] {
    [1, 1]
}
fn yes() -> bool {
    true
}
fn is_false(b: &bool) -> bool {
    !*b
}

/// A size given once for both axes (`3`) or per axis (`[3, 1]`). Read directly rather than
/// through an untagged enum, which buffers the value and, on a bad one, says only that no form
/// matched.
struct PairOrScalar([usize; 2]);

impl<'de> Deserialize<'de> for PairOrScalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use serde::de::{self, IgnoredAny, SeqAccess, Unexpected, Visitor};

        struct Sizes;

        impl<'de> Visitor<'de> for Sizes {
            type Value = PairOrScalar;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a size (a non-negative integer) or a pair of sizes `[h, w]`")
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<PairOrScalar, E> {
                let size = usize::try_from(v)
                    .map_err(|_| E::invalid_value(Unexpected::Unsigned(v), &self))?;
                Ok(PairOrScalar([size, size]))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<PairOrScalar, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::invalid_value(Unexpected::Signed(v), &self)),
                }
            }

            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<PairOrScalar, A::Error> {
                let h = seq
                    .next_element::<usize>()?
                    .ok_or_else(|| de::Error::invalid_length(0, &self))?;
                let w = seq
                    .next_element::<usize>()?
                    .ok_or_else(|| de::Error::invalid_length(1, &self))?;
                if seq.next_element::<IgnoredAny>()?.is_some() {
                    return Err(de::Error::invalid_length(3, &self));
                }
                Ok(PairOrScalar([h, w]))
            }
        }

        d.deserialize_any(Sizes)
    }
}

impl From<PairOrScalar> for [usize; 2] {
    fn from(p: PairOrScalar) -> Self {
        p.0
    }
}

fn pair<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<[usize; 2], D::Error> {
    PairOrScalar::deserialize(d).map(Into::into)
}

fn opt_pair<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<[usize; 2]>, D::Error> {
    Option::<PairOrScalar>::deserialize(d).map(|o| o.map(Into::into))
}

fn invalid(kind: ModuleKind, message: String) -> Error {
    Error::InvalidSpec {
        kind: kind.name(),
        message,
    }
}

/// Largest value of any one size field (channels, features, spatial sizes, kernel, stride,
/// padding, ...): 2^24. Real layers stay far below it; the bound keeps every product of sizes
/// (see [`MAX_ELEMENTS`]) well inside 64-bit integers and exactly representable in `f64`.
pub const MAX_AXIS: usize = 1 << 24;

/// Largest tensor a spec may describe per sample (input, output, weights or the second
/// operand), in elements: 2^40 (4 TiB of fp32), beyond any device's memory.
pub const MAX_ELEMENTS: u64 = 1 << 40;

fn positive(kind: ModuleKind, name: &str, value: usize) -> Result<()> {
    if value == 0 {
        return Err(invalid(kind, format!("`{name}` must be at least 1, got 0")));
    }
    at_most_axis(kind, name, value)
}

#[inline]
fn at_most_axis(kind: ModuleKind, name: &str, value: usize) -> Result<()> {
    if value > MAX_AXIS {
        return Err(invalid(
            kind,
            format!("`{name}` must be at most {MAX_AXIS} (2^24), got {value}"),
        ));
    }
    Ok(())
}

/// [`at_most_axis`] for a value named `{what} {axis}`, formatting the name only on error.
#[inline]
fn bounded_axis(kind: ModuleKind, what: &str, axis: &str, value: usize) -> Result<()> {
    if value > MAX_AXIS {
        return at_most_axis(kind, &format!("{what} {axis}"), value);
    }
    Ok(())
}

/// Checks that a tensor of `dims` (each already at most [`MAX_AXIS`]) holds at most
/// [`MAX_ELEMENTS`] elements.
fn elements_at_most(kind: ModuleKind, what: &str, dims: &[usize]) -> Result<()> {
    let mut n: u64 = 1;
    for &d in dims {
        n = n.saturating_mul(d as u64);
    }
    if n > MAX_ELEMENTS {
        let shape: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
        return Err(invalid(
            kind,
            format!(
                "the {what} [{}] holds {n} elements per sample, more than {MAX_ELEMENTS} (2^40)",
                shape.join(", ")
            ),
        ));
    }
    Ok(())
}

/// [`positive`] for a value named `{what} {axis}`, formatting the name only on error:
/// validation runs on every prediction.
#[inline]
fn positive_axis(kind: ModuleKind, what: &str, axis: &str, value: usize) -> Result<()> {
    if value == 0 || value > MAX_AXIS {
        return positive(kind, &format!("{what} {axis}"), value);
    }
    Ok(())
}

/// Output length of a sliding window, or an error when the window does not fit.
fn window_out(
    kind: ModuleKind,
    axis: &str,
    input: usize,
    kernel: usize,
    stride: usize,
    padding: usize,
    dilation: usize,
) -> Result<usize> {
    let extent = dilation * (kernel - 1) + 1;
    let padded = input + 2 * padding;
    if extent > padded {
        let what = if dilation > 1 {
            format!("kernel {axis} {kernel} (dilated extent {extent})")
        } else {
            format!("kernel {axis} {kernel}")
        };
        return Err(invalid(
            kind,
            format!(
                "{what} is larger than the padded input {padded} (input {input} + 2 x padding {padding})"
            ),
        ));
    }
    Ok((padded - extent) / stride + 1)
}

/// A per-sample shape of at most three axes, held inline (no allocation); derefs to the
/// axes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dims {
    axes: [usize; 3],
    len: usize,
}

impl Dims {
    pub(crate) fn new<const N: usize>(axes: [usize; N]) -> Dims {
        let mut d = Dims::default();
        d.axes[..N].copy_from_slice(&axes);
        d.len = N;
        d
    }
}

impl std::ops::Deref for Dims {
    type Target = [usize];

    fn deref(&self) -> &[usize] {
        &self.axes[..self.len]
    }
}

impl Pool2d {
    /// The stride in effect (the kernel size when none is given).
    pub fn effective_stride(&self) -> [usize; 2] {
        self.stride.unwrap_or(self.kernel)
    }
}

impl ModuleSpec {
    /// The module's kind.
    pub fn kind(&self) -> ModuleKind {
        match self {
            ModuleSpec::Conv2d(_) => ModuleKind::Conv2d,
            ModuleSpec::Linear(_) => ModuleKind::Linear,
            ModuleSpec::Matmul(_) => ModuleKind::Matmul,
            ModuleSpec::MaxPool2d(_) => ModuleKind::MaxPool2d,
            ModuleSpec::AvgPool2d(_) => ModuleKind::AvgPool2d,
            ModuleSpec::BatchNorm2d(_) => ModuleKind::BatchNorm2d,
            ModuleSpec::LayerNorm(_) => ModuleKind::LayerNorm,
            ModuleSpec::Relu(_) => ModuleKind::Relu,
            ModuleSpec::Gelu(_) => ModuleKind::Gelu,
            ModuleSpec::Sigmoid(_) => ModuleKind::Sigmoid,
            ModuleSpec::Tanh(_) => ModuleKind::Tanh,
            ModuleSpec::Add(_) => ModuleKind::Add,
            ModuleSpec::Mul(_) => ModuleKind::Mul,
            ModuleSpec::Softmax(_) => ModuleKind::Softmax,
            ModuleSpec::Div(_) => ModuleKind::Div,
            ModuleSpec::Pow(_) => ModuleKind::Pow,
            ModuleSpec::AddScalar(_) => ModuleKind::AddScalar,
            ModuleSpec::MulScalar(_) => ModuleKind::MulScalar,
            ModuleSpec::DivScalar(_) => ModuleKind::DivScalar,
            ModuleSpec::PowScalar(_) => ModuleKind::PowScalar,
            ModuleSpec::Dropout(_) => ModuleKind::Dropout,
            ModuleSpec::MaskedFill(_) => ModuleKind::MaskedFill,
            ModuleSpec::Copy(_) => ModuleKind::Copy,
            ModuleSpec::Sum(_) => ModuleKind::Sum,
            ModuleSpec::Silu(_) => ModuleKind::Silu,
            ModuleSpec::View(_) => ModuleKind::View,
            ModuleSpec::Concat(_) => ModuleKind::Concat,
            ModuleSpec::Slice(_) => ModuleKind::Slice,
            ModuleSpec::Pad(_) => ModuleKind::Pad,
            ModuleSpec::RmsNorm(_) => ModuleKind::RmsNorm,
            ModuleSpec::Embedding(_) => ModuleKind::Embedding,
            ModuleSpec::LeakyRelu(_) => ModuleKind::LeakyRelu,
        }
    }

    /// Parses and validates a spec from JSON.
    pub fn from_json(text: &str) -> Result<Self> {
        let spec: ModuleSpec = serde_json::from_str(text)?;
        spec.validate()?;
        Ok(spec)
    }

    /// The spec of an element-wise `kind` ([`ModuleKind::is_elementwise`]) on `e`; `None` for
    /// other kinds.
    pub fn elementwise(kind: ModuleKind, e: Elementwise) -> Option<ModuleSpec> {
        Some(match kind {
            ModuleKind::Relu => ModuleSpec::Relu(e),
            ModuleKind::Gelu => ModuleSpec::Gelu(e),
            ModuleKind::Sigmoid => ModuleSpec::Sigmoid(e),
            ModuleKind::Tanh => ModuleSpec::Tanh(e),
            ModuleKind::Add => ModuleSpec::Add(e),
            ModuleKind::Mul => ModuleSpec::Mul(e),
            ModuleKind::Softmax => ModuleSpec::Softmax(e),
            ModuleKind::Div => ModuleSpec::Div(e),
            ModuleKind::Pow => ModuleSpec::Pow(e),
            ModuleKind::AddScalar => ModuleSpec::AddScalar(e),
            ModuleKind::MulScalar => ModuleSpec::MulScalar(e),
            ModuleKind::DivScalar => ModuleSpec::DivScalar(e),
            ModuleKind::PowScalar => ModuleSpec::PowScalar(e),
            ModuleKind::Dropout => ModuleSpec::Dropout(e),
            ModuleKind::MaskedFill => ModuleSpec::MaskedFill(e),
            ModuleKind::Copy => ModuleSpec::Copy(e),
            ModuleKind::Sum => ModuleSpec::Sum(e),
            ModuleKind::Silu => ModuleSpec::Silu(e),
            ModuleKind::View => ModuleSpec::View(e),
            ModuleKind::Concat => ModuleSpec::Concat(e),
            ModuleKind::Slice => ModuleSpec::Slice(e),
            ModuleKind::Pad => ModuleSpec::Pad(e),
            ModuleKind::LeakyRelu => ModuleSpec::LeakyRelu(e),
            _ => return None,
        })
    }

    /// The shape of an element-wise spec; `None` for other kinds.
    pub fn as_elementwise(&self) -> Option<&Elementwise> {
        match self {
            elementwise_spec!(e) => Some(e),
            _ => None,
        }
    }

    /// Checks every hyper-parameter and that the shapes are possible; errors name the value.
    pub fn validate(&self) -> Result<()> {
        self.output_dims().map(|_| ())
    }

    /// Checks the size of every tensor the spec describes ([`MAX_ELEMENTS`]), given its
    /// validated output shape.
    fn check_elements(&self, out: &Dims) -> Result<()> {
        let kind = self.kind();
        elements_at_most(kind, "input", &self.input_dims())?;
        elements_at_most(kind, "output", out)?;
        match self {
            ModuleSpec::Conv2d(c) => elements_at_most(
                kind,
                "weight",
                &[
                    c.out_channels,
                    c.in_channels / c.groups,
                    c.kernel[0],
                    c.kernel[1],
                ],
            ),
            ModuleSpec::Linear(l) => {
                elements_at_most(kind, "weight", &[l.out_features, l.in_features])
            }
            ModuleSpec::Matmul(m) => elements_at_most(kind, "right operand", &[m.heads, m.k, m.n]),
            ModuleSpec::Embedding(e) => elements_at_most(kind, "table", &[e.vocab, e.features]),
            _ => Ok(()),
        }
    }

    /// Per-sample input shape (the first operand for two-input ops).
    pub fn input_shape(&self) -> Vec<usize> {
        self.input_dims().to_vec()
    }

    /// [`ModuleSpec::input_shape`] held inline.
    pub fn input_dims(&self) -> Dims {
        match self {
            ModuleSpec::Conv2d(c) => Dims::new([c.in_channels, c.input_hw[0], c.input_hw[1]]),
            ModuleSpec::Linear(l) => Dims::new([l.tokens, l.in_features]),
            ModuleSpec::Matmul(m) => Dims::new([m.heads, m.m, m.k]),
            ModuleSpec::MaxPool2d(p) | ModuleSpec::AvgPool2d(p) => {
                Dims::new([p.channels, p.input_hw[0], p.input_hw[1]])
            }
            ModuleSpec::BatchNorm2d(b) => Dims::new([b.channels, b.input_hw[0], b.input_hw[1]]),
            ModuleSpec::LayerNorm(l) | ModuleSpec::RmsNorm(l) => Dims::new([l.tokens, l.features]),
            ModuleSpec::Embedding(e) => Dims::new([1, e.tokens]),
            elementwise_spec!(e) => Dims::new(e.shape),
        }
    }

    /// Validates the spec and infers its per-sample output shape.
    pub fn output_shape(&self) -> Result<Vec<usize>> {
        self.output_dims().map(|d| d.to_vec())
    }

    /// [`ModuleSpec::output_shape`] held inline: the prediction path validates and builds a
    /// feature row for every query, and a vector per shape showed in its profile.
    pub fn output_dims(&self) -> Result<Dims> {
        let out = self.output_dims_unchecked()?;
        self.check_elements(&out)?;
        Ok(out)
    }

    /// The output shape once every field is in range, before the tensor sizes are checked.
    fn output_dims_unchecked(&self) -> Result<Dims> {
        let kind = self.kind();
        match self {
            ModuleSpec::Conv2d(c) => {
                positive(kind, "in_channels", c.in_channels)?;
                positive(kind, "out_channels", c.out_channels)?;
                positive(kind, "groups", c.groups)?;
                for (axis, i) in [("height", 0), ("width", 1)] {
                    positive_axis(kind, "input", axis, c.input_hw[i])?;
                    positive_axis(kind, "kernel", axis, c.kernel[i])?;
                    positive_axis(kind, "stride", axis, c.stride[i])?;
                    positive_axis(kind, "dilation", axis, c.dilation[i])?;
                    bounded_axis(kind, "padding", axis, c.padding[i])?;
                }
                if c.in_channels % c.groups != 0 || c.out_channels % c.groups != 0 {
                    return Err(invalid(
                        kind,
                        format!(
                            "`groups` {} must divide in_channels {} and out_channels {}",
                            c.groups, c.in_channels, c.out_channels
                        ),
                    ));
                }
                let h = window_out(
                    kind,
                    "height",
                    c.input_hw[0],
                    c.kernel[0],
                    c.stride[0],
                    c.padding[0],
                    c.dilation[0],
                )?;
                let w = window_out(
                    kind,
                    "width",
                    c.input_hw[1],
                    c.kernel[1],
                    c.stride[1],
                    c.padding[1],
                    c.dilation[1],
                )?;
                Ok(Dims::new([c.out_channels, h, w]))
            }
            ModuleSpec::Linear(l) => {
                positive(kind, "tokens", l.tokens)?;
                positive(kind, "in_features", l.in_features)?;
                positive(kind, "out_features", l.out_features)?;
                Ok(Dims::new([l.tokens, l.out_features]))
            }
            ModuleSpec::Matmul(m) => {
                positive(kind, "heads", m.heads)?;
                positive(kind, "m", m.m)?;
                positive(kind, "k", m.k)?;
                positive(kind, "n", m.n)?;
                Ok(Dims::new([m.heads, m.m, m.n]))
            }
            ModuleSpec::MaxPool2d(p) | ModuleSpec::AvgPool2d(p) => {
                positive(kind, "channels", p.channels)?;
                let stride = p.effective_stride();
                let mut out = [p.channels, 0, 0];
                for (axis, i) in [("height", 0), ("width", 1)] {
                    positive_axis(kind, "input", axis, p.input_hw[i])?;
                    positive_axis(kind, "kernel", axis, p.kernel[i])?;
                    positive_axis(kind, "stride", axis, stride[i])?;
                    bounded_axis(kind, "padding", axis, p.padding[i])?;
                    if 2 * p.padding[i] > p.kernel[i] {
                        return Err(invalid(
                            kind,
                            format!(
                                "padding {axis} {} exceeds half the kernel {}",
                                p.padding[i], p.kernel[i]
                            ),
                        ));
                    }
                    out[1 + i] = window_out(
                        kind,
                        axis,
                        p.input_hw[i],
                        p.kernel[i],
                        stride[i],
                        p.padding[i],
                        1,
                    )?;
                }
                Ok(Dims::new(out))
            }
            ModuleSpec::BatchNorm2d(b) => {
                positive(kind, "channels", b.channels)?;
                positive(kind, "input height", b.input_hw[0])?;
                positive(kind, "input width", b.input_hw[1])?;
                Ok(self.input_dims())
            }
            ModuleSpec::LayerNorm(l) | ModuleSpec::RmsNorm(l) => {
                positive(kind, "tokens", l.tokens)?;
                positive(kind, "features", l.features)?;
                Ok(self.input_dims())
            }
            ModuleSpec::Embedding(e) => {
                positive(kind, "tokens", e.tokens)?;
                positive(kind, "vocab", e.vocab)?;
                positive(kind, "features", e.features)?;
                Ok(Dims::new([e.tokens, e.features]))
            }
            elementwise_spec!(e) => {
                for (name, v) in ["c", "h", "w"].iter().zip(e.shape) {
                    positive_axis(kind, "shape", name, v)?;
                }
                Ok(match self {
                    // The last axis is reduced to one.
                    ModuleSpec::Sum(e) => Dims::new([e.shape[0], e.shape[1], 1]),
                    _ => self.input_dims(),
                })
            }
        }
    }

    /// The canonical flat configuration: one integer per [`ModuleKind::config_columns`] entry.
    pub fn config(&self) -> Vec<i64> {
        let mut v = Vec::with_capacity(14);
        self.visit_config(|x| v.push(x));
        v
    }

    /// [`ModuleSpec::config`] as floats, appended to `out`: feature rows are built per query,
    /// without a vector per spec.
    pub fn config_into(&self, out: &mut Vec<f64>) {
        self.visit_config(|x| out.push(x as f64));
    }

    fn visit_config(&self, mut f: impl FnMut(i64)) {
        let u = |v: usize| v as i64;
        let mut all = |values: &[i64]| values.iter().for_each(|&v| f(v));
        match self {
            ModuleSpec::Conv2d(c) => all(&[
                u(c.in_channels),
                u(c.out_channels),
                u(c.input_hw[0]),
                u(c.input_hw[1]),
                u(c.kernel[0]),
                u(c.kernel[1]),
                u(c.stride[0]),
                u(c.stride[1]),
                u(c.padding[0]),
                u(c.padding[1]),
                u(c.dilation[0]),
                u(c.dilation[1]),
                u(c.groups),
                i64::from(c.bias),
            ]),
            ModuleSpec::Linear(l) => all(&[
                u(l.tokens),
                u(l.in_features),
                u(l.out_features),
                i64::from(l.bias),
            ]),
            ModuleSpec::Matmul(m) => all(&[u(m.heads), u(m.m), u(m.k), u(m.n)]),
            ModuleSpec::MaxPool2d(p) | ModuleSpec::AvgPool2d(p) => {
                let s = p.effective_stride();
                all(&[
                    u(p.channels),
                    u(p.input_hw[0]),
                    u(p.input_hw[1]),
                    u(p.kernel[0]),
                    u(p.kernel[1]),
                    u(s[0]),
                    u(s[1]),
                    u(p.padding[0]),
                    u(p.padding[1]),
                ]);
            }
            ModuleSpec::BatchNorm2d(b) => {
                all(&[u(b.channels), u(b.input_hw[0]), u(b.input_hw[1])]);
            }
            ModuleSpec::LayerNorm(l) | ModuleSpec::RmsNorm(l) => all(&[u(l.tokens), u(l.features)]),
            ModuleSpec::Embedding(e) => all(&[u(e.tokens), u(e.vocab), u(e.features)]),
            elementwise_spec!(e) => all(&e.shape.map(u)),
        }
    }

    /// The layout values, one per [`ModuleKind::layout_columns`] entry (empty for kinds
    /// without any).
    pub fn layout(&self) -> Vec<i64> {
        match self {
            ModuleSpec::Matmul(m) => vec![i64::from(m.trans_a), i64::from(m.trans_b)],
            _ => Vec::new(),
        }
    }

    /// Whether the layout is the default one (no operand transposed).
    pub fn default_layout(&self) -> bool {
        self.layout().iter().all(|&v| v == 0)
    }

    /// The spec with its layout set from values in [`ModuleKind::layout_columns`] order (the
    /// inverse of [`layout`]); each must be 0 or 1, and the error names the column.
    ///
    /// [`layout`]: ModuleSpec::layout
    pub fn with_layout(mut self, values: &[i64]) -> Result<Self> {
        let kind = self.kind();
        let columns = kind.layout_columns();
        if values.len() != columns.len() {
            return Err(invalid(
                kind,
                format!(
                    "expected {} layout values ({}), got {}",
                    columns.len(),
                    columns.join(", "),
                    values.len()
                ),
            ));
        }
        let flag = |i: usize| match values[i] {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(invalid(
                kind,
                format!("`{}` must be 0 or 1, got {other}", columns[i]),
            )),
        };
        if let ModuleSpec::Matmul(m) = &mut self {
            m.trans_a = flag(0)?;
            m.trans_b = flag(1)?;
        }
        Ok(self)
    }

    /// Rebuilds and validates a spec from its flat configuration (the inverse of [`config`]).
    ///
    /// [`config`]: ModuleSpec::config
    pub fn from_config(kind: ModuleKind, values: &[i64]) -> Result<Self> {
        let columns = kind.config_columns();
        if values.len() != columns.len() {
            return Err(invalid(
                kind,
                format!(
                    "expected {} configuration values ({}), got {}",
                    columns.len(),
                    columns.join(", "),
                    values.len()
                ),
            ));
        }
        let mut v = Vec::with_capacity(values.len());
        for (name, &x) in columns.iter().zip(values) {
            if x < 0 {
                return Err(invalid(
                    kind,
                    format!("`{name}` must not be negative, got {x}"),
                ));
            }
            v.push(usize::try_from(x).map_err(|_| invalid(kind, format!("`{name}` is {x}")))?);
        }
        let bool_at = |i: usize| -> Result<bool> {
            match v[i] {
                0 => Ok(false),
                1 => Ok(true),
                other => Err(invalid(
                    kind,
                    format!("`{}` must be 0 or 1, got {other}", columns[i]),
                )),
            }
        };
        let spec = match kind {
            ModuleKind::Conv2d => ModuleSpec::Conv2d(Conv2d {
                in_channels: v[0],
                out_channels: v[1],
                input_hw: [v[2], v[3]],
                kernel: [v[4], v[5]],
                stride: [v[6], v[7]],
                padding: [v[8], v[9]],
                dilation: [v[10], v[11]],
                groups: v[12],
                bias: bool_at(13)?,
            }),
            ModuleKind::Linear => ModuleSpec::Linear(Linear {
                tokens: v[0],
                in_features: v[1],
                out_features: v[2],
                bias: bool_at(3)?,
            }),
            ModuleKind::Matmul => ModuleSpec::Matmul(Matmul {
                heads: v[0],
                m: v[1],
                k: v[2],
                n: v[3],
                trans_a: false,
                trans_b: false,
            }),
            ModuleKind::MaxPool2d | ModuleKind::AvgPool2d => {
                let p = Pool2d {
                    channels: v[0],
                    input_hw: [v[1], v[2]],
                    kernel: [v[3], v[4]],
                    stride: Some([v[5], v[6]]),
                    padding: [v[7], v[8]],
                };
                if kind == ModuleKind::MaxPool2d {
                    ModuleSpec::MaxPool2d(p)
                } else {
                    ModuleSpec::AvgPool2d(p)
                }
            }
            ModuleKind::BatchNorm2d => ModuleSpec::BatchNorm2d(BatchNorm2d {
                channels: v[0],
                input_hw: [v[1], v[2]],
            }),
            ModuleKind::LayerNorm => ModuleSpec::LayerNorm(LayerNorm {
                tokens: v[0],
                features: v[1],
            }),
            ModuleKind::RmsNorm => ModuleSpec::RmsNorm(LayerNorm {
                tokens: v[0],
                features: v[1],
            }),
            ModuleKind::Embedding => ModuleSpec::Embedding(Embedding {
                tokens: v[0],
                vocab: v[1],
                features: v[2],
            }),
            elementwise => {
                let e = Elementwise {
                    shape: [v[0], v[1], v[2]],
                };
                ModuleSpec::elementwise(elementwise, e)
                    .ok_or_else(|| invalid(kind, "not an element-wise kind".into()))?
            }
        };
        spec.validate()?;
        Ok(spec)
    }

    /// A short human-readable description, e.g. `conv2d 3->64 k7 s2 p3 @224x224`.
    ///
    /// Written piece by piece into one string: networks describe every distinct layer on
    /// each preparation, where `format!`'s machinery was most of the cost.
    pub fn describe(&self) -> String {
        let mut t = Text(String::with_capacity(40));
        match self {
            ModuleSpec::Conv2d(c) => {
                t.s("conv2d ").n(c.in_channels).s("->").n(c.out_channels);
                t.s(" k")
                    .pair(c.kernel)
                    .s(" s")
                    .pair(c.stride)
                    .s(" p")
                    .pair(c.padding);
                if c.groups > 1 {
                    t.s(" g").n(c.groups);
                }
                t.s(" @").n(c.input_hw[0]).s("x").n(c.input_hw[1]);
            }
            ModuleSpec::Linear(l) => {
                t.s("linear ").n(l.in_features).s("->").n(l.out_features);
                t.s(" x").n(l.tokens).s(" tokens");
            }
            ModuleSpec::Matmul(m) => {
                let tr = |on: bool| if on { "^T" } else { "" };
                t.s("matmul ")
                    .n(m.heads)
                    .s("x[")
                    .n(m.m)
                    .s("x")
                    .n(m.k)
                    .s("]");
                t.s(tr(m.trans_a))
                    .s("@[")
                    .n(m.k)
                    .s("x")
                    .n(m.n)
                    .s("]")
                    .s(tr(m.trans_b));
            }
            ModuleSpec::MaxPool2d(p) | ModuleSpec::AvgPool2d(p) => {
                t.s(self.kind().name()).s(" k").pair(p.kernel);
                t.s(" s").pair(p.effective_stride()).s(" p").pair(p.padding);
                t.s(" ")
                    .n(p.channels)
                    .s("@")
                    .n(p.input_hw[0])
                    .s("x")
                    .n(p.input_hw[1]);
            }
            ModuleSpec::BatchNorm2d(b) => {
                t.s("batchnorm2d ").n(b.channels).s("@").n(b.input_hw[0]);
                t.s("x").n(b.input_hw[1]);
            }
            ModuleSpec::LayerNorm(l) => {
                t.s("layernorm ").n(l.tokens).s("x").n(l.features);
            }
            ModuleSpec::RmsNorm(l) => {
                t.s("rmsnorm ").n(l.tokens).s("x").n(l.features);
            }
            ModuleSpec::Embedding(e) => {
                t.s("embedding ")
                    .n(e.tokens)
                    .s("x[")
                    .n(e.vocab)
                    .s("x")
                    .n(e.features);
                t.s("]");
            }
            elementwise_spec!(e) => {
                t.s(self.kind().name())
                    .s(" ")
                    .n(e.shape[0])
                    .s("x")
                    .n(e.shape[1]);
                t.s("x").n(e.shape[2]);
            }
        }
        t.0
    }
}

/// [`ModuleSpec::describe`]'s string, appended to.
struct Text(String);

impl Text {
    fn s(&mut self, text: &str) -> &mut Text {
        self.0.push_str(text);
        self
    }

    /// A number in decimal.
    fn n(&mut self, mut v: usize) -> &mut Text {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        for &d in &digits[i..] {
            self.0.push(char::from(d));
        }
        self
    }

    /// A pair: `3` when both are equal, else `3x5`.
    fn pair(&mut self, p: [usize; 2]) -> &mut Text {
        self.n(p[0]);
        if p[0] != p[1] {
            self.s("x").n(p[1]);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_dims_are_the_shapes() {
        for spec in crate::testing::one_of_each_kind() {
            let out = spec.output_dims().unwrap();
            assert_eq!(&*out, spec.output_shape().unwrap().as_slice(), "{spec:?}");
            assert_eq!(&*spec.input_dims(), spec.input_shape().as_slice());
            assert!((2..=3).contains(&out.len()), "{spec:?}");
        }
        let pool = ModuleSpec::MaxPool2d(Pool2d {
            channels: 8,
            input_hw: [9, 7],
            kernel: [2, 3],
            stride: None,
            padding: [0, 1],
        });
        assert_eq!(&*pool.output_dims().unwrap(), &[8, 4, 3]);
        let bad = ModuleSpec::MaxPool2d(Pool2d {
            channels: 0,
            ..match pool {
                ModuleSpec::MaxPool2d(p) => p,
                _ => unreachable!(),
            }
        });
        assert!(bad.output_dims().is_err() && bad.validate().is_err());
    }

    fn conv(input: usize, kernel: usize, stride: usize, padding: usize) -> ModuleSpec {
        ModuleSpec::Conv2d(Conv2d {
            in_channels: 3,
            out_channels: 64,
            input_hw: [input, input],
            kernel: [kernel, kernel],
            stride: [stride, stride],
            padding: [padding, padding],
            dilation: [1, 1],
            groups: 1,
            bias: true,
        })
    }

    #[test]
    fn conv_output_shape_matches_pytorch_formula() {
        // ResNet stem: 224 -> 112.
        assert_eq!(
            conv(224, 7, 2, 3).output_shape().unwrap(),
            vec![64, 112, 112]
        );
        // 3x3 same padding keeps the size.
        assert_eq!(conv(56, 3, 1, 1).output_shape().unwrap(), vec![64, 56, 56]);
        // Floor division: (7 + 0 - 3) / 2 + 1 = 3.
        assert_eq!(conv(7, 3, 2, 0).output_shape().unwrap(), vec![64, 3, 3]);
    }

    #[test]
    fn kernel_larger_than_padded_input_is_named() {
        let err = conv(3, 7, 1, 1).validate().unwrap_err().to_string();
        assert!(err.contains("kernel height 7"), "{err}");
        assert!(err.contains("padded input 5"), "{err}");
    }

    #[test]
    fn zero_channels_is_an_error_naming_the_field() {
        let mut spec = conv(8, 3, 1, 1);
        if let ModuleSpec::Conv2d(c) = &mut spec {
            c.in_channels = 0;
        }
        let err = spec.validate().unwrap_err().to_string();
        assert!(
            err.contains("`in_channels` must be at least 1, got 0"),
            "{err}"
        );
    }

    #[test]
    fn groups_must_divide_channels() {
        let spec = ModuleSpec::Conv2d(Conv2d {
            in_channels: 6,
            out_channels: 8,
            input_hw: [8, 8],
            kernel: [3, 3],
            stride: [1, 1],
            padding: [1, 1],
            dilation: [1, 1],
            groups: 4,
            bias: false,
        });
        let err = spec.validate().unwrap_err().to_string();
        assert!(err.contains("`groups` 4"), "{err}");
    }

    #[test]
    fn dilation_widens_the_kernel() {
        let spec = ModuleSpec::Conv2d(Conv2d {
            in_channels: 1,
            out_channels: 1,
            input_hw: [10, 10],
            kernel: [3, 3],
            stride: [1, 1],
            padding: [0, 0],
            dilation: [2, 2],
            groups: 1,
            bias: false,
        });
        assert_eq!(spec.output_shape().unwrap(), vec![1, 6, 6]);
    }

    #[test]
    fn pool_default_stride_is_kernel_and_padding_is_bounded() {
        let json = r#"{"kind":"maxpool2d","channels":64,"input_hw":112,"kernel":3,"stride":2,"padding":1}"#;
        let spec = ModuleSpec::from_json(json).unwrap();
        assert_eq!(spec.output_shape().unwrap(), vec![64, 56, 56]);
        let json = r#"{"kind":"avgpool2d","channels":4,"input_hw":8,"kernel":2}"#;
        assert_eq!(
            ModuleSpec::from_json(json).unwrap().output_shape().unwrap(),
            vec![4, 4, 4]
        );
        let json = r#"{"kind":"maxpool2d","channels":4,"input_hw":8,"kernel":2,"padding":2}"#;
        let err = ModuleSpec::from_json(json).unwrap_err().to_string();
        assert!(
            err.contains("padding height 2 exceeds half the kernel 2"),
            "{err}"
        );
    }

    #[test]
    fn json_accepts_scalars_for_pairs_and_fills_defaults() {
        let json = r#"{"kind":"conv2d","in_channels":3,"out_channels":64,"input_hw":224,"kernel":7,"stride":2,"padding":3}"#;
        let spec = ModuleSpec::from_json(json).unwrap();
        assert_eq!(spec, conv(224, 7, 2, 3));
    }

    #[test]
    fn json_rejects_negative_and_unknown_fields() {
        let json = r#"{"kind":"linear","in_features":-3,"out_features":4}"#;
        let err = ModuleSpec::from_json(json).unwrap_err().to_string();
        assert!(err.contains("-3"), "{err}");
        let json = r#"{"kind":"linear","in_features":3,"out_features":4,"colour":1}"#;
        let err = ModuleSpec::from_json(json).unwrap_err().to_string();
        assert!(err.contains("colour"), "{err}");
    }

    #[test]
    fn every_kind_round_trips_through_json_and_config() {
        let specs = crate::testing::one_of_each_kind();
        assert_eq!(specs.len(), ModuleKind::ALL.len());
        for spec in specs {
            let json = serde_json::to_string(&spec).unwrap();
            assert_eq!(ModuleSpec::from_json(&json).unwrap(), spec, "{json}");
            let config = spec.config();
            assert_eq!(config.len(), spec.kind().config_columns().len());
            let back = ModuleSpec::from_config(spec.kind(), &config).unwrap();
            assert_eq!(back.config(), config);
            assert_eq!(back.output_shape().unwrap(), spec.output_shape().unwrap());
        }
    }

    #[test]
    fn descriptions_read_as_before_they_were_written_piecewise() {
        for (json, text) in [
            (
                r#"{"kind":"conv2d","in_channels":64,"out_channels":128,"input_hw":[56,28],"kernel":[3,1],"stride":2,"padding":[1,0],"groups":32}"#,
                "conv2d 64->128 k3x1 s2 p1x0 g32 @56x28",
            ),
            (
                r#"{"kind":"conv2d","in_channels":3,"out_channels":64,"input_hw":224,"kernel":7,"stride":2,"padding":3}"#,
                "conv2d 3->64 k7 s2 p3 @224x224",
            ),
            (
                r#"{"kind":"maxpool2d","channels":64,"input_hw":112,"kernel":3,"stride":2,"padding":1}"#,
                "maxpool2d k3 s2 p1 64@112x112",
            ),
            (
                r#"{"kind":"avgpool2d","channels":8,"input_hw":[9,7],"kernel":[2,3]}"#,
                "avgpool2d k2x3 s2x3 p0 8@9x7",
            ),
            (
                r#"{"kind":"linear","tokens":128,"in_features":768,"out_features":3072}"#,
                "linear 768->3072 x128 tokens",
            ),
            (
                r#"{"kind":"matmul","heads":12,"m":128,"k":64,"n":128,"trans_b":true}"#,
                "matmul 12x[128x64]@[64x128]^T",
            ),
            (
                r#"{"kind":"batchnorm2d","channels":256,"input_hw":14}"#,
                "batchnorm2d 256@14x14",
            ),
            (
                r#"{"kind":"layernorm","tokens":128,"features":768}"#,
                "layernorm 128x768",
            ),
            (
                r#"{"kind":"rmsnorm","tokens":1,"features":4096}"#,
                "rmsnorm 1x4096",
            ),
            (
                r#"{"kind":"embedding","tokens":512,"vocab":50257,"features":768}"#,
                "embedding 512x[50257x768]",
            ),
            (
                r#"{"kind":"relu","shape":[1,10,1000000]}"#,
                "relu 1x10x1000000",
            ),
        ] {
            assert_eq!(ModuleSpec::from_json(json).unwrap().describe(), text);
        }
    }

    #[test]
    fn matmul_transposes_are_optional_in_json_and_kept_apart_from_the_config() {
        let plain = ModuleSpec::from_json(r#"{"kind":"matmul","m":4,"k":8,"n":6}"#).unwrap();
        // Untransposed specs serialise as before the fields existed.
        assert!(!serde_json::to_string(&plain).unwrap().contains("trans"));
        assert!(plain.default_layout());
        let json = r#"{"kind":"matmul","m":4,"k":8,"n":6,"trans_a":true}"#;
        let t = ModuleSpec::from_json(json).unwrap();
        assert_eq!(t.layout(), vec![1, 0]);
        assert_ne!(t, plain);
        // Same shape and work, so the configuration (and every feature row) is the same.
        assert_eq!(t.config(), plain.config());
        assert_eq!(t.describe(), "matmul 1x[4x8]^T@[8x6]");
        assert_eq!(plain.clone().with_layout(&[1, 0]).unwrap(), t);
        let err = plain.with_layout(&[0, 2]).unwrap_err().to_string();
        assert!(err.contains("`trans_b` must be 0 or 1, got 2"), "{err}");
        assert!(ModuleKind::Linear.layout_columns().is_empty());
    }

    #[test]
    fn from_config_rejects_negative_values_by_name() {
        let err = ModuleSpec::from_config(ModuleKind::Linear, &[1, -5, 4, 1])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`in_features` must not be negative, got -5"),
            "{err}"
        );
    }

    #[test]
    fn kind_serialises_as_its_name() {
        // Regression: `masked_fill` serialised as `maskedfill` in predictions.
        for kind in ModuleKind::ALL {
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{}\"", kind.name()));
            assert_eq!(serde_json::from_str::<ModuleKind>(&json).unwrap(), kind);
        }
    }

    #[test]
    fn kind_parses_aliases() {
        assert_eq!("bmm".parse::<ModuleKind>().unwrap(), ModuleKind::Matmul);
        assert_eq!(
            "MaxPool2d".parse::<ModuleKind>().unwrap(),
            ModuleKind::MaxPool2d
        );
        assert!("conv3d".parse::<ModuleKind>().is_err());
    }
}
