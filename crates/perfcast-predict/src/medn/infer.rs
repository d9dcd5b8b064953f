//! The fast inference path: a trained network's weights as plain `f32` arrays and a forward
//! pass without autodiff, tensor allocation or dispatch, one row at a time or many.
//!
//! A 64-wide MEDN is ~15k multiply-adds per row; through a tensor framework the per-op
//! overhead dwarfs that, so serving uses these loops. perfcast-models holds them to burn's
//! forward within 1e-5 relative (`fast_path_matches_burn`), and they agree with the plain
//! single-row loops (`tests::reference`) within float rounding: dense layers use fused
//! multiply-adds and reductions (a layer norm's sums, a head's output, the skip column) sum in
//! [`STRIPES`] partial sums, so a single row is not one long chain of dependent adds. Every
//! path here (single rows, the row kernels' blocks, the SIMD lanes, whatever the vector
//! width) does the same operations in the same order, so they give the same bits.
//!
//! Batches run with one row per SIMD lane where the CPU has vectors of 4 lanes or more
//! ([`pulp::Arch`] picks AVX2 at run time, in safe code): activations are held transposed,
//! one vector of rows per feature, so a dense layer is a broadcast weight times vectors of
//! rows and a layer norm's sums are vector adds, each row still summing its features in
//! order. Elsewhere, and for a row or two left over, the register-blocked row kernels serve,
//! [`BLOCK_ROWS`] rows at a time, compiled inside the same dispatch (single rows too).

use pulp::Simd;
use serde::{Deserialize, Serialize};

use super::config::MednConfig;
use crate::error::{Error, Result};

/// Widest layer the stack buffers of [`FastNet::forward_one`] hold.
pub const MAX_WIDTH: usize = 512;

/// Rows [`FastNet::forward_batch`] passes through the trunk together without SIMD lanes to
/// spare (the portable build's row kernels); with AVX2 it is [`LANE_VECTORS`] vectors of 8.
pub const BLOCK_ROWS: usize = 2;

/// Vectors of rows a SIMD block holds: two independent chains per add, so a layer norm's
/// sums and a dense layer's accumulators wait half as long on the add latency.
pub const LANE_VECTORS: usize = 2;

/// Outputs of a dense layer a SIMD block accumulates together, each in [`LANE_VECTORS`]
/// registers and two parities of inputs: 12 accumulators, the x vectors and a broadcast
/// weight fit AVX2's 16 registers.
const LANE_OUTPUTS: usize = 3;

/// Partial sums a reduction (a layer norm's mean and variance, a head's 1-wide output, the
/// skip column) keeps: term `i` goes to partial sum `i % STRIPES`, so one row waits on a few
/// adds per stripe instead of one per term, and the SIMD-lane kernels sum the same way.
const STRIPES: usize = 8;

/// LayerNorm's epsilon (burn's default, which the networks are trained with).
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
    /// `out[r][..d_out] = x[r][..d_in] W + b` for `R` rows at once.
    ///
    /// Register-blocked: `OB` outputs of every row are accumulated in registers while the
    /// inputs stream past, so each weight is loaded once for `R` rows, no partial sum goes
    /// through memory, and `R * OB / 8` independent chains hide the latency. Every output
    /// starts at its bias and takes its terms in input order with fused multiply-adds, as the
    /// SIMD-lane kernels do, so every path gives the same bits.
    #[inline(always)]
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
        // A 64-wide rest waits on fewer adds as two 32-wide blocks than as 48 and 16.
        while j + OB <= d_out && !(OB == 48 && d_out - j == 64) {
            self.block::<R, W, OB>(xt, w, j, out);
            j += OB;
        }
        // Narrower blocks for the rest (a head's 1-wide output, a width not divisible by OB),
        // widest first: a block walks every input once, and its outputs are independent add
        // chains, so a 48-wide layer in one 32-block and four 4-blocks waits on the adds five
        // times where a 32 and a 16 wait twice.
        if OB > 48 {
            while j + 48 <= d_out {
                self.block::<R, W, 48>(xt, w, j, out);
                j += 48;
            }
        }
        if OB > 32 {
            while j + 32 <= d_out {
                self.block::<R, W, 32>(xt, w, j, out);
                j += 32;
            }
        }
        if OB > 16 {
            while j + 16 <= d_out {
                self.block::<R, W, 16>(xt, w, j, out);
                j += 16;
            }
        }
        if OB > 8 {
            while j + 8 <= d_out {
                self.block::<R, W, 8>(xt, w, j, out);
                j += 8;
            }
        }
        while j + 4 <= d_out {
            self.block::<R, W, 4>(xt, w, j, out);
            j += 4;
        }
        while j < d_out {
            self.block::<R, W, 1>(xt, w, j, out);
            j += 1;
        }
    }

    /// Outputs `j..j + OB` of every row: even inputs summed from the bias, odd ones from
    /// zero, the two added at the end ([`dense_block`] sums the same way), so a single row has
    /// twice the independent chains.
    #[inline(always)]
    fn block<const R: usize, const W: usize, const OB: usize>(
        &self,
        xt: &[[f32; R]],
        w: &[f32],
        j: usize,
        out: &mut [[f32; W]; R],
    ) {
        #[inline(always)]
        fn step<const R: usize, const OB: usize>(
            acc: &mut [[f32; OB]; R],
            xi: &[f32; R],
            wv: &[f32],
        ) {
            for (a, x) in acc.iter_mut().zip(xi) {
                for (o, wk) in a.iter_mut().zip(wv) {
                    *o = x.mul_add(*wk, *o);
                }
            }
        }
        let d_out = self.d_out;
        let mut even = [[0.0f32; OB]; R];
        let mut odd = [[0.0f32; OB]; R];
        for a in &mut even {
            a.copy_from_slice(&self.b[j..j + OB]);
        }
        let mut pairs = xt.chunks_exact(2);
        let mut rows = w.chunks_exact(2 * d_out);
        for (xp, wp) in (&mut pairs).zip(&mut rows) {
            step(&mut even, &xp[0], &wp[j..j + OB]);
            step(&mut odd, &xp[1], &wp[d_out + j..d_out + j + OB]);
        }
        if let [xl] = pairs.remainder() {
            step(&mut even, xl, &rows.remainder()[j..j + OB]);
        }
        for ((o, e), d) in out.iter_mut().zip(&even).zip(&odd) {
            for ((o, e), d) in o[j..j + OB].iter_mut().zip(e).zip(d) {
                *o = e + d;
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
    /// Normalises `R` rows at once. Each row's sums are [`STRIPES`] partial sums combined as a
    /// tree ([`striped_sum`]), as the SIMD-lane kernel sums, so a row waits on a few adds per
    /// stripe instead of one per feature.
    #[inline(always)]
    fn apply_block<const R: usize, const W: usize>(
        &self,
        x: &[[f32; W]; R],
        out: &mut [[f32; W]; R],
    ) {
        let d = self.gamma.len();
        for (o, xr) in out.iter_mut().zip(x) {
            let xr = &xr[..d];
            let mean = striped_sum(xr) / d as f32;
            let var = striped_squares(xr, mean) / d as f32;
            let inv = 1.0 / (var + NORM_EPS).sqrt();
            for (((o, xv), g), b) in o[..d].iter_mut().zip(xr).zip(&self.gamma).zip(&self.beta) {
                *o = ((xv - mean) * inv).mul_add(*g, *b);
            }
        }
    }
}

/// The partial sums of a striped reduction added as a fixed tree.
#[inline(always)]
fn tree(p: [f32; STRIPES]) -> f32 {
    ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]))
}

/// `sum_i x_i`, striped ([`STRIPES`]).
#[inline(always)]
fn striped_sum(x: &[f32]) -> f32 {
    let mut p = [0.0f32; STRIPES];
    let mut chunks = x.chunks_exact(STRIPES);
    for c in &mut chunks {
        for (a, v) in p.iter_mut().zip(c) {
            *a += v;
        }
    }
    for (a, v) in p.iter_mut().zip(chunks.remainder()) {
        *a += v;
    }
    tree(p)
}

/// `sum_i (x_i - mean)^2`, striped ([`STRIPES`]).
#[inline(always)]
fn striped_squares(x: &[f32], mean: f32) -> f32 {
    let mut p = [0.0f32; STRIPES];
    let mut chunks = x.chunks_exact(STRIPES);
    for c in &mut chunks {
        for (a, v) in p.iter_mut().zip(c) {
            let c = v - mean;
            *a = c.mul_add(c, *a);
        }
    }
    for (a, v) in p.iter_mut().zip(chunks.remainder()) {
        let c = v - mean;
        *a = c.mul_add(c, *a);
    }
    tree(p)
}

/// `sum_i x_i w[i * stride]`, striped ([`STRIPES`]): a 1-wide layer's output (`stride` 1)
/// or one column of a row-major matrix (`stride` its width).
#[inline(always)]
fn striped_dot(x: &[f32], w: &[f32], stride: usize) -> f32 {
    let mut p = [0.0f32; STRIPES];
    for (i, xv) in x.iter().enumerate() {
        let k = i % STRIPES;
        p[k] = xv.mul_add(w[i * stride], p[k]);
    }
    tree(p)
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
        // The row kernels through the dispatch, compiled for the CPU's vectors (a lone row
        // takes them there).
        self.forward_batch(x, x.len(), &[task], &mut out);
        out[0]
    }

    /// Outputs for many standardised rows: row `i` is `xs[i * width..][..width]` and asks for
    /// head `heads[i]`; results go to `out[i]`. Rows pass through the network [`BLOCK_ROWS`] at
    /// a time, or one per SIMD lane (16 at a time with AVX2); each result is bit-identical to
    /// [`FastNet::forward_one`] of its row.
    pub fn forward_batch(&self, xs: &[f32], width: usize, heads: &[usize], out: &mut [f32]) {
        pulp::Arch::new().dispatch(Batch {
            net: self,
            xs,
            width,
            heads,
            out,
        });
    }

    /// [`FastNet::forward_batch`] with the row kernels, whatever the CPU.
    #[inline(always)]
    fn forward_rows_any(&self, xs: &[f32], width: usize, heads: &[usize], out: &mut [f32]) {
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

    #[inline(always)]
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
            // Twelve accumulators (six vectors of outputs, two parities) still fit the
            // registers, and a 48-wide layer then walks its inputs once instead of twice.
            self.forward_block::<1, W, 48>([row(i)], [heads[i]], &mut o);
            out[i] = o[0];
        }
    }

    /// The forward pass of `R` rows, row `r` through head `tasks[r]`, with `W`-wide buffers
    /// and `OB`-output register blocks in the trunk; no allocation.
    #[inline(always)]
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
        // Heads may differ between the rows, so each row runs its own; the 1-wide output and
        // the skip column are dot products, summed in stripes.
        for (r, dst) in out.iter_mut().enumerate() {
            let (hidden, last) = &self.heads[tasks[r]];
            let mut one = [[0.0f32; W]; 1];
            hidden.apply_block::<1, W, 32>([&u[r][..]], &mut one);
            let th = &mut one[0][..hidden.d_out];
            for v in th.iter_mut() {
                *v = v.max(0.0);
            }
            let y = last.b[0] + striped_dot(th, &last.w, 1);
            *dst = match &self.skip {
                // Column `task` of the skip layer: the whole layer would waste the other
                // heads' work.
                Some(s) => {
                    let t = tasks[r];
                    y + (s.b[t] + striped_dot(&x[r][..s.d_in], &s.w[t..], s.d_out))
                }
                None => y,
            };
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

/// [`FastNet::forward_batch`]'s work, run by [`pulp::Arch::dispatch`] in code compiled for the
/// instruction set found: everything below `with_simd` is `#[inline(always)]` (closures are
/// not), so it is compiled into the dispatch target with its vector width.
struct Batch<'a> {
    net: &'a FastNet,
    xs: &'a [f32],
    width: usize,
    heads: &'a [usize],
    out: &'a mut [f32],
}

impl pulp::WithSimd for Batch<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let Batch {
            net,
            xs,
            width,
            heads,
            out,
        } = self;
        if S::F32_LANES < 4 {
            net.forward_rows_any(xs, width, heads, out);
            return;
        }
        let n = heads.len().min(out.len());
        let mut i = 0;
        // Full blocks, then one of a single vector where that covers the rest, or the row
        // kernels for a row or two.
        if n > S::F32_LANES {
            let mut lanes = Lanes::<S, LANE_VECTORS>::new(simd, net);
            while n - i > S::F32_LANES {
                let end = n.min(i + LANE_VECTORS * S::F32_LANES);
                lanes.run(&xs[i * width..], width, &heads[i..end], &mut out[i..end]);
                i = end;
            }
        }
        if i < n && n - i <= ROW_KERNEL_ROWS {
            net.forward_rows_any(&xs[i * width..], width, &heads[i..n], &mut out[i..n]);
        } else if i < n {
            let xs = &xs[i * width..];
            Lanes::<S, 1>::new(simd, net).run(xs, width, &heads[i..n], &mut out[i..n]);
        }
    }
}

/// Rows left after the SIMD blocks that take the row kernels instead of a vector of mostly
/// spare lanes, because a vector costs the same whatever it holds and one or two rows pass
/// faster alone (docs/accuracy.md#figures-behind-code-choices).
const ROW_KERNEL_ROWS: usize = 2;

/// Scratch for passing `V` vectors of rows through a network: each buffer holds one `[S::f32s;
/// V]` per feature (rows transposed), as wide as the widest layer.
struct Lanes<'a, S: Simd, const V: usize> {
    simd: S,
    net: &'a FastNet,
    x: Vec<[S::f32s; V]>,
    h: Vec<[S::f32s; V]>,
    t: Vec<[S::f32s; V]>,
    u: Vec<[S::f32s; V]>,
}

impl<'a, S: Simd, const V: usize> Lanes<'a, S, V> {
    #[inline(always)]
    fn new(simd: S, net: &'a FastNet) -> Self {
        let zero = [simd.splat_f32s(0.0); V];
        let w = net.widest();
        Lanes {
            simd,
            net,
            x: vec![zero; w],
            h: vec![zero; w],
            t: vec![zero; w],
            u: vec![zero; w],
        }
    }

    /// Rows `heads.len()` (at most `V` vectors' worth) of `xs`, from its start: transposed
    /// into the lanes (spare lanes repeat the first row and their results are dropped), passed
    /// through the network, and each row's result put in `out`.
    #[inline(always)]
    fn run(&mut self, xs: &[f32], width: usize, heads: &[usize], out: &mut [f32]) {
        let (simd, net) = (self.simd, self.net);
        let rows = V * S::F32_LANES;
        let n = heads.len().min(out.len()).min(rows);
        let d_in = net.input.d_in;
        for (k, xk) in self.x[..d_in].iter_mut().enumerate() {
            let lanes: &mut [f32] = pulp::bytemuck::cast_slice_mut(xk.as_mut_slice());
            for (r, l) in lanes.iter_mut().enumerate() {
                let src = if r < n { r } else { 0 };
                *l = xs[src * width + k];
            }
        }
        let (x, h, t, u) = (&self.x, &mut self.h, &mut self.t, &mut self.u);
        let zero = simd.splat_f32s(0.0);
        let w = net.input.d_out;
        dense_t(simd, &net.input, x, h);
        for (norm, dense) in &net.blocks {
            norm_t(simd, norm, h, t);
            dense_t(simd, dense, t, u);
            for (hv, uv) in h[..w].iter_mut().zip(&u[..w]) {
                for (a, b) in hv.iter_mut().zip(uv) {
                    *a = simd.add_f32s(*a, simd.max_f32s(*b, zero));
                }
            }
        }
        norm_t(simd, &net.out_norm, h, t);
        dense_t(simd, &net.latent, t, u);
        for v in u[..net.latent.d_out].iter_mut().flatten() {
            *v = simd.max_f32s(*v, zero);
        }
        // Each head in use runs on every lane; each row keeps its own head's result.
        for (r, &task) in heads[..n].iter().enumerate() {
            if heads[..r].contains(&task) {
                continue;
            }
            let (hidden, last) = &net.heads[task];
            dense_t(simd, hidden, u, t);
            for v in t[..hidden.d_out].iter_mut().flatten() {
                *v = simd.max_f32s(*v, zero);
            }
            let mut y = dot_t(simd, &t[..last.d_in], last.b[0], &last.w, 1);
            // Column `task` of the skip layer: the whole layer would waste the other heads'
            // work.
            if let Some(s) = &net.skip {
                let c = dot_t(simd, &x[..s.d_in], s.b[task], &s.w[task..], s.d_out);
                for (a, b) in y.iter_mut().zip(&c) {
                    *a = simd.add_f32s(*a, *b);
                }
            }
            let y: &[f32] = pulp::bytemuck::cast_slice(y.as_slice());
            for ((o, v), &head) in out[..n].iter_mut().zip(y).zip(&heads[..n]) {
                if head == task {
                    *o = *v;
                }
            }
        }
    }
}

/// `out[j] = b_j + sum_i x[i] W[i][j]` for `V` vectors of transposed rows (`x`: `d_in`
/// features; `out` gets `d_out`).
#[inline(always)]
fn dense_t<S: Simd, const V: usize>(
    simd: S,
    d: &Dense,
    x: &[[S::f32s; V]],
    out: &mut [[S::f32s; V]],
) {
    // At least 8 independent accumulator chains whatever `V` (two parities of inputs each),
    // so the latency is hidden and the 16 registers hold the accumulators, inputs and a weight.
    if V == 1 {
        dense_t_by::<S, V, 4>(simd, d, x, out);
    } else {
        dense_t_by::<S, V, LANE_OUTPUTS>(simd, d, x, out);
    }
}

/// [`dense_t`] with `OB` outputs per register block.
#[inline(always)]
fn dense_t_by<S: Simd, const V: usize, const OB: usize>(
    simd: S,
    d: &Dense,
    x: &[[S::f32s; V]],
    out: &mut [[S::f32s; V]],
) {
    let mut j = 0;
    while j + OB <= d.d_out {
        out[j..j + OB].copy_from_slice(&dense_block::<S, V, OB>(simd, d, x, j));
        j += OB;
    }
    while j < d.d_out {
        out[j..j + 1].copy_from_slice(&dense_block::<S, V, 1>(simd, d, x, j));
        j += 1;
    }
}

/// Outputs `j..j + OB` of a dense layer for `V` vectors of transposed rows: each weight is
/// broadcast once for all the rows, and each output takes its even inputs from its bias and
/// its odd ones from zero with fused multiply-adds, in input order, and adds the two, as the
/// row kernels do.
#[inline(always)]
fn dense_block<S: Simd, const V: usize, const OB: usize>(
    simd: S,
    d: &Dense,
    x: &[[S::f32s; V]],
    j: usize,
) -> [[S::f32s; V]; OB] {
    #[inline(always)]
    fn step<S: Simd, const V: usize, const OB: usize>(
        simd: S,
        acc: &mut [[S::f32s; V]; OB],
        xi: &[S::f32s; V],
        wv: &[f32],
    ) {
        for (a, w) in acc.iter_mut().zip(wv) {
            let w = simd.splat_f32s(*w);
            for (a, xv) in a.iter_mut().zip(xi) {
                *a = simd.mul_add_f32s(*xv, w, *a);
            }
        }
    }
    let zero = simd.splat_f32s(0.0);
    let mut even = [[zero; V]; OB];
    let mut odd = [[zero; V]; OB];
    for (a, b) in even.iter_mut().zip(&d.b[j..j + OB]) {
        *a = [simd.splat_f32s(*b); V];
    }
    let d_out = d.d_out;
    let mut pairs = x[..d.d_in].chunks_exact(2);
    let mut rows = d.w.chunks_exact(2 * d_out);
    for (xp, wp) in (&mut pairs).zip(&mut rows) {
        step(simd, &mut even, &xp[0], &wp[j..j + OB]);
        step(simd, &mut odd, &xp[1], &wp[d_out + j..d_out + j + OB]);
    }
    if let [xl] = pairs.remainder() {
        step(simd, &mut even, xl, &rows.remainder()[j..j + OB]);
    }
    for (e, o) in even.iter_mut().zip(&odd) {
        for (e, o) in e.iter_mut().zip(o) {
            *e = simd.add_f32s(*e, *o);
        }
    }
    even
}

/// The partial sums of a striped reduction added as [`tree`] does, lane by lane.
#[inline(always)]
fn tree_t<S: Simd>(simd: S, p: [S::f32s; STRIPES]) -> S::f32s {
    let add = |a, b| simd.add_f32s(a, b);
    add(
        add(add(p[0], p[1]), add(p[2], p[3])),
        add(add(p[4], p[5]), add(p[6], p[7])),
    )
}

/// `bias + sum_i x_i w[i * stride]` for `V` vectors of transposed rows, striped as
/// [`striped_dot`] sums.
#[inline(always)]
fn dot_t<S: Simd, const V: usize>(
    simd: S,
    x: &[[S::f32s; V]],
    bias: f32,
    w: &[f32],
    stride: usize,
) -> [S::f32s; V] {
    let mut out = [simd.splat_f32s(bias); V];
    for (v, o) in out.iter_mut().enumerate() {
        let mut p = [simd.splat_f32s(0.0); STRIPES];
        for (i, xi) in x.iter().enumerate() {
            let k = i % STRIPES;
            p[k] = simd.mul_add_f32s(xi[v], simd.splat_f32s(w[i * stride]), p[k]);
        }
        *o = simd.add_f32s(*o, tree_t(simd, p));
    }
    out
}

/// Layer normalisation of `V` vectors of transposed rows, each row's sums striped as the row
/// kernel's ([`striped_sum`], [`striped_squares`]).
#[inline(always)]
fn norm_t<S: Simd, const V: usize>(
    simd: S,
    n: &Norm,
    x: &[[S::f32s; V]],
    out: &mut [[S::f32s; V]],
) {
    let d = n.gamma.len();
    let x = &x[..d];
    let width = simd.splat_f32s(d as f32);
    let zero = simd.splat_f32s(0.0);
    let mut mean = [zero; V];
    let mut inv = [zero; V];
    let (one, eps) = (simd.splat_f32s(1.0), simd.splat_f32s(NORM_EPS));
    for (v, (m, s)) in mean.iter_mut().zip(&mut inv).enumerate() {
        let mut p = [zero; STRIPES];
        for (i, xi) in x.iter().enumerate() {
            let k = i % STRIPES;
            p[k] = simd.add_f32s(p[k], xi[v]);
        }
        *m = simd.div_f32s(tree_t(simd, p), width);
        let mut q = [zero; STRIPES];
        for (i, xi) in x.iter().enumerate() {
            let k = i % STRIPES;
            let c = simd.sub_f32s(xi[v], *m);
            q[k] = simd.mul_add_f32s(c, c, q[k]);
        }
        let var = simd.div_f32s(tree_t(simd, q), width);
        *s = simd.div_f32s(one, simd.sqrt_f32s(simd.add_f32s(var, eps)));
    }
    for (((o, xi), g), b) in out[..d].iter_mut().zip(x).zip(&n.gamma).zip(&n.beta) {
        let (g, b) = (simd.splat_f32s(*g), simd.splat_f32s(*b));
        for (((o, v), m), s) in o.iter_mut().zip(xi).zip(&mean).zip(&inv) {
            *o = simd.mul_add_f32s(simd.mul_f32s(simd.sub_f32s(*v, *m), *s), g, b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plain single-row forward (in-order sums, separate multiplies and adds): the
    /// definition the kernels must reproduce within float rounding.
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
    fn every_forward_path_gives_the_same_bits_and_matches_the_plain_loops() {
        // The default shape, a 48-wide one (a single row's 48-output blocks), odd widths
        // (kernel tails), and a wide one (the 512 buffers).
        for (d_input, width, latent, head, skip) in [
            (73, 64, 32, 32, true),
            (61, 48, 32, 32, true),
            (37, 20, 7, 5, false),
            (300, 160, 40, 24, true),
        ] {
            let net = net(d_input, width, latent, head, skip);
            // A full block of 16 rows on one head, one of mixed heads, and a short one.
            let rows = 37;
            let xs: Vec<f32> = (0..rows * d_input)
                .map(|i| ((i * 7919) % 1001) as f32 / 400.0 - 1.2)
                .collect();
            let heads: Vec<usize> = (0..rows)
                .map(|i| if i < 16 { 1 } else { (i / 2) % 2 })
                .collect();
            let mut out = vec![0.0f32; rows];
            net.forward_batch(&xs, d_input, &heads, &mut out);
            // The other paths, whatever this CPU dispatches to: the row kernels, the 4-lane
            // vectors of a baseline x86-64 (SSE2) or NEON, and single rows.
            let mut rows_out = vec![0.0f32; rows];
            net.forward_rows_any(&xs, d_input, &heads, &mut rows_out);
            let mut sse = vec![0.0f32; rows];
            pulp::WithSimd::with_simd(
                Batch {
                    net: &net,
                    xs: &xs,
                    width: d_input,
                    heads: &heads,
                    out: &mut sse,
                },
                pulp::Scalar128b,
            );
            let mut one_by_one = vec![0.0f32; rows];
            for i in 0..rows {
                net.forward_batch(
                    &xs[i * d_input..],
                    d_input,
                    &heads[i..=i],
                    &mut one_by_one[i..=i],
                );
            }
            for i in 0..rows {
                let x = &xs[i * d_input..(i + 1) * d_input];
                let one = net.forward_one(x, heads[i]);
                let want = reference(&net, x, heads[i]);
                assert!(
                    (one - want).abs() <= 1e-5 * want.abs().max(1.0),
                    "row {i} of width {width}: {one} against {want}"
                );
                assert_eq!(out[i].to_bits(), one.to_bits(), "row {i} of width {width}");
                assert_eq!(rows_out[i].to_bits(), one.to_bits(), "row {i} of {width}");
                assert_eq!(sse[i].to_bits(), one.to_bits(), "row {i} of {width}");
                assert_eq!(one_by_one[i].to_bits(), one.to_bits(), "row {i} of {width}");
            }
        }
    }
}
