//! Whole-network timing: a [`Network`] built in burn from the same description the predictor
//! decomposes, run end to end.
//!
//! Every layer is a [`LayerOp`], exactly what the module runners time alone, so the network's
//! measured latency and the sum of its layers' predictions differ only by what composition
//! adds: per-run setup, dispatch between layers, activations freed and reused, and in training
//! one backward pass over the whole graph plus the optimiser update.
//!
//! A training step is forward, `sum` of the output as the loss (plus the sum of every output no
//! layer names as an operand: the parts of a concat after the first, which the network format
//! does not name, reach the loss that way), backward, and SGD with momentum 0.9 on every
//! parameter (the optimiser most CNN recipes use; its cost is a few element-wise
//! passes over the parameters and their velocity).

use burn::tensor::{Device, Distribution, Tensor};
use perfcast_core::{Context, Network, Phase};

use perfcast_data::Timing;

use crate::backend::Backend;
use crate::ops::{
    Call, LayerOp, Param, catch, estimated_bytes, operand_shape, operand_values,
    second_operand_shape,
};
use crate::pool::with_threads;
use crate::timer::TimingConfig;

/// Where a layer's operand comes from.
#[derive(Clone, Copy, Debug)]
enum Source {
    Input,
    Layer(usize),
    /// A tensor of its own, made once: what a detached layer reads (a constant, a second model
    /// input), and what a layer reads when it is part of a larger or smaller tensor (concat,
    /// slice, pad, a view of one part of a split), which a reshape cannot give.
    Fresh(usize),
}

/// Counts that describe a network's run, for composition models and reports.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NetworkCounts {
    /// Layers (modules) run per forward pass.
    pub layers: usize,
    /// Trainable parameter tensors.
    pub param_tensors: usize,
    /// Trainable parameters.
    pub params: usize,
}

/// How one layer is wired: its operand sources and the rank-4 shapes it reads them as.
#[derive(Clone, Debug)]
struct Wiring {
    first: Source,
    second: Option<Source>,
    shape: [usize; 4],
    second_shape: Option<[usize; 4]>,
    /// A concat whose named parts are smaller than what it writes: the [`Source::Fresh`]
    /// operand that stands for its other parts, which the network does not name.
    rest: Option<usize>,
    /// A concat's further parts (`parts_from`), joined after `first`.
    parts: Vec<Source>,
}

/// A network's layers built on a device, ready to run at one batch size and phase.
pub struct NetworkRun {
    layers: Vec<LayerOp>,
    wiring: Vec<Wiring>,
    /// Per layer: the index of the last layer that reads its output (frees it afterwards); the
    /// layer itself when no layer names it as an operand.
    last_use: Vec<usize>,
    input: Tensor<4>,
    /// The [`Source::Fresh`] operands.
    fresh: Vec<Tensor<4>>,
    training: bool,
    velocity: Vec<Vec<Option<Param>>>,
    device: Device,
    /// SGD learning rate (tiny, so repeated steps keep the values finite).
    lr: f64,
}

impl NetworkRun {
    /// Builds `network` for `context`'s batch and phase on `device` (a plain device; autodiff is
    /// added here for training). The network is checked first; errors name the layer.
    pub fn new(network: &Network, context: &Context, device: &Device) -> Result<Self, String> {
        let checked = network.check().map_err(|e| e.to_string())?;
        let training = context.phase == Phase::Training;
        let device = if training {
            device.clone().autodiff()
        } else {
            device.clone()
        };
        let batch = context.batch;
        let mut index = std::collections::HashMap::new();
        let mut wiring = Vec::with_capacity(network.layers.len());
        let mut last_use: Vec<usize> = (0..network.layers.len()).collect();
        // Per fresh operand: its shape and the values of the layer that reads it.
        let mut fresh_shapes: Vec<([usize; 4], Distribution)> = Vec::new();
        for (i, layer) in network.layers.iter().enumerate() {
            let resolve = |name: &str| -> Source {
                if name == perfcast_core::network::NETWORK_INPUT {
                    Source::Input
                } else {
                    // `check` guarantees the name is an earlier layer.
                    Source::Layer(index[name])
                }
            };
            let first = match &layer.input_from {
                Some(name) => resolve(name),
                None if i == 0 => Source::Input,
                None => Source::Layer(i - 1),
            };
            let second = layer.second_from.as_deref().map(resolve);
            let shape = operand_shape(&layer.spec, batch);
            let second_shape = second_operand_shape(&layer.spec, batch);
            // A source whose element count differs from the operand cannot be reshaped into it.
            let count = |source: Source| -> usize {
                match source {
                    Source::Input => batch * network.input.iter().product::<usize>(),
                    Source::Layer(j) => batch * checked[j].output.iter().product::<usize>(),
                    Source::Fresh(_) => 0,
                }
            };
            // A concat joins its named parts (and a stand-in for the parts the network does
            // not name), so the backward pass splits the gradient into each part as a real
            // concat does.
            let parts: Vec<Source> = if layer.detached {
                Vec::new()
            } else {
                layer.parts_from.iter().map(|n| resolve(n)).collect()
            };
            let named = count(first) + parts.iter().map(|&p| count(p)).sum::<usize>();
            let part = match first {
                Source::Input | Source::Layer(_)
                    if layer.spec.kind() == perfcast_core::ModuleKind::Concat
                        && !layer.detached
                        && named < shape.iter().product::<usize>() =>
                {
                    Some(named)
                }
                _ => None,
            };
            let rest = part.map(|n| {
                let rest = [batch, (shape.iter().product::<usize>() - n) / batch, 1, 1];
                fresh_shapes.push((rest, operand_values(&layer.spec)));
                fresh_shapes.len() - 1
            });
            let mut fresh_of = |source: Source, shape: [usize; 4]| -> Source {
                if layer.detached || count(source) != shape.iter().product::<usize>() {
                    fresh_shapes.push((shape, operand_values(&layer.spec)));
                    Source::Fresh(fresh_shapes.len() - 1)
                } else {
                    source
                }
            };
            let first = if rest.is_some() || !parts.is_empty() {
                first
            } else {
                fresh_of(first, shape)
            };
            let second = match (second, second_shape) {
                (Some(s), Some(shape)) => Some(fresh_of(s, shape)),
                (None, Some(shape)) if layer.detached => {
                    fresh_shapes.push((shape, operand_values(&layer.spec)));
                    Some(Source::Fresh(fresh_shapes.len() - 1))
                }
                (s, _) => s,
            };
            for source in [Some(first), second]
                .into_iter()
                .flatten()
                .chain(parts.iter().copied())
            {
                if let Source::Layer(j) = source {
                    last_use[j] = i;
                }
            }
            wiring.push(Wiring {
                first,
                second,
                shape,
                second_shape,
                rest,
                parts,
            });
            index.insert(layer.name.as_str(), i);
        }
        if let Some(last) = last_use.last_mut() {
            *last = usize::MAX; // the output is kept for the loss
        }
        let mut input_shape = vec![batch];
        input_shape.extend(std::iter::repeat_n(
            1,
            3usize.saturating_sub(network.input.len()),
        ));
        input_shape.extend(&network.input);
        let input_shape: [usize; 4] = input_shape
            .try_into()
            .map_err(|_| format!("network input {:?} has more than 3 dims", network.input))?;
        let built = catch(|| {
            let layers: Vec<LayerOp> = network
                .layers
                .iter()
                .map(|l| LayerOp::new(&l.spec, &device, training))
                .collect();
            // The input is data, not a parameter: no gradient.
            // Drawn as the first layer's operand is when it is measured alone.
            let values = network
                .layers
                .first()
                .map_or(Distribution::Normal(0.0, 1.0), |l| operand_values(&l.spec));
            let input = Tensor::<4>::random(input_shape, values, &device);
            // Tracked in training, so a branch that starts from one stays in the backward pass.
            let fresh: Vec<Tensor<4>> = fresh_shapes
                .iter()
                .map(|&(s, values)| {
                    let t = Tensor::<4>::random(s, values, &device);
                    if training { t.require_grad() } else { t }
                })
                .collect();
            (layers, input, fresh)
        })?;
        let (layers, input, fresh) = built;
        let velocity = layers.iter().map(|l| vec![None; l.params.len()]).collect();
        Ok(NetworkRun {
            layers,
            wiring,
            last_use,
            input,
            fresh,
            training,
            velocity,
            device,
            lr: 1e-6,
        })
    }

    /// Parameter and layer counts.
    pub fn counts(&self) -> NetworkCounts {
        NetworkCounts {
            layers: self.layers.len(),
            param_tensors: self.layers.iter().map(|l| l.params.len()).sum(),
            params: self
                .layers
                .iter()
                .flat_map(|l| l.params.iter())
                .map(Param::len)
                .sum(),
        }
    }

    /// The forward pass; intermediate outputs are dropped after their last reader.
    pub fn forward(&self) -> Tensor<4> {
        self.forward_collecting(None)
    }

    /// The training loss: the sum of the output, plus the sum of every output no layer names as
    /// an operand (a concat's unnamed parts), so that their layers get gradients as they do
    /// through the concat that reads them in the real network.
    fn loss(&self) -> Tensor<1> {
        let mut loose = Vec::new();
        let out = self.forward_collecting(Some(&mut loose));
        loose.into_iter().fold(out.sum(), |acc, t| acc + t)
    }

    /// [`NetworkRun::forward`]; with `loose`, the sums of unnamed outputs are pushed to it.
    fn forward_collecting(&self, mut loose: Option<&mut Vec<Tensor<1>>>) -> Tensor<4> {
        let mut outputs: Vec<Option<Tensor<4>>> = vec![None; self.layers.len()];
        let fetch = |outputs: &[Option<Tensor<4>>], source: Source| -> Tensor<4> {
            match source {
                Source::Input => self.input.clone(),
                Source::Fresh(k) => self.fresh[k].clone(),
                Source::Layer(j) => outputs[j]
                    .clone()
                    .expect("a layer's output lives until its last reader"),
            }
        };
        for (i, layer) in self.layers.iter().enumerate() {
            let w = &self.wiring[i];
            // Reshapes are views of contiguous outputs (flatten, head split), as in the format.
            let out = if w.rest.is_some() || !w.parts.is_empty() {
                // Each sample's parts one after another: a channel concat of NCHW tensors.
                let flat = |t: Tensor<4>| {
                    let n = t.shape().num_elements() / w.shape[0];
                    t.reshape([w.shape[0], n, 1, 1])
                };
                let mut joined = vec![flat(fetch(&outputs, w.first))];
                joined.extend(w.parts.iter().map(|&p| flat(fetch(&outputs, p))));
                joined.extend(w.rest.map(|k| self.fresh[k].clone()));
                Tensor::cat(joined, 1).reshape(w.shape)
            } else {
                let x = fetch(&outputs, w.first).reshape(w.shape);
                let y = w.second.map(|s| {
                    let shape = w
                        .second_shape
                        .expect("two-operand layers have a second shape");
                    fetch(&outputs, s).reshape(shape)
                });
                layer.forward(x, y)
            };
            if self.last_use[i] == i
                && let Some(loose) = loose.as_deref_mut()
            {
                loose.push(out.clone().sum());
            }
            outputs[i] = Some(out);
            for (j, out) in outputs.iter_mut().enumerate().take(i + 1) {
                if self.last_use[j] == i {
                    *out = None;
                }
            }
        }
        outputs
            .pop()
            .flatten()
            .expect("the last layer's output is kept")
    }

    /// One run: the forward pass (inference) or a training step (forward, backward, SGD
    /// update), synchronised with the device before returning.
    pub fn step(&mut self) -> Result<(), String> {
        self.step_timed().map(|_| ())
    }

    /// [`NetworkRun::step`], also returning how long the optimiser update took (training),
    /// timed between device synchronisations so it is the update's own cost.
    pub fn step_timed(&mut self) -> Result<Option<std::time::Duration>, String> {
        let sync = |device: &Device| device.sync().map_err(|e| e.to_string());
        if !self.training {
            drop(self.forward());
            sync(&self.device)?;
            return Ok(None);
        }
        let mut grads = self.loss().backward();
        sync(&self.device)?;
        let start = std::time::Instant::now();
        for (layer, velocity) in self.layers.iter_mut().zip(&mut self.velocity) {
            for (param, v) in layer.params.iter_mut().zip(velocity.iter_mut()) {
                param.sgd_step(&mut grads, v, self.lr, 0.9);
            }
        }
        drop(grads);
        sync(&self.device)?;
        Ok(Some(start.elapsed()))
    }
}

/// Rough peak bytes of a network run: every layer's footprint for a training step (the graph
/// keeps activations), the largest layer's plus the input for inference.
pub fn estimated_network_bytes(network: &Network, context: &Context) -> f64 {
    let per_layer = network
        .layers
        .iter()
        .map(|l| estimated_bytes(&l.spec, context));
    match context.phase {
        Phase::Training => per_layer.sum(),
        Phase::Inference => 2.0 * per_layer.fold(0.0, f64::max),
    }
}

/// Prepares `network` for timing: a [`Call`] that runs one forward pass or training step.
pub fn prepare_network(
    network: &Network,
    context: &Context,
    device: &Device,
) -> Result<(Call, NetworkCounts), String> {
    let (call, counts, _) = prepare_network_timed(network, context, device)?;
    Ok((call, counts))
}

/// Update durations (seconds) a timed [`Call`] records, one per training step it ran.
pub type UpdateTimes = std::rc::Rc<std::cell::RefCell<Vec<f64>>>;

/// [`prepare_network`], with the optimiser update's duration recorded on every call.
pub fn prepare_network_timed(
    network: &Network,
    context: &Context,
    device: &Device,
) -> Result<(Call, NetworkCounts, UpdateTimes), String> {
    let mut run = NetworkRun::new(network, context, device)?;
    let counts = run.counts();
    let updates = UpdateTimes::default();
    let record = updates.clone();
    let call: Call = Box::new(move || {
        if let Some(d) = catch(|| run.step_timed())?? {
            record.borrow_mut().push(d.as_secs_f64());
        }
        Ok(())
    });
    Ok((call, counts, updates))
}

/// How whole networks are timed: fewer, longer samples than modules (a VGG training step
/// takes seconds), at least two warm-up runs so allocator pools and caches are in steady state.
pub fn network_timing(max_time_s: f64) -> TimingConfig {
    TimingConfig {
        warmup_s: 0.0,
        min_samples: 5,
        max_samples: 200,
        target_rel_error: 0.003,
        max_time_s,
        min_sample_s: 0.002,
        rounds: 1,
    }
}

/// A network measured end to end.
#[derive(Clone, Debug)]
pub struct NetworkTiming {
    /// Statistics per run.
    pub timing: Timing,
    /// Layer and parameter counts.
    pub counts: NetworkCounts,
    /// Median duration of the optimiser update inside a training step, ms (training only).
    pub update_ms: Option<f64>,
}

/// Measures `network` end to end on `backend` with `context.threads` threads: the statistics
/// per run, the network's counts and (training) the update's own median duration. Errors (a
/// backend panic included) come back as text.
pub fn measure(
    network: &Network,
    context: &Context,
    backend: Backend,
    timing: &TimingConfig,
) -> Result<NetworkTiming, String> {
    let device = backend.device().map_err(|e| e.to_string())?;
    with_threads(context.threads, || {
        catch(|| -> Result<_, String> {
            let (mut call, counts, updates) = prepare_network_timed(network, context, &device)?;
            let t = crate::timer::measure(&mut call, timing)?;
            let mut u = updates.borrow().clone();
            let update_ms = (!u.is_empty()).then(|| {
                u.sort_by(f64::total_cmp);
                1e3 * perfcast_data::summary::quantile(&u, 0.5)
            });
            Ok(NetworkTiming {
                timing: t,
                counts,
                update_ms,
            })
        })
        .and_then(|r| r)
    })
}

/// Measures every distinct layer of `network` alone, exactly as `perfcast profile` measures a
/// module (same runner, same timing rules): per layer, in order, its timing (shared by layers
/// with the same spec). The sum against the whole network's time separates what composition
/// must add from what per-layer prediction gets wrong.
pub fn measure_layers(
    network: &Network,
    context: &Context,
    backend: Backend,
    timing: &TimingConfig,
) -> Result<Vec<Timing>, String> {
    let device = backend.device().map_err(|e| e.to_string())?;
    let mut done: std::collections::HashMap<&perfcast_core::ModuleSpec, Timing> =
        std::collections::HashMap::new();
    let mut out = Vec::with_capacity(network.layers.len());
    for layer in &network.layers {
        if let Some(t) = done.get(&layer.spec) {
            out.push(t.clone());
            continue;
        }
        let t = with_threads(context.threads, || {
            catch(|| -> Result<_, String> {
                let mut call = crate::ops::prepare(&layer.spec, context, &device)?;
                crate::timer::measure(&mut call, timing)
            })
            .and_then(|r| r)
        })
        .map_err(|e| format!("layer `{}`: {e}", layer.name))?;
        done.insert(&layer.spec, t.clone());
        out.push(t);
    }
    Ok(out)
}

/// Wall time of `steps` training steps (forward, backward, SGD update) of `network` at
/// `batch`, measured `repeats` times, on `backend` with exactly `threads` compute threads:
/// what `perfcast scale measure` records as one run of `steps * batch` samples.
///
/// The network is built once and one untimed warm-up step runs first (first-touch
/// allocation, the backend's caches); every step is synchronised with the device. Errors (a
/// backend panic included) come back as text.
pub fn time_training(
    network: &Network,
    backend: Backend,
    batch: usize,
    threads: usize,
    steps: usize,
    repeats: usize,
) -> Result<Vec<std::time::Duration>, String> {
    if batch == 0 || threads == 0 || steps == 0 || repeats == 0 {
        return Err(format!(
            "batch, threads, steps and repeats must be at least 1, got {batch}, {threads}, \
             {steps} and {repeats}"
        ));
    }
    let device = backend.device().map_err(|e| e.to_string())?;
    let context = Context {
        batch,
        phase: Phase::Training,
        threads,
        utilisation: 0.0,
    };
    with_threads(threads, || {
        catch(|| -> Result<_, String> {
            let mut run = NetworkRun::new(network, &context, &device)?;
            run.step()?;
            (0..repeats)
                .map(|_| {
                    let start = std::time::Instant::now();
                    for _ in 0..steps {
                        run.step()?;
                    }
                    Ok(start.elapsed())
                })
                .collect()
        })
        .and_then(|r| r)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfcast_core::zoo;

    fn context(batch: usize, phase: Phase) -> Context {
        Context {
            batch,
            phase,
            threads: 1,
            utilisation: 0.0,
        }
    }

    #[test]
    fn lenet_runs_forward_and_training_steps_with_finite_outputs() {
        let net = zoo::build("lenet5", None).unwrap();
        let device = crate::Backend::Flex.device().unwrap();
        let run = NetworkRun::new(&net, &context(2, Phase::Inference), &device).unwrap();
        let out = run.forward();
        assert_eq!(out.shape().num_elements(), 2 * 10);
        let mut train = NetworkRun::new(&net, &context(2, Phase::Training), &device).unwrap();
        let before: f32 = train.forward().sum().inner().into_scalar();
        for _ in 0..3 {
            train.step().unwrap();
        }
        let after: f32 = train.forward().sum().inner().into_scalar();
        assert!(before.is_finite() && after.is_finite());
        // SGD on the sum of the outputs lowers it.
        assert!(after < before, "{before} -> {after}");
        let counts = train.counts();
        assert_eq!(counts.params, 61_706, "LeNet-5 parameters");
    }

    #[test]
    fn every_zoo_network_builds_and_runs_one_inference_at_low_resolution() {
        let device = crate::Backend::Flex.device().unwrap();
        for name in zoo::names() {
            let res = if *name == "lenet5" || *name == "transformer" {
                None
            } else {
                Some(64)
            };
            let net = zoo::build(name, res).unwrap();
            let (mut call, counts) =
                prepare_network(&net, &context(1, Phase::Inference), &device).unwrap();
            assert_eq!(counts.layers, net.layers.len());
            call().unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    #[test]
    fn the_kinds_real_models_add_run_in_a_network() {
        // Embedding, rmsnorm, silu, views, concat, slice, pad and a detached layer
        // (a tensor the network does not model) run forward and train, wired as imports wire
        // them (parts of a tensor get operands of their own).
        use perfcast_core::{Elementwise, Embedding, Layer, LayerNorm, ModuleSpec, Network};
        let e = |shape| Elementwise { shape };
        let net = Network {
            name: "parts".into(),
            input: vec![8],
            layers: vec![
                Layer::new(
                    "embed",
                    ModuleSpec::Embedding(Embedding {
                        tokens: 8,
                        vocab: 50,
                        features: 16,
                    }),
                ),
                Layer::new(
                    "norm",
                    ModuleSpec::RmsNorm(LayerNorm {
                        tokens: 8,
                        features: 16,
                    }),
                ),
                Layer::new("act", ModuleSpec::Silu(e([1, 8, 16]))),
                Layer::new("heads", ModuleSpec::View(e([2, 8, 8]))),
                Layer::new("half", ModuleSpec::Slice(e([2, 8, 4]))),
                Layer::new("join", ModuleSpec::Concat(e([2, 8, 8]))),
                Layer::new("mask", ModuleSpec::AddScalar(e([1, 4, 4]))).detach(),
                Layer::new("pad", ModuleSpec::Pad(e([2, 10, 10]))).reads("join"),
            ],
        };
        net.check().unwrap();
        let device = crate::Backend::Flex.device().unwrap();
        for phase in [Phase::Inference, Phase::Training] {
            let (mut call, _) = prepare_network(&net, &context(2, phase), &device).unwrap();
            call().unwrap_or_else(|e| panic!("{phase:?}: {e}"));
        }
    }

    /// A SqueezeNet fire module whose concat names only its first part (an older network file):
    /// the 3x3 expand branch is read by nobody the network names.
    fn fire() -> Network {
        let conv = |cin: usize, cout: usize, k: usize| {
            serde_json::json!({"kind": "conv2d", "in_channels": cin, "out_channels": cout,
                "input_hw": 8, "kernel": k, "padding": k / 2, "bias": true})
        };
        let relu = |c: usize| serde_json::json!({"kind": "relu", "shape": [c, 8, 8]});
        serde_json::from_value(serde_json::json!({
            "name": "fire",
            "input": [16, 8, 8],
            "layers": [
                {"name": "squeeze", "spec": conv(16, 4, 1)},
                {"name": "squeeze_relu", "spec": relu(4)},
                {"name": "e1", "spec": conv(4, 8, 1)},
                {"name": "e1_relu", "spec": relu(8)},
                {"name": "e3", "input_from": "squeeze_relu", "spec": conv(4, 8, 3)},
                {"name": "e3_relu", "spec": relu(8)},
                {"name": "cat", "input_from": "e1_relu", "spec": {"kind": "concat", "shape": [16, 8, 8]}},
                {"name": "head", "spec": conv(16, 4, 1)},
            ],
        }))
        .unwrap()
    }

    /// The layers whose parameters get no gradient from one training step's backward pass.
    fn layers_without_gradient(run: &NetworkRun) -> Vec<usize> {
        let grads = run.loss().backward();
        let has = |p: &Param| match p {
            Param::R1(t) => t.grad(&grads).is_some(),
            Param::R2(t) => t.grad(&grads).is_some(),
            Param::R4(t) => t.grad(&grads).is_some(),
        };
        (0..run.layers.len())
            .filter(|&i| !run.layers[i].params.iter().all(has))
            .collect()
    }

    #[test]
    fn every_branch_into_a_concat_gets_gradients() {
        // A concat reading a tensor of its own would stop the backward pass short of the convs
        // feeding it.
        let net = fire();
        net.check().unwrap();
        let device = crate::Backend::Flex.device().unwrap();
        let run = NetworkRun::new(&net, &context(2, Phase::Training), &device).unwrap();
        assert_eq!(layers_without_gradient(&run), Vec::<usize>::new());
        assert_eq!(run.fresh.len(), 1, "a stand-in for the unnamed part");

        // Named, the part is the branch's own output: no stand-in, the same gradients, and the
        // concat's values are the two branches' side by side.
        let mut named = fire();
        named.layers[6].parts_from = vec!["e3_relu".into()];
        named.check().unwrap();
        let run = NetworkRun::new(&named, &context(2, Phase::Training), &device).unwrap();
        assert!(run.fresh.is_empty(), "{}", run.fresh.len());
        assert_eq!(run.last_use[5], 6, "the 3x3 branch lives until the concat");
        assert_eq!(layers_without_gradient(&run), Vec::<usize>::new());
        let run = NetworkRun::new(&named, &context(2, Phase::Inference), &device).unwrap();
        run.forward();
    }

    #[test]
    fn zoo_families_with_concats_and_gates_train_every_layer() {
        // Fire modules, dense blocks, squeeze-excitation gates, the class token and rotary
        // halves: every branch reaches the loss, so every parameter gets a gradient.
        let device = crate::Backend::Flex.device().unwrap();
        for (name, res) in [
            ("squeezenet1_1", 32),
            ("densenet121", 32),
            ("efficientnet_b0", 32),
            ("vit_b_16", 32),
            ("llama_block", 8),
        ] {
            let net = zoo::build(name, Some(res)).unwrap();
            let run = NetworkRun::new(&net, &context(1, Phase::Training), &device).unwrap();
            assert_eq!(layers_without_gradient(&run), Vec::<usize>::new(), "{name}");
        }
    }

    #[test]
    fn residual_and_attention_wiring_trains() {
        let device = crate::Backend::Flex.device().unwrap();
        for name in ["resnet18", "transformer"] {
            let res = (name == "resnet18").then_some(32);
            let net = zoo::build(name, res).unwrap();
            let (mut call, _) =
                prepare_network(&net, &context(1, Phase::Training), &device).unwrap();
            call().unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
}
