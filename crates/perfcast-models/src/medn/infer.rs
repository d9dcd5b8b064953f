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

/// Rows [`FastNet::forward_batch`] passes through the trunk together.
pub const BLOCK_ROWS: usize = 2;

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

    /// `out[r][..d_out] = x[r][..d_in] W + b` for `R` rows at once.
    ///
    /// Register-blocked: `OB` outputs of every row are accumulated in registers while the
    /// inputs stream past, so each weight is loaded once for `R` rows, no partial sum goes
    /// through memory, and `R * OB / 4` independent add chains hide the add latency. Every
    /// output still starts at its bias and adds its terms in input order, so the result is
    /// bit-identical to the plain loop (`out = b; out += x_i * W_i` for each input `i`).
    #[inline]
    fn apply_block<const R: usize, const W: usize, const OB: usize>(
        &self,
        x: [&[f32]; R],
        out: &mut [[f32; W]; R],
    ) {
        let (d_in, d_out) = (self.d_in, self.d_out);
        // The rows' inputs interleaved (`xt[i][r]`), so the kernel walks inputs and weight
        // rows in step with no index arithmetic or bounds checks.
        let mut xt = [[0.0f32; R]; W];
        for (r, xr) in x.iter().enumerate() {
            for (t, v) in xt.iter_mut().zip(&xr[..d_in]) {
                t[r] = *v;
            }
        }
        let xt = &xt[..d_in];
        let w = &self.w[..d_in * d_out];
        let mut j = 0;
        while j + OB <= d_out {
            self.block::<R, W, OB>(xt, w, j, out);
            j += OB;
        }
        // Narrower blocks for the rest (a head's 1-wide output, a width not divisible by OB).
        while j + 4 <= d_out {
            self.block::<R, W, 4>(xt, w, j, out);
            j += 4;
        }
        while j < d_out {
            self.block::<R, W, 1>(xt, w, j, out);
            j += 1;
        }
    }

    /// Outputs `j..j + OB` of every row.
    #[inline(always)]
    fn block<const R: usize, const W: usize, const OB: usize>(
        &self,
        xt: &[[f32; R]],
        w: &[f32],
        j: usize,
        out: &mut [[f32; W]; R],
    ) {
        let mut acc = [[0.0f32; OB]; R];
        for a in &mut acc {
            a.copy_from_slice(&self.b[j..j + OB]);
        }
        for (xi, wrow) in xt.iter().zip(w.chunks_exact(self.d_out)) {
            let wv = &wrow[j..j + OB];
            for (a, x) in acc.iter_mut().zip(xi) {
                for (o, wk) in a.iter_mut().zip(wv) {
                    *o += x * wk;
                }
            }
        }
        for (o, a) in out.iter_mut().zip(&acc) {
            o[j..j + OB].copy_from_slice(a);
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

    /// Normalises `R` rows at once. The rows' sums are independent chains, interleaved so
    /// the adds overlap; each row still sums in order from `-0.0`, as `Iterator::sum` does,
    /// so results are bit-identical to one row at a time.
    #[inline]
    fn apply_block<const R: usize, const W: usize>(
        &self,
        x: &[[f32; W]; R],
        out: &mut [[f32; W]; R],
    ) {
        let d = self.gamma.len();
        let mut mean = [-0.0f32; R];
        for i in 0..d {
            for (m, xr) in mean.iter_mut().zip(x) {
                *m += xr[i];
            }
        }
        for m in &mut mean {
            *m /= d as f32;
        }
        let mut var = [-0.0f32; R];
        for i in 0..d {
            for ((v, xr), m) in var.iter_mut().zip(x).zip(&mean) {
                *v += (xr[i] - m) * (xr[i] - m);
            }
        }
        for (((o, xr), m), v) in out.iter_mut().zip(x).zip(&mean).zip(&var) {
            let inv = 1.0 / (v / d as f32 + NORM_EPS).sqrt();
            for (((o, xv), g), b) in o[..d]
                .iter_mut()
                .zip(&xr[..d])
                .zip(&self.gamma)
                .zip(&self.beta)
            {
                *o = (xv - m) * inv * g + b;
            }
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
        let mut out = [0.0f32; 1];
        match self.widest() {
            0..=64 => self.forward_block::<1, 64, 32>([x], [task], &mut out),
            65..=128 => self.forward_block::<1, 128, 32>([x], [task], &mut out),
            _ => self.forward_block::<1, MAX_WIDTH, 32>([x], [task], &mut out),
        }
        out[0]
    }

    /// Outputs for many standardised rows: row `i` is `xs[i * width..][..width]` and asks for
    /// head `heads[i]`; results go to `out[i]`. Rows pass through the network [`BLOCK_ROWS`] at
    /// a time; each result is bit-identical to [`FastNet::forward_one`] of its row.
    pub fn forward_batch(&self, xs: &[f32], width: usize, heads: &[usize], out: &mut [f32]) {
        match self.widest() {
            0..=64 => self.forward_rows::<64>(xs, width, heads, out),
            65..=128 => self.forward_rows::<128>(xs, width, heads, out),
            _ => self.forward_rows::<MAX_WIDTH>(xs, width, heads, out),
        }
    }

    /// The widest layer input or output: the stack buffers of a pass are this wide, so a
    /// 64-wide net does not clear 512-wide ones.
    fn widest(&self) -> usize {
        let heads = self
            .heads
            .iter()
            .map(|(h, o)| h.d_in.max(h.d_out).max(o.d_out))
            .max();
        self.input
            .d_in
            .max(self.input.d_out)
            .max(self.latent.d_out)
            .max(heads.unwrap_or(0))
    }

    fn forward_rows<const W: usize>(
        &self,
        xs: &[f32],
        width: usize,
        heads: &[usize],
        out: &mut [f32],
    ) {
        let n = heads.len().min(out.len());
        let row = |i: usize| &xs[i * width..(i + 1) * width];
        let mut i = 0;
        while i + BLOCK_ROWS <= n {
            let mut o = [0.0f32; BLOCK_ROWS];
            self.forward_block::<BLOCK_ROWS, W, 16>(
                std::array::from_fn(|r| row(i + r)),
                std::array::from_fn(|r| heads[i + r]),
                &mut o,
            );
            out[i..i + BLOCK_ROWS].copy_from_slice(&o);
            i += BLOCK_ROWS;
        }
        for i in i..n {
            let mut o = [0.0f32; 1];
            self.forward_block::<1, W, 32>([row(i)], [heads[i]], &mut o);
            out[i] = o[0];
        }
    }

    /// The forward pass of `R` rows, row `r` through head `tasks[r]`, with `W`-wide buffers
    /// and `OB`-output register blocks in the trunk; no allocation.
    fn forward_block<const R: usize, const W: usize, const OB: usize>(
        &self,
        x: [&[f32]; R],
        tasks: [usize; R],
        out: &mut [f32; R],
    ) {
        let mut h = [[0.0f32; W]; R];
        let mut t = [[0.0f32; W]; R];
        let mut u = [[0.0f32; W]; R];
        let w = self.input.d_out;
        self.input.apply_block::<R, W, OB>(x, &mut h);
        for (norm, dense) in &self.blocks {
            norm.apply_block(&h, &mut t);
            dense.apply_block::<R, W, OB>(std::array::from_fn(|r| &t[r][..]), &mut u);
            for (hr, ur) in h.iter_mut().zip(&u) {
                for (hv, uv) in hr[..w].iter_mut().zip(&ur[..w]) {
                    *hv += uv.max(0.0);
                }
            }
        }
        self.out_norm.apply_block(&h, &mut t);
        self.latent
            .apply_block::<R, W, OB>(std::array::from_fn(|r| &t[r][..]), &mut u);
        let latent = self.latent.d_out;
        for ur in &mut u {
            for v in &mut ur[..latent] {
                *v = v.max(0.0);
            }
        }
        // Heads may differ between the rows. The hidden layer runs row by row (its outputs
        // are independent chains already); the 1-wide output and the skip column are one
        // chain of adds per row, so the rows' chains are interleaved.
        let mut th = [[0.0f32; W]; R];
        for (r, tr) in th.iter_mut().enumerate() {
            let hidden = &self.heads[tasks[r]].0;
            let mut one = [[0.0f32; W]; 1];
            hidden.apply_block::<1, W, 32>([&u[r][..]], &mut one);
            for v in &mut one[0][..hidden.d_out] {
                *v = v.max(0.0);
            }
            *tr = one[0];
        }
        let outs: [&Dense; R] = std::array::from_fn(|r| &self.heads[tasks[r]].1);
        let mut o = [0.0f32; R];
        if outs.iter().all(|d| d.d_out == 1 && d.d_in == outs[0].d_in) {
            for (or, d) in o.iter_mut().zip(&outs) {
                *or = d.b[0];
            }
            for i in 0..outs[0].d_in {
                for ((or, d), tr) in o.iter_mut().zip(&outs).zip(&th) {
                    *or += tr[i] * d.w[i];
                }
            }
        } else {
            for ((or, d), tr) in o.iter_mut().zip(&outs).zip(&th) {
                let mut one = [[0.0f32; W]; 1];
                d.apply_block::<1, W, 32>([&tr[..]], &mut one);
                *or = one[0][0];
            }
        }
        match &self.skip {
            // Column `task` of the skip layer: the whole layer would waste the other heads'
            // work.
            Some(s) => {
                let mut acc: [f32; R] = std::array::from_fn(|r| s.b[tasks[r]]);
                for (i, row) in s.w.chunks_exact(s.d_out).take(s.d_in).enumerate() {
                    for ((a, xr), t) in acc.iter_mut().zip(&x).zip(&tasks) {
                        *a += xr[i] * row[*t];
                    }
                }
                for ((dst, or), a) in out.iter_mut().zip(&o).zip(&acc) {
                    *dst = or + a;
                }
            }
            None => *out = o,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The plain single-row forward the blocked kernels replaced: the definition they must
    /// reproduce bit for bit.
    fn reference(net: &FastNet, x: &[f32], task: usize) -> f32 {
        fn dense(d: &Dense, x: &[f32]) -> Vec<f32> {
            let mut out = d.b.clone();
            for (xi, row) in x[..d.d_in].iter().zip(d.w.chunks_exact(d.d_out)) {
                for (o, w) in out.iter_mut().zip(row) {
                    *o += xi * w;
                }
            }
            out
        }
        fn norm(n: &Norm, x: &[f32]) -> Vec<f32> {
            let d = n.gamma.len();
            let x = &x[..d];
            let mean = x.iter().sum::<f32>() / d as f32;
            let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / d as f32;
            let inv = 1.0 / (var + NORM_EPS).sqrt();
            x.iter()
                .zip(&n.gamma)
                .zip(&n.beta)
                .map(|((v, g), b)| (v - mean) * inv * g + b)
                .collect()
        }
        let mut h = dense(&net.input, x);
        for (n, d) in &net.blocks {
            let u = dense(d, &norm(n, &h));
            for (hv, uv) in h.iter_mut().zip(&u) {
                *hv += uv.max(0.0);
            }
        }
        let l: Vec<f32> = dense(&net.latent, &norm(&net.out_norm, &h))
            .iter()
            .map(|v| v.max(0.0))
            .collect();
        let (hidden, out) = &net.heads[task];
        let t: Vec<f32> = dense(hidden, &l).iter().map(|v| v.max(0.0)).collect();
        let o = dense(out, &t)[0];
        match &net.skip {
            Some(s) => {
                let mut acc = s.b[task];
                for (xi, row) in x[..s.d_in].iter().zip(s.w.chunks_exact(s.d_out)) {
                    acc += xi * row[task];
                }
                o + acc
            }
            None => o,
        }
    }

    fn net(d_input: usize, width: usize, latent: usize, head: usize, skip: bool) -> FastNet {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        };
        let mut dense = |i: usize, o: usize| Dense {
            d_in: i,
            d_out: o,
            w: (0..i * o).map(|_| rnd() * 0.4).collect(),
            b: (0..o).map(|_| rnd() * 0.1).collect(),
        };
        let blocks = (0..2)
            .map(|_| {
                (
                    Norm {
                        gamma: vec![1.1; width],
                        beta: vec![0.05; width],
                    },
                    dense(width, width),
                )
            })
            .collect();
        FastNet {
            input: dense(d_input, width),
            blocks,
            out_norm: Norm {
                gamma: vec![0.9; width],
                beta: vec![-0.02; width],
            },
            latent: dense(width, latent),
            heads: vec![
                (dense(latent, head), dense(head, 1)),
                (dense(latent, head), dense(head, 1)),
            ],
            skip: skip.then(|| dense(d_input, 2)),
        }
    }

    #[test]
    fn blocked_forward_passes_match_the_plain_loops_bit_for_bit() {
        // The default shape, odd widths (kernel tails), and a wide one (the 512 buffers).
        for (d_input, width, latent, head, skip) in [
            (73, 64, 32, 32, true),
            (37, 20, 7, 5, false),
            (300, 160, 40, 24, true),
        ] {
            let net = net(d_input, width, latent, head, skip);
            let rows = 9;
            let xs: Vec<f32> = (0..rows * d_input)
                .map(|i| ((i * 7919) % 1001) as f32 / 400.0 - 1.2)
                .collect();
            let heads: Vec<usize> = (0..rows).map(|i| (i / 2) % 2).collect();
            let mut out = vec![0.0f32; rows];
            net.forward_batch(&xs, d_input, &heads, &mut out);
            for i in 0..rows {
                let x = &xs[i * d_input..(i + 1) * d_input];
                let one = net.forward_one(x, heads[i]);
                assert_eq!(
                    one.to_bits(),
                    reference(&net, x, heads[i]).to_bits(),
                    "{width}"
                );
                assert_eq!(out[i].to_bits(), one.to_bits(), "row {i} of width {width}");
            }
        }
    }
}
