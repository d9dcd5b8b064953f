//! Gradient-boosted regression trees: the fitted ensemble and its prediction paths.
//!
//! The ensemble predicts `ln(ms)`: a constant (the mean log latency of the training rows, or a
//! ridge baseline's prediction) plus one leaf value per tree, so predictions are `exp(sum)` and
//! always positive. perfcast-models grows the trees (`TreeParams`: histogram-binned,
//! best-first, early-stopped on held-out configuration groups).
//!
//! The fitted model is one flat array of 16-byte nodes (feature, raw `f64` threshold, left child,
//! right child next to it; leaves hold their value) plus one root index per tree. A row goes left
//! when `x <= threshold`; a NaN goes right. One row walks every tree without allocating, in a
//! few microseconds for a few hundred trees. Batches test every split instead, against the leaf
//! masks of QuickScorer (Lucchese et al., SIGIR 2015) with rows in SIMD lanes, which needs no
//! walk at all: each test is independent of the others, and the leaf a row reaches falls out of
//! the masks it failed.

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::features::FeatureSchema;
use crate::regressor::{self, Regressor, SavedModel};
use crate::residual::{Estimate, LogResidual, StackWith};
use crate::ridge::FittedRidge;

const MODEL: &str = "trees";

/// The `feature` of a leaf [`Node`].
pub const LEAF: u32 = u32::MAX;

/// An `f64` saved as its shortest exact decimal string. serde_json's default number parser may
/// miss the last bit, and a threshold one bit off can send a row down the other branch; Rust's
/// own formatting and parsing round-trip exactly.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Exact(f64);

impl Serialize for Exact {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("{:?}", self.0))
    }
}

impl<'de> Deserialize<'de> for Exact {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Exact, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Exact;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a number, or a number in a string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<Exact, E> {
                v.parse()
                    .map(Exact)
                    .map_err(|_| E::invalid_value(serde::de::Unexpected::Str(v), &self))
            }
            fn visit_f64<E>(self, v: f64) -> std::result::Result<Exact, E> {
                Ok(Exact(v))
            }
            fn visit_i64<E>(self, v: i64) -> std::result::Result<Exact, E> {
                Ok(Exact(v as f64))
            }
            fn visit_u64<E>(self, v: u64) -> std::result::Result<Exact, E> {
                Ok(Exact(v as f64))
            }
        }
        d.deserialize_any(Visitor)
    }
}

fn serialize_exact<S: serde::Serializer>(v: &f64, s: S) -> std::result::Result<S::Ok, S::Error> {
    Exact(*v).serialize(s)
}

/// One node of the flat array: a split (`feature`, threshold in `value`, children at `left` and
/// `left + 1`) or a leaf (`feature == LEAF`, its contribution in `value`). Saved as
/// `[feature, left, "value"]` to keep files small.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(from = "(u32, u32, Exact)", into = "(u32, u32, Exact)")]
pub struct Node {
    /// Feature a split compares, or [`LEAF`].
    pub feature: u32,
    /// Left child of a split (the right one is next to it); 0 for a leaf.
    pub left: u32,
    /// Threshold of a split, contribution (log ms) of a leaf.
    pub value: f64,
}

impl Node {
    /// A leaf adding `value` to the log-space sum.
    pub fn leaf(value: f64) -> Node {
        Node {
            feature: LEAF,
            left: 0,
            value,
        }
    }

    /// Whether the node is a leaf.
    pub fn is_leaf(&self) -> bool {
        self.feature == LEAF
    }
}

impl From<(u32, u32, Exact)> for Node {
    fn from((feature, left, value): (u32, u32, Exact)) -> Node {
        Node {
            feature,
            left,
            value: value.0,
        }
    }
}

impl From<Node> for (u32, u32, Exact) {
    fn from(n: Node) -> (u32, u32, Exact) {
        (n.feature, n.left, Exact(n.value))
    }
}

/// A fitted ensemble: `exp(base + sum of one leaf per tree)` milliseconds.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(try_from = "UncheckedTrees")]
pub struct FittedTrees {
    schema: FeatureSchema,
    /// Mean `ln(ms)` of the training rows: the prediction before any tree.
    #[serde(serialize_with = "serialize_exact")]
    base: f64,
    /// Index of each tree's root in `nodes`.
    roots: Vec<u32>,
    /// Every tree's nodes, tree after tree; children always follow their parent.
    nodes: Vec<Node>,
    /// The smooth model the trees correct, when fitted with a baseline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    baseline: Option<FittedRidge>,
    /// The trees in the form batches evaluate (derived from `nodes`, not saved).
    #[serde(skip)]
    batched: Batched,
}

/// How [`Regressor::predict_rows`] evaluates the trees.
#[derive(Clone, Debug)]
enum Batched {
    /// Leaf bit masks, rows in SIMD lanes: every tree has at most [`MASK_LEAVES`] leaves.
    Masks(Masks),
    /// Lockstep walks, for ensembles with a bigger tree.
    Walk(Walk),
}

impl Default for Batched {
    fn default() -> Batched {
        Batched::Walk(Walk::default())
    }
}

impl Batched {
    fn of(nodes: &[Node], roots: &[u32]) -> Batched {
        match Masks::of(nodes, roots) {
            Some(m) => Batched::Masks(m),
            None => Batched::Walk(Walk::of(nodes, roots)),
        }
    }
}

/// Most leaves a tree may have for [`Masks`]: one bit each in a `u64`.
const MASK_LEAVES: usize = 64;

/// Every tree as the leaf masks of its splits (QuickScorer: Lucchese et al., SIGIR 2015).
///
/// Number a tree's leaves left to right. A split a row fails (`!(x <= t)`: the row goes
/// right) rules out every leaf of its left subtree, and the leaf the row reaches is the
/// leftmost one no failed split rules out: a leaf left of it shares an ancestor where the row
/// went right, and none of its own ancestors sent the row the other way. So a tree is
/// evaluated by testing all its splits in any order, each test independent of the others (no
/// chain of dependent loads as in a walk), and one test serves a SIMD vector of rows.
#[derive(Clone, Debug, Default)]
struct Masks {
    /// Per tree: where its splits end in `splits` and its leaves end in `leaves`.
    ends: Vec<(u32, u32)>,
    splits: Vec<MaskSplit>,
    /// Leaf values, tree after tree, each tree's left to right.
    leaves: Vec<f64>,
    /// Row columns the splits read, in first-use order; [`MaskSplit::column`] indexes this.
    columns: Vec<usize>,
}

/// One split of [`Masks`].
#[derive(Clone, Copy, Debug)]
struct MaskSplit {
    threshold: f64,
    /// The leaves a row that goes right may still reach: all but the left subtree's.
    keep: u64,
    /// Index into [`Masks::columns`].
    column: u32,
}

/// Bits `lo..hi` of a `u64` (`hi <= 64`).
fn bit_range(lo: usize, hi: usize) -> u64 {
    let width = hi - lo;
    if width >= 64 {
        u64::MAX
    } else {
        ((1u64 << width) - 1) << lo
    }
}

impl Masks {
    /// `None` when a tree has more than [`MASK_LEAVES`] leaves. `nodes` are checked (children
    /// after their parent, in bounds).
    fn of(nodes: &[Node], roots: &[u32]) -> Option<Masks> {
        let mut m = Masks::default();
        // Per node: the index (within its tree) of the first leaf at or below it.
        let mut first_leaf = vec![0u32; nodes.len()];
        let mut column_of: Vec<Option<u32>> = Vec::new();
        let mut stack = Vec::new();
        let mut internal = Vec::new();
        for &root in roots {
            let leaf_start = m.leaves.len();
            internal.clear();
            // Depth first, left before right: leaves come out left to right.
            stack.push(root as usize);
            while let Some(i) = stack.pop() {
                first_leaf[i] = (m.leaves.len() - leaf_start) as u32;
                let n = nodes[i];
                if n.is_leaf() {
                    m.leaves.push(n.value);
                } else {
                    internal.push(i);
                    stack.push(n.left as usize + 1);
                    stack.push(n.left as usize);
                }
            }
            if m.leaves.len() - leaf_start > MASK_LEAVES {
                return None;
            }
            for &i in &internal {
                let n = nodes[i];
                let (lo, hi) = (
                    first_leaf[n.left as usize] as usize,
                    first_leaf[n.left as usize + 1] as usize,
                );
                let f = n.feature as usize;
                if column_of.len() <= f {
                    column_of.resize(f + 1, None);
                }
                let column = *column_of[f].get_or_insert_with(|| {
                    m.columns.push(f);
                    (m.columns.len() - 1) as u32
                });
                m.splits.push(MaskSplit {
                    threshold: n.value,
                    keep: !bit_range(lo, hi),
                    column,
                });
            }
            m.ends.push((m.splits.len() as u32, m.leaves.len() as u32));
        }
        Some(m)
    }
}

/// Most vectors of rows [`MaskBatch`] evaluates together: each split's threshold and mask are
/// broadcast once for all of them, and their tests are independent. A block of fewer rows
/// takes as few vectors as hold them (every vector tests every split, so a network's five
/// pooling layers would pay for sixteen rows).
const MASK_VECTORS: usize = 4;

/// Adds every tree's leaf to `out[r]` for rows `rows[r * width..]`, in tree order, run by
/// [`pulp::Arch::dispatch`] in code compiled for the CPU's vectors (everything below
/// `with_simd` is inlined into the dispatch target).
struct MaskBatch<'a> {
    masks: &'a Masks,
    rows: &'a [f64],
    width: usize,
    out: &'a mut [f64],
}

impl pulp::WithSimd for MaskBatch<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        let MaskBatch {
            masks,
            rows,
            width,
            out,
        } = self;
        let lanes = S::F64_LANES;
        let full = MASK_VECTORS * lanes;
        let whole = out.len() / full * full;
        let (rows, rest_rows) = rows.split_at(whole * width);
        let (out, rest) = out.split_at_mut(whole);
        if !out.is_empty() {
            mask_blocks::<S, MASK_VECTORS>(simd, masks, rows, width, out);
        }
        match rest.len().div_ceil(lanes) {
            0 => {}
            1 => mask_blocks::<S, 1>(simd, masks, rest_rows, width, rest),
            2 => mask_blocks::<S, 2>(simd, masks, rest_rows, width, rest),
            _ => mask_blocks::<S, MASK_VECTORS>(simd, masks, rest_rows, width, rest),
        }
    }
}

/// [`MaskBatch`] over blocks of `V` vectors of rows.
#[inline(always)]
fn mask_blocks<S: pulp::Simd, const V: usize>(
    simd: S,
    masks: &Masks,
    rows: &[f64],
    width: usize,
    out: &mut [f64],
) {
    let block = V * S::F64_LANES;
    // The block's rows transposed, one vector of rows per column the splits read.
    let mut x = vec![[simd.splat_f64s(0.0); V]; masks.columns.len()];
    let all = simd.splat_u64s(u64::MAX);
    for (rows, out) in rows.chunks(width * block).zip(out.chunks_mut(block)) {
        let n = out.len();
        for (xc, &col) in x.iter_mut().zip(&masks.columns) {
            let lanes: &mut [f64] = pulp::bytemuck::cast_slice_mut(xc.as_mut_slice());
            for (r, l) in lanes.iter_mut().enumerate() {
                // Spare lanes repeat the first row; their results are dropped.
                let src = if r < n { r } else { 0 };
                *l = rows[src * width + col];
            }
        }
        let (mut split, mut leaf) = (0, 0);
        for &(split_end, leaf_end) in &masks.ends {
            let (split_end, leaf_end) = (split_end as usize, leaf_end as usize);
            let mut alive = [all; V];
            for s in &masks.splits[split..split_end] {
                let (t, keep) = (simd.splat_f64s(s.threshold), simd.splat_u64s(s.keep));
                for (a, xv) in alive.iter_mut().zip(&x[s.column as usize]) {
                    // `x <= t` is false for NaN, which goes right as in `tree_value`.
                    let left = simd.less_than_or_equal_f64s(*xv, t);
                    *a = simd.select_u64s(left, *a, simd.and_u64s(*a, keep));
                }
            }
            let leaves = &masks.leaves[leaf..leaf_end];
            let alive: &[u64] = pulp::bytemuck::cast_slice(alive.as_slice());
            for (o, a) in out.iter_mut().zip(alive) {
                *o += leaves[a.trailing_zeros() as usize];
            }
            (split, leaf) = (split_end, leaf_end);
        }
    }
}

/// A node as batches walk it: a leaf sends every row back to itself, so all rows of a batch
/// step a tree its full depth in lockstep with no test for having arrived.
#[derive(Clone, Copy, Debug)]
struct Step {
    /// Feature compared (0 for a leaf).
    feature: u32,
    /// Left child (the node itself for a leaf).
    left: u32,
    /// 1 when the right child is `left + 1`, 0 for a leaf.
    step: u32,
    /// Threshold (infinite for a leaf: only NaN compares past it, and `step` is 0).
    value: f64,
}

/// Every tree in [`Step`] form, and each tree's depth.
#[derive(Clone, Debug, Default)]
struct Walk {
    steps: Vec<Step>,
    depths: Vec<u32>,
}

impl Walk {
    fn of(nodes: &[Node], roots: &[u32]) -> Walk {
        let steps = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                if n.is_leaf() {
                    Step {
                        feature: 0,
                        left: i as u32,
                        step: 0,
                        value: f64::INFINITY,
                    }
                } else {
                    Step {
                        feature: n.feature,
                        left: n.left,
                        step: 1,
                        value: n.value,
                    }
                }
            })
            .collect();
        let depths = roots
            .iter()
            .map(|&root| {
                let (mut deepest, mut stack) = (0, vec![(root as usize, 0u32)]);
                while let Some((i, d)) = stack.pop() {
                    let n = nodes[i];
                    if n.is_leaf() {
                        deepest = deepest.max(d);
                    } else {
                        stack.push((n.left as usize, d + 1));
                        stack.push((n.left as usize + 1, d + 1));
                    }
                }
                deepest
            })
            .collect();
        Walk { steps, depths }
    }
}

/// The saved form before its structure is checked.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UncheckedTrees {
    schema: FeatureSchema,
    base: Exact,
    roots: Vec<u32>,
    nodes: Vec<Node>,
    #[serde(default)]
    baseline: Option<FittedRidge>,
}

impl TryFrom<UncheckedTrees> for FittedTrees {
    type Error = String;

    /// Refuses a file whose walk could index out of bounds or loop: a loaded model then
    /// predicts without panicking.
    fn try_from(t: UncheckedTrees) -> std::result::Result<FittedTrees, String> {
        let n = t.nodes.len();
        let base = t.base.0;
        if !base.is_finite() {
            return Err(format!("base is {base}"));
        }
        if let Some(r) = t.roots.iter().find(|r| **r as usize >= n) {
            return Err(format!("root {r} is past the {n} nodes"));
        }
        // Every node hangs off one parent (or is one root): the trees are a forest, so a walk
        // visits each node once (a node shared by two parents made the leaf numbering of
        // `Masks` underflow).
        let mut owned = vec![false; n];
        for &r in &t.roots {
            if std::mem::replace(&mut owned[r as usize], true) {
                return Err(format!("node {r} is a root twice"));
            }
        }
        for (i, node) in t.nodes.iter().enumerate() {
            if !node.value.is_finite() {
                return Err(format!("node {i} holds {}", node.value));
            }
            if node.is_leaf() {
                continue;
            }
            if node.feature as usize >= t.schema.len() {
                return Err(format!(
                    "node {i} splits on feature {} of {}",
                    node.feature,
                    t.schema.len()
                ));
            }
            let left = node.left as usize;
            if left <= i || left + 1 >= n {
                return Err(format!(
                    "node {i} has children {left} and {} of {n} nodes",
                    left + 1
                ));
            }
            for child in [left, left + 1] {
                if std::mem::replace(&mut owned[child], true) {
                    return Err(format!("node {child} has two parents (node {i} is one)"));
                }
            }
        }
        Ok(FittedTrees {
            batched: Batched::of(&t.nodes, &t.roots),
            schema: t.schema,
            base,
            roots: t.roots,
            nodes: t.nodes,
            baseline: t.baseline,
        })
    }
}

impl FittedTrees {
    /// The ensemble of a fit: `nodes` tree after tree (children after their parent, split
    /// features inside `schema`), `roots` the first node of each tree. A saved file is checked
    /// when read; a fit is trusted to build a forest.
    pub fn from_parts(
        schema: FeatureSchema,
        base: f64,
        roots: Vec<u32>,
        nodes: Vec<Node>,
        baseline: Option<FittedRidge>,
    ) -> FittedTrees {
        FittedTrees {
            batched: Batched::of(&nodes, &roots),
            schema,
            base,
            roots,
            nodes,
            baseline,
        }
    }

    /// The smooth model the trees correct, if fitted with one.
    pub fn baseline(&self) -> Option<&FittedRidge> {
        self.baseline.as_ref()
    }

    /// Number of trees kept.
    pub fn n_trees(&self) -> usize {
        self.roots.len()
    }

    /// Number of nodes in all trees, leaves included.
    pub fn n_nodes(&self) -> usize {
        self.nodes.len()
    }

    /// Every tree's nodes, tree after tree (each tree's root first).
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Adds every tree's leaf to `log_ms[r]` for rows `rows[r * width..]` (of checked width),
    /// in tree order, walking [`WALK_ROWS`] rows through each tree together.
    fn walk_rows(&self, walk: &Walk, rows: &[f64], log_ms: &mut [f64]) {
        let width = self.schema.len();
        if width > WALK_WIDTH {
            for (x, l) in rows.chunks_exact(width).zip(log_ms.iter_mut()) {
                for &root in &self.roots {
                    *l += tree_value(&self.nodes, root, x);
                }
            }
            return;
        }
        for (block, log_ms) in rows
            .chunks(width * WALK_ROWS)
            .zip(log_ms.chunks_mut(WALK_ROWS))
        {
            // Rows in fixed-width arrays: a masked index needs no bounds check, and every
            // split feature is below the width (checked on load).
            let mut fixed = [[0.0f64; WALK_WIDTH]; WALK_ROWS];
            for (f, x) in fixed.iter_mut().zip(block.chunks_exact(width)) {
                f[..width].copy_from_slice(x);
            }
            let n = log_ms.len();
            for (&root, &depth) in self.roots.iter().zip(&walk.depths) {
                let mut at = [root as usize; WALK_ROWS];
                for _ in 0..depth {
                    for (i, x) in at.iter_mut().zip(&fixed[..n]) {
                        let s = walk.steps[*i];
                        // `!(x <= t)` sends NaN right, as `tree_value` does.
                        #[allow(clippy::neg_cmp_op_on_partial_ord)]
                        let right =
                            u32::from(!(x[s.feature as usize & (WALK_WIDTH - 1)] <= s.value));
                        *i = s.left.wrapping_add(right & s.step) as usize;
                    }
                }
                for (l, i) in log_ms.iter_mut().zip(&at[..n]) {
                    *l += self.nodes[*i].value;
                }
            }
        }
    }
}

/// Rows [`FittedTrees`] walks through its trees together in a batch.
const WALK_ROWS: usize = 8;
/// Widest row the batched walk holds in a fixed array (a power of two); wider rows are
/// predicted one at a time.
const WALK_WIDTH: usize = 64;

/// The leaf value the tree at `root` gives a raw row (of checked width): the single-row walk,
/// the definition the batched paths reproduce.
#[inline]
pub fn tree_value(nodes: &[Node], root: u32, x: &[f64]) -> f64 {
    let mut i = root as usize;
    loop {
        let n = nodes[i];
        if n.is_leaf() {
            return n.value;
        }
        // Branch-free child choice: a row's path is unpredictable. `!(x <= t)` sends NaN right.
        #[allow(clippy::neg_cmp_op_on_partial_ord)]
        let right = !(x[n.feature as usize] <= n.value);
        i = n.left as usize + usize::from(right);
    }
}

/// Where boosting starts a row, the base of the trees' stack: the log prediction of the ridge
/// `baseline` when fitted with one, else `mean` (the mean log latency of the training rows,
/// kept in log space).
#[derive(Clone, Copy, Debug)]
pub struct Start<'a> {
    /// The smooth model the trees correct.
    pub baseline: Option<&'a FittedRidge>,
    /// Mean `ln(ms)` of the training rows.
    pub mean: f64,
}

impl Estimate for Start<'_> {
    fn estimate(&self, x: &[f64]) -> Result<f64> {
        Ok(self.log_estimate(x)?.exp())
    }

    fn log_estimate(&self, x: &[f64]) -> Result<f64> {
        match self.baseline {
            Some(b) => Ok(b.predict_row(x)?.ln()),
            None => Ok(self.mean),
        }
    }
}

/// The trees as the residual model of their stack: one leaf per tree added to a row's log
/// start, in tree order.
struct Leaves<'a>(&'a FittedTrees);

impl LogResidual for Leaves<'_> {
    fn add_log(&self, x: &[f64], start: f64) -> f64 {
        let t = self.0;
        let mut log_ms = start;
        for &root in &t.roots {
            log_ms += tree_value(&t.nodes, root, x);
        }
        log_ms
    }

    /// With leaf masks ([`Masks`]) the rows sit in SIMD lanes; otherwise they walk each tree
    /// together, [`WALK_ROWS`] at a time and branch-free, the tree's full depth (a leaf keeps
    /// a row in place), so their chains of dependent loads overlap.
    fn add_log_rows(&self, rows: &[f64], log: &mut [f64]) {
        let t = self.0;
        match &t.batched {
            Batched::Masks(masks) => pulp::Arch::new().dispatch(MaskBatch {
                masks,
                rows,
                width: t.schema.len(),
                out: log,
            }),
            Batched::Walk(walk) => t.walk_rows(walk, rows, log),
        }
    }
}

impl FittedTrees {
    /// The ensemble as a stack: [`Start`], then the leaves in log space.
    fn stack(&self) -> StackWith<Start<'_>, Leaves<'_>> {
        StackWith::new(
            Start {
                baseline: self.baseline.as_ref(),
                mean: self.base,
            },
            Leaves(self),
        )
    }
}

impl Regressor for FittedTrees {
    fn name(&self) -> &'static str {
        MODEL
    }

    fn schema(&self) -> &FeatureSchema {
        &self.schema
    }

    fn predict_row(&self, x: &[f64]) -> Result<f64> {
        regressor::check_width(&self.schema, x.len())?;
        self.stack().predict_log_row(x)
    }

    /// Each row starts from its baseline (or the base) and adds its trees' leaves in tree
    /// order, as [`Regressor::predict_row`] does, so results are the same bits ([`Leaves`]).
    fn predict_rows(&self, rows: &[f64], out: &mut [f64]) -> Result<()> {
        let width = self.schema.len();
        crate::regressor::check_rows(width, rows, out)?;
        self.stack().predict_log_rows(rows, width, out)
    }

    fn size_bytes(&self) -> usize {
        std::mem::size_of_val(self.nodes.as_slice())
            + std::mem::size_of_val(self.roots.as_slice())
            + std::mem::size_of::<f64>()
            + self.baseline.as_ref().map_or(0, |b| b.size_bytes())
    }

    fn to_saved(&self) -> SavedModel {
        SavedModel::new(MODEL, self.clone())
    }
}

impl crate::regressor::SavedForm for FittedTrees {
    fn into_regressor(self) -> Box<dyn Regressor> {
        Box::new(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfcast_core::ModuleKind;
    use perfcast_core::rng::SplitMix64;

    /// A forest of `trees` trees of `leaves` leaves each over rows of `width` features, grown
    /// by splitting random leaves at random thresholds (the paths do not care how a fit would
    /// have chosen them), with children after their parent as a fit stores them.
    fn forest(trees: usize, leaves: usize, width: usize, seed: u64) -> (Vec<u32>, Vec<Node>) {
        let mut rng = SplitMix64(seed);
        let (mut roots, mut nodes) = (Vec::new(), Vec::new());
        for _ in 0..trees {
            roots.push(nodes.len() as u32);
            let mut open = vec![nodes.len()];
            nodes.push(Node::leaf(0.0));
            while open.len() < leaves {
                let i = open.swap_remove(rng.below(open.len()));
                let left = nodes.len();
                nodes[i] = Node {
                    feature: rng.below(width) as u32,
                    left: left as u32,
                    value: (rng.unit() * 8.0 - 2.0).exp(),
                };
                nodes.push(Node::leaf(0.0));
                nodes.push(Node::leaf(0.0));
                open.extend([left, left + 1]);
            }
            for i in open {
                nodes[i] = Node::leaf(rng.unit() * 0.2 - 0.1);
            }
        }
        (roots, nodes)
    }

    fn schema(width: usize) -> FeatureSchema {
        FeatureSchema {
            kind: ModuleKind::Linear,
            names: (0..width).map(|j| format!("f{j}")).collect(),
        }
    }

    /// A degree-1 ridge over `width` columns, as `trees` boosts from by default.
    fn baseline(width: usize) -> FittedRidge {
        FittedRidge {
            schema: schema(width),
            scaler: crate::regressor::LogStandardiser {
                mean: vec![1.5; width],
                inv_std: vec![0.7; width],
            },
            active: (0..width).collect(),
            degree: 1,
            intercept: -1.0,
            weights: (0..width).map(|j| 0.1 * (j as f64 - 2.0)).collect(),
            log_bounds: None,
        }
    }

    /// Rows spread over the thresholds' range, then rows far outside it and NaN in every
    /// column of one: `n + 3` rows (not a whole number of SIMD blocks for most `n`).
    fn rows(width: usize, n: usize, seed: u64) -> Vec<f64> {
        let mut rng = SplitMix64(seed);
        let mut rows: Vec<f64> = (0..n * width)
            .map(|_| (rng.unit() * 9.0 - 2.5).exp())
            .collect();
        let odd = [
            1e9,
            f64::NAN,
            1e30,
            -1.0,
            0.0,
            f64::INFINITY,
            -1e300,
            1e-300,
        ];
        rows.extend((0..width).map(|j| odd[j % odd.len()]));
        rows.extend(vec![f64::NAN; width]);
        rows.extend((0..width).map(|j| odd[(j + 3) % odd.len()]));
        rows
    }
    /// Each row's log-space sum through every batched kernel, whatever this CPU dispatches
    /// to: the leaf masks through `Arch` and through pulp's portable 1-, 2- and 4-lane
    /// vectors (what a CPU without AVX2 runs), and the walk.
    fn every_batched_path(m: &FittedTrees, rows: &[f64]) -> Vec<(&'static str, Vec<f64>)> {
        let width = m.schema.len();
        let n = rows.len() / width;
        let mut paths = Vec::new();
        if let Batched::Masks(masks) = &m.batched {
            let run = |f: &dyn Fn(MaskBatch)| {
                let mut out = vec![0.0; n];
                f(MaskBatch {
                    masks,
                    rows,
                    width,
                    out: &mut out,
                });
                out
            };
            paths.push(("masks, dispatched", run(&|b| pulp::Arch::new().dispatch(b))));
            paths.push((
                "masks, 1 lane",
                run(&|b| pulp::WithSimd::with_simd(b, pulp::Scalar)),
            ));
            paths.push((
                "masks, 2 lanes",
                run(&|b| pulp::WithSimd::with_simd(b, pulp::Scalar128b)),
            ));
            paths.push((
                "masks, 4 lanes",
                run(&|b| pulp::WithSimd::with_simd(b, pulp::Scalar256b)),
            ));
        }
        let mut walked = vec![0.0; n];
        m.walk_rows(&Walk::of(&m.nodes, &m.roots), rows, &mut walked);
        paths.push(("walk", walked));
        paths
    }

    /// The trees' sum of one row, tree by tree (the single-row definition).
    fn trees_sum(m: &FittedTrees, x: &[f64]) -> f64 {
        m.roots
            .iter()
            .fold(0.0, |acc, &root| acc + tree_value(&m.nodes, root, x))
    }

    #[test]
    fn batched_paths_match_single_rows_exactly() {
        let width = 6;
        let (roots, nodes) = forest(40, 31, width, 1);
        let rows = rows(width, 18, 2);
        for baseline in [None, Some(baseline(width))] {
            let fitted = FittedTrees::from_parts(
                schema(width),
                -0.5,
                roots.clone(),
                nodes.clone(),
                baseline,
            );
            assert!(matches!(fitted.batched, Batched::Masks(_)));
            // Saved and loaded: the batched form is rebuilt on load.
            let json = serde_json::to_string(&fitted.to_saved()).unwrap();
            let loaded: SavedModel = serde_json::from_str(&json).unwrap();
            let loaded_trees = loaded.downcast_ref::<FittedTrees>().expect("trees").clone();
            for m in [&fitted, &loaded_trees] {
                for (path, sums) in every_batched_path(m, &rows) {
                    for (x, sum) in rows.chunks_exact(width).zip(&sums) {
                        assert_eq!(sum.to_bits(), trees_sum(m, x).to_bits(), "{path}: {x:?}");
                    }
                }
            }
            for m in [
                Box::new(fitted) as Box<dyn Regressor>,
                loaded.into_regressor(),
            ] {
                // Whole blocks and a rest of one vector (18 rows), a rest of two (7), of one (3).
                for n in [18, 7, 3] {
                    let rows = &rows[..n * width];
                    let mut out = vec![0.0; n];
                    m.predict_rows(rows, &mut out).unwrap();
                    for (x, o) in rows.chunks_exact(width).zip(&out) {
                        assert_eq!(o.to_bits(), m.predict_row(x).unwrap().to_bits(), "{x:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn trees_with_more_leaves_than_a_mask_holds_are_walked() {
        // 100 leaves a tree; and rows wider than the walk's fixed arrays, one at a time.
        for width in [6, WALK_WIDTH + 6] {
            let (roots, nodes) = forest(5, 100, width, 3);
            let m = FittedTrees::from_parts(schema(width), 0.25, roots, nodes, None);
            assert!(matches!(m.batched, Batched::Walk(_)));
            let rows = rows(width, 47, 4);
            let mut out = vec![0.0; rows.len() / width];
            m.predict_rows(&rows, &mut out).unwrap();
            for (x, o) in rows.chunks_exact(width).zip(&out) {
                assert_eq!(o.to_bits(), m.predict_row(x).unwrap().to_bits(), "{x:?}");
            }
        }
    }

    #[test]
    fn leaf_masks_number_leaves_left_to_right() {
        // x0 <= 1 ? (x1 <= 5 ? 10 : 20) : 30, stored root, split, leaf 30, leaf 10, leaf 20.
        let split = |feature, left, value| Node {
            feature,
            left,
            value,
        };
        let nodes = [
            split(0, 1, 1.0),
            split(1, 3, 5.0),
            Node::leaf(30.0),
            Node::leaf(10.0),
            Node::leaf(20.0),
        ];
        let m = Masks::of(&nodes, &[0]).unwrap();
        assert_eq!(m.leaves, vec![10.0, 20.0, 30.0]);
        assert_eq!(m.columns, vec![0, 1]);
        assert_eq!(m.ends, vec![(2, 3)]);
        // Going right at the root rules out leaves 0 and 1, at the inner split leaf 0.
        assert_eq!(m.splits[0].keep, !0b011);
        assert_eq!(m.splits[1].keep, !0b001);
        assert_eq!(bit_range(0, 64), u64::MAX);
        assert_eq!(bit_range(3, 5), 0b11000);
    }

    #[test]
    fn a_corrupt_file_is_refused_not_walked() {
        let (roots, nodes) = forest(3, 4, 6, 5);
        let m = FittedTrees::from_parts(schema(6), 0.0, roots, nodes, None);
        let mut v = serde_json::to_value(&m).unwrap();
        v["nodes"][0][1] = serde_json::json!(0);
        let err = serde_json::from_value::<FittedTrees>(v).unwrap_err();
        assert!(
            err.to_string().contains("node 0 has children 0 and 1"),
            "{err}"
        );
        let mut v = serde_json::to_value(&m).unwrap();
        v["roots"][0] = serde_json::json!(10_000);
        assert!(serde_json::from_value::<FittedTrees>(v).is_err());
        let mut v = serde_json::to_value(&m).unwrap();
        v["nodes"][0][0] = serde_json::json!(6);
        let err = serde_json::from_value::<FittedTrees>(v).unwrap_err();
        assert!(
            err.to_string().contains("splits on feature 6 of 6"),
            "{err}"
        );
        let err = m.predict_row(&[1.0, 2.0]).unwrap_err();
        assert!(
            matches!(
                err,
                crate::Error::FeatureWidth {
                    expected: 6,
                    got: 2
                }
            ),
            "{err}"
        );
    }
}
