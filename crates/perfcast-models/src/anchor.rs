//! PROFET-style anchor mapping: a module's latency measured on an *anchor* device, plus the
//! published specs of the anchor and a *target* device, predicts the module's latency on the
//! target.
//!
//! The model learns the correction `t_target / (t_anchor * roofline_target / roofline_anchor)`
//! (gradient-boosted trees on its logarithm) from pairs of
//! devices that both measured the same configurations (DeepBench measured the same kernels on
//! every device). Its inputs are the module's own features (configuration, work, GEMM shape; the
//! single-device row without its device columns), its layout (a matmul's operand transposes),
//! the anchor's measured time and achieved efficiency, and the two specs side by side: the
//! ratios of peak GFLOP/s, bandwidth, SMs, shader cores, clock and cache, each device's compute
//! share of its roofline time, the ratio of the roofline times, and whether the two run the
//! same software stack ([`DeviceSpec::software`]). A calibration factor,
//! fitted with each training device left out in turn, moves the predictions to the point that
//! minimises the percentage error ([`AnchorModel::scale`]). Two spec-only baselines are scored
//! beside it: the anchor's time scaled by the peak-FLOP/s ratio (`flops-ratio`) and by the
//! roofline-time ratio (`roofline-ratio`).
//!
//! PROFET assumes anchor and target run the same libraries; DeepBench's GPUs ran four CUDA and
//! one ROCm stack, and its GEMMs differ up to 5x between cuBLAS versions on near-identical
//! GPUs. So where specs name their stack, anchors on the target's stack are chosen first
//! ([`AnchorMode`]), and pairs on one stack get trees and a calibration of their own, fitted on
//! same-stack pairs only and used within the spec ratios those pairs span (trees do not
//! extrapolate; a pair further apart, like the T4 and the V100, goes to the all-pairs trees).
//! Specs without `software` (NeuSight, Justus, users' specs) are mapped as before.
//! [`leave_one_target_out`] predicts each anchor's rows together ([`AnchorModel::predict_rows`]:
//! on one stack, shrunk towards a constant ratio) and a configuration several anchors measured
//! from the geometric mean of their predictions.

use std::collections::{BTreeMap, HashMap};

use perfcast_core::{Context, DeviceKind, DeviceSpec, Metrics, ModuleKind, ModuleSpec};
use perfcast_data::Record;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::features::{FeatureSchema, TrainSet, row};
use crate::matrix::Matrix;
use crate::regressor::{Fit, Regressor};
use crate::split;
use crate::trees::{FittedTrees, TreeParams};

/// The methods [`leave_one_target_out`] scores, in report order.
pub const METHODS: &[&str] = &["learned", "roofline-ratio", "flops-ratio"];

/// Single-device row columns left out of the pair row: they describe one device.
const DEVICE_COLUMNS: &[&str] = &["dev_peak_gflops", "dev_bandwidth_gbs", "roofline_ms"];

/// The spec-pair features after the module's own.
pub const PAIR_FEATURES: &[&str] = &[
    "anchor_ms",
    "anchor_efficiency",
    "peak_ratio",
    "bandwidth_ratio",
    "sm_ratio",
    "shader_ratio",
    "clock_ratio",
    "cache_ratio",
    "roofline_ratio",
    "anchor_compute_share",
    "target_compute_share",
    "same_kind",
    "same_software",
];

/// Whether two devices are known to run the same software stack: both specs name one and the
/// names are equal. PROFET's premise is that they do; DeepBench's GEMMs on near-identical GPUs
/// differ up to 5x between cuBLAS versions.
pub fn same_software(a: &DeviceSpec, b: &DeviceSpec) -> bool {
    matches!((&a.software, &b.software), (Some(x), Some(y)) if x == y)
}

/// The feature schema of a pair row of `kind`: the single-device row without its device
/// columns, the kind's layout columns (a matmul's operand transposes), then [`PAIR_FEATURES`].
pub fn pair_schema(kind: ModuleKind) -> FeatureSchema {
    let base = FeatureSchema::for_kind(kind);
    let names = base
        .names
        .iter()
        .filter(|n| !DEVICE_COLUMNS.contains(&n.as_str()))
        .cloned()
        .chain(kind.layout_columns().iter().map(|s| (*s).to_string()))
        .chain(PAIR_FEATURES.iter().map(|s| (*s).to_string()))
        .collect();
    FeatureSchema { kind, names }
}

/// A module's roofline time on a device (ms) and the compute part's share of compute + memory.
fn roofline(row: &[f64], schema: &FeatureSchema) -> (f64, f64) {
    let at = |n: &str| schema.index(n).map_or(0.0, |i| row[i]);
    let compute = at("work_flops") / (at("dev_peak_gflops") * 1e6);
    let memory = at("work_bytes") / (at("dev_bandwidth_gbs") * 1e6);
    let total = compute + memory;
    (
        compute.max(memory).max(1e-9),
        if total > 0.0 { compute / total } else { 0.0 },
    )
}

/// The spec-only baseline: `anchor_ms` scaled by the ratio of the module's roofline times on
/// `target` and on `anchor`.
pub fn roofline_ratio_ms(
    spec: &ModuleSpec,
    context: &Context,
    anchor: &DeviceSpec,
    target: &DeviceSpec,
    anchor_ms: f64,
) -> f64 {
    let base = FeatureSchema::for_kind(spec.kind());
    let (roof_a, _) = roofline(&row(spec, context, anchor), &base);
    let (roof_t, _) = roofline(&row(spec, context, target), &base);
    anchor_ms * roof_t / roof_a
}

/// The pair row of a module measured at `anchor_ms` on `anchor`, asked for on `target`.
pub fn pair_row(
    spec: &ModuleSpec,
    context: &Context,
    anchor: &DeviceSpec,
    target: &DeviceSpec,
    anchor_ms: f64,
) -> Vec<f64> {
    let base = FeatureSchema::for_kind(spec.kind());
    let ra = row(spec, context, anchor);
    let rt = row(spec, context, target);
    let (roof_a, share_a) = roofline(&ra, &base);
    let (roof_t, share_t) = roofline(&rt, &base);
    let ratio = |t: f64, a: f64| if a > 0.0 { t / a } else { 1.0 };
    let mut out: Vec<f64> = base
        .names
        .iter()
        .zip(&ra)
        .filter(|(n, _)| !DEVICE_COLUMNS.contains(&n.as_str()))
        .map(|(_, v)| *v)
        .collect();
    out.extend(spec.layout().into_iter().map(|v| v as f64));
    out.extend_from_slice(&[
        anchor_ms,
        roof_a / anchor_ms.max(1e-12),
        ratio(target.peak_gflops, anchor.peak_gflops),
        ratio(target.mem_bandwidth_gbs, anchor.mem_bandwidth_gbs),
        ratio(f64::from(target.cores), f64::from(anchor.cores)),
        ratio(f64::from(target.threads), f64::from(anchor.threads)),
        ratio(target.clock_mhz, anchor.clock_mhz),
        ratio(target.cache_mb, anchor.cache_mb),
        roof_t / roof_a,
        share_a,
        share_t,
        f64::from(u8::from(target.kind == anchor.kind)),
        f64::from(u8::from(same_software(anchor, target))),
    ]);
    out
}

fn roofline_ratio_col(schema: &FeatureSchema) -> usize {
    schema.len() - PAIR_FEATURES.len()
        + PAIR_FEATURES
            .iter()
            .position(|n| *n == "roofline_ratio")
            .unwrap_or(0)
}

/// A fitted anchor mapping of one module kind: the anchor's time scaled by the ratio of the
/// two devices' roofline times, times a learned correction and a calibration factor.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AnchorModel {
    /// Module kind.
    pub kind: ModuleKind,
    trees: FittedTrees,
    /// Calibration factor of every prediction; 1 in mappings saved before it existed.
    #[serde(default = "one")]
    scale: f64,
    /// The mapping between devices on the same software stack, fitted on those pairs only;
    /// `None` when the training devices hold no such pair (or their specs name no stack).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    same_software: Option<SameSoftware>,
}

/// The part of an [`AnchorModel`] that maps between devices on one software stack.
///
/// Its own trees and scale: across stacks the correction is dominated by library differences
/// (DeepBench: up to 5x on GEMMs) that would swamp the hardware-only correction same-stack
/// pairs need.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct SameSoftware {
    trees: FittedTrees,
    scale: f64,
    /// The largest |ln| of the peak and of the bandwidth ratio among the pairs it was fitted
    /// on: trees do not extrapolate, so a pair further apart goes to the all-pairs trees.
    reach: [f64; 2],
}

/// |ln| of a pair's peak and bandwidth ratios.
fn spread(a: &DeviceSpec, b: &DeviceSpec) -> [f64; 2] {
    [
        (a.peak_gflops / b.peak_gflops).ln().abs(),
        (a.mem_bandwidth_gbs / b.mem_bandwidth_gbs).ln().abs(),
    ]
}

/// The [`SameSoftware::reach`] of the same-stack pairs among `devices`.
fn reach(devices: &[&DeviceRows]) -> [f64; 2] {
    let mut r = [0.0_f64; 2];
    for a in devices {
        for b in devices {
            if a.device.name != b.device.name && same_software(&a.device, &b.device) {
                let s = spread(&a.device, &b.device);
                r = [r[0].max(s[0]), r[1].max(s[1])];
            }
        }
    }
    r
}

fn within(reach: [f64; 2], a: &DeviceSpec, b: &DeviceSpec) -> bool {
    let s = spread(a, b);
    // A hair of slack so that the widest training pair itself counts as inside.
    s[0] <= reach[0] + 1e-9 && s[1] <= reach[1] + 1e-9
}

fn one() -> f64 {
    1.0
}

/// The pair rows of every ordered pair of distinct devices over the configurations both
/// measured, with the target's time over the anchor's roofline-scaled time.
fn pair_set(kind: ModuleKind, devices: &[&DeviceRows], pairs: Pairs) -> TrainSet {
    let schema = pair_schema(kind);
    let ratio_col = roofline_ratio_col(&schema);
    let mut x = Matrix::with_cols(schema.len());
    let (mut y, mut groups) = (Vec::new(), Vec::new());
    for a in devices {
        for b in devices {
            if a.device.name == b.device.name || !pairs.admits(&a.device, &b.device) {
                continue;
            }
            for (key, m) in &a.rows {
                let Some(t) = b.rows.get(key) else { continue };
                let x_ab = pair_row(&m.spec, &m.context, &a.device, &b.device, m.ms);
                y.push(t.ms / (m.ms * x_ab[ratio_col]));
                x.push_row(&x_ab);
                groups.push(m.group);
            }
        }
    }
    TrainSet {
        schema,
        x,
        y,
        groups,
    }
}

/// Which ordered device pairs a mapping is fitted on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pairs {
    /// Every pair.
    All,
    /// Pairs on the same software stack ([`same_software`]).
    SameSoftware,
}

impl Pairs {
    fn admits(self, a: &DeviceSpec, b: &DeviceSpec) -> bool {
        self == Pairs::All || same_software(a, b)
    }

    /// Whether `devices` hold at least one such pair.
    fn any(self, devices: &[&DeviceRows]) -> bool {
        devices.iter().enumerate().any(|(i, a)| {
            devices[i + 1..]
                .iter()
                .any(|b| self.admits(&a.device, &b.device))
        })
    }
}

fn fit_trees(kind: ModuleKind, devices: &[&DeviceRows], pairs: Pairs) -> Result<FittedTrees> {
    // Small, slow trees: the correction is smooth and the pairs are few.
    TreeParams {
        min_samples_leaf: 20,
        max_leaves: 15,
        learning_rate: 0.05,
        baseline: false,
        ..TreeParams::default()
    }
    .fit(&pair_set(kind, devices, pairs))
}

/// The factor that minimises the mapping's absolute percentage error on devices it has not
/// seen: each device in turn is left out, the trees are fitted on the pairs of the others and
/// predict it from each anchor this part of the model would serve (same-stack anchors within
/// reach for [`Pairs::SameSoftware`], the rest for [`Pairs::All`]), and the factor is the c
/// minimising the sum of |c * prediction - truth| / truth over those predictions.
///
/// The trees fit the logarithm of the correction, so they predict its geometric mean; where
/// devices disagree in ways their specs do not explain (DeepBench's cuBLAS versions make small
/// GEMMs 5x apart on near-identical GPUs) an over-prediction costs more percent than an
/// under-prediction of the same factor, and the MAPE-optimal prediction sits below the
/// geometric mean. The factor is that shift, learned without the target: it lowers the MAPE
/// and biases sums of predictions low by about as much.
fn mape_scale(kind: ModuleKind, devices: &[&DeviceRows], pairs: Pairs) -> Result<f64> {
    let mut ratios: Vec<f64> = Vec::new();
    for held in devices {
        let others: Vec<&DeviceRows> = devices
            .iter()
            .filter(|d| d.device.name != held.device.name)
            .copied()
            .collect();
        // The anchors the held device would be predicted from by this part of the model.
        let anchors: Vec<&DeviceRows> = match pairs {
            Pairs::SameSoftware => others
                .iter()
                .filter(|a| same_software(&a.device, &held.device))
                .filter(|a| within(reach(&others), &a.device, &held.device))
                .copied()
                .collect(),
            Pairs::All => others
                .iter()
                .filter(|a| {
                    !same_software(&a.device, &held.device)
                        || !within(reach(&others), &a.device, &held.device)
                })
                .copied()
                .collect(),
        };
        if others.len() < 2 || anchors.is_empty() || !pairs.any(&others) {
            continue;
        }
        let trees = fit_trees(kind, &others, pairs)?;
        let ratio_col = roofline_ratio_col(trees.schema());
        for a in &anchors {
            for (key, m) in &a.rows {
                let Some(t) = held.rows.get(key) else {
                    continue;
                };
                let x = pair_row(&m.spec, &m.context, &a.device, &held.device, m.ms);
                let predicted = m.ms * x[ratio_col] * trees.predict_row(&x)?;
                ratios.push(t.ms / predicted);
            }
        }
    }
    Ok(weighted_median_of_ratios(ratios))
}

/// The c minimising the sum of |c / r - 1| over `ratios` (the median of r weighted by 1 / r);
/// 1 when there are none.
fn weighted_median_of_ratios(mut ratios: Vec<f64>) -> f64 {
    ratios.retain(|r| r.is_finite() && *r > 0.0);
    ratios.sort_by(f64::total_cmp);
    let total: f64 = ratios.iter().map(|r| 1.0 / r).sum();
    let mut acc = 0.0;
    for r in ratios.iter() {
        acc += 1.0 / r;
        if acc >= total / 2.0 {
            return *r;
        }
    }
    1.0
}

impl AnchorModel {
    /// Fits on every ordered pair of distinct devices in `devices` over the configurations both
    /// measured, then calibrates the scale on devices left out in turn ([`mape_scale`]; with
    /// fewer than 3 devices the scale is 1). When some pairs run one software stack, they get
    /// trees and a scale of their own too ([`SameSoftware`]).
    pub fn fit(kind: ModuleKind, devices: &[&DeviceRows]) -> Result<AnchorModel> {
        let trees = fit_trees(kind, devices, Pairs::All)?;
        let scale = if devices.len() >= 3 {
            mape_scale(kind, devices, Pairs::All)?
        } else {
            1.0
        };
        let same = Pairs::SameSoftware;
        let same_software = if same.any(devices) {
            Some(SameSoftware {
                trees: fit_trees(kind, devices, same)?,
                scale: if devices.len() >= 3 {
                    mape_scale(kind, devices, same)?
                } else {
                    1.0
                },
                reach: reach(devices),
            })
        } else {
            None
        };
        Ok(AnchorModel {
            kind,
            trees,
            scale,
            same_software,
        })
    }

    /// The calibration factor of predictions across software stacks (see [`mape_scale`]).
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// The latency on `target` of a module measured at `anchor_ms` on `anchor`, ms.
    pub fn predict(
        &self,
        spec: &ModuleSpec,
        context: &Context,
        anchor: &DeviceSpec,
        target: &DeviceSpec,
        anchor_ms: f64,
    ) -> Result<f64> {
        if spec.kind() != self.kind {
            return Err(Error::InvalidData(format!(
                "an anchor mapping of `{}` cannot map a `{}`",
                self.kind,
                spec.kind()
            )));
        }
        if !(anchor_ms.is_finite() && anchor_ms > 0.0) {
            return Err(Error::InvalidData(format!(
                "the anchor latency must be positive, got {anchor_ms}"
            )));
        }
        let x = pair_row(spec, context, anchor, target, anchor_ms);
        let ratio = x[roofline_ratio_col(self.trees.schema())];
        let (trees, scale) = match &self.same_software {
            Some(s) if same_software(anchor, target) && within(s.reach, anchor, target) => {
                (&s.trees, s.scale)
            }
            _ => (&self.trees, self.scale),
        };
        Ok(anchor_ms * ratio * scale * trees.predict_row(&x)?)
    }

    /// [`AnchorModel::predict`] of every module one anchor measured, `(spec, context, ms)`.
    ///
    /// Between devices on one software stack ([`same_software`]) each prediction's ratio to
    /// its anchor time is then shrunk halfway (in log space) towards the geometric mean of
    /// those ratios over all the rows: one stack runs the same kernels on both devices, so
    /// the target-to-anchor ratio varies less across configurations than the trees'
    /// corrections say (DeepBench GEMMs: a constant ratio at the right level is within 5% on
    /// the M40 and TITAN X, the 1080 Ti and TITAN Xp). The level still comes from the trees;
    /// the target's times are never seen.
    pub fn predict_rows(
        &self,
        rows: &[(&ModuleSpec, &Context, f64)],
        anchor: &DeviceSpec,
        target: &DeviceSpec,
    ) -> Result<Vec<f64>> {
        let mut out = rows
            .iter()
            .map(|(spec, context, ms)| self.predict(spec, context, anchor, target, *ms))
            .collect::<Result<Vec<f64>>>()?;
        if same_software(anchor, target) && !out.is_empty() {
            let log_ratios: Vec<f64> = out
                .iter()
                .zip(rows)
                .map(|(p, (_, _, ms))| (p / ms).ln())
                .collect();
            let mean = log_ratios.iter().sum::<f64>() / log_ratios.len() as f64;
            for ((p, (_, _, ms)), r) in out.iter_mut().zip(rows).zip(&log_ratios) {
                *p = ms * ((r + mean) / 2.0).exp();
            }
        }
        Ok(out)
    }
}

/// One measured configuration.
#[derive(Clone, Debug)]
pub struct Measured {
    /// Module.
    pub spec: ModuleSpec,
    /// Context.
    pub context: Context,
    /// Latency, ms (the geometric mean of duplicates).
    pub ms: f64,
    /// Configuration group (any device, batch or phase).
    pub group: u64,
}

/// One device's measurements keyed by configuration and context, so devices pair up.
#[derive(Clone, Debug)]
pub struct DeviceRows {
    /// The device.
    pub device: DeviceSpec,
    /// Per (configuration and layout, batch, phase, occurrence), in key order: the pairs a
    /// mapping is fitted on come in the same order in every run, so its scores repeat.
    pub rows: BTreeMap<Key, Measured>,
}

/// A measurement's identity across devices: configuration followed by layout
/// ([`ModuleSpec::config`], then [`ModuleSpec::layout`]), batch, training phase, and which
/// occurrence of that configuration it is in the device's rows.
pub type Key = (Vec<i64>, usize, bool, usize);

/// The configuration-and-layout part of a [`Key`]: DeepBench's GEMMs that differ only in
/// their operand transposes (up to 5x apart in time) are distinct measurements.
pub fn config_key(spec: &ModuleSpec) -> Vec<i64> {
    let mut key = spec.config();
    key.extend(spec.layout());
    key
}

impl DeviceRows {
    /// Keys a device's records (failed rows left out). Rows of one configuration, layout and
    /// context that repeat are told apart by their order (each pairs with the same occurrence
    /// on another device).
    pub fn new(device: DeviceSpec, records: &[Record]) -> DeviceRows {
        let mut seen: HashMap<(Vec<i64>, usize, bool), usize> = HashMap::new();
        let mut sums: HashMap<Key, (Measured, f64, usize)> = HashMap::new();
        for r in records {
            let Some(t) = r.timing() else { continue };
            if !(t.median_ms.is_finite() && t.median_ms > 0.0) {
                continue;
            }
            let config = r.spec.config();
            let base = (
                config_key(&r.spec),
                r.context.batch,
                r.context.phase == perfcast_core::Phase::Training,
            );
            let n = seen.entry(base.clone()).or_insert(0);
            let key = (base.0, base.1, base.2, *n);
            *n += 1;
            let e = sums.entry(key).or_insert_with(|| {
                (
                    Measured {
                        spec: r.spec.clone(),
                        context: r.context.clone(),
                        ms: 0.0,
                        group: group_of(&config),
                    },
                    0.0,
                    0,
                )
            });
            e.1 += t.median_ms.ln();
            e.2 += 1;
        }
        let rows = sums
            .into_iter()
            .map(|(k, (mut m, log_sum, n))| {
                m.ms = (log_sum / n as f64).exp();
                (k, m)
            })
            .collect();
        DeviceRows { device, rows }
    }
}

fn group_of(config: &[i64]) -> u64 {
    config
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
}

/// Which anchor each held-out target is predicted from. Where some other device runs the
/// target's software stack ([`same_software`]), `Nearest` and `All` choose among those only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AnchorMode {
    /// The other device nearest in log peak GFLOP/s and log bandwidth, on the target's stack
    /// when one is.
    Nearest,
    /// Every other device on the target's stack, or every other device when none is; each is
    /// scored, all together.
    All,
    /// This device (by name); a target that is this device uses the nearest instead.
    Device(String),
}

/// The anchors `mode` picks for `target` among `others` (none of which is the target).
///
/// Same-stack anchors come first: `Nearest` takes the nearest by spec among the devices on the
/// target's software stack when there are any, and `All` keeps only those then; without such a
/// device (or without `software` in the specs) every device qualifies, as in PROFET.
fn choose_anchors<'a>(
    target: &DeviceSpec,
    others: &[&'a DeviceRows],
    mode: &AnchorMode,
) -> Vec<&'a DeviceRows> {
    let same: Vec<&DeviceRows> = others
        .iter()
        .filter(|d| same_software(&d.device, target))
        .copied()
        .collect();
    let pool = if same.is_empty() {
        others.to_vec()
    } else {
        same
    };
    let nearest = || {
        pool.iter()
            .min_by(|a, b| {
                spec_distance(&a.device, target).total_cmp(&spec_distance(&b.device, target))
            })
            .copied()
    };
    match mode {
        AnchorMode::All => pool.clone(),
        AnchorMode::Nearest => nearest().into_iter().collect(),
        AnchorMode::Device(name) => match others.iter().find(|d| &d.device.name == name) {
            Some(d) => vec![*d],
            None => nearest().into_iter().collect(),
        },
    }
}

/// Distance of two specs in log peak and log bandwidth (plus a step for another device kind).
fn spec_distance(a: &DeviceSpec, b: &DeviceSpec) -> f64 {
    (a.peak_gflops / b.peak_gflops).ln().abs()
        + (a.mem_bandwidth_gbs / b.mem_bandwidth_gbs).ln().abs()
        + if a.kind == b.kind { 0.0 } else { 10.0 }
}

/// One held-out target device's scores.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeldOutTarget {
    /// The target device, never seen in training.
    pub device: String,
    /// The anchors its predictions start from.
    pub anchors: Vec<String>,
    /// Target configurations scored (each predicted from the geometric mean over its anchors).
    pub pairs: usize,
    /// MAPE per method ([`METHODS`]), percent.
    pub mape: BTreeMap<String, f64>,
}

/// Each device in turn is the target and left out of training: the mapping is fitted on the
/// pairs among the other devices and scored on (anchor, target) pairs. With `same_kind`,
/// devices of another kind than the target (a CPU among GPUs) are left out too.
pub fn leave_one_target_out(
    kind: ModuleKind,
    devices: &[DeviceRows],
    mode: &AnchorMode,
    same_kind: bool,
) -> Result<Vec<HeldOutTarget>> {
    let mut out = Vec::new();
    // Leave-one-device-out by name ([`split::leave_one_out`]); each of a name's entries is a
    // target of its own.
    let names: Vec<&str> = devices.iter().map(|d| d.device.name.as_str()).collect();
    let folds = split::leave_one_out(&names);
    for (train, held) in &folds {
        for target in held.iter().map(|&t| &devices[t]) {
            let others: Vec<&DeviceRows> = train
                .iter()
                .map(|&j| &devices[j])
                .filter(|d| !same_kind || d.device.kind == target.device.kind)
                .collect();
            if others.len() < 2 {
                continue;
            }
            let anchors = choose_anchors(&target.device, &others, mode);
            let model = AnchorModel::fit(kind, &others)?;
            // Per target configuration, each method's prediction from every anchor that measured
            // it; with several anchors the prediction is their geometric mean.
            let mut per_key: BTreeMap<&Key, (f64, Vec<[f64; 3]>)> = BTreeMap::new();
            for a in &anchors {
                let shared: Vec<(&Key, &Measured, f64)> = a
                    .rows
                    .iter()
                    .filter_map(|(key, m)| target.rows.get(key).map(|t| (key, m, t.ms)))
                    .collect();
                let rows: Vec<(&ModuleSpec, &Context, f64)> = shared
                    .iter()
                    .map(|(_, m, _)| (&m.spec, &m.context, m.ms))
                    .collect();
                let learned = model.predict_rows(&rows, &a.device, &target.device)?;
                for ((key, m, t_ms), learned) in shared.into_iter().zip(learned) {
                    per_key.entry(key).or_insert((t_ms, Vec::new())).1.push([
                        learned,
                        roofline_ratio_ms(&m.spec, &m.context, &a.device, &target.device, m.ms),
                        m.ms * a.device.peak_gflops / target.device.peak_gflops,
                    ]);
                }
            }
            let mut preds: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
            let mut truth = Vec::new();
            for (t_ms, by_anchor) in per_key.values() {
                for (j, method) in METHODS.iter().enumerate() {
                    let log_mean =
                        by_anchor.iter().map(|p| p[j].ln()).sum::<f64>() / by_anchor.len() as f64;
                    preds.entry(method).or_default().push(log_mean.exp());
                }
                truth.push(*t_ms);
            }
            if truth.is_empty() {
                continue;
            }
            let mape = preds
                .into_iter()
                .filter_map(|(k, p)| Metrics::compute(&p, &truth).map(|m| (k.to_string(), m.mape)))
                .collect();
            out.push(HeldOutTarget {
                device: target.device.name.clone(),
                anchors: anchors.iter().map(|a| a.device.name.clone()).collect(),
                pairs: truth.len(),
                mape,
            });
        }
    }
    if out.is_empty() {
        return Err(Error::InvalidData(format!(
            "no device has `{kind}` configurations in common with two others"
        )));
    }
    Ok(out)
}

/// Whether a spec describes a GPU.
pub fn is_gpu(device: &DeviceSpec) -> bool {
    device.kind == DeviceKind::Gpu
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfcast_core::testing::gpu_with_sms as gpu;
    use perfcast_core::{Linear, Phase};
    use perfcast_data::{Outcome, Timing};

    fn specs() -> Vec<ModuleSpec> {
        (0..60)
            .map(|i| {
                ModuleSpec::Linear(Linear {
                    tokens: 1 + i % 7,
                    in_features: 128 + 97 * i,
                    out_features: 256 + 61 * (i % 13),
                    bias: true,
                })
            })
            .collect()
    }

    /// A device whose kernels reach 55% of peak and 70% of bandwidth, plus 6 us.
    fn measured(device: DeviceSpec) -> DeviceRows {
        measured_with(device, |_| 1.0)
    }

    /// Like [`measured`], with configuration `i` taking `slowdown(i)` times as long.
    fn measured_with(device: DeviceSpec, slowdown: impl Fn(usize) -> f64) -> DeviceRows {
        let records: Vec<Record> = specs()
            .into_iter()
            .enumerate()
            .map(|(i, spec)| {
                let context = Context {
                    batch: 8,
                    phase: Phase::Training,
                    threads: 1,
                    utilisation: 0.0,
                };
                let d = perfcast_core::features::derive(&spec, 8);
                let ms = (d.train_flops / (0.55 * device.peak_gflops * 1e6)).max(
                    3.0 * (d.bytes_read + d.bytes_written) / (0.7 * device.mem_bandwidth_gbs * 1e6),
                ) + 0.006;
                let ms = ms * slowdown(i);
                Record {
                    spec,
                    context,
                    backend: "test".into(),
                    perfcast_version: "0".into(),
                    timestamp: 0,
                    outcome: Outcome::Ok(Timing::median_only(ms)),
                }
            })
            .collect();
        DeviceRows::new(device, &records)
    }

    #[test]
    fn the_pair_row_matches_its_schema_and_the_ratios_are_target_over_anchor() {
        let a = gpu("a", 10_000.0, 500.0, 40);
        let b = gpu("b", 20_000.0, 1_000.0, 80);
        let spec = specs().remove(3);
        let ctx = Context {
            batch: 2,
            phase: Phase::Inference,
            threads: 1,
            utilisation: 0.0,
        };
        let x = pair_row(&spec, &ctx, &a, &b, 0.5);
        let s = pair_schema(ModuleKind::Linear);
        assert_eq!(x.len(), s.len());
        assert_eq!(x[s.index("anchor_ms").unwrap()], 0.5);
        assert_eq!(x[s.index("peak_ratio").unwrap()], 2.0);
        assert_eq!(x[s.index("sm_ratio").unwrap()], 2.0);
        assert!((x[s.index("roofline_ratio").unwrap()] - 0.5).abs() < 1e-12);
        assert!(s.index("dev_peak_gflops").is_none());
    }

    #[test]
    fn the_scale_minimises_the_percentage_error() {
        // |c/0.5 - 1| + |c/1 - 1| + |c/2 - 1| is 1.25 at c = 0.5, 1.5 at 1 and 3.5 at 2.
        assert_eq!(weighted_median_of_ratios(vec![2.0, 0.5, 1.0]), 0.5);
        assert_eq!(weighted_median_of_ratios(vec![1.0, 1.0, 4.0]), 1.0);
        assert_eq!(weighted_median_of_ratios(vec![f64::NAN]), 1.0);
    }

    fn gemm_record(trans_a: bool, ms: f64) -> Record {
        Record {
            spec: ModuleSpec::Matmul(perfcast_core::Matmul {
                heads: 1,
                m: 1760,
                k: 1760,
                n: 16,
                trans_a,
                trans_b: false,
            }),
            context: Context {
                batch: 1,
                phase: Phase::Inference,
                threads: 1,
                utilisation: 0.0,
            },
            backend: "test".into(),
            perfcast_version: "0".into(),
            timestamp: 0,
            outcome: Outcome::Ok(Timing::median_only(ms)),
        }
    }

    /// DeepBench times one GEMM shape as `N,N` and `T,N`, up to 5x apart. Each pairs
    /// with its own layout on another device, whatever order the devices list them in, and
    /// the pair row says which layout it is.
    #[test]
    fn transposed_gemms_pair_with_their_own_layout() {
        let a = DeviceRows::new(
            gpu("a", 10_000.0, 500.0, 40),
            &[gemm_record(false, 1.0), gemm_record(true, 5.0)],
        );
        let b = DeviceRows::new(
            gpu("b", 20_000.0, 1_000.0, 80),
            &[gemm_record(true, 2.5), gemm_record(false, 0.5)],
        );
        assert_eq!((a.rows.len(), b.rows.len()), (2, 2));
        for (key, m) in &a.rows {
            let t = &b.rows[key];
            assert_eq!(t.spec, m.spec);
            assert!((t.ms / m.ms - 0.5).abs() < 1e-12, "{m:?} {t:?}");
        }
        let s = pair_schema(ModuleKind::Matmul);
        let transposed = gemm_record(true, 5.0);
        let x = pair_row(
            &transposed.spec,
            &transposed.context,
            &a.device,
            &b.device,
            5.0,
        );
        assert_eq!(x.len(), s.len());
        assert_eq!(x[s.index("trans_a").unwrap()], 1.0);
        assert_eq!(x[s.index("trans_b").unwrap()], 0.0);
        assert_eq!(x[s.index("anchor_ms").unwrap()], 5.0);
        assert!(pair_schema(ModuleKind::Linear).index("trans_a").is_none());
    }

    #[test]
    fn a_held_out_target_is_mapped_from_its_anchor() {
        let devices: Vec<DeviceRows> = [
            gpu("k", 4_300.0, 288.0, 15),
            gpu("m", 6_800.0, 288.0, 24),
            gpu("p", 9_300.0, 732.0, 56),
            gpu("x", 11_000.0, 480.0, 28),
            gpu("v", 15_700.0, 900.0, 80),
        ]
        .into_iter()
        .map(measured)
        .collect();
        let scores =
            leave_one_target_out(ModuleKind::Linear, &devices, &AnchorMode::Nearest, true).unwrap();
        assert_eq!(scores.len(), 5);
        for s in &scores {
            assert_eq!(s.anchors.len(), 1);
            assert_eq!(s.pairs, 60);
            // Same efficiencies everywhere, but compute and memory reach different shares of
            // their peaks, so the plain FLOP/s ratio misses where a module changes regime.
            assert!(s.mape["learned"] < 15.0, "{s:?}");
        }
        let mean = |m: &str| scores.iter().map(|s| s.mape[m]).sum::<f64>() / 5.0;
        assert!(mean("learned") < mean("flops-ratio"));
        let all =
            leave_one_target_out(ModuleKind::Linear, &devices, &AnchorMode::All, true).unwrap();
        assert_eq!(all[0].anchors.len(), 4);
        assert_eq!(all[0].pairs, 60);
    }

    fn on(mut device: DeviceSpec, software: &str) -> DeviceSpec {
        device.software = Some(software.into());
        device
    }

    #[test]
    fn same_software_needs_both_stacks_named_and_equal() {
        let a = gpu("a", 10_000.0, 500.0, 40);
        assert!(
            !same_software(&a, &a),
            "unknown stacks are not the same stack"
        );
        let cuda8 = on(a.clone(), "CUDA 8.0.88, cuDNN 6.0.21");
        assert!(!same_software(&cuda8, &a));
        assert!(same_software(&cuda8, &cuda8.clone()));
        assert!(!same_software(&cuda8, &on(a, "CUDA 8, cuDNN 5")));
    }

    /// Two stacks; within one, kernels scale with the specs exactly, but the second
    /// stack runs every other configuration 3x slower (a library difference no spec shows).
    /// The same-stack anchor is picked over a nearer device on the other stack, and predicts
    /// the target far better than that device does.
    #[test]
    fn a_same_stack_anchor_is_preferred_and_predicts_better() {
        let stack_b = |i: usize| if i.is_multiple_of(2) { 3.0 } else { 1.0 };
        let devices: Vec<DeviceRows> = vec![
            measured(on(gpu("a1", 10_000.0, 500.0, 40), "A")),
            measured(on(gpu("a2", 11_000.0, 550.0, 44), "A")),
            measured(on(gpu("a3", 9_000.0, 450.0, 36), "A")),
            measured_with(on(gpu("b1", 10_500.0, 520.0, 42), "B"), stack_b),
            measured_with(on(gpu("b2", 12_000.0, 600.0, 48), "B"), stack_b),
            measured_with(on(gpu("b3", 8_000.0, 400.0, 32), "B"), stack_b),
        ];
        let a1 = &devices[0];
        let others: Vec<&DeviceRows> = devices[1..].iter().collect();
        // b1 is the nearest by spec, a2 the nearest on a1's stack.
        assert!(
            spec_distance(&devices[3].device, &a1.device)
                < spec_distance(&devices[1].device, &a1.device)
        );
        let names = |v: Vec<&DeviceRows>| -> Vec<String> {
            v.iter().map(|d| d.device.name.clone()).collect()
        };
        assert_eq!(
            names(choose_anchors(&a1.device, &others, &AnchorMode::Nearest)),
            ["a2"]
        );
        assert_eq!(
            names(choose_anchors(&a1.device, &others, &AnchorMode::All)),
            ["a2", "a3"]
        );
        // Without stacks in the specs every device qualifies, as before.
        let mut bare = a1.device.clone();
        bare.software = None;
        assert_eq!(
            names(choose_anchors(&bare, &others, &AnchorMode::Nearest)),
            ["b1"]
        );
        assert_eq!(choose_anchors(&bare, &others, &AnchorMode::All).len(), 5);

        let score = |mode: &AnchorMode| {
            leave_one_target_out(ModuleKind::Linear, &devices, mode, true)
                .unwrap()
                .into_iter()
                .find(|s| s.device == "a1")
                .unwrap()
        };
        let same = score(&AnchorMode::Nearest);
        assert_eq!(same.anchors, ["a2"]);
        let across = score(&AnchorMode::Device("b1".into()));
        assert_eq!(across.anchors, ["b1"]);
        assert!(same.mape["learned"] < 5.0, "{same:?}");
        assert!(
            same.mape["learned"] * 4.0 < across.mape["learned"],
            "{same:?} {across:?}"
        );
    }
}
