//! Ridge regression on standardised log features, with optional squares and pairwise products.
//!
//! Latency is close to a power law in the work (FLOPs, bytes) and the shapes, so a linear model
//! in log space with a few second-order terms is cheap and often good. This is the fitted
//! model and its prediction path; perfcast-models solves for it (`RidgeParams`).

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::features::FeatureSchema;
use crate::regressor::{LogStandardiser, Regressor, SavedModel, check_width};

/// Fitted ridge model: `exp(intercept + w · expansion(z))` milliseconds, `z` the active
/// columns of the row, log-standardised.
///
/// A saved file is checked when read; a value built in code (by the fit) is trusted to hold
/// `active` indices inside the schema and [`expanded_len`] weights.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "SavedRidge")]
pub struct FittedRidge {
    /// The schema of the rows it reads.
    pub schema: FeatureSchema,
    /// Standardisation of every schema column.
    pub scaler: LogStandardiser,
    /// Columns that vary in training (constant ones are dropped from the expansion), at most
    /// [`MAX_ACTIVE`].
    pub active: Vec<usize>,
    /// 1: the active columns; 2: also their squares and pairwise products.
    pub degree: u8,
    /// The log-space prediction of an all-mean row.
    pub intercept: f64,
    /// One weight per expansion term: the active columns, then for each `a` the products
    /// `z_a z_b` with `b >= a`.
    pub weights: Vec<f64>,
    /// The log-space sum is clamped into `[low, high]` (ln ms): the training targets' range
    /// widened by a margin, so a row far outside the training rows cannot send `exp` to an
    /// absurd latency; `None` (files written before it): unbounded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_bounds: Option<[f64; 2]>,
}

/// [`FittedRidge`] as read from a file, checked before it becomes a model: the prediction
/// path indexes rows by `active` and the scaler, and a saved file is outside input (a corrupt
/// `active` index panicked on the first prediction).
#[derive(Deserialize)]
struct SavedRidge {
    schema: FeatureSchema,
    scaler: LogStandardiser,
    active: Vec<usize>,
    degree: u8,
    intercept: f64,
    weights: Vec<f64>,
    #[serde(default)]
    log_bounds: Option<[f64; 2]>,
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
        if let Some([low, high]) = s.log_bounds
            && !(low.is_finite() && high.is_finite() && low <= high)
        {
            return Err(format!(
                "ridge log bounds must be finite and ordered, got [{low}, {high}]"
            ));
        }
        Ok(FittedRidge {
            schema: s.schema,
            scaler: s.scaler,
            active: s.active,
            degree: s.degree,
            intercept: s.intercept,
            weights: s.weights,
            log_bounds: s.log_bounds,
        })
    }
}

/// Most active columns: the stack buffer of `predict_row` holds this many.
pub const MAX_ACTIVE: usize = 64;

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

/// Terms of the expansion of `active` columns at `degree`.
pub fn expanded_len(active: usize, degree: u8) -> usize {
    if degree >= 2 {
        active + active * (active + 1) / 2
    } else {
        active
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
                *o = self
                    .bounded(sequential_sum(
                        self.intercept,
                        &self.weights,
                        &z[..k],
                        self.degree,
                    ))
                    .exp();
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
        self.bounded(self.intercept + ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])))
            .exp()
    }

    /// A log-space sum clamped into [`FittedRidge::log_bounds`].
    #[inline(always)]
    fn bounded(&self, log_ms: f64) -> f64 {
        match self.log_bounds {
            Some([low, high]) => log_ms.clamp(low, high),
            None => log_ms,
        }
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
            let sum = sequential_sum(self.intercept, &self.weights, &z[..k], self.degree);
            return Ok(self.bounded(sum).exp());
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
        SavedModel::new("ridge", self.clone())
    }
}

impl crate::regressor::SavedForm for FittedRidge {
    fn into_regressor(self) -> Box<dyn Regressor> {
        Box::new(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfcast_core::ModuleKind;
    use perfcast_core::rng::SplitMix64;

    /// A model with `active` of `width` columns and weights drawn from `seed` (the prediction
    /// path's arithmetic does not care how they were fitted).
    fn model(width: usize, active: usize, degree: u8, seed: u64) -> FittedRidge {
        let mut rng = SplitMix64(seed);
        let mut draw = |scale: f64| (rng.unit() - 0.5) * scale;
        FittedRidge {
            schema: FeatureSchema {
                kind: ModuleKind::Linear,
                names: (0..width).map(|j| format!("f{j}")).collect(),
            },
            scaler: LogStandardiser {
                mean: (0..width).map(|_| draw(4.0)).collect(),
                inv_std: (0..width).map(|_| 0.2 + draw(1.0).abs()).collect(),
            },
            active: (0..width)
                .step_by(width / active.max(1))
                .take(active)
                .collect(),
            degree,
            intercept: draw(2.0),
            weights: (0..expanded_len(active, degree))
                .map(|_| draw(0.02))
                .collect(),
            log_bounds: None,
        }
    }

    fn rows(width: usize, n: usize, seed: u64) -> Vec<f64> {
        let mut rng = SplitMix64(seed);
        (0..width * n)
            .map(|i| (rng.unit() * 10f64.powi((i % 7) as i32)).round())
            .collect()
    }

    #[test]
    fn lane_sums_match_the_term_by_term_sum() {
        // 24 active columns of 30: 324 expansion terms, as a fitted linear layer has.
        let m = model(30, 24, 2, 7);
        let width = m.schema.len();
        for x in rows(width, 60, 1).chunks_exact(width) {
            let mut z = vec![0.0; m.active.len()];
            for (slot, &i) in z.iter_mut().zip(&m.active) {
                *slot = (crate::features::log1p_pos(x[i]) - m.scaler.mean[i]) * m.scaler.inv_std[i];
            }
            let exact = sequential_sum(m.intercept, &m.weights, &z, m.degree).exp();
            let fast = m.predict_row(x).unwrap();
            assert!((fast - exact).abs() <= 1e-12 * exact, "{fast} vs {exact}");
        }
    }

    #[test]
    fn every_cpu_path_gives_the_same_bits() {
        // Two columns, and six (27 terms: runs of 6, 5, ..., 1 exercise every tail length),
        // rows inside and far outside any range, infinite and NaN ones included.
        for m in [model(2, 2, 2, 3), model(6, 6, 2, 4), model(9, 5, 1, 5)] {
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
    fn a_saved_model_round_trips_and_a_corrupt_one_is_refused() {
        let m = model(8, 4, 2, 9);
        let json = serde_json::to_string(&m.to_saved()).unwrap();
        let back = serde_json::from_str::<SavedModel>(&json)
            .unwrap()
            .into_regressor();
        for x in rows(8, 10, 2).chunks_exact(8) {
            assert_eq!(
                back.predict_row(x).unwrap().to_bits(),
                m.predict_row(x).unwrap().to_bits()
            );
        }
        assert!(matches!(
            m.predict_row(&[1.0]),
            Err(crate::Error::FeatureWidth {
                expected: 8,
                got: 1
            })
        ));
        let mut bad: serde_json::Value = serde_json::from_str(&json).unwrap();
        bad["active"][0] = 8.into();
        let err = serde_json::from_value::<SavedModel>(bad)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("active column 8 is past the schema's 8"),
            "{err}"
        );
    }
}
