//! MEDN's training loop: masked multi-task loss in standardised log space, Adam with a cosine
//! learning-rate schedule, a running average of the weights, early stopping on a validation
//! split, deterministic under a seed.

use burn::module::Module;
use burn::optim::decay::WeightDecayConfig;
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::{Device, Tensor, TensorData};
use perfcast_core::rng::SplitMix64;

use super::config::{InitNet, MednConfig};
use super::infer::{BurnWeights, Dense, FastNet, Norm};
use super::model::MednNet;
use super::{Loss, TargetScaler, TrainHistory};
use crate::error::{Error, Result};

/// Multi-task samples: standardised inputs, standardised log targets and their masks.
#[derive(Clone, Debug, Default)]
pub struct Samples {
    /// Row width.
    pub d: usize,
    /// Targets per row.
    pub tasks: usize,
    /// Inputs, `len * d`.
    pub x: Vec<f32>,
    /// Standardised log targets, `len * tasks` (0 where missing).
    pub t: Vec<f32>,
    /// 1 where the target was measured, else 0, `len * tasks`.
    pub m: Vec<f32>,
}

impl Samples {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.x.len().checked_div(self.d).unwrap_or(0)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The samples at `idx`.
    pub fn select(&self, idx: &[usize]) -> Samples {
        let mut out = Samples {
            d: self.d,
            tasks: self.tasks,
            ..Samples::default()
        };
        for &i in idx {
            out.x
                .extend_from_slice(&self.x[i * self.d..(i + 1) * self.d]);
            out.t
                .extend_from_slice(&self.t[i * self.tasks..(i + 1) * self.tasks]);
            out.m
                .extend_from_slice(&self.m[i * self.tasks..(i + 1) * self.tasks]);
        }
        out
    }

    fn tensors(&self, device: &Device) -> (Tensor<2>, Tensor<2>, Tensor<2>) {
        let n = self.len();
        (
            Tensor::from_data(TensorData::new(self.x.clone(), [n, self.d]), device),
            Tensor::from_data(TensorData::new(self.t.clone(), [n, self.tasks]), device),
            Tensor::from_data(TensorData::new(self.m.clone(), [n, self.tasks]), device),
        )
    }
}

/// The progress stage training reports its epochs in.
pub const EPOCHS: &str = "epochs";

/// Everything the loop needs besides the data.
pub(crate) struct TrainOptions<'a> {
    pub config: &'a MednConfig,
    pub device: Device,
    pub lr: f64,
    pub lr_min_ratio: f64,
    pub weight_decay: f64,
    pub max_steps: usize,
    pub batch_size: usize,
    pub patience: usize,
    pub task_weights: &'a [f64],
    pub loss: Loss,
    pub weight_average: f64,
    pub seed: u64,
    pub scaler: &'a TargetScaler,
    pub progress: super::Progress,
}

/// Trains a network on `train`, early-stopping on `val` (or on `train` when `val` is empty).
/// Returns the kept weights on the plain (non-autodiff) device.
pub(crate) fn train(
    opts: &TrainOptions<'_>,
    train: &Samples,
    val: &Samples,
) -> Result<(MednNet, TrainHistory)> {
    if train.is_empty() {
        return Err(Error::InvalidData("no MEDN training samples".into()));
    }
    let started = std::time::Instant::now();
    let device = opts.device.clone().autodiff();
    let plain = device.clone().inner();
    device.seed(opts.seed);
    let mut net = opts.config.init(&device);
    let mut optim = AdamConfig::new()
        .with_weight_decay(
            (opts.weight_decay > 0.0).then(|| WeightDecayConfig::new(opts.weight_decay as f32)),
        )
        .init();
    let mut rng = SplitMix64::new(opts.seed ^ 0x6d65_646e);

    let n = train.len();
    let batch = opts.batch_size.clamp(1, n);
    let steps_per_epoch = n.div_ceil(batch);
    let epochs = opts.max_steps.div_ceil(steps_per_epoch).max(1);
    let total_steps = epochs * steps_per_epoch;
    let check = if val.is_empty() { train } else { val };
    let (check_x, _, _) = check.tensors(&plain);

    let silent = perfcast_core::progress::Silent;
    let observer: &dyn perfcast_core::progress::Observer = match &opts.progress.0 {
        Some(o) => o.as_ref(),
        None => &silent,
    };
    observer.begin(EPOCHS, epochs as u64);

    // Standardised log units back to natural log, per task (for the APE loss).
    let log_scale = Tensor::<2>::from_data(
        TensorData::new(
            opts.scaler
                .std
                .iter()
                .map(|&v| v as f32)
                .collect::<Vec<f32>>(),
            [1, opts.scaler.std.len()],
        ),
        &device,
    );
    let mut order: Vec<usize> = (0..n).collect();
    let mut history = TrainHistory {
        best_val_mape: f64::INFINITY,
        batch_size: batch,
        train_samples: n,
        val_samples: val.len(),
        ..TrainHistory::default()
    };
    let mut best: Option<MednNet> = None;
    let mut since_best = 0;
    let mut step = 0usize;
    // Running average of the end-of-epoch weights: averages out the last epochs' noise (what
    // an ensemble of snapshots would, at one network's prediction cost).
    let mut average: Option<FastNet> = None;
    for epoch in 0..epochs {
        rng.shuffle(&mut order);
        let mut epoch_loss = 0.0;
        for chunk in order.chunks(batch) {
            let b = train.select(chunk);
            let (x, t, m) = b.tensors(&device);
            let counts: Vec<f32> = (0..b.tasks)
                .map(|k| {
                    let c: f32 = b.m.iter().skip(k).step_by(b.tasks).sum();
                    opts.task_weights.get(k).copied().unwrap_or(1.0) as f32 / c.max(1.0)
                })
                .collect();
            let scale = Tensor::<2>::from_data(TensorData::new(counts, [1, b.tasks]), &device);
            let diff = (net.forward(x) - t) * m;
            let err = match opts.loss {
                Loss::Mse => diff.clone() * diff,
                Loss::L1 => diff.abs(),
                // |pred / measured - 1|: the metric itself (masked entries give exp(0) - 1 = 0).
                Loss::Ape => (diff * log_scale.clone()).exp().sub_scalar(1.0).abs(),
            };
            let loss = (err.sum_dim(0) * scale).sum();
            epoch_loss += f64::from(loss.clone().into_scalar::<f32>()) * chunk.len() as f64;
            let grads = GradientsParams::from_grads(loss.backward(), &net);
            let progress = step as f64 / total_steps.max(1) as f64;
            let lr = opts.lr
                * (opts.lr_min_ratio
                    + (1.0 - opts.lr_min_ratio)
                        * 0.5
                        * (1.0 + (std::f64::consts::PI * progress).cos()));
            net = optim.step(lr, net, grads);
            step += 1;
        }
        history.final_loss = epoch_loss / n as f64;
        if !history.final_loss.is_finite() {
            return Err(Error::InvalidData(
                "MEDN training diverged (loss is not finite); lower `lr`".into(),
            ));
        }
        let valid = net.valid();
        let pred = valid.forward(check_x.clone());
        let mut mape = mape_ms(&pred.into_data(), check, opts.scaler)?;
        history.epochs = epoch + 1;
        let mut improved = false;
        if mape < history.best_val_mape {
            history.best_val_mape = mape;
            history.best_epoch = epoch + 1;
            history.averaged = false;
            best = Some(valid.clone());
            improved = true;
        }
        if opts.weight_average > 0.0 {
            let current = FastNet::from_burn(&valid)?;
            let avg = match &mut average {
                Some(avg) => {
                    blend(avg, &current, opts.weight_average as f32);
                    avg
                }
                None => average.insert(current),
            };
            let avg_net = avg.to_burn(opts.config, &plain)?;
            let avg_mape = mape_ms(
                &avg_net.forward(check_x.clone()).into_data(),
                check,
                opts.scaler,
            )?;
            mape = mape.min(avg_mape);
            if avg_mape < history.best_val_mape {
                history.best_val_mape = avg_mape;
                history.best_epoch = epoch + 1;
                history.averaged = true;
                best = Some(avg_net);
                improved = true;
            }
        }
        if improved {
            since_best = 0;
        } else {
            since_best += 1;
        }
        observer.message(
            EPOCHS,
            &format!(
                "loss {:.4}  val MAPE {mape:.2}% (best {:.2}%)",
                history.final_loss, history.best_val_mape
            ),
        );
        observer.advance(EPOCHS, 1);
        if since_best > opts.patience {
            break;
        }
    }
    history.steps = step;
    history.seconds = started.elapsed().as_secs_f64();
    let best = best.ok_or_else(|| Error::InvalidData("MEDN ran no epoch".into()))?;
    Ok((best, history))
}

/// `avg = decay * avg + (1 - decay) * cur`, weight by weight.
fn blend(avg: &mut FastNet, cur: &FastNet, decay: f32) {
    let mix = |a: &mut Vec<f32>, c: &Vec<f32>| {
        for (a, c) in a.iter_mut().zip(c) {
            *a = decay * *a + (1.0 - decay) * c;
        }
    };
    let dense = |a: &mut Dense, c: &Dense| {
        mix(&mut a.w, &c.w);
        mix(&mut a.b, &c.b);
    };
    let norm = |a: &mut Norm, c: &Norm| {
        mix(&mut a.gamma, &c.gamma);
        mix(&mut a.beta, &c.beta);
    };
    dense(&mut avg.input, &cur.input);
    for ((an, ad), (cn, cd)) in avg.blocks.iter_mut().zip(&cur.blocks) {
        norm(an, cn);
        dense(ad, cd);
    }
    norm(&mut avg.out_norm, &cur.out_norm);
    dense(&mut avg.latent, &cur.latent);
    for ((ah, ao), (ch, co)) in avg.heads.iter_mut().zip(&cur.heads) {
        dense(ah, ch);
        dense(ao, co);
    }
    if let (Some(a), Some(c)) = (&mut avg.skip, &cur.skip) {
        dense(a, c);
    }
}

/// MAPE (percent) of standardised predictions against the masked targets, in milliseconds.
fn mape_ms(pred: &TensorData, s: &Samples, scaler: &TargetScaler) -> Result<f64> {
    let p = pred
        .try_to_vec::<f32>()
        .map_err(|e| Error::InvalidData(format!("MEDN output is not f32: {e:?}")))?;
    let (mut sum, mut count) = (0.0, 0usize);
    for (i, ((pv, tv), mv)) in p.iter().zip(&s.t).zip(&s.m).enumerate() {
        if *mv > 0.0 {
            let k = i % s.tasks;
            let yp = scaler.to_ms(k, f64::from(*pv));
            let yt = scaler.to_ms(k, f64::from(*tv));
            sum += ((yp - yt) / yt).abs();
            count += 1;
        }
    }
    Ok(if count == 0 {
        0.0
    } else {
        100.0 * sum / count as f64
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blend_mixes_every_weight() {
        let device = Device::flex();
        let config = MednConfig::new(3, 2)
            .with_width(4)
            .with_latent(4)
            .with_head_width(4);
        let a = FastNet::from_burn(&config.init(&device)).unwrap();
        let b = FastNet::from_burn(&config.init(&device)).unwrap();
        let mut avg = a.clone();
        blend(&mut avg, &b, 0.75);
        let mix = |x: &[f32], y: &[f32], z: &[f32]| {
            x.iter()
                .zip(y)
                .zip(z)
                .all(|((x, y), z)| (0.75 * x + 0.25 * y - z).abs() < 1e-6)
        };
        assert!(mix(&a.input.w, &b.input.w, &avg.input.w));
        assert!(mix(&a.blocks[1].1.b, &b.blocks[1].1.b, &avg.blocks[1].1.b));
        assert!(mix(&a.heads[1].1.w, &b.heads[1].1.w, &avg.heads[1].1.w));
        let (sa, sb, sv) = (a.skip.unwrap(), b.skip.unwrap(), avg.skip.unwrap());
        assert!(mix(&sa.w, &sb.w, &sv.w));
    }
}
