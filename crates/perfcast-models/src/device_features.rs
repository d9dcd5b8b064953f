//! Cross-device mode: one model learns from the measurements of several devices and predicts
//! devices it never measured from their published specs (PerfNetV2's setting).
//!
//! A cross-device model reads the same feature rows as any other model (the single-device
//! [`FeatureSchema::for_kind`] schema, whose hash stays unchanged): every row already carries its
//! device's peak GFLOP/s, bandwidth and roofline time. Inside, the row is extended with a device
//! block derived from those columns ([`DEVICE_BLOCK`]: the module's compute time and memory time
//! on that device, the device's ridge point and which side of it the module sits), and the inner
//! model (ridge, k-NN, trees, MEDN) learns the latency *normalised by the roofline estimate on that
//! device*, `ms / roofline_ms`: the inverse of the achieved efficiency. Plain latencies differ by
//! the devices' speed, which a model cannot interpolate from four or five devices; efficiencies
//! transfer (docs/accuracy.md#gpus-across-devices).
//!
//! Why only peak and bandwidth: the prediction path builds rows from the bundle's device spec
//! without knowing which models it serves, so anything a cross-device model reads must be in the
//! row. With four to six training devices, more device fields (SMs, clock, memory, cache) give
//! trees more ways to tell the training devices apart than to generalise, and the published
//! scratch runs found them to overfit.
//!
//! ```
//! use perfcast_models::device_features::CrossDeviceParams;
//! use perfcast_models::eval::ModelParams;
//!
//! let params = CrossDeviceParams::wrap(ModelParams::by_name("trees")?);
//! assert_eq!(params.name(), "trees-xdev");
//! # Ok::<(), perfcast_models::Error>(())
//! ```

use perfcast_core::{DeviceSpec, Metrics};
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::eval::ModelParams;
use crate::features::{FeatureSchema, TrainSet};
use crate::matrix::Matrix;
use crate::regressor;
use perfcast_predict::device_features::busy_behind_floor;
pub use perfcast_predict::device_features::{
    Cols, DEFAULT_TILE, DEVICE_BLOCK, FittedCrossDevice, Normalise, SPEC_FIELDS, SavedCrossDevice,
    Scale, UTIL, extend, extend_row, extended_schema, family_name, fill, is_extended, lookup,
    needs_device,
};
use perfcast_predict::residual::{FromFn, StackWith};

/// Checks spec field names, naming an unknown one.
pub fn check_fields(fields: &[String]) -> Result<()> {
    perfcast_predict::device_features::check_fields(fields).map_err(invalid)
}

/// Positions of the `mask` column names in the extended `schema`, naming an unknown one
/// ([`perfcast_predict::device_features::mask_columns`]).
fn mask_columns(schema: &FeatureSchema, mask: &[String], only_fields: bool) -> Result<Vec<usize>> {
    perfcast_predict::device_features::mask_columns(schema, mask, only_fields).map_err(invalid)
}

fn invalid(message: String) -> Error {
    Error::InvalidParams {
        model: "xdev",
        message,
    }
}

/// A training set of single-device rows (any mix of devices) as the inner model sees it:
/// extended rows, latencies divided by each row's normalising time. Rows' devices are looked
/// up in `params.devices` when spec fields or the wave scale need them.
fn extend_set(data: &TrainSet, params: &CrossDeviceParams) -> Result<(TrainSet, f64)> {
    let base = FeatureSchema::for_kind(data.schema.kind);
    if data.schema != base {
        return Err(Error::InvalidData(format!(
            "cross-device models read the `{}` single-device schema",
            data.schema.kind
        )));
    }
    let cols = Cols::of(&base)?;
    let schema = extended_schema(base.kind, &params.fields);
    let mask = mask_columns(&schema, &params.mask, params.only_fields)?;
    let mut how = params.normalise();
    let floors = launch_floors_ms(data, &cols);
    if how.scale == Scale::Utilisation {
        how.floor_ms = floors
            .iter()
            .map(|f| f.1)
            .fold(f64::INFINITY, f64::min)
            .max(0.0);
    }
    let mut x = Matrix::with_cols(schema.len());
    let mut row = vec![0.0; schema.len()];
    let mut y = Vec::with_capacity(data.len());
    let mut groups = Vec::with_capacity(data.len());
    let cycles = params.fields.iter().any(|f| f == "cycles");
    for (i, (r, &t)) in data.x.iter_rows().zip(&data.y).enumerate() {
        let (width, device) = extend(
            &cols,
            &params.fields,
            &mask,
            how.scale,
            &params.devices,
            r,
            &mut row,
        )?;
        let key = (r[cols.peak].to_bits(), r[cols.bandwidth].to_bits());
        let floor = floors.iter().find(|f| f.0 == key).map_or(0.0, |f| f.1);
        x.push_row(&row[..width]);
        y.push(match how.scale {
            // The kernel's own time: the latency where the floor overlaps it, what the
            // device's own launch floor leaves where it adds.
            Scale::Utilisation => {
                StackWith::on(FromFn(|r: &[f64]| Ok(cols.busy_ms(r, device, cycles)))).target(
                    r,
                    busy_behind_floor(floor, t, params.floor_norm).max(BUSY_SHARE * t),
                )?
            }
            _ => StackWith::on(FromFn(|r: &[f64]| Ok(cols.scale(r, &how, device)))).target(r, t)?,
        });
        if let Some(&g) = data.groups.get(i) {
            groups.push(g);
        }
    }
    let set = TrainSet {
        schema,
        x,
        y,
        groups,
    };
    Ok((set, how.floor_ms))
}

/// Spec fields the trees answering the training devices' own rows read besides the plain row.
const SEEN_FIELDS: [&str; 3] = ["util", "phase", "dtype"];

/// The trees answering the training devices' own rows: deeper and longer than the default, as
/// they learn each device's efficiencies apart from the spec (early stopping still ends them
/// when the held-out rows stop improving).
fn seen_trees() -> crate::trees::TreeParams {
    crate::trees::TreeParams {
        n_trees: 600,
        max_leaves: 63,
        ..Default::default()
    }
}

/// Whether the rows' devices share architecture generations: the median generation holds at
/// least two of them. Where most generations hold one device, the generation names the device,
/// and a model that splits on it cannot answer a device it never saw.
fn generations_shared(data: &TrainSet, devices: &[DeviceSpec]) -> Result<bool> {
    let cols = Cols::of(&data.schema)?;
    let mut per_year: BTreeMap<u16, usize> = BTreeMap::new();
    for ((peak, bw), _) in launch_floors_ms(data, &cols) {
        let (peak, bw) = (f64::from_bits(peak), f64::from_bits(bw));
        if let Some(d) = devices
            .iter()
            .find(|d| d.peak_gflops == peak && d.mem_bandwidth_gbs == bw)
        {
            *per_year.entry(perfcast_core::arch::year_of(d)).or_default() += 1;
        }
    }
    let mut counts: Vec<usize> = per_year.into_values().collect();
    counts.sort_unstable();
    Ok(counts.get(counts.len() / 2).is_some_and(|&n| n >= 2))
}

/// The smallest launch floor of each vendor's devices among the rows' ([`launch_floors_ms`];
/// devices found in `devices` by peak and bandwidth, vendors by [`crate::gpu_util::vendor`]).
/// Launch costs follow the driver stack more than the chip: NeuSight's AMD GPUs pay about
/// 1.5-2x the NVIDIA floor on tiny kernels.
fn vendor_floors(data: &TrainSet, cols: &Cols, devices: &[DeviceSpec]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for ((peak, bw), floor) in launch_floors_ms(data, cols) {
        let (peak, bw) = (f64::from_bits(peak), f64::from_bits(bw));
        if let Some(d) = devices
            .iter()
            .find(|d| d.peak_gflops == peak && d.mem_bandwidth_gbs == bw)
        {
            let v = out
                .entry(crate::gpu_util::vendor(&d.name).to_string())
                .or_insert(f64::INFINITY);
            *v = f64::min(*v, floor);
        }
    }
    out
}

/// The kind's launch floor in units of the device's `launch_us`: the median over the rows'
/// devices whose specs give `launch_us` of their floor ([`launch_floors_ms`]) over it; `None`
/// when none does.
fn launch_ratio(data: &TrainSet, cols: &Cols, devices: &[DeviceSpec]) -> Option<f64> {
    let mut ratios: Vec<f64> = launch_floors_ms(data, cols)
        .into_iter()
        .filter_map(|((peak, bw), floor)| {
            let (peak, bw) = (f64::from_bits(peak), f64::from_bits(bw));
            let d = devices
                .iter()
                .find(|d| d.peak_gflops == peak && d.mem_bandwidth_gbs == bw)?;
            d.launch_us.map(|l| floor * 1e3 / l)
        })
        .filter(|r| r.is_finite() && *r > 0.0)
        .collect();
    if ratios.is_empty() {
        return None;
    }
    ratios.sort_by(f64::total_cmp);
    let n = ratios.len();
    Some(if n % 2 == 1 {
        ratios[n / 2]
    } else {
        (ratios[n / 2 - 1] + ratios[n / 2]) / 2.0
    })
}

/// The `floor_norm` of [`CrossDeviceParams::utilisation`]: latency = `sqrt(floor^2 +
/// kernel^2)`. NeuSight's timings are neither floor + kernel nor `max(floor, kernel)`: a
/// 4M-element add on an A100 takes about its floor, not floor + kernel. Chosen with
/// `bench/gpu/splits.sh` (docs/accuracy.md#figures-behind-code-choices).
pub const UTIL_FLOOR_NORM: f64 = 2.0;

/// Least share of a latency [`Scale::Utilisation`] counts as busy time (rows below the floor
/// say little about utilisation).
const BUSY_SHARE: f64 = 0.05;

/// Quantile of a device's latencies taken as its launch floor.
const FLOOR_QUANTILE: f64 = 0.02;

/// The launch floors of the rows' devices (told apart by the bits of their peak and bandwidth),
/// ms: each one's [`FLOOR_QUANTILE`] latency quantile. [`Scale::Utilisation`] learns each
/// device's busy time above its own floor and predicts with the smallest floor: an unseen
/// device's floor is unknown, and one too high over-predicts every tiny kernel while one too low
/// only shifts them by microseconds.
fn launch_floors_ms(data: &TrainSet, cols: &Cols) -> Vec<((u64, u64), f64)> {
    let mut by_device: Vec<((u64, u64), Vec<f64>)> = Vec::new();
    for (r, &t) in data.x.iter_rows().zip(&data.y) {
        let key = (r[cols.peak].to_bits(), r[cols.bandwidth].to_bits());
        match by_device.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(t),
            None => by_device.push((key, vec![t])),
        }
    }
    by_device
        .into_iter()
        .map(|(key, mut v)| {
            v.sort_by(f64::total_cmp);
            (
                key,
                v[((v.len() - 1) as f64 * FLOOR_QUANTILE).round() as usize],
            )
        })
        .collect()
}

/// Peak and bandwidth of each device with training-step rows in `data` (none when every row
/// is one phase: the ratio between phases is only learned from both).
fn phase_devices(data: &TrainSet, cols: &Cols) -> Vec<[f64; 2]> {
    let (mut training, mut forward) = (Vec::new(), false);
    for r in data.x.iter_rows() {
        if !cols.is_training(r) {
            forward = true;
            continue;
        }
        let key = [r[cols.peak], r[cols.bandwidth]];
        if !training.contains(&key) {
            training.push(key);
        }
    }
    if forward { training } else { Vec::new() }
}

impl CrossDeviceParams {
    /// The GPU utilisation model (`util`): gradient-boosted trees on the [`crate::gpu_util`]
    /// features alone learn `busy time / roofline`, predictions are `floor + roofline /
    /// utilisation` with the utilisation clamped to (0, 1]. `devices` are the specs of the
    /// training rows' devices.
    pub fn utilisation(devices: &[DeviceSpec]) -> CrossDeviceParams {
        CrossDeviceParams {
            inner: ModelParams::new(crate::trees::TreeParams {
                n_trees: 200,
                min_samples_leaf: 50,
                subsample: 1.0,
                baseline: false,
                ..Default::default()
            }),
            // `phase`: a training step's backward kernels run at utilisations of their own;
            // `dtype`: tensor-core kernels in half precision too.
            // `cycles`: row reductions paced by their SMs where bandwidth per SM-cycle is high.
            // `generation`: kernels run at their architecture's efficiencies, which the spec
            // does not carry.
            fields: ["util", "phase", "dtype", "cycles", "generation"]
                .map(String::from)
                .to_vec(),
            devices: devices.to_vec(),
            floor_ms: 0.0,
            scale: Scale::Utilisation,
            tile: DEFAULT_TILE,
            mask: Vec::new(),
            only_fields: true,
            seen: true,
            floor_norm: UTIL_FLOOR_NORM,
        }
    }
}

/// Hyper-parameters of a cross-device model: the inner family and its own parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CrossDeviceParams {
    /// The model fitted on extended rows and normalised latencies.
    pub inner: ModelParams,
    /// Spec fields read besides peak and bandwidth ([`SPEC_FIELDS`]); default none.
    #[serde(default)]
    pub fields: Vec<String>,
    /// Specs of the devices whose rows the model may see (needed with `fields`: rows carry
    /// only peak and bandwidth).
    #[serde(default)]
    pub devices: Vec<DeviceSpec>,
    /// Per-call floor added to the roofline time that latencies are normalised by, ms; default
    /// 0.01 (a kernel launch): tiny modules then normalise to about 1 on every device.
    #[serde(default = "default_floor_ms")]
    pub floor_ms: f64,
    /// What latencies are normalised by; default the roofline time.
    #[serde(default)]
    pub scale: Scale,
    /// Tile side of [`Scale::Waves`]; default 64.
    #[serde(default = "default_tile")]
    pub tile: f64,
    /// Extended-row columns the inner model sees as zero (for example the absolute peak and
    /// bandwidth, which tell training devices apart without generalising); default none.
    #[serde(default)]
    pub mask: Vec<String>,
    /// The inner model sees only the spec fields (the single-device row and the device block
    /// masked): the `util` model's features mean the same on every device; default false.
    #[serde(default)]
    pub only_fields: bool,
    /// With [`Scale::Utilisation`]: also fit a cross-device trees model that tells the training
    /// devices apart, and answer rows of those devices with it (bounded below by the same least
    /// time); devices never seen get the utilisation model. Spec-only features cannot tell two
    /// GPUs of one spec class apart, so on its own devices the utilisation model is 2-3x less
    /// accurate than a model that can; default false.
    #[serde(default)]
    pub seen: bool,
    /// With [`Scale::Utilisation`]: how the launch floor and the kernel combine, the `p` of
    /// `latency = (floor^p + kernel^p)^(1/p)` (1 adds them, larger `p` overlaps them); default 1.
    #[serde(default = "one")]
    pub floor_norm: f64,
}

fn one() -> f64 {
    1.0
}

fn default_tile() -> f64 {
    DEFAULT_TILE
}

fn default_floor_ms() -> f64 {
    DEFAULT_FLOOR_MS
}

/// Default [`CrossDeviceParams::floor_ms`].
pub const DEFAULT_FLOOR_MS: f64 = 0.01;

impl CrossDeviceParams {
    /// Wraps a family. The roofline model reads peak and bandwidth itself and stays as it is;
    /// an already wrapped family is returned unchanged.
    pub fn wrap(params: ModelParams) -> ModelParams {
        if !params.wraps() {
            return params;
        }
        ModelParams::new(CrossDeviceParams {
            inner: params,
            fields: Vec::new(),
            devices: Vec::new(),
            floor_ms: DEFAULT_FLOOR_MS,
            scale: Scale::Roofline,
            tile: DEFAULT_TILE,
            mask: Vec::new(),
            only_fields: false,
            seen: false,
            floor_norm: 1.0,
        })
    }

    /// [`CrossDeviceParams::wrap`] reading spec `fields` of `devices` too.
    pub fn wrap_with(
        params: ModelParams,
        fields: &[String],
        devices: &[DeviceSpec],
    ) -> ModelParams {
        let mut wrapped = CrossDeviceParams::wrap(params);
        if let Some(p) = wrapped.downcast_mut::<CrossDeviceParams>() {
            // A family that names its own fields (`util`) keeps them.
            if !fields.is_empty() {
                p.fields = fields.to_vec();
            }
            p.devices = devices.to_vec();
        }
        wrapped
    }

    /// Family name: the inner one with `-xdev`, or `util` for the utilisation model.
    pub fn name(&self) -> &'static str {
        family_name(self.scale, self.inner.name())
    }

    /// Checks the inner parameters and the spec fields.
    pub fn validate(&self) -> Result<()> {
        if !self.inner.wraps() {
            return Err(Error::InvalidParams {
                model: "xdev",
                message: format!("`{}` cannot be wrapped", self.inner.name()),
            });
        }
        check_fields(&self.fields)?;
        if !(self.tile.is_finite() && self.tile >= 1.0) {
            return Err(Error::InvalidParams {
                model: "xdev",
                message: format!("tile must be finite and >= 1, got {}", self.tile),
            });
        }
        if !(self.floor_norm.is_finite() && self.floor_norm >= 1.0) {
            return Err(Error::InvalidParams {
                model: "xdev",
                message: format!(
                    "floor_norm must be finite and >= 1, got {}",
                    self.floor_norm
                ),
            });
        }
        if !(self.floor_ms.is_finite() && self.floor_ms >= 0.0) {
            return Err(Error::InvalidParams {
                model: "xdev",
                message: format!("floor_ms must be finite and >= 0, got {}", self.floor_ms),
            });
        }
        self.inner.validate()
    }

    /// Fits on single-device rows of any mix of devices.
    pub fn fit(&self, data: &TrainSet) -> Result<FittedCrossDevice> {
        self.validate()?;
        regressor::check_train_set(data, 2)?;
        if self.fields.iter().any(|f| f == "generation")
            && !generations_shared(data, &self.devices)?
        {
            let mut without = self.clone();
            without.fields.retain(|f| f != "generation");
            return without.fit(data);
        }
        let (extended, floor_ms) = extend_set(data, self)?;
        let inner = self.inner.fit(&extended)?;
        let (vendor_floors_ms, launch_ratio, phase_devices) = if self.scale == Scale::Utilisation {
            let cols = Cols::of(&data.schema)?;
            (
                vendor_floors(data, &cols, &self.devices),
                launch_ratio(data, &cols, &self.devices),
                phase_devices(data, &cols),
            )
        } else {
            (BTreeMap::new(), None, Vec::new())
        };
        // The seen trees are trusted down to the least work they were fitted on.
        let seen_least_roofline_ms = data.schema.index("roofline_ms").and_then(|c| {
            (0..data.x.rows())
                .map(|i| data.x.row(i)[c])
                .filter(|v| v.is_finite() && *v > 0.0)
                .min_by(f64::total_cmp)
        });
        let (seen, seen_devices) = if self.seen && self.scale == Scale::Utilisation {
            // The utilisation features too: a device's own rows are few, and rows that mean the
            // same on every device let its trees share what the other devices' rows show.
            let fields = SEEN_FIELDS.map(String::from);
            let trees = CrossDeviceParams::wrap_with(
                ModelParams::new(seen_trees()),
                &fields,
                &self.devices,
            );
            let cols = Cols::of(&data.schema)?;
            let keys = launch_floors_ms(data, &cols)
                .into_iter()
                .map(|((peak, bw), _)| [f64::from_bits(peak), f64::from_bits(bw)])
                .collect();
            (Some(Box::new(trees.fit(data)?.to_saved())), keys)
        } else {
            (None, Vec::new())
        };
        Ok(FittedCrossDevice::new(SavedCrossDevice {
            schema: data.schema.clone(),
            inner: Box::new(inner.to_saved()),
            fields: self.fields.clone(),
            devices: self.devices.clone(),
            floor_ms,
            scale: self.scale,
            tile: self.tile,
            mask: self.mask.clone(),
            only_fields: self.only_fields,
            seen_least_roofline_ms: seen.as_ref().and(seen_least_roofline_ms),
            seen,
            seen_devices,
            vendor_floors_ms,
            floor_norm: if self.scale == Scale::Utilisation {
                self.floor_norm
            } else {
                1.0
            },
            launch_ratio,
            phase_devices,
        })?)
    }

    fn normalise(&self) -> Normalise {
        Normalise {
            scale: self.scale,
            tile: self.tile,
            floor_ms: self.floor_ms,
        }
    }
}

impl crate::regressor::Fit for CrossDeviceParams {
    type Fitted = FittedCrossDevice;

    fn validate(&self) -> Result<()> {
        CrossDeviceParams::validate(self)
    }

    fn fit(&self, data: &TrainSet) -> Result<FittedCrossDevice> {
        CrossDeviceParams::fit(self, data)
    }
}

impl crate::params::FamilyParams for CrossDeviceParams {
    fn name(&self) -> &'static str {
        CrossDeviceParams::name(self)
    }

    fn set_observer(&mut self, observer: std::sync::Arc<dyn perfcast_core::progress::Observer>) {
        self.inner.set_observer(observer);
    }

    fn cross_device(&self) -> crate::params::CrossDevice {
        crate::params::CrossDevice::Itself
    }
}

/// Rows of several devices stacked into one training set (same kind and schema).
pub fn concat(sets: &[&TrainSet]) -> Result<TrainSet> {
    let first = sets
        .first()
        .ok_or_else(|| Error::InvalidData("no training sets to stack".into()))?;
    let mut x = Matrix::with_cols(first.schema.len());
    let (mut y, mut groups) = (Vec::new(), Vec::new());
    for s in sets {
        if s.schema != first.schema {
            return Err(Error::InvalidData(format!(
                "cannot stack `{}` rows with `{}` rows",
                s.schema.kind, first.schema.kind
            )));
        }
        for r in s.x.iter_rows() {
            x.push_row(r);
        }
        y.extend_from_slice(&s.y);
        groups.extend_from_slice(&s.groups);
    }
    Ok(TrainSet {
        schema: first.schema.clone(),
        x,
        y,
        groups,
    })
}

/// Every `step`-th row (at least one), for bounded experiments on large sets.
pub fn thin(data: &TrainSet, max_rows: usize) -> TrainSet {
    if max_rows == 0 || data.len() <= max_rows {
        return data.clone();
    }
    let idx: Vec<usize> = (0..max_rows).map(|i| i * data.len() / max_rows).collect();
    data.select(&idx)
}

/// One held-out device's score in a leave-one-device-out evaluation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeldOutDevice {
    /// The device left out.
    pub device: String,
    /// Training rows (the other devices).
    pub train_rows: usize,
    /// Accuracy on every row of the held-out device.
    pub metrics: Metrics,
    /// Predictions below the device's spec roofline that were raised to it before scoring
    /// (GPU devices in `perfcast eval devices`; 0 where nothing is raised).
    #[serde(default)]
    pub raised_to_roofline: usize,
}

/// Raises each prediction of `data`'s rows that is below the row's spec roofline
/// (`roofline_ms`) to it, as the predictor does for GPUs, and returns how many it raised (0
/// for a schema without the column).
pub fn raise_to_roofline(data: &TrainSet, pred: &mut [f64]) -> usize {
    let Some(r) = data.schema.index("roofline_ms") else {
        return 0;
    };
    let mut raised = 0;
    for (p, row) in pred.iter_mut().zip(data.x.iter_rows()) {
        if *p < row[r] {
            *p = row[r];
            raised += 1;
        }
    }
    raised
}

/// Leave-one-device-out: for each device in turn, fit `params` on the other devices' rows and
/// score it on every row of the one left out. `sets` holds one (device name, rows) per device.
pub fn leave_one_device_out(
    params: &ModelParams,
    sets: &[(String, TrainSet)],
) -> Result<Vec<HeldOutDevice>> {
    Ok(leave_devices_out(params, sets, &HoldOut::default())?
        .into_iter()
        .map(|(score, _)| score)
        .collect())
}

/// Which devices [`leave_devices_out`] holds out and how it scores them.
#[derive(Clone, Debug, Default)]
pub struct HoldOut {
    /// Per set: whether it is held out (missing: yes). The others are only trained on.
    pub held: Vec<bool>,
    /// Per set: whether predictions below the spec roofline are raised to it before scoring,
    /// as the predictor does for GPUs (missing: no).
    pub raise: Vec<bool>,
    /// Per set: whether models are fitted on it when another device is held out (missing:
    /// yes). A data fault's table is still scored when its device is held out, never learned.
    pub trained: Vec<bool>,
    /// What is fitted, for errors (`` `linear`, ridge-xdev ``).
    pub label: String,
}

/// [`leave_one_device_out`] with a choice of devices to hold out and of devices whose
/// predictions are raised to the spec roofline; returns each held-out device's score with its
/// predictions (in its rows' order). The folds are [`crate::split::leave_one_out`]'s over the
/// sets' device names: sets of one name are held out (and scored) together, in the order of
/// their first set, whose `held` and `raise` flags apply.
pub fn leave_devices_out(
    params: &ModelParams,
    sets: &[(String, TrainSet)],
    options: &HoldOut,
) -> Result<Vec<(HeldOutDevice, Vec<f64>)>> {
    if sets.len() < 2 {
        return Err(Error::InvalidData(format!(
            "leave-one-device-out needs at least 2 devices, got {}",
            sets.len()
        )));
    }
    let mut out = Vec::with_capacity(sets.len());
    // By device name: a device measured in several sets is held out whole.
    let names: Vec<&str> = sets.iter().map(|(d, _)| d.as_str()).collect();
    for (train, held) in crate::split::leave_one_out(&names) {
        let i = held[0];
        let device = &sets[i].0;
        let pick = |idx: &[usize], training: bool| -> Vec<&TrainSet> {
            idx.iter()
                .filter(|&&j| !training || options.trained.get(j).copied().unwrap_or(true))
                .map(|&j| &sets[j].1)
                .filter(|s| !s.is_empty())
                .collect()
        };
        let tests = pick(&held, false);
        if tests.is_empty() || !options.held.get(i).copied().unwrap_or(true) {
            continue;
        }
        let joined;
        let test = if let [one] = tests[..] {
            one
        } else {
            joined = concat(&tests)?;
            &joined
        };
        let rest = concat(&pick(&train, true))?;
        let model = params.fit(&rest).map_err(|e| {
            if options.label.is_empty() {
                e.context(format!("`{device}` left out"))
            } else {
                e.context(format!("{}, `{device}` left out", options.label))
            }
        })?;
        let mut pred = model.predict(&test.x)?;
        let raised = if options.raise.get(i).copied().unwrap_or(false) {
            raise_to_roofline(test, &mut pred)
        } else {
            0
        };
        let metrics = Metrics::compute(&pred, &test.y)
            .ok_or_else(|| Error::InvalidData(format!("no rows of `{device}` to score")))?;
        out.push((
            HeldOutDevice {
                device: device.clone(),
                train_rows: rest.len(),
                metrics,
                raised_to_roofline: raised,
            },
            pred,
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::row;
    use crate::regressor::{Regressor, SavedModel};
    use crate::trees::TreeParams;
    use perfcast_core::testing::gpu;
    use perfcast_core::{Context, DeviceSpec, Linear, ModuleKind, ModuleSpec, Phase};

    /// Linear layers on a device whose achieved efficiency is the same everywhere: 60% of peak
    /// for compute, 70% of bandwidth for memory, plus 5 us per call.
    fn set(device: &DeviceSpec, n: usize) -> TrainSet {
        let schema = FeatureSchema::for_kind(ModuleKind::Linear);
        let mut x = Matrix::with_cols(schema.len());
        let (mut y, mut groups) = (Vec::new(), Vec::new());
        for i in 0..n {
            let spec = ModuleSpec::Linear(Linear {
                tokens: 1 + (i * 7) % 64,
                in_features: 64 + (i * 131) % 4000,
                out_features: 64 + (i * 257) % 4000,
                bias: true,
            });
            let ctx = Context {
                batch: 1 << (i % 6),
                phase: Phase::Inference,
                threads: 1,
                utilisation: 0.0,
            };
            let r = row(&spec, &ctx, device);
            let d = perfcast_core::features::derive(&spec, ctx.batch);
            let ms = (d.flops / (0.6 * device.peak_gflops * 1e6))
                .max((d.bytes_read + d.bytes_written) / (0.7 * device.mem_bandwidth_gbs * 1e6))
                + 0.005;
            x.push_row(&r);
            y.push(ms);
            groups.push(i as u64);
        }
        TrainSet {
            schema,
            x,
            y,
            groups,
        }
    }

    #[test]
    fn the_single_device_schema_is_untouched_and_the_block_is_appended() {
        let base = FeatureSchema::for_kind(ModuleKind::Linear);
        let ext = extended_schema(ModuleKind::Linear, &[]);
        assert_eq!(ext.names[..base.len()], base.names[..]);
        assert_eq!(ext.len(), base.len() + DEVICE_BLOCK.len());
        assert_ne!(ext.hash(), base.hash());
        assert!(is_extended(&ext) && !is_extended(&base));
    }

    #[test]
    fn the_block_is_compute_and_memory_time_on_the_rows_device() {
        let d = gpu("a", 10_000.0, 500.0);
        let data = set(&d, 3);
        let mut out = Vec::new();
        extend_row(&data.schema, data.x.row(0), &mut out).unwrap();
        let s = &data.schema;
        let r = data.x.row(0);
        let flops = r[s.index("work_flops").unwrap()];
        // GFLOP/s x 1e6 is FLOP per millisecond.
        assert!((out[0] - flops / 1e10).abs() <= 1e-12 * out[0].abs());
        assert_eq!(out[2], 20.0);
        assert!((0.0..=1.0).contains(&out[3]));
    }

    #[test]
    fn a_device_never_seen_is_predicted_from_its_spec() {
        // Same efficiencies on every device: a model of efficiency transfers exactly, while
        // the held-out device is faster than any training one.
        let devices = [
            gpu("slow", 4_000.0, 200.0),
            gpu("mid", 8_000.0, 320.0),
            gpu("fast", 14_000.0, 900.0),
            gpu("new", 19_500.0, 1_555.0),
        ];
        let sets: Vec<(String, TrainSet)> = devices
            .iter()
            .map(|d| (d.name.clone(), set(d, 150)))
            .collect();
        let trees = ModelParams::new(TreeParams::default());
        let wrapped = CrossDeviceParams::wrap(trees.clone());
        let xdev = leave_one_device_out(&wrapped, &sets).unwrap();
        let plain = leave_one_device_out(&trees, &sets).unwrap();
        let new = |v: &[HeldOutDevice]| v.iter().find(|h| h.device == "new").unwrap().metrics.mape;
        assert!(new(&xdev) < 5.0, "cross-device {}", new(&xdev));
        assert!(
            new(&xdev) < new(&plain),
            "{} vs {}",
            new(&xdev),
            new(&plain)
        );
        assert_eq!(xdev.len(), 4);
        assert_eq!(xdev[0].train_rows, 450);
    }

    /// A fitted cross-device model's saved form.
    fn saved_form(model: &FittedCrossDevice) -> SavedCrossDevice {
        model
            .to_saved()
            .downcast_ref::<SavedCrossDevice>()
            .expect("a cross-device model")
            .clone()
    }

    /// Four devices of different sizes (SMs and L2 grow with the peak).
    fn sized_devices() -> Vec<DeviceSpec> {
        let mut out = Vec::new();
        for (i, (name, peak, bw, sms)) in [
            ("slow", 4_000.0, 200.0, 20),
            ("mid", 8_000.0, 320.0, 40),
            ("fast", 14_000.0, 900.0, 80),
            ("new", 19_500.0, 1_555.0, 108),
        ]
        .into_iter()
        .enumerate()
        {
            let mut d = gpu(name, peak, bw);
            d.cores = sms;
            d.cache_mb = 2.0 * (i + 1) as f64;
            out.push(d);
        }
        out
    }

    #[test]
    fn the_utilisation_model_extrapolates_to_a_bigger_gpu_and_never_beats_its_roofline() {
        let devices = sized_devices();
        let sets: Vec<(String, TrainSet)> = devices
            .iter()
            .map(|d| (d.name.clone(), set(d, 300)))
            .collect();
        // Seed 1 for both, because the margin over plain trees depends on which groups early
        // stopping holds out (docs/accuracy.md#figures-behind-code-choices).
        let mut params = CrossDeviceParams::utilisation(&devices);
        params.inner = ModelParams::new(crate::trees::TreeParams {
            n_trees: 200,
            min_samples_leaf: 50,
            subsample: 1.0,
            baseline: false,
            seed: 1,
            ..Default::default()
        });
        let util = ModelParams::new(params);
        assert_eq!(util.name(), UTIL);
        let held = leave_one_device_out(&util, &sets).unwrap();
        let new = held.iter().find(|h| h.device == "new").unwrap();
        // The launch floor is learned from latency quantiles, not known: a few percent off.
        assert!(
            new.metrics.mape < 10.0,
            "util on the new GPU: {}",
            new.metrics.mape
        );
        let plain_params = TreeParams {
            seed: 1,
            ..TreeParams::default()
        };
        let plain = leave_one_device_out(&ModelParams::new(plain_params), &sets).unwrap();
        let plain_new = plain.iter().find(|h| h.device == "new").unwrap();
        assert!(
            new.metrics.mape < plain_new.metrics.mape,
            "{} vs {}",
            new.metrics.mape,
            plain_new.metrics.mape
        );
        // Fitted without the new GPU, every prediction for it is at least its roofline.
        let train: Vec<&TrainSet> = sets[..3].iter().map(|(_, s)| s).collect();
        let model = util.fit(&concat(&train).unwrap()).unwrap();
        let test = &sets[3].1;
        let roofline = test.schema.index("roofline_ms").unwrap();
        for r in test.x.iter_rows() {
            let p = model.predict_row(r).unwrap();
            assert!(
                p >= r[roofline],
                "{p} ms below the roofline {}",
                r[roofline]
            );
        }
        // The saved form reloads to the same model, floor and features included.
        let saved = serde_json::to_string(&model.to_saved()).unwrap();
        let back: SavedModel = serde_json::from_str(&saved).unwrap();
        let back = back.into_regressor();
        assert_eq!(back.name(), UTIL);
        for r in test.x.iter_rows().take(50) {
            assert_eq!(back.predict_row(r).unwrap(), model.predict_row(r).unwrap());
        }
    }

    #[test]
    fn the_generation_is_read_only_where_generations_hold_several_devices() {
        let fields = |devices: &[DeviceSpec]| {
            let sets: Vec<TrainSet> = devices.iter().map(|d| set(d, 120)).collect();
            let data = concat(&sets.iter().collect::<Vec<_>>()).unwrap();
            let model = CrossDeviceParams::utilisation(devices).fit(&data).unwrap();
            saved_form(&model).fields
        };
        // Kepler, Maxwell, Pascal: one device each, so the year would name the device.
        let one_each = [
            gpu("Tesla K40", 4_290.0, 288.0),
            gpu("Tesla M40", 6_840.0, 288.0),
            gpu("Tesla P100", 9_300.0, 732.0),
        ];
        assert!(!fields(&one_each).iter().any(|f| f == "generation"));
        // Two of each generation: the year groups them.
        let two_each = [
            gpu("Tesla K40", 4_290.0, 288.0),
            gpu("Tesla K80", 4_370.0, 240.0),
            gpu("Tesla M40", 6_840.0, 288.0),
            gpu("Tesla M60", 4_820.0, 160.0),
            gpu("Tesla P100", 9_300.0, 732.0),
            gpu("TITAN Xp", 12_150.0, 548.0),
        ];
        assert!(fields(&two_each).iter().any(|f| f == "generation"));
    }

    #[test]
    fn the_utilisation_floor_is_the_smallest_device_floor() {
        let devices = sized_devices();
        let data = set(&devices[0], 200);
        let faster = set(&devices[3], 200);
        let both = concat(&[&data, &faster]).unwrap();
        let cols = Cols::of(&both.schema).unwrap();
        let floors = launch_floors_ms(&both, &cols);
        assert_eq!(floors.len(), 2);
        let model = CrossDeviceParams::utilisation(&devices).fit(&both).unwrap();
        let saved = saved_form(&model);
        let least = floors.iter().map(|f| f.1).fold(f64::INFINITY, f64::min);
        assert_eq!(saved.floor_ms, least);
        assert!(saved.only_fields && saved.scale == Scale::Utilisation);
    }

    #[test]
    fn a_spec_launch_time_sets_the_floor_of_a_device_never_seen() {
        let mut devices = sized_devices();
        for d in &mut devices[..3] {
            d.launch_us = Some(10.0);
        }
        let train: Vec<TrainSet> = devices[..3].iter().map(|d| set(d, 200)).collect();
        let data = concat(&train.iter().collect::<Vec<_>>()).unwrap();
        let floors = launch_floors_ms(&data, &Cols::of(&data.schema).unwrap());
        let mut ratios: Vec<f64> = floors.iter().map(|f| f.1 * 1e3 / 10.0).collect();
        ratios.sort_by(f64::total_cmp);
        let params = CrossDeviceParams::utilisation(&devices);
        assert_eq!(params.floor_norm, UTIL_FLOOR_NORM);
        let model = params.fit(&data).unwrap();
        let saved = saved_form(&model);
        assert_eq!(saved.launch_ratio, Some(ratios[1]));
        assert_eq!(saved.floor_norm, UTIL_FLOOR_NORM);
        // The unseen GPU with a measured launch time of 40 us: its tiniest op takes about
        // 40 us x ratio, where without `launch_us` it would get the training floor.
        let mut new = devices[3].clone();
        new.launch_us = Some(40.0);
        let fitted = FittedCrossDevice::new(saved.clone()).unwrap();
        assert_eq!(fitted.floor_ms(Some(&new)), 0.04 * ratios[1]);
        assert_eq!(
            fitted.floor_ms(Some(&devices[3])),
            saved.vendor_floors_ms["nvidia"]
        );
        let tiny = set(&new, 1);
        let with = SavedModel::new("crossdevice", saved.clone())
            .with_device(&new)
            .into_regressor();
        let p = with.predict_row(tiny.x.row(0)).unwrap();
        assert!(p >= 0.04 * ratios[1] && p < 0.04 * ratios[1] * 1.5, "{p}");
        // Without `launch_us` on any training device there is no ratio.
        let plain = CrossDeviceParams::utilisation(&sized_devices())
            .fit(&data)
            .unwrap();
        let plain = saved_form(&plain);
        assert_eq!(plain.launch_ratio, None);
    }

    #[test]
    fn training_devices_are_answered_by_the_model_that_tells_them_apart() {
        // Two devices of one spec class with different efficiencies: spec features alone
        // cannot tell them apart, the `seen` model can.
        let devices = sized_devices();
        let mut twin = devices[1].clone();
        twin.name = "twin".into();
        twin.peak_gflops += 1.0;
        let slow_twin = {
            let mut s = set(&twin, 300);
            for y in &mut s.y {
                *y *= 1.8;
            }
            s
        };
        let mut all = devices[..3].to_vec();
        all.push(twin);
        let data = concat(&[&set(&devices[1], 300), &slow_twin]).unwrap();
        let score = |seen: bool| {
            let mut p = CrossDeviceParams::utilisation(&all);
            p.seen = seen;
            let m = p.fit(&data).unwrap();
            let pred: Vec<f64> = data
                .x
                .iter_rows()
                .map(|r| m.predict_row(r).unwrap())
                .collect();
            Metrics::compute(&pred, &data.y).unwrap().mape
        };
        let (with, without) = (score(true), score(false));
        assert!(with < 5.0 && without > 15.0, "{with} vs {without}");
    }

    #[test]
    fn work_below_every_seen_row_takes_the_lower_of_the_seen_and_spec_answers() {
        // The seen trees fit the devices' own rows; a query with less work than any of them is
        // beyond what they learned: the lower of their answer and the spec model's.
        let devices = sized_devices();
        let data = concat(&[&set(&devices[0], 200), &set(&devices[2], 200)]).unwrap();
        let mut params = CrossDeviceParams::utilisation(&devices);
        params.seen = true;
        let model = params.fit(&data).unwrap();
        let saved = saved_form(&model);
        let roof = data.schema.index("roofline_ms").unwrap();
        let least = (0..data.x.rows())
            .map(|i| data.x.row(i)[roof])
            .fold(f64::INFINITY, f64::min);
        assert_eq!(saved.seen_least_roofline_ms, Some(least));
        let without_seen = FittedCrossDevice::new(SavedCrossDevice {
            seen: None,
            seen_devices: Vec::new(),
            ..saved.clone()
        })
        .unwrap();
        let ctx = Context {
            batch: 1,
            phase: Phase::Inference,
            threads: 1,
            utilisation: 0.0,
        };
        let at = |in_features: usize, out_features: usize| {
            let spec = ModuleSpec::Linear(Linear {
                tokens: 1,
                in_features,
                out_features,
                bias: false,
            });
            row(&spec, &ctx, &devices[0])
        };
        let tiny = at(1, 1);
        assert!(tiny[roof] < least);
        let spec_answer = without_seen.predict_row(&tiny).unwrap();
        let mut seen_only = saved.clone();
        seen_only.seen_least_roofline_ms = None;
        let seen_answer = FittedCrossDevice::new(seen_only)
            .unwrap()
            .predict_row(&tiny)
            .unwrap();
        assert_eq!(
            model.predict_row(&tiny).unwrap(),
            spec_answer.min(seen_answer)
        );
        // Inside the rows' work the seen trees answer their own device.
        let inside = at(2048, 2048);
        assert!(inside[roof] >= least);
        assert_ne!(
            model.predict_row(&inside).unwrap(),
            without_seen.predict_row(&inside).unwrap()
        );
    }

    #[test]
    fn saved_models_predict_the_same_after_a_round_trip() {
        let d = gpu("a", 10_000.0, 500.0);
        let data = set(&d, 80);
        let wrapped = CrossDeviceParams::wrap(ModelParams::by_name("ridge").unwrap());
        let model = wrapped.fit(&data).unwrap();
        assert_eq!(model.name(), "ridge-xdev");
        assert_eq!(
            model.schema().hash(),
            FeatureSchema::for_kind(ModuleKind::Linear).hash()
        );
        let json = serde_json::to_string(&model.to_saved()).unwrap();
        let back: SavedModel = serde_json::from_str(&json).unwrap();
        let back = back.into_regressor();
        for r in data.x.iter_rows() {
            assert_eq!(model.predict_row(r).unwrap(), back.predict_row(r).unwrap());
        }
        assert!(model.predict_row(&[1.0]).is_err());
    }

    #[test]
    fn wave_scaled_masked_models_round_trip_and_reject_unknown_columns() {
        let devices = [gpu("a", 10_000.0, 500.0), gpu("b", 6_000.0, 300.0)];
        let data = concat(&[&set(&devices[0], 60), &set(&devices[1], 60)]).unwrap();
        let params = |mask: &[&str]| {
            let wrapped = CrossDeviceParams::wrap_with(
                ModelParams::by_name("ridge").unwrap(),
                &["tiles".to_string()],
                &devices,
            );
            let mut p = wrapped
                .downcast_ref::<CrossDeviceParams>()
                .expect("ridge is wrapped")
                .clone();
            p.scale = Scale::Waves;
            p.mask = mask.iter().map(|s| (*s).to_string()).collect();
            p
        };
        let err = params(&["no_such_column"]).fit(&data).unwrap_err();
        assert!(err.to_string().contains("no_such_column"), "{err}");
        let model = params(&["dev_peak_gflops"]).fit(&data).unwrap();
        let json = serde_json::to_string(&model.to_saved()).unwrap();
        let back = serde_json::from_str::<SavedModel>(&json)
            .unwrap()
            .into_regressor();
        for r in data.x.iter_rows() {
            let p = model.predict_row(r).unwrap();
            assert!(p > 0.0);
            assert_eq!(p, back.predict_row(r).unwrap());
        }
    }

    #[test]
    fn leave_one_device_out_needs_two_devices() {
        let d = gpu("a", 10_000.0, 500.0);
        let err = leave_one_device_out(
            &ModelParams::by_name("ridge").unwrap(),
            &[("a".into(), set(&d, 10))],
        )
        .unwrap_err();
        assert!(err.to_string().contains("at least 2 devices"), "{err}");
    }
}
