//! Differential evolution (Storn and Price, 1997), the `rand/1/bin` scheme, box-bounded.
//!
//! A population of candidate vectors evolves: for each member (the target) a mutant
//! `x_r1 + F (x_r2 - x_r3)` is built from three other random members, crossed with the target
//! gene by gene with probability `CR` (at least one gene from the mutant), and replaces the
//! target when it costs no more. A mutant gene outside its bounds is put halfway between the
//! target's gene and the bound it crossed. One seeded generator drives every draw, so a run
//! is deterministic under its seed.
//!
//! It needs no gradient and no starting point, only bounds: the fitted expression's cost is
//! a smooth but badly scaled function of constants spanning orders of magnitude.

use perfcast_core::rng::SplitMix64;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Differential evolution's parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeConfig {
    /// Population size; 0 for `max(20, 10 x dimensions)`. Default 0.
    pub population: usize,
    /// Differential weight `F`, in (0, 2]. Default 0.7.
    pub f: f64,
    /// Crossover probability `CR`, in [0, 1]. Default 0.9.
    pub cr: f64,
    /// Generations at most. Default 3000.
    pub max_generations: usize,
    /// Stop when the population's costs span at most `abs_tol + rel_tol |best|`. Default 1e-10.
    pub rel_tol: f64,
    /// Absolute part of the stopping rule. Default 1e-15.
    pub abs_tol: f64,
    /// Seed of the generator. Default 0.
    pub seed: u64,
}

impl Default for DeConfig {
    fn default() -> Self {
        DeConfig {
            population: 0,
            f: 0.7,
            cr: 0.9,
            max_generations: 3000,
            rel_tol: 1e-10,
            abs_tol: 1e-15,
            seed: 0,
        }
    }
}

/// What a run found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeResult {
    /// Best vector.
    pub x: Vec<f64>,
    /// Its cost.
    pub cost: f64,
    /// Generations run.
    pub generations: usize,
    /// Cost evaluations.
    pub evaluations: usize,
    /// Whether the stopping rule was met before `max_generations`.
    pub converged: bool,
}

/// Largest population accepted: the population is allocated up front (one vector per member),
/// and a few hundred members already cover the expressions fitted here.
pub const MAX_POPULATION: usize = 100_000;

impl DeConfig {
    fn validate(&self, bounds: &[(f64, f64)]) -> Result<()> {
        let bad = |m: String| Err(Error::invalid("differential evolution setting", m));
        if bounds.is_empty() {
            return bad("there must be at least one dimension".into());
        }
        for (i, &(lo, hi)) in bounds.iter().enumerate() {
            if !(lo.is_finite() && hi.is_finite() && lo <= hi) {
                return bad(format!("bounds of dimension {i} are [{lo}, {hi}]"));
            }
        }
        if !(self.f > 0.0 && self.f <= 2.0) {
            return bad(format!("`F` must be in (0, 2], got {}", self.f));
        }
        if !(0.0..=1.0).contains(&self.cr) {
            return bad(format!("`CR` must be in [0, 1], got {}", self.cr));
        }
        if self.population != 0 && self.population < 4 {
            return bad(format!(
                "the population must be at least 4 (rand/1 draws three others), got {}",
                self.population
            ));
        }
        if self.population > MAX_POPULATION {
            return bad(format!(
                "the population must be at most {MAX_POPULATION}, got {}",
                self.population
            ));
        }
        if !(self.rel_tol >= 0.0 && self.abs_tol >= 0.0) {
            return bad(format!(
                "tolerances must not be negative, got {} and {}",
                self.rel_tol, self.abs_tol
            ));
        }
        Ok(())
    }
}

/// Minimises `cost` over the box `bounds` (one `(low, high)` per dimension). A NaN cost
/// counts as infinitely bad.
pub fn minimise(
    mut cost: impl FnMut(&[f64]) -> f64,
    bounds: &[(f64, f64)],
    config: &DeConfig,
) -> Result<DeResult> {
    config.validate(bounds)?;
    let dim = bounds.len();
    let np = if config.population == 0 {
        (10 * dim).max(20)
    } else {
        config.population
    };
    let mut rng = SplitMix64::new(config.seed);
    let mut eval = |x: &[f64]| {
        let c = cost(x);
        if c.is_nan() { f64::INFINITY } else { c }
    };
    let mut pop: Vec<Vec<f64>> = (0..np)
        .map(|_| {
            bounds
                .iter()
                .map(|&(lo, hi)| lo + (hi - lo) * rng.unit())
                .collect()
        })
        .collect();
    let mut costs: Vec<f64> = pop.iter().map(|x| eval(x)).collect();
    let mut evaluations = np;
    let mut trial = vec![0.0; dim];
    let mut generations = 0;
    let mut converged = false;
    while generations < config.max_generations {
        let (best, worst) = costs
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(b, w), &c| {
                (b.min(c), w.max(c))
            });
        if worst - best <= config.abs_tol + config.rel_tol * best.abs() {
            converged = true;
            break;
        }
        generations += 1;
        // Generational: trials compete with the population as it was at the generation's
        // start, so the order members are visited in does not matter.
        let mut next = pop.clone();
        let mut next_costs = costs.clone();
        for i in 0..np {
            let pick = |rng: &mut SplitMix64, not: &[usize]| loop {
                let r = rng.below(np);
                if !not.contains(&r) {
                    break r;
                }
            };
            let r1 = pick(&mut rng, &[i]);
            let r2 = pick(&mut rng, &[i, r1]);
            let r3 = pick(&mut rng, &[i, r1, r2]);
            let forced = rng.below(dim);
            for j in 0..dim {
                let target = pop[i][j];
                trial[j] = if j == forced || rng.unit() < config.cr {
                    let (lo, hi) = bounds[j];
                    let v = pop[r1][j] + config.f * (pop[r2][j] - pop[r3][j]);
                    if v < lo {
                        0.5 * (lo + target)
                    } else if v > hi {
                        0.5 * (hi + target)
                    } else {
                        v
                    }
                } else {
                    target
                };
            }
            let c = eval(&trial);
            evaluations += 1;
            if c <= costs[i] {
                next[i].copy_from_slice(&trial);
                next_costs[i] = c;
            }
        }
        pop = next;
        costs = next_costs;
    }
    let best = (0..np)
        .min_by(|&a, &b| costs[a].total_cmp(&costs[b]))
        .unwrap_or(0);
    Ok(DeResult {
        x: pop[best].clone(),
        cost: costs[best],
        generations,
        evaluations,
        converged,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rosenbrock(x: &[f64]) -> f64 {
        x.windows(2)
            .map(|w| 100.0 * (w[1] - w[0] * w[0]).powi(2) + (1.0 - w[0]).powi(2))
            .sum()
    }

    #[test]
    fn finds_the_rosenbrock_minimum_in_2_and_4_dimensions() {
        for dim in [2usize, 4] {
            let bounds = vec![(-5.0, 5.0); dim];
            let config = DeConfig {
                max_generations: 5000,
                seed: 11,
                ..DeConfig::default()
            };
            let r = minimise(rosenbrock, &bounds, &config).unwrap();
            assert!(r.converged, "{dim}D: {r:?}");
            for (j, v) in r.x.iter().enumerate() {
                assert!((v - 1.0).abs() < 1e-4, "{dim}D: x[{j}] = {v} ({r:?})");
            }
            assert!(r.cost < 1e-8, "{dim}D: {}", r.cost);
        }
    }

    #[test]
    fn respects_bounds_that_exclude_the_unconstrained_minimum() {
        // Sphere centred at 3, box [-1, 2]: the minimum is on the boundary at 2.
        let r = minimise(
            |x: &[f64]| x.iter().map(|v| (v - 3.0).powi(2)).sum(),
            &[(-1.0, 2.0); 3],
            &DeConfig::default(),
        )
        .unwrap();
        for v in &r.x {
            assert!(*v <= 2.0 && (v - 2.0).abs() < 1e-6, "{r:?}");
        }
    }

    #[test]
    fn is_deterministic_under_its_seed() {
        let config = DeConfig {
            max_generations: 50,
            seed: 5,
            ..DeConfig::default()
        };
        let bounds = [(-5.0, 5.0); 3];
        let a = minimise(rosenbrock, &bounds, &config).unwrap();
        let b = minimise(rosenbrock, &bounds, &config).unwrap();
        assert_eq!(a, b);
        let c = minimise(
            rosenbrock,
            &bounds,
            &DeConfig {
                seed: 6,
                ..config.clone()
            },
        )
        .unwrap();
        assert_ne!(a.x, c.x);
    }

    #[test]
    fn bad_settings_are_refused() {
        let f = |x: &[f64]| x[0];
        for (config, bounds, needle) in [
            (
                DeConfig {
                    f: 0.0,
                    ..DeConfig::default()
                },
                vec![(0.0, 1.0)],
                "`F` must be in (0, 2], got 0",
            ),
            (
                DeConfig {
                    cr: 1.5,
                    ..DeConfig::default()
                },
                vec![(0.0, 1.0)],
                "got 1.5",
            ),
            (
                DeConfig {
                    population: 3,
                    ..DeConfig::default()
                },
                vec![(0.0, 1.0)],
                "at least 4",
            ),
            (
                DeConfig {
                    population: 4_294_967_295,
                    ..DeConfig::default()
                },
                vec![(0.0, 1.0)],
                "at most 100000, got 4294967295",
            ),
            (DeConfig::default(), vec![(1.0, 0.0)], "[1, 0]"),
            (DeConfig::default(), vec![], "at least one dimension"),
        ] {
            let e = minimise(f, &bounds, &config).unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
        }
    }
}
