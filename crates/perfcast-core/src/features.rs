//! Derived features of a module in a context: FLOPs, bytes moved, parameters, intensity.
//!
//! Computed at training and query time from the spec, never stored as the only copy, so the
//! feature set can evolve without re-measuring. Counts assume fp32 and one pass over each
//! operand (no cache model): they are inputs for regressors, not predictions themselves.

use serde::{Deserialize, Serialize};

use crate::spec::ModuleSpec;

/// Bytes per fp32 element.
pub const F32_BYTES: f64 = 4.0;

/// Nominal floating-point operations per element for the non-GEMM kinds (the kind's row of
/// [`crate::kinds::KINDS`]).
fn per_element_flops(spec: &ModuleSpec) -> f64 {
    spec.kind().info().elem_flops
}

/// Derived, per-batch quantities of one module (forward pass unless named otherwise).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Derived {
    /// Floating-point operations of the forward pass (multiply-add = 2).
    pub flops: f64,
    /// Estimated operations of a training step (forward + backward).
    pub train_flops: f64,
    /// Bytes read by the forward pass: inputs and parameters.
    pub bytes_read: f64,
    /// Bytes written by the forward pass: the output.
    pub bytes_written: f64,
    /// Trainable parameters.
    pub params: f64,
    /// Output elements for the whole batch.
    pub output_elems: f64,
    /// Input elements for the whole batch (first operand).
    pub input_elems: f64,
    /// flops / (bytes_read + bytes_written).
    pub arithmetic_intensity: f64,
}

fn product(dims: &[usize]) -> f64 {
    dims.iter().map(|&d| d as f64).product()
}

/// Derived features of a *valid* spec at a batch size.
///
/// The spec must have passed validation (an invalid spec has no output shape; this returns
/// zeros for it rather than panicking).
pub fn derive(spec: &ModuleSpec, batch: usize) -> Derived {
    derive_with(spec, batch, &spec.output_dims().unwrap_or_default())
}

/// [`derive`] given the spec's output shape (`ModuleSpec::output_dims`), for callers that
/// need the shape too: feature rows are built per query.
pub fn derive_with(spec: &ModuleSpec, batch: usize, out: &[usize]) -> Derived {
    let n = batch as f64;
    let out_elems = n * product(out);
    let in_elems = n * product(&spec.input_dims());
    let (flops, params, extra_inputs) = match spec {
        ModuleSpec::Conv2d(c) => {
            let per_out = 2.0 * (c.in_channels / c.groups.max(1)) as f64 * product(&c.kernel);
            let bias = if c.bias { 1.0 } else { 0.0 };
            let params = c.out_channels as f64
                * ((c.in_channels / c.groups.max(1)) as f64 * product(&c.kernel) + bias);
            (out_elems * (per_out + bias), params, 0.0)
        }
        ModuleSpec::Linear(l) => {
            let bias = if l.bias { 1.0 } else { 0.0 };
            let params = l.out_features as f64 * (l.in_features as f64 + bias);
            (out_elems * (2.0 * l.in_features as f64 + bias), params, 0.0)
        }
        ModuleSpec::Matmul(m) => {
            let right = n * (m.heads * m.k * m.n) as f64;
            (out_elems * 2.0 * m.k as f64, 0.0, right)
        }
        ModuleSpec::MaxPool2d(p) | ModuleSpec::AvgPool2d(p) => {
            (out_elems * product(&p.kernel), 0.0, 0.0)
        }
        ModuleSpec::BatchNorm2d(b) => (
            in_elems * per_element_flops(spec),
            2.0 * b.channels as f64,
            0.0,
        ),
        ModuleSpec::LayerNorm(l) => (
            in_elems * per_element_flops(spec),
            2.0 * l.features as f64,
            0.0,
        ),
        ModuleSpec::RmsNorm(l) => (in_elems * per_element_flops(spec), l.features as f64, 0.0),
        // One nominal operation per output element (a row copy).
        ModuleSpec::Embedding(e) => (
            out_elems * per_element_flops(spec),
            (e.vocab * e.features) as f64,
            0.0,
        ),
        // A binary op's second operand, or a mask, as its row says.
        _ => (
            in_elems * per_element_flops(spec),
            0.0,
            in_elems * spec.kind().info().second_operand,
        ),
    };
    // Backward of a GEMM-like op costs two more GEMMs (input and weight gradients); element-wise
    // ops cost about one more pass.
    let backward_factor = match spec {
        ModuleSpec::Conv2d(_) | ModuleSpec::Linear(_) | ModuleSpec::Matmul(_) => 2.0,
        _ => 1.0,
    };
    let (bytes_read, bytes_written) = match spec {
        // Only the gathered rows move (as many as the output), with 8-byte (int64) indices.
        ModuleSpec::Embedding(_) => (
            F32_BYTES * out_elems + 8.0 * in_elems,
            F32_BYTES * out_elems,
        ),
        ModuleSpec::View(_) => (0.0, 0.0),
        _ => (
            F32_BYTES * (in_elems + extra_inputs + params),
            F32_BYTES * out_elems,
        ),
    };
    let moved = bytes_read + bytes_written;
    Derived {
        flops,
        train_flops: flops * (1.0 + backward_factor),
        bytes_read,
        bytes_written,
        params,
        output_elems: out_elems,
        input_elems: in_elems,
        arithmetic_intensity: if moved > 0.0 { flops / moved } else { 0.0 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Conv2d, Linear, Matmul};

    #[test]
    fn linear_flops_are_two_mnk_plus_bias() {
        let spec = ModuleSpec::Linear(Linear {
            tokens: 1,
            in_features: 512,
            out_features: 256,
            bias: true,
        });
        let d = derive(&spec, 4);
        assert_eq!(d.flops, 4.0 * 256.0 * (2.0 * 512.0 + 1.0));
        assert_eq!(d.params, 256.0 * 513.0);
        assert_eq!(d.bytes_written, 4.0 * 4.0 * 256.0);
        assert_eq!(d.bytes_read, 4.0 * (4.0 * 512.0 + 256.0 * 513.0));
    }

    #[test]
    fn resnet_stem_conv_flops() {
        // 3->64, k7 s2 p3 on 224x224: 118 MMACs per image, i.e. 2 x 118.0 MFLOP.
        let spec = ModuleSpec::Conv2d(Conv2d {
            in_channels: 3,
            out_channels: 64,
            input_hw: [224, 224],
            kernel: [7, 7],
            stride: [2, 2],
            padding: [3, 3],
            dilation: [1, 1],
            groups: 1,
            bias: false,
        });
        let d = derive(&spec, 1);
        let macs = 64.0 * 112.0 * 112.0 * 3.0 * 49.0;
        assert!((d.flops - 2.0 * macs).abs() < 1.0);
        assert_eq!(d.params, 64.0 * 3.0 * 49.0);
        assert!((d.train_flops - 3.0 * d.flops).abs() < 1.0);
    }

    #[test]
    fn depthwise_conv_counts_one_input_channel_per_output() {
        let spec = ModuleSpec::Conv2d(Conv2d {
            in_channels: 32,
            out_channels: 32,
            input_hw: [10, 10],
            kernel: [3, 3],
            stride: [1, 1],
            padding: [1, 1],
            dilation: [1, 1],
            groups: 32,
            bias: false,
        });
        let d = derive(&spec, 1);
        assert_eq!(d.flops, 32.0 * 100.0 * 2.0 * 9.0);
        assert_eq!(d.params, 32.0 * 9.0);
    }

    #[test]
    fn matmul_reads_both_operands() {
        let spec = ModuleSpec::Matmul(Matmul {
            heads: 2,
            m: 3,
            k: 4,
            n: 5,
            trans_a: false,
            trans_b: false,
        });
        let d = derive(&spec, 1);
        assert_eq!(d.flops, 2.0 * 3.0 * 5.0 * 2.0 * 4.0);
        assert_eq!(d.bytes_read, 4.0 * (2.0 * 3.0 * 4.0 + 2.0 * 4.0 * 5.0));
        assert!(d.arithmetic_intensity > 0.0);
    }

    #[test]
    fn embedding_moves_the_rows_it_reads_not_the_table() {
        let spec = ModuleSpec::Embedding(crate::Embedding {
            tokens: 10,
            vocab: 50_000,
            features: 8,
        });
        let d = derive(&spec, 2);
        // 2 x 10 rows of 8 floats read and written, 20 int64 indices read.
        assert_eq!(d.bytes_read, 4.0 * 160.0 + 8.0 * 20.0);
        assert_eq!(d.bytes_written, 4.0 * 160.0);
        assert_eq!(d.params, 400_000.0);
        assert_eq!(d.output_elems, 160.0);
    }

    #[test]
    fn every_kind_has_positive_work_and_bytes() {
        for spec in crate::testing::one_of_each_kind() {
            let d = derive(&spec, 2);
            if spec.kind().is_zero_cost() {
                // A view is the one kind without work: predictors answer it as zero, marked.
                assert_eq!((d.flops, d.bytes_read, d.bytes_written), (0.0, 0.0, 0.0));
                continue;
            }
            assert!(d.flops > 0.0, "{}", spec.describe());
            assert!(d.bytes_read > 0.0 && d.bytes_written > 0.0);
            assert!(d.train_flops >= d.flops);
        }
    }
}
