//! k nearest neighbours on standardised log features, searched with a k-d tree.
//!
//! Rows are mapped to `ln(1 + x)` standardised on the training set ([`LogStandardiser`]), so a
//! feature spanning decades counts by ratios and every varying feature has unit spread. The
//! prediction is the mean of the neighbours' `ln(latency)`, weighted by inverse distance,
//! exponentiated: a geometric mean, so one slow neighbour does not dominate, and a query at
//! distance 0 from a training row returns that row's latency.
//!
//! Feature rows are wide (~30 columns) but carry fewer independent signals: device columns are
//! constant within a dataset, square shapes repeat a column (`in_h`/`in_w`,
//! `kernel_h`/`kernel_w`), and in log space the derived columns (FLOPs, bytes, elements, GEMM
//! sizes) are nearly linear in the logs of the configuration columns. The fit (perfcast-models'
//! `KnnParams`) therefore keeps only the columns that vary and are not near-copies of an
//! earlier kept column, rotates them onto their principal axes and leaves out the axes with the
//! least variance: the [`Embedding`] every row goes through before the tree.
//!
//! The index is a k-d tree, built once at fit time ([`KdTree::build`]) into flat arrays: nodes
//! in preorder with the bounding box of each node's points, points in leaf order in blocks of
//! 32, stored in single precision and coordinate-major so a leaf's distances are computed in
//! SIMD lanes.
//! Splits are at the median (rounded to whole leaves) of the dimension of widest spread
//! (variance). The search is branch and bound: the child on the query's side of the split
//! first, then the other unless the query's distance to the splitting plane (accumulated per
//! dimension over the planes on the way down), or to the child's bounding box, already exceeds
//! the k-th best distance.
//! Prediction uses fixed-size stack buffers and never allocates, which bounds `k` by [`MAX_K`]
//! and the indexed columns by [`MAX_FEATURES`].
//!

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::features::FeatureSchema;
use crate::regressor::{self, LogStandardiser, Regressor, SavedModel};

/// Largest supported `k` (the neighbour list lives on the stack).
pub const MAX_K: usize = 32;

/// Most columns the index may keep after dropping constant and redundant ones (the query lives
/// on the stack).
pub const MAX_FEATURES: usize = 64;

const MODEL: &str = "knn";

/// The map from a raw row to the space the tree indexes: selected columns, log-standardised and
/// weighted, rotated onto their principal axes (widest first), the near-empty axes left out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Embedding {
    /// Schema columns used, in order (at most [`MAX_FEATURES`]).
    pub features: Vec<usize>,
    /// Log standardisation of those columns, feature weights folded into the scales.
    pub standardiser: LogStandardiser,
    /// Principal axes kept, widest first, as the loadings of each feature in turn: row-major
    /// `features.len() x dims` (feature-major, so the projection vectorises across axes).
    pub loadings: Vec<f64>,
}

impl Embedding {
    /// Width of the embedded rows.
    pub fn dims(&self) -> usize {
        self.loadings.len() / self.features.len().max(1)
    }

    /// Embeds a raw row (schema width) into `out[..self.dims()]`, without allocating.
    #[inline]
    pub fn apply(&self, x: &[f64], out: &mut [f32; MAX_FEATURES]) {
        let (d, m) = (self.features.len(), self.dims());
        let mut buf = [0.0; MAX_FEATURES];
        for (b, &j) in buf.iter_mut().zip(&self.features) {
            *b = x[j];
        }
        let mut z = [0.0; MAX_FEATURES];
        self.standardiser.transform_into(&buf[..d], &mut z[..d]);
        // Feature by feature, so the sums run across the axes side by side.
        let acc = &mut buf[..m];
        acc.fill(0.0);
        for (v, loadings) in z[..d].iter().zip(self.loadings.chunks_exact(m.max(1))) {
            for (a, l) in acc.iter_mut().zip(loadings) {
                *a += v * l;
            }
        }
        for (o, a) in out.iter_mut().zip(acc.iter()) {
            *o = *a as f32;
        }
    }
}

/// A fitted k-NN model: the transform and the k-d tree of the training rows.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FittedKnn {
    /// The schema of the rows it reads.
    pub schema: FeatureSchema,
    /// Neighbours combined per prediction, 1 to [`MAX_K`].
    pub k: usize,
    /// Whether neighbours are weighted by inverse distance.
    pub weighted: bool,
    /// The map from a row to the indexed space.
    pub embedding: Embedding,
    /// The index of the training rows, embedded.
    pub tree: KdTree,
}

impl FittedKnn {
    /// Names of the features the distance uses (varying, not redundant, nonzero weight).
    pub fn indexed_features(&self) -> impl Iterator<Item = &str> {
        self.embedding
            .features
            .iter()
            .map(|&j| self.schema.names[j].as_str())
    }

    /// Dimensions of the k-d tree (principal axes kept).
    pub fn index_dims(&self) -> usize {
        self.tree.dims
    }

    /// Combines the neighbours' latencies in log space.
    fn combine(&self, best: &Neighbours) -> f64 {
        let (mut d2, mut idx) = (&best.d2[..best.len], &best.idx[..best.len]);
        // An exact match has infinite weight: when there are any, only they count.
        let exact = d2.iter().take_while(|d| **d == 0.0).count();
        if self.weighted && exact > 0 {
            (d2, idx) = (&d2[..exact], &idx[..exact]);
        }
        let y = |i: u32| self.tree.y[i as usize];
        // One neighbour: its measured value, not exp(ln(y)), which may differ in the last bit.
        if idx.len() == 1 {
            return y(idx[0]);
        }
        let (mut sum, mut total) = (0.0, 0.0);
        for (d, i) in d2.iter().zip(idx) {
            let w = if self.weighted && exact == 0 {
                1.0 / f64::from(*d).sqrt()
            } else {
                1.0
            };
            sum += w * y(*i).ln();
            total += w;
        }
        (sum / total).exp()
    }
}

impl Regressor for FittedKnn {
    fn name(&self) -> &'static str {
        MODEL
    }

    fn schema(&self) -> &FeatureSchema {
        &self.schema
    }

    /// A query with an infinite feature has no finite distance to anything and predicts NaN
    /// (a NaN feature counts as 0, as in [`LogStandardiser`]).
    fn predict_row(&self, x: &[f64]) -> Result<f64> {
        regressor::check_width(&self.schema, x.len())?;
        let mut q = [0.0; MAX_FEATURES];
        self.embedding.apply(x, &mut q);
        Ok(self.combine(&self.tree.nearest(&q[..self.tree.dims], self.k)))
    }

    fn size_bytes(&self) -> usize {
        let e = &self.embedding;
        std::mem::size_of::<Self>()
            + (e.standardiser.mean.len() + e.standardiser.inv_std.len() + e.loadings.len())
                * std::mem::size_of::<f64>()
            + e.features.len() * std::mem::size_of::<usize>()
            + self.tree.size_bytes()
    }

    fn to_saved(&self) -> SavedModel {
        SavedModel::new(MODEL, self.clone())
    }
}

/// Points per leaf: every leaf but the last holds exactly this many, stored coordinate-major so
/// that the leaf scan computes all its distances at once in SIMD lanes, with no branch per point.
/// On sweep-like conv2d rows (2,000 rows, 11-13 index dimensions) 32 searched faster than 8,
/// 16 or 24 and as fast as 48 or 64.
const LEAF: usize = 32;

/// A k-d tree node; the nodes are stored in preorder.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Node {
    /// Points with `x[dim] <= split` are in the left child (the next node), points with
    /// `x[dim] >= split` in the right child.
    Inner {
        /// Splitting dimension.
        dim: u32,
        /// Splitting value.
        split: f32,
        /// Index of the right child.
        right: u32,
    },
    /// Points `start..end`, with `start` a multiple of [`LEAF`].
    Leaf {
        /// First point.
        start: u32,
        /// One past the last point.
        end: u32,
    },
}

/// A flattened k-d tree over `f32` points: nodes in preorder, each with the bounding box of its
/// points, and the points in leaf order, in blocks of [`LEAF`].
///
/// Single precision halves the memory the search streams through and doubles the SIMD lanes;
/// coordinates are standardised (order 1), so it resolves distances to ~1e-7, far below any
/// difference that matters for a neighbour's latency. Queries are rounded the same way, so a
/// training row still finds itself at distance 0.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KdTree {
    /// Point width.
    dims: usize,
    /// Nodes in preorder; the root is node 0.
    nodes: Vec<Node>,
    /// Bounding box of each node's points, in node order: `dims` lows, then `dims` highs.
    boxes: Vec<f32>,
    /// Points in leaf order, in blocks of [`LEAF`] stored coordinate-major: coordinate `d` of
    /// point `i` is at `(i / LEAF) * dims * LEAF + d * LEAF + i % LEAF`; the last block is
    /// padded with zeros.
    blocks: Vec<f32>,
    /// Latency (ms) of each point, in leaf order.
    y: Vec<f64>,
}

impl KdTree {
    /// Builds over the row-major `points` (`y.len() x dims`), which must number at most
    /// `u32::MAX`.
    pub fn build(points: &[f32], y: &[f64], dims: usize) -> KdTree {
        let mut order: Vec<u32> = (0..y.len() as u32).collect();
        let (mut nodes, mut boxes) = (Vec::new(), Vec::new());
        build_node(points, dims, &mut order, 0, &mut (&mut nodes, &mut boxes));
        let mut blocks = vec![0.0; y.len().div_ceil(LEAF) * dims * LEAF];
        for (i, &o) in order.iter().enumerate() {
            let block = (i / LEAF) * dims * LEAF + i % LEAF;
            for d in 0..dims {
                blocks[block + d * LEAF] = points[o as usize * dims + d];
            }
        }
        KdTree {
            dims,
            nodes,
            boxes,
            blocks,
            y: order.iter().map(|&i| y[i as usize]).collect(),
        }
    }

    /// Squared distance from `q` to the bounding box of `node`.
    #[inline]
    fn box_dist2(&self, node: usize, q: &[f32]) -> f32 {
        let b = 2 * node * self.dims;
        let (lo, hi) = self.boxes[b..b + 2 * self.dims].split_at(self.dims);
        // Independent partial sums, so the additions do not wait on each other.
        let mut acc = [0.0; 4];
        let (mut qc, mut lc, mut hc) = (q.chunks_exact(4), lo.chunks_exact(4), hi.chunks_exact(4));
        for ((v, l), h) in (&mut qc).zip(&mut lc).zip(&mut hc) {
            for i in 0..4 {
                let t = (l[i] - v[i]).max(v[i] - h[i]).max(0.0);
                acc[i] += t * t;
            }
        }
        let rest = qc
            .remainder()
            .iter()
            .zip(lc.remainder())
            .zip(hc.remainder());
        for (i, ((v, l), h)) in rest.enumerate() {
            let t = (l - v).max(v - h).max(0.0);
            acc[i] += t * t;
        }
        acc.iter().sum()
    }

    /// The `k` points nearest to `q`.
    fn nearest(&self, q: &[f32], k: usize) -> Neighbours {
        let mut best = Neighbours::new(k);
        if self.dims == 0 {
            for i in 0..best.k.min(self.y.len()) {
                best.insert(0.0, i as u32);
            }
        } else {
            self.search(0, q, 0.0, &mut [0.0; MAX_FEATURES], &mut best);
        }
        best
    }

    /// Adds to `best` the points under `node` nearer than its current worst.
    ///
    /// Branch and bound: the child on the query's side of the split first, then the other one
    /// unless the query's distance to it cannot beat the k-th best. `rd` is the squared distance
    /// from `q` to the node's cell (the half-spaces of the splits on the way down), `off` its
    /// per-dimension components; a child's bounding box then gives a sharper bound, as the
    /// planes only bound the few coordinates split on the way down.
    fn search(
        &self,
        node: usize,
        q: &[f32],
        rd: f32,
        off: &mut [f32; MAX_FEATURES],
        best: &mut Neighbours,
    ) {
        match self.nodes[node] {
            Node::Leaf { start, end } => self.scan(start, end, q, best),
            Node::Inner { dim, split, right } => {
                let d = dim as usize;
                let diff = q[d] - split;
                let (near, far) = if diff < 0.0 {
                    (node + 1, right as usize)
                } else {
                    (right as usize, node + 1)
                };
                self.search(near, q, rd, off, best);
                let old = off[d];
                let far_rd = rd - old * old + diff * diff;
                if far_rd < best.worst() && self.box_dist2(far, q) < best.worst() {
                    off[d] = diff;
                    self.search(far, q, far_rd, off, best);
                    off[d] = old;
                }
            }
        }
    }

    /// Offers every point of the leaf `start..end` to `best`.
    #[inline]
    fn scan(&self, start: u32, end: u32, q: &[f32], best: &mut Neighbours) {
        let base = start as usize * self.dims;
        let d2 = leaf_distances(&self.blocks[base..base + self.dims * LEAF], q);
        let worst = best.worst();
        if !d2.iter().any(|d| *d < worst) {
            return;
        }
        for (j, d) in d2.iter().take((end - start) as usize).enumerate() {
            if *d < best.worst() {
                best.insert(*d, start + j as u32);
            }
        }
    }

    /// Nodes, leaves included.
    pub fn n_nodes(&self) -> usize {
        self.nodes.len()
    }

    fn size_bytes(&self) -> usize {
        self.nodes.len() * std::mem::size_of::<Node>()
            + (self.boxes.len() + self.blocks.len()) * std::mem::size_of::<f32>()
            + self.y.len() * std::mem::size_of::<f64>()
    }
}

/// Builds the subtree over `order` (points `offset..offset + order.len()` in leaf order),
/// appending its nodes and their bounding boxes to `out`.
fn build_node(
    points: &[f32],
    dims: usize,
    order: &mut [u32],
    offset: usize,
    out: &mut (&mut Vec<Node>, &mut Vec<f32>),
) {
    let coord = |i: u32, d: usize| points[i as usize * dims + d];
    let me = out.0.len();
    let start = out.1.len();
    out.1.resize(start + 2 * dims, 0.0);
    let (lo, hi) = out.1[start..].split_at_mut(dims);
    lo.fill(f32::INFINITY);
    hi.fill(f32::NEG_INFINITY);
    let (mut sum, mut sum2) = (vec![0.0f64; dims], vec![0.0f64; dims]);
    for &i in order.iter() {
        for d in 0..dims {
            let v = coord(i, d);
            lo[d] = lo[d].min(v);
            hi[d] = hi[d].max(v);
            sum[d] += f64::from(v);
            sum2[d] += f64::from(v) * f64::from(v);
        }
    }
    // Without dimensions every point is at distance 0: one leaf, which `nearest` never scans.
    if order.len() <= LEAF || dims == 0 {
        out.0.push(Node::Leaf {
            start: offset as u32,
            end: (offset + order.len()) as u32,
        });
        return;
    }
    // Widest spread by variance, not range, so one outlying point does not claim the split.
    let n = order.len() as f64;
    let (mut dim, mut widest) = (0, -1.0);
    for (d, (s, s2)) in sum.iter().zip(&sum2).enumerate() {
        let var = s2 / n - (s / n) * (s / n);
        if var > widest {
            (dim, widest) = (d, var);
        }
    }
    // The median, rounded to whole leaves, so that every leaf but the last is full and starts
    // at a multiple of LEAF. (Identical points split too: either side is right for them.)
    let mid = ((order.len() / 2 + LEAF / 2) / LEAF * LEAF).max(LEAF);
    order.select_nth_unstable_by(mid, |&a, &b| coord(a, dim).total_cmp(&coord(b, dim)));
    let split = coord(order[mid], dim);
    out.0.push(Node::Inner {
        dim: dim as u32,
        split,
        right: 0,
    });
    let (left, right) = order.split_at_mut(mid);
    build_node(points, dims, left, offset, out);
    let right_index = out.0.len() as u32;
    build_node(points, dims, right, offset + mid, out);
    if let Node::Inner { right, .. } = &mut out.0[me] {
        *right = right_index;
    }
}

/// Squared distances from `q` to the points of one leaf block (coordinate-major).
///
/// Kept out of line: inlined into the search, the compiler no longer vectorises the loop over the
/// block's points, and the search runs ~2.5 times slower.
#[inline(never)]
fn leaf_distances(block: &[f32], q: &[f32]) -> [f32; LEAF] {
    let mut acc = [0.0f32; LEAF];
    for (column, v) in block.chunks_exact(LEAF).zip(q) {
        for (a, c) in acc.iter_mut().zip(column) {
            let t = c - v;
            *a += t * t;
        }
    }
    acc
}

/// The k best (squared distance, point) pairs so far, nearest first; unfilled slots are at an
/// infinite distance, so the k-th entry is always the distance to beat.
#[derive(Clone, Copy, Debug)]
struct Neighbours {
    k: usize,
    len: usize,
    d2: [f32; MAX_K],
    idx: [u32; MAX_K],
}

impl Neighbours {
    fn new(k: usize) -> Neighbours {
        Neighbours {
            k: k.clamp(1, MAX_K),
            len: 0,
            d2: [f32::INFINITY; MAX_K],
            idx: [0; MAX_K],
        }
    }

    /// The distance a point must beat to enter.
    #[inline]
    fn worst(&self) -> f32 {
        self.d2[self.k - 1]
    }

    /// Inserts `(d2, i)`, which must beat [`Neighbours::worst`]; ties keep the earlier point.
    #[inline]
    fn insert(&mut self, d2: f32, i: u32) {
        let mut p = self.k - 1;
        while p > 0 && self.d2[p - 1] > d2 {
            self.d2[p] = self.d2[p - 1];
            self.idx[p] = self.idx[p - 1];
            p -= 1;
        }
        self.d2[p] = d2;
        self.idx[p] = i;
        self.len = (self.len + 1).min(self.k);
    }
}

impl crate::regressor::SavedForm for FittedKnn {
    fn into_regressor(self) -> Box<dyn Regressor> {
        Box::new(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfcast_core::rng::SplitMix64;

    /// Coordinates of point `i` (leaf order).
    fn point(tree: &KdTree, i: usize) -> Vec<f32> {
        let base = (i / LEAF) * tree.dims * LEAF + i % LEAF;
        (0..tree.dims)
            .map(|d| tree.blocks[base + d * LEAF])
            .collect()
    }

    /// Reference: every point, in leaf order, summing in the same order as the leaf scan.
    fn brute_force(tree: &KdTree, q: &[f32], k: usize) -> Neighbours {
        let mut best = Neighbours::new(k);
        for i in 0..tree.y.len() {
            let d2 = point(tree, i)
                .iter()
                .zip(q)
                .fold(0.0, |acc, (p, v)| acc + (p - v) * (p - v));
            if d2 < best.worst() {
                best.insert(d2, i as u32);
            }
        }
        best
    }

    fn random_points(rng: &mut SplitMix64, n: usize, dims: usize, discrete: bool) -> Vec<f32> {
        (0..n * dims)
            .map(|_| {
                let u = rng.unit() as f32 * 4.0 - 2.0;
                if discrete { u.round() } else { u }
            })
            .collect()
    }

    #[test]
    fn kd_tree_finds_the_same_neighbours_as_brute_force() {
        let mut rng = SplitMix64(7);
        let shapes = [
            (1, 3),
            (16, 2),
            (17, 2),
            (500, 1),
            (2000, 3),
            (1500, 9),
            (800, 30),
            (3000, 12),
        ];
        for (discrete, (n, dims)) in [false, true]
            .into_iter()
            .flat_map(|d| shapes.map(|s| (d, s)))
        {
            let points = random_points(&mut rng, n, dims, discrete);
            let tree = KdTree::build(&points, &vec![1.0; n], dims);
            for k in [1, 5, MAX_K.min(n)] {
                for _ in 0..50 {
                    // Some queries fall outside the data.
                    let q: Vec<f32> = (0..dims).map(|_| rng.unit() as f32 * 6.0 - 3.0).collect();
                    let best = tree.nearest(&q, k);
                    let reference = brute_force(&tree, &q, k);
                    assert_eq!(best.len, k.min(n));
                    assert_eq!(best.d2[..best.len], reference.d2[..reference.len]);
                    // Discrete points tie; the k nearest distances agree, the points need not.
                    if !discrete {
                        assert_eq!(best.idx[..best.len], reference.idx[..reference.len]);
                    }
                }
            }
        }
    }

    #[test]
    fn tree_leaves_hold_every_point_once() {
        let mut rng = SplitMix64(3);
        for (n, dims, discrete) in [(1000, 4, false), (333, 2, true), (100, 3, false)] {
            let points = random_points(&mut rng, n, dims, discrete);
            let y: Vec<f64> = (0..n).map(|i| i as f64).collect();
            let tree = KdTree::build(&points, &y, dims);
            let mut covered = vec![0; n];
            for node in &tree.nodes {
                if let Node::Leaf { start, end } = *node {
                    assert_eq!(start as usize % LEAF, 0);
                    assert!(end as usize - start as usize == LEAF || end as usize == n);
                    for c in &mut covered[start as usize..end as usize] {
                        *c += 1;
                    }
                }
            }
            assert!(covered.iter().all(|c| *c == 1));
            // Each point travelled with its target.
            for (i, yi) in tree.y.iter().enumerate() {
                let orig = *yi as usize;
                assert_eq!(point(&tree, i), &points[orig * dims..(orig + 1) * dims]);
            }
        }
    }
}
