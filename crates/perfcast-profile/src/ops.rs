//! Module runners: build a [`ModuleSpec`]'s operands on a device and run it once per call.
//!
//! Every operand is a rank-4 tensor with the batch first (linear and layernorm as
//! `[batch, 1, tokens, features]`, matmul as `[batch, heads, m, k]`), so one closure type
//! serves every kind. A training step is the forward pass, a sum, and the backward pass that
//! computes input and parameter gradients (the optimiser update belongs to whole networks).
//!
//! [`LayerOp`] is the one place a spec becomes burn calls: the module runners here and the
//! whole-network runner ([`crate::network`]) both use it, so a layer is measured alone exactly
//! as it runs inside a network.

use burn::tensor::activation::{gelu, leaky_relu, relu, sigmoid, silu, softmax, tanh};
use burn::tensor::module::{
    avg_pool2d, batch_norm, batch_norm_train, conv2d, layer_norm, linear, max_pool2d,
};
use burn::tensor::ops::{AvgPoolOptions, ConvOptions, MaxPoolOptions, PadMode};
use burn::tensor::{Device, Distribution, Gradients, Tensor};
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

/// A layer's tensor of any rank: weights, biases, norm scales and running statistics.
#[derive(Clone, Debug)]
pub enum Param {
    /// Biases, norm scales and shifts, running statistics.
    R1(Tensor<1>),
    /// Linear weights `[in, out]`.
    R2(Tensor<2>),
    /// Convolution weights `[out, in / groups, kh, kw]`.
    R4(Tensor<4>),
}

impl Param {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Param::R1(t) => t.shape().num_elements(),
            Param::R2(t) => t.shape().num_elements(),
            Param::R4(t) => t.shape().num_elements(),
        }
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One SGD-with-momentum update from `grads`: `v = momentum * v + g; p = p - lr * v`, the
    /// parameter then re-enters the graph as a fresh leaf. `velocity` holds `v` between steps.
    /// A parameter without a gradient is left alone.
    pub fn sgd_step(
        &mut self,
        grads: &mut Gradients,
        velocity: &mut Option<Param>,
        lr: f64,
        momentum: f64,
    ) {
        macro_rules! step {
            ($variant:ident, $t:expr) => {{
                let Some(g) = $t.grad_remove(grads) else {
                    return;
                };
                let v = match velocity.take() {
                    Some(Param::$variant(v)) => v * momentum + g,
                    _ => g,
                };
                let updated = $t.clone().inner() - v.clone() * lr;
                *$t = updated.autodiff().require_grad();
                *velocity = Some(Param::$variant(v));
            }};
        }
        match self {
            Param::R1(t) => step!(R1, t),
            Param::R2(t) => step!(R2, t),
            Param::R4(t) => step!(R4, t),
        }
    }
}

/// The rows and columns constant padding adds on each side of a pad's `[h, w]` (one where the
/// axis is at least 3, so the operand keeps at least one).
fn pad_border(h: usize, w: usize) -> (usize, usize) {
    (usize::from(h >= 3), usize::from(w >= 3))
}

/// The rank-4 shape of a spec's (first) operand at `batch`.
///
/// A slice reads a tensor twice its width (it copies out half), a pad a tensor its border
/// smaller ([`pad_border`]); every other kind reads its input shape.
pub fn operand_shape(spec: &ModuleSpec, batch: usize) -> [usize; 4] {
    match spec {
        ModuleSpec::Slice(e) => return [batch, e.shape[0], e.shape[1], 2 * e.shape[2]],
        ModuleSpec::Pad(e) => {
            let [c, h, w] = e.shape;
            let (ph, pw) = pad_border(h, w);
            return [batch, c, h - 2 * ph, w - 2 * pw];
        }
        _ => {}
    }
    let s = spec.input_shape();
    match s.as_slice() {
        [c, h, w] => [batch, *c, *h, *w],
        [t, f] => [batch, 1, *t, *f],
        _ => unreachable!("input_shape has rank 2 or 3"),
    }
}

/// The rank-4 shape of the second operand of add, mul and matmul at `batch`.
pub fn second_operand_shape(spec: &ModuleSpec, batch: usize) -> Option<[usize; 4]> {
    match spec {
        ModuleSpec::Add(e)
        | ModuleSpec::Mul(e)
        | ModuleSpec::Div(e)
        | ModuleSpec::Pow(e)
        | ModuleSpec::MaskedFill(e) => Some([batch, e.shape[0], e.shape[1], e.shape[2]]),
        ModuleSpec::Matmul(m) => Some([batch, m.heads, m.k, m.n]),
        _ => None,
    }
}

/// One layer built on a device: its parameters and buffers, and its forward pass over rank-4
/// operands of the shapes [`operand_shape`] and [`second_operand_shape`] give.
#[derive(Clone, Debug)]
pub struct LayerOp {
    spec: ModuleSpec,
    /// Trainable parameters (require gradients when built for training).
    pub params: Vec<Param>,
    /// Non-trainable state: batchnorm's running mean and variance in inference.
    buffers: Vec<Param>,
    /// Built for a training step (batchnorm then uses the batch's statistics).
    training: bool,
}

impl LayerOp {
    /// Initialises the layer's tensors on `device` (an autodiff device when `training`, whose
    /// parameters then require gradients).
    pub fn new(spec: &ModuleSpec, device: &Device, training: bool) -> LayerOp {
        let leaf = |t: Param| -> Param {
            if !training {
                return t;
            }
            match t {
                Param::R1(t) => Param::R1(t.require_grad()),
                Param::R2(t) => Param::R2(t.require_grad()),
                Param::R4(t) => Param::R4(t.require_grad()),
            }
        };
        let r1 = |len: usize, lo: f64, hi: f64| {
            Param::R1(Tensor::<1>::random(
                [len],
                Distribution::Uniform(lo, hi),
                device,
            ))
        };
        let mut params = Vec::new();
        let mut buffers = Vec::new();
        match spec {
            ModuleSpec::Conv2d(c) => {
                let shape = [
                    c.out_channels,
                    c.in_channels / c.groups,
                    c.kernel[0],
                    c.kernel[1],
                ];
                // He-uniform: a conv and the ReLU after it keep unit-variance activations.
                let fan_in = (shape[1] * shape[2] * shape[3]) as f64;
                let a = (6.0 / fan_in).sqrt();
                params.push(leaf(Param::R4(Tensor::<4>::random(
                    shape,
                    Distribution::Uniform(-a, a),
                    device,
                ))));
                if c.bias {
                    params.push(leaf(r1(c.out_channels, -0.1, 0.1)));
                }
            }
            ModuleSpec::Linear(l) => {
                // Variance-preserving, so the activation after it sees the unit-normal values
                // it is measured on alone (see `operand_values`).
                let a = (3.0 / l.in_features as f64).sqrt();
                params.push(leaf(Param::R2(Tensor::<2>::random(
                    [l.in_features, l.out_features],
                    Distribution::Uniform(-a, a),
                    device,
                ))));
                if l.bias {
                    params.push(leaf(r1(l.out_features, -0.1, 0.1)));
                }
            }
            ModuleSpec::BatchNorm2d(b) => {
                params.push(leaf(r1(b.channels, 0.5, 1.5)));
                params.push(leaf(r1(b.channels, -0.1, 0.1)));
                if !training {
                    buffers.push(r1(b.channels, -0.1, 0.1));
                    buffers.push(r1(b.channels, 0.5, 1.5));
                }
            }
            ModuleSpec::LayerNorm(l) => {
                params.push(leaf(r1(l.features, 0.5, 1.5)));
                params.push(leaf(r1(l.features, -0.1, 0.1)));
            }
            ModuleSpec::RmsNorm(l) => params.push(leaf(r1(l.features, 0.5, 1.5))),
            ModuleSpec::Embedding(e) => {
                params.push(leaf(Param::R2(Tensor::<2>::random(
                    [e.vocab, e.features],
                    Distribution::Uniform(-0.1, 0.1),
                    device,
                ))));
            }
            _ => {}
        }
        LayerOp {
            spec: spec.clone(),
            params,
            buffers,
            training,
        }
    }

    /// The layer's forward pass; `y` is the second operand of add, mul and matmul.
    pub fn forward(&self, x: Tensor<4>, y: Option<Tensor<4>>) -> Tensor<4> {
        let second = || {
            y.clone()
                .expect("add, mul and matmul take a second operand")
        };
        match &self.spec {
            ModuleSpec::Conv2d(c) => {
                let options = ConvOptions::new(c.stride, c.padding, c.dilation, c.groups);
                conv2d(x, self.r4(0), c.bias.then(|| self.r1(1)), options)
            }
            ModuleSpec::Linear(l) => linear(x, self.r2(0), l.bias.then(|| self.r1(1))),
            ModuleSpec::Matmul(_) => x.matmul(second()),
            ModuleSpec::MaxPool2d(p) => max_pool2d(
                x,
                MaxPoolOptions::new(p.kernel)
                    .with_stride(p.effective_stride())
                    .with_padding(p.padding),
            ),
            ModuleSpec::AvgPool2d(p) => avg_pool2d(
                x,
                AvgPoolOptions::new(p.kernel)
                    .with_stride(p.effective_stride())
                    .with_padding(p.padding),
            ),
            ModuleSpec::BatchNorm2d(_) => {
                if self.training {
                    // Training mode normalises with the batch's own statistics.
                    batch_norm_train(x, self.r1(0), self.r1(1), 1e-5).output
                } else {
                    let (mean, var) = match (&self.buffers[0], &self.buffers[1]) {
                        (Param::R1(m), Param::R1(v)) => (m.clone(), v.clone()),
                        _ => unreachable!("batchnorm buffers are rank 1"),
                    };
                    batch_norm(x, self.r1(0), self.r1(1), mean, var, 1e-5)
                }
            }
            ModuleSpec::LayerNorm(_) => layer_norm(x, self.r1(0), Some(self.r1(1)), 1e-5),
            ModuleSpec::Relu(_) => relu(x),
            ModuleSpec::Gelu(_) => gelu(x),
            ModuleSpec::Sigmoid(_) => sigmoid(x),
            ModuleSpec::Tanh(_) => tanh(x),
            ModuleSpec::Softmax(_) => softmax(x, 3),
            ModuleSpec::Add(_) => x + second(),
            ModuleSpec::Mul(_) => x * second(),
            ModuleSpec::Div(_) => x / second(),
            ModuleSpec::Pow(_) => x.powf(second()),
            // Scalars as PyTorch's `x + 0.5`, `x * 0.5`, `x / 3.0`, `x ** 2.0`.
            ModuleSpec::AddScalar(_) => x.add_scalar(0.5),
            ModuleSpec::MulScalar(_) => x.mul_scalar(0.5),
            ModuleSpec::DivScalar(_) => x.div_scalar(3.0),
            ModuleSpec::PowScalar(_) => x.powf_scalar(2.0),
            // Training-mode dropout at p = 0.1: a Bernoulli keep-mask drawn per call.
            ModuleSpec::Dropout(_) => {
                let keep = x.random_like(Distribution::Bernoulli(0.9));
                (x * keep).div_scalar(0.9)
            }
            // An attention-style mask: positions where the second operand is positive are
            // filled (the mask is built from it in the call, as a causal mask often is).
            ModuleSpec::MaskedFill(_) => x.mask_fill(second().greater_elem(0.0), -1e9),
            // `contiguous()` of a transposed view: the same elements read across the last two
            // axes and written in order (a scalar add forces the materialisation).
            ModuleSpec::Copy(e) => {
                let [b, c, h, w] = x.dims();
                debug_assert_eq!([c, h, w], e.shape);
                x.reshape([b, c, w, h]).swap_dims(2, 3).add_scalar(0.0)
            }
            ModuleSpec::Sum(_) => x.sum_dim(3),
            ModuleSpec::Silu(_) => silu(x),
            ModuleSpec::LeakyRelu(_) => leaky_relu(x, 0.01),
            // Metadata only: the same buffer under another shape.
            ModuleSpec::View(_) => {
                let [b, c, h, w] = x.dims();
                x.reshape([b, c * h, w, 1])
            }
            // Two halves of the outermost per-sample axis (channels, for an image) joined back
            // into one tensor of the spec's shape: two contiguous blocks a sample, as a channel
            // concat and the whole-network runs copy them, not a split of every row.
            ModuleSpec::Concat(_) => {
                let dims = x.dims();
                let axis = (1..4).find(|&a| dims[a] >= 2).unwrap_or(3);
                let half = dims[axis] / 2;
                let parts = if half == 0 {
                    vec![x]
                } else {
                    vec![
                        x.clone().narrow(axis, 0, half),
                        x.narrow(axis, half, dims[axis] - half),
                    ]
                };
                Tensor::cat(parts, axis)
            }
            // The first half of the last axis copied out (a scalar add forces the copy).
            ModuleSpec::Slice(e) => x.narrow(3, 0, e.shape[2]).add_scalar(0.0),
            ModuleSpec::Pad(e) => {
                let (ph, pw) = pad_border(e.shape[1], e.shape[2]);
                x.pad((pw, pw, ph, ph), PadMode::Constant(0.0))
            }
            ModuleSpec::RmsNorm(l) => {
                let scale = self.r1(0).reshape([1, 1, 1, l.features]);
                let rms = (x.clone() * x.clone())
                    .mean_dim(3)
                    .add_scalar(1e-6)
                    .sqrt()
                    .recip();
                x * rms * scale
            }
            // Indices drawn from the operand (uniform in [-1, 1]) spread over the table.
            ModuleSpec::Embedding(e) => {
                let [b, _, _, t] = x.dims();
                let indices = x
                    .reshape([b * t])
                    .add_scalar(1.0)
                    .mul_scalar(e.vocab as f64 / 2.0)
                    .int()
                    .clamp(0, e.vocab as i64 - 1);
                self.r2(0).select(0, indices).reshape([b, 1, t, e.features])
            }
        }
    }

    fn r1(&self, i: usize) -> Tensor<1> {
        match &self.params[i] {
            Param::R1(t) => t.clone(),
            _ => unreachable!("parameter {i} is rank 1"),
        }
    }

    fn r2(&self, i: usize) -> Tensor<2> {
        match &self.params[i] {
            Param::R2(t) => t.clone(),
            _ => unreachable!("parameter {i} is rank 2"),
        }
    }

    fn r4(&self, i: usize) -> Tensor<4> {
        match &self.params[i] {
            Param::R4(t) => t.clone(),
            _ => unreachable!("parameter {i} is rank 4"),
        }
    }
}

type Forward = Box<dyn Fn() -> Tensor<4>>;

/// The values a layer's operands are drawn from, alone and inside a network.
///
/// Unit normal, as a normalised network's activations roughly are: some kernels' time depends on
/// the values (burn-flex's gelu is several times slower on wider values;
/// docs/accuracy.md#figures-behind-code-choices), so a layer measured alone on
/// narrower values than a network feeds it is predicted too fast there. Embedding indices come
/// from a uniform operand so lookups spread over the whole table.
pub fn operand_values(spec: &ModuleSpec) -> Distribution {
    match spec {
        ModuleSpec::Embedding(_) => Distribution::Uniform(-1.0, 1.0),
        _ => Distribution::Normal(0.0, 1.0),
    }
}

/// Builds operands for `spec` at `batch` on `device` and returns its forward pass.
///
/// With `grad`, leaves (input and parameters) require gradients; `device` must then be an
/// autodiff device.
fn forward(spec: &ModuleSpec, batch: usize, device: &Device, grad: bool) -> Forward {
    let leaf4 = |shape: [usize; 4]| {
        let t = Tensor::<4>::random(shape, operand_values(spec), device);
        if grad { t.require_grad() } else { t }
    };
    let op = LayerOp::new(spec, device, grad);
    let x = leaf4(operand_shape(spec, batch));
    let y = second_operand_shape(spec, batch).map(leaf4);
    Box::new(move || op.forward(x.clone(), y.clone()))
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
