//! Gradient-boosted regression trees on histogram-binned features.
//!
//! The ensemble fits `ln(ms)` with squared error: a constant (the mean log latency) plus trees
//! grown one after another on the residuals, each scaled by the learning rate, so predictions are
//! `exp(sum)` and always positive. Training follows LightGBM and scikit-learn's
//! `HistGradientBoostingRegressor`:
//!
//! - Every feature is cut into at most 255 quantile bins on the training rows (one bin per
//!   distinct value when there are few). Bins depend only on the order of values, so raw counts
//!   spanning many decades (FLOPs, bytes) bin as well as their logarithms; constant columns get
//!   one bin and are never split.
//! - Trees grow best-first (the leaf whose split gains most goes next) up to `max_leaves` leaves
//!   and `max_depth` levels; a split needs `min_samples_leaf` rows on each side. Split gains and
//!   leaf values carry an L2 penalty (`l2`, in rows), which shrinks leaves with few rows.
//! - Each tree sees a random subsample of rows (and optionally of features); one seed drives all
//!   sampling, so a fit is reproducible.
//! - A share of the configuration groups (so one layer's rows never sit on both sides) is held
//!   out to pick the number of trees: boosting stops once the held-out log error has not improved
//!   for `early_stopping_rounds` trees, and the trees after the best round are dropped. The
//!   held-out rows only choose the count: the kept trees are not refitted on them.
//!
//! The fitted model is one flat array of 16-byte nodes (feature, raw `f64` threshold, left child,
//! right child next to it; leaves hold their value) plus one root index per tree. A row goes left
//! when `x <= threshold`; thresholds lie between two neighbouring training values (their
//! geometric mean when both are positive, since most features are counts), and a NaN goes right.
//! One row walks every tree without allocating, in a few microseconds for a few hundred trees.
//! Batches test every split instead, against the leaf masks of QuickScorer (Lucchese et al.,
//! SIGIR 2015) with rows in SIMD lanes, which needs no walk at all: each test is independent
//! of the others, and the leaf a row reaches falls out of the masks it failed.
//!
//! Why not a crate: the mature implementations (LightGBM, XGBoost) are C++ behind bindings that
//! need CMake and minutes of native build, and the pure-Rust ones bring their own matrix types,
//! thread pools and model formats, with more surface than we use. perfcast needs one narrow case
//! (squared error on a log target, one output, tens of features, at most tens of thousands of
//! rows), a `serde` form inside [`SavedModel`], and single-row prediction with no allocation:
//! a few hundred lines that compile in seconds.

use perfcast_core::rng::SplitMix64;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::features::TrainSet;
use crate::regressor::{self, Fit, Regressor};
use crate::ridge::{FittedRidge, RidgeParams};
use crate::split;
use perfcast_predict::residual::StackWith;
use perfcast_predict::trees::Start;
pub use perfcast_predict::trees::{FittedTrees, LEAF, Node, tree_value};

const MODEL: &str = "trees";

/// Fewest rows a fit accepts.
const MIN_ROWS: usize = 2;

/// Early stopping is skipped when fewer rows than this would be held out: the round count
/// chosen on a handful of rows is noise.
const MIN_VALIDATION_ROWS: usize = 20;

/// Smallest gain (squared log error times rows) worth a split; below it a split only fits
/// rounding noise.
const MIN_GAIN: f64 = 1e-9;

/// Hyper-parameters of the boosted ensemble.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TreeParams {
    /// Most trees (boosting rounds); early stopping may keep fewer. Default 300.
    pub n_trees: usize,
    /// Shrinkage of each tree's leaf values, in (0, 1]. Default 0.1.
    pub learning_rate: f64,
    /// Most levels below the root, at least 1. Default 8.
    pub max_depth: usize,
    /// Most leaves per tree, grown best-first, 2 to 4096. Default 31.
    pub max_leaves: usize,
    /// Fewest training rows in a leaf, at least 1. Default 5.
    pub min_samples_leaf: usize,
    /// L2 penalty on leaf values, in rows (a leaf of n rows is shrunk by n / (n + l2)). Default 1.
    pub l2: f64,
    /// Share of the training rows each tree sees, in (0, 1]. Default 0.8.
    pub subsample: f64,
    /// Share of the features each tree may split on, in (0, 1]. Default 1.
    pub colsample: f64,
    /// Most quantile bins per feature, 2 to 256. Default 255.
    pub max_bins: usize,
    /// Share of configuration groups held out for early stopping, in [0, 0.5]; 0 turns it off. Default 0.1.
    pub validation_fraction: f64,
    /// Trees without a better held-out error before boosting stops, at least 1. Default 30.
    pub early_stopping_rounds: usize,
    /// Seed of the row, feature and hold-out sampling. Default 0.
    pub seed: u64,
    /// Boost from a ridge regression on log features instead of a constant, so the trees fit
    /// what a smooth power law misses (and extrapolate along it). Default true.
    pub baseline: bool,
}

impl Default for TreeParams {
    fn default() -> TreeParams {
        TreeParams {
            n_trees: 300,
            learning_rate: 0.1,
            max_depth: 8,
            max_leaves: 31,
            min_samples_leaf: 5,
            l2: 1.0,
            subsample: 0.8,
            colsample: 1.0,
            max_bins: 255,
            validation_fraction: 0.1,
            early_stopping_rounds: 30,
            seed: 0,
            baseline: true,
        }
    }
}

fn invalid(message: String) -> Error {
    Error::InvalidParams {
        model: MODEL,
        message,
    }
}

fn in_unit(name: &str, v: f64) -> Result<()> {
    if v > 0.0 && v <= 1.0 {
        Ok(())
    } else {
        Err(invalid(format!("{name} must be in (0, 1], got {v}")))
    }
}

fn at_least(name: &str, v: usize, min: usize) -> Result<()> {
    if v >= min {
        Ok(())
    } else {
        Err(invalid(format!("{name} must be at least {min}, got {v}")))
    }
}

impl crate::params::FamilyParams for TreeParams {
    fn name(&self) -> &'static str {
        MODEL
    }
}

impl Fit for TreeParams {
    type Fitted = FittedTrees;

    fn validate(&self) -> Result<()> {
        at_least("n_trees", self.n_trees, 1)?;
        in_unit("learning_rate", self.learning_rate)?;
        at_least("max_depth", self.max_depth, 1)?;
        if !(2..=4096).contains(&self.max_leaves) {
            return Err(invalid(format!(
                "max_leaves must be in 2..=4096, got {}",
                self.max_leaves
            )));
        }
        at_least("min_samples_leaf", self.min_samples_leaf, 1)?;
        if !(self.l2 >= 0.0 && self.l2.is_finite()) {
            return Err(invalid(format!(
                "l2 must be finite and non-negative, got {}",
                self.l2
            )));
        }
        in_unit("subsample", self.subsample)?;
        in_unit("colsample", self.colsample)?;
        if !(2..=256).contains(&self.max_bins) {
            return Err(invalid(format!(
                "max_bins must be in 2..=256, got {}",
                self.max_bins
            )));
        }
        if !(0.0..=0.5).contains(&self.validation_fraction) {
            return Err(invalid(format!(
                "validation_fraction must be in [0, 0.5], got {}",
                self.validation_fraction
            )));
        }
        at_least("early_stopping_rounds", self.early_stopping_rounds, 1)?;
        Ok(())
    }

    fn fit(&self, data: &TrainSet) -> Result<FittedTrees> {
        self.validate()?;
        regressor::check_train_set(data, MIN_ROWS)?;
        if data.len() > u32::MAX as usize {
            return Err(Error::InvalidData(format!(
                "{} rows, the tree ensemble handles at most {}",
                data.len(),
                u32::MAX
            )));
        }
        let baseline = if self.baseline {
            Some(
                RidgeParams {
                    lambda: 1e-2,
                    degree: 1,
                }
                .fit(data)?,
            )
        } else {
            None
        };
        Ok(boost(self, data, baseline))
    }
}

impl TreeParams {
    /// Fits the ensemble on what `baseline` (fitted on `data`'s schema) misses, whatever
    /// [`TreeParams::baseline`] says: the stacked family of [`crate::stack`] brings its own.
    pub(crate) fn fit_on_baseline(
        &self,
        data: &TrainSet,
        baseline: FittedRidge,
    ) -> Result<FittedTrees> {
        self.validate()?;
        regressor::check_train_set(data, MIN_ROWS)?;
        regressor::check_width(baseline.schema(), data.x.cols())?;
        Ok(boost(self, data, Some(baseline)))
    }
}

// ---------------------------------------------------------------------------------------------
// Training
// ---------------------------------------------------------------------------------------------

/// Split thresholds of one feature: value `v` falls in bin `b` when `t[b - 1] < v <= t[b]`.
///
/// `sorted` holds the training values in ascending order. With at most `max_bins` distinct
/// values every value gets its own bin; otherwise bins are filled greedily to equal row counts,
/// so a value repeated many times takes a bin to itself and the rest share the remaining bins.
fn bin_thresholds(sorted: &[f64], max_bins: usize) -> Vec<f64> {
    let mut distinct: Vec<(f64, usize)> = Vec::new();
    for &v in sorted {
        match distinct.last_mut() {
            Some((last, count)) if *last == v => *count += 1,
            _ => distinct.push((v, 1)),
        }
    }
    let mut thresholds = Vec::new();
    if distinct.len() <= max_bins {
        for w in distinct.windows(2) {
            thresholds.push(between(w[0].0, w[1].0));
        }
        return thresholds;
    }
    let mut rows_left = sorted.len() as f64;
    let mut bins_left = max_bins as f64;
    let mut in_bin = 0usize;
    for (k, &(v, count)) in distinct.iter().enumerate() {
        in_bin += count;
        let Some(&(next, _)) = distinct.get(k + 1) else {
            break;
        };
        if bins_left > 1.0 && in_bin as f64 >= rows_left / bins_left {
            thresholds.push(between(v, next));
            rows_left -= in_bin as f64;
            bins_left -= 1.0;
            in_bin = 0;
        }
    }
    thresholds
}

/// A threshold `t` with `a <= t < b` for `a < b`: the geometric mean of positive values (most
/// features are counts spread over decades), else the midpoint.
fn between(a: f64, b: f64) -> f64 {
    let t = if a > 0.0 {
        let p = a * b;
        if p.is_finite() && p > 0.0 {
            p.sqrt()
        } else {
            a.sqrt() * b.sqrt()
        }
    } else {
        a + (b - a) / 2.0
    };
    if t >= a && t < b { t } else { a }
}

/// Gradient sum and row count of one histogram bin (the Hessian of squared error is 1 per row).
#[derive(Clone, Copy, Default)]
struct Bin {
    sum: f64,
    count: u32,
}

/// The best split of a leaf: rows with bin `<= bin` of `feature` go left.
#[derive(Clone, Copy)]
struct Split {
    feature: usize,
    bin: u8,
    gain: f64,
    left_sum: f64,
    left_count: usize,
}

/// A leaf of the tree being grown: its rows are `rows[start..end]` of the round's sample.
struct Leaf {
    start: usize,
    end: usize,
    depth: usize,
    node: usize,
    sum: f64,
    hist: Option<Vec<Bin>>,
    best: Option<Split>,
}

impl Leaf {
    fn count(&self) -> usize {
        self.end - self.start
    }
}

/// The training rows in bin form and the scratch space reused by every tree.
struct Grower<'a> {
    params: &'a TreeParams,
    /// Bin of every (training row, feature), row-major.
    bins: Vec<u8>,
    n_features: usize,
    /// Split thresholds of each feature.
    thresholds: Vec<Vec<f64>>,
    /// Where each feature's bins start in a histogram; the last entry is its length.
    offsets: Vec<usize>,
    /// Histogram buffers not in use.
    pool: Vec<Vec<Bin>>,
    scratch: Vec<u32>,
}

impl<'a> Grower<'a> {
    fn new(params: &'a TreeParams, data: &TrainSet, train: &[usize]) -> Grower<'a> {
        let n_features = data.x.cols();
        let mut thresholds = Vec::with_capacity(n_features);
        let mut column = Vec::with_capacity(train.len());
        for j in 0..n_features {
            column.clear();
            column.extend(train.iter().map(|&i| data.x.row(i)[j]));
            column.sort_by(f64::total_cmp);
            thresholds.push(bin_thresholds(&column, params.max_bins));
        }
        let mut offsets = Vec::with_capacity(n_features + 1);
        let mut total = 0;
        for t in &thresholds {
            offsets.push(total);
            total += t.len() + 1;
        }
        offsets.push(total);
        let mut bins = Vec::with_capacity(train.len() * n_features);
        for &i in train {
            for (v, t) in data.x.row(i).iter().zip(&thresholds) {
                // At most 255 thresholds, so the bin fits a u8.
                bins.push(t.partition_point(|c| c < v) as u8);
            }
        }
        Grower {
            params,
            bins,
            n_features,
            thresholds,
            offsets,
            pool: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// Features with at least two bins (constant columns can never split).
    fn splittable_features(&self) -> Vec<usize> {
        (0..self.n_features)
            .filter(|&f| !self.thresholds[f].is_empty())
            .collect()
    }

    fn take_hist(&mut self) -> Vec<Bin> {
        let len = self.offsets[self.n_features];
        let mut h = self.pool.pop().unwrap_or_default();
        h.clear();
        h.resize(len, Bin::default());
        h
    }

    fn give_hist(&mut self, h: Option<Vec<Bin>>) {
        if let Some(h) = h {
            self.pool.push(h);
        }
    }

    fn build_hist(&self, hist: &mut [Bin], rows: &[u32], resid: &[f64], features: &[usize]) {
        let f_n = self.n_features;
        for &i in rows {
            let i = i as usize;
            let row = &self.bins[i * f_n..(i + 1) * f_n];
            let g = resid[i];
            for &f in features {
                let b = &mut hist[self.offsets[f] + usize::from(row[f])];
                b.sum += g;
                b.count += 1;
            }
        }
    }

    fn can_split(&self, depth: usize, count: usize) -> bool {
        depth < self.params.max_depth && count >= 2 * self.params.min_samples_leaf
    }

    fn best_split(
        &self,
        hist: &[Bin],
        sum: f64,
        count: usize,
        features: &[usize],
    ) -> Option<Split> {
        let l2 = self.params.l2;
        let min_leaf = self.params.min_samples_leaf;
        let parent = sum * sum / (count as f64 + l2);
        let mut best: Option<Split> = None;
        for &f in features {
            let bins = &hist[self.offsets[f]..self.offsets[f + 1]];
            let mut left_sum = 0.0;
            let mut left_count = 0usize;
            // The last bin cannot be a left side: nothing would go right.
            for (b, bin) in bins[..bins.len() - 1].iter().enumerate() {
                left_sum += bin.sum;
                left_count += bin.count as usize;
                if left_count < min_leaf {
                    continue;
                }
                let right_count = count - left_count;
                if right_count < min_leaf {
                    break;
                }
                let right_sum = sum - left_sum;
                let gain = left_sum * left_sum / (left_count as f64 + l2)
                    + right_sum * right_sum / (right_count as f64 + l2)
                    - parent;
                if gain > MIN_GAIN && best.is_none_or(|s| gain > s.gain) {
                    best = Some(Split {
                        feature: f,
                        // b < bins.len() - 1 <= 255.
                        bin: b as u8,
                        gain,
                        left_sum,
                        left_count,
                    });
                }
            }
        }
        best
    }

    /// Stable partition of `rows` by the split; returns how many go left.
    fn partition(&mut self, rows: &mut [u32], feature: usize, bin: u8) -> usize {
        self.scratch.clear();
        let mut n_left = 0;
        for k in 0..rows.len() {
            let i = rows[k];
            if self.bins[i as usize * self.n_features + feature] <= bin {
                rows[n_left] = i;
                n_left += 1;
            } else {
                self.scratch.push(i);
            }
        }
        rows[n_left..].copy_from_slice(&self.scratch);
        n_left
    }

    /// A new leaf whose histogram, if it may split, is `hist` (else the buffer goes back).
    fn leaf(
        &mut self,
        (start, end, depth, node, sum): (usize, usize, usize, usize, f64),
        hist: Option<Vec<Bin>>,
        features: &[usize],
    ) -> Leaf {
        let mut leaf = Leaf {
            start,
            end,
            depth,
            node,
            sum,
            hist: None,
            best: None,
        };
        if self.can_split(depth, leaf.count())
            && let Some(h) = &hist
        {
            leaf.best = self.best_split(h, sum, leaf.count(), features);
        }
        if leaf.best.is_some() {
            leaf.hist = hist;
        } else {
            self.give_hist(hist);
        }
        leaf
    }

    /// Grows one tree on `rows` (the round's sample) fitting `resid`, appending its nodes to
    /// `nodes` and each split's bin to `split_bins` (same index). Returns the number of leaves.
    fn grow(
        &mut self,
        rows: &mut [u32],
        resid: &[f64],
        features: &[usize],
        nodes: &mut Vec<Node>,
        split_bins: &mut Vec<u8>,
    ) -> usize {
        let root = nodes.len();
        nodes.push(Node::leaf(0.0));
        split_bins.push(0);
        let sum: f64 = rows.iter().map(|&i| resid[i as usize]).sum();
        let hist = if self.can_split(0, rows.len()) {
            let mut h = self.take_hist();
            self.build_hist(&mut h, rows, resid, features);
            Some(h)
        } else {
            None
        };
        let root_leaf = self.leaf((0, rows.len(), 0, root, sum), hist, features);
        let mut leaves = vec![root_leaf];

        while leaves.len() < self.params.max_leaves {
            let mut pick: Option<(usize, f64)> = None;
            for (k, l) in leaves.iter().enumerate() {
                if let Some(s) = l.best
                    && pick.is_none_or(|(_, g)| s.gain > g)
                {
                    pick = Some((k, s.gain));
                }
            }
            let Some((k, _)) = pick else { break };
            let parent = &mut leaves[k];
            let (Some(split), parent_hist) = (parent.best.take(), parent.hist.take()) else {
                break;
            };
            let (start, end, depth, node, sum) = (
                parent.start,
                parent.end,
                parent.depth,
                parent.node,
                parent.sum,
            );
            let n_left = self.partition(&mut rows[start..end], split.feature, split.bin);
            debug_assert_eq!(n_left, split.left_count);
            let mid = start + n_left;

            let left = nodes.len();
            nodes[node] = Node {
                feature: split.feature as u32,
                left: left as u32,
                value: self.thresholds[split.feature][usize::from(split.bin)],
            };
            split_bins[node] = split.bin;
            nodes.push(Node::leaf(0.0));
            nodes.push(Node::leaf(0.0));
            split_bins.extend([0, 0]);

            let l_spec = (start, mid, depth + 1, left, split.left_sum);
            let r_spec = (mid, end, depth + 1, left + 1, sum - split.left_sum);
            let l_can = self.can_split(depth + 1, mid - start);
            let r_can = self.can_split(depth + 1, end - mid);
            // Build the smaller child's histogram; the larger one is the parent's minus it.
            let (l_hist, r_hist) = if l_can || r_can {
                let left_smaller = mid - start <= end - mid;
                let small_rows = if left_smaller {
                    &rows[start..mid]
                } else {
                    &rows[mid..end]
                };
                let mut small = self.take_hist();
                self.build_hist(&mut small, small_rows, resid, features);
                let large = parent_hist.map(|mut h| {
                    for (p, s) in h.iter_mut().zip(&small) {
                        p.sum -= s.sum;
                        p.count -= s.count;
                    }
                    h
                });
                if left_smaller {
                    (Some(small), large)
                } else {
                    (large, Some(small))
                }
            } else {
                self.give_hist(parent_hist);
                (None, None)
            };
            leaves[k] = self.leaf(l_spec, l_hist, features);
            let right = self.leaf(r_spec, r_hist, features);
            leaves.push(right);
        }

        let (lr, l2) = (self.params.learning_rate, self.params.l2);
        let n_leaves = leaves.len();
        for leaf in leaves {
            nodes[leaf.node] = Node::leaf(lr * leaf.sum / (leaf.count() as f64 + l2));
            self.give_hist(leaf.hist);
        }
        n_leaves
    }

    /// The leaf value one tree gives training row `i`, walking bins instead of raw values.
    fn tree_value_binned(&self, nodes: &[Node], split_bins: &[u8], root: usize, i: usize) -> f64 {
        let row = &self.bins[i * self.n_features..(i + 1) * self.n_features];
        let mut j = root;
        loop {
            let n = nodes[j];
            if n.is_leaf() {
                return n.value;
            }
            j = n.left as usize + usize::from(row[n.feature as usize] > split_bins[j]);
        }
    }
}

/// The early-stopping split: [`split::validation`] over configuration groups, or nothing held
/// out when early stopping is off or the held-out part would be too small.
fn holdout(params: &TreeParams, data: &TrainSet, rng: &mut SplitMix64) -> (Vec<usize>, Vec<usize>) {
    let v = split::Validation {
        share: params.validation_fraction,
        min_valid: MIN_VALIDATION_ROWS,
        min_train: MIN_ROWS,
    };
    split::validation(&data.groups, data.len(), &v, rng)
}

fn boost(params: &TreeParams, data: &TrainSet, baseline: Option<FittedRidge>) -> FittedTrees {
    let mut rng = SplitMix64::new(params.seed);
    let (train, valid) = holdout(params, data, &mut rng);
    let mut grower = Grower::new(params, data, &train);

    let target: Vec<f64> = train.iter().map(|&i| data.y[i].ln()).collect();
    let base = target.iter().sum::<f64>() / target.len() as f64;
    // Starting scores: the baseline's log prediction per row, or the mean.
    let stack = StackWith::on(Start {
        baseline: baseline.as_ref(),
        mean: base,
    });
    let start = |i: usize| -> f64 { stack.log_start(data.x.row(i)).unwrap_or(base) };
    let mut pred: Vec<f64> = train.iter().map(|&i| start(i)).collect();
    let mut resid = vec![0.0; train.len()];
    let valid_target: Vec<f64> = valid.iter().map(|&i| data.y[i].ln()).collect();
    let mut valid_pred: Vec<f64> = valid.iter().map(|&i| start(i)).collect();
    let valid_loss = |p: &[f64]| -> f64 {
        p.iter()
            .zip(&valid_target)
            .map(|(p, t)| (p - t).powi(2))
            .sum::<f64>()
            / p.len().max(1) as f64
    };
    let mut best = (valid_loss(&valid_pred), 0usize);

    let usable = grower.splittable_features();
    let n_cols =
        ((params.colsample * usable.len() as f64).round() as usize).clamp(1, usable.len().max(1));
    let mut features = usable.clone();
    let mut rows: Vec<u32> = Vec::with_capacity(train.len());
    let mut nodes: Vec<Node> = Vec::new();
    let mut split_bins: Vec<u8> = Vec::new();
    let mut roots: Vec<u32> = Vec::new();

    for _ in 0..params.n_trees {
        if usable.is_empty() {
            break;
        }
        for ((r, p), t) in resid.iter_mut().zip(&pred).zip(&target) {
            *r = t - p;
        }
        rows.clear();
        if params.subsample < 1.0 {
            rows.extend((0..train.len() as u32).filter(|_| rng.unit() < params.subsample));
        } else {
            rows.extend(0..train.len() as u32);
        }
        if n_cols < usable.len() {
            features.clone_from(&usable);
            rng.shuffle(&mut features);
            features.truncate(n_cols);
            features.sort_unstable();
        }

        let root = nodes.len();
        let n_leaves = grower.grow(&mut rows, &resid, &features, &mut nodes, &mut split_bins);
        if n_leaves < 2 {
            // A lone leaf only nudges the mean. With every row and feature in play, the next
            // round would see the same residuals and stop here too.
            nodes.truncate(root);
            split_bins.truncate(root);
            if params.subsample >= 1.0 && n_cols == usable.len() {
                break;
            }
            continue;
        }
        roots.push(root as u32);
        for (i, p) in pred.iter_mut().enumerate() {
            *p += grower.tree_value_binned(&nodes, &split_bins, root, i);
        }

        if !valid.is_empty() {
            for (p, &i) in valid_pred.iter_mut().zip(&valid) {
                *p += tree_value(&nodes, root as u32, data.x.row(i));
            }
            let loss = valid_loss(&valid_pred);
            if loss < best.0 {
                best = (loss, roots.len());
            } else if roots.len() - best.1 >= params.early_stopping_rounds {
                break;
            }
        }
    }

    if !valid.is_empty() && best.1 < roots.len() {
        let end = roots.get(best.1).map_or(nodes.len(), |r| *r as usize);
        roots.truncate(best.1);
        nodes.truncate(end);
    }
    nodes.shrink_to_fit();
    FittedTrees::from_parts(data.schema.clone(), base, roots, nodes, baseline)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::FeatureSchema;
    use crate::matrix::Matrix;
    use crate::regressor::{Regressor, SavedModel};
    use perfcast_core::ModuleKind;

    fn set(names: &[&str], rows: &[Vec<f64>], y: &[f64]) -> TrainSet {
        let cols = names.len();
        TrainSet {
            schema: FeatureSchema {
                kind: ModuleKind::Linear,
                names: names.iter().map(|s| (*s).to_string()).collect(),
            },
            x: Matrix::from_vec(rows.len(), cols, rows.concat()),
            y: y.to_vec(),
            groups: (0..rows.len() as u64).collect(),
        }
    }

    /// Every row and feature, no shrinkage, penalty or hold-out: one tree fits what it can.
    fn exact() -> TreeParams {
        TreeParams {
            n_trees: 1,
            learning_rate: 1.0,
            min_samples_leaf: 1,
            l2: 0.0,
            subsample: 1.0,
            validation_fraction: 0.0,
            baseline: false,
            ..TreeParams::default()
        }
    }

    /// A latency-like table: `y = 2e-9 * flops^0.9 + 0.05` ms with 3% multiplicative noise,
    /// FLOPs over nine decades, one constant column and one irrelevant one.
    fn latency_like(n: usize, seed: u64) -> TrainSet {
        let mut rng = SplitMix64::new(seed);
        let mut rows = Vec::new();
        let mut y = Vec::new();
        for _ in 0..n {
            let batch = f64::from(1u32 << rng.below(7));
            let width = rng.uniform(16.0, 4096.0).round();
            let flops = batch * width * 10f64.powf(rng.uniform(3.0, 9.0));
            let bytes = 4.0 * (batch * width + flops.sqrt());
            let noise = 1.0 + 0.03 * (2.0 * rng.unit() - 1.0);
            rows.push(vec![batch, width, flops, bytes, 7.0, rng.unit()]);
            y.push((2e-9 * flops.powf(0.9) + 0.05) * noise);
        }
        set(
            &["batch", "width", "flops", "bytes", "threads", "noise"],
            &rows,
            &y,
        )
    }

    fn mape(pred: &[f64], y: &[f64]) -> f64 {
        pred.iter()
            .zip(y)
            .map(|(p, t)| ((p - t) / t).abs())
            .sum::<f64>()
            / y.len() as f64
    }

    #[test]
    fn a_step_is_learned_exactly_by_one_split() {
        let rows: Vec<Vec<f64>> = (1..=10).map(|v| vec![f64::from(v), 3.0]).collect();
        let y: Vec<f64> = (1..=10).map(|v| if v <= 4 { 2.0 } else { 50.0 }).collect();
        let data = set(&["x", "constant"], &rows, &y);
        let m = exact().fit(&data).unwrap();
        assert_eq!((m.n_trees(), m.n_nodes()), (1, 3));
        let split = m.nodes()[0];
        assert_eq!(split.feature, 0);
        // Between the neighbouring training values 4 and 5, at their geometric mean.
        assert!(
            (split.value - 20f64.sqrt()).abs() < 1e-12,
            "{}",
            split.value
        );
        for (row, t) in rows.iter().zip(&y) {
            let p = m.predict_row(row).unwrap();
            assert!((p - t).abs() < 1e-9 * t, "{p} vs {t}");
        }
        assert!((m.predict_row(&[4.4, 0.0]).unwrap() - 2.0).abs() < 1e-9);
        assert!((m.predict_row(&[4.5, 0.0]).unwrap() - 50.0).abs() < 1e-9);
        assert!((m.predict_row(&[f64::NAN, 0.0]).unwrap() - 50.0).abs() < 1e-9);
    }

    #[test]
    fn constant_targets_or_features_give_the_mean() {
        let rows: Vec<Vec<f64>> = (0..30).map(|_| vec![1.0, 2.0]).collect();
        let y: Vec<f64> = (0..30)
            .map(|i| if i % 2 == 0 { 1.0 } else { 4.0 })
            .collect();
        let m = TreeParams::default()
            .fit(&set(&["a", "b"], &rows, &y))
            .unwrap();
        assert_eq!(m.n_trees(), 0);
        assert!((m.predict_row(&[5.0, 5.0]).unwrap() - 2.0).abs() < 1e-12);
    }

    #[test]
    fn bins_follow_quantiles_and_repeated_values() {
        let few = [1.0, 1.0, 2.0, 8.0];
        assert_eq!(bin_thresholds(&few, 255), vec![2f64.sqrt(), 4.0]);
        assert_eq!(bin_thresholds(&[-1.0, 0.0, 3.0], 255), vec![-0.5, 1.5]);
        assert!(bin_thresholds(&[5.0; 10], 255).is_empty());
        // 1000 distinct values into 4 bins: quartiles.
        let many: Vec<f64> = (1..=1000).map(f64::from).collect();
        let t = bin_thresholds(&many, 4);
        assert_eq!(t.len(), 3);
        for (t, q) in t.iter().zip([250.0, 500.0, 750.0]) {
            assert!(*t > q && *t < q + 1.0, "{t} vs {q}");
        }
        // Half the rows on one value: it gets a bin to itself.
        let mut heavy = vec![0.0; 500];
        heavy.extend((1..=500).map(f64::from));
        let t = bin_thresholds(&heavy, 4);
        assert_eq!(t[0], 0.5);
        assert!(t.len() <= 3);
    }

    #[test]
    fn walking_bins_and_walking_raw_values_agree() {
        // Training updates predictions through bins, prediction compares raw values with the
        // thresholds: both must send every training row to the same leaf.
        let data = latency_like(2000, 11);
        let params = TreeParams {
            max_bins: 16,
            min_samples_leaf: 1,
            max_leaves: 64,
            max_depth: 12,
            ..TreeParams::default()
        };
        let all: Vec<usize> = (0..data.len()).collect();
        let mut grower = Grower::new(&params, &data, &all);
        let mut rng = SplitMix64::new(12);
        let resid: Vec<f64> = (0..data.len()).map(|_| rng.unit() - 0.5).collect();
        let mut rows: Vec<u32> = (0..data.len() as u32).collect();
        let (mut nodes, mut split_bins) = (Vec::new(), Vec::new());
        let features = grower.splittable_features();
        assert_eq!(features, vec![0, 1, 2, 3, 5]);
        let leaves = grower.grow(&mut rows, &resid, &features, &mut nodes, &mut split_bins);
        assert_eq!(leaves, 64);
        for i in 0..data.len() {
            let binned = grower.tree_value_binned(&nodes, &split_bins, 0, i);
            assert_eq!(binned, tree_value(&nodes, 0, data.x.row(i)), "row {i}");
        }
    }

    #[test]
    fn predictions_are_positive() {
        let data = latency_like(400, 1);
        let m = TreeParams::default().fit(&data).unwrap();
        let p = m.predict(&data.x).unwrap();
        assert!(p.iter().all(|v| v.is_finite() && *v > 0.0));
        // Far outside the training range the walk ends in an edge leaf, still positive.
        assert!(m.predict_row(&[1e9, 1e9, 1e30, 1e30, 0.0, -5.0]).unwrap() > 0.0);
        assert!(m.predict_row(&[0.0; 6]).unwrap() > 0.0);
    }

    #[test]
    fn fitting_is_deterministic_under_the_seed() {
        let data = latency_like(500, 2);
        let params = TreeParams {
            colsample: 0.7,
            ..TreeParams::default()
        };
        let json = |p: &TreeParams| serde_json::to_string(&p.fit(&data).unwrap()).unwrap();
        let a = json(&params);
        assert_eq!(a, json(&params));
        let other = TreeParams {
            seed: 1,
            ..params.clone()
        };
        assert_ne!(a, json(&other));
    }

    #[test]
    fn validation_names_the_bad_value() {
        let cases: [(TreeParams, &str); 9] = [
            (
                TreeParams {
                    learning_rate: 1.5,
                    ..TreeParams::default()
                },
                "learning_rate must be in (0, 1], got 1.5",
            ),
            (
                TreeParams {
                    n_trees: 0,
                    ..TreeParams::default()
                },
                "n_trees must be at least 1, got 0",
            ),
            (
                TreeParams {
                    max_depth: 0,
                    ..TreeParams::default()
                },
                "max_depth must be at least 1, got 0",
            ),
            (
                TreeParams {
                    max_leaves: 1,
                    ..TreeParams::default()
                },
                "max_leaves must be in 2..=4096, got 1",
            ),
            (
                TreeParams {
                    l2: -1.0,
                    ..TreeParams::default()
                },
                "l2 must be finite and non-negative, got -1",
            ),
            (
                TreeParams {
                    subsample: 0.0,
                    ..TreeParams::default()
                },
                "subsample must be in (0, 1], got 0",
            ),
            (
                TreeParams {
                    colsample: f64::NAN,
                    ..TreeParams::default()
                },
                "colsample must be in (0, 1], got NaN",
            ),
            (
                TreeParams {
                    max_bins: 300,
                    ..TreeParams::default()
                },
                "max_bins must be in 2..=256, got 300",
            ),
            (
                TreeParams {
                    validation_fraction: 0.9,
                    ..TreeParams::default()
                },
                "validation_fraction must be in [0, 0.5], got 0.9",
            ),
        ];
        for (params, message) in cases {
            let err = params.validate().unwrap_err();
            assert!(
                matches!(err, Error::InvalidParams { model: "trees", .. }),
                "{err}"
            );
            assert_eq!(
                err.to_string(),
                format!("invalid trees parameters: {message}")
            );
            // fit validates before touching the data.
            assert!(params.fit(&latency_like(10, 0)).is_err());
        }
        assert!(TreeParams::default().validate().is_ok());
    }

    #[test]
    fn bad_training_data_is_refused() {
        let mut data = latency_like(50, 3);
        data.y[7] = 0.0;
        let err = TreeParams::default().fit(&data).unwrap_err();
        assert!(err.to_string().contains("row 7"), "{err}");
    }

    #[test]
    fn save_json_load_predicts_identically() {
        let data = latency_like(600, 4);
        let m = TreeParams::default().fit(&data).unwrap();
        assert!(m.n_trees() > 10);
        let baseline = m.baseline().map_or(0, |b| b.size_bytes());
        assert!(baseline > 0, "the default boosts from a ridge baseline");
        assert_eq!(
            m.size_bytes(),
            16 * m.n_nodes() + 4 * m.n_trees() + 8 + baseline
        );
        let json = serde_json::to_string(&m.to_saved()).unwrap();
        let loaded = serde_json::from_str::<SavedModel>(&json)
            .unwrap()
            .into_regressor();
        assert_eq!(loaded.name(), "trees");
        assert_eq!(loaded.schema(), m.schema());
        assert_eq!(
            loaded.predict(&data.x).unwrap(),
            m.predict(&data.x).unwrap()
        );
    }

    #[test]
    fn a_row_of_the_wrong_width_is_an_error() {
        let m = TreeParams::default().fit(&latency_like(100, 6)).unwrap();
        let err = m.predict_row(&[1.0, 2.0]).unwrap_err();
        assert!(
            matches!(
                err,
                perfcast_predict::Error::FeatureWidth {
                    expected: 6,
                    got: 2
                }
            ),
            "{err}"
        );
        assert!(m.predict(&Matrix::from_vec(1, 3, vec![1.0; 3])).is_err());
    }

    #[test]
    fn beats_a_constant_on_a_latency_like_function() {
        let train = latency_like(3000, 7);
        let test = latency_like(1000, 8);
        let m = TreeParams::default().fit(&train).unwrap();
        let model = mape(&m.predict(&test.x).unwrap(), &test.y);
        // The best constant for relative error is near the median.
        let mut sorted = train.y.clone();
        sorted.sort_by(f64::total_cmp);
        let constant = mape(&vec![sorted[sorted.len() / 2]; test.len()], &test.y);
        eprintln!(
            "MAPE: trees {:.2}%, constant {:.0}%, {} trees",
            100.0 * model,
            100.0 * constant,
            m.n_trees()
        );
        assert!(model < 0.10, "trees MAPE {model}");
        assert!(
            model < constant / 20.0,
            "trees {model} vs constant {constant}"
        );
    }

    /// Timings for the report (not a check): `cargo test --release -p perfcast-models --lib
    /// trees::tests::timing -- --ignored --nocapture`.
    #[test]
    #[ignore = "prints timings"]
    fn timing() {
        use std::time::Instant;
        let (n, cols) = (10_000, 30);
        let base = latency_like(n, 9);
        let mut rng = SplitMix64::new(10);
        let mut x = Vec::with_capacity(n * cols);
        for r in base.x.iter_rows() {
            x.extend_from_slice(r);
            for j in r.len()..cols {
                x.push(r[j % r.len()] * rng.uniform(0.5, 2.0));
            }
        }
        let names: Vec<String> = (0..cols).map(|j| format!("f{j}")).collect();
        let data = TrainSet {
            schema: FeatureSchema {
                kind: ModuleKind::Linear,
                names,
            },
            x: Matrix::from_vec(n, cols, x),
            y: base.y.clone(),
            groups: base.groups.clone(),
        };
        for (label, params) in [
            ("defaults", TreeParams::default()),
            (
                "300 trees, no early stopping",
                TreeParams {
                    validation_fraction: 0.0,
                    ..TreeParams::default()
                },
            ),
        ] {
            let t = Instant::now();
            let m = params.fit(&data).unwrap();
            let fit_s = t.elapsed().as_secs_f64();
            // Warm up, then the median of 21 batches of 2000 single-row calls over varied rows.
            let mut sink = 0.0;
            for i in 0..2000 {
                sink += m.predict_row(data.x.row(i % n)).unwrap();
            }
            let mut per_row = Vec::new();
            for b in 0..21 {
                let t = Instant::now();
                for i in 0..2000 {
                    sink += m.predict_row(data.x.row((b * 2000 + i * 7) % n)).unwrap();
                }
                per_row.push(t.elapsed().as_secs_f64() / 2000.0);
            }
            per_row.sort_by(f64::total_cmp);
            println!(
                "{label}: fit {n} x {cols} in {fit_s:.2} s, {} trees, {} nodes, {} KiB; one row {:.2} us (median of 21 x 2000){}",
                m.n_trees(),
                m.n_nodes(),
                m.size_bytes() / 1024,
                per_row[10] * 1e6,
                if sink > 0.0 { "" } else { "!" }
            );
        }
    }
}
