//! Residual stacking as one composer, after linfa's `composing` (one model fitted on what
//! another misses): [`StackWith`] holds a base and a residual model. Latencies are positive and
//! span decades, so what the base misses is a ratio, a difference in log space: the residual
//! model is fitted on `latency / base` ([`StackWith::targets`]) and the stack predicts
//! `base x residual` ([`StackWith::predict_row`]); a residual model that lives in log space
//! (boosted trees) starts each row at `ln base`, adds its correction and the stack predicts the
//! exponential ([`StackWith::predict_log_row`], [`LogResidual`]).
//!
//! Three families stack this way, each with its own base and residual model:
//! - the cross-device wrapper (`device_features`): the base is the row's roofline time on its
//!   device, the residual model the inner model on the extended row (the inverse of the
//!   achieved efficiency);
//! - `ridge-trees` (`stack`): the per-algorithm ridge corrections are fitted on the ratio to
//!   the shared ridge and are the base the (bagged) trees are fitted on;
//! - `trees` with a baseline (`trees`): boosting starts each row from the ridge baseline's
//!   `ln base` (or the mean log latency) and adds one leaf per tree.
//!
//! Both fitting (perfcast-models) and prediction (here) go through [`StackWith`], so the rule
//! is written once and the two cannot drift apart. The saved forms keep their own fields
//! (bundles stay byte-compatible); a stack is a view over a fitted model's parts, built where
//! it is used, and costs nothing.

use crate::error::Result;
use crate::regressor::Regressor;
use crate::ridge::FittedRidge;

/// One value per row: the base of a stack (a latency estimate, ms) or a residual model's
/// correction of it (a ratio). `X` is what it reads: a feature row, or a row with its extension.
pub trait Estimate<X: ?Sized = [f64]> {
    /// The estimate of `x`.
    fn estimate(&self, x: &X) -> Result<f64>;

    /// `ln` of [`Estimate::estimate`]; an estimate kept in log space gives its own value.
    fn log_estimate(&self, x: &X) -> Result<f64> {
        Ok(self.estimate(x)?.ln())
    }
}

impl<X: ?Sized, T: Estimate<X> + ?Sized> Estimate<X> for &T {
    fn estimate(&self, x: &X) -> Result<f64> {
        (**self).estimate(x)
    }

    fn log_estimate(&self, x: &X) -> Result<f64> {
        (**self).log_estimate(x)
    }
}

impl Estimate for FittedRidge {
    fn estimate(&self, x: &[f64]) -> Result<f64> {
        self.predict_row(x)
    }
}

impl Estimate for dyn Regressor {
    fn estimate(&self, x: &[f64]) -> Result<f64> {
        self.predict_row(x)
    }
}

/// An estimate computed by a closure: a base derived from the row itself (its roofline time on
/// its device), or a model reading part of what the stack reads.
#[derive(Clone, Copy)]
pub struct FromFn<F>(pub F);

impl<X: ?Sized, F: Fn(&X) -> Result<f64>> Estimate<X> for FromFn<F> {
    fn estimate(&self, x: &X) -> Result<f64> {
        (self.0)(x)
    }
}

/// A residual model in log space: it adds its correction to a row's log start (boosted trees
/// add one leaf per tree, in tree order).
pub trait LogResidual {
    /// `start` plus the correction of `x`.
    fn add_log(&self, x: &[f64], start: f64) -> f64;

    /// Adds the correction of each row of `rows` (of checked width, one per value of `log`)
    /// to its start in `log`, each as [`LogResidual::add_log`] would.
    fn add_log_rows(&self, rows: &[f64], log: &mut [f64]);
}

/// A base and a residual model fitted on what the base misses (after linfa's composing).
#[derive(Clone, Copy, Debug)]
pub struct StackWith<B, R> {
    base: B,
    residual: R,
}

impl<B> StackWith<B, ()> {
    /// The stack of `base` before its residual model is fitted: what gives the targets.
    pub fn on(base: B) -> StackWith<B, ()> {
        StackWith { base, residual: () }
    }
}

impl<B, R> StackWith<B, R> {
    /// `residual` fitted on what `base` misses.
    pub fn new(base: B, residual: R) -> StackWith<B, R> {
        StackWith { base, residual }
    }

    /// The base.
    pub fn base(&self) -> &B {
        &self.base
    }

    /// The residual model.
    pub fn residual(&self) -> &R {
        &self.residual
    }

    /// The base and the residual model.
    pub fn into_parts(self) -> (B, R) {
        (self.base, self.residual)
    }

    /// What the residual model is fitted on for a row `x` of latency `y`: `y / base`.
    pub fn target<X: ?Sized>(&self, x: &X, y: f64) -> Result<f64>
    where
        B: Estimate<X>,
    {
        Ok(y / self.base.estimate(x)?)
    }

    /// [`StackWith::target`] of every row and its latency.
    pub fn targets<'a, X: ?Sized + 'a>(
        &self,
        rows: impl IntoIterator<Item = &'a X>,
        y: &[f64],
    ) -> Result<Vec<f64>>
    where
        B: Estimate<X>,
    {
        rows.into_iter()
            .zip(y)
            .map(|(x, &y)| self.target(x, y))
            .collect()
    }

    /// Where a residual model in log space starts row `x`: `ln base`.
    pub fn log_start<X: ?Sized>(&self, x: &X) -> Result<f64>
    where
        B: Estimate<X>,
    {
        self.base.log_estimate(x)
    }

    /// The stack with the residual model `fit` makes of the targets of `rows` and `y`
    /// ([`StackWith::targets`]).
    pub fn fit<'a, X: ?Sized + 'a, R2, E: From<crate::Error>>(
        self,
        rows: impl IntoIterator<Item = &'a X>,
        y: &[f64],
        fit: impl FnOnce(Vec<f64>) -> std::result::Result<R2, E>,
    ) -> std::result::Result<StackWith<B, R2>, E>
    where
        B: Estimate<X>,
    {
        let residual = fit(self.targets(rows, y)?)?;
        Ok(StackWith {
            base: self.base,
            residual,
        })
    }

    /// The stack's prediction of `x`: the base times the residual model's ratio.
    #[inline]
    pub fn predict_row<X: ?Sized>(&self, x: &X) -> Result<f64>
    where
        B: Estimate<X>,
        R: Estimate<X>,
    {
        Ok(self.base.estimate(x)? * self.residual.estimate(x)?)
    }

    /// The prediction of `x` by a residual model in log space: `exp(ln base + correction)`.
    #[inline]
    pub fn predict_log_row(&self, x: &[f64]) -> Result<f64>
    where
        B: Estimate,
        R: LogResidual,
    {
        Ok(self.residual.add_log(x, self.log_start(x)?).exp())
    }

    /// [`StackWith::predict_log_row`] of every row of `rows` (`width` values each, one row
    /// per value of `out`), the same bits, the residual model adding to all rows at once.
    pub fn predict_log_rows(&self, rows: &[f64], width: usize, out: &mut [f64]) -> Result<()>
    where
        B: Estimate,
        R: LogResidual,
    {
        for (x, o) in rows.chunks_exact(width).zip(out.iter_mut()) {
            *o = self.log_start(x)?;
        }
        self.residual.add_log_rows(rows, out);
        for o in out.iter_mut() {
            *o = o.exp();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A base reading the first column: `2 x[0]` ms.
    fn twice() -> FromFn<impl Fn(&[f64]) -> Result<f64>> {
        FromFn(|x: &[f64]| Ok(2.0 * x[0]))
    }

    /// A residual model in log space adding `x[1]`.
    struct AddSecond;

    impl LogResidual for AddSecond {
        fn add_log(&self, x: &[f64], start: f64) -> f64 {
            start + x[1]
        }

        fn add_log_rows(&self, rows: &[f64], log: &mut [f64]) {
            for (x, l) in rows.chunks_exact(2).zip(log) {
                *l = self.add_log(x, *l);
            }
        }
    }

    #[test]
    fn a_base_that_is_exactly_right_leaves_a_residual_of_one() {
        let rows = [[0.5, 0.0], [3.0, 0.0], [1e-3, 0.0]];
        let y: Vec<f64> = rows.iter().map(|r| 2.0 * r[0]).collect();
        let stack = StackWith::on(twice())
            .fit(rows.iter().map(|r| &r[..]), &y, |t| {
                assert_eq!(t, [1.0, 1.0, 1.0]);
                Ok::<_, crate::Error>(FromFn(|_: &[f64]| Ok(1.0)))
            })
            .unwrap();
        for (r, y) in rows.iter().zip(&y) {
            assert_eq!(stack.predict_row(&r[..]).unwrap(), *y);
        }
    }

    #[test]
    fn a_known_base_and_residual_compose_to_hand_computed_values() {
        // Base 2 x[0], residual 1 + x[1]: (4, 0.5) gives 8 x 1.5 = 12.
        let stack = StackWith::new(twice(), FromFn(|x: &[f64]| Ok(1.0 + x[1])));
        assert_eq!(stack.predict_row(&[4.0, 0.5][..]).unwrap(), 12.0);
        assert_eq!(stack.predict_row(&[0.25, -0.5][..]).unwrap(), 0.25);
        // The targets a residual model is fitted on: latency over the base.
        let on = StackWith::on(twice());
        assert_eq!(
            on.targets([&[4.0, 0.0][..], &[1.0, 0.0][..]], &[12.0, 1.0])
                .unwrap(),
            [1.5, 0.5]
        );
        // A target composed with its base gives the latency back.
        for (x, y) in [(1.5, 3.0), (0.25, 0.02), (5e-4, 1e-3)] {
            let t = on.target(&[x][..], y).unwrap();
            let back = StackWith::new(twice(), FromFn(|_: &[f64]| Ok(t)))
                .predict_row(&[x][..])
                .unwrap();
            assert!((back / y - 1.0).abs() < 1e-15, "{back} vs {y}");
        }
        // An error of either part is the stack's.
        let failing = StackWith::new(
            twice(),
            FromFn(|_: &[f64]| Err(crate::Error::Query("no".into()))),
        );
        assert!(failing.predict_row(&[1.0][..]).is_err());
    }

    #[test]
    fn a_log_residual_starts_at_the_log_of_its_base() {
        // Base 2 x[0], log correction x[1]: (3, ln 2) gives exp(ln 6 + ln 2) = 12.
        let stack = StackWith::new(twice(), AddSecond);
        let x = [3.0, 2f64.ln()];
        assert_eq!(stack.log_start(&x[..]).unwrap(), 6f64.ln());
        let one = stack.predict_log_row(&x).unwrap();
        assert!((one - 12.0).abs() < 1e-12, "{one}");
        // The batch gives each row's bits.
        let rows = [3.0, 2f64.ln(), 0.5, -1.0, 10.0, 0.0];
        let mut out = [0.0; 3];
        stack.predict_log_rows(&rows, 2, &mut out).unwrap();
        for (r, o) in rows.chunks_exact(2).zip(out) {
            assert_eq!(o, stack.predict_log_row(r).unwrap());
        }
        assert!((out[1] - (-1f64).exp()).abs() < 1e-15);
        assert_eq!(out[2], 20f64.ln().exp());
    }
}
