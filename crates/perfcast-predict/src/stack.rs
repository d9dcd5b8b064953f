//! `ridge-trees`: gradient-boosted trees fitted on what a degree-2 ridge regression misses,
//! both reading the row plus a few conv2d features of the call the CPU backend makes.
//!
//! Ridge in log space captures the smooth power-law scaling of latency with the work and the
//! shapes; the trees then fit the steps a smooth model cannot (dispatch thresholds, padding of
//! SIMD tiles). `trees` alone boosts from a degree-1 ridge, which leaves the curvature to the
//! trees; the degree-2 base and the call features are what make it beat both on CPU conv2d
//! (docs/accuracy.md#cpu-conv2d-ridge-trees).
//!
//! The conv2d features describe the GEMM burn-flex actually calls, which the row's whole-layer
//! GEMM (`gemm_m` = batch x positions x groups) hides: a 1x1 conv is one GEMM per image and
//! group on the NCHW input (`M = c_out/g`, `N = positions`, `K = c_in/g`); the im2col path
//! converts the input to NHWC, then per image, group and 512-position tile unfolds a column
//! buffer and calls a GEMM with `N <= 512`. The `gemm` crate switches kernels on these
//! per-call shapes (a horizontal kernel for `M x N <= 256`, GEMV for `M = 1`, GEVV for
//! `K <= 2`) and pads `M` and `N` to its register tiles. They are computed from the row's own
//! configuration columns inside the model, so the feature schema (and its hash) is unchanged.
//!
//! burn-flex runs four conv2d algorithms (im2col + GEMM, the 1x1 GEMM, depthwise and
//! small-channel direct loops) whose costs scale differently, and one quadratic in the log
//! features bends to serve them all: a second degree-2 ridge per algorithm fits what the
//! shared one misses on that algorithm's rows (perfcast-models' `RidgeTreesParams::path_lambda`),
//! and the trees boost from the product.

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::features::FeatureSchema;
use crate::matrix::Matrix;
use crate::regressor::{Regressor, SavedModel, check_width};
use crate::residual::{Estimate, StackWith};
use crate::ridge::FittedRidge;
use crate::trees::FittedTrees;

const MODEL: &str = "ridge-trees";

/// Names of the conv2d call features, appended to the row in this order.
pub const CONV_CALL: &[&str] = &[
    "call_count",
    "call_m",
    "call_n",
    "call_k",
    "call_flops",
    "call_horizontal",
    "call_gemv",
    "call_gevv",
    "call_m_pad16",
    "call_m_pad48",
    "call_n_pad8",
    "call_tiles",
    "call_last_tile",
    "call_padded_flops",
    "nhwc_elems",
    "im2col_elems",
    "out_elems_total",
    "call_pack_rhs",
];

/// Row columns the call features are computed from.
const INPUTS: [&str; 16] = [
    "in_channels",
    "out_channels",
    "in_h",
    "in_w",
    "kernel_h",
    "kernel_w",
    "stride_h",
    "stride_w",
    "pad_h",
    "pad_w",
    "dilation_h",
    "dilation_w",
    "groups",
    "batch",
    "conv_pointwise",
    "conv_depthwise",
];

/// Index of `conv_small_channel` after [`INPUTS`] in [`CallColumns::at`].
const SMALL: usize = INPUTS.len();

/// Indices of `conv_pointwise` and `conv_depthwise` in [`INPUTS`].
const POINTWISE: usize = 14;
const DEPTHWISE: usize = 15;

/// Output positions per im2col tile in burn-flex's conv.
const TILE: f64 = 512.0;

/// Widest extended row predicted on the stack.
pub const MAX_EXTENDED: usize = 96;

/// Where the call features' inputs sit in a row of one schema.
#[derive(Clone, Debug, PartialEq)]
pub struct CallColumns {
    at: [usize; INPUTS.len() + 1],
}

impl CallColumns {
    /// The columns in `schema`, or `None` when it lacks one (kinds other than conv2d).
    pub fn of(schema: &FeatureSchema) -> Option<CallColumns> {
        let mut at = [0; INPUTS.len() + 1];
        for (slot, name) in at
            .iter_mut()
            .zip(INPUTS.iter().chain(&["conv_small_channel"]))
        {
            *slot = schema.index(name)?;
        }
        Some(CallColumns { at })
    }

    /// Appends [`CONV_CALL`] of `row` to `out` (`out` holds exactly that many values).
    pub fn fill(&self, row: &[f64], out: &mut [f64]) {
        let v = |i: usize| row[self.at[i]];
        let [
            cin,
            cout,
            h,
            w,
            kh,
            kw,
            sh,
            sw,
            ph,
            pw,
            dh,
            dw,
            g,
            batch,
            pointwise,
            depthwise,
        ] = std::array::from_fn(v);
        let small = v(SMALL);
        let g = g.max(1.0);
        let out_size = |size: f64, k: f64, s: f64, p: f64, d: f64| {
            ((size + 2.0 * p - d.max(1.0) * (k - 1.0) - 1.0) / s.max(1.0))
                .floor()
                .max(0.0)
                + 1.0
        };
        let positions = out_size(h, kh, sh, ph, dh) * out_size(w, kw, sw, pw, dw);
        let im2col = (1.0 - pointwise) * (1.0 - depthwise) * (1.0 - small);
        let gemm = pointwise + im2col;
        let (cin_g, cout_g) = (cin / g, cout / g);
        let tiles = (positions / TILE).ceil().max(1.0);
        let m = cout_g;
        let n = if pointwise > 0.0 {
            positions
        } else {
            positions / tiles
        };
        let k = if pointwise > 0.0 {
            cin_g
        } else {
            cin_g * kh * kw
        };
        let calls = if pointwise > 0.0 {
            batch * g
        } else if im2col > 0.0 {
            batch * tiles * g
        } else {
            batch * cout
        };
        let pad = |x: f64, to: f64| {
            if x > 0.0 {
                (x / to).ceil() * to / x
            } else {
                0.0
            }
        };
        let flag = |b: bool| f64::from(u8::from(b));
        let values = [
            calls,
            gemm * m,
            gemm * n,
            gemm * k,
            gemm * 2.0 * m * n * k,
            im2col * flag(m * n <= 256.0),
            gemm * flag(m <= 1.0),
            gemm * flag(k <= 2.0),
            gemm * pad(m, 16.0),
            gemm * pad(m, 48.0),
            gemm * pad(n, 8.0),
            im2col * tiles,
            im2col * (positions - (tiles - 1.0) * TILE),
            gemm * calls * (m / 16.0).ceil() * 16.0 * (n / 8.0).ceil() * 8.0 * k,
            im2col * batch * cin * h * w,
            im2col * batch * positions * cin_g * kh * kw * g,
            batch * cout * positions,
            gemm * flag(m > 96.0),
        ];
        out.copy_from_slice(&values);
    }
}

/// The schema the inner models read: the row, then [`CONV_CALL`] when the kind has them.
pub fn extended_schema(schema: &FeatureSchema, calls: Option<&CallColumns>) -> FeatureSchema {
    let mut names = schema.names.clone();
    if calls.is_some() {
        names.extend(CONV_CALL.iter().map(|s| (*s).to_string()));
    }
    FeatureSchema {
        kind: schema.kind,
        names,
    }
}

/// Number of conv2d algorithms [`path_of`] tells apart.
pub const PATHS: usize = 4;

/// Which of burn-flex's conv2d algorithms runs `row` (an extended row): 0 im2col + GEMM,
/// 1 the 1x1 GEMM, 2 depthwise, 3 small-channel direct.
pub fn path_of(calls: &CallColumns, row: &[f64]) -> usize {
    let flag = |i: usize| row[calls.at[i]] > 0.0;
    if flag(POINTWISE) {
        1
    } else if flag(DEPTHWISE) {
        2
    } else if flag(SMALL) {
        3
    } else {
        0
    }
}

/// The per-algorithm corrections as an estimate of an extended row: its algorithm's ridge, 1
/// where there is none. The base the trees of a `ridge-trees` stack are fitted on.
#[derive(Clone, Copy, Debug)]
pub struct PathCorrection<'a> {
    /// None, or one correction per algorithm ([`PATHS`]).
    pub paths: &'a [Option<FittedRidge>],
    /// Where the call features' inputs sit; no correction without them.
    pub calls: Option<&'a CallColumns>,
}

impl Estimate for PathCorrection<'_> {
    fn estimate(&self, row: &[f64]) -> Result<f64> {
        match (self.calls, self.paths.is_empty()) {
            (Some(c), false) => match &self.paths[path_of(c, row)] {
                Some(m) => m.predict_row(row),
                None => Ok(1.0),
            },
            _ => Ok(1.0),
        }
    }
}

/// Tree ensembles under several seeds as one residual model: the geometric mean of their
/// predictions (the first alone when there is one).
#[derive(Clone, Copy, Debug)]
pub struct Bagged<'a> {
    /// The first ensemble.
    pub trees: &'a FittedTrees,
    /// The others.
    pub bags: &'a [FittedTrees],
}

impl Estimate for Bagged<'_> {
    fn estimate(&self, row: &[f64]) -> Result<f64> {
        let first = self.trees.predict_row(row)?;
        if self.bags.is_empty() {
            return Ok(first);
        }
        let mut log_sum = first.ln();
        for b in self.bags {
            log_sum += b.predict_row(row)?.ln();
        }
        Ok((log_sum / (1 + self.bags.len()) as f64).exp())
    }
}

/// Most bagged ensembles.
pub const MAX_BAGS: usize = 16;

/// `row`, then its call features when `calls` is set, into `out` (the extended width).
pub fn extend_into(row: &[f64], calls: Option<&CallColumns>, out: &mut [f64]) {
    let (head, tail) = out.split_at_mut(row.len());
    head.copy_from_slice(row);
    if let Some(c) = calls {
        c.fill(row, tail);
    }
}

/// Every row of `x` extended ([`extend_into`]) to `width` columns: the rows the inner models
/// of a fit read, built as prediction builds each one.
pub fn extend_rows(x: &Matrix, calls: Option<&CallColumns>, width: usize) -> Matrix {
    let mut out = Matrix::with_cols(width);
    let mut buf = vec![0.0; width];
    for r in x.iter_rows() {
        extend_into(r, calls, &mut buf);
        out.push_row(&buf);
    }
    out
}

/// A fitted ridge-then-trees stack.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(try_from = "UncheckedRidgeTrees")]
pub struct FittedRidgeTrees {
    /// The schema of the rows it reads.
    schema: FeatureSchema,
    /// Whether the inner model reads [`CONV_CALL`] after the row.
    call_features: bool,
    #[serde(skip)]
    calls: Option<CallColumns>,
    /// Trees boosted from a ridge base, both on the extended rows.
    trees: FittedTrees,
    /// Further ensembles on the same base under other seeds, averaged with `trees` in log
    /// space (absent when fitted with one bag).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    bags: Vec<FittedTrees>,
    /// Per-algorithm corrections multiplied onto the ensemble, by [`path_of`] (absent when
    /// fitted without them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    paths: Vec<Option<FittedRidge>>,
}

/// The saved form before it is checked against this build's features.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UncheckedRidgeTrees {
    schema: FeatureSchema,
    call_features: bool,
    trees: FittedTrees,
    #[serde(default)]
    bags: Vec<FittedTrees>,
    #[serde(default)]
    paths: Vec<Option<FittedRidge>>,
}

impl TryFrom<UncheckedRidgeTrees> for FittedRidgeTrees {
    type Error = String;

    fn try_from(u: UncheckedRidgeTrees) -> std::result::Result<FittedRidgeTrees, String> {
        let calls = if u.call_features {
            Some(CallColumns::of(&u.schema).ok_or_else(|| {
                format!(
                    "`{}` rows lack the columns of the call features",
                    u.schema.kind
                )
            })?)
        } else {
            None
        };
        let want = extended_schema(&u.schema, calls.as_ref());
        for t in std::iter::once(&u.trees).chain(&u.bags) {
            if *t.schema() != want {
                return Err(format!(
                    "inner model reads {} features, expected {}",
                    t.schema().len(),
                    want.len()
                ));
            }
        }
        if !u.paths.is_empty() && (calls.is_none() || u.paths.len() != PATHS) {
            return Err(format!(
                "{} path corrections, expected none or {PATHS} with the call features",
                u.paths.len()
            ));
        }
        for p in u.paths.iter().flatten() {
            if *p.schema() != want {
                return Err(format!(
                    "path correction reads {} features, expected {}",
                    p.schema().len(),
                    want.len()
                ));
            }
        }
        if u.bags.len() >= MAX_BAGS {
            return Err(format!(
                "{} ensembles, at most {MAX_BAGS}",
                u.bags.len() + 1
            ));
        }
        if want.len() > MAX_EXTENDED {
            return Err(format!("{} features, at most {MAX_EXTENDED}", want.len()));
        }
        Ok(FittedRidgeTrees {
            schema: u.schema,
            call_features: u.call_features,
            calls,
            trees: u.trees,
            bags: u.bags,
            paths: u.paths,
        })
    }
}

impl FittedRidgeTrees {
    /// The stack of a fit: `trees` (boosted from the shared ridge) and the further `bags`
    /// read the row of `schema` extended with `calls`' features, and `paths` holds none or
    /// [`PATHS`] per-algorithm corrections on the same rows. A saved file is checked when
    /// read; a fit is trusted to pass matching parts.
    pub fn from_parts(
        schema: FeatureSchema,
        calls: Option<CallColumns>,
        trees: FittedTrees,
        bags: Vec<FittedTrees>,
        paths: Vec<Option<FittedRidge>>,
    ) -> FittedRidgeTrees {
        FittedRidgeTrees {
            schema,
            call_features: calls.is_some(),
            calls,
            trees,
            bags,
            paths,
        }
    }

    /// The inner ensemble (its baseline is the ridge).
    pub fn trees(&self) -> &FittedTrees {
        &self.trees
    }

    /// The ensembles averaged with [`FittedRidgeTrees::trees`] (none with one bag).
    pub fn bags(&self) -> &[FittedTrees] {
        &self.bags
    }

    /// The per-algorithm corrections (none when fitted without them).
    pub fn paths(&self) -> &[Option<FittedRidge>] {
        &self.paths
    }

    /// The model as a stack on an extended row: the path corrections, then the bagged trees
    /// (each boosted from the shared ridge) fitted on the ratio to them.
    pub fn stack(&self) -> StackWith<PathCorrection<'_>, Bagged<'_>> {
        StackWith::new(
            PathCorrection {
                paths: &self.paths,
                calls: self.calls.as_ref(),
            },
            Bagged {
                trees: &self.trees,
                bags: &self.bags,
            },
        )
    }
}

impl Regressor for FittedRidgeTrees {
    fn name(&self) -> &'static str {
        MODEL
    }

    fn schema(&self) -> &FeatureSchema {
        &self.schema
    }

    fn predict_row(&self, x: &[f64]) -> Result<f64> {
        check_width(&self.schema, x.len())?;
        let mut buf = [0.0f64; MAX_EXTENDED];
        let width = self.trees.schema().len();
        let ext = &mut buf[..width];
        extend_into(x, self.calls.as_ref(), ext);
        self.stack().predict_row(&*ext)
    }

    fn size_bytes(&self) -> usize {
        self.trees.size_bytes()
            + self.bags.iter().map(|b| b.size_bytes()).sum::<usize>()
            + self
                .paths
                .iter()
                .flatten()
                .map(|p| p.size_bytes())
                .sum::<usize>()
    }

    fn to_saved(&self) -> SavedModel {
        SavedModel::new(MODEL, self.clone())
    }
}

impl crate::regressor::SavedForm for FittedRidgeTrees {
    fn into_regressor(self) -> Box<dyn Regressor> {
        Box::new(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfcast_core::testing::conv;
    use perfcast_core::{Context, ModuleKind, ModuleSpec, Phase};

    #[test]
    fn call_features_follow_the_backend_calls() {
        let schema = FeatureSchema::for_kind(ModuleKind::Conv2d);
        let calls = CallColumns::of(&schema).unwrap();
        let device = perfcast_core::testing::cpu_device();
        let ctx = Context {
            batch: 2,
            phase: Phase::Inference,
            threads: 1,
            utilisation: 0.0,
        };
        let mut f = vec![0.0; CONV_CALL.len()];
        // 3x3, 64 -> 32 on 40x40: 1,600 positions in 4 tiles of 400, per image.
        calls.fill(
            &crate::features::row(&conv(64, 32, 40, 3, 1, 1), &ctx, &device),
            &mut f,
        );
        assert_eq!(&f[..4], &[8.0, 32.0, 400.0, 576.0]);
        assert_eq!(f[11], 4.0);
        assert_eq!(f[12], 1600.0 - 3.0 * 512.0);
        assert_eq!(f[14], 2.0 * 64.0 * 1600.0);
        // 1x1: one GEMM per image over the whole plane, no unfolding.
        calls.fill(
            &crate::features::row(&conv(64, 32, 40, 1, 1, 1), &ctx, &device),
            &mut f,
        );
        assert_eq!(&f[..4], &[2.0, 32.0, 1600.0, 64.0]);
        assert_eq!(f[11], 0.0);
        assert_eq!(f[15], 0.0);
        // Depthwise: no GEMM, one plane per channel and image.
        calls.fill(
            &crate::features::row(&conv(32, 32, 40, 3, 1, 32), &ctx, &device),
            &mut f,
        );
        assert_eq!(&f[..4], &[64.0, 0.0, 0.0, 0.0]);
        // Another kind has no call features.
        assert!(CallColumns::of(&FeatureSchema::for_kind(ModuleKind::Linear)).is_none());
    }

    #[test]
    fn path_of_names_the_backend_algorithm() {
        let schema = FeatureSchema::for_kind(ModuleKind::Conv2d);
        let calls = CallColumns::of(&schema).unwrap();
        assert_eq!(INPUTS[POINTWISE], "conv_pointwise");
        assert_eq!(INPUTS[DEPTHWISE], "conv_depthwise");
        let device = perfcast_core::testing::cpu_device();
        let ctx = Context {
            batch: 2,
            phase: Phase::Inference,
            threads: 1,
            utilisation: 0.0,
        };
        let path = |spec: &ModuleSpec| path_of(&calls, &crate::features::row(spec, &ctx, &device));
        assert_eq!(path(&conv(64, 32, 40, 3, 1, 1)), 0);
        assert_eq!(path(&conv(64, 32, 40, 1, 1, 1)), 1);
        assert_eq!(path(&conv(32, 32, 40, 3, 1, 32)), 2);
        assert_eq!(path(&conv(3, 16, 40, 3, 1, 1)), 3);
    }
}
