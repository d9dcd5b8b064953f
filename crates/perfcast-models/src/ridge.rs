//! Ridge regression on standardised log features, with optional squares and pairwise products.
//!
//! Latency is close to a power law in the work (FLOPs, bytes) and the shapes, so a linear model
//! in log space with a few second-order terms is cheap and often good. Solved in closed form:
//! `(XᵀX + λI) w = Xᵀ ln(y)` by Cholesky, the intercept unpenalised.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::features::{FeatureSchema, TrainSet};
use crate::regressor::{Fit, LogStandardiser, Regressor, SavedModel, check_train_set, check_width};

/// Hyper-parameters of [`FittedRidge`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RidgeParams {
    /// L2 penalty on the standardised coefficients; default 1e-3.
    pub lambda: f64,
    /// Polynomial degree of the expansion: 1 linear, 2 adds squares and pairwise products;
    /// default 2.
    pub degree: u8,
}

impl Default for RidgeParams {
    fn default() -> Self {
        RidgeParams {
            lambda: 1e-3,
            degree: 2,
        }
    }
}

/// Fitted ridge model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "SavedRidge")]
pub struct FittedRidge {
    schema: FeatureSchema,
    scaler: LogStandardiser,
    /// Columns that vary in training (constant ones are dropped from the expansion).
    active: Vec<usize>,
    degree: u8,
    intercept: f64,
    weights: Vec<f64>,
}

/// [`FittedRidge`] as read from a file, checked before it becomes a model: the prediction
/// path indexes rows by `active` and the scaler, and a saved file is outside input (issue 21:
/// a corrupt `active` index panicked on the first prediction).
#[derive(Deserialize)]
struct SavedRidge {
    schema: FeatureSchema,
    scaler: LogStandardiser,
    active: Vec<usize>,
    degree: u8,
    intercept: f64,
    weights: Vec<f64>,
}

impl TryFrom<SavedRidge> for FittedRidge {
    type Error = String;

    fn try_from(s: SavedRidge) -> std::result::Result<Self, String> {
        let width = s.schema.len();
        if s.scaler.mean.len() != width || s.scaler.inv_std.len() != width {
            return Err(format!(
                "ridge scaler has {} and {} columns, the schema {width}",
                s.scaler.mean.len(),
                s.scaler.inv_std.len()
            ));
        }
        if s.active.len() > MAX_ACTIVE {
            return Err(format!(
                "ridge has {} active columns, at most {MAX_ACTIVE}",
                s.active.len()
            ));
        }
        if let Some(bad) = s.active.iter().find(|&&i| i >= width) {
            return Err(format!(
                "ridge active column {bad} is past the schema's {width}"
            ));
        }
        if !(1..=2).contains(&s.degree) {
            return Err(format!("ridge degree must be 1 or 2, got {}", s.degree));
        }
        let n = s.active.len();
        let terms = if s.degree >= 2 {
            n + n * (n + 1) / 2
        } else {
            n
        };
        if s.weights.len() != terms {
            return Err(format!(
                "ridge has {} weights, its expansion {terms} terms",
                s.weights.len()
            ));
        }
        let finite = |v: &[f64]| v.iter().all(|x| x.is_finite());
        if !(s.intercept.is_finite()
            && finite(&s.weights)
            && finite(&s.scaler.mean)
            && finite(&s.scaler.inv_std))
        {
            return Err("ridge holds a value that is not finite".into());
        }
        Ok(FittedRidge {
            schema: s.schema,
            scaler: s.scaler,
            active: s.active,
            degree: s.degree,
            intercept: s.intercept,
            weights: s.weights,
        })
    }
}

/// Largest expansion width the stack buffer of `predict_row` holds.
const MAX_ACTIVE: usize = 64;

fn expand_into(z: &[f64], active: &[usize], degree: u8, out: &mut Vec<f64>) {
    out.clear();
    for &i in active {
        out.push(z[i]);
    }
    if degree >= 2 {
        for (a, &i) in active.iter().enumerate() {
            for &j in &active[a..] {
                out.push(z[i] * z[j]);
            }
        }
    }
}

/// Partial sums of [`FittedRidge`]'s prediction.
const LANES: usize = 4;

/// `lanes[j % LANES] += w[j] * scale * z[j]`, as the expansion's `w * z_a * z_b` terms.
#[inline]
fn add_products(lanes: &mut [f64; LANES], w: &[f64], z: &[f64], scale: f64) {
    let (wc, zc) = (w.chunks_exact(LANES), z.chunks_exact(LANES));
    let (wr, zr) = (wc.remainder(), zc.remainder());
    for (wv, zv) in wc.zip(zc) {
        for ((l, wj), zj) in lanes.iter_mut().zip(wv).zip(zv) {
            *l += wj * scale * zj;
        }
    }
    for ((l, wj), zj) in lanes.iter_mut().zip(wr).zip(zr) {
        *l += wj * scale * zj;
    }
}

/// The prediction's log-space sum term by term, in expansion order (the definition the
/// lane sums are checked against, and the path for a model with missing weights).
fn sequential_sum(intercept: f64, weights: &[f64], z: &[f64], degree: u8) -> f64 {
    let mut acc = intercept;
    let mut w = weights.iter();
    for v in z {
        acc += w.next().copied().unwrap_or(0.0) * v;
    }
    if degree >= 2 {
        for a in 0..z.len() {
            for b in a..z.len() {
                acc += w.next().copied().unwrap_or(0.0) * z[a] * z[b];
            }
        }
    }
    acc
}

fn expanded_len(active: usize, degree: u8) -> usize {
    if degree >= 2 {
        active + active * (active + 1) / 2
    } else {
        active
    }
}

/// Solves the symmetric positive-definite system `a x = b` in place (Cholesky).
fn cholesky_solve(a: &mut [f64], b: &mut [f64], n: usize) -> Result<()> {
    for j in 0..n {
        let mut d = a[j * n + j];
        for k in 0..j {
            d -= a[j * n + k] * a[j * n + k];
        }
        if d <= 0.0 || !d.is_finite() {
            return Err(Error::InvalidData(
                "ridge normal equations are singular; raise `lambda`".into(),
            ));
        }
        let d = d.sqrt();
        a[j * n + j] = d;
        for i in j + 1..n {
            let mut s = a[i * n + j];
            for k in 0..j {
                s -= a[i * n + k] * a[j * n + k];
            }
            a[i * n + j] = s / d;
        }
    }
    for i in 0..n {
        let mut s = b[i];
        for k in 0..i {
            s -= a[i * n + k] * b[k];
        }
        b[i] = s / a[i * n + i];
    }
    for i in (0..n).rev() {
        let mut s = b[i];
        for k in i + 1..n {
            s -= a[k * n + i] * b[k];
        }
        b[i] = s / a[i * n + i];
    }
    Ok(())
}

impl Fit for RidgeParams {
    type Fitted = FittedRidge;

    fn validate(&self) -> Result<()> {
        if !(self.lambda.is_finite() && self.lambda >= 0.0) {
            return Err(Error::InvalidParams {
                model: "ridge",
                message: format!("lambda must be non-negative, got {}", self.lambda),
            });
        }
        if !(1..=2).contains(&self.degree) {
            return Err(Error::InvalidParams {
                model: "ridge",
                message: format!("degree must be 1 or 2, got {}", self.degree),
            });
        }
        Ok(())
    }

    fn fit(&self, data: &TrainSet) -> Result<FittedRidge> {
        self.validate()?;
        check_train_set(data, 2)?;
        let scaler = LogStandardiser::fit(&data.x);
        let z = scaler.transform(&data.x);
        // Constant columns standardise to 0 everywhere: leave them out of the expansion.
        let active: Vec<usize> = (0..z.cols())
            .filter(|&j| z.iter_rows().any(|r| r[j].abs() > 1e-12))
            .take(MAX_ACTIVE)
            .collect();
        let p = expanded_len(active.len(), self.degree);
        // Normal equations on centred expansions, so the intercept is not penalised.
        let n = data.len() as f64;
        let mut rows = Vec::with_capacity(data.len());
        let mut buf = Vec::with_capacity(p);
        let mut mean = vec![0.0; p];
        for r in z.iter_rows() {
            expand_into(r, &active, self.degree, &mut buf);
            for (m, v) in mean.iter_mut().zip(&buf) {
                *m += v / n;
            }
            rows.push(buf.clone());
        }
        let ly: Vec<f64> = data.y.iter().map(|y| y.ln()).collect();
        let ly_mean = ly.iter().sum::<f64>() / n;
        let mut a = vec![0.0; p * p];
        let mut b = vec![0.0; p];
        for (row, y) in rows.iter().zip(&ly) {
            for i in 0..p {
                let xi = row[i] - mean[i];
                b[i] += xi * (y - ly_mean);
                for j in 0..=i {
                    a[i * p + j] += xi * (row[j] - mean[j]);
                }
            }
        }
        for i in 0..p {
            for j in 0..i {
                a[j * p + i] = a[i * p + j];
            }
            a[i * p + i] += self.lambda * n;
        }
        cholesky_solve(&mut a, &mut b, p)?;
        let intercept = ly_mean - b.iter().zip(&mean).map(|(w, m)| w * m).sum::<f64>();
        Ok(FittedRidge {
            schema: data.schema.clone(),
            scaler,
            active,
            degree: self.degree,
            intercept,
            weights: b,
        })
    }
}

impl FittedRidge {
    /// Predictions of rows of checked width held one after another in `rows`, one per `out`.
    fn predict_checked(&self, rows: &[f64], out: &mut [f64]) {
        let k = self.active.len();
        if self.weights.len() < expanded_len(k, self.degree) {
            for (x, o) in rows.chunks_exact(self.schema.len()).zip(out.iter_mut()) {
                let mut z = [0.0f64; MAX_ACTIVE];
                self.standardise(x, &mut z);
                *o = sequential_sum(self.intercept, &self.weights, &z[..k], self.degree).exp();
            }
            return;
        }
        pulp::Arch::new().dispatch(LaneRows {
            ridge: self,
            rows,
            out,
        });
    }

    /// The active columns of `x`, log-standardised, into `z`'s first slots.
    #[inline(always)]
    fn standardise(&self, x: &[f64], z: &mut [f64; MAX_ACTIVE]) {
        for (slot, &i) in z.iter_mut().zip(&self.active) {
            *slot =
                (crate::features::log1p_pos(x[i]) - self.scaler.mean[i]) * self.scaler.inv_std[i];
        }
    }
}

/// [`FittedRidge`]'s predictions of many rows, run by [`pulp::Arch::dispatch`] in code
/// compiled for the CPU found (everything below `with_simd` is inlined into it).
///
/// The log-space sum goes to [`LANES`] partial sums instead of one chain of ~1,000 dependent
/// adds, so the adds overlap: term `j` of each run of the expansion (the linear terms, then the
/// products with each `z_a`) goes to partial sum `j % LANES`, and the partial sums are added
/// pairwise at the end. Reassociating moves the sum by a few ulps (tested against the plain
/// sum). Where the CPU's vectors hold exactly [`LANES`] `f64`s (AVX2) the partial sums are one
/// vector and each term is the same `w * scale * z` in its lane, so every CPU gives the same
/// bits.
struct LaneRows<'a> {
    ridge: &'a FittedRidge,
    rows: &'a [f64],
    out: &'a mut [f64],
}

/// Rows [`LaneRows`] sums together: each row's partial sums are one chain of adds, so
/// interleaving rows overlaps the chains.
const LANE_ROWS: usize = 4;

impl pulp::WithSimd for LaneRows<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        let LaneRows { ridge, rows, out } = self;
        let width = ridge.schema.len();
        if S::F64_LANES != LANES {
            for (x, o) in rows.chunks_exact(width).zip(out.iter_mut()) {
                let mut z = [0.0f64; MAX_ACTIVE];
                ridge.standardise(x, &mut z);
                *o = ridge.finish(lane_sums(ridge, &z));
            }
            return;
        }
        let mut blocks = rows.chunks_exact(width * LANE_ROWS);
        let mut outs = out.chunks_exact_mut(LANE_ROWS);
        for (block, out) in (&mut blocks).zip(&mut outs) {
            vector_rows::<S, LANE_ROWS>(simd, ridge, block, out);
        }
        for (x, o) in blocks
            .remainder()
            .chunks_exact(width)
            .zip(outs.into_remainder())
        {
            vector_rows::<S, 1>(simd, ridge, x, std::slice::from_mut(o));
        }
    }
}

impl FittedRidge {
    /// The prediction from the partial sums.
    #[inline(always)]
    fn finish(&self, lanes: [f64; LANES]) -> f64 {
        (self.intercept + ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3]))).exp()
    }
}

/// The partial sums of one standardised row, one scalar chain per lane.
#[inline(always)]
fn lane_sums(ridge: &FittedRidge, z: &[f64; MAX_ACTIVE]) -> [f64; LANES] {
    let k = ridge.active.len();
    let z = &z[..k];
    let (linear, mut rest) = ridge.weights.split_at(k);
    let mut lanes = [0.0f64; LANES];
    add_products(&mut lanes, linear, z, 1.0);
    if ridge.degree >= 2 {
        for (a, &za) in z.iter().enumerate() {
            let (row, tail) = rest.split_at(k - a);
            add_products(&mut lanes, row, &z[a..], za);
            rest = tail;
        }
    }
    lanes
}

/// `R` rows' predictions with each row's [`LANES`] partial sums in one vector of exactly that
/// many lanes: the same terms in the same lanes as [`lane_sums`].
#[inline(always)]
fn vector_rows<S: pulp::Simd, const R: usize>(
    simd: S,
    ridge: &FittedRidge,
    rows: &[f64],
    out: &mut [f64],
) {
    let k = ridge.active.len();
    let width = ridge.schema.len();
    let mut z = [[0.0f64; MAX_ACTIVE]; R];
    for (zr, x) in z.iter_mut().zip(rows.chunks_exact(width)) {
        ridge.standardise(x, zr);
    }
    let mut acc = [simd.splat_f64s(0.0); R];
    let (linear, mut rest) = ridge.weights.split_at(k);
    add_products_rows(simd, &mut acc, linear, &z, 0, [1.0; R]);
    if ridge.degree >= 2 {
        for a in 0..k {
            let (row, tail) = rest.split_at(k - a);
            add_products_rows(simd, &mut acc, row, &z, a, std::array::from_fn(|r| z[r][a]));
            rest = tail;
        }
    }
    for (o, a) in out.iter_mut().zip(&acc) {
        let mut lanes = [0.0f64; LANES];
        lanes.copy_from_slice(pulp::bytemuck::cast_slice(std::slice::from_ref(a)));
        *o = ridge.finish(lanes);
    }
}

/// [`add_products`] for `R` rows at once, each row's partial sums in one vector:
/// `acc[r][j % LANES] += w[j] * scale[r] * z[r][offset + j]`.
#[inline(always)]
fn add_products_rows<S: pulp::Simd, const R: usize>(
    simd: S,
    acc: &mut [S::f64s; R],
    w: &[f64],
    z: &[[f64; MAX_ACTIVE]; R],
    offset: usize,
    scale: [f64; R],
) {
    let n = w.len();
    let (wv, wr) = S::as_simd_f64s(w);
    let zs: [&[S::f64s]; R] = std::array::from_fn(|r| S::as_simd_f64s(&z[r][offset..offset + n]).0);
    let s = scale.map(|v| simd.splat_f64s(v));
    for (c, wj) in wv.iter().enumerate() {
        for r in 0..R {
            acc[r] = simd.add_f64s(acc[r], simd.mul_f64s(simd.mul_f64s(*wj, s[r]), zs[r][c]));
        }
    }
    if wr.is_empty() {
        return;
    }
    // The tail adds to its first lanes only: the padded lanes' `0 * scale * 0` would be NaN
    // for an infinite `scale` and would turn a `-0.0` sum into `+0.0`. A select keeps the
    // sums in registers (lanes written one by one and read back as a vector stall).
    let done = n - wr.len();
    let iota = simd.partial_load_u64s(&[0, 1, 2, 3]);
    let tail = simd.less_than_u64s(iota, simd.splat_u64s(wr.len() as u64));
    let wt = simd.partial_load_f64s(wr);
    for r in 0..R {
        let zt = simd.partial_load_f64s(&z[r][offset + done..offset + n]);
        let sum = simd.add_f64s(acc[r], simd.mul_f64s(simd.mul_f64s(wt, s[r]), zt));
        acc[r] = simd.select_f64s(tail, sum, acc[r]);
    }
}

impl Regressor for FittedRidge {
    fn name(&self) -> &'static str {
        "ridge"
    }

    fn schema(&self) -> &FeatureSchema {
        &self.schema
    }

    /// The scalar partial sums, with no dispatch: one row's are a chain of adds either way,
    /// and [`LaneRows`] gives the same bits.
    fn predict_row(&self, x: &[f64]) -> Result<f64> {
        check_width(&self.schema, x.len())?;
        let mut z = [0.0f64; MAX_ACTIVE];
        self.standardise(x, &mut z);
        let k = self.active.len();
        if self.weights.len() < expanded_len(k, self.degree) {
            return Ok(sequential_sum(self.intercept, &self.weights, &z[..k], self.degree).exp());
        }
        Ok(self.finish(lane_sums(self, &z)))
    }

    /// One dispatch for all the rows; each row's result is [`Regressor::predict_row`]'s.
    fn predict_rows(&self, rows: &[f64], out: &mut [f64]) -> Result<()> {
        let width = self.schema.len();
        crate::regressor::check_rows(width, rows, out)?;
        self.predict_checked(rows, out);
        Ok(())
    }

    fn size_bytes(&self) -> usize {
        8 * (self.weights.len() + self.scaler.mean.len() * 2 + 1) + self.active.len() * 8
    }

    fn to_saved(&self) -> SavedModel {
        SavedModel::Ridge(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::Matrix;
    use perfcast_core::ModuleKind;

    fn set(xs: &[[f64; 2]], y: &[f64]) -> TrainSet {
        TrainSet {
            schema: FeatureSchema {
                kind: ModuleKind::Linear,
                names: vec!["a".into(), "b".into()],
            },
            x: Matrix::from_vec(xs.len(), 2, xs.iter().flatten().copied().collect()),
            y: y.to_vec(),
            groups: vec![0; y.len()],
        }
    }

    #[test]
    fn recovers_a_power_law_exactly() {
        // y = 3 * (1 + a)^0.8 * (1 + b)^-0.5: linear in log1p features.
        let xs: Vec<[f64; 2]> = (0..40)
            .map(|i| [(i * 7 % 50) as f64, (i * 3 % 11) as f64])
            .collect();
        let y: Vec<f64> = xs
            .iter()
            .map(|x| 3.0 * (1.0 + x[0]).powf(0.8) * (1.0 + x[1]).powf(-0.5))
            .collect();
        let data = set(&xs, &y);
        let m = RidgeParams {
            lambda: 0.0,
            degree: 1,
        }
        .fit(&data)
        .unwrap();
        for (x, t) in xs.iter().zip(&y) {
            let p = m.predict_row(x).unwrap();
            assert!((p - t).abs() / t < 1e-9, "{p} vs {t}");
        }
        // Degree 2 with a small penalty stays close.
        let m2 = RidgeParams::default().fit(&data).unwrap();
        let p = m2.predict_row(&xs[5]).unwrap();
        assert!((p - y[5]).abs() / y[5] < 0.01);
    }

    #[test]
    fn save_load_round_trip_and_width_check() {
        let xs: Vec<[f64; 2]> = (0..10).map(|i| [i as f64, (i * i) as f64]).collect();
        let y: Vec<f64> = (0..10).map(|i| 1.0 + i as f64).collect();
        let m = RidgeParams::default().fit(&set(&xs, &y)).unwrap();
        let json = serde_json::to_string(&m.to_saved()).unwrap();
        let back: SavedModel = serde_json::from_str(&json).unwrap();
        let back = back.into_regressor();
        for x in &xs {
            assert_eq!(back.predict_row(x).unwrap(), m.predict_row(x).unwrap());
        }
        assert!(matches!(
            m.predict_row(&[1.0]),
            Err(Error::FeatureWidth {
                expected: 2,
                got: 1
            })
        ));
    }

    #[test]
    fn lane_sums_match_the_term_by_term_sum() {
        // Linear layers: 30 features, most varying, so ~400 expansion terms.
        let schema = FeatureSchema::for_kind(ModuleKind::Linear);
        let device = perfcast_core::testing::cpu_device();
        let mut x = Matrix::with_cols(schema.len());
        let mut y = Vec::new();
        for i in 0..120usize {
            let spec = perfcast_core::ModuleSpec::Linear(perfcast_core::Linear {
                tokens: 1 + i % 5,
                in_features: 8 + (i * 37) % 900,
                out_features: 4 + (i * 53) % 700,
                bias: i % 2 == 0,
            });
            let ctx = perfcast_core::Context {
                batch: 1 << (i % 6),
                phase: if i % 3 == 0 {
                    perfcast_core::Phase::Training
                } else {
                    perfcast_core::Phase::Inference
                },
                threads: 1,
                utilisation: 0.0,
            };
            let f = perfcast_core::features::derive(&spec, ctx.batch);
            x.push_row(&crate::features::row(&spec, &ctx, &device));
            y.push(0.001 + f.flops / 1e8 * (1.0 + (i % 7) as f64 / 10.0));
        }
        let data = TrainSet {
            schema,
            x,
            y: y.clone(),
            groups: (0..120).collect(),
        };
        let m = RidgeParams::default().fit(&data).unwrap();
        assert!(m.active.len() > 15, "{}", m.active.len());
        for r in data.x.iter_rows() {
            let mut z = vec![0.0; m.active.len()];
            for (slot, &i) in z.iter_mut().zip(&m.active) {
                *slot = (crate::features::log1p_pos(r[i]) - m.scaler.mean[i]) * m.scaler.inv_std[i];
            }
            let exact = sequential_sum(m.intercept, &m.weights, &z, m.degree).exp();
            let fast = m.predict_row(r).unwrap();
            assert!((fast - exact).abs() <= 1e-12 * exact, "{fast} vs {exact}");
        }
    }

    #[test]
    fn every_cpu_path_gives_the_same_bits() {
        // Degree 2 on six columns (27 terms: runs of 6, 5, ..., 1 exercise every tail length),
        // rows inside and far outside the training range, infinite and NaN ones included.
        let xs: Vec<[f64; 2]> = (0..60)
            .map(|i| [(i * 7 % 50) as f64 + 0.25, (i * 3 % 11) as f64 * 1e3])
            .collect();
        let y: Vec<f64> = xs.iter().map(|x| 1.0 + x[0] * 0.01 + x[1] * 1e-5).collect();
        let two = RidgeParams::default().fit(&set(&xs, &y)).unwrap();
        let wide = {
            let x: Vec<f64> = (0..80usize)
                .flat_map(|i| {
                    (0..6i32).map(move |j| ((i * (j as usize + 3)) % 17) as f64 * 10f64.powi(j))
                })
                .collect();
            let data = TrainSet {
                schema: FeatureSchema {
                    kind: ModuleKind::Linear,
                    names: (0..6).map(|j| format!("f{j}")).collect(),
                },
                x: Matrix::from_vec(80, 6, x),
                y: (0..80).map(|i| 1.0 + (i % 9) as f64).collect(),
                groups: (0..80).collect(),
            };
            RidgeParams::default().fit(&data).unwrap()
        };
        assert_eq!(wide.active.len(), 6);
        for m in [two, wide] {
            let width = m.schema.len();
            let mut rows: Vec<f64> = (0..40 * width).map(|i| ((i * 13) % 29) as f64).collect();
            rows.extend(vec![f64::INFINITY; width]);
            rows.extend(vec![f64::NAN; width]);
            rows.extend(vec![1e300; width]);
            let n = rows.len() / width;
            let run = |f: &dyn Fn(LaneRows)| {
                let mut out = vec![0.0; n];
                f(LaneRows {
                    ridge: &m,
                    rows: &rows,
                    out: &mut out,
                });
                out
            };
            let scalar = run(&|b| pulp::WithSimd::with_simd(b, pulp::Scalar));
            let paths = [
                ("dispatched", run(&|b| pulp::Arch::new().dispatch(b))),
                (
                    "4 portable lanes",
                    run(&|b| pulp::WithSimd::with_simd(b, pulp::Scalar256b)),
                ),
                (
                    "2 portable lanes",
                    run(&|b| pulp::WithSimd::with_simd(b, pulp::Scalar128b)),
                ),
            ];
            let mut batch = vec![0.0; n];
            m.predict_rows(&rows, &mut batch).unwrap();
            for (i, x) in rows.chunks_exact(width).enumerate() {
                let one = m.predict_row(x).unwrap();
                assert_eq!(one.to_bits(), scalar[i].to_bits(), "row {i}: {x:?}");
                assert_eq!(batch[i].to_bits(), one.to_bits(), "row {i}: {x:?}");
                for (path, out) in &paths {
                    assert_eq!(out[i].to_bits(), one.to_bits(), "{path}, row {i}: {x:?}");
                }
            }
        }
    }

    #[test]
    fn bad_params_and_data_are_named() {
        let err = RidgeParams {
            lambda: -1.0,
            degree: 1,
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(err.contains("lambda must be non-negative, got -1"), "{err}");
        let err = RidgeParams::default()
            .fit(&set(&[[1.0, 2.0]], &[1.0]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("need at least 2"), "{err}");
        let err = RidgeParams::default()
            .fit(&set(&[[1.0, 2.0], [2.0, f64::NAN]], &[1.0, 2.0]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("feature `b` is NaN"), "{err}");
        let err = RidgeParams::default()
            .fit(&set(&[[1.0, 2.0], [2.0, 3.0]], &[1.0, -2.0]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("latency must be positive, got -2"), "{err}");
    }
}
