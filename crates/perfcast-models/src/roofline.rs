//! The analytic roofline model: `latency = max(work / (e_c · peak), bytes / (e_m · bandwidth)) + overhead`.
//!
//! Peak FLOP/s and bandwidth come from the device spec (features `dev_peak_gflops`,
//! `dev_bandwidth_gbs`); the compute and memory efficiencies `e_c`, `e_m` and the fixed
//! per-call overhead are fitted per module kind and per phase, minimising squared log error
//! with Nelder-Mead. Three numbers per phase: tiny, interpretable, and the fallback for kinds or
//! devices no data covers.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::features::TrainSet;
use crate::regressor::{Fit, check_train_set};
pub use perfcast_predict::roofline::{Efficiencies, FittedRoofline, indices, predict};

/// Hyper-parameters of [`FittedRoofline`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RooflineParams {
    /// Nelder-Mead iterations per phase; default 400.
    pub iterations: usize,
}

impl Default for RooflineParams {
    fn default() -> Self {
        RooflineParams { iterations: 400 }
    }
}

/// Minimises `f` from `start` with Nelder-Mead (reflection, expansion, contraction, shrink).
fn nelder_mead(
    f: &dyn Fn(&[f64; 3]) -> f64,
    start: [f64; 3],
    step: f64,
    iterations: usize,
) -> [f64; 3] {
    let mut simplex: Vec<([f64; 3], f64)> = (0..4)
        .map(|i| {
            let mut p = start;
            if i > 0 {
                p[i - 1] += step;
            }
            (p, f(&p))
        })
        .collect();
    for _ in 0..iterations {
        simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
        let mut centroid = [0.0; 3];
        for (p, _) in &simplex[..3] {
            for k in 0..3 {
                centroid[k] += p[k] / 3.0;
            }
        }
        let worst = simplex[3];
        let along = |t: f64| -> [f64; 3] {
            let mut q = [0.0; 3];
            for k in 0..3 {
                q[k] = centroid[k] + t * (worst.0[k] - centroid[k]);
            }
            q
        };
        let reflected = along(-1.0);
        let fr = f(&reflected);
        if fr < simplex[0].1 {
            let expanded = along(-2.0);
            let fe = f(&expanded);
            simplex[3] = if fe < fr {
                (expanded, fe)
            } else {
                (reflected, fr)
            };
        } else if fr < simplex[2].1 {
            simplex[3] = (reflected, fr);
        } else {
            let contracted = along(0.5);
            let fc = f(&contracted);
            if fc < worst.1 {
                simplex[3] = (contracted, fc);
            } else {
                let best = simplex[0].0;
                for s in simplex.iter_mut().skip(1) {
                    for (v, b) in s.0.iter_mut().zip(best) {
                        *v = b + 0.5 * (*v - b);
                    }
                    s.1 = f(&s.0);
                }
            }
        }
    }
    simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
    simplex[0].0
}

fn fit_phase(rows: &[(f64, f64, f64, f64, f64)], iterations: usize) -> Efficiencies {
    if rows.is_empty() {
        return Efficiencies {
            compute: 0.5,
            memory: 0.5,
            overhead_ms: 0.0,
        };
    }
    // Parameters in log space keep the efficiencies and overhead positive.
    let unpack = |p: &[f64; 3]| Efficiencies {
        compute: p[0].exp(),
        memory: p[1].exp(),
        overhead_ms: p[2].exp(),
    };
    let loss = |p: &[f64; 3]| -> f64 {
        let e = unpack(p);
        rows.iter()
            .map(|&(f, b, pk, bw, y)| (predict(&e, f, b, pk, bw).ln() - y.ln()).powi(2))
            .sum::<f64>()
            / rows.len() as f64
    };
    let mut ys: Vec<f64> = rows.iter().map(|r| r.4).collect();
    ys.sort_by(f64::total_cmp);
    let start = [0.3f64.ln(), 0.3f64.ln(), (ys[0] * 0.5).max(1e-6).ln()];
    // Two restarts from the first optimum escape the flat regions of the max().
    let mut best = nelder_mead(&loss, start, 1.0, iterations);
    for _ in 0..2 {
        best = nelder_mead(&loss, best, 0.5, iterations);
    }
    unpack(&best)
}

impl crate::params::FamilyParams for RooflineParams {
    fn name(&self) -> &'static str {
        "roofline"
    }

    fn cross_device(&self) -> crate::params::CrossDevice {
        crate::params::CrossDevice::Itself
    }
}

impl Fit for RooflineParams {
    type Fitted = FittedRoofline;

    fn validate(&self) -> Result<()> {
        if self.iterations == 0 {
            return Err(Error::InvalidParams {
                model: "roofline",
                message: "iterations must be at least 1, got 0".into(),
            });
        }
        Ok(())
    }

    fn fit(&self, data: &TrainSet) -> Result<FittedRoofline> {
        self.validate()?;
        check_train_set(data, 3)?;
        let idx = indices(&data.schema)?;
        let mut inference = Vec::new();
        let mut training = Vec::new();
        for (r, &y) in data.x.iter_rows().zip(&data.y) {
            let row = (r[idx[0]], r[idx[1]], r[idx[2]], r[idx[3]], y);
            if r[idx[4]] > 0.5 {
                training.push(row);
            } else {
                inference.push(row);
            }
        }
        let mut inf = fit_phase(&inference, self.iterations);
        let mut train = fit_phase(&training, self.iterations);
        // A phase without rows borrows the other's fit.
        if inference.is_empty() {
            inf = train;
        }
        if training.is_empty() {
            train = inf;
        }
        Ok(FittedRoofline::new(data.schema.clone(), inf, train)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::FeatureSchema;
    use crate::matrix::Matrix;
    use crate::regressor::Regressor;
    use perfcast_core::ModuleKind;

    #[test]
    fn recovers_known_efficiencies() {
        let names = [
            "work_flops",
            "work_bytes",
            "dev_peak_gflops",
            "dev_bandwidth_gbs",
            "training",
        ];
        let truth = Efficiencies {
            compute: 0.4,
            memory: 0.7,
            overhead_ms: 0.01,
        };
        let mut x = Matrix::with_cols(5);
        let mut y = Vec::new();
        for i in 0..60 {
            let flops = 1e6 * 1.3f64.powi(i);
            let bytes = 1e5 * 1.25f64.powi((i * 7) % 60);
            x.push_row(&[flops, bytes, 100.0, 10.0, 0.0]);
            y.push(predict(&truth, flops, bytes, 100.0, 10.0));
        }
        let data = TrainSet {
            schema: FeatureSchema {
                kind: ModuleKind::Conv2d,
                names: names.iter().map(|s| (*s).to_string()).collect(),
            },
            x,
            y,
            groups: vec![0; 60],
        };
        let m = RooflineParams::default().fit(&data).unwrap();
        assert!(
            (m.inference.compute / 0.4 - 1.0).abs() < 0.02,
            "{:?}",
            m.inference
        );
        assert!(
            (m.inference.memory / 0.7 - 1.0).abs() < 0.02,
            "{:?}",
            m.inference
        );
        assert!(
            (m.inference.overhead_ms / 0.01 - 1.0).abs() < 0.05,
            "{:?}",
            m.inference
        );
        assert_eq!(
            m.training, m.inference,
            "no training rows: borrows inference"
        );
        let p = m.predict_row(data.x.row(10)).unwrap();
        assert!((p / data.y[10] - 1.0).abs() < 0.01);
    }
}
