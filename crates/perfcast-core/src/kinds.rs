//! The table of module kinds: one row per kind with what every crate needs to know of it
//! beyond its shape (its name, nominal work per element, a second operand, whether it fuses as
//! a pointwise op, what its backward keeps), so features, fusion and the memory model read one
//! row instead of each matching on every kind. A new kind adds its variants in `spec` and one
//! row here; the profiler's burn op is the only other place that must know it (`docs/extending.md`).

use crate::spec::ModuleKind;

/// What a kind's backward pass keeps of its forward pass, per sample (the memory model's input).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keeps {
    /// Its first input (a GEMM's activation, a norm's input, a smooth activation's input).
    Input,
    /// Every input (a product's or quotient's operands).
    Inputs,
    /// Every input and its own output (a power's gradient reads both).
    InputsAndOutput,
    /// Its own output (ReLU, sigmoid, tanh, softmax: the gradient is a function of it).
    Output,
    /// Its first input and the index of each output's source (max pooling).
    InputAndIndices,
    /// A one-byte mask per output element (dropout, masked fill).
    Mask,
    /// Nothing: linear in its input, or only moving it.
    Nothing,
}

/// One kind's row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KindInfo {
    /// The kind.
    pub kind: ModuleKind,
    /// Its name in file names, JSON and the CLI.
    pub name: &'static str,
    /// Nominal floating-point operations per element of its pass (input elements; output
    /// elements for an embedding); 0 for kinds whose work follows from their shape (GEMMs,
    /// pools) or that compute nothing (a view). Conventional counts, good enough to rank work:
    /// the regressors learn each kind's true cost.
    pub elem_flops: f64,
    /// Bytes of a second operand per input element, as a share of an fp32 element (1 for an
    /// element-wise binary op, 1/4 for a one-byte mask, 0 for none).
    pub second_operand: f64,
    /// Whether a fusing backend folds it into its neighbour as a pointwise op.
    pub pointwise: bool,
    /// What its backward keeps.
    pub keeps: Keeps,
}

const fn row(
    kind: ModuleKind,
    name: &'static str,
    elem_flops: f64,
    second_operand: f64,
    pointwise: bool,
    keeps: Keeps,
) -> KindInfo {
    KindInfo {
        kind,
        name,
        elem_flops,
        second_operand,
        pointwise,
        keeps,
    }
}

use Keeps::*;
use ModuleKind as K;

/// Every kind's row, in [`ModuleKind::ALL`]'s order.
pub const KINDS: &[KindInfo] = &[
    row(K::Conv2d, "conv2d", 0.0, 0.0, false, Input),
    row(K::Linear, "linear", 0.0, 0.0, false, Input),
    row(K::Matmul, "matmul", 0.0, 0.0, false, Inputs),
    row(K::MaxPool2d, "maxpool2d", 0.0, 0.0, false, InputAndIndices),
    row(K::AvgPool2d, "avgpool2d", 0.0, 0.0, false, Nothing),
    row(K::BatchNorm2d, "batchnorm2d", 2.0, 0.0, false, Input),
    row(K::LayerNorm, "layernorm", 5.0, 0.0, false, Input),
    row(K::Relu, "relu", 1.0, 0.0, true, Output),
    // An erf plus a few multiply-adds.
    row(K::Gelu, "gelu", 8.0, 0.0, true, Input),
    row(K::Sigmoid, "sigmoid", 4.0, 0.0, true, Output),
    row(K::Tanh, "tanh", 4.0, 0.0, true, Output),
    row(K::Add, "add", 1.0, 1.0, true, Nothing),
    row(K::Mul, "mul", 1.0, 1.0, true, Inputs),
    row(K::Softmax, "softmax", 5.0, 0.0, false, Output),
    row(K::Div, "div", 1.0, 1.0, true, Inputs),
    // exp(b ln a): a log, a multiply and an exp.
    row(K::Pow, "pow", 8.0, 1.0, true, InputsAndOutput),
    row(K::AddScalar, "add_scalar", 1.0, 0.0, true, Nothing),
    row(K::MulScalar, "mul_scalar", 1.0, 0.0, true, Nothing),
    row(K::DivScalar, "div_scalar", 1.0, 0.0, true, Nothing),
    row(K::PowScalar, "pow_scalar", 8.0, 0.0, true, Input),
    // A random draw, a compare and a multiply per element.
    row(K::Dropout, "dropout", 3.0, 0.0, true, Mask),
    // A copy does no arithmetic; one nominal operation per element moved keeps its work
    // positive (models read work in log space). The mask is one byte per element.
    row(K::MaskedFill, "masked_fill", 1.0, 0.25, true, Mask),
    row(K::Copy, "copy", 1.0, 0.0, false, Nothing),
    row(K::Sum, "sum", 1.0, 0.0, false, Nothing),
    row(K::Silu, "silu", 5.0, 0.0, true, Input),
    // A view moves nothing and computes nothing.
    row(K::View, "view", 0.0, 0.0, false, Nothing),
    row(K::Concat, "concat", 1.0, 0.0, false, Nothing),
    row(K::Slice, "slice", 1.0, 0.0, false, Nothing),
    row(K::Pad, "pad", 1.0, 0.0, false, Nothing),
    // A square, a mean, a reciprocal square root and a scale: LayerNorm less the centring.
    row(K::RmsNorm, "rmsnorm", 4.0, 0.0, false, Input),
    // An embedding's backward scatters into its table by the token ids it read.
    row(K::Embedding, "embedding", 1.0, 0.0, false, Input),
    // A compare and a multiply; the gradient follows the input's sign.
    row(K::LeakyRelu, "leaky_relu", 2.0, 0.0, true, Input),
];

impl ModuleKind {
    /// The kind's row of [`KINDS`].
    pub fn info(self) -> &'static KindInfo {
        // The table is in declaration order, which a test checks.
        &KINDS[self as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_own_row_in_order() {
        assert_eq!(KINDS.len(), ModuleKind::ALL.len());
        for (i, (&kind, info)) in ModuleKind::ALL.iter().zip(KINDS).enumerate() {
            assert_eq!(kind as usize, i, "ALL is in declaration order");
            assert_eq!(info.kind, kind);
            assert_eq!(kind.info().kind, kind);
            let json = serde_json::to_string(&kind).expect("a kind serialises");
            assert_eq!(
                json,
                format!("\"{}\"", info.name),
                "the serde name is the row's"
            );
        }
    }

    #[test]
    fn pointwise_kinds_are_element_wise_and_only_binary_ones_read_a_second_operand() {
        for info in KINDS {
            if info.pointwise {
                assert!(info.kind.is_elementwise(), "{:?}", info.kind);
            }
            if info.second_operand > 0.0 {
                assert!(info.kind.is_elementwise(), "{:?}", info.kind);
            }
        }
    }
}
