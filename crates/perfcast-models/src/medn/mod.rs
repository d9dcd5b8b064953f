//! MEDN: the multi-task encoder-decoder latency predictor, in burn, with a fast inference path.
//!
//! One network per module kind maps a module's features and context to a latent vector; one
//! decoder head per target reads it (task 0: forward latency, task 1: training-step latency).
//! Both phases of a (module, context) pair are one sample: its input is the row in its
//! training-phase form ([`crate::features::row_in_phase`]), which carries both the forward work
//! and the backward shapes, and a target nobody measured is masked out of its head's loss.
//!
//! Split as in burn's examples: [`config`] (architecture), [`model`] (the burn modules),
//! [`train`] (the loop) and [`infer`] (weights copied between burn and the `f32` arrays of the
//! allocation-free forward that serving uses, which is perfcast-predict's). A checkpoint is the config JSON, the normalisers and one burn record per
//! network ([`MednCheckpoint::save_checkpoint`]).
//!
//! The same code fits the PerfNet-style baseline, a single-task MLP of the same size per target
//! (`multi_task = false`, family `mlp`), so the two compare on equal terms.

pub mod config;
pub mod infer;
pub mod model;
pub mod train;

use std::collections::HashMap;
use std::path::Path;

use burn::module::Module;
use burn::store::ModuleRecord;
use burn::tensor::{Device, Tensor, TensorData};
use perfcast_core::Phase;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::features::{FeatureSchema, TrainSet, fnv1a, row_in_phase};
use crate::matrix::Matrix;
use crate::regressor::{Fit, FitStandardiser, LogStandardiser, check_train_set, check_width};
use crate::split;
pub use config::{InitNet, MednConfig};
pub use infer::{BLOCK_ROWS, BurnWeights, FastNet, MAX_WIDTH};
pub use perfcast_predict::medn::{
    FittedMedn, SharedInput, TASKS, TILE_INPUTS, TargetScaler, TileInputs, TrainHistory,
};
pub use train::{EPOCHS, Samples};

/// Loss on standardised log latency.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Loss {
    /// Squared error (MSLE up to the target scale).
    Mse,
    /// Absolute error: `|ln(pred / measured)|`, the relative error to first order.
    L1,
    /// Absolute percentage error `|pred / measured - 1|`, the metric itself.
    Ape,
}

/// Hyper-parameters of MEDN (and of the single-task MLP baseline).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MednParams {
    /// One network with a head per target (MEDN), or one single-task network per target
    /// (the PerfNet-style MLP); default true.
    pub multi_task: bool,
    /// Encoder width; default 64.
    pub width: usize,
    /// Residual blocks in the encoder; default 2.
    pub depth: usize,
    /// Latent width; default 32.
    pub latent: usize,
    /// Hidden width of each head; default 32.
    pub head_width: usize,
    /// Dropout in the residual blocks; default 0.
    pub dropout: f64,
    /// A linear path from inputs to outputs beside the deep one; default true.
    pub skip: bool,
    /// GEMM tile inputs computed from the row's `gemm_m` and `gemm_n` ([`TileInputs`]):
    /// per tile shape, the tile count and the share of padding; default true.
    pub gemm_tiles: bool,
    /// Loss: `l1` (relative error in log space, the default), `mse` or `ape` (the MAPE
    /// metric itself).
    pub loss: Loss,
    /// Weight of each task's loss, `[forward, training]`; default `[1, 1]`, since weighting the
    /// training head up cost it accuracy (docs/accuracy.md#figures-behind-code-choices).
    pub task_weights: Vec<f64>,
    /// Peak learning rate of Adam; default 3e-3.
    pub lr: f64,
    /// Final learning rate of the cosine schedule as a share of `lr`; default 0.02.
    pub lr_min_ratio: f64,
    /// L2 weight decay; default 1e-5.
    pub weight_decay: f64,
    /// Decay per epoch of a running average of the weights (0 turns it off); early stopping
    /// keeps the average where it beats the epoch's own weights on validation; default 0.9.
    pub weight_average: f64,
    /// Optimiser step budget; default 6000.
    pub max_steps: usize,
    /// Mini-batch size; 0 picks `samples / 32` within 32..=512; default 0.
    pub batch_size: usize,
    /// Epochs without a better validation MAPE before stopping; default 80: the kinds of a
    /// few hundred samples stopped at 40 while the cosine schedule's rate was still near
    /// its peak, on a snapshot a 30-sample validation split had picked by chance.
    pub patience: usize,
    /// Share of the configuration groups held out for early stopping (whole layers, every
    /// batch on one side; nothing below 20 samples), in [0, 0.5]; default 0.1.
    pub val_share: f64,
    /// Seed of initialisation, shuffling and the validation split; default 0.
    pub seed: u64,
    /// Networks trained from different seeds (and validation splits) whose standardised log
    /// outputs are averaged; default 1. Each member costs its own prediction time and size.
    pub ensemble: usize,
    /// Backend to train on: `flex` (CPU) or `wgpu` (needs the `wgpu` feature); default `flex`.
    pub backend: String,
    /// Who hears of epochs, loss and validation MAPE (stage `epochs`; set by the caller, not
    /// saved); default none.
    #[serde(skip)]
    pub progress: Progress,
}

/// The observer training reports epochs to; not saved, and ignored when comparing parameters.
#[derive(Clone, Default)]
pub struct Progress(pub Option<std::sync::Arc<dyn perfcast_core::progress::Observer>>);

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Progress(observer)"
        } else {
            "Progress(none)"
        })
    }
}

impl PartialEq for Progress {
    fn eq(&self, _: &Progress) -> bool {
        true
    }
}

impl Default for MednParams {
    fn default() -> Self {
        MednParams {
            multi_task: true,
            width: 64,
            depth: 2,
            latent: 32,
            head_width: 32,
            dropout: 0.0,
            skip: true,
            gemm_tiles: true,
            loss: Loss::L1,
            task_weights: vec![1.0, 1.0],
            lr: 3e-3,
            lr_min_ratio: 0.02,
            weight_decay: 1e-5,
            weight_average: 0.9,
            max_steps: 6000,
            batch_size: 0,
            patience: 80,
            val_share: 0.1,
            seed: 0,
            ensemble: 1,
            backend: "flex".into(),
            progress: Progress::default(),
        }
    }
}

impl MednParams {
    /// The single-task MLP baseline with MEDN's defaults.
    pub fn mlp() -> MednParams {
        MednParams {
            multi_task: false,
            ..MednParams::default()
        }
    }

    fn family(&self) -> &'static str {
        if self.multi_task { "medn" } else { "mlp" }
    }

    fn invalid(&self, message: String) -> Error {
        Error::InvalidParams {
            model: self.family(),
            message,
        }
    }

    fn device(&self) -> Result<Device> {
        match self.backend.as_str() {
            "flex" => Ok(Device::flex()),
            #[cfg(feature = "wgpu")]
            "wgpu" => Ok(Device::wgpu(burn::tensor::DeviceKind::DefaultDevice)),
            #[cfg(not(feature = "wgpu"))]
            "wgpu" => {
                Err(self.invalid("backend `wgpu` needs a build with `--features wgpu`".into()))
            }
            other => Err(self.invalid(format!("backend must be `flex` or `wgpu`, got `{other}`"))),
        }
    }

    fn config(&self, d_input: usize, tasks: usize) -> MednConfig {
        MednConfig::new(d_input, tasks)
            .with_width(self.width)
            .with_depth(self.depth)
            .with_latent(self.latent)
            .with_head_width(self.head_width)
            .with_dropout(self.dropout)
            .with_skip(self.skip)
    }
}

/// Fits the per-task standardisation of `ln(ms)` on the training samples that have the task.
fn fit_target_scaler(targets: &[[Option<f64>; 2]]) -> TargetScaler {
    let mut mean = vec![0.0; 2];
    let mut std = vec![1.0; 2];
    for k in 0..2 {
        let logs: Vec<f64> = targets.iter().filter_map(|t| t[k]).map(f64::ln).collect();
        if logs.is_empty() {
            continue;
        }
        let m = logs.iter().sum::<f64>() / logs.len() as f64;
        let v = logs.iter().map(|l| (l - m).powi(2)).sum::<f64>() / logs.len() as f64;
        mean[k] = m;
        std[k] = if v > 1e-12 { v.sqrt() } else { 1.0 };
    }
    TargetScaler { mean, std }
}

/// Rows of a training set grouped into multi-task samples: the training-phase form of each
/// row, per task the measured latency, if any, and the configuration group of each sample
/// (its rows' group: one layer at one batch and context; empty when the set's rows carry no
/// groups, each sample then a group of its own).
struct GroupedSamples {
    inputs: Matrix,
    targets: Vec<[Option<f64>; 2]>,
    groups: Vec<u64>,
}

fn group_samples(data: &TrainSet) -> Result<GroupedSamples> {
    let col = training_column(&data.schema)?;
    let labelled = data.groups.len() == data.len();
    let mut inputs = Matrix::with_cols(data.schema.len());
    let mut targets: Vec<[Option<f64>; 2]> = Vec::new();
    let mut groups = Vec::new();
    let mut index: HashMap<Vec<u64>, usize> = HashMap::new();
    for (i, (row, &y)) in data.x.iter_rows().zip(&data.y).enumerate() {
        let task = usize::from(row[col] > 0.5);
        let canonical = if task == 1 {
            row.to_vec()
        } else {
            row_in_phase(&data.schema, row, Phase::Training)?
        };
        let key: Vec<u64> = canonical.iter().map(|v| v.to_bits()).collect();
        match index.get(&key) {
            Some(&i) if targets[i][task].is_none() => targets[i][task] = Some(y),
            _ => {
                index.insert(key, targets.len());
                let mut t = [None, None];
                t[task] = Some(y);
                targets.push(t);
                inputs.push_row(&canonical);
                if labelled {
                    groups.push(data.groups[i]);
                }
            }
        }
    }
    Ok(GroupedSamples {
        inputs,
        targets,
        groups,
    })
}

fn training_column(schema: &FeatureSchema) -> Result<usize> {
    schema
        .index("training")
        .ok_or_else(|| Error::InvalidData("schema has no `training` column".into()))
}

/// Standardised samples for the tasks in `tasks` (their order is the head order). Columns
/// from `logged` on hold logs already ([`TileInputs`]) and are standardised as they are.
fn to_samples(
    inputs: &Matrix,
    logged: usize,
    targets: &[[Option<f64>; 2]],
    scaler: &LogStandardiser,
    target_scaler: &TargetScaler,
    tasks: &[usize],
) -> Samples {
    let mut s = Samples {
        d: inputs.cols(),
        tasks: tasks.len(),
        ..Samples::default()
    };
    let mut buf = vec![0.0; inputs.cols()];
    for (row, t) in inputs.iter_rows().zip(targets) {
        if tasks.iter().all(|&k| t[k].is_none()) {
            continue;
        }
        scaler.transform_into(row, &mut buf);
        for (c, o) in buf.iter_mut().enumerate().skip(logged) {
            *o = (row[c] - scaler.mean[c]) * scaler.inv_std[c];
        }
        s.x.extend(buf.iter().map(|&v| v as f32));
        for &k in tasks {
            match t[k] {
                Some(ms) => {
                    s.t.push(target_scaler.to_z(k, ms) as f32);
                    s.m.push(1.0);
                }
                None => {
                    s.t.push(0.0);
                    s.m.push(0.0);
                }
            }
        }
    }
    s
}

impl crate::params::FamilyParams for MednParams {
    fn name(&self) -> &'static str {
        self.family()
    }

    fn set_observer(&mut self, observer: std::sync::Arc<dyn perfcast_core::progress::Observer>) {
        self.progress = Progress(Some(observer));
    }
}

impl Fit for MednParams {
    type Fitted = FittedMedn;

    fn validate(&self) -> Result<()> {
        for (name, v) in [
            ("width", self.width),
            ("latent", self.latent),
            ("head_width", self.head_width),
        ] {
            if !(1..=MAX_WIDTH).contains(&v) {
                return Err(self.invalid(format!("{name} must be in 1..={MAX_WIDTH}, got {v}")));
            }
        }
        if !(1..=16).contains(&self.ensemble) {
            return Err(self.invalid(format!("ensemble must be in 1..=16, got {}", self.ensemble)));
        }
        if self.depth > 16 {
            return Err(self.invalid(format!("depth must be at most 16, got {}", self.depth)));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(self.invalid(format!("dropout must be in [0, 1), got {}", self.dropout)));
        }
        if !(self.lr > 0.0 && self.lr < 1.0) {
            return Err(self.invalid(format!("lr must be in (0, 1), got {}", self.lr)));
        }
        if !(0.0..=1.0).contains(&self.lr_min_ratio) {
            return Err(self.invalid(format!(
                "lr_min_ratio must be in [0, 1], got {}",
                self.lr_min_ratio
            )));
        }
        if !(0.0..1.0).contains(&self.weight_average) {
            return Err(self.invalid(format!(
                "weight_average must be in [0, 1), got {}",
                self.weight_average
            )));
        }
        if !(self.weight_decay >= 0.0 && self.weight_decay.is_finite()) {
            return Err(self.invalid(format!(
                "weight_decay must be finite and non-negative, got {}",
                self.weight_decay
            )));
        }
        if self.max_steps == 0 {
            return Err(self.invalid("max_steps must be at least 1".into()));
        }
        if !(0.0..=0.5).contains(&self.val_share) {
            return Err(self.invalid(format!(
                "val_share must be in [0, 0.5], got {}",
                self.val_share
            )));
        }
        if self.task_weights.len() != TASKS.len()
            || self
                .task_weights
                .iter()
                .any(|w| !(*w >= 0.0 && w.is_finite()))
        {
            return Err(self.invalid(format!(
                "task_weights must be {} finite non-negative numbers, got {:?}",
                TASKS.len(),
                self.task_weights
            )));
        }
        self.device().map(|_| ())
    }

    fn fit(&self, data: &TrainSet) -> Result<FittedMedn> {
        self.validate()?;
        check_train_set(data, 8)?;
        let training_col = training_column(&data.schema)?;
        let GroupedSamples {
            inputs,
            targets,
            groups,
        } = group_samples(data)?;
        // Kinds that never run a GEMM (pools, norms) would get constant zero columns.
        let tiles = TileInputs::of(&data.schema)
            .filter(|t| self.gemm_tiles && inputs.iter_rows().any(|r| r[t.m] >= 1.0));
        let inputs = match &tiles {
            Some(t) => widen(t, &inputs),
            None => inputs,
        };
        let mut scaler = LogStandardiser::fit(&inputs);
        if tiles.is_some() {
            restandardise_tiles(&mut scaler, &inputs, data.schema.len());
        }
        let target_scaler = fit_target_scaler(&targets);
        let nets = self.fit_networks(
            &inputs,
            data.schema.len(),
            &targets,
            &groups,
            &scaler,
            &target_scaler,
        )?;
        Ok(FittedMedn {
            tiles,
            family: self.family().to_string(),
            schema: data.schema.clone(),
            training_col,
            configs: nets.configs,
            scaler,
            targets: target_scaler,
            route: nets.route,
            history: nets.history,
            members: nets.members,
            nets: nets.nets,
            shared: None,
        })
    }
}

/// Networks fitted on standardised samples, and which head answers which task.
struct Networks {
    /// Ensemble members; `nets` holds each member's networks in turn.
    members: usize,
    nets: Vec<FastNet>,
    configs: Vec<MednConfig>,
    route: Vec<Option<(usize, usize)>>,
    history: Vec<TrainHistory>,
}

impl MednParams {
    /// One network for every task present (MEDN), or one per task (the MLP). `groups` holds
    /// each sample's configuration group (or nothing: each sample its own group).
    fn fit_networks(
        &self,
        inputs: &Matrix,
        logged: usize,
        targets: &[[Option<f64>; 2]],
        groups: &[u64],
        scaler: &LogStandardiser,
        target_scaler: &TargetScaler,
    ) -> Result<Networks> {
        let present: Vec<usize> = (0..TASKS.len())
            .filter(|&k| targets.iter().any(|t| t[k].is_some()))
            .collect();
        let heads: Vec<Vec<usize>> = if self.multi_task {
            vec![present.clone()]
        } else {
            present.iter().map(|&k| vec![k]).collect()
        };
        let device = self.device()?;
        let mut out = Networks {
            members: self.ensemble,
            nets: Vec::new(),
            configs: Vec::new(),
            route: vec![None; TASKS.len()],
            history: Vec::new(),
        };
        for (member, (net_index, tasks)) in
            (0..self.ensemble).flat_map(|m| heads.iter().enumerate().map(move |g| (m, g)))
        {
            // Members differ in initialisation, batch order and validation split.
            let seed = self.seed.wrapping_add(7919 * member as u64);
            let samples = to_samples(inputs, logged, targets, scaler, target_scaler, tasks);
            let n = samples.len();
            let sample_groups: Vec<u64> = if groups.len() == targets.len() {
                groups
                    .iter()
                    .zip(targets)
                    .filter(|(_, t)| tasks.iter().any(|&k| t[k].is_some()))
                    .map(|(&g, _)| g)
                    .collect()
            } else {
                Vec::new()
            };
            let (train_idx, val_idx) = self.early_stopping_split(&sample_groups, n, seed);
            let (train_idx, val_idx) = (&train_idx[..], &val_idx[..]);
            let batch = if self.batch_size == 0 {
                (train_idx.len() / 32).clamp(32, 512)
            } else {
                self.batch_size
            };
            let config = self.config(inputs.cols(), tasks.len());
            let weights: Vec<f64> = tasks.iter().map(|&k| self.task_weights[k]).collect();
            let opts = train::TrainOptions {
                config: &config,
                device: device.clone(),
                lr: self.lr,
                lr_min_ratio: self.lr_min_ratio,
                weight_decay: self.weight_decay,
                max_steps: self.max_steps,
                batch_size: batch,
                patience: self.patience,
                task_weights: &weights,
                loss: self.loss,
                weight_average: self.weight_average,
                seed: seed.wrapping_add(net_index as u64),
                scaler: &ScalerView {
                    inner: target_scaler,
                    tasks,
                }
                .materialise(),
                progress: self.progress.clone(),
            };
            let (net, history) =
                train::train(&opts, &samples.select(train_idx), &samples.select(val_idx))?;
            if member == 0 {
                for (head, &k) in tasks.iter().enumerate() {
                    out.route[k] = Some((net_index, head));
                }
            }
            out.nets.push(FastNet::from_burn(&net)?);
            out.history.push(history);
            out.configs.push(config);
        }
        Ok(out)
    }

    /// The (train, validation) samples of one network: whole configuration groups held out
    /// ([`split::validation`]), as trees' early stopping and every evaluation split do, since
    /// validating on other batches of layers it trains on would pick the snapshot that
    /// memorises them. As before the split was grouped, nothing is held out below 20 samples
    /// (at the default share: `share * samples` must reach `round(20 * share)`) and never more
    /// than half.
    fn early_stopping_split(
        &self,
        groups: &[u64],
        n: usize,
        seed: u64,
    ) -> (Vec<usize>, Vec<usize>) {
        let v = split::Validation {
            share: self.val_share,
            min_valid: ((20.0 * self.val_share).round() as usize).max(1),
            min_train: n - n / 2,
        };
        split::validation(
            groups,
            n,
            &v,
            &mut perfcast_core::rng::SplitMix64::new(seed),
        )
    }

    /// One network shared by several module kinds: each kind's rows are placed in the union of
    /// the kinds' feature columns (matched by name, zero where a kind has no such column) with
    /// a one-hot `kind=<name>` indicator. Returns one model per set, in order, all holding the
    /// same weights.
    pub fn fit_shared(&self, sets: &[TrainSet]) -> Result<Vec<FittedMedn>> {
        self.validate()?;
        let mut names: Vec<String> = Vec::new();
        for set in sets {
            check_train_set(set, 8)?;
            for name in &set.schema.names {
                if !names.contains(name) {
                    names.push(name.clone());
                }
            }
        }
        let first_indicator = names.len();
        let width = first_indicator + sets.len();
        if width > MAX_WIDTH {
            return Err(self.invalid(format!(
                "a shared input of {width} columns exceeds {MAX_WIDTH}"
            )));
        }
        let mut maps = Vec::new();
        let mut inputs = Matrix::with_cols(width);
        let mut targets = Vec::new();
        let mut groups = Vec::new();
        let mut union = vec![0.0; width];
        for (i, set) in sets.iter().enumerate() {
            let map = SharedInput {
                width,
                columns: set
                    .schema
                    .names
                    .iter()
                    .map(|n| names.iter().position(|m| m == n).unwrap_or(0))
                    .collect(),
                indicator: first_indicator + i,
            };
            let samples = group_samples(set)?;
            for row in samples.inputs.iter_rows() {
                map.scatter(row, &mut union);
                inputs.push_row(&union);
            }
            // The set's index keeps groups of different kinds apart; a set without groups
            // makes each of its samples a group.
            let of_set =
                |g: u64| fnv1a((i as u64).to_le_bytes().into_iter().chain(g.to_le_bytes()));
            if samples.groups.len() == samples.targets.len() {
                groups.extend(samples.groups.iter().map(|&g| of_set(g)));
            } else {
                let first = targets.len() as u64;
                groups.extend((0..samples.targets.len() as u64).map(|j| of_set(first + j)));
            }
            targets.extend(samples.targets);
            maps.push(map);
        }
        let scaler = LogStandardiser::fit(&inputs);
        let target_scaler = fit_target_scaler(&targets);
        let nets = self.fit_networks(&inputs, width, &targets, &groups, &scaler, &target_scaler)?;
        sets.iter()
            .zip(maps)
            .map(|(set, map)| {
                Ok(FittedMedn {
                    family: self.family().to_string(),
                    schema: set.schema.clone(),
                    training_col: training_column(&set.schema)?,
                    configs: nets.configs.clone(),
                    scaler: scaler.clone(),
                    targets: target_scaler.clone(),
                    route: nets.route.clone(),
                    history: nets.history.clone(),
                    members: nets.members,
                    nets: nets.nets.clone(),
                    shared: Some(map),
                    tiles: None,
                })
            })
            .collect()
    }
}

/// Plain standardisation of the tile columns (from `first` on) of a scaler fitted on
/// `inputs`: they hold logs already.
fn restandardise_tiles(scaler: &mut LogStandardiser, inputs: &Matrix, first: usize) {
    let n = inputs.rows().max(1) as f64;
    for c in first..inputs.cols() {
        let mean = inputs.iter_rows().map(|r| r[c]).sum::<f64>() / n;
        let var = inputs
            .iter_rows()
            .map(|r| (r[c] - mean).powi(2))
            .sum::<f64>()
            / n;
        scaler.mean[c] = mean;
        scaler.inv_std[c] = if var > 1e-12 { 1.0 / var.sqrt() } else { 1.0 };
    }
}

/// `inputs` with the tile inputs of `tiles` appended to every row.
fn widen(tiles: &TileInputs, inputs: &Matrix) -> Matrix {
    let cols = inputs.cols();
    let mut out = Matrix::with_cols(cols + TILE_INPUTS);
    let mut row = vec![0.0; cols + TILE_INPUTS];
    for r in inputs.iter_rows() {
        row[..cols].copy_from_slice(r);
        tiles.fill(r, &mut row[cols..]);
        out.push_row(&row);
    }
    out
}

/// The target scaler restricted to a network's tasks, in its head order.
struct ScalerView<'a> {
    inner: &'a TargetScaler,
    tasks: &'a [usize],
}

impl ScalerView<'_> {
    fn materialise(&self) -> TargetScaler {
        TargetScaler {
            mean: self.tasks.iter().map(|&k| self.inner.mean[k]).collect(),
            std: self.tasks.iter().map(|&k| self.inner.std[k]).collect(),
        }
    }
}

/// What `medn.json` of a checkpoint holds: everything but the weights.
#[derive(Serialize, Deserialize)]
struct CheckpointMeta {
    format: u32,
    family: String,
    schema: FeatureSchema,
    schema_hash: u64,
    training_col: usize,
    configs: Vec<MednConfig>,
    scaler: LogStandardiser,
    targets: TargetScaler,
    route: Vec<Option<(usize, usize)>>,
    history: Vec<TrainHistory>,
    #[serde(default = "one")]
    members: usize,
    #[serde(default)]
    shared: Option<SharedInput>,
    #[serde(default)]
    tiles: Option<TileInputs>,
}

fn one() -> usize {
    1
}

const CHECKPOINT_FORMAT: u32 = 1;

/// burn checkpoints of a fitted MEDN, and its predictions through burn's own forward pass (the
/// fitted model itself is the predictor's, which has no burn).
pub trait MednCheckpoint: Sized {
    /// Writes a burn checkpoint into `dir`: `medn.json` (configs, feature schema and its hash,
    /// normalisers, routing, history) and `net-<i>.bpk` (one burn record per network), each
    /// file written to a temporary name and renamed.
    fn save_checkpoint(&self, dir: &Path) -> Result<()>;

    /// Loads a checkpoint written by [`MednCheckpoint::save_checkpoint`], refusing one whose
    /// feature schema differs from `expected` (when given).
    fn load_checkpoint(dir: &Path, expected: Option<&FeatureSchema>) -> Result<Self>;

    /// Predictions through burn's own forward pass on `device` (the reference the fast path is
    /// tested against; slower).
    fn predict_burn(&self, x: &Matrix, device: &Device) -> Result<Vec<f64>>;
}

impl MednCheckpoint for FittedMedn {
    fn save_checkpoint(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| Error::Load {
            path: dir.to_path_buf(),
            message: e.to_string(),
        })?;
        let device = Device::flex();
        for (i, (net, config)) in self.nets.iter().zip(&self.configs).enumerate() {
            let bytes = net
                .to_burn(config, &device)?
                .into_record()
                .into_bytes()
                .map_err(|e| Error::InvalidData(format!("cannot encode MEDN record: {e}")))?;
            // A failed write is perfcast-data's error (the file, then the OS cause).
            perfcast_data::write_atomic(&dir.join(format!("net-{i}.bpk")), &bytes)?;
        }
        let meta = CheckpointMeta {
            format: CHECKPOINT_FORMAT,
            family: self.family.clone(),
            schema: self.schema.clone(),
            schema_hash: self.schema.hash(),
            training_col: self.training_col,
            configs: self.configs.clone(),
            scaler: self.scaler.clone(),
            targets: self.targets.clone(),
            route: self.route.clone(),
            history: self.history.clone(),
            members: self.members,
            shared: self.shared.clone(),
            tiles: self.tiles,
        };
        let json = serde_json::to_vec_pretty(&meta)
            .map_err(|e| Error::InvalidData(format!("cannot encode MEDN config: {e}")))?;
        Ok(perfcast_data::write_atomic(&dir.join("medn.json"), &json)?)
    }

    fn load_checkpoint(dir: &Path, expected: Option<&FeatureSchema>) -> Result<FittedMedn> {
        let load_err = |path: &Path, message: String| Error::Load {
            path: path.to_path_buf(),
            message,
        };
        let meta_path = dir.join("medn.json");
        let text = std::fs::read(&meta_path).map_err(|e| load_err(&meta_path, e.to_string()))?;
        let meta: CheckpointMeta =
            serde_json::from_slice(&text).map_err(|e| load_err(&meta_path, e.to_string()))?;
        if meta.format != CHECKPOINT_FORMAT {
            return Err(load_err(
                &meta_path,
                format!(
                    "format {} (this build reads {CHECKPOINT_FORMAT})",
                    meta.format
                ),
            ));
        }
        if meta.schema_hash != meta.schema.hash() {
            return Err(load_err(
                &meta_path,
                "schema hash does not match its names".into(),
            ));
        }
        if let Some(expected) = expected
            && expected.hash() != meta.schema.hash()
        {
            return Err(load_err(
                &meta_path,
                format!(
                    "trained on a different feature schema ({} `{}` features, hash {:016x}; \
                     this data has {} `{}` features, hash {:016x})",
                    meta.schema.len(),
                    meta.schema.kind,
                    meta.schema.hash(),
                    expected.len(),
                    expected.kind,
                    expected.hash()
                ),
            ));
        }
        let device = Device::flex();
        let mut nets = Vec::new();
        for (i, config) in meta.configs.iter().enumerate() {
            let path = dir.join(format!("net-{i}.bpk"));
            let bytes = std::fs::read(&path).map_err(|e| load_err(&path, e.to_string()))?;
            let record = ModuleRecord::from_bytes(burn::tensor::Bytes::from_bytes_vec(bytes))
                .map_err(|e| load_err(&path, e.to_string()))?;
            let net = config
                .init(&device)
                .try_load_record(record)
                .map_err(|e| load_err(&path, e.to_string()))?;
            let fast = FastNet::from_burn(&net)?;
            fast.check(config)
                .map_err(|e| load_err(&path, e.to_string()))?;
            nets.push(fast);
        }
        let fitted = FittedMedn {
            family: meta.family,
            schema: meta.schema,
            training_col: meta.training_col,
            configs: meta.configs,
            scaler: meta.scaler,
            targets: meta.targets,
            route: meta.route,
            history: meta.history,
            members: meta.members,
            nets,
            shared: meta.shared,
            tiles: meta.tiles,
        };
        fitted
            .check()
            .map_err(|e| load_err(&meta_path, e.to_string()))?;
        Ok(fitted)
    }

    fn predict_burn(&self, x: &Matrix, device: &Device) -> Result<Vec<f64>> {
        check_width(&self.schema, x.cols())?;
        let burn_nets: Vec<_> = self
            .nets
            .iter()
            .zip(&self.configs)
            .map(|(n, c)| n.to_burn(c, device))
            .collect::<Result<_>>()?;
        let mut out = Vec::with_capacity(x.rows());
        let width = self.input_width();
        let mut z = [0.0f32; MAX_WIDTH];
        for row in x.iter_rows() {
            let (task, net, head) = self.route_of(row)?;
            self.encode(&self.canonical(row)?, &mut z);
            let mut sum = 0.0f32;
            for member in 0..self.members {
                let t = Tensor::<2>::from_data(
                    TensorData::new(z[..width].to_vec(), [1, width]),
                    device,
                );
                sum += burn_nets[member * self.nets.len() / self.members + net]
                    .forward(t)
                    .into_data()
                    .try_to_vec::<f32>()
                    .map_err(|e| Error::InvalidData(format!("MEDN output is not f32: {e:?}")))?
                    [head];
            }
            out.push(
                self.targets
                    .to_ms(task, f64::from(sum / self.members as f32)),
            );
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
