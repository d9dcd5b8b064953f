//! Canonical forms and the physical bound of GPU predictions.
//!
//! A GPU library runs the same kernel for the same work however a framework wrote it down:
//! PyTorch hands cuBLAS a linear layer over `(batch, tokens, in)` as one GEMM of
//! `batch x tokens` rows, and a batched matmul over `(batch, heads, m, k)` as one bmm of
//! `batch x heads` matrices; element-wise kernels see only the element count (and softmax and
//! LayerNorm the length of the rows they reduce). [`canonical`] rewrites a query into that one
//! form before any feature is computed, so equal work gets equal predictions.
//!
//! [`least_time_s`] is the roofline of the least work a library algorithm needs for the op on
//! the device's spec: no kernel can run faster, so a GPU prediction never goes below it.

use crate::context::{Context, Phase};
use crate::device::DeviceSpec;
use crate::features;
use crate::spec::{Elementwise, LayerNorm, MAX_AXIS, ModuleSpec};

/// The canonical form of `spec` at `context` for a GPU: the same work at batch 1, with the
/// batch folded into the rows the kernel sees. `None` when the query already is canonical, or
/// when folding would pass a size limit ([`MAX_AXIS`] rows), where it is kept as written.
///
/// - linear `(B, T, in -> out)` -> `(1, B*T, in -> out)`: GEMM(B*T, in, out);
/// - matmul `(B, H, m, k, n)` -> `(1, B*H, m, k, n)`: bmm(B*H, m, k, n);
/// - LayerNorm and RMSNorm `(B, T, F)` -> `(1, B*T, F)`; an embedding's `B x T` lookups -> `B*T`;
/// - element-wise and softmax `(B, c, h, w)` -> `(1, 1, B*c*h, w)` (softmax reduces over `w`).
///
/// Convolutions and pooling keep their batch: their kernels tile the batch into the GEMM's
/// rows already (implicit GEMM), and the features describe that.
pub fn canonical(spec: &ModuleSpec, context: &Context) -> Option<(ModuleSpec, Context)> {
    let b = context.batch;
    let at_one = Context {
        batch: 1,
        ..context.clone()
    };
    let fold = |rows: usize| rows.checked_mul(b).filter(|&r| r <= MAX_AXIS);
    let spec = match spec {
        ModuleSpec::Linear(l) if b > 1 => ModuleSpec::Linear(crate::Linear {
            tokens: fold(l.tokens)?,
            ..l.clone()
        }),
        ModuleSpec::Matmul(m) if b > 1 => ModuleSpec::Matmul(crate::Matmul {
            heads: fold(m.heads)?,
            ..m.clone()
        }),
        ModuleSpec::LayerNorm(l) if b > 1 => ModuleSpec::LayerNorm(LayerNorm {
            tokens: fold(l.tokens)?,
            features: l.features,
        }),
        ModuleSpec::RmsNorm(l) if b > 1 => ModuleSpec::RmsNorm(LayerNorm {
            tokens: fold(l.tokens)?,
            features: l.features,
        }),
        ModuleSpec::Embedding(e) if b > 1 => ModuleSpec::Embedding(crate::Embedding {
            tokens: fold(e.tokens)?,
            ..e.clone()
        }),
        _ => {
            let e = spec.as_elementwise()?;
            let rows = fold(e.shape[0].checked_mul(e.shape[1])?)?;
            if b == 1 && e.shape[0] == 1 {
                return None;
            }
            ModuleSpec::elementwise(
                spec.kind(),
                Elementwise {
                    shape: [1, rows, e.shape[2]],
                },
            )?
        }
    };
    Some((spec, at_one))
}

/// How many times fewer multiplies than direct convolution the cheapest library algorithm
/// needs: Winograd F(2x2, rxr) for stride-1, undilated, ungrouped r x r kernels (r >= 3)
/// computes a 2x2 output tile from a (r+1)x(r+1) input tile with (r+1)^2 multiplies instead of
/// 4r^2 (2.25x for 3x3, which cuDNN picks); 1 otherwise.
pub fn conv_work_saving(spec: &ModuleSpec) -> f64 {
    let ModuleSpec::Conv2d(c) = spec else {
        return 1.0;
    };
    let [kh, kw] = c.kernel;
    if c.groups == 1 && c.stride == [1, 1] && c.dilation == [1, 1] && kh == kw && kh >= 3 {
        let r = kh as f64;
        4.0 * r * r / ((r + 1.0) * (r + 1.0))
    } else {
        1.0
    }
}

/// The shortest time, seconds, in which `device` can run `spec` at `context`: the roofline of
/// the least work any library algorithm needs (the forward FLOPs, cut by
/// [`conv_work_saving`]; a training step's backward adds two GEMM-sized passes for GEMM-like
/// kinds and one pass for the rest) and of the least traffic (each operand and parameter read
/// once and the output written once; a training step also reads the output's gradient and
/// writes the input's).
pub fn least_time_s(spec: &ModuleSpec, context: &Context, device: &DeviceSpec) -> f64 {
    let (compute, memory) = least_time_parts_s(spec, context, device);
    compute.max(memory)
}

/// The two sides of [`least_time_s`], seconds: the least work at the peak, and the least
/// traffic at the memory bandwidth.
pub fn least_time_parts_s(spec: &ModuleSpec, context: &Context, device: &DeviceSpec) -> (f64, f64) {
    // A view moves and computes nothing, forward or backward.
    if spec.kind().is_zero_cost() {
        return (0.0, 0.0);
    }
    let d = features::derive(spec, context.batch);
    let training = context.phase == Phase::Training;
    let flops = least_flops(spec, &d, context.phase);
    let traffic = d.bytes_read + d.bytes_written;
    let bytes = if training {
        traffic + d.bytes_written + features::F32_BYTES * d.input_elems
    } else {
        traffic
    } * device.element_scale();
    (
        flops / (device.peak_gflops * 1e9),
        bytes / (device.mem_bandwidth_gbs * 1e9),
    )
}

/// The shortest time, seconds, in which a CPU can run `spec` by compute alone: the least work
/// (as in [`least_time_s`]) at the device's measured GEMM peak on every hardware thread. Only
/// GEMM-like kinds (conv2d, linear, matmul) have one; the rest are `0.0`.
///
/// The peak is not shared out over the query's threads, because one thread runs faster than
/// its share and `peak / threads` would be a floor some layers beat; nor is there a traffic
/// term, because operands that sit in cache stream far faster than the DRAM triad measures
/// (docs/accuracy.md#figures-behind-code-choices).
pub fn least_cpu_compute_time_s(spec: &ModuleSpec, context: &Context, device: &DeviceSpec) -> f64 {
    if !matches!(
        spec,
        ModuleSpec::Conv2d(_) | ModuleSpec::Linear(_) | ModuleSpec::Matmul(_)
    ) {
        return 0.0;
    }
    let d = features::derive(spec, context.batch);
    least_flops(spec, &d, context.phase) / (device.peak_gflops * 1e9)
}

/// The least work of `spec` (derived as `d`) in `phase`: its FLOPs, cut by
/// [`conv_work_saving`].
pub(crate) fn least_flops(spec: &ModuleSpec, d: &features::Derived, phase: Phase) -> f64 {
    let flops = match phase {
        Phase::Training => d.train_flops,
        Phase::Inference => d.flops,
    };
    flops / conv_work_saving(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Linear, Matmul};

    fn ctx(batch: usize) -> Context {
        Context {
            batch,
            phase: Phase::Inference,
            threads: 1,
            utilisation: 0.0,
        }
    }

    #[test]
    fn gemm_like_modules_fold_their_batch_into_rows() {
        let linear = |tokens| {
            ModuleSpec::Linear(Linear {
                tokens,
                in_features: 1024,
                out_features: 4096,
                bias: true,
            })
        };
        // The V100 example: 1 x 4096 tokens, 8 x 512 and 4096 x 1 are one GEMM.
        let forms = [(linear(4096), 1), (linear(512), 8), (linear(1), 4096)];
        let canon: Vec<(ModuleSpec, Context)> = forms
            .iter()
            .map(|(s, b)| canonical(s, &ctx(*b)).unwrap_or((s.clone(), ctx(*b))))
            .collect();
        assert!(canon.windows(2).all(|w| w[0] == w[1]), "{canon:?}");
        assert_eq!(canon[0].0, linear(4096));
        let bmm = |heads| {
            ModuleSpec::Matmul(Matmul {
                heads,
                m: 512,
                k: 64,
                n: 512,
                trans_a: false,
                trans_b: false,
            })
        };
        assert_eq!(canonical(&bmm(16), &ctx(8)), Some((bmm(128), ctx(1))));
        assert_eq!(canonical(&bmm(128), &ctx(1)), None);
        // Softmax keeps the length of the rows it reduces.
        let sm = ModuleSpec::Softmax(Elementwise {
            shape: [12, 64, 64],
        });
        let (c, _) = canonical(&sm, &ctx(4)).unwrap();
        assert_eq!(
            c,
            ModuleSpec::Softmax(Elementwise {
                shape: [1, 4 * 12 * 64, 64]
            })
        );
        // Too many rows to fold: kept as written.
        assert_eq!(canonical(&linear(1 << 20), &ctx(1 << 10)), None);
    }

    #[test]
    fn cpu_compute_floor_is_the_work_at_the_whole_peak_for_gemms_only() {
        let device = crate::testing::cpu_device(); // 100 GFLOP/s
        let linear = ModuleSpec::Linear(Linear {
            tokens: 128,
            in_features: 768,
            out_features: 3072,
            bias: false,
        });
        let flops = 2.0 * 128.0 * 768.0 * 3072.0;
        let one = least_cpu_compute_time_s(&linear, &ctx(1), &device);
        assert!((one - flops / 100e9).abs() < 1e-12, "{one}");
        // The same work at batch 2 of 64 tokens.
        let half = ModuleSpec::Linear(Linear {
            tokens: 64,
            in_features: 768,
            out_features: 3072,
            bias: false,
        });
        let split = least_cpu_compute_time_s(&half, &ctx(2), &device);
        assert!((split - one).abs() < 1e-12, "{split} vs {one}");
        let train = Context {
            phase: Phase::Training,
            ..ctx(1)
        };
        assert!((least_cpu_compute_time_s(&linear, &train, &device) - 3.0 * one).abs() < 1e-12);
        let relu = ModuleSpec::Relu(Elementwise {
            shape: [64, 56, 56],
        });
        assert_eq!(least_cpu_compute_time_s(&relu, &ctx(8), &device), 0.0);
    }

    #[test]
    fn least_time_counts_winograd_for_3x3_convs_only() {
        let conv = |k: usize, stride: usize| {
            ModuleSpec::Conv2d(crate::Conv2d {
                in_channels: 64,
                out_channels: 64,
                input_hw: [56, 56],
                kernel: [k, k],
                stride: [stride, stride],
                padding: [k / 2, k / 2],
                dilation: [1, 1],
                groups: 1,
                bias: false,
            })
        };
        assert_eq!(conv_work_saving(&conv(3, 1)), 2.25);
        assert_eq!(conv_work_saving(&conv(3, 2)), 1.0);
        assert_eq!(conv_work_saving(&conv(1, 1)), 1.0);
        let dev = crate::testing::cpu_device();
        let direct = features::derive(&conv(3, 1), 8).flops / (dev.peak_gflops * 1e9);
        let t = least_time_s(&conv(3, 1), &ctx(8), &dev);
        assert!(
            t < direct && t >= direct / 2.25 * (1.0 - 1e-12),
            "{t} {direct}"
        );
    }
}
