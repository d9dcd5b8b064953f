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
//! sizes) are nearly linear in the logs of the configuration columns. Fitting therefore
//!
//! - keeps only the columns that vary and are not near-copies of an earlier kept column
//!   ([`KnnParams::max_correlation`]), so each signal counts once in the distance;
//! - rotates the kept columns onto their principal axes and leaves out the axes with the least
//!   variance ([`KnnParams::variance_kept`]): the rotation keeps distances, the dropped axes
//!   hold 10% of the variance, and the tree indexes fewer dimensions (for conv2d, under half
//!   of the 22 kept columns), along the directions the data actually spreads in;
//! - applies optional hand-set [`KnnParams::feature_weights`].
//!
//! On the datasets in `datasets/` (two measured CPUs, DeepBench, Justus and NeuSight imports;
//! median error of 5-fold cross-validation by configuration group), dropping near-copies lowered
//! the error of conv2d by 1-14 points and of max-pool by 4-8, and raised ReLU's by 2-3 and
//! batch-norm's by up to 2; keeping 99% of the variance instead of all of it moved no error by
//! more than a point.
//!
//! The index is a k-d tree, built once at fit time into flat arrays: nodes in preorder with the
//! bounding box of each node's points, points in leaf order in blocks of 32, stored in
//! single precision and coordinate-major so a leaf's distances are computed in SIMD lanes.
//! Splits are at the median (rounded to whole leaves) of the dimension of widest spread
//! (variance). The search is branch and bound: the child on the query's side of the split
//! first, then the other unless the query's distance to the splitting plane (accumulated per
//! dimension over the planes on the way down), or to the child's bounding box, already exceeds
//! the k-th best distance.
//! Prediction uses fixed-size stack buffers and never allocates, which bounds `k` by [`MAX_K`]
//! and the indexed columns by [`MAX_FEATURES`].
//!
//! ```
//! use perfcast_core::ModuleKind;
//! use perfcast_models::knn::KnnParams;
//! use perfcast_models::{FeatureSchema, Fit, Matrix, Regressor, TrainSet};
//!
//! let schema = FeatureSchema { kind: ModuleKind::Linear, names: vec!["flops".into()] };
//! let x = Matrix::from_vec(3, 1, vec![1e3, 1e6, 1e9]);
//! let set = TrainSet { schema, x, y: vec![0.01, 0.1, 10.0], groups: vec![0, 1, 2] };
//! let model = KnnParams { k: 1, ..KnnParams::default() }.fit(&set).unwrap();
//! assert_eq!(model.predict_row(&[2e6]).unwrap(), 0.1);
//! ```

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::features::{FeatureSchema, TrainSet};
use crate::matrix::Matrix;
use crate::regressor::{self, Fit, FitStandardiser, LogStandardiser};
pub use perfcast_predict::knn::{Embedding, FittedKnn, KdTree, MAX_FEATURES, MAX_K};

const MODEL: &str = "knn";

/// Hyper-parameters of k nearest neighbours.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KnnParams {
    /// Neighbours averaged per prediction, 1 to [`MAX_K`]; default 5.
    pub k: usize,
    /// Weight neighbours by inverse distance (otherwise equally); default true.
    pub weighted: bool,
    /// A varying column whose |correlation| with an earlier kept column exceeds this is left out
    /// (0 < value <= 1; 1 keeps every varying column); default 0.999.
    pub max_correlation: f64,
    /// Principal axes the tree indexes: the fewest covering this share of the variance
    /// (0 < value <= 1; 1 keeps every axis); default 0.9 (against 0.99 it predicted 1.3-1.5x
    /// faster, 1-4 points more accurately on CPU and Justus conv2d, within 0.3 points on NeuSight).
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
            max_correlation: 0.999,
            variance_kept: 0.9,
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
        // Alignment steps are categorical: as distances they pull neighbours of another size
        // closer than neighbours of the same size, so the metric leaves them out (trees and
        // MEDN use them; docs/accuracy.md#figures-behind-code-choices).
        for name in crate::features::ALIGNMENT {
            if let Some(j) = schema.index(name) {
                weights[j] = 0.0;
            }
        }
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

impl crate::params::FamilyParams for KnnParams {
    fn name(&self) -> &'static str {
        MODEL
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
        let embedding = fit_embedding(&data.x, &weights, self.max_correlation, self.variance_kept)?;
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
            tree: KdTree::build(&points, &data.y, dims),
        })
    }
}

/// Fits the [`Embedding`]: the columns worth indexing, their log standardisation (feature
/// weights folded into the scales), and the principal axes covering `variance_kept`.
fn fit_embedding(
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
    let mut kept = d;
    if variance_kept < 1.0 {
        let mut cum = 0.0;
        for (i, v) in values.iter().enumerate() {
            cum += v.max(0.0);
            if cum >= variance_kept * total {
                kept = i + 1;
                break;
            }
        }
    }
    Ok(Embedding {
        features,
        standardiser,
        loadings: (0..d * kept)
            .map(|i| vectors[(i % kept) * d + i / kept])
            .collect(),
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regressor::{Regressor, SavedModel};
    use perfcast_core::ModuleKind;
    use perfcast_core::rng::SplitMix64;

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

    fn random_set(rng: &mut SplitMix64, n: usize, cols: usize) -> TrainSet {
        let names: Vec<String> = (0..cols).map(|j| format!("f{j}")).collect();
        let data = (0..n * cols).map(|_| (rng.unit() * 8.0).exp()).collect();
        TrainSet {
            schema: FeatureSchema {
                kind: ModuleKind::Conv2d,
                names,
            },
            x: Matrix::from_vec(n, cols, data),
            y: (0..n).map(|_| 0.01 + rng.unit()).collect(),
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
        // ln(1 + x) is 0, 2 and 9 on the rows and 1 on the query: halfway between the first two
        // (up to the index's single precision).
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
            assert!((got - 4.0).abs() < 1e-6, "weighted {weighted}: {got}");
        }
    }

    #[test]
    fn inverse_distance_weighting_favours_the_nearer_neighbour() {
        let e = std::f64::consts::E;
        let set = train_set(&["a"], &[&[0.0], &[e.powi(4) - 1.0]], &[1.0, e.powi(4)]);
        let m = params(2).fit(&set).unwrap();
        // At ln(1 + x) = 1: distances 1 and 3 in log units, weights 3/4 and 1/4 on ln y = 0, 4.
        let got = m.predict_row(&[e - 1.0]).unwrap();
        assert!((got.ln() - 1.0).abs() < 1e-6, "{got}");
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

    #[test]
    fn identical_rows_do_not_break_the_tree() {
        let rows = vec![[5.0, 5.0]; 100];
        let refs: Vec<&[f64]> = rows.iter().map(|r| r.as_slice()).collect();
        let y: Vec<f64> = (0..100).map(|i| 1.0 + f64::from(i % 2)).collect();
        let m = KnnParams::default()
            .fit(&train_set(&["a", "b"], &refs, &y))
            .unwrap();
        assert_eq!(m.index_dims(), 0);
        let p = m.predict_row(&[6.0, 9.0]).unwrap();
        assert!((1.0..=2.0).contains(&p), "{p}");
        // Identical points in a varying set: leaves still hold at most LEAF points.
        let mut rows = vec![[5.0, 5.0]; 100];
        rows.push([50.0, 7.0]);
        let refs: Vec<&[f64]> = rows.iter().map(|r| r.as_slice()).collect();
        let m = params(1)
            .fit(&train_set(&["a", "b"], &refs, &[1.0; 101]))
            .unwrap();
        assert!(m.tree.n_nodes() > 1);
        assert_eq!(m.predict_row(&[50.0, 7.0]).unwrap(), 1.0);
    }

    #[test]
    fn symmetric_eigen_reconstructs_the_matrix() {
        let mut rng = SplitMix64::new(5);
        let d = 7;
        let b: Vec<f64> = (0..d * d).map(|_| rng.unit() - 0.5).collect();
        // a = b b^T: symmetric, positive semi-definite.
        let a: Vec<f64> = (0..d * d)
            .map(|i| {
                (0..d)
                    .map(|k| b[(i / d) * d + k] * b[(i % d) * d + k])
                    .sum()
            })
            .collect();
        let (values, vectors) = symmetric_eigen(a.clone(), d);
        assert!(values.windows(2).all(|w| w[0] >= w[1]), "{values:?}");
        for i in 0..d {
            for j in 0..d {
                let dot: f64 = (0..d)
                    .map(|k| vectors[i * d + k] * vectors[j * d + k])
                    .sum();
                assert!((dot - f64::from(u8::from(i == j))).abs() < 1e-10);
                let rebuilt: f64 = (0..d)
                    .map(|k| values[k] * vectors[k * d + i] * vectors[k * d + j])
                    .sum();
                assert!((rebuilt - a[i * d + j]).abs() < 1e-10);
            }
        }
    }

    #[test]
    fn the_rotation_keeps_distances() {
        let mut rng = SplitMix64::new(9);
        let set = random_set(&mut rng, 200, 5);
        let full = LogStandardiser::fit(&set.x);
        let p = KnnParams {
            variance_kept: 1.0,
            ..KnnParams::default()
        };
        let m = p.fit(&set).unwrap();
        assert_eq!(m.index_dims(), 5);
        let embed = |row: &[f64]| {
            let mut out = [0.0; MAX_FEATURES];
            m.embedding.apply(row, &mut out);
            out
        };
        let (mut za, mut zb) = (vec![0.0; 5], vec![0.0; 5]);
        for i in 1..50 {
            let (a, b) = (set.x.row(0), set.x.row(i));
            full.transform_into(a, &mut za);
            full.transform_into(b, &mut zb);
            let want: f64 = za.iter().zip(&zb).map(|(u, v)| (u - v).powi(2)).sum();
            let (ea, eb) = (embed(a), embed(b));
            let got: f64 = ea
                .iter()
                .zip(&eb)
                .map(|(u, v)| f64::from(u - v).powi(2))
                .sum();
            assert!((got - want).abs() < 1e-5 * want, "{got} vs {want}");
        }
    }

    #[test]
    fn save_json_load_gives_identical_predictions() {
        let mut rng = SplitMix64::new(11);
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
        // serde_json's `float_roundtrip` makes every float come back bit for bit.
        assert_eq!(a, b);
        // Training rows still land on themselves.
        for (row, y) in set.x.iter_rows().zip(&set.y).take(50) {
            assert_eq!(loaded.predict_row(row).unwrap(), *y);
        }
    }

    #[test]
    fn wrong_width_is_an_error() {
        let set = train_set(&["a", "b"], &[&[1.0, 2.0], &[3.0, 4.0]], &[1.0, 2.0]);
        let m = params(1).fit(&set).unwrap();
        match m.predict_row(&[1.0]) {
            Err(perfcast_predict::Error::FeatureWidth {
                expected: 2,
                got: 1,
            }) => {}
            other => panic!("expected a width error, got {other:?}"),
        }
        assert!(m.predict(&Matrix::from_vec(1, 3, vec![1.0; 3])).is_err());
    }

    #[test]
    fn an_infinite_feature_predicts_nan() {
        let set = train_set(
            &["a", "b"],
            &[&[1.0, 2.0], &[3.0, 4.0], &[5.0, 1.0]],
            &[1.0; 3],
        );
        let m = params(2).fit(&set).unwrap();
        assert!(m.predict_row(&[f64::INFINITY, 2.0]).unwrap().is_nan());
        // NaN counts as 0 in the log transform.
        let nan = m.predict_row(&[f64::NAN, 2.0]).unwrap();
        assert_eq!(nan, m.predict_row(&[0.0, 2.0]).unwrap());
    }

    #[test]
    fn validation_names_the_bad_value() {
        let cases = [
            (params(0), "k must be at least 1, got 0"),
            (params(33), "k must be at most 32, got 33"),
            (
                KnnParams {
                    variance_kept: 0.0,
                    ..KnnParams::default()
                },
                "variance_kept must be in (0, 1], got 0",
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
    fn conv_rows(rng: &mut SplitMix64, n: usize) -> TrainSet {
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
            software: None,
            launch_us: None,
            tdp_w: None,
            dtype: Default::default(),
            peaks: Default::default(),
            links: Default::default(),
        };
        let schema = FeatureSchema::for_kind(ModuleKind::Conv2d);
        let mut x = Matrix::with_cols(schema.len());
        let mut y = Vec::new();
        let pick = |rng: &mut SplitMix64, xs: &[usize]| xs[(rng.unit() * xs.len() as f64) as usize];
        let log_uniform = |rng: &mut SplitMix64, lo: f64, hi: f64| {
            (lo.ln() + rng.unit() * (hi / lo).ln()).exp().round() as usize
        };
        while y.len() < n {
            let kernel = pick(rng, &[1, 3, 3, 5, 7]);
            let cin = log_uniform(rng, 1.0, 512.0);
            let depthwise = rng.unit() < 0.2;
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
                padding: [if rng.unit() < 0.67 { kernel / 2 } else { 0 }; 2],
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

    /// One-row prediction time on sweep-like conv2d rows, 2,000 and 100,000 of them:
    ///
    /// `cargo test --release -p perfcast-models knn::tests::prediction_time -- --ignored
    /// --nocapture`
    #[test]
    #[ignore = "timing report, not a check"]
    fn prediction_time() {
        use std::hint::black_box;
        use std::time::Instant;
        let mut rng = SplitMix64::new(1);
        for n in [2_000, 100_000] {
            let set = conv_rows(&mut rng, n);
            let queries = conv_rows(&mut rng, 1_000).x;
            let start = Instant::now();
            let model = KnnParams::default().fit(&set).unwrap();
            let fit = start.elapsed();
            // Warm up, then time 50 passes over 1,000 held-out rows.
            let mut sum = 0.0;
            for q in queries.iter_rows() {
                sum += model.predict_row(q).unwrap();
            }
            let mut passes: Vec<f64> = (0..50)
                .map(|_| {
                    let start = Instant::now();
                    for q in queries.iter_rows() {
                        sum += model.predict_row(black_box(q)).unwrap();
                    }
                    start.elapsed().as_secs_f64() * 1e6 / queries.rows() as f64
                })
                .collect();
            black_box(sum);
            passes.sort_by(f64::total_cmp);
            println!(
                "knn, {n} rows: fit {:.1} ms; predict_row {:.2} us median, {:.2} us best \
                 (50 passes over 1,000 held-out rows); {} axes from {} features, {} KiB",
                fit.as_secs_f64() * 1e3,
                passes[passes.len() / 2],
                passes[0],
                model.index_dims(),
                model.indexed_features().count(),
                model.size_bytes() / 1024,
            );
        }
    }
}
