//! Fitting the expression's constants to measured runs by differential evolution, and
//! judging the fit on runs left out.
//!
//! The cost of constants `c` on runs `(x_j, T_j)` is a regularised relative error:
//!
//! ```text
//! cost(c) = mean_j ((T(x_j; c) - T_j) / T_j)^2  +  lambda * sum_i (c_i / U_i)^2
//! ```
//!
//! Relative, so a 10 s run and a 10 ms run weigh the same. `U_i` is the largest value
//! constant `i` can take without its term alone exceeding some run's time
//! (`min_j T_j / f_i(x_j)`, with 50% slack for noise); it is also the top of the search box.
//! The penalty is a ridge on the constants in those units: it shrinks terms the runs do not
//! support towards zero and picks the smallest of nearly equivalent solutions, while moving a
//! well-supported constant by about `lambda` relative (default `1e-4`). A penalty on
//! `log c` would instead pull absent terms up towards a nominal scale.
//!
//! Differential evolution searches `ln c_i` in `[ln U_i - 25, ln U_i]`: constants may span
//! many orders of magnitude, and the bottom of that range (`1.4e-11 U_i`) is zero for every
//! practical purpose. A term whose factor is zero on every run (e.g. `sync` when every run
//! has `p = 1`) cannot be fitted: its constant is 0 and it is listed in `unfitted`.
//!
//! A fixed cost per run is fitted only where the runs show it: when every run has the same
//! `n`, `startup` and the per-sample terms explain the times equally well, any split between
//! them would be the penalty's choice, and a large fixed cost predicts runs of other lengths
//! badly; `startup` is then set to 0 and listed in `undetermined`.
//!
//! Each constant is reported with a relative standard error from the linearised model
//! (`sigma^2 (X'X)^+`, `X` the terms' shares of each run's time, `+` the pseudo-inverse):
//! large values mean the runs hardly tell that term apart from the others, and an infinite
//! one that they cannot (runs at one `n` cannot split `startup` from the per-sample terms;
//! runs at two values of `p` cannot split `compute`, `serial` and `contention`).

use perfcast_core::rng::SplitMix64;
use serde::{Deserialize, Serialize};

use crate::de::{DeConfig, minimise};
use crate::error::{Error, Result};
use crate::expression::{Expression, Point, Term};
use crate::runs::Run;

/// Width of the search range of each `ln c`, below its upper bound.
const LOG_SPAN: f64 = 25.0;
/// Slack on each constant's upper bound, for noise.
const BOUND_SLACK: f64 = 1.5;

/// Fitting parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FitConfig {
    /// Weight of the ridge penalty on the bound-scaled constants. Default 1e-4.
    pub lambda: f64,
    /// Differential evolution's settings (seed, population, ...).
    pub de: DeConfig,
}

impl Default for FitConfig {
    fn default() -> Self {
        FitConfig {
            lambda: 1e-4,
            de: DeConfig::default(),
        }
    }
}

/// One fitted constant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Constant {
    /// Its term.
    pub term: Term,
    /// Value, in the term's unit (seconds per whatever its factor counts).
    pub value: f64,
    /// Relative standard error (0.02 = ±2%); infinite where the runs cannot tell.
    pub rel_se: f64,
    /// Mean share of the runs' time the term accounts for.
    pub mean_share: f64,
}

/// An expression with fitted constants.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FittedExpression {
    /// The expression.
    pub expression: Expression,
    /// The constants, in term order.
    pub constants: Vec<Constant>,
    /// Terms whose factor was zero on every run: constant 0, not fitted.
    pub unfitted: Vec<Term>,
    /// Terms the runs cannot tell apart from the others, set to 0 rather than fitted:
    /// `startup` when it is (every run fitted has the same `n`, so a fixed cost per run and
    /// per-sample work explain the times equally well).
    #[serde(default)]
    pub undetermined: Vec<Term>,
    /// The regularised cost at the optimum.
    pub cost: f64,
    /// MAPE on the runs fitted, percent.
    pub fit_mape: f64,
    /// Runs fitted.
    pub runs: usize,
    /// Generations differential evolution ran.
    pub generations: usize,
    /// Cost evaluations.
    pub evaluations: usize,
    /// Whether differential evolution met its stopping rule.
    pub converged: bool,
}

impl FittedExpression {
    /// The constants' values.
    pub fn values(&self) -> Vec<f64> {
        self.constants.iter().map(|c| c.value).collect()
    }

    /// Predicted seconds at a point.
    pub fn predict(&self, x: Point) -> f64 {
        self.expression.eval(&self.values(), x)
    }

    /// Each term's predicted seconds at a point.
    pub fn breakdown(&self, x: Point) -> Vec<(Term, f64)> {
        self.expression.breakdown(&self.values(), x)
    }

    /// MAPE (percent) on runs.
    pub fn mape(&self, runs: &[Run]) -> f64 {
        let pred: Vec<f64> = runs.iter().map(|r| self.predict(r.point)).collect();
        let truth: Vec<f64> = runs.iter().map(|r| r.time_s).collect();
        mape(&pred, &truth)
    }
}

/// Mean absolute percentage error, percent.
pub fn mape(pred: &[f64], truth: &[f64]) -> f64 {
    let n = pred.len().min(truth.len());
    if n == 0 {
        return f64::NAN;
    }
    100.0
        * pred
            .iter()
            .zip(truth)
            .map(|(p, t)| ((p - t) / t).abs())
            .sum::<f64>()
        / n as f64
}

/// Fits the expression's constants to runs.
pub fn fit(expression: &Expression, runs: &[Run], config: &FitConfig) -> Result<FittedExpression> {
    if !(config.lambda.is_finite() && config.lambda >= 0.0) {
        return Err(Error::invalid(
            "fit setting",
            format!("`lambda` must not be negative, got {}", config.lambda),
        ));
    }
    for r in runs {
        r.point.validate()?;
        if !(r.time_s.is_finite() && r.time_s > 0.0) {
            return Err(Error::invalid(
                "run",
                format!("line {}: time {} is not positive", r.line, r.time_s),
            ));
        }
    }
    let k = expression.len();
    // a[j][i]: term i's factor at run j over the run's time, so the relative prediction of
    // run j is sum_i c_i a[j][i].
    let a: Vec<Vec<f64>> = runs
        .iter()
        .map(|r| {
            expression
                .terms
                .iter()
                .map(|t| t.factor(r.point) / r.time_s)
                .collect()
        })
        .collect();
    let upper: Vec<f64> = (0..k)
        .map(|i| {
            let most = a.iter().map(|row| row[i]).fold(0.0, f64::max);
            if most > 0.0 { BOUND_SLACK / most } else { 0.0 }
        })
        .collect();
    let free: Vec<usize> = (0..k).filter(|&i| upper[i] > 0.0).collect();
    let unfitted: Vec<Term> = (0..k)
        .filter(|&i| upper[i] == 0.0)
        .map(|i| expression.terms[i])
        .collect();
    if free.is_empty() {
        return Err(Error::invalid(
            "fit",
            "every term's factor is zero on these runs: nothing to fit",
        ));
    }
    if runs.len() < free.len() {
        return Err(Error::invalid(
            "fit",
            format!(
                "{} runs cannot determine {} constants",
                runs.len(),
                free.len()
            ),
        )
        .with_hint("measure more runs, or fit fewer terms with `--terms`"));
    }
    // A fixed cost per run is believed only where the runs show it: at one `n`, `startup`
    // and the per-sample terms explain the times equally well, any split between them is the
    // penalty's choice, and a large fixed cost predicts runs of other lengths badly (it
    // does not grow with `n`). Such a `startup` is set to 0.
    let mut free = free;
    let mut undetermined = Vec::new();
    if let Some(slot) = free
        .iter()
        .position(|&i| expression.terms[i] == Term::Startup)
        .filter(|&slot| free.len() > 1 && indistinct(&a, &free)[slot])
    {
        undetermined.push(Term::Startup);
        free.remove(slot);
    }
    let lambda = config.lambda;
    let n = runs.len() as f64;
    let mut c = vec![0.0; k];
    let cost = |x: &[f64], c: &mut Vec<f64>| {
        for (slot, &i) in free.iter().enumerate() {
            c[i] = x[slot].exp();
        }
        let misfit: f64 = a
            .iter()
            .map(|row| {
                let rel: f64 = row.iter().zip(c.iter()).map(|(f, c)| f * c).sum();
                (rel - 1.0) * (rel - 1.0)
            })
            .sum::<f64>()
            / n;
        let penalty: f64 = free.iter().map(|&i| (c[i] / upper[i]).powi(2)).sum();
        misfit + lambda * penalty
    };
    let bounds: Vec<(f64, f64)> = free
        .iter()
        .map(|&i| (upper[i].ln() - LOG_SPAN, upper[i].ln()))
        .collect();
    let found = minimise(|x| cost(x, &mut c), &bounds, &config.de)?;
    let mut values = vec![0.0; k];
    for (slot, &i) in free.iter().enumerate() {
        values[i] = found.x[slot].exp();
    }
    // Shares of each run's time per term, and the residuals, for the standard errors.
    let shares: Vec<Vec<f64>> = a
        .iter()
        .map(|row| row.iter().zip(&values).map(|(f, c)| f * c).collect())
        .collect();
    let residual: f64 = shares
        .iter()
        .map(|s| (s.iter().sum::<f64>() - 1.0).powi(2))
        .sum();
    let dof = (runs.len() as f64 - free.len() as f64).max(1.0);
    let rel_se = standard_errors(&shares, &free, residual / dof);
    let constants = (0..k)
        .map(|i| Constant {
            term: expression.terms[i],
            value: values[i],
            rel_se: rel_se[i],
            mean_share: shares.iter().map(|s| s[i]).sum::<f64>() / n,
        })
        .collect();
    let mut fitted = FittedExpression {
        expression: expression.clone(),
        constants,
        unfitted,
        undetermined,
        cost: found.cost,
        fit_mape: 0.0,
        runs: runs.len(),
        generations: found.generations,
        evaluations: found.evaluations,
        converged: found.converged,
    };
    fitted.fit_mape = fitted.mape(runs);
    Ok(fitted)
}

/// Relative standard errors `sqrt(sigma2 (X'X)^+_ii)` of the free constants, `X` the terms'
/// shares of each run's time, `+` the pseudo-inverse; infinite for unfitted terms and for
/// every term the runs cannot tell apart from others (its unit vector has a part in the null
/// space of `X'X`: e.g. `compute`, `serial` and `contention` when the runs have only two
/// values of `p`, or a term pushed to zero). The others keep their finite errors: one
/// undetermined term does not blank them all.
fn standard_errors(shares: &[Vec<f64>], free: &[usize], sigma2: f64) -> Vec<f64> {
    let k = shares.first().map_or(0, Vec::len);
    let m = free.len();
    let mut g = vec![vec![0.0; m]; m];
    for s in shares {
        for (r, &i) in free.iter().enumerate() {
            for (c, &j) in free.iter().enumerate() {
                g[r][c] += s[i] * s[j];
            }
        }
    }
    let mut out = vec![f64::INFINITY; k];
    let (values, vectors) = symmetric_eigen(g);
    let top = values.iter().copied().fold(0.0, f64::max);
    if !(top > 0.0 && top.is_finite()) {
        return out;
    }
    // Eigenvalues this far below the largest are rounding noise: their directions are the
    // combinations of constants the runs do not determine.
    let null = |v: f64| v <= NULL_EIGENVALUE * top;
    for (r, &i) in free.iter().enumerate() {
        let in_null: f64 = (0..m)
            .filter(|&j| null(values[j]))
            .map(|j| vectors[r][j].powi(2))
            .sum();
        if in_null > 1e-6 {
            continue;
        }
        let v: f64 = sigma2
            * (0..m)
                .filter(|&j| !null(values[j]))
                .map(|j| vectors[r][j].powi(2) / values[j])
                .sum::<f64>();
        if v.is_finite() && v >= 0.0 {
            out[i] = v.sqrt();
        }
    }
    out
}

/// Which of the `free` columns of `a` the others (nearly) reproduce: the runs cannot tell
/// those terms apart. Judged on the columns scaled to unit length, so the constants' units
/// do not matter.
fn indistinct(a: &[Vec<f64>], free: &[usize]) -> Vec<bool> {
    let norms: Vec<f64> = free
        .iter()
        .map(|&i| a.iter().map(|row| row[i] * row[i]).sum::<f64>().sqrt())
        .collect();
    let m = free.len();
    let mut g = vec![vec![0.0; m]; m];
    for row in a {
        for (r, &i) in free.iter().enumerate() {
            for (c, &j) in free.iter().enumerate() {
                g[r][c] += row[i] / norms[r] * row[j] / norms[c];
            }
        }
    }
    let (values, vectors) = symmetric_eigen(g);
    let top = values.iter().copied().fold(0.0, f64::max);
    (0..m)
        .map(|r| {
            (0..m)
                .filter(|&j| values[j] <= NULL_EIGENVALUE * top)
                .map(|j| vectors[r][j].powi(2))
                .sum::<f64>()
                > 1e-6
        })
        .collect()
}

/// Eigenvalues below this share of the largest count as zero (an undetermined direction).
const NULL_EIGENVALUE: f64 = 1e-10;

/// Eigen-decomposition of a small symmetric matrix by cyclic Jacobi rotations: the
/// eigenvalues, and the eigenvectors as columns (`vectors[i][j]` is component `i` of
/// eigenvector `j`).
fn symmetric_eigen(mut a: Vec<Vec<f64>>) -> (Vec<f64>, Vec<Vec<f64>>) {
    let n = a.len();
    let mut v: Vec<Vec<f64>> = (0..n)
        .map(|i| (0..n).map(|j| if i == j { 1.0 } else { 0.0 }).collect())
        .collect();
    for _sweep in 0..64 {
        let off: f64 = (0..n)
            .flat_map(|i| (i + 1..n).map(move |j| (i, j)))
            .map(|(i, j)| a[i][j] * a[i][j])
            .sum();
        let diag: f64 = (0..n).map(|i| a[i][i] * a[i][i]).sum();
        if off <= 1e-32 * diag || off == 0.0 {
            break;
        }
        for p in 0..n {
            for q in p + 1..n {
                if a[p][q] == 0.0 {
                    continue;
                }
                // The rotation that zeroes a[p][q] (Numerical Recipes, section 11.1).
                let theta = (a[q][q] - a[p][p]) / (2.0 * a[p][q]);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for row in a.iter_mut() {
                    let (kp, kq) = (row[p], row[q]);
                    row[p] = c * kp - s * kq;
                    row[q] = s * kp + c * kq;
                }
                let (head, tail) = a.split_at_mut(q);
                for (x, y) in head[p].iter_mut().zip(tail[0].iter_mut()) {
                    let (pk, qk) = (*x, *y);
                    *x = c * pk - s * qk;
                    *y = s * pk + c * qk;
                }
                for row in v.iter_mut() {
                    let (kp, kq) = (row[p], row[q]);
                    row[p] = c * kp - s * kq;
                    row[q] = s * kp + c * kq;
                }
            }
        }
    }
    ((0..n).map(|i| a[i][i]).collect(), v)
}

/// A comparison on a run's factor, e.g. `p>=4`: which runs to hold out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Filter {
    /// `p`, `b` or `n`.
    pub column: String,
    /// `=`, `!=`, `<`, `<=`, `>`, `>=`.
    pub op: String,
    /// The value compared with.
    pub value: f64,
}

impl Filter {
    /// Parses `COLUMN OP VALUE`.
    pub fn parse(text: &str) -> Result<Filter> {
        let bad = || {
            Error::invalid(
                "holdout filter",
                format!(
                    "`{text}` is not `COLUMN OP VALUE` (COLUMN one of p, b, n; OP one of \
                     =, !=, <, <=, >, >=), e.g. `p>=4`"
                ),
            )
        };
        let at = text.find(['=', '!', '<', '>']).ok_or_else(bad)?;
        let column = text[..at].trim().to_ascii_lowercase();
        let rest = &text[at..];
        let op = ["!=", "<=", ">=", "==", "=", "<", ">"]
            .into_iter()
            .find(|op| rest.starts_with(op))
            .ok_or_else(bad)?;
        let value: f64 = rest[op.len()..].trim().parse().map_err(|_| bad())?;
        if !["p", "b", "n"].contains(&column.as_str()) || !value.is_finite() {
            return Err(bad());
        }
        Ok(Filter {
            column,
            op: if op == "==" { "=".into() } else { op.into() },
            value,
        })
    }

    /// Whether a run matches.
    pub fn matches(&self, run: &Run) -> bool {
        let v = match self.column.as_str() {
            "p" => run.point.p,
            "b" => run.point.b,
            _ => run.point.n,
        };
        match self.op.as_str() {
            "=" => v == self.value,
            "!=" => v != self.value,
            "<" => v < self.value,
            "<=" => v <= self.value,
            ">" => v > self.value,
            _ => v >= self.value,
        }
    }
}

impl std::fmt::Display for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}{}", self.column, self.op, self.value)
    }
}

/// Which runs are left out of the fit, to be predicted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Holdout {
    /// A random share of the runs, drawn with a seed.
    Share {
        /// Share in (0, 1).
        share: f64,
        /// Seed of the draw.
        seed: u64,
    },
    /// The runs a filter matches (extrapolation: fit small, predict large).
    Where(Filter),
}

/// Splits runs into (fitted, held out).
pub fn split(runs: &[Run], holdout: &Holdout) -> Result<(Vec<Run>, Vec<Run>)> {
    let (fit, test): (Vec<Run>, Vec<Run>) = match holdout {
        Holdout::Share { share, seed } => {
            if !(*share > 0.0 && *share < 1.0) {
                return Err(Error::invalid(
                    "holdout",
                    format!("the share must be in (0, 1), got {share}"),
                ));
            }
            let mut order: Vec<usize> = (0..runs.len()).collect();
            SplitMix64::new(*seed).shuffle(&mut order);
            let count = ((runs.len() as f64 * share).round() as usize).max(1);
            let mut held = vec![false; runs.len()];
            for &i in order.iter().take(count) {
                held[i] = true;
            }
            let (t, f): (Vec<_>, Vec<_>) = runs.iter().zip(&held).partition(|(_, h)| **h);
            (
                f.into_iter().map(|(r, _)| r.clone()).collect(),
                t.into_iter().map(|(r, _)| r.clone()).collect(),
            )
        }
        Holdout::Where(filter) => runs.iter().cloned().partition(|r| !filter.matches(r)),
    };
    if fit.is_empty() || test.is_empty() {
        return Err(Error::invalid(
            "holdout",
            format!(
                "it leaves {} runs to fit and {} to predict; both need at least one",
                fit.len(),
                test.len()
            ),
        ));
    }
    Ok((fit, test))
}

/// A fit on part of the runs and its error on the rest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HoldoutReport {
    /// The fit.
    pub fitted: FittedExpression,
    /// Runs held out.
    pub holdout_runs: usize,
    /// MAPE on them, percent.
    pub holdout_mape: f64,
    /// Largest absolute percentage error on them.
    pub holdout_max_ape: f64,
}

/// Fits on the runs `holdout` leaves in and scores the prediction of the others.
pub fn fit_with_holdout(
    expression: &Expression,
    runs: &[Run],
    holdout: &Holdout,
    config: &FitConfig,
) -> Result<HoldoutReport> {
    let (train, test) = split(runs, holdout)?;
    let fitted = fit(expression, &train, config)?;
    let max_ape = test
        .iter()
        .map(|r| 100.0 * ((fitted.predict(r.point) - r.time_s) / r.time_s).abs())
        .fold(0.0, f64::max);
    Ok(HoldoutReport {
        holdout_mape: fitted.mape(&test),
        holdout_runs: test.len(),
        holdout_max_ape: max_ape,
        fitted,
    })
}

#[cfg(test)]
mod tests {

    use super::*;

    /// Runs from `truth` on a grid, each time times `1 + noise * z`, `z` standard normal.
    fn synthetic(
        expression: &Expression,
        truth: &[f64],
        grid: (&[f64], &[f64], &[f64]),
        noise: f64,
        seed: u64,
    ) -> Vec<Run> {
        let mut rng = SplitMix64::new(seed);
        let mut runs = Vec::new();
        for &p in grid.0 {
            for &b in grid.1 {
                for &n in grid.2 {
                    // Box-Muller.
                    let (u1, u2): (f64, f64) = (rng.unit(), rng.unit());
                    let z = (-2.0 * (1.0 - u1).ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                    let point = Point { p, b, n };
                    runs.push(Run {
                        line: runs.len() + 2,
                        point,
                        time_s: expression.eval(truth, point) * (1.0 + noise * z),
                    });
                }
            }
        }
        runs
    }

    /// Every term matters somewhere on this grid: `startup` at small `n`, `step` at small
    /// `b`, `compute` at `p = 1` and large `b`, `serial` and `contention` at large `p` and
    /// large `b`, `sync` at large `p` and small `b`; 450 runs.
    const P: [f64; 10] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0];
    const B: [f64; 9] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];
    const N: [f64; 5] = [32.0, 128.0, 512.0, 2048.0, 8192.0];
    /// startup, compute, serial, step, sync, contention.
    const TRUTH: [f64; 6] = [0.2, 2e-3, 1e-3, 5e-3, 2e-3, 1e-4];

    #[test]
    fn recovers_every_constant_within_5_percent_from_runs_with_2_percent_noise() {
        let expression = Expression::default();
        for seed in [1u64, 2, 3] {
            let runs = synthetic(&expression, &TRUTH, (&P, &B, &N), 0.02, seed);
            let config = FitConfig {
                de: DeConfig {
                    seed,
                    ..DeConfig::default()
                },
                ..FitConfig::default()
            };
            let fitted = fit(&expression, &runs, &config).unwrap();
            for (c, truth) in fitted.constants.iter().zip(TRUTH) {
                let err = (c.value / truth - 1.0).abs();
                assert!(
                    err < 0.05,
                    "seed {seed}: `{}` = {} vs {truth} ({:.2}% off; se {:.2}%)",
                    c.term.name(),
                    c.value,
                    100.0 * err,
                    100.0 * c.rel_se
                );
                // The reported standard error is of the right size: the error is within
                // four of them.
                assert!(err < 4.0 * c.rel_se, "seed {seed}: {c:?}");
            }
            // Gaussian noise of relative sd `s` gives a mean absolute error of `s * sqrt(2/pi)`.
            assert!(
                fitted.fit_mape > 1.2 && fitted.fit_mape < 2.0,
                "{}",
                fitted.fit_mape
            );
            assert!(fitted.unfitted.is_empty());
        }
    }

    #[test]
    fn noiseless_runs_are_fitted_almost_exactly() {
        // Without the penalty, the optimum is the truth: what is left is the search's error.
        let expression = Expression::default();
        let runs = synthetic(&expression, &TRUTH, (&P, &B, &N), 0.0, 0);
        let exact = FitConfig {
            lambda: 0.0,
            ..FitConfig::default()
        };
        let fitted = fit(&expression, &runs, &exact).unwrap();
        assert!(fitted.converged);
        for (c, truth) in fitted.constants.iter().zip(TRUTH) {
            assert!((c.value / truth - 1.0).abs() < 1e-4, "{c:?} vs {truth}");
        }
        assert!(fitted.fit_mape < 0.01, "{}", fitted.fit_mape);
        // The default penalty shrinks the constants, but by far less than the noise would.
        let shrunk = fit(&expression, &runs, &FitConfig::default()).unwrap();
        for (c, truth) in shrunk.constants.iter().zip(TRUTH) {
            assert!((c.value / truth - 1.0).abs() < 5e-3, "{c:?} vs {truth}");
        }
    }

    #[test]
    fn holdout_reports_the_error_on_runs_left_out() {
        let expression = Expression::default();
        let runs = synthetic(&expression, &TRUTH, (&P, &B, &N), 0.02, 9);
        let share = Holdout::Share {
            share: 0.25,
            seed: 4,
        };
        let r = fit_with_holdout(&expression, &runs, &share, &FitConfig::default()).unwrap();
        assert_eq!(r.holdout_runs, 113); // round(450 / 4)
        assert_eq!(r.fitted.runs, 450 - 113);
        assert!(
            r.holdout_mape > 1.0 && r.holdout_mape < 2.5,
            "{}",
            r.holdout_mape
        );
        // Extrapolation: fit up to 8 processors, predict 10 to 16.
        let far = Holdout::Where(Filter::parse("p > 8").unwrap());
        let r = fit_with_holdout(&expression, &runs, &far, &FitConfig::default()).unwrap();
        assert_eq!(r.holdout_runs, 3 * 45);
        assert!(r.holdout_mape < 3.0, "{}", r.holdout_mape);
    }

    #[test]
    fn a_wrong_expression_fits_worse_than_the_right_one() {
        let truth = Expression::default();
        let runs = synthetic(&truth, &TRUTH, (&P, &B, &N), 0.02, 5);
        let right = fit(&truth, &runs, &FitConfig::default()).unwrap();
        let wrong = fit(
            &Expression::parse("startup,compute,step").unwrap(),
            &runs,
            &FitConfig::default(),
        )
        .unwrap();
        assert!(
            wrong.fit_mape > 3.0 * right.fit_mape,
            "{} vs {}",
            wrong.fit_mape,
            right.fit_mape
        );
    }

    #[test]
    fn terms_the_runs_cannot_see_are_reported() {
        // Every run on one processor: the extrinsic terms are zero everywhere, and `compute`
        // and `serial` are the same factor, so neither is determined.
        let expression = Expression::default();
        let runs = synthetic(&expression, &TRUTH, (&[1.0], &B, &N), 0.01, 3);
        let fitted = fit(&expression, &runs, &FitConfig::default()).unwrap();
        assert_eq!(fitted.unfitted, vec![Term::Sync, Term::Contention]);
        let by = |t: Term| {
            fitted
                .constants
                .iter()
                .find(|c| c.term == t)
                .unwrap()
                .clone()
        };
        assert_eq!(by(Term::Sync).value, 0.0);
        assert!(by(Term::Compute).rel_se.is_infinite() || by(Term::Compute).rel_se > 1.0);
        // Their sum, what the runs do see, is still right.
        let sum = by(Term::Compute).value + by(Term::Serial).value;
        assert!((sum / 3e-3 - 1.0).abs() < 0.05, "{sum}");
        assert!(fitted.fit_mape < 1.5);
    }

    #[test]
    fn a_startup_runs_of_one_length_cannot_show_is_zero() {
        // Every run processes 512 samples: a fixed cost per run and per-sample work explain
        // the times equally well. Measured steps have no start-up: the fit takes none, and
        // runs 16 times shorter or longer follow.
        let expression = Expression::default();
        let mut truth = TRUTH;
        truth[0] = 0.0;
        let runs = synthetic(&expression, &truth, (&P, &B, &[512.0]), 0.0, 0);
        let fitted = fit(&expression, &runs, &FitConfig::default()).unwrap();
        assert_eq!(fitted.undetermined, vec![Term::Startup]);
        assert_eq!(fitted.constants[0].value, 0.0);
        assert!(fitted.unfitted.is_empty());
        for n in [32.0, 8192.0] {
            for (p, b) in [(1.0, 1.0), (4.0, 32.0), (16.0, 256.0)] {
                let x = Point { p, b, n };
                let (got, want) = (fitted.predict(x), expression.eval(&truth, x));
                assert!((got / want - 1.0).abs() < 0.01, "{x:?}: {got} vs {want}");
            }
        }
        // Two lengths show a start-up: it is fitted.
        let runs = synthetic(&expression, &TRUTH, (&P, &B, &[128.0, 2048.0]), 0.0, 0);
        let fitted = fit(&expression, &runs, &FitConfig::default()).unwrap();
        assert!(fitted.undetermined.is_empty());
        assert!((fitted.constants[0].value / TRUTH[0] - 1.0).abs() < 0.01);
    }

    #[test]
    fn too_few_runs_and_bad_holdouts_are_refused() {
        let expression = Expression::default();
        let runs = synthetic(&expression, &TRUTH, (&[1.0, 2.0], &[8.0], &[64.0]), 0.0, 0);
        let e = fit(&expression, &runs, &FitConfig::default()).unwrap_err();
        assert!(
            e.to_string()
                .contains("2 runs cannot determine 6 constants"),
            "{e}"
        );
        let e = split(&runs, &Holdout::Where(Filter::parse("p>100").unwrap())).unwrap_err();
        assert!(e.to_string().contains("0 to predict"), "{e}");
        let e = split(
            &runs,
            &Holdout::Share {
                share: 1.0,
                seed: 0,
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("got 1"), "{e}");
        for bad in ["q>1", "p>>1", "p", "p=x"] {
            assert!(Filter::parse(bad).is_err(), "{bad}");
        }
        let f = Filter::parse(" n == 512").unwrap();
        assert_eq!(f.to_string(), "n=512");
    }

    #[test]
    fn symmetric_eigen_reconstructs_the_matrix() {
        let m = vec![
            vec![4.0, 2.0, 0.5],
            vec![2.0, 3.0, -1.0],
            vec![0.5, -1.0, 2.0],
        ];
        let (values, vectors) = symmetric_eigen(m.clone());
        for i in 0..3 {
            for j in 0..3 {
                let back: f64 = (0..3)
                    .map(|e| vectors[i][e] * values[e] * vectors[j][e])
                    .sum();
                assert!((back - m[i][j]).abs() < 1e-12, "{i},{j}: {back}");
                let dot: f64 = (0..3).map(|e| vectors[e][i] * vectors[e][j]).sum();
                assert!((dot - f64::from(u8::from(i == j))).abs() < 1e-12);
            }
        }
        // [[2, 1], [1, 2]]: eigenvalues 1 and 3.
        let (mut values, _) = symmetric_eigen(vec![vec![2.0, 1.0], vec![1.0, 2.0]]);
        values.sort_by(f64::total_cmp);
        assert!((values[0] - 1.0).abs() < 1e-14 && (values[1] - 3.0).abs() < 1e-14);
    }

    #[test]
    fn standard_errors_blank_only_the_terms_the_runs_cannot_separate() {
        // Columns 0 and 1 are the same factor; column 2 is independent; column 3 is unfitted.
        let shares: Vec<Vec<f64>> = (0..8)
            .map(|j| {
                let x = f64::from(j) / 8.0;
                vec![0.3 * x, 0.3 * x, 0.7 - 0.4 * x, 0.0]
            })
            .collect();
        let se = standard_errors(&shares, &[0, 1, 2], 1e-4);
        assert!(se[0].is_infinite() && se[1].is_infinite() && se[3].is_infinite());
        assert!(se[2].is_finite() && se[2] > 0.0, "{se:?}");
        // Without the duplicate, the first is determined too; `(X'X)^-1` of a diagonal.
        let diagonal = vec![vec![1.0, 0.0], vec![0.0, 2.0], vec![0.0, 2.0]];
        let se = standard_errors(&diagonal, &[0, 1], 0.01);
        assert!((se[0] - 0.1).abs() < 1e-12 && (se[1] - 0.05 / 2f64.sqrt()).abs() < 1e-12);
    }
}
