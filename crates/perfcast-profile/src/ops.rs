//! Module runners: build a [`ModuleSpec`]'s operands on a device and run it once per call.
//!
//! Every operand is a rank-4 tensor with the batch first (linear and layernorm as
//! `[batch, 1, tokens, features]`, matmul as `[batch, heads, m, k]`), so one closure type
//! serves every kind. A training step is the forward pass, a sum, and the backward pass that
//! computes input and parameter gradients (the optimiser update belongs to whole networks).

use burn::tensor::activation::{gelu, relu, sigmoid, softmax, tanh};
use burn::tensor::module::{
    avg_pool2d, batch_norm, batch_norm_train, conv2d, layer_norm, linear, max_pool2d,
};
use burn::tensor::ops::{AvgPoolOptions, ConvOptions, MaxPoolOptions};
use burn::tensor::{Device, Distribution, Tensor};
use perfcast_core::{Context, ModuleSpec, Phase, features};

/// Rough peak bytes a configuration allocates (operands, output, im2col buffer, and for a
/// training step the gradients): used to refuse configurations that would exhaust memory,
/// since an allocation failure aborts the process instead of failing one row.
pub fn estimated_bytes(spec: &ModuleSpec, context: &Context) -> f64 {
    let d = features::derive(spec, context.batch);
    let mut bytes = d.bytes_read + d.bytes_written;
    if let ModuleSpec::Conv2d(c) = spec {
        // Lowering to a GEMM materialises the unfolded input.
        let patches = (c.in_channels * c.kernel[0] * c.kernel[1]) as f64;
        let out_hw = d.output_elems / c.out_channels as f64;
        bytes += 4.0 * patches * out_hw;
    }
    match context.phase {
        Phase::Inference => bytes,
        Phase::Training => 3.0 * bytes,
    }
}

type Forward = Box<dyn Fn() -> Tensor<4>>;

/// Builds operands for `spec` at `batch` on `device` and returns its forward pass.
///
/// With `grad`, leaves (input and parameters) require gradients; `device` must then be an
/// autodiff device.
fn forward(spec: &ModuleSpec, batch: usize, device: &Device, grad: bool) -> Forward {
    let leaf4 = |shape: [usize; 4]| {
        let t = Tensor::<4>::random(shape, Distribution::Uniform(-1.0, 1.0), device);
        if grad { t.require_grad() } else { t }
    };
    let leaf2 = |shape: [usize; 2]| {
        let t = Tensor::<2>::random(shape, Distribution::Uniform(-0.1, 0.1), device);
        if grad { t.require_grad() } else { t }
    };
    let leaf1 = |len: usize, lo: f64, hi: f64| {
        let t = Tensor::<1>::random([len], Distribution::Uniform(lo, hi), device);
        if grad { t.require_grad() } else { t }
    };
    let n = batch;
    match spec {
        ModuleSpec::Conv2d(c) => {
            let x = leaf4([n, c.in_channels, c.input_hw[0], c.input_hw[1]]);
            let w = leaf4([
                c.out_channels,
                c.in_channels / c.groups,
                c.kernel[0],
                c.kernel[1],
            ]);
            let b = c.bias.then(|| leaf1(c.out_channels, -0.1, 0.1));
            let options = ConvOptions::new(c.stride, c.padding, c.dilation, c.groups);
            Box::new(move || conv2d(x.clone(), w.clone(), b.clone(), options.clone()))
        }
        ModuleSpec::Linear(l) => {
            let x = leaf4([n, 1, l.tokens, l.in_features]);
            let w = leaf2([l.in_features, l.out_features]);
            let b = l.bias.then(|| leaf1(l.out_features, -0.1, 0.1));
            Box::new(move || linear(x.clone(), w.clone(), b.clone()))
        }
        ModuleSpec::Matmul(m) => {
            let x = leaf4([n, m.heads, m.m, m.k]);
            let y = leaf4([n, m.heads, m.k, m.n]);
            Box::new(move || x.clone().matmul(y.clone()))
        }
        ModuleSpec::MaxPool2d(p) => {
            let x = leaf4([n, p.channels, p.input_hw[0], p.input_hw[1]]);
            let options = MaxPoolOptions::new(p.kernel)
                .with_stride(p.effective_stride())
                .with_padding(p.padding);
            Box::new(move || max_pool2d(x.clone(), options.clone()))
        }
        ModuleSpec::AvgPool2d(p) => {
            let x = leaf4([n, p.channels, p.input_hw[0], p.input_hw[1]]);
            let options = AvgPoolOptions::new(p.kernel)
                .with_stride(p.effective_stride())
                .with_padding(p.padding);
            Box::new(move || avg_pool2d(x.clone(), options.clone()))
        }
        ModuleSpec::BatchNorm2d(b) => {
            let x = leaf4([n, b.channels, b.input_hw[0], b.input_hw[1]]);
            let gamma = leaf1(b.channels, 0.5, 1.5);
            let beta = leaf1(b.channels, -0.1, 0.1);
            if grad {
                // Training mode normalises with the batch's own statistics.
                Box::new(move || {
                    batch_norm_train(x.clone(), gamma.clone(), beta.clone(), 1e-5).output
                })
            } else {
                let mean =
                    Tensor::<1>::random([b.channels], Distribution::Uniform(-0.1, 0.1), device);
                let var =
                    Tensor::<1>::random([b.channels], Distribution::Uniform(0.5, 1.5), device);
                Box::new(move || {
                    batch_norm(
                        x.clone(),
                        gamma.clone(),
                        beta.clone(),
                        mean.clone(),
                        var.clone(),
                        1e-5,
                    )
                })
            }
        }
        ModuleSpec::LayerNorm(l) => {
            let x = leaf4([n, 1, l.tokens, l.features]);
            let gamma = leaf1(l.features, 0.5, 1.5);
            let beta = leaf1(l.features, -0.1, 0.1);
            Box::new(move || layer_norm(x.clone(), gamma.clone(), Some(beta.clone()), 1e-5))
        }
        ModuleSpec::Relu(e) => {
            let x = leaf4([n, e.shape[0], e.shape[1], e.shape[2]]);
            Box::new(move || relu(x.clone()))
        }
        ModuleSpec::Gelu(e) => {
            let x = leaf4([n, e.shape[0], e.shape[1], e.shape[2]]);
            Box::new(move || gelu(x.clone()))
        }
        ModuleSpec::Sigmoid(e) => {
            let x = leaf4([n, e.shape[0], e.shape[1], e.shape[2]]);
            Box::new(move || sigmoid(x.clone()))
        }
        ModuleSpec::Tanh(e) => {
            let x = leaf4([n, e.shape[0], e.shape[1], e.shape[2]]);
            Box::new(move || tanh(x.clone()))
        }
        ModuleSpec::Softmax(e) => {
            let x = leaf4([n, e.shape[0], e.shape[1], e.shape[2]]);
            Box::new(move || softmax(x.clone(), 3))
        }
        ModuleSpec::Add(e) => {
            let x = leaf4([n, e.shape[0], e.shape[1], e.shape[2]]);
            let y = leaf4([n, e.shape[0], e.shape[1], e.shape[2]]);
            Box::new(move || x.clone() + y.clone())
        }
        ModuleSpec::Mul(e) => {
            let x = leaf4([n, e.shape[0], e.shape[1], e.shape[2]]);
            let y = leaf4([n, e.shape[0], e.shape[1], e.shape[2]]);
            Box::new(move || x.clone() * y.clone())
        }
    }
}

/// One timed call: the work of a configuration, synchronised before it returns.
pub type Call = Box<dyn FnMut() -> Result<(), String>>;

/// Prepares a configuration for timing on `device` (a plain device; autodiff is added here for
/// the training phase). Errors (a panic inside the backend included) come back as text.
pub fn prepare(spec: &ModuleSpec, context: &Context, device: &Device) -> Result<Call, String> {
    spec.validate().map_err(|e| e.to_string())?;
    let device = device.clone();
    let spec = spec.clone();
    let batch = context.batch;
    let phase = context.phase;
    let built = catch(|| match phase {
        Phase::Inference => forward(&spec, batch, &device, false),
        Phase::Training => forward(&spec, batch, &device.clone().autodiff(), true),
    })?;
    Ok(Box::new(move || {
        catch(|| match phase {
            Phase::Inference => {
                let out = built();
                device.sync().map_err(|e| e.to_string())?;
                drop(out);
                Ok(())
            }
            Phase::Training => {
                let grads = built().sum().backward();
                device.sync().map_err(|e| e.to_string())?;
                drop(grads);
                Ok(())
            }
        })?
    }))
}

/// Runs `f`, turning a panic into its message.
pub fn catch<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|payload| {
        if let Some(s) = payload.downcast_ref::<&str>() {
            (*s).to_string()
        } else if let Some(s) = payload.downcast_ref::<String>() {
            s.clone()
        } else {
            "backend panicked".to_string()
        }
    })
}
