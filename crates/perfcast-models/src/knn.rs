//! k nearest neighbours on standardised log features, searched with a k-d tree.
//!
//! Rows are mapped to `ln(1 + x)` standardised on the training set ([`LogStandardiser`]), so a
//! feature spanning decades counts by ratios and every varying feature has unit spread. The
//! prediction is the mean of the neighbours' `ln(latency)`, weighted by inverse distance,
//! exponentiated: a geometric mean, so one slow neighbour does not dominate, and a query equal to
//! a training row returns that row's latency.
//!
//! Feature rows are wide (~30 columns) but carry fewer independent signals: device columns are
//! constant within a dataset, and square shapes repeat a column (`in_h`/`in_w`,
//! `kernel_h`/`kernel_w`). Fitting keeps only the columns that vary and are not near-copies of an
//! earlier kept column, so each signal counts once in the distance and the tree only splits on
//! dimensions that separate points; [`KnnParams::feature_weights`] rescales or removes named
//! features by hand.
//!
//! The index is a k-d tree over the kept columns, built once at fit time into flat arrays (nodes
//! in preorder, points and targets reordered so each leaf is one contiguous slice), with median
//! splits on the widest dimension. The search is branch and bound: the nearer child first, the
//! farther only while the query's distance to its cell (the offsets to the splitting planes on
//! the path, accumulated per dimension) is below the k-th best distance so far. Prediction uses
//! fixed-size stack buffers and never allocates, which bounds `k` by [`MAX_K`] and the indexed
//! columns by [`MAX_FEATURES`].

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::features::{FeatureSchema, TrainSet};
use crate::matrix::Matrix;
use crate::regressor::{self, Fit, LogStandardiser, Regressor, SavedModel};

/// Largest supported `k` (the neighbour list lives on the stack).
pub const MAX_K: usize = 32;

/// Most columns the index may keep after dropping constant and redundant ones (the query lives
/// on the stack).
pub const MAX_FEATURES: usize = 64;

const MODEL: &str = "knn";

/// Hyper-parameters of k nearest neighbours.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KnnParams {
    /// Neighbours averaged per prediction, 1 to [`MAX_K`]; default 5.
    pub k: usize,
    /// Weight neighbours by inverse distance (otherwise equally); default true.
    pub weighted: bool,
    /// Most points in a k-d tree leaf, at least 1; default 12.
    pub leaf_size: usize,
    /// A varying column whose |correlation| with an earlier kept column exceeds this is left out
    /// (0 < value <= 1; 1 keeps every varying column); default 0.999.
    pub max_correlation: f64,
    /// Principal axes the tree indexes: the fewest covering this share of the variance
    /// (0 < value <= 1; 1 keeps every axis); default 0.999.
    pub variance_kept: f64,
    /// Distance weights of named features (0 leaves one out; unnamed features weigh 1); default
    /// none.
    pub feature_weights: Vec<(String, f64)>,
}

impl Default for KnnParams {
    fn default() -> Self {
        KnnParams {
            k: 5,
            weighted: true,
            leaf_size: 12,
            max_correlation: 0.999,
            variance_kept: 0.999,
            feature_weights: Vec::new(),
        }
    }
}

fn invalid(message: String) -> Error {
    Error::InvalidParams {
        model: MODEL,
        message,
    }
}

impl KnnParams {
    /// The distance weight of every column of `schema` (1 unless named).
    fn column_weights(&self, schema: &FeatureSchema) -> Result<Vec<f64>> {
        let mut weights = vec![1.0; schema.len()];
        for (name, w) in &self.feature_weights {
            let j = schema.index(name).ok_or_else(|| {
                invalid(format!(
                    "unknown feature `{name}` in feature_weights (not in the `{}` schema)",
                    schema.kind
                ))
            })?;
            weights[j] = *w;
        }
        Ok(weights)
    }
}

impl Fit for KnnParams {
    type Fitted = FittedKnn;

    fn validate(&self) -> Result<()> {
        if self.k == 0 {
            return Err(invalid(format!("k must be at least 1, got {}", self.k)));
        }
        if self.k > MAX_K {
            return Err(invalid(format!(
                "k must be at most {MAX_K}, got {}",
                self.k
            )));
        }
        if self.leaf_size == 0 {
            return Err(invalid(format!(
                "leaf_size must be at least 1, got {}",
                self.leaf_size
            )));
        }
        if !(self.max_correlation > 0.0 && self.max_correlation <= 1.0) {
            return Err(invalid(format!(
                "max_correlation must be in (0, 1], got {}",
                self.max_correlation
            )));
        }
        if !(self.variance_kept > 0.0 && self.variance_kept <= 1.0) {
            return Err(invalid(format!(
                "variance_kept must be in (0, 1], got {}",
                self.variance_kept
            )));
        }
        for (name, w) in &self.feature_weights {
            if !(w.is_finite() && *w >= 0.0) {
                return Err(invalid(format!(
                    "weight of feature `{name}` must be finite and at least 0, got {w}"
                )));
            }
        }
        Ok(())
    }

    fn fit(&self, data: &TrainSet) -> Result<FittedKnn> {
        self.validate()?;
        regressor::check_train_set(data, self.k)?;
        if u32::try_from(data.len()).is_err() {
            return Err(Error::InvalidData(format!(
                "{} rows, knn indexes at most {}",
                data.len(),
                u32::MAX
            )));
        }
        let weights = self.column_weights(&data.schema)?;
        let embedding =
            Embedding::fit(&data.x, &weights, self.max_correlation, self.variance_kept)?;
        let dims = embedding.dims();
        let mut points = vec![0.0; data.len() * dims];
        let mut buf = [0.0; MAX_FEATURES];
        for (row, out) in data.x.iter_rows().zip(points.chunks_exact_mut(dims.max(1))) {
            embedding.apply(row, &mut buf);
            out.copy_from_slice(&buf[..dims]);
        }
        Ok(FittedKnn {
            schema: data.schema.clone(),
            k: self.k,
            weighted: self.weighted,
            embedding,
            tree: KdTree::build(&points, &data.y, dims, self.leaf_size),
        })
    }
}

/// The map from a raw row to the space the tree indexes: selected columns, log-standardised and
/// weighted, rotated onto their principal axes, the near-empty axes left out.
///
/// The rotation keeps distances; it lets the tree split along the directions the data actually
/// spread in (derived columns are near-linear in the logs of the configuration columns, so ~18
/// varying columns span ~11 directions) and puts the widest first, so the partial distance of a
/// far point passes the current k-th best after a few coordinates.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Embedding {
    /// Schema columns used, in order.
    features: Vec<usize>,
    /// Log standardisation of those columns, feature weights folded into the scales.
    standardiser: LogStandardiser,
    /// Principal axes kept, row-major `axes x features.len()`, widest first.
    axes: Vec<f64>,
}

impl Embedding {
    fn fit(
        x: &Matrix,
        weights: &[f64],
        max_correlation: f64,
        variance_kept: f64,
    ) -> Result<Embedding> {
        let full = LogStandardiser::fit(x);
        let features = select_features(&full.transform(x), weights, max_correlation);
        let d = features.len();
        if d > MAX_FEATURES {
            return Err(Error::InvalidData(format!(
                "{d} varying features, knn indexes at most {MAX_FEATURES}"
            )));
        }
        let standardiser = LogStandardiser {
            mean: features.iter().map(|&j| full.mean[j]).collect(),
            inv_std: features
                .iter()
                .map(|&j| full.inv_std[j] * weights[j])
                .collect(),
        };
        // Covariance of the standardised, weighted columns.
        let mut cov = vec![0.0; d * d];
        let (mut raw, mut z) = (vec![0.0; d], vec![0.0; d]);
        let n = x.rows().max(1) as f64;
        for row in x.iter_rows() {
            for (r, &j) in raw.iter_mut().zip(&features) {
                *r = row[j];
            }
            standardiser.transform_into(&raw, &mut z);
            for (a, za) in z.iter().enumerate() {
                for (c, zb) in cov[a * d..(a + 1) * d].iter_mut().zip(&z) {
                    *c += za * zb / n;
                }
            }
        }
        let (values, vectors) = symmetric_eigen(cov, d);
        let total: f64 = values.iter().map(|v| v.max(0.0)).sum();
        let mut kept = 0;
        if variance_kept >= 1.0 {
            kept = d;
        } else {
            let mut cum = 0.0;
            while kept < d && (kept == 0 || cum < variance_kept * total) && total > 0.0 {
                cum += values[kept].max(0.0);
                kept += 1;
            }
        }
        Ok(Embedding {
            features,
            standardiser,
            axes: vectors[..kept * d].to_vec(),
        })
    }

    /// Width of the embedded rows.
    fn dims(&self) -> usize {
        self.axes.len() / self.features.len().max(1)
    }

    /// Embeds a raw row (schema width) into `out[..self.dims()]`, without allocating.
    #[inline]
    fn apply(&self, x: &[f64], out: &mut [f64; MAX_FEATURES]) {
        let d = self.features.len();
        let mut raw = [0.0; MAX_FEATURES];
        for (r, &j) in raw.iter_mut().zip(&self.features) {
            *r = x[j];
        }
        let mut z = [0.0; MAX_FEATURES];
        self.standardiser.transform_into(&raw[..d], &mut z[..d]);
        for (o, axis) in out.iter_mut().zip(self.axes.chunks_exact(d.max(1))) {
            *o = axis.iter().zip(&z[..d]).map(|(a, b)| a * b).sum();
        }
    }
}

/// Eigenvalues (descending) and unit eigenvectors (as rows, in the same order) of the symmetric
/// row-major `d x d` matrix `a`, by cyclic Jacobi rotations: slow for big matrices but exact and
/// dependency-free, and ours are at most [`MAX_FEATURES`] wide.
fn symmetric_eigen(mut a: Vec<f64>, d: usize) -> (Vec<f64>, Vec<f64>) {
    let mut v = vec![0.0; d * d];
    for i in 0..d {
        v[i * d + i] = 1.0;
    }
    for _sweep in 0..100 {
        let mut off = 0.0;
        let mut diag = 0.0;
        for p in 0..d {
            diag += a[p * d + p] * a[p * d + p];
            for q in p + 1..d {
                off += a[p * d + q] * a[p * d + q];
            }
        }
        if off <= 1e-30 * diag || off == 0.0 {
            break;
        }
        for p in 0..d {
            for q in p + 1..d {
                let apq = a[p * d + q];
                if apq == 0.0 {
                    continue;
                }
                // The rotation in the (p, q) plane that zeroes a[p][q].
                let theta = (a[q * d + q] - a[p * d + p]) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + theta.hypot(1.0));
                let c = 1.0 / t.hypot(1.0);
                let s = t * c;
                for k in 0..d {
                    let (kp, kq) = (a[k * d + p], a[k * d + q]);
                    a[k * d + p] = c * kp - s * kq;
                    a[k * d + q] = s * kp + c * kq;
                }
                for k in 0..d {
                    let (pk, qk) = (a[p * d + k], a[q * d + k]);
                    a[p * d + k] = c * pk - s * qk;
                    a[q * d + k] = s * pk + c * qk;
                }
                for k in 0..d {
                    let (kp, kq) = (v[k * d + p], v[k * d + q]);
                    v[k * d + p] = c * kp - s * kq;
                    v[k * d + q] = s * kp + c * kq;
                }
            }
        }
    }
    let mut order: Vec<usize> = (0..d).collect();
    order.sort_by(|&i, &j| a[j * d + j].total_cmp(&a[i * d + i]));
    let values = order.iter().map(|&i| a[i * d + i]).collect();
    let mut vectors = vec![0.0; d * d];
    for (row, &i) in order.iter().enumerate() {
        for k in 0..d {
            vectors[row * d + k] = v[k * d + i];
        }
    }
    (values, vectors)
}

/// The columns worth indexing, in schema order: nonzero weight, varying (the standardiser gives
/// them unit variance; constant ones stay at 0), and not a near-copy of a column kept before.
fn select_features(z: &Matrix, weights: &[f64], max_correlation: f64) -> Vec<usize> {
    let n = z.rows().max(1) as f64;
    let mut kept: Vec<usize> = Vec::new();
    let mut kept_cols: Vec<Vec<f64>> = Vec::new();
    for (j, w) in weights.iter().enumerate() {
        if *w == 0.0 {
            continue;
        }
        let col = z.column(j);
        let mean = col.iter().sum::<f64>() / n;
        let centred: Vec<f64> = col.iter().map(|v| v - mean).collect();
        let ss = centred.iter().map(|v| v * v).sum::<f64>();
        if ss / n < 0.5 {
            continue;
        }
        let redundant = kept_cols.iter().any(|other| {
            let so = other.iter().map(|v| v * v).sum::<f64>();
            let dot = centred.iter().zip(other).map(|(a, b)| a * b).sum::<f64>();
            (dot / (ss * so).sqrt()).abs().min(1.0) > max_correlation
        });
        if !redundant {
            kept.push(j);
            kept_cols.push(centred);
        }
    }
    kept
}

/// A fitted k-NN model: the transform and the k-d tree of the training rows.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FittedKnn {
    schema: FeatureSchema,
    k: usize,
    weighted: bool,
    embedding: Embedding,
    tree: KdTree,
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

    /// Neighbours of a transformed query `q` (width = indexed features).
    fn neighbours(&self, q: &[f64]) -> Neighbours {
        let mut best = Neighbours::new(self.k);
        let mut off = [0.0; MAX_FEATURES];
        self.tree.search(0, q, 0.0, &mut off, &mut best);
        best
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
                1.0 / d.sqrt()
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

    fn predict_row(&self, x: &[f64]) -> Result<f64> {
        regressor::check_width(&self.schema, x.len())?;
        let mut q = [0.0; MAX_FEATURES];
        self.embedding.apply(x, &mut q);
        Ok(self.combine(&self.neighbours(&q[..self.tree.dims])))
    }

    fn size_bytes(&self) -> usize {
        let e = &self.embedding;
        let f64s = e.standardiser.mean.len() + e.standardiser.inv_std.len() + e.axes.len();
        std::mem::size_of::<Self>()
            + f64s * std::mem::size_of::<f64>()
            + e.features.len() * std::mem::size_of::<usize>()
            + self.tree.size_bytes()
    }

    fn to_saved(&self) -> SavedModel {
        SavedModel::Knn(self.clone())
    }
}

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
        split: f64,
        /// Index of the right child.
        right: u32,
    },
    /// Points `start..end`.
    Leaf {
        /// First point.
        start: u32,
        /// One past the last point.
        end: u32,
    },
}

/// Flattened k-d tree: points and targets reordered so that every leaf is a contiguous range.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct KdTree {
    /// Point width.
    dims: usize,
    /// Nodes in preorder; the root is node 0.
    nodes: Vec<Node>,
    /// Points, row-major `len x dims`, in leaf order.
    points: Vec<f64>,
    /// Latency (ms) of each point.
    y: Vec<f64>,
    /// Bounding box of each node's points, in node order: `dims` lows, then `dims` highs.
    boxes: Vec<f64>,
}

impl KdTree {
    /// Builds over the row-major `points` (`y.len() x dims`), which must number at most
    /// `u32::MAX`.
    fn build(points: &[f64], y: &[f64], dims: usize, leaf_size: usize) -> KdTree {
        let mut order: Vec<u32> = (0..y.len() as u32).collect();
        let (mut nodes, mut boxes) = (Vec::new(), Vec::new());
        let mut out = (&mut nodes, &mut boxes);
        build_node(points, dims, leaf_size.max(1), &mut order, 0, &mut out);
        let mut tree_points = Vec::with_capacity(points.len());
        for &i in &order {
            let i = i as usize;
            tree_points.extend_from_slice(&points[i * dims..(i + 1) * dims]);
        }
        KdTree {
            dims,
            nodes,
            points: tree_points,
            y: order.iter().map(|&i| y[i as usize]).collect(),
            boxes,
        }
    }

    #[inline]
    fn point(&self, i: usize) -> &[f64] {
        &self.points[i * self.dims..(i + 1) * self.dims]
    }

    /// Squared distance from `q` to the bounding box of `node`.
    #[inline]
    fn box_dist2(&self, node: usize, q: &[f64]) -> f64 {
        let b = 2 * node * self.dims;
        let (lo, hi) = self.boxes[b..b + 2 * self.dims].split_at(self.dims);
        // Four independent sums, so the additions do not wait on each other.
        let mut acc = [0.0; 4];
        let (mut qc, mut lc, mut hc) = (q.chunks_exact(4), lo.chunks_exact(4), hi.chunks_exact(4));
        for ((v, l), h) in (&mut qc).zip(&mut lc).zip(&mut hc) {
            for i in 0..4 {
                let t = (l[i] - v[i]).max(v[i] - h[i]).max(0.0);
                acc[i] += t * t;
            }
        }
        for (i, ((v, l), h)) in qc
            .remainder()
            .iter()
            .zip(lc.remainder())
            .zip(hc.remainder())
            .enumerate()
        {
            let t = (l - v).max(v - h).max(0.0);
            acc[i] += t * t;
        }
        (acc[0] + acc[1]) + (acc[2] + acc[3])
    }

    /// Adds to `best` the points under `node` nearer than its current worst. `rd` is the squared
    /// distance from `q` to the node's cell (the half-spaces of the splits on the way down),
    /// `off` its per-dimension components.
    fn search(
        &self,
        node: usize,
        q: &[f64],
        rd: f64,
        off: &mut [f64; MAX_FEATURES],
        best: &mut Neighbours,
    ) {
        match self.nodes[node] {
            Node::Leaf { start, end } => {
                for i in start as usize..end as usize {
                    let d2 = dist2(q, self.point(i), best.worst());
                    best.offer(d2, i as u32);
                }
            }
            Node::Inner { dim, split, right } => {
                let d = dim as usize;
                let diff = q[d] - split;
                let (near, far) = if diff < 0.0 {
                    (node + 1, right as usize)
                } else {
                    (right as usize, node + 1)
                };
                // The splitting planes only bound the few coordinates split on the way down; a
                // child's tight bounding box bounds them all, and prunes far more in high
                // dimensions. The plane test is O(1), so it goes first.
                if self.box_dist2(near, q) < best.worst() {
                    self.search(near, q, rd, off, best);
                }
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

    fn size_bytes(&self) -> usize {
        self.nodes.len() * std::mem::size_of::<Node>()
            + (self.points.len() + self.y.len()) * std::mem::size_of::<f64>()
    }
}

/// Builds the subtree over `order` (points `offset..offset + order.len()` in leaf order),
/// appending its nodes and their bounding boxes to `out`.
fn build_node(
    points: &[f64],
    dims: usize,
    leaf_size: usize,
    order: &mut [u32],
    offset: usize,
    out: &mut (&mut Vec<Node>, &mut Vec<f64>),
) {
    let coord = |i: u32, d: usize| points[i as usize * dims + d];
    let me = out.0.len();
    let start = out.1.len();
    out.1.resize(start + 2 * dims, 0.0);
    let (lo, hi) = out.1[start..].split_at_mut(dims);
    lo.fill(f64::INFINITY);
    hi.fill(f64::NEG_INFINITY);
    for &i in order.iter() {
        for (d, (l, h)) in lo.iter_mut().zip(hi.iter_mut()).enumerate() {
            *l = l.min(coord(i, d));
            *h = h.max(coord(i, d));
        }
    }
    let (mut dim, mut widest) = (0, 0.0);
    for (d, (l, h)) in lo.iter().zip(hi.iter()).enumerate() {
        if h - l > widest {
            (dim, widest) = (d, h - l);
        }
    }
    // Small enough, or identical points that cannot be separated (one oversized leaf).
    if order.len() <= leaf_size || widest <= 0.0 {
        out.0.push(Node::Leaf {
            start: offset as u32,
            end: (offset + order.len()) as u32,
        });
        return;
    }
    let mid = order.len() / 2;
    order.select_nth_unstable_by(mid, |&a, &b| coord(a, dim).total_cmp(&coord(b, dim)));
    let split = coord(order[mid], dim);
    out.0.push(Node::Inner {
        dim: dim as u32,
        split,
        right: 0,
    });
    let (left, right) = order.split_at_mut(mid);
    build_node(points, dims, leaf_size, left, offset, out);
    let right_index = out.0.len() as u32;
    build_node(points, dims, leaf_size, right, offset + mid, out);
    if let Node::Inner { right, .. } = &mut out.0[me] {
        *right = right_index;
    }
}

/// Squared distance, or any value >= `bound` once the partial sum reaches it.
#[inline]
fn dist2(q: &[f64], p: &[f64], bound: f64) -> f64 {
    let mut acc = [0.0; 4];
    let mut qc = q.chunks_exact(4);
    let mut pc = p.chunks_exact(4);
    let mut sum = 0.0;
    for (a, b) in (&mut qc).zip(&mut pc) {
        for l in 0..4 {
            let t = a[l] - b[l];
            acc[l] += t * t;
        }
        sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
        if sum >= bound {
            return sum;
        }
    }
    for (a, b) in qc.remainder().iter().zip(pc.remainder()) {
        let t = a - b;
        sum += t * t;
    }
    sum
}

/// The k best (squared distance, point) pairs so far, nearest first.
#[derive(Clone, Copy, Debug)]
struct Neighbours {
    k: usize,
    len: usize,
    d2: [f64; MAX_K],
    idx: [u32; MAX_K],
}

impl Neighbours {
    fn new(k: usize) -> Neighbours {
        Neighbours {
            k: k.clamp(1, MAX_K),
            len: 0,
            d2: [f64::INFINITY; MAX_K],
            idx: [0; MAX_K],
        }
    }

    /// The distance a point must beat to enter (infinite until there are k).
    #[inline]
    fn worst(&self) -> f64 {
        if self.len < self.k {
            f64::INFINITY
        } else {
            self.d2[self.k - 1]
        }
    }

    /// Inserts `(d2, i)` if it is among the k nearest; ties keep the earlier point. Until the
    /// list is full anything enters, so even a non-finite query gets k neighbours.
    #[inline]
    fn offer(&mut self, d2: f64, i: u32) {
        if self.len == self.k && !(d2 < self.d2[self.k - 1]) {
            return;
        }
        let mut p = if self.len < self.k {
            self.len += 1;
            self.len - 1
        } else {
            self.k - 1
        };
        while p > 0 && self.d2[p - 1] > d2 {
            self.d2[p] = self.d2[p - 1];
            self.idx[p] = self.idx[p - 1];
            p -= 1;
        }
        self.d2[p] = d2;
        self.idx[p] = i;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfcast_core::ModuleKind;
    use rand::{RngExt, SeedableRng, rngs::StdRng};

    fn train_set(names: &[&str], rows: &[&[f64]], y: &[f64]) -> TrainSet {
        let cols = names.len();
        TrainSet {
            schema: FeatureSchema {
                kind: ModuleKind::Linear,
                names: names.iter().map(|s| (*s).to_string()).collect(),
            },
            x: Matrix::from_vec(
                rows.len(),
                cols,
                rows.iter().flat_map(|r| r.to_vec()).collect(),
            ),
            y: y.to_vec(),
            groups: (0..rows.len() as u64).collect(),
        }
    }

    fn random_set(rng: &mut StdRng, n: usize, cols: usize) -> TrainSet {
        let names: Vec<String> = (0..cols).map(|j| format!("f{j}")).collect();
        let data = (0..n * cols)
            .map(|_| (rng.random::<f64>() * 8.0).exp())
            .collect();
        TrainSet {
            schema: FeatureSchema {
                kind: ModuleKind::Conv2d,
                names,
            },
            x: Matrix::from_vec(n, cols, data),
            y: (0..n).map(|_| 0.01 + rng.random::<f64>()).collect(),
            groups: vec![0; n],
        }
    }

    fn params(k: usize) -> KnnParams {
        KnnParams {
            k,
            ..KnnParams::default()
        }
    }

    fn message(err: Error) -> String {
        match err {
            Error::InvalidParams { model, message } => {
                assert_eq!(model, "knn");
                message
            }
            other => panic!("expected invalid parameters, got {other:?}"),
        }
    }

    #[test]
    fn k1_returns_the_nearest_training_target() {
        let set = train_set(
            &["a", "b"],
            &[
                &[1.0, 10.0],
                &[100.0, 10.0],
                &[1.0, 1000.0],
                &[50.0, 5000.0],
            ],
            &[0.3, 1.7, 2.9, 0.123_456_789],
        );
        let m = params(1).fit(&set).unwrap();
        for (row, y) in set.x.iter_rows().zip(&set.y) {
            assert_eq!(m.predict_row(row).unwrap(), *y);
        }
        // Near (but not on) the second row.
        assert_eq!(m.predict_row(&[90.0, 12.0]).unwrap(), 1.7);
    }

    #[test]
    fn exact_match_returns_that_row_with_k_above_one() {
        let set = train_set(
            &["a"],
            &[&[1.0], &[2.0], &[3.0], &[4.0]],
            &[1.0, 2.0, 3.0, 4.0],
        );
        let m = params(3).fit(&set).unwrap();
        assert_eq!(m.predict_row(&[3.0]).unwrap(), 3.0);
    }

    #[test]
    fn two_equidistant_neighbours_give_their_geometric_mean() {
        // ln(1 + x) is 0, 2 and 9 on the rows and 1 on the query: halfway between the first two.
        let e = std::f64::consts::E;
        let set = train_set(
            &["a"],
            &[&[0.0], &[e * e - 1.0], &[e.powi(9) - 1.0]],
            &[2.0, 8.0, 1000.0],
        );
        for weighted in [true, false] {
            let p = KnnParams {
                k: 2,
                weighted,
                ..KnnParams::default()
            };
            let got = p.fit(&set).unwrap().predict_row(&[e - 1.0]).unwrap();
            assert!((got - 4.0).abs() < 1e-9, "weighted {weighted}: {got}");
        }
    }

    #[test]
    fn inverse_distance_weighting_favours_the_nearer_neighbour() {
        let e = std::f64::consts::E;
        let set = train_set(&["a"], &[&[0.0], &[e.powi(4) - 1.0]], &[1.0, e.powi(4)]);
        let m = params(2).fit(&set).unwrap();
        // At ln(1 + x) = 1: distances 1 and 3 in log units, weights 3/4 and 1/4 on ln y = 0, 4.
        let got = m.predict_row(&[e - 1.0]).unwrap();
        assert!((got.ln() - 1.0).abs() < 1e-9, "{got}");
    }

    #[test]
    fn constant_and_duplicate_columns_are_left_out() {
        let rows: Vec<Vec<f64>> = (0..20)
            .map(|i| {
                let a = f64::from(i * i);
                vec![a, 7.0, a, f64::from(i % 3)]
            })
            .collect();
        let refs: Vec<&[f64]> = rows.iter().map(Vec::as_slice).collect();
        let y: Vec<f64> = (0..20).map(|i| 1.0 + f64::from(i)).collect();
        let set = train_set(&["a", "constant", "copy", "b"], &refs, &y);
        let m = KnnParams::default().fit(&set).unwrap();
        assert_eq!(m.indexed_features().collect::<Vec<_>>(), ["a", "b"]);
        // The left-out columns do not move predictions.
        let p = m.predict_row(&[30.0, 7.0, 30.0, 1.0]).unwrap();
        assert_eq!(m.predict_row(&[30.0, 1e6, 0.0, 1.0]).unwrap(), p);

        let keep_all = KnnParams {
            max_correlation: 1.0,
            feature_weights: vec![("b".into(), 0.0)],
            ..KnnParams::default()
        };
        let m = keep_all.fit(&set).unwrap();
        assert_eq!(m.indexed_features().collect::<Vec<_>>(), ["a", "copy"]);
    }

    #[test]
    fn feature_weights_scale_distances() {
        // Standardised, the rows sit at (-1, -1) and (1, 1) and the query near (-0.7, 0.53):
        // nearer the first row until `b` weighs much more than `a`.
        // Two rows make any two columns perfectly correlated: keep both.
        let set = train_set(&["a", "b"], &[&[0.0, 0.0], &[100.0, 1.0]], &[1.0, 2.0]);
        let query = [1.0, 0.7];
        let p = KnnParams {
            k: 1,
            max_correlation: 1.0,
            ..KnnParams::default()
        };
        assert_eq!(p.fit(&set).unwrap().predict_row(&query).unwrap(), 1.0);
        for weights in [vec![("b".into(), 10.0)], vec![("a".into(), 0.0)]] {
            let p = KnnParams {
                feature_weights: weights,
                ..p.clone()
            };
            assert_eq!(p.fit(&set).unwrap().predict_row(&query).unwrap(), 2.0);
        }
    }

    /// Reference: every point, in leaf order, through the same neighbour list.
    fn brute_force(tree: &KdTree, q: &[f64], k: usize) -> Neighbours {
        let mut best = Neighbours::new(k);
        for i in 0..tree.y.len() {
            best.offer(dist2(q, tree.point(i), f64::INFINITY), i as u32);
        }
        best
    }

    #[test]
    fn kd_tree_finds_the_same_neighbours_as_brute_force() {
        let mut rng = StdRng::seed_from_u64(7);
        for (n, dims, leaf_size) in [
            (1, 3, 12),
            (500, 1, 4),
            (2000, 3, 12),
            (1500, 9, 1),
            (800, 30, 16),
        ] {
            let points: Vec<f64> = (0..n * dims)
                .map(|_| rng.random::<f64>() * 4.0 - 2.0)
                .collect();
            let y = vec![1.0; n];
            let tree = KdTree::build(&points, &y, dims, leaf_size);
            for k in [1, 5, MAX_K.min(n)] {
                for _ in 0..50 {
                    // Some queries fall outside the data.
                    let q: Vec<f64> = (0..dims).map(|_| rng.random::<f64>() * 6.0 - 3.0).collect();
                    let mut best = Neighbours::new(k);
                    let mut off = [0.0; MAX_FEATURES];
                    tree.search(0, &q, 0.0, &mut off, &mut best);
                    let reference = brute_force(&tree, &q, k);
                    assert_eq!(best.len, k.min(n));
                    assert_eq!(best.idx[..best.len], reference.idx[..reference.len]);
                    assert_eq!(best.d2[..best.len], reference.d2[..reference.len]);
                }
            }
        }
    }

    #[test]
    fn tree_leaves_hold_every_point_once() {
        let mut rng = StdRng::seed_from_u64(3);
        let (n, dims) = (1000, 4);
        let points: Vec<f64> = (0..n * dims).map(|_| rng.random::<f64>()).collect();
        let y: Vec<f64> = (0..n).map(|i| i as f64).collect();
        let tree = KdTree::build(&points, &y, dims, 8);
        let mut covered = vec![0; n];
        for node in &tree.nodes {
            if let Node::Leaf { start, end, .. } = node {
                assert!(end - start <= 8);
                for c in &mut covered[*start as usize..*end as usize] {
                    *c += 1;
                }
            }
        }
        assert!(covered.iter().all(|c| *c == 1));
        // Each point travelled with its target.
        for (i, yi) in tree.y.iter().enumerate() {
            let orig = *yi as usize;
            assert_eq!(tree.point(i), &points[orig * dims..(orig + 1) * dims]);
        }
    }

    #[test]
    fn identical_rows_do_not_break_the_tree() {
        let rows = vec![[5.0, 5.0]; 100];
        let refs: Vec<&[f64]> = rows.iter().map(|r| r.as_slice()).collect();
        let y: Vec<f64> = (0..100).map(|i| 1.0 + f64::from(i % 2)).collect();
        let m = KnnParams {
            leaf_size: 1,
            ..KnnParams::default()
        }
        .fit(&train_set(&["a", "b"], &refs, &y))
        .unwrap();
        let p = m.predict_row(&[6.0, 9.0]).unwrap();
        assert!(p >= 1.0 && p <= 2.0, "{p}");
    }

    #[test]
    fn save_json_load_gives_identical_predictions() {
        let mut rng = StdRng::seed_from_u64(11);
        let set = random_set(&mut rng, 300, 6);
        let model = params(4).fit(&set).unwrap();
        let json = serde_json::to_string(&model.to_saved()).unwrap();
        assert!(json.starts_with(r#"{"model":"knn""#), "{}", &json[..40]);
        let loaded = serde_json::from_str::<SavedModel>(&json)
            .unwrap()
            .into_regressor();
        assert_eq!(loaded.name(), "knn");
        assert_eq!(loaded.schema(), model.schema());
        let queries = random_set(&mut rng, 100, 6).x;
        let (a, b) = (
            model.predict(&queries).unwrap(),
            loaded.predict(&queries).unwrap(),
        );
        // Without serde_json's `float_roundtrip` feature a parsed float may be one ulp off, so
        // predictions agree to rounding rather than bit for bit.
        for (a, b) in a.iter().zip(&b) {
            assert!((a - b).abs() <= 1e-12 * a.abs(), "{a} vs {b}");
        }
        // Training rows still land on (or within rounding of) themselves.
        for (row, y) in set.x.iter_rows().zip(&set.y).take(50) {
            let got = loaded.predict_row(row).unwrap();
            assert!((got - y).abs() <= 1e-12 * y, "{got} vs {y}");
        }
    }

    #[test]
    fn wrong_width_is_an_error() {
        let set = train_set(&["a", "b"], &[&[1.0, 2.0], &[3.0, 4.0]], &[1.0, 2.0]);
        let m = params(1).fit(&set).unwrap();
        match m.predict_row(&[1.0]) {
            Err(Error::FeatureWidth {
                expected: 2,
                got: 1,
            }) => {}
            other => panic!("expected a width error, got {other:?}"),
        }
        assert!(m.predict(&Matrix::from_vec(1, 3, vec![1.0; 3])).is_err());
    }

    #[test]
    fn validation_names_the_bad_value() {
        let cases = [
            (params(0), "k must be at least 1, got 0"),
            (params(33), "k must be at most 32, got 33"),
            (
                KnnParams {
                    leaf_size: 0,
                    ..KnnParams::default()
                },
                "leaf_size must be at least 1, got 0",
            ),
            (
                KnnParams {
                    max_correlation: f64::NAN,
                    ..KnnParams::default()
                },
                "max_correlation must be in (0, 1], got NaN",
            ),
            (
                KnnParams {
                    feature_weights: vec![("flops".into(), -1.0)],
                    ..KnnParams::default()
                },
                "weight of feature `flops` must be finite and at least 0, got -1",
            ),
        ];
        let rows: Vec<[f64; 1]> = (0..6).map(|i| [f64::from(i)]).collect();
        let refs: Vec<&[f64]> = rows.iter().map(|r| r.as_slice()).collect();
        let set = train_set(&["a"], &refs, &[1.0; 6]);
        for (p, want) in cases {
            assert_eq!(message(p.validate().unwrap_err()), want);
            assert_eq!(message(p.fit(&set).unwrap_err()), want);
        }
        let unknown = KnnParams {
            feature_weights: vec![("nope".into(), 1.0)],
            ..KnnParams::default()
        };
        assert!(message(unknown.fit(&set).unwrap_err()).contains("`nope`"));
        // More neighbours than rows.
        assert!(matches!(params(7).fit(&set), Err(Error::InvalidData(_))));
    }

    #[test]
    fn params_deserialize_with_defaults() {
        let p: KnnParams = serde_json::from_str(r#"{"k": 3}"#).unwrap();
        assert_eq!(p, params(3));
        assert!(serde_json::from_str::<KnnParams>(r#"{"kk": 3}"#).is_err());
    }

    /// Rows like the default conv2d sweep: log-uniform channels and sizes, kernel, stride,
    /// padding and depthwise choices, forward work under 1 GFLOP, each configuration in both
    /// phases; through the real feature code.
    fn conv_rows(rng: &mut StdRng, n: usize) -> TrainSet {
        use perfcast_core::{
            Caches, Context, Conv2d, DeviceKind, DeviceSpec, ModuleSpec, Phase, SpecSource,
        };
        let device = DeviceSpec {
            name: "bench".into(),
            kind: DeviceKind::Cpu,
            peak_gflops: 200.0,
            mem_bandwidth_gbs: 20.0,
            cores: 2,
            threads: 2,
            clock_mhz: 3000.0,
            memory_gb: 8.0,
            cache_mb: 16.0,
            caches: Caches::default(),
            source: SpecSource::Measured,
        };
        let schema = FeatureSchema::for_kind(ModuleKind::Conv2d);
        let mut x = Matrix::with_cols(schema.len());
        let mut y = Vec::new();
        let pick =
            |rng: &mut StdRng, xs: &[usize]| xs[(rng.random::<f64>() * xs.len() as f64) as usize];
        let log_uniform = |rng: &mut StdRng, lo: f64, hi: f64| {
            (lo.ln() + rng.random::<f64>() * (hi / lo).ln())
                .exp()
                .round() as usize
        };
        while y.len() < n {
            let kernel = pick(rng, &[1, 3, 3, 5, 7]);
            let cin = log_uniform(rng, 1.0, 512.0);
            let depthwise = rng.random::<f64>() < 0.2;
            let spec = ModuleSpec::Conv2d(Conv2d {
                in_channels: cin,
                out_channels: if depthwise {
                    cin
                } else {
                    log_uniform(rng, 1.0, 512.0)
                },
                input_hw: [log_uniform(rng, 4.0, 224.0); 2],
                kernel: [kernel; 2],
                stride: [pick(rng, &[1, 1, 2]); 2],
                padding: [if rng.random::<f64>() < 0.67 {
                    kernel / 2
                } else {
                    0
                }; 2],
                dilation: [1, 1],
                groups: if depthwise { cin } else { 1 },
                bias: true,
            });
            let batch = pick(rng, &[1, 2, 4, 8, 16, 32]);
            if spec.validate().is_err() || perfcast_core::features::derive(&spec, batch).flops > 1e9
            {
                continue;
            }
            for phase in [Phase::Inference, Phase::Training] {
                let context = Context {
                    batch,
                    phase,
                    threads: 1,
                    utilisation: 0.0,
                };
                let row = crate::features::row(&spec, &context, &device);
                let roofline = row[schema.index("roofline_ms").unwrap()];
                // A smooth, made-up latency: the roofline time, slowed down for small kernels
                // and depthwise convolutions, plus a fixed overhead.
                let slow = if depthwise { 4.0 } else { 1.0 } * (1.0 + 2.0 / kernel as f64);
                y.push(roofline * slow + 0.005);
                x.push_row(&row);
            }
        }
        x = x.select(&(0..n).collect::<Vec<_>>());
        y.truncate(n);
        TrainSet {
            schema,
            x,
            y,
            groups: vec![0; n],
        }
    }

    /// One-row prediction time. Run with
    /// `cargo test --release -p perfcast-models knn::tests::prediction_time -- --ignored --nocapture`.
    #[test]
    #[ignore = "timing report, not a check"]
    fn prediction_time() {
        use std::hint::black_box;
        use std::time::Instant;
        let mut rng = StdRng::seed_from_u64(1);
        for n in [2_000, 100_000] {
            let set = conv_rows(&mut rng, n);
            let queries = conv_rows(&mut rng, 1_000).x;
            let start = Instant::now();
            let model = KnnParams::default().fit(&set).unwrap();
            let fit = start.elapsed();
            let mut sum = 0.0;
            // Warm up, then time passes over 1,000 held-out rows; report the best pass.
            for q in queries.iter_rows() {
                sum += model.predict_row(q).unwrap();
            }
            let mut per_row = f64::INFINITY;
            for _ in 0..20 {
                let start = Instant::now();
                for q in queries.iter_rows() {
                    sum += model.predict_row(black_box(q)).unwrap();
                }
                per_row = per_row.min(start.elapsed().as_secs_f64() / queries.rows() as f64);
            }
            black_box(sum);
            println!(
                "knn n={n}: fit {:.1} ms, predict_row {:.2} us (best of 20 passes over 1000 rows), \
                 {} axes from {} features: {}",
                fit.as_secs_f64() * 1e3,
                per_row * 1e6,
                model.index_dims(),
                model.indexed_features().count(),
                model.indexed_features().collect::<Vec<_>>().join(",")
            );
        }
    }
}
