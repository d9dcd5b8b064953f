//! The fast inference path: a trained network's weights as plain `f32` arrays and a forward
//! pass without autodiff, tensor allocation or dispatch, for one row at a time.
//!
//! A 64-wide MEDN is ~15k multiply-adds per row; through a tensor framework the per-op
//! overhead dwarfs that, so serving uses these loops. `tests::fast_path_matches_burn` holds
//! them to burn's forward within 1e-5 relative.

use burn::module::Param;
use burn::nn::{LayerNorm, Linear};
use burn::tensor::{Device, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use super::config::MednConfig;
use super::model::MednNet;
use crate::error::{Error, Result};

/// Widest layer the stack buffers of [`FastNet::forward_one`] hold.
pub const MAX_WIDTH: usize = 512;

/// LayerNorm's epsilon (burn's default, which [`MednConfig::init`] keeps).
const NORM_EPS: f32 = 1e-5;

/// A dense layer, `y = x W + b`, `W` row-major `[d_in][d_out]` as burn stores it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Dense {
    /// Input width.
    pub d_in: usize,
    /// Output width.
    pub d_out: usize,
    /// Weights, `d_in * d_out`.
    pub w: Vec<f32>,
    /// Bias, `d_out`.
    pub b: Vec<f32>,
}

impl Dense {
    fn from_burn(l: &Linear) -> Result<Dense> {
        let w = floats(l.weight.val().into_data())?;
        let [d_in, d_out] = l.weight.val().dims();
        let b = match &l.bias {
            Some(b) => floats(b.val().into_data())?,
            None => vec![0.0; d_out],
        };
        Ok(Dense { d_in, d_out, w, b })
    }

    fn to_burn(&self, l: &mut Linear, device: &Device) {
        l.weight = Param::from_tensor(Tensor::from_data(
            TensorData::new(self.w.clone(), [self.d_in, self.d_out]),
            device,
        ));
        l.bias = Some(Param::from_tensor(Tensor::from_data(
            TensorData::new(self.b.clone(), [self.d_out]),
            device,
        )));
    }

    /// `out[..d_out] = x[..d_in] W + b`.
    #[inline]
    fn apply(&self, x: &[f32], out: &mut [f32]) {
        let out = &mut out[..self.d_out];
        out.copy_from_slice(&self.b);
        for (xi, row) in x[..self.d_in].iter().zip(self.w.chunks_exact(self.d_out)) {
            for (o, w) in out.iter_mut().zip(row) {
                *o += xi * w;
            }
        }
    }
}

/// Layer normalisation over the last axis.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Norm {
    /// Scale.
    pub gamma: Vec<f32>,
    /// Shift.
    pub beta: Vec<f32>,
}

impl Norm {
    fn from_burn(n: &LayerNorm) -> Result<Norm> {
        let gamma = floats(n.gamma.val().into_data())?;
        let beta = match &n.beta {
            Some(b) => floats(b.val().into_data())?,
            None => vec![0.0; gamma.len()],
        };
        Ok(Norm { gamma, beta })
    }

    fn to_burn(&self, n: &mut LayerNorm, device: &Device) {
        let d = self.gamma.len();
        n.gamma = Param::from_tensor(Tensor::from_data(
            TensorData::new(self.gamma.clone(), [d]),
            device,
        ));
        n.beta = Some(Param::from_tensor(Tensor::from_data(
            TensorData::new(self.beta.clone(), [d]),
            device,
        )));
    }

    #[inline]
    fn apply(&self, x: &[f32], out: &mut [f32]) {
        let d = self.gamma.len();
        let x = &x[..d];
        let mean = x.iter().sum::<f32>() / d as f32;
        let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / d as f32;
        let inv = 1.0 / (var + NORM_EPS).sqrt();
        for (((o, v), g), b) in out[..d].iter_mut().zip(x).zip(&self.gamma).zip(&self.beta) {
            *o = (v - mean) * inv * g + b;
        }
    }
}

/// A MEDN network's weights, ready for allocation-free single-row inference.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FastNet {
    /// Features to the encoder width.
    pub input: Dense,
    /// Residual blocks: normalisation, then the projection.
    pub blocks: Vec<(Norm, Dense)>,
    /// Normalisation before the latent projection.
    pub out_norm: Norm,
    /// Encoder width to the latent vector.
    pub latent: Dense,
    /// Heads: hidden layer, output layer.
    pub heads: Vec<(Dense, Dense)>,
    /// Inputs straight to the outputs (`d_in x tasks`), when configured.
    #[serde(default)]
    pub skip: Option<Dense>,
}

impl FastNet {
    /// Copies a burn network's weights out.
    pub fn from_burn(net: &MednNet) -> Result<FastNet> {
        Ok(FastNet {
            input: Dense::from_burn(&net.input)?,
            blocks: net
                .blocks
                .iter()
                .map(|b| Ok((Norm::from_burn(&b.norm)?, Dense::from_burn(&b.linear)?)))
                .collect::<Result<_>>()?,
            out_norm: Norm::from_burn(&net.out_norm)?,
            latent: Dense::from_burn(&net.latent)?,
            heads: net
                .heads
                .iter()
                .map(|h| Ok((Dense::from_burn(&h.hidden)?, Dense::from_burn(&h.out)?)))
                .collect::<Result<_>>()?,
            skip: net.skip.as_ref().map(Dense::from_burn).transpose()?,
        })
    }

    /// A burn network holding these weights (for checkpoints and the burn forward).
    pub fn to_burn(&self, config: &MednConfig, device: &Device) -> Result<MednNet> {
        self.check(config)?;
        let mut net = config.init(device);
        self.input.to_burn(&mut net.input, device);
        for ((norm, dense), block) in self.blocks.iter().zip(&mut net.blocks) {
            norm.to_burn(&mut block.norm, device);
            dense.to_burn(&mut block.linear, device);
        }
        self.out_norm.to_burn(&mut net.out_norm, device);
        self.latent.to_burn(&mut net.latent, device);
        for ((hidden, out), head) in self.heads.iter().zip(&mut net.heads) {
            hidden.to_burn(&mut head.hidden, device);
            out.to_burn(&mut head.out, device);
        }
        if let (Some(dense), Some(skip)) = (&self.skip, &mut net.skip) {
            dense.to_burn(skip, device);
        }
        Ok(net)
    }

    /// Errors unless the weights have the shapes `config` describes.
    pub fn check(&self, config: &MednConfig) -> Result<()> {
        let dense = |d: &Dense, i: usize, o: usize, what: &str| {
            if d.d_in != i || d.d_out != o || d.w.len() != i * o || d.b.len() != o {
                return Err(Error::InvalidData(format!(
                    "MEDN layer `{what}` is {}x{} with {} weights, config says {i}x{o}",
                    d.d_in,
                    d.d_out,
                    d.w.len()
                )));
            }
            Ok(())
        };
        let norm = |n: &Norm, d: usize, what: &str| {
            if n.gamma.len() != d || n.beta.len() != d {
                return Err(Error::InvalidData(format!(
                    "MEDN norm `{what}` has width {}, config says {d}",
                    n.gamma.len()
                )));
            }
            Ok(())
        };
        if self.blocks.len() != config.depth || self.heads.len() != config.tasks {
            return Err(Error::InvalidData(format!(
                "MEDN has {} blocks and {} heads, config says {} and {}",
                self.blocks.len(),
                self.heads.len(),
                config.depth,
                config.tasks
            )));
        }
        if [
            config.d_input,
            config.width,
            config.latent,
            config.head_width,
        ]
        .iter()
        .any(|&w| w == 0 || w > MAX_WIDTH)
        {
            return Err(Error::InvalidData(format!(
                "MEDN widths must be in 1..={MAX_WIDTH}"
            )));
        }
        dense(&self.input, config.d_input, config.width, "input")?;
        for (i, (n, d)) in self.blocks.iter().enumerate() {
            norm(n, config.width, &format!("blocks.{i}.norm"))?;
            dense(d, config.width, config.width, &format!("blocks.{i}.linear"))?;
        }
        norm(&self.out_norm, config.width, "out_norm")?;
        dense(&self.latent, config.width, config.latent, "latent")?;
        for (i, (h, o)) in self.heads.iter().enumerate() {
            dense(
                h,
                config.latent,
                config.head_width,
                &format!("heads.{i}.hidden"),
            )?;
            dense(o, config.head_width, 1, &format!("heads.{i}.out"))?;
        }
        match (&self.skip, config.skip) {
            (Some(s), true) => dense(s, config.d_input, config.tasks, "skip")?,
            (None, false) => {}
            _ => {
                return Err(Error::InvalidData(
                    "MEDN skip layer does not match its config".into(),
                ));
            }
        }
        Ok(())
    }

    /// Output of head `task` for one standardised row; no allocation.
    pub fn forward_one(&self, x: &[f32], task: usize) -> f32 {
        let mut h = [0.0f32; MAX_WIDTH];
        let mut t = [0.0f32; MAX_WIDTH];
        let mut u = [0.0f32; MAX_WIDTH];
        let w = self.input.d_out;
        self.input.apply(x, &mut h);
        for (norm, dense) in &self.blocks {
            norm.apply(&h, &mut t);
            dense.apply(&t, &mut u);
            for (hv, uv) in h[..w].iter_mut().zip(&u[..w]) {
                *hv += uv.max(0.0);
            }
        }
        self.out_norm.apply(&h, &mut t);
        self.latent.apply(&t, &mut u);
        let latent = self.latent.d_out;
        for v in &mut u[..latent] {
            *v = v.max(0.0);
        }
        let (hidden, out) = &self.heads[task];
        hidden.apply(&u, &mut t);
        for v in &mut t[..hidden.d_out] {
            *v = v.max(0.0);
        }
        let mut o = [0.0f32; 1];
        out.apply(&t, &mut o);
        match &self.skip {
            // Column `task` of the skip layer: the whole layer would waste the other heads' work.
            Some(s) => {
                let mut acc = s.b[task];
                for (xi, row) in x[..s.d_in].iter().zip(s.w.chunks_exact(s.d_out)) {
                    acc += xi * row[task];
                }
                o[0] + acc
            }
            None => o[0],
        }
    }

    /// Parameters stored.
    pub fn num_params(&self) -> usize {
        let d = |d: &Dense| d.w.len() + d.b.len();
        let n = |n: &Norm| n.gamma.len() + n.beta.len();
        d(&self.input)
            + self.blocks.iter().map(|(a, b)| n(a) + d(b)).sum::<usize>()
            + n(&self.out_norm)
            + d(&self.latent)
            + self.heads.iter().map(|(a, b)| d(a) + d(b)).sum::<usize>()
            + self.skip.as_ref().map_or(0, d)
    }
}

fn floats(data: TensorData) -> Result<Vec<f32>> {
    data.convert::<f32>()
        .try_to_vec::<f32>()
        .map_err(|e| Error::InvalidData(format!("MEDN weights are not f32: {e:?}")))
}
