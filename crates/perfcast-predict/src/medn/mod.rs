//! MEDN, the multi-task encoder-decoder latency predictor, and the single-task MLP baseline:
//! the fitted model and its fast `f32` inference path.
//!
//! One network per module kind maps a module's features and context to a latent vector; one
//! decoder head per target reads it (task 0: forward latency, task 1: training-step latency).
//! Both phases of a (module, context) pair are one sample: its input is the row in its
//! training-phase form ([`crate::features::row_in_phase`]), which carries both the forward work
//! and the backward shapes. The networks are trained in burn by perfcast-models (`MednParams`);
//! a fitted model holds their weights as plain `f32` arrays ([`infer`]), its normalisers and
//! which head answers which task, and predicts without burn.

pub mod config;
pub mod infer;

use std::borrow::Cow;

use perfcast_core::Phase;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::features::{FeatureSchema, row_in_phase};
use crate::matrix::Matrix;
use crate::regressor::{LogStandardiser, Regressor, SavedModel, check_width};
pub use config::MednConfig;
pub use infer::{BLOCK_ROWS, FastNet, MAX_WIDTH};

/// Targets, in head order.
pub const TASKS: [Phase; 2] = [Phase::Inference, Phase::Training];

/// Per-task standardisation of `ln(ms)`, fitted on the training samples that have the task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TargetScaler {
    /// Mean of `ln(ms)` per task.
    pub mean: Vec<f64>,
    /// Standard deviation of `ln(ms)` per task (1 where constant or absent).
    pub std: Vec<f64>,
}

impl TargetScaler {
    /// Standardised log of a latency.
    pub fn to_z(&self, task: usize, ms: f64) -> f64 {
        (ms.ln() - self.mean[task]) / self.std[task]
    }

    /// Latency of a standardised log.
    pub fn to_ms(&self, task: usize, z: f64) -> f64 {
        (z * self.std[task] + self.mean[task]).exp()
    }
}

/// How a fit went.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TrainHistory {
    /// Epochs run (early stopping may end before the budget).
    pub epochs: usize,
    /// Optimiser steps taken.
    pub steps: usize,
    /// Epoch whose weights were kept.
    pub best_epoch: usize,
    /// Validation MAPE (percent) of the kept weights; training-set MAPE without a split.
    pub best_val_mape: f64,
    /// Training loss of the last epoch.
    pub final_loss: f64,
    /// Mini-batch size used.
    #[serde(default)]
    pub batch_size: usize,
    /// Samples trained on.
    #[serde(default)]
    pub train_samples: usize,
    /// Samples early stopping watched (0: the training samples were watched).
    #[serde(default)]
    pub val_samples: usize,
    /// Whether the kept weights are the running average rather than one epoch's.
    #[serde(default)]
    pub averaged: bool,
    /// Wall-clock seconds of the loop (what `bench/medn_torch.py` compares with PyTorch).
    #[serde(default)]
    pub seconds: f64,
}

/// Output tile shapes `(rows, columns)` of the tiled GEMM kernels GPU BLAS libraries choose
/// among (cuBLAS/CUTLASS-style 32..256 tiles).
const GEMM_TILES: [(f64, f64); 6] = [
    (128.0, 128.0),
    (128.0, 64.0),
    (64.0, 64.0),
    (256.0, 128.0),
    (128.0, 32.0),
    (32.0, 32.0),
];

/// Inputs [`TileInputs`] adds to a row.
pub const TILE_INPUTS: usize = 2 * GEMM_TILES.len();

/// GEMM tile inputs, computed from the row inside the model (the feature schema stays as is).
///
/// A GPU GEMM runs as whole output tiles spread over the SMs in waves, so its latency steps
/// where `M` or `N` crosses a tile boundary: 1,025 rows cost a whole extra row of tiles over
/// 1,024. The log sizes the network reads make such steps smooth; per tile shape, the log tile
/// count `ln(ceil(M/tm) ceil(N/tn))` and the log padded share
/// `ln(ceil(M/tm) tm ceil(N/tn) tn / (M N))` state them. They need no device spec: the network
/// learns which shapes and counts matter.
///
/// They are logs already (standardised without a further log): as sums of logs of whole
/// numbers, which [`crate::features::log1p_pos`] looks up in its table, they cost two real
/// logarithms a row rather than twelve.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TileInputs {
    /// Column of `gemm_m`.
    pub m: usize,
    /// Column of `gemm_n`.
    pub n: usize,
}

impl TileInputs {
    /// The columns in `schema`, when it has them.
    pub fn of(schema: &FeatureSchema) -> Option<TileInputs> {
        Some(TileInputs {
            m: schema.index("gemm_m")?,
            n: schema.index("gemm_n")?,
        })
    }

    /// The tile inputs of `row`, into `out` ([`TILE_INPUTS`] wide); zeros without a GEMM.
    pub fn fill(&self, row: &[f64], out: &mut [f64]) {
        let (m, n) = (row[self.m], row[self.n]);
        if m < 1.0 || n < 1.0 {
            out[..TILE_INPUTS].fill(0.0);
            return;
        }
        // ln(x) of x >= 1 through the table of ln(1 + k).
        let table = crate::features::log1p_table();
        let ln = |x: f64| crate::features::log1p_in(table, x - 1.0);
        let size = ln(m) + ln(n);
        for ((tm, tn), o) in GEMM_TILES.iter().zip(out.chunks_exact_mut(2)) {
            let (bm, bn) = (ceil_pos(m / tm), ceil_pos(n / tn));
            o[0] = ln(bm) + ln(bn);
            o[1] = o[0] + ln(*tm) + ln(*tn) - size;
        }
    }
}

/// `q.ceil()` for finite `q > 0` through an integer conversion: without SSE4.1 in the baseline
/// build, `ceil` is a library call, and a row takes twelve.
#[inline(always)]
fn ceil_pos(q: f64) -> f64 {
    // From 2^52 up every f64 is a whole number.
    if q >= 4_503_599_627_370_496.0 {
        return q;
    }
    let whole = q as i64 as f64;
    if whole < q { whole + 1.0 } else { whole }
}

/// Where one kind's columns sit in the input of a network shared by several kinds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SharedInput {
    /// Width of the shared input.
    pub width: usize,
    /// For each column of the kind's schema, its column in the shared input.
    pub columns: Vec<usize>,
    /// Column of the kind's one-hot indicator.
    pub indicator: usize,
}

impl SharedInput {
    /// Places a row of the kind into `out` (shared width), zeros elsewhere.
    pub fn scatter(&self, row: &[f64], out: &mut [f64]) {
        out[..self.width].fill(0.0);
        for (v, &c) in row.iter().zip(&self.columns) {
            out[c] = *v;
        }
        out[self.indicator] = 1.0;
    }
}

/// A fitted MEDN (or single-task MLP): normalisers, routing of tasks to heads, and each
/// network's weights for the fast path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FittedMedn {
    /// `medn` or `mlp`.
    pub family: String,
    /// The schema of the rows it reads.
    pub schema: FeatureSchema,
    /// Index of the `training` column in the schema.
    pub training_col: usize,
    /// Shape of each network.
    pub configs: Vec<MednConfig>,
    /// Standardisation of the network input (the schema's columns, or the shared union's).
    pub scaler: LogStandardiser,
    /// Standardisation of each task's log latency.
    pub targets: TargetScaler,
    /// Per task: `(network, head)` within a member, or none when the training data had no such
    /// rows.
    pub route: Vec<Option<(usize, usize)>>,
    /// How each network's fit went.
    pub history: Vec<TrainHistory>,
    /// Ensemble members; `nets` holds each member's networks in turn.
    #[serde(default = "one")]
    pub members: usize,
    /// Every network's weights, member after member.
    pub nets: Vec<FastNet>,
    /// Set when the network is shared with other module kinds.
    #[serde(default)]
    pub shared: Option<SharedInput>,
    /// Set when the input carries the GEMM tile inputs after the row's own columns (absent in
    /// checkpoints written before they existed).
    #[serde(default)]
    pub tiles: Option<TileInputs>,
}

fn one() -> usize {
    1
}

impl FittedMedn {
    /// The task a raw row asks for (0 forward, 1 training step) and its head.
    pub fn route_of(&self, x: &[f64]) -> Result<(usize, usize, usize)> {
        self.route_of_phase(if x[self.training_col] > 0.5 {
            Phase::Training
        } else {
            Phase::Inference
        })
    }

    /// The task of `phase` (0 forward, 1 training step), its network and head; an error when
    /// the model was trained without rows of that phase.
    fn route_of_phase(&self, phase: Phase) -> Result<(usize, usize, usize)> {
        let task = usize::from(phase == Phase::Training);
        let (net, head) = self.route[task].ok_or_else(|| {
            Error::InvalidData(format!(
                "this {} was trained without {} rows",
                self.family, TASKS[task]
            ))
        })?;
        Ok((task, net, head))
    }

    /// Internal consistency of a loaded model.
    pub fn check(&self) -> Result<()> {
        let width = self.input_width();
        if let Some(m) = &self.shared
            && (m.columns.len() != self.schema.len()
                || m.indicator >= m.width
                || m.columns.iter().any(|&c| c >= m.width))
        {
            return Err(Error::InvalidData(
                "MEDN shared-input map is out of range".into(),
            ));
        }
        if self.members == 0
            || !self.nets.len().is_multiple_of(self.members)
            || self.nets.len() != self.configs.len()
            || self.scaler.mean.len() != width
            || self.scaler.inv_std.len() != width
            || self.targets.mean.len() != TASKS.len()
            || self.targets.std.len() != TASKS.len()
            || self.training_col >= self.schema.len()
            || self.route.len() != TASKS.len()
        {
            return Err(Error::InvalidData("MEDN parts do not fit together".into()));
        }
        let scales = [
            &self.scaler.mean,
            &self.scaler.inv_std,
            &self.targets.mean,
            &self.targets.std,
        ];
        if let Some(v) = scales
            .iter()
            .flat_map(|v| v.iter())
            .find(|v| !v.is_finite())
        {
            return Err(Error::InvalidData(format!(
                "MEDN standardiser holds {v}, not a finite number"
            )));
        }
        for (net, config) in self.nets.iter().zip(&self.configs) {
            net.check(config)?;
            if config.d_input != width {
                return Err(Error::InvalidData(format!(
                    "MEDN input width {} differs from its schema's {width}",
                    config.d_input,
                )));
            }
        }
        let per_member = self.nets.len() / self.members;
        for (net, head) in self.route.iter().flatten() {
            if *net >= per_member || *head >= self.configs[*net].tasks {
                return Err(Error::InvalidData("MEDN routes a task to no head".into()));
            }
        }
        Ok(())
    }

    /// Width of the network's input (the schema's, or the shared union's).
    pub fn input_width(&self) -> usize {
        self.shared.as_ref().map_or_else(
            || self.schema.len() + self.tiles.map_or(0, |_| TILE_INPUTS),
            |m| m.width,
        )
    }

    /// The standardised network input of a training-phase row, into `z`; no allocation.
    ///
    /// A shared network's input is the kind's columns scattered into the union, zeros
    /// elsewhere and the kind's indicator at 1: each input is standardised from its value
    /// directly (`log1p_pos(0) = 0`), with no scattered copy of the row.
    pub fn encode(&self, canonical: &[f64], z: &mut [f32; MAX_WIDTH]) {
        let width = self.input_width();
        if self.shared.is_some() {
            self.zero_input(&mut z[..width]);
        }
        self.encode_columns(canonical, &mut z[..width]);
    }

    /// A shared network's input for a row of zeros, into `z` (the input width).
    fn zero_input(&self, z: &mut [f32]) {
        for ((o, m), s) in z
            .iter_mut()
            .zip(&self.scaler.mean)
            .zip(&self.scaler.inv_std)
        {
            *o = ((0.0 - m) * s) as f32;
        }
    }

    /// Standardises the row's own columns into `z` (the input width): every input of a
    /// kind's own network; of a shared one, the kind's columns and indicator, over a
    /// [`FittedMedn::zero_input`].
    fn encode_columns(&self, canonical: &[f64], z: &mut [f32]) {
        let width = self.input_width();
        let (mean, inv_std) = (&self.scaler.mean[..width], &self.scaler.inv_std[..width]);
        let table = crate::features::log1p_table();
        let log = |v: f64| crate::features::log1p_in(table, v);
        match &self.shared {
            Some(m) => {
                for (v, &c) in canonical.iter().zip(&m.columns) {
                    z[c] = ((log(*v) - mean[c]) * inv_std[c]) as f32;
                }
                let c = m.indicator;
                z[c] = ((log(1.0) - mean[c]) * inv_std[c]) as f32;
            }
            None => {
                let cols = canonical.len();
                for (((o, v), m), s) in z[..cols].iter_mut().zip(canonical).zip(mean).zip(inv_std) {
                    *o = ((log(*v) - m) * s) as f32;
                }
                if let Some(t) = &self.tiles {
                    let mut extra = [0.0; TILE_INPUTS];
                    t.fill(canonical, &mut extra);
                    for (i, (o, v)) in z[cols..width].iter_mut().zip(extra).enumerate() {
                        *o = ((v - mean[cols + i]) * inv_std[cols + i]) as f32;
                    }
                }
            }
        }
    }

    /// The row in its training-phase form, the form the encoder reads.
    pub fn canonical<'a>(&self, x: &'a [f64]) -> Result<Cow<'a, [f64]>> {
        if x[self.training_col] > 0.5 {
            Ok(Cow::Borrowed(x))
        } else {
            Ok(Cow::Owned(row_in_phase(&self.schema, x, Phase::Training)?))
        }
    }

    /// Parameters stored over all networks.
    pub fn num_params(&self) -> usize {
        self.nets.iter().map(FastNet::num_params).sum()
    }
}

/// Rows encoded for one MEDN's networks, waiting for [`FittedMedn::predict_encoded`], with the
/// scratch of their pass (kept between batches, so a caller that reuses it allocates once).
/// Kinds whose MEDNs are one shared network ([`FittedMedn::same_network`]) fill one batch,
/// each row encoded by its own kind's model: the network then runs once for all of them, in
/// fewer and fuller SIMD blocks.
#[derive(Debug, Default)]
pub struct Encoded {
    /// Encoded rows, `width` each.
    z: Vec<f32>,
    width: usize,
    /// Per row: task, network, head.
    routes: Vec<(usize, usize, usize)>,
    /// The standardised zero row of a shared input (the columns other kinds own), found once
    /// per batch.
    zero: Vec<f32>,
    sums: Vec<f32>,
    outs: Vec<f32>,
    rows_of: Vec<usize>,
    heads: Vec<usize>,
    gathered: Vec<f32>,
}

impl Encoded {
    /// Rows waiting.
    pub fn len(&self) -> usize {
        self.routes.len()
    }

    /// Whether no row waits.
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// Drops the rows (not the scratch's memory), ready for another network's.
    pub fn clear(&mut self) {
        self.z.clear();
        self.routes.clear();
        self.zero.clear();
    }
}

/// Rows encoded once and kept (a prepared network's plan), to append to an [`Encoded`] batch
/// again and again without encoding them each time.
#[derive(Clone, Debug, Default)]
pub struct EncodedRows {
    z: Vec<f32>,
    width: usize,
    routes: Vec<(usize, usize, usize)>,
}

impl EncodedRows {
    /// Rows held.
    pub fn len(&self) -> usize {
        self.routes.len()
    }

    /// Whether no row is held.
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }
}

impl Encoded {
    /// The rows waiting, taken out for keeping; leaves `self` cleared.
    pub fn take_rows(&mut self) -> EncodedRows {
        let rows = EncodedRows {
            z: std::mem::take(&mut self.z),
            width: self.width,
            routes: std::mem::take(&mut self.routes),
        };
        self.clear();
        rows
    }

    /// Appends rows kept by [`Encoded::take_rows`], as if encoded again by the same model.
    /// Errors when their width differs from the rows waiting.
    pub fn push_rows(&mut self, rows: &EncodedRows) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        if self.is_empty() {
            self.width = rows.width;
        } else if self.width != rows.width {
            return Err(Error::InvalidData(format!(
                "a MEDN input of width {} in a batch of width {}",
                rows.width, self.width
            )));
        }
        self.z.extend_from_slice(&rows.z);
        self.routes.extend_from_slice(&rows.routes);
        Ok(())
    }
}

impl FittedMedn {
    /// Whether `other` answers with the same networks from the same encoding: the shared
    /// MEDN a bundle stores once per kind. Rows of both then run through one batch
    /// ([`Encoded`]), each encoded by its own model.
    pub fn same_network(&self, other: &FittedMedn) -> bool {
        self.input_width() == other.input_width()
            && self.members == other.members
            && self.route == other.route
            && self.targets == other.targets
            && self.scaler == other.scaler
            && self.configs == other.configs
            && self.nets == other.nets
    }

    /// Encodes one training-phase row (schema order) asked for in `phase` into `batch`.
    /// Errors when the model has no head for the phase.
    pub fn encode_row(&self, x: &[f64], phase: Phase, batch: &mut Encoded) -> Result<()> {
        let (task, net, head) = self.route_of_phase(phase)?;
        let width = self.input_width();
        if batch.is_empty() {
            batch.width = width;
        } else if batch.width != width {
            return Err(Error::InvalidData(format!(
                "a MEDN input of width {width} in a batch of width {}",
                batch.width
            )));
        }
        let start = batch.z.len();
        if self.shared.is_some() {
            // The columns other kinds own standardise the same in every row: once per batch.
            if batch.zero.is_empty() {
                batch.zero.resize(width, 0.0);
                self.zero_input(&mut batch.zero);
            }
            batch.z.extend_from_slice(&batch.zero);
        } else {
            batch.z.resize(start + width, 0.0);
        }
        self.encode_columns(x, &mut batch.z[start..]);
        batch.routes.push((task, net, head));
        Ok(())
    }

    /// Predicted latencies (ms) of the rows of `batch`, in order, into `out` (one per row);
    /// bit-identical to [`Regressor::predict_row`] of each. Rows of several kinds may be
    /// mixed when their models are [`FittedMedn::same_network`]. Leaves `batch` cleared.
    pub fn predict_encoded(&self, batch: &mut Encoded, out: &mut [f64]) {
        let n = batch.len().min(out.len());
        let per_member = self.nets.len() / self.members;
        let width = batch.width;
        // `Iterator::sum` starts from -0.0; so do these, for identical results.
        batch.sums.clear();
        batch.sums.resize(n, -0.0);
        batch.outs.clear();
        batch.outs.resize(n, 0.0);
        for net in 0..per_member {
            batch.rows_of.clear();
            batch
                .rows_of
                .extend((0..n).filter(|&i| batch.routes[i].1 == net));
            if batch.rows_of.is_empty() {
                continue;
            }
            batch.heads.clear();
            batch
                .heads
                .extend(batch.rows_of.iter().map(|&i| batch.routes[i].2));
            let input: &[f32] = if batch.rows_of.len() == n {
                &batch.z[..n * width]
            } else {
                batch.gathered.clear();
                for &i in &batch.rows_of {
                    batch
                        .gathered
                        .extend_from_slice(&batch.z[i * width..(i + 1) * width]);
                }
                &batch.gathered
            };
            let rows = batch.rows_of.len();
            for m in 0..self.members {
                let fast = &self.nets[m * per_member + net];
                if rows == 1 {
                    // A lone row takes the single-row kernels, not a block of spare lanes.
                    batch.outs[0] = fast.forward_one(&input[..width], batch.heads[0]);
                } else {
                    fast.forward_batch(input, width, &batch.heads, &mut batch.outs[..rows]);
                }
                for (&i, v) in batch.rows_of.iter().zip(&batch.outs) {
                    batch.sums[i] += v;
                }
            }
        }
        for ((o, s), (task, _, _)) in out.iter_mut().zip(&batch.sums).zip(&batch.routes) {
            *o = self
                .targets
                .to_ms(*task, f64::from(s / self.members as f32));
        }
        batch.clear();
    }
}

impl Regressor for FittedMedn {
    fn name(&self) -> &'static str {
        match (self.family.as_str(), self.shared.is_some()) {
            ("mlp", false) => "mlp",
            ("mlp", true) => "mlp-shared",
            (_, false) => "medn",
            (_, true) => "medn-shared",
        }
    }

    fn schema(&self) -> &FeatureSchema {
        &self.schema
    }

    /// A batch goes through [`Regressor::predict_tasks`] (rows encoded once, networks in SIMD
    /// blocks) after each row is put in its training-phase form; bit-identical to
    /// [`Regressor::predict_row`] row by row, which the default would call.
    fn predict(&self, x: &Matrix) -> Result<Vec<f64>> {
        check_width(&self.schema, x.cols())?;
        let mut rows = Vec::with_capacity(x.rows() * x.cols());
        let mut phases = Vec::with_capacity(x.rows());
        for r in x.iter_rows() {
            phases.push(if r[self.training_col] > 0.5 {
                Phase::Training
            } else {
                Phase::Inference
            });
            rows.extend_from_slice(&self.canonical(r)?);
        }
        let mut out = vec![0.0; x.rows()];
        self.predict_tasks(&rows, &phases, &mut out)?;
        Ok(out)
    }

    /// Forward rows are turned into their training-phase form first (one small allocation);
    /// training rows go straight through the allocation-free fast path.
    fn predict_row(&self, x: &[f64]) -> Result<f64> {
        check_width(&self.schema, x.len())?;
        let (task, net, head) = self.route_of(x)?;
        let mut z = [0.0f32; MAX_WIDTH];
        self.encode(&self.canonical(x)?, &mut z);
        let per_member = self.nets.len() / self.members;
        let input = &z[..self.input_width()];
        let sum: f32 = (0..self.members)
            .map(|m| self.nets[m * per_member + net].forward_one(input, head))
            .sum();
        Ok(self
            .targets
            .to_ms(task, f64::from(sum / self.members as f32)))
    }

    fn multi_task(&self) -> bool {
        true
    }

    /// Rows are encoded once and pass through each network in blocks (one per SIMD lane with
    /// AVX2, else [`BLOCK_ROWS`]: one weight load serves several rows); one row takes the
    /// allocation-free single-row path.
    /// Results are bit-identical to [`Regressor::predict_row`] of the same queries.
    fn predict_tasks(&self, rows: &[f64], phases: &[Phase], out: &mut [f64]) -> Result<()> {
        let cols =
            crate::regressor::check_tasks(&self.schema, rows.len(), phases.len(), out.len())?;
        let per_member = self.nets.len() / self.members;
        let width = self.input_width();
        if let ([phase], [o]) = (phases, &mut *out) {
            let x = &rows[..cols];
            let (task, net, head) = self.route_of_phase(*phase)?;
            let mut z = [0.0f32; MAX_WIDTH];
            self.encode(x, &mut z);
            let sum: f32 = (0..self.members)
                .map(|m| self.nets[m * per_member + net].forward_one(&z[..width], head))
                .sum();
            *o = self
                .targets
                .to_ms(task, f64::from(sum / self.members as f32));
            return Ok(());
        }
        let mut batch = Encoded::default();
        for (x, phase) in rows.chunks_exact(cols).zip(phases) {
            self.encode_row(x, *phase, &mut batch)?;
        }
        self.predict_encoded(&mut batch, out);
        Ok(())
    }

    fn size_bytes(&self) -> usize {
        4 * self.num_params() + 16 * self.scaler.mean.len() + 32
    }

    fn to_saved(&self) -> SavedModel {
        let tag = if self.family == "mlp" { "mlp" } else { "medn" };
        SavedModel::new(tag, self.clone())
    }
}

impl crate::regressor::SavedForm for FittedMedn {
    fn check_form(&self) -> Result<()> {
        FittedMedn::check(self)
    }

    fn into_regressor(self) -> Box<dyn Regressor> {
        Box::new(self)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ceil_pos_is_ceil() {
        for q in [
            1e-300,
            0.3,
            1.0,
            1.0 + f64::EPSILON,
            2.5,
            3136.0 / 128.0,
            4095.999,
            1e15 + 0.5,
            2f64.powi(52) - 0.5,
            2f64.powi(52),
            2f64.powi(60) + 2048.0,
            f64::MAX,
        ] {
            assert_eq!(ceil_pos(q).to_bits(), q.ceil().to_bits(), "{q}");
        }
    }

    use super::*;
    use perfcast_core::ModuleKind;

    #[test]
    fn tile_inputs_step_at_tile_boundaries() {
        let schema = FeatureSchema::for_kind(ModuleKind::Linear);
        let tiles = TileInputs::of(&schema).unwrap();
        let inputs = |m: f64, n: f64| {
            let mut row = vec![0.0; schema.len()];
            row[schema.index("gemm_m").unwrap()] = m;
            row[schema.index("gemm_n").unwrap()] = n;
            let mut out = [0.0; TILE_INPUTS];
            tiles.fill(&row, &mut out);
            out
        };
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        // 128x128 tiles (the first shape): 1,024 x 512 is 8 x 4 whole tiles, no padding; one more
        // row of M adds a row of tiles, nearly all padding. Inputs are logs.
        let whole = inputs(1024.0, 512.0);
        assert!(
            close(whole[0], 32f64.ln()) && close(whole[1], 0.0),
            "{whole:?}"
        );
        let over = inputs(1025.0, 512.0);
        assert!(close(over[0], 36f64.ln()), "{over:?}");
        assert!(close(over[1], (9.0 * 128.0 / 1025.0f64).ln()), "{over:?}");
        // 32x32 tiles (the last shape) need no padding at 1,024 x 512 either; a narrow N of 3 pads
        // every 32-wide tile.
        assert!(close(whole[TILE_INPUTS - 2], 512f64.ln()) && close(whole[TILE_INPUTS - 1], 0.0));
        let narrow = inputs(1024.0, 3.0);
        assert!(
            close(narrow[TILE_INPUTS - 1], (32.0 / 3.0f64).ln()),
            "{narrow:?}"
        );
        // No GEMM, no tiles.
        assert_eq!(inputs(0.0, 0.0), [0.0; TILE_INPUTS]);
    }
}
