//! Ridge regression on standardised log features, with optional squares and pairwise products.
//!
//! Latency is close to a power law in the work (FLOPs, bytes) and the shapes, so a linear model
//! in log space with a few second-order terms is cheap and often good. Solved in closed form:
//! `(XᵀX + λI) w = Xᵀ ln(y)` by Cholesky, the intercept unpenalised.
//!
//! Guarded against blow-ups on small or ill-conditioned data: the penalty (from the given one
//! up) and the degree are chosen by closed-form leave-one-out error; the penalty is raised
//! tenfold at a time while the system is ill-conditioned (pivots of the factor spread too far
//! apart); and predictions are clamped in log space to the training targets' range widened by
//! [`LOG_MARGIN`] on each side.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::features::TrainSet;
use crate::regressor::{Fit, FitStandardiser, LogStandardiser, check_train_set};
pub use perfcast_predict::ridge::{FittedRidge, MAX_ACTIVE, expanded_len};

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

/// How far (ln ms) predictions may leave the training targets' range: one decade.
pub const LOG_MARGIN: f64 = std::f64::consts::LN_10;

/// The smallest squared ratio of the Cholesky factor's smallest to largest pivot (a rough
/// reciprocal condition number) a solve is accepted at.
const MIN_RCOND: f64 = 1e-12;

/// Tenfold penalty raises tried on an ill-conditioned system before giving up.
const MAX_RAISES: usize = 12;

/// Solves the symmetric positive-definite system `a x = b` in place (Cholesky); returns the
/// squared ratio of the factor's smallest to largest pivot.
fn cholesky_solve(a: &mut [f64], b: &mut [f64], n: usize) -> Result<f64> {
    let (mut low, mut high) = (f64::INFINITY, 0.0f64);
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
        (low, high) = (low.min(d), high.max(d));
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
    Ok(if n == 0 { 1.0 } else { (low / high).powi(2) })
}

/// Expansions at most this long choose their penalty and degree by leave-one-out error;
/// longer ones keep the given ones (each solve of the search grows with the cube of the length).
const MAX_SEARCHED_TERMS: usize = 400;

/// Penalties per row (on standardised terms) the search tries besides the given one.
const PENALTY_GRID: [f64; 4] = [1e-2, 1e-1, 1.0, 10.0];

/// The normal equations `a` (`p` x `p`) and `b` of centred expansion rows, for the search.
struct Normal<'a> {
    a: &'a [f64],
    b: &'a [f64],
    p: usize,
    rows: &'a [Vec<f64>],
    mean: &'a [f64],
    /// Centred log targets.
    ly: &'a [f64],
}

impl Normal<'_> {
    /// The system of the first `q` terms with `penalty` on the diagonal.
    fn leading(&self, q: usize, penalty: f64) -> (Vec<f64>, Vec<f64>) {
        let mut m = vec![0.0; q * q];
        for i in 0..q {
            m[i * q..(i + 1) * q].copy_from_slice(&self.a[i * self.p..i * self.p + q]);
            m[i * q + i] += penalty;
        }
        (m, self.b[..q].to_vec())
    }

    /// Leave-one-out mean squared log error of the ridge on the first `q` terms with
    /// `penalty` (closed form: each residual over one minus its leverage); `None` when the
    /// system is ill-conditioned or a row is interpolated exactly.
    fn loo_error(&self, q: usize, penalty: f64) -> Option<f64> {
        let (mut m, mut w) = self.leading(q, penalty);
        let rcond = cholesky_solve(&mut m, &mut w, q).ok()?;
        if rcond < MIN_RCOND {
            return None;
        }
        // `m` now holds the factor `L` in its lower triangle.
        let n = self.rows.len() as f64;
        let (mut sum, mut v) = (0.0, vec![0.0; q]);
        for (row, y) in self.rows.iter().zip(self.ly) {
            let mut fit = 0.0;
            for i in 0..q {
                let x = row[i] - self.mean[i];
                fit += w[i] * x;
                let mut s = x;
                for k in 0..i {
                    s -= m[i * q + k] * v[k];
                }
                v[i] = s / m[i * q + i];
            }
            let leverage = 1.0 / n + v.iter().map(|t| t * t).sum::<f64>();
            if leverage >= 1.0 - 1e-9 {
                return None;
            }
            sum += ((y - fit) / (1.0 - leverage)).powi(2);
        }
        (sum.is_finite()).then_some(sum / n)
    }
}

/// Solves `(a + penalty I) w = b`, raising the penalty tenfold while the system is singular or
/// worse conditioned than [`MIN_RCOND`]; returns the weights.
fn solve_guarded(a: &[f64], b: &[f64], p: usize, mut penalty: f64) -> Result<Vec<f64>> {
    // A penalty of zero cannot be raised tenfold: start from a tiny share of the diagonal.
    let scale = (0..p).map(|i| a[i * p + i]).sum::<f64>() / p.max(1) as f64;
    let floor = 1e-12 * scale.max(f64::MIN_POSITIVE);
    let mut last = None;
    for _ in 0..=MAX_RAISES {
        let mut m = a.to_vec();
        for i in 0..p {
            m[i * p + i] += penalty;
        }
        let mut w = b.to_vec();
        match cholesky_solve(&mut m, &mut w, p) {
            Ok(rcond) if rcond >= MIN_RCOND && w.iter().all(|v| v.is_finite()) => return Ok(w),
            Ok(_) => {}
            Err(e) => last = Some(e),
        }
        penalty = (penalty * 10.0).max(floor);
    }
    Err(last.unwrap_or_else(|| {
        Error::InvalidData(
            "ridge normal equations stay ill-conditioned under every penalty tried; raise \
             `lambda`"
                .into(),
        )
    }))
}

impl crate::params::FamilyParams for RidgeParams {
    fn name(&self) -> &'static str {
        "ridge"
    }
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
        }
        // The penalty and degree with the lowest leave-one-out error, the given ones among
        // them: a penalty fixed in advance lets few or collinear rows send the weights wild.
        let centred: Vec<f64> = ly.iter().map(|y| y - ly_mean).collect();
        let normal = Normal {
            a: &a,
            b: &b,
            p,
            rows: &rows,
            mean: &mean,
            ly: &centred,
        };
        let k = active.len();
        let mut best = (p, self.lambda * n, f64::INFINITY);
        if p <= MAX_SEARCHED_TERMS {
            let terms = if self.degree >= 2 && k < p {
                vec![p, k]
            } else {
                vec![p]
            };
            for &q in &terms {
                let penalties = std::iter::once(self.lambda)
                    .chain(PENALTY_GRID.into_iter().filter(|&l| l > self.lambda));
                for lambda in penalties {
                    if let Some(e) = normal.loo_error(q, lambda * n)
                        && e < best.2
                    {
                        best = (q, lambda * n, e);
                    }
                }
            }
        }
        let (q, penalty, _) = best;
        let (m, rhs) = normal.leading(q, 0.0);
        let b = solve_guarded(&m, &rhs, q, penalty)?;
        let degree = if q == p { self.degree } else { 1 };
        let mean = &mean[..q];
        let intercept = ly_mean - b.iter().zip(mean).map(|(w, m)| w * m).sum::<f64>();
        let (low, high) = ly
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &v| {
                (l.min(v), h.max(v))
            });
        Ok(FittedRidge {
            schema: data.schema.clone(),
            scaler,
            active,
            degree,
            intercept,
            weights: b,
            log_bounds: Some([low - LOG_MARGIN, high + LOG_MARGIN]),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::FeatureSchema;
    use crate::matrix::Matrix;
    use crate::regressor::{Regressor, SavedModel};
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
    fn ill_conditioned_small_data_cannot_blow_up() {
        // A degree-2 expansion with more terms than rows and two nearly collinear columns:
        // singular without a penalty, wild between and beyond the rows with a small one.
        let row = |i: usize| {
            let a = (1 + i % 5) as f64 * 10.0;
            [a, a * (1.0 + 1e-9 * i as f64), ((i * 7) % 3) as f64]
        };
        let xs: Vec<[f64; 3]> = (0..8).map(row).collect();
        let y: Vec<f64> = (0..8).map(|i| 1.0 + 0.3 * ((i * 5) % 4) as f64).collect();
        let data = TrainSet {
            schema: FeatureSchema {
                kind: ModuleKind::Concat,
                names: vec!["a".into(), "b".into(), "c".into()],
            },
            x: Matrix::from_vec(8, 3, xs.iter().flatten().copied().collect()),
            y: y.clone(),
            groups: vec![0; 8],
        };
        for lambda in [0.0, 1e-3] {
            let m = RidgeParams { lambda, degree: 2 }.fit(&data).unwrap();
            let (low, high) = (1.0 / 10.0, 1.9 * 10.0);
            for a in [0.0, 1.0, 55.0, 1e3, 1e6] {
                for c in [0.0, 2.0, 50.0] {
                    let p = m.predict_row(&[a, a * 1.5, c]).unwrap();
                    assert!(
                        p.is_finite() && (low * 0.999..=high * 1.001).contains(&p),
                        "lambda {lambda}: row [{a}, {}, {c}] predicted {p} ms",
                        a * 1.5
                    );
                }
            }
        }
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
            Err(perfcast_predict::Error::FeatureWidth {
                expected: 2,
                got: 1
            })
        ));
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
