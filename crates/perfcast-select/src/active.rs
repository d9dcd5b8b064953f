//! Active selection: measure next the configurations the models know least.
//!
//! A random sweep covers a kind's ranges evenly. Once it is measured, the rows that teach a
//! model most are those it is least sure of: a bootstrap ensemble of boosted trees, each fitted
//! on a resample of the kind's measured configurations (whole configuration groups, as the
//! splits use), predicts a pool of fresh draws from the same sweep ranges, and the draws whose
//! log predictions disagree most (over the sweep's phases) per expected second of measuring
//! are measured next: a small layer that teaches as much as a large one costs less. One round picks
//! many at once, so each pick lowers the score of the candidates near it (local penalisation):
//! a round spreads over the uncertain regions instead of spending itself in one corner.

use std::collections::HashSet;

use perfcast_core::rng::SplitMix64;
use perfcast_core::{DeviceSpec, ModuleKind, Phase};
use perfcast_data::Record;
use perfcast_models::features::{TrainSet, feature_row, log1p_pos};
use perfcast_models::regressor::{Fit, Regressor};
use perfcast_models::trees::TreeParams;
use perfcast_profile::Sweep;
use perfcast_profile::sweep::Sample;
use serde::Serialize;

use crate::error::{Error, Result};

/// How one round chooses.
#[derive(Clone, Debug)]
pub struct ActivePlan {
    /// Models in the bootstrap ensemble (at least 2).
    pub ensemble: usize,
    /// Candidates drawn per configuration chosen.
    pub pool_factor: usize,
    /// Seed of the pool's draws and the resamples.
    pub seed: u64,
    /// Rank by spread per expected second of measuring (the default: at equal profiling
    /// minutes it learned conv2d faster than random draws, where spread alone did not; see
    /// docs/accuracy.md) instead of spread alone.
    pub per_second: bool,
}

impl Default for ActivePlan {
    fn default() -> ActivePlan {
        ActivePlan {
            ensemble: 4,
            pool_factor: 8,
            seed: 0,
            per_second: true,
        }
    }
}

/// What one round chose for one kind.
#[derive(Clone, Debug, Serialize)]
pub struct ActiveChoice {
    /// Module kind.
    pub kind: ModuleKind,
    /// The configurations to measure, most informative first.
    #[serde(skip)]
    pub chosen: Vec<Sample>,
    /// Candidates scored.
    pub pool: usize,
    /// Mean spread (standard deviation of ln latency over the ensemble) of the pool, and of
    /// the chosen; `None` when the draws were taken as they came: the kind had fewer than
    /// [`MIN_ROWS`] rows for an ensemble, or the pool no more candidates than were asked for.
    pub pool_spread: Option<f64>,
    /// See `pool_spread`.
    pub chosen_spread: Option<f64>,
}

/// Fewest measured rows of a kind before its ensemble is fitted; below, draws are random.
pub const MIN_ROWS: usize = 40;

/// Chooses `n` configurations of `kind` to measure next, given the kind's measured `records`
/// on `device`, from a pool drawn from `sweep`'s ranges (configurations already measured are
/// left out).
pub fn choose(
    sweep: &Sweep,
    kind: ModuleKind,
    records: &[Record],
    device: &DeviceSpec,
    n: usize,
    plan: &ActivePlan,
) -> Result<ActiveChoice> {
    if plan.ensemble < 2 || plan.pool_factor < 1 {
        return Err(Error::Input(format!(
            "active selection needs an ensemble of at least 2 and a pool factor of at least 1, got {} and {}",
            plan.ensemble, plan.pool_factor
        )));
    }
    let measured: HashSet<_> = records
        .iter()
        .map(|r| Sample::key_of(&r.spec, &r.context))
        .collect();
    let pool: Vec<Sample> = draw_pool(sweep, kind, n * plan.pool_factor, records.len(), plan)?
        .into_iter()
        .filter(|s| !measured.contains(&s.key()))
        .collect();
    let set = TrainSet::from_records(kind, records, device)?;
    if set.len() < MIN_ROWS || pool.len() <= n {
        return Ok(ActiveChoice {
            kind,
            pool: pool.len(),
            chosen: pool.into_iter().take(n).collect(),
            pool_spread: None,
            chosen_spread: None,
        });
    }
    let models = ensemble(&set, plan)?;
    let phases: &[Phase] = &sweep.phases;
    let rows: Vec<Vec<Vec<f64>>> = pool
        .iter()
        .map(|s| {
            phases
                .iter()
                .map(|&p| feature_row(&s.spec, &s.context(p), device))
                .collect()
        })
        .collect();
    let scored: Vec<(f64, f64)> = rows
        .iter()
        .map(|per_phase| spread(&models, per_phase, &sweep.timing))
        .collect::<Result<_>>()?;
    let spreads: Vec<f64> = scored.iter().map(|s| s.0).collect();
    let scores: Vec<f64> = if plan.per_second {
        scored.iter().map(|(s, cost)| s / cost.max(1e-3)).collect()
    } else {
        spreads.clone()
    };
    let picks = penalised_picks(&scores, &rows, n);
    let chosen: Vec<f64> = picks.iter().map(|&i| spreads[i]).collect();
    Ok(ActiveChoice {
        kind,
        pool: pool.len(),
        pool_spread: Some(mean(&spreads)),
        chosen_spread: Some(mean(&chosen)),
        chosen: picks.iter().map(|&i| pool[i].clone()).collect(),
    })
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len().max(1) as f64
}

/// Fresh draws from the sweep's ranges: another seed each round (the stored row count moves
/// it), fewer when the space has too few distinct configurations for the whole pool.
fn draw_pool(
    sweep: &Sweep,
    kind: ModuleKind,
    size: usize,
    stored: usize,
    plan: &ActivePlan,
) -> Result<Vec<Sample>> {
    let mut pool = sweep.clone();
    pool.seed = sweep.seed
        ^ plan.seed.rotate_left(17)
        ^ (stored as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D);
    let mut size = size.max(1);
    loop {
        pool.samples = size;
        match pool.sample(kind) {
            Ok(samples) => return Ok(samples),
            Err(_) if size > 1 => size /= 2,
            Err(message) => return Err(Error::Input(message)),
        }
    }
}

/// Boosted trees fitted on `plan.ensemble` resamples of the set's configuration groups.
fn ensemble(set: &TrainSet, plan: &ActivePlan) -> Result<Vec<Box<dyn Regressor>>> {
    let mut groups: Vec<u64> = set.groups.clone();
    groups.sort_unstable();
    groups.dedup();
    let mut rng = SplitMix64::new(plan.seed ^ 0xAC71_5E1E_C7ED);
    (0..plan.ensemble)
        .map(|b| {
            let drawn: Vec<u64> = (0..groups.len())
                .map(|_| groups[rng.below(groups.len())])
                .collect();
            let mut counts = std::collections::HashMap::new();
            for g in drawn {
                *counts.entry(g).or_insert(0usize) += 1;
            }
            let indices: Vec<usize> = (0..set.len())
                .flat_map(|i| {
                    std::iter::repeat_n(i, counts.get(&set.groups[i]).copied().unwrap_or(0))
                })
                .collect();
            let params = TreeParams {
                seed: plan.seed.wrapping_add(b as u64),
                ..TreeParams::default()
            };
            Ok(Box::new(params.fit(&set.select(&indices))?) as Box<dyn Regressor>)
        })
        .collect()
}

/// Root mean over phases of the variance of ln predictions across the ensemble.
/// Also the seconds measuring the candidate should take in all its phases, from the ensemble's
/// mean prediction: a warm-up, then at least 7 timed calls up to the sweep's time cap.
fn spread(
    models: &[Box<dyn Regressor>],
    per_phase: &[Vec<f64>],
    timing: &perfcast_profile::timer::TimingConfig,
) -> Result<(f64, f64)> {
    let mut total = 0.0;
    let mut cost_s = 0.0;
    for row in per_phase {
        let logs: Vec<f64> = models
            .iter()
            .map(|m| m.predict_row(row).map(|y| y.max(1e-12).ln()))
            .collect::<std::result::Result<_, _>>()?;
        let mean = logs.iter().sum::<f64>() / logs.len() as f64;
        total += logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / (logs.len() - 1) as f64;
        let call_s = mean.exp() / 1e3;
        cost_s += timing.warmup_s.max(2.0 * call_s)
            + (f64::from(timing.min_samples) * call_s.max(timing.min_sample_s))
                .min(timing.max_time_s);
    }
    Ok(((total / per_phase.len().max(1) as f64).sqrt(), cost_s))
}

/// Picks `n` indices greedily by spread; each pick scales the others' scores by
/// `1 - exp(-d^2 / 2h^2)`, with `d` the distance in standardised log features (first phase's
/// row) and `h` the pool's median nearest-neighbour distance.
fn penalised_picks(spreads: &[f64], rows: &[Vec<Vec<f64>>], n: usize) -> Vec<usize> {
    let points: Vec<Vec<f64>> = rows
        .iter()
        .map(|r| r[0].iter().map(|v| log1p_pos(*v)).collect())
        .collect();
    let width = points.first().map_or(0, Vec::len);
    let count = points.len() as f64;
    let scale: Vec<f64> = (0..width)
        .map(|j| {
            let mean = points.iter().map(|p| p[j]).sum::<f64>() / count;
            let var = points.iter().map(|p| (p[j] - mean).powi(2)).sum::<f64>() / count;
            if var > 1e-12 { 1.0 / var.sqrt() } else { 0.0 }
        })
        .collect();
    let distance2 = |a: &[f64], b: &[f64]| -> f64 {
        a.iter()
            .zip(b)
            .zip(&scale)
            .map(|((x, y), s)| ((x - y) * s).powi(2))
            .sum()
    };
    let mut nearest: Vec<f64> = (0..points.len())
        .map(|i| {
            (0..points.len())
                .filter(|&j| j != i)
                .map(|j| distance2(&points[i], &points[j]))
                .fold(f64::INFINITY, f64::min)
        })
        .collect();
    nearest.sort_by(f64::total_cmp);
    let h2 = nearest
        .get(nearest.len() / 2)
        .copied()
        .unwrap_or(1.0)
        .max(1e-12);
    let mut score = spreads.to_vec();
    let mut picks = Vec::with_capacity(n);
    for _ in 0..n.min(points.len()) {
        let Some(best) = (0..score.len())
            .filter(|i| !picks.contains(i))
            .max_by(|&a, &b| score[a].total_cmp(&score[b]))
        else {
            break;
        };
        picks.push(best);
        for (i, s) in score.iter_mut().enumerate() {
            *s *= 1.0 - (-distance2(&points[i], &points[best]) / (2.0 * h2)).exp();
        }
    }
    picks
}

/// One round over every kind of `sweep`: `sweep.samples` configurations per kind, chosen
/// against the rows the dataset at `dataset` already holds (random draws where it holds too
/// few, or does not exist yet).
pub fn choose_round(
    sweep: &Sweep,
    dataset: &std::path::Path,
    device: &DeviceSpec,
    plan: &ActivePlan,
) -> Result<Vec<ActiveChoice>> {
    let dir = perfcast_data::DatasetDir::open(dataset).ok();
    sweep
        .modules
        .iter()
        .map(|&kind| {
            let records = match &dir {
                Some(d) if d.kinds().contains(&kind) => d.read(kind)?,
                _ => Vec::new(),
            };
            choose(sweep, kind, &records, device, sweep.samples, plan)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use perfcast_core::testing::cpu_device;
    use perfcast_data::{Outcome, Timing};
    use perfcast_profile::overrides::SweepOverrides;

    use super::*;

    fn sweep(kind: ModuleKind, samples: usize) -> Sweep {
        Sweep::with_overrides(
            None,
            &SweepOverrides {
                modules: vec![kind],
                samples: Some(samples),
                ..SweepOverrides::default()
            },
        )
        .expect("sweep")
    }

    /// Rows of `samples` in every phase of `sweep`, timed by a smooth law of the work except
    /// in one corner (inputs above 64x64), where another law holds: what a model learns only
    /// from rows there.
    fn measured(sweep: &Sweep, samples: &[Sample]) -> Vec<Record> {
        let mut out = Vec::new();
        for s in samples {
            for &phase in &sweep.phases {
                let flops = perfcast_core::features::derive(&s.spec, s.batch).flops;
                let rate = match &s.spec {
                    perfcast_core::ModuleSpec::Conv2d(c) if c.input_hw[0] > 64 => 2e7,
                    _ => 5e7,
                };
                let step = if phase == Phase::Training { 3.0 } else { 1.0 };
                out.push(Record {
                    spec: s.spec.clone(),
                    context: s.context(phase),
                    backend: "flex".into(),
                    outcome: Outcome::Ok(Timing::median_only(1e-3 + step * flops / rate)),
                    perfcast_version: "test".into(),
                    timestamp: 0,
                });
            }
        }
        out
    }

    #[test]
    fn too_few_rows_take_the_draws_as_they_come_and_never_a_measured_one() {
        let device = cpu_device();
        let s = sweep(ModuleKind::Conv2d, 10);
        let first = s.sample(ModuleKind::Conv2d).expect("draws");
        let records = measured(&s, &first[..5]);
        let c = choose(
            &s,
            ModuleKind::Conv2d,
            &records,
            &device,
            6,
            &ActivePlan::default(),
        )
        .expect("choice");
        assert_eq!(c.chosen.len(), 6);
        assert_eq!((c.pool_spread, c.chosen_spread), (None, None));
        let keys: HashSet<_> = first[..5].iter().map(Sample::key).collect();
        assert!(c.chosen.iter().all(|s| !keys.contains(&s.key())));
    }

    #[test]
    fn the_chosen_are_the_most_disputed_spread_out_and_new_each_round() {
        let device = cpu_device();
        let s = sweep(ModuleKind::Conv2d, 60);
        let base = s.sample(ModuleKind::Conv2d).expect("draws");
        let records = measured(&s, &base);
        let plan = ActivePlan::default();
        let c = choose(&s, ModuleKind::Conv2d, &records, &device, 12, &plan).expect("choice");
        assert_eq!((c.chosen.len(), c.kind), (12, ModuleKind::Conv2d));
        let (pool, chosen) = (
            c.pool_spread.expect("ensemble"),
            c.chosen_spread.expect("ensemble"),
        );
        assert!(chosen > 1.2 * pool, "chosen {chosen} vs pool {pool}");
        let distinct: HashSet<_> = c.chosen.iter().map(Sample::key).collect();
        assert_eq!(distinct.len(), 12);
        // The next round (more rows stored) draws another pool.
        let mut more = records.clone();
        more.extend(measured(&s, &c.chosen));
        let next = choose(&s, ModuleKind::Conv2d, &more, &device, 12, &plan).expect("choice");
        assert!(next.chosen.iter().all(|n| !distinct.contains(&n.key())));
    }

    #[test]
    fn picks_leave_a_cluster_once_it_has_one() {
        // Ten candidates: five near-identical with the highest spread, five spread apart.
        let rows: Vec<Vec<Vec<f64>>> = (0..10)
            .map(|i| {
                let x = if i < 5 {
                    100.0 + i as f64 * 1e-3
                } else {
                    10f64.powi(i)
                };
                vec![vec![x, 2.0 * x]]
            })
            .collect();
        let spreads = [0.9, 0.9, 0.9, 0.9, 0.9, 0.5, 0.5, 0.5, 0.5, 0.5];
        let picks = penalised_picks(&spreads, &rows, 3);
        assert_eq!(picks.iter().filter(|&&i| i < 5).count(), 1, "{picks:?}");
    }

    #[test]
    fn an_ensemble_of_one_is_refused() {
        let s = sweep(ModuleKind::Relu, 10);
        let plan = ActivePlan {
            ensemble: 1,
            ..ActivePlan::default()
        };
        let err = choose(&s, ModuleKind::Relu, &[], &cpu_device(), 3, &plan).unwrap_err();
        assert!(err.to_string().contains("ensemble of at least 2"), "{err}");
    }
}
