//! Splitting rows into training and held-out parts: the one splitter every model and command
//! uses, so a model is never judged, or early-stopped, on another split than its rivals.
//!
//! - [`holdout`]: train and test rows, about `test_share` of the units held out (the train /
//!   select pipeline's test set).
//! - [`kfold`]: `k` (train, test) pairs, every row tested once (cross-validation).
//! - [`validation`]: the early-stopping split inside one fit (trees, `ridge-trees`, MEDN and
//!   the MLP): whole configuration groups, or nothing when the data is too small.
//! - [`leave_one_out`]: one (train, test) pair per label (leave-one-device-out, where the
//!   label is the device; anchor mapping's leave-one-target-out).
//!
//! **Units.** [`Split::Random`] splits rows one by one. [`Split::Group`] splits configuration
//! groups ([`TrainSet::groups`]): a group is the FNV-1a hash of the module's own configuration
//! ([`perfcast_core::ModuleSpec::config`]: the layer's shape, without the context), so every
//! batch size, phase and thread count of one layer is one group, and a model cannot score by
//! having seen the same layer at another batch. A set holds one kind, so the kind is not in
//! the hash; sets of several devices stacked together keep their groups, so a layer held out
//! is held out on every device. Rows without group labels (a `groups` shorter than the rows)
//! count as groups of one.
//!
//! **Seeds and determinism.** The units are sorted before they are shuffled, by perfcast's one
//! generator ([`SplitMix64`]) seeded with the split's seed: the same rows, split and seed give
//! the same split on every machine and every run, and a group split
//! does not depend on the order of the rows. [`leave_one_out`] draws nothing. Each function
//! returns row indices in increasing order.

use std::collections::BTreeMap;

use perfcast_core::rng::SplitMix64;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::features::TrainSet;

/// How rows are split between training and test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    /// Rows independently at random.
    Random,
    /// Whole configuration groups at random.
    Group,
}

impl std::str::FromStr for Split {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "random" => Ok(Split::Random),
            "group" => Ok(Split::Group),
            other => Err(Error::InvalidData(format!(
                "unknown split `{other}` (expected `random` or `group`)"
            ))),
        }
    }
}

/// The unit of each of `n` rows: its index ([`Split::Random`]), or its group ([`Split::Group`];
/// the index where `groups` does not label every row).
fn unit_keys(groups: &[u64], n: usize, split: Split) -> Vec<u64> {
    match split {
        Split::Group if groups.len() == n => groups.to_vec(),
        _ => (0..n as u64).collect(),
    }
}

/// The distinct units, sorted.
fn distinct(keys: &[u64]) -> Vec<u64> {
    let mut units = keys.to_vec();
    units.sort_unstable();
    units.dedup();
    units
}

/// Rows whose unit is in `held` (sorted) and the others: (others, held).
fn partition(keys: &[u64], held: &[u64]) -> (Vec<usize>, Vec<usize>) {
    let (test, train): (Vec<usize>, Vec<usize>) =
        (0..keys.len()).partition(|&i| held.binary_search(&keys[i]).is_ok());
    (train, test)
}

/// Train and test row indices holding out about `test_share` of the rows (or groups): the
/// units shuffled under `seed`, the first `round(test_share * units)` held out.
///
/// Fails when `test_share` is not in (0, 1) or either side would be empty.
pub fn holdout(
    data: &TrainSet,
    test_share: f64,
    split: Split,
    seed: u64,
) -> Result<(Vec<usize>, Vec<usize>)> {
    if !(test_share > 0.0 && test_share < 1.0) {
        return Err(Error::InvalidData(format!(
            "test share must be in (0, 1), got {test_share}"
        )));
    }
    let keys = unit_keys(&data.groups, data.len(), split);
    let mut units = distinct(&keys);
    SplitMix64::new(seed).shuffle(&mut units);
    let cut = (test_share * units.len() as f64).round() as usize;
    let mut held = units[..cut.min(units.len())].to_vec();
    held.sort_unstable();
    let (train, test) = partition(&keys, &held);
    if train.is_empty() || test.is_empty() {
        return Err(Error::InvalidData(format!(
            "{} rows cannot be split {:.0}/{:.0}",
            data.len(),
            100.0 * (1.0 - test_share),
            100.0 * test_share
        )));
    }
    Ok((train, test))
}

/// `k` (train, test) index pairs covering every row once as test: the units shuffled under
/// `seed` and dealt to the folds in turn, so fold sizes (in units) differ by at most one.
///
/// Fails when `k < 2` or there are fewer units than folds (the message names the units).
pub fn kfold(
    data: &TrainSet,
    k: usize,
    split: Split,
    seed: u64,
) -> Result<Vec<(Vec<usize>, Vec<usize>)>> {
    let keys = unit_keys(&data.groups, data.len(), split);
    let mut units = distinct(&keys);
    if k < 2 || units.len() < k {
        return Err(Error::InvalidData(format!(
            "{k}-fold cross-validation needs at least {k} {}, the data has {}",
            if split == Split::Group {
                "configuration groups"
            } else {
                "rows"
            },
            units.len()
        )));
    }
    SplitMix64::new(seed).shuffle(&mut units);
    let fold_of: BTreeMap<u64, usize> = units
        .iter()
        .enumerate()
        .map(|(pos, &u)| (u, pos % k))
        .collect();
    let fold: Vec<usize> = keys.iter().map(|u| fold_of[u]).collect();
    Ok((0..k)
        .map(|f| (0..keys.len()).partition::<Vec<usize>, _>(|&i| fold[i] != f))
        .collect())
}

/// How [`validation`] holds rows out for early stopping.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Validation {
    /// Share of the configuration groups held out, in [0, 1); 0 holds nothing out.
    pub share: f64,
    /// Fewest held-out rows worth validating on: below it (expected, `share` times the rows,
    /// or drawn) nothing is held out.
    pub min_valid: usize,
    /// Fewest rows left to train on: below it nothing is held out.
    pub min_train: usize,
}

/// The early-stopping split of one fit: (train, valid) row indices, holding out
/// `round(share * groups)` whole configuration groups (at least one, never all), drawn by
/// shuffling the sorted groups with `rng`. Holds nothing out (every row trains, `valid` is
/// empty, and `rng` is not drawn from) when `share * rows < min_valid` or there are fewer than
/// two groups; holds nothing out either (after the draw) when the groups drawn give fewer than
/// `min_valid` held-out rows or fewer than `min_train` rows to train on.
///
/// `rng` is the fit's own generator, so a fit that goes on drawing from it (trees' feature
/// subsampling) stays reproducible from its one seed.
pub fn validation(
    groups: &[u64],
    rows: usize,
    v: &Validation,
    rng: &mut SplitMix64,
) -> (Vec<usize>, Vec<usize>) {
    let all = || ((0..rows).collect(), Vec::new());
    if v.share <= 0.0 || (rows as f64 * v.share) < v.min_valid as f64 {
        return all();
    }
    let keys = unit_keys(groups, rows, Split::Group);
    let mut units = distinct(&keys);
    if units.len() < 2 {
        return all();
    }
    rng.shuffle(&mut units);
    let n_held = ((units.len() as f64 * v.share).round() as usize).clamp(1, units.len() - 1);
    let mut held = units[..n_held].to_vec();
    held.sort_unstable();
    let (train, valid) = partition(&keys, &held);
    if valid.len() < v.min_valid || train.len() < v.min_train {
        return all();
    }
    (train, valid)
}

/// Leave-one-out over labelled units (rows, or whole training sets): one (train, test) pair
/// per distinct label, in the order the labels first appear; `test` holds every unit with
/// that label and `train` every other one. With devices as labels this is
/// leave-one-device-out: a device's rows are all held out together, even when they come in
/// several sets, and nothing else is. Nothing random.
pub fn leave_one_out<L: PartialEq>(labels: &[L]) -> Vec<(Vec<usize>, Vec<usize>)> {
    let mut firsts: Vec<&L> = Vec::new();
    for l in labels {
        if !firsts.contains(&l) {
            firsts.push(l);
        }
    }
    firsts
        .into_iter()
        .map(|label| (0..labels.len()).partition::<Vec<usize>, _>(|&i| labels[i] != *label))
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::features::FeatureSchema;
    use crate::matrix::Matrix;
    use perfcast_core::ModuleKind;

    /// `n` rows of `y = 1 + x` in `groups` groups (also used by eval's tests).
    pub(crate) fn data(n: usize, groups: u64) -> TrainSet {
        TrainSet {
            schema: FeatureSchema {
                kind: ModuleKind::Linear,
                names: vec!["a".into()],
            },
            x: Matrix::from_vec(n, 1, (0..n).map(|i| i as f64).collect()),
            y: (0..n).map(|i| 1.0 + i as f64).collect(),
            // Group sizes differ (group g holds the rows i with i % groups == g), and keys are
            // hashes in real sets: spread them.
            groups: (0..n as u64)
                .map(|i| (i % groups).wrapping_mul(0x9e37_79b9_7f4a_7c15))
                .collect(),
        }
    }

    /// Each row exactly once over `train` and `test`, both increasing.
    fn assert_partition(n: usize, train: &[usize], test: &[usize]) {
        let mut seen = vec![0; n];
        for &i in train.iter().chain(test) {
            seen[i] += 1;
        }
        assert!(seen.iter().all(|&c| c == 1), "{seen:?}");
        assert!(train.is_sorted() && test.is_sorted());
    }

    fn assert_groups_apart(d: &TrainSet, train: &[usize], test: &[usize]) {
        for &i in test {
            assert!(
                train.iter().all(|&j| d.groups[j] != d.groups[i]),
                "group of row {i} on both sides"
            );
        }
    }

    #[test]
    fn holdout_partitions_every_row_once() {
        for split in [Split::Random, Split::Group] {
            for (n, groups) in [(10, 10), (41, 7), (100, 3)] {
                let d = data(n, groups);
                let (train, test) = holdout(&d, 0.25, split, 5).unwrap();
                assert_partition(n, &train, &test);
            }
        }
        // A random split holds out round(share * rows) rows.
        let (train, test) = holdout(&data(41, 41), 0.25, Split::Random, 5).unwrap();
        assert_eq!((train.len(), test.len()), (31, 10));
    }

    #[test]
    fn group_holdout_keeps_groups_together_and_holds_their_share() {
        let d = data(57, 8);
        for seed in 0..20 {
            let (train, test) = holdout(&d, 0.25, Split::Group, seed).unwrap();
            assert_groups_apart(&d, &train, &test);
            let held: std::collections::BTreeSet<u64> = test.iter().map(|&i| d.groups[i]).collect();
            assert_eq!(held.len(), 2, "round(0.25 * 8) groups");
        }
    }

    #[test]
    fn same_seed_same_split_and_seeds_differ() {
        let d = data(60, 12);
        for split in [Split::Random, Split::Group] {
            assert_eq!(
                holdout(&d, 0.3, split, 9).unwrap(),
                holdout(&d, 0.3, split, 9).unwrap()
            );
            assert_ne!(
                holdout(&d, 0.3, split, 9).unwrap(),
                holdout(&d, 0.3, split, 10).unwrap()
            );
            assert_eq!(
                kfold(&d, 4, split, 2).unwrap(),
                kfold(&d, 4, split, 2).unwrap()
            );
            assert_ne!(
                kfold(&d, 4, split, 2).unwrap(),
                kfold(&d, 4, split, 3).unwrap()
            );
        }
        let draw = |seed| {
            let v = Validation {
                share: 0.25,
                min_valid: 1,
                min_train: 1,
            };
            validation(&d.groups, d.len(), &v, &mut SplitMix64::new(seed))
        };
        assert_eq!(draw(4), draw(4));
        assert_ne!(draw(4), draw(5));
    }

    #[test]
    fn group_split_does_not_depend_on_row_order() {
        let d = data(30, 6);
        let reversed: Vec<usize> = (0..30).rev().collect();
        let r = d.select(&reversed);
        let held = |set: &TrainSet| {
            let (_, test) = holdout(set, 0.5, Split::Group, 1).unwrap();
            let mut g: Vec<u64> = test.iter().map(|&i| set.groups[i]).collect();
            g.sort_unstable();
            g.dedup();
            g
        };
        assert_eq!(held(&d), held(&r));
    }

    #[test]
    fn kfold_folds_are_disjoint_cover_every_row_and_balance() {
        let d = data(23, 23);
        let folds = kfold(&d, 5, Split::Random, 1).unwrap();
        let mut seen = [0; 23];
        for (train, test) in &folds {
            assert_partition(23, train, test);
            for &i in test {
                seen[i] += 1;
            }
            // 23 rows over 5 folds: 4 or 5 each.
            assert!((4..=5).contains(&test.len()), "{}", test.len());
        }
        assert!(seen.iter().all(|&c| c == 1));

        // By group: each group in one test fold, 10 groups over 4 folds: 2 or 3 groups each.
        let d = data(47, 10);
        let folds = kfold(&d, 4, Split::Group, 3).unwrap();
        let mut tested = [0; 47];
        for (train, test) in &folds {
            assert_partition(47, train, test);
            assert_groups_apart(&d, train, test);
            for &i in test {
                tested[i] += 1;
            }
            let mut g: Vec<u64> = test.iter().map(|&i| d.groups[i]).collect();
            g.sort_unstable();
            g.dedup();
            assert!((2..=3).contains(&g.len()), "{}", g.len());
        }
        assert!(tested.iter().all(|&c| c == 1));
    }

    #[test]
    fn rows_without_groups_are_groups_of_one() {
        let mut d = data(20, 2);
        d.groups.clear();
        // Two labelled groups could not make 5 folds; 20 unlabelled rows can.
        let folds = kfold(&d, 5, Split::Group, 0).unwrap();
        assert!(folds.iter().all(|(_, test)| test.len() == 4));
        let v = Validation {
            share: 0.5,
            min_valid: 1,
            min_train: 1,
        };
        let (train, valid) = validation(&[], 20, &v, &mut SplitMix64::new(0));
        assert_eq!((train.len(), valid.len()), (10, 10));
    }

    #[test]
    fn too_few_units_for_the_folds_or_the_share_is_named() {
        let err = kfold(&data(3, 3), 5, Split::Random, 0)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("5-fold cross-validation needs at least 5 rows, the data has 3"),
            "{err}"
        );
        let err = kfold(&data(30, 2), 5, Split::Group, 0)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("configuration groups, the data has 2"),
            "{err}"
        );
        assert!(kfold(&data(30, 30), 1, Split::Random, 0).is_err());
        let err = holdout(&data(10, 10), 1.0, Split::Random, 0)
            .unwrap_err()
            .to_string();
        assert!(err.contains("test share must be in (0, 1), got 1"), "{err}");
        // One group cannot be split.
        let err = holdout(&data(10, 1), 0.5, Split::Group, 0)
            .unwrap_err()
            .to_string();
        assert!(err.contains("10 rows cannot be split 50/50"), "{err}");
    }

    #[test]
    fn validation_holds_out_whole_groups_or_nothing() {
        let d = data(200, 40);
        let v = Validation {
            share: 0.1,
            min_valid: 20,
            min_train: 30,
        };
        for seed in 0..10 {
            let mut rng = SplitMix64::new(seed);
            let (train, valid) = validation(&d.groups, d.len(), &v, &mut rng);
            assert_partition(200, &train, &valid);
            assert_groups_apart(&d, &train, &valid);
            // round(0.1 * 40) = 4 groups of 5 rows.
            assert_eq!(valid.len(), 20);
        }
        // Off, too few rows for the share, or one group: nothing held out, nothing drawn.
        let untouched = |groups: &[u64], rows: usize, v: &Validation| {
            let mut rng = SplitMix64::new(1);
            let (train, valid) = validation(groups, rows, v, &mut rng);
            assert_eq!((train.len(), valid.len()), (rows, 0));
            assert_eq!(rng.next_u64(), SplitMix64::new(1).next_u64());
        };
        untouched(&d.groups, 200, &Validation { share: 0.0, ..v });
        untouched(&d.groups[..150], 150, &v);
        untouched(&[7; 300], 300, &v);
        // Held-out groups too small after the draw: nothing held out.
        let small = data(250, 125);
        let (train, valid) = validation(
            &small.groups,
            250,
            &Validation {
                share: 0.08,
                min_valid: 20,
                min_train: 1,
            },
            &mut SplitMix64::new(0),
        );
        // round(0.08 * 125) = 10 groups of 2 rows = 20: enough.
        assert_eq!(valid.len(), 20);
        assert_eq!(train.len(), 230);
        let (train, valid) = validation(
            &small.groups,
            250,
            &Validation {
                share: 0.08,
                min_valid: 20,
                min_train: 240,
            },
            &mut SplitMix64::new(0),
        );
        assert_eq!((train.len(), valid.len()), (250, 0));
    }

    #[test]
    fn leave_one_out_leaves_exactly_that_label() {
        let devices = ["a100", "v100", "a100", "t4", "v100"];
        let folds = leave_one_out(&devices);
        assert_eq!(
            folds,
            vec![
                (vec![1, 3, 4], vec![0, 2]),
                (vec![0, 2, 3], vec![1, 4]),
                (vec![0, 1, 2, 4], vec![3]),
            ]
        );
        for (train, test) in &folds {
            assert_partition(devices.len(), train, test);
            let held = devices[test[0]];
            assert!(test.iter().all(|&i| devices[i] == held));
            assert!(train.iter().all(|&i| devices[i] != held));
        }
        assert!(leave_one_out::<&str>(&[]).is_empty());
        assert_eq!(leave_one_out(&["x"]), vec![(vec![], vec![0])]);
    }
}
