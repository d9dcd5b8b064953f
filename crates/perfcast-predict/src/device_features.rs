//! Cross-device models: one model learned from the measurements of several devices predicts
//! devices it never measured from their published specs (PerfNetV2's setting).
//!
//! A cross-device model reads the same feature rows as any other model (the single-device
//! [`FeatureSchema::for_kind`] schema, whose hash stays unchanged): every row already carries its
//! device's peak GFLOP/s, bandwidth and roofline time. Inside, the row is extended with a device
//! block derived from those columns ([`DEVICE_BLOCK`]: the module's compute time and memory time
//! on that device, the device's ridge point and which side of it the module sits), optionally
//! with spec fields of the device ([`SPEC_FIELDS`]), and the inner model predicts the latency
//! *normalised by the roofline estimate on that device* ([`Scale`]); the GPU utilisation model
//! (`util`) predicts `floor + least time / utilisation`. perfcast-models fits them
//! (`CrossDeviceParams`); this is the saved form and the prediction path.

use std::collections::BTreeMap;

use perfcast_core::DeviceSpec;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::features::FeatureSchema;
use crate::gpu_util::UtilCols;
use crate::regressor::{Regressor, SavedModel, check_width};
use crate::residual::{FromFn, StackWith};

pub use crate::features::DEVICE_BLOCK;

/// Spec fields a cross-device model may read besides peak and bandwidth (`--device-fields`),
/// each appended as one feature after [`DEVICE_BLOCK`]. `waves` adds how many waves of
/// 128x128 GEMM tiles the module runs on the device's SMs, and the last wave's occupancy.
/// `util` adds the spec-normalised features of the GPU utilisation model ([`crate::gpu_util`]).
/// `power` adds log2 of the board power per peak TFLOP/s (`tdp_w`; 0 without it): tried for
/// the util model and dropped, it made leaving one GPU out worse (docs/accuracy.md).
/// `phase` adds whether the row is a training step (1) or a forward pass (0): a training
/// step's backward kernels (a conv's backward-data and backward-filter) run at efficiencies of
/// their own, which the utilisation model learns from measured training rows only when it can
/// tell the phases apart.
/// `cycles` makes a utilisation model divide a row reduction's time by its roofline plus the
/// time its elements take at the SMs' pace ([`Cols::busy_ms`]), and adds log2 of that share.
/// `dtype` adds the element width in bytes of the type the device is seen in and whether that
/// type runs on tensor cores (every type but fp32): a half-precision GEMM on tensor cores
/// reaches its peak by other tiles and at other sizes than an fp32 one on the vector units.
/// `generation` adds the launch year of the device's architecture ([`perfcast_core::arch`]):
/// peak and bandwidth do not tell a Maxwell from a Kepler of the same spec, and kernels run at
/// their generation's efficiencies.
pub const SPEC_FIELDS: &[&str] = &[
    "sms",
    "shaders",
    "clock",
    "memory",
    "cache",
    "waves",
    "tiles",
    "per_sm",
    "util",
    "power",
    "phase",
    "dtype",
    "cycles",
    "generation",
];

/// Tile sizes (square) the `tiles` field counts waves of.
const TILES: [f64; 2] = [64.0, 128.0];

/// What latencies are normalised by inside a cross-device model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    /// The roofline time, `max(FLOPs / peak, bytes / bandwidth)`.
    #[default]
    Roofline,
    /// The roofline with the compute time of whole waves of `tile` x `tile` output tiles over
    /// the device's SMs: a GEMM of fewer tiles than SMs leaves SMs idle, and one of 1.1 waves
    /// takes as long as 2.
    Waves,
    /// The utilisation model: latency = floor + roofline / utilisation, the utilisation in
    /// (0, 1] learned (the inner model's prediction is clamped at 1, so no prediction is below
    /// the spec roofline). The floor is fitted from the training rows (the smallest of the
    /// training devices' 2% latency quantiles: the launch cost an empty kernel pays); the
    /// inner model learns `max(latency - floor, 5% of latency) / roofline`.
    Utilisation,
}

/// Widest extended row [`FittedCrossDevice::predict_row`] builds on the stack.
const MAX_EXTENDED: usize = 96;

/// How a cross-device model normalises latencies: [`Scale`], its tile and the per-call floor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Normalise {
    /// What latencies are normalised by.
    pub scale: Scale,
    /// Tile side of [`Scale::Waves`].
    pub tile: f64,
    /// Per-call floor, ms.
    pub floor_ms: f64,
}

/// Where the device-dependent columns of a kind's row sit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cols {
    work_flops: usize,
    work_bytes: usize,
    /// Column of the device's peak GFLOP/s.
    pub peak: usize,
    /// Column of the device's bandwidth, GB/s.
    pub bandwidth: usize,
    roofline: usize,
    gemm_m: usize,
    gemm_n: usize,
    /// Matmul's per-batch rows (`m`): `gemm_m` stacks the batch and heads, whose tiles
    /// never merge across matrices.
    matmul_m: Option<usize>,
    /// The columns the `util` field reads.
    util: Option<UtilCols>,
    /// The `training` flag the `phase` field reads.
    training: usize,
}

impl Cols {
    /// The columns of `schema`, which must hold every one a cross-device model reads.
    pub fn of(schema: &FeatureSchema) -> Result<Cols> {
        let at = |name: &str| {
            schema.index(name).ok_or_else(|| {
                Error::InvalidData(format!(
                    "cross-device models need feature `{name}`, the `{}` schema has none",
                    schema.kind
                ))
            })
        };
        Ok(Cols {
            work_flops: at("work_flops")?,
            work_bytes: at("work_bytes")?,
            peak: at("dev_peak_gflops")?,
            bandwidth: at("dev_bandwidth_gbs")?,
            roofline: at("roofline_ms")?,
            gemm_m: at("gemm_m")?,
            gemm_n: at("gemm_n")?,
            matmul_m: if schema.kind == perfcast_core::ModuleKind::Matmul {
                Some(at("m")?)
            } else {
                None
            },
            util: UtilCols::of(schema).ok(),
            training: at("training")?,
        })
    }

    /// Output tiles of `tile` x `tile` the row's GEMM runs.
    fn tiles(&self, x: &[f64], tile: f64) -> f64 {
        let (gm, gn) = (x[self.gemm_m], x[self.gemm_n]);
        match self.matmul_m {
            Some(c) if x[c] >= 1.0 => {
                (gm / x[c]).round() * (x[c] / tile).ceil() * (gn / tile).ceil()
            }
            _ => (gm / tile).ceil() * (gn / tile).ceil(),
        }
    }

    /// Waves of `tile` x `tile` output tiles on `sms` SMs (fractional) and the last wave's
    /// occupancy.
    fn waves(&self, x: &[f64], tile: f64, sms: f64) -> (f64, f64) {
        let tiles = self.tiles(x, tile);
        let waves = tiles / sms;
        (
            waves,
            if tiles > 0.0 {
                waves / waves.ceil()
            } else {
                0.0
            },
        )
    }

    /// How much longer whole waves of tiles take than the GEMM's own work: (whole waves x
    /// SMs x tile area) / (M x N), at least 1 (1 for rows without a GEMM).
    fn wave_inflation(&self, x: &[f64], tile: f64, sms: f64) -> f64 {
        let area = x[self.gemm_m] * x[self.gemm_n];
        let tiles = self.tiles(x, tile);
        if area <= 0.0 || tiles <= 0.0 {
            return 1.0;
        }
        ((tiles / sms).ceil() * sms * tile * tile / area).max(1.0)
    }

    /// Whether a row is a training step (its `training` flag set).
    pub fn is_training(&self, x: &[f64]) -> bool {
        x[self.training] > 0.5
    }

    /// The least time of a row on its device, ms ([`UtilCols::least_ms`]; the roofline column
    /// for kinds the `util` field does not read).
    pub fn least_ms(&self, x: &[f64]) -> f64 {
        self.util
            .map_or(x[self.roofline].max(1e-9), |u| u.least_ms(x))
    }

    /// The time a utilisation model divides by its utilisation, ms: [`Cols::least_ms`], plus
    /// with `cycles` the time a row reduction's elements take at the SMs' pace on `device`
    /// ([`UtilCols::cycle_ms`]).
    pub fn busy_ms(&self, x: &[f64], device: Option<&DeviceSpec>, cycles: bool) -> f64 {
        let least = self.least_ms(x);
        match (self.util, device) {
            (Some(u), Some(d)) if cycles => least + u.cycle_ms(x, d),
            _ => least,
        }
    }

    /// The device block of a row, [`DEVICE_BLOCK`] order.
    pub fn block(&self, x: &[f64]) -> [f64; 4] {
        crate::features::block_values(
            x[self.work_flops],
            x[self.work_bytes],
            x[self.peak],
            x[self.bandwidth],
        )
    }

    /// The time a row's latency is normalised by, ms (never zero): the roofline time (or its
    /// wave-quantised form on `device`) plus a fixed per-call floor.
    pub fn scale(&self, x: &[f64], how: &Normalise, device: Option<&DeviceSpec>) -> f64 {
        let base = match (how.scale, device) {
            (Scale::Waves, Some(d)) => {
                let [compute, memory, ..] = self.block(x);
                let inflation = self.wave_inflation(x, how.tile, f64::from(d.cores.max(1)));
                // The roofline column may count training-step work; the ratio keeps it.
                let work = compute.max(memory);
                let waves = (compute * inflation).max(memory);
                if work > 0.0 {
                    x[self.roofline] * waves / work
                } else {
                    x[self.roofline]
                }
            }
            _ => x[self.roofline],
        };
        (base + how.floor_ms).max(1e-9)
    }

    /// Appends the values of `fields` for a row on `device`.
    fn spec_values(
        &self,
        fields: &[String],
        x: &[f64],
        device: &DeviceSpec,
        out: &mut [f64],
    ) -> usize {
        let mut n = 0;
        for f in fields {
            match f.as_str() {
                "sms" => out[n] = f64::from(device.cores),
                "shaders" => out[n] = f64::from(device.threads),
                "clock" => out[n] = device.clock_mhz,
                "memory" => out[n] = device.memory_gb,
                "cache" => out[n] = device.cache_mb,
                "waves" => {
                    let tiles = (x[self.gemm_m] / 128.0).ceil() * (x[self.gemm_n] / 128.0).ceil();
                    let sms = f64::from(device.cores.max(1));
                    let waves = tiles / sms;
                    out[n] = waves;
                    n += 1;
                    out[n] = if tiles > 0.0 {
                        waves / waves.ceil()
                    } else {
                        0.0
                    };
                }
                "tiles" => {
                    let sms = f64::from(device.cores.max(1));
                    for (i, tile) in TILES.iter().enumerate() {
                        let (waves, occupancy) = self.waves(x, *tile, sms);
                        out[n + 2 * i] = waves.max(1e-6).log2();
                        out[n + 2 * i + 1] = occupancy;
                    }
                    n += 2 * TILES.len() - 1;
                }
                "per_sm" => {
                    let sms = f64::from(device.cores.max(1));
                    out[n] = device.peak_gflops / sms;
                    out[n + 1] = device.mem_bandwidth_gbs / sms;
                    out[n + 2] = device.cache_mb / sms;
                    n += 2;
                }
                // Board power per peak TFLOP/s (0 when the spec has no `tdp_w`): how far a
                // card's sustained clock may fall below the boost clock its peak assumes.
                "power" => {
                    out[n] = device
                        .tdp_w
                        .map_or(0.0, |w| (w / (device.peak_gflops / 1e3)).max(1e-9).log2());
                }
                "phase" => out[n] = x[self.training],
                "generation" => out[n] = generation(device),
                "cycles" => {
                    let least = self.least_ms(x);
                    out[n] = self
                        .util
                        .map_or(0.0, |u| (u.cycle_ms(x, device) / least).max(1e-9).log2());
                }
                "dtype" => {
                    out[n] = device.dtype.bytes();
                    out[n + 1] = f64::from(u8::from(!device.dtype.is_fp32()));
                    n += 1;
                }
                "util" => match self.util {
                    Some(u) => n += u.fill(x, device, &mut out[n..]) - 1,
                    None => out[n] = 0.0,
                },
                _ => out[n] = 0.0,
            }
            n += 1;
        }
        n
    }
}

/// Feature names of `fields` ([`SPEC_FIELDS`]) for rows of `kind`, in order.
fn field_names(kind: perfcast_core::ModuleKind, fields: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for f in fields {
        if f == "util" {
            out.extend(crate::gpu_util::names(kind));
        } else if f == "waves" {
            out.push("xd_waves".to_string());
            out.push("xd_last_wave_occupancy".to_string());
        } else if f == "tiles" {
            for tile in TILES {
                out.push(format!("xd_log2_waves_{tile}"));
                out.push(format!("xd_occupancy_{tile}"));
            }
        } else if f == "per_sm" {
            out.extend(PER_SM.iter().map(|s| (*s).to_string()));
        } else if f == "phase" {
            out.push("xd_training".to_string());
        } else if f == "cycles" {
            out.push("xd_log_cycle_share".to_string());
        } else if f == "dtype" {
            out.push("xd_element_bytes".to_string());
            out.push("xd_tensor_cores".to_string());
        } else {
            out.push(format!("xd_{f}"));
        }
    }
    out
}

/// The launch year of the device's architecture ([`perfcast_core::arch::year_of`]), remembered
/// per device name: every row of a query asks for the same device.
fn generation(device: &DeviceSpec) -> f64 {
    thread_local! {
        static YEARS: std::cell::RefCell<Vec<(String, [u64; 2], f64)>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }
    let key = [
        device.peak_gflops.to_bits(),
        device.mem_bandwidth_gbs.to_bits(),
    ];
    YEARS.with(|years| {
        let mut years = years.borrow_mut();
        if let Some((_, _, y)) = years
            .iter()
            .find(|(name, k, _)| *k == key && *name == device.name)
        {
            return *y;
        }
        let y = f64::from(perfcast_core::arch::year_of(device));
        // A server answering many ad-hoc specs must not grow without end.
        if years.len() >= 64 {
            years.clear();
        }
        years.push((device.name.clone(), key, y));
        y
    })
}

/// Names of the `per_sm` field's features.
const PER_SM: [&str; 3] = ["xd_gflops_per_sm", "xd_gbs_per_sm", "xd_cache_mb_per_sm"];

/// Checks spec field names; the error names an unknown one.
pub fn check_fields(fields: &[String]) -> std::result::Result<(), String> {
    match fields.iter().find(|f| !SPEC_FIELDS.contains(&f.as_str())) {
        Some(f) => Err(format!(
            "unknown device field `{f}` (known: {})",
            SPEC_FIELDS.join(", ")
        )),
        None => Ok(()),
    }
}

/// The schema a cross-device model's inner model is fitted on: the kind's single-device
/// schema, [`DEVICE_BLOCK`], then the spec `fields`.
pub fn extended_schema(kind: perfcast_core::ModuleKind, fields: &[String]) -> FeatureSchema {
    extended_schema_of(&FeatureSchema::for_kind(kind), fields)
}

/// [`extended_schema`] of a given single-device schema (an older version's, for a saved
/// model fitted on it).
pub fn extended_schema_of(base: &FeatureSchema, fields: &[String]) -> FeatureSchema {
    let mut schema = base.clone();
    schema
        .names
        .extend(DEVICE_BLOCK.iter().map(|s| (*s).to_string()));
    schema.names.extend(field_names(base.kind, fields));
    schema
}

/// Whether `schema` is an [`extended_schema`] (of any spec fields and schema version).
pub fn is_extended(schema: &FeatureSchema) -> bool {
    let Some(base) = crate::features::device_block_base(schema) else {
        return false;
    };
    let head = base.len() + DEVICE_BLOCK.len();
    schema.names[head..].iter().all(|n| {
        SPEC_FIELDS
            .iter()
            .any(|f| field_names(schema.kind, &[(*f).to_string()]).contains(n))
    })
}

/// Appends the device block of a single-device row (`base` schema) to `out`.
pub fn extend_row(base: &FeatureSchema, x: &[f64], out: &mut Vec<f64>) -> Result<()> {
    check_width(base, x.len())?;
    out.extend_from_slice(&Cols::of(base)?.block(x));
    Ok(())
}

/// The device of a row among `devices`, found by its peak and bandwidth columns.
pub fn lookup<'a>(devices: &'a [DeviceSpec], cols: &Cols, x: &[f64]) -> Result<&'a DeviceSpec> {
    let (peak, bw) = (x[cols.peak], x[cols.bandwidth]);
    devices
        .iter()
        .rev()
        .find(|d| d.peak_gflops == peak && d.mem_bandwidth_gbs == bw)
        .ok_or_else(|| {
            Error::InvalidData(format!(
                "no device with {peak} GFLOP/s and {bw} GB/s in the cross-device model's device \
                 table (its spec fields are needed)"
            ))
        })
}

/// Whether rows need their device's spec beyond peak and bandwidth.
pub fn needs_device(fields: &[String], scale: Scale) -> bool {
    !fields.is_empty() || scale == Scale::Waves
}

/// Writes the extended row of `x` into `out` (the base row, [`DEVICE_BLOCK`], the spec
/// fields, then the masked columns zeroed) and returns its width.
pub fn fill(
    cols: &Cols,
    fields: &[String],
    mask: &[usize],
    x: &[f64],
    device: Option<&DeviceSpec>,
    out: &mut [f64],
) -> usize {
    let head = x.len() + DEVICE_BLOCK.len();
    out[..x.len()].copy_from_slice(x);
    out[x.len()..head].copy_from_slice(&cols.block(x));
    let mut width = head;
    if let Some(device) = device.filter(|_| !fields.is_empty()) {
        width += cols.spec_values(fields, x, device, &mut out[head..]);
    }
    for &c in mask {
        out[c] = 0.0;
    }
    width
}

/// The extended row of `x` into `out` ([`fill`]), its device looked up in `devices` when
/// the spec fields or the wave scale need one: the one row builder of fitting and prediction.
/// Returns the row's width and its device.
pub fn extend<'d>(
    cols: &Cols,
    fields: &[String],
    mask: &[usize],
    scale: Scale,
    devices: &'d [DeviceSpec],
    x: &[f64],
    out: &mut [f64],
) -> Result<(usize, Option<&'d DeviceSpec>)> {
    let device = needs_device(fields, scale)
        .then(|| lookup(devices, cols, x))
        .transpose()?;
    Ok((fill(cols, fields, mask, x, device, out), device))
}

/// Positions of the `mask` column names in the extended `schema`; the error names an unknown
/// one. With `only_fields`, every column before the spec fields (the single-device row and the
/// device block) is masked too.
pub fn mask_columns(
    schema: &FeatureSchema,
    mask: &[String],
    only_fields: bool,
) -> std::result::Result<Vec<usize>, String> {
    let mut out: Vec<usize> = mask
        .iter()
        .map(|m| {
            schema
                .index(m)
                .ok_or_else(|| format!("mask names `{m}`, which the `{}` rows lack", schema.kind))
        })
        .collect::<std::result::Result<_, _>>()?;
    if only_fields {
        let base = crate::features::device_block_base(schema)
            .unwrap_or_else(|| FeatureSchema::for_kind(schema.kind));
        let head = base.len() + DEVICE_BLOCK.len();
        out.extend((0..head).filter(|c| !mask.iter().any(|m| schema.index(m) == Some(*c))));
    }
    Ok(out)
}

/// The family name of a cross-device model: the inner one with `-xdev`, or [`UTIL`].
pub fn family_name(scale: Scale, inner: &str) -> &'static str {
    if scale == Scale::Utilisation {
        return UTIL;
    }
    xdev_name(inner)
}

/// Name of the utilisation family ([`Scale::Utilisation`]).
pub const UTIL: &str = "util";

/// `<inner>-xdev`, kept for the life of the program: family names are `&'static str`, and
/// any family (those registered at run time too) can be wrapped. One allocation per family
/// name, on the first cross-device model of that family.
fn xdev_name(inner: &str) -> &'static str {
    static NAMES: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let want = format!("{inner}-xdev");
    if let Some(name) = names.iter().find(|n| **n == want) {
        return name;
    }
    let name: &'static str = Box::leak(want.into_boxed_str());
    names.push(name);
    name
}

fn default_tile() -> f64 {
    DEFAULT_TILE
}

/// Tile side of [`Scale::Waves`] when a saved model names none.
pub const DEFAULT_TILE: f64 = 64.0;

/// The saved form of a [`FittedCrossDevice`]. Checked when read: the outer schema is this
/// build's single-device schema of the kind and the inner model reads its extended schema.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(try_from = "UncheckedCrossDevice")]
pub struct SavedCrossDevice {
    /// The single-device schema the model reads.
    pub schema: FeatureSchema,
    /// The inner model, fitted on [`extended_schema`] rows.
    pub inner: Box<SavedModel>,
    /// Spec fields read besides peak and bandwidth.
    #[serde(default)]
    pub fields: Vec<String>,
    /// Devices whose spec fields the model knows (those trained on, and any added with
    /// [`SavedModel::with_device`]).
    #[serde(default)]
    pub devices: Vec<DeviceSpec>,
    /// Per-call floor of the normalisation, ms.
    #[serde(default)]
    pub floor_ms: f64,
    /// What latencies are normalised by.
    #[serde(default)]
    pub scale: Scale,
    /// Tile side of [`Scale::Waves`].
    #[serde(default = "default_tile")]
    pub tile: f64,
    /// Extended-row columns zeroed before the inner model.
    #[serde(default)]
    pub mask: Vec<String>,
    /// Whether the inner model sees only the spec fields.
    #[serde(default)]
    pub only_fields: bool,
    /// The model answering rows of the training devices (bounded below by the same least
    /// time); devices never seen get the inner model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen: Option<Box<SavedModel>>,
    /// Peak GFLOP/s and bandwidth of the training devices `seen` answers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub seen_devices: Vec<[f64; 2]>,
    /// The least roofline time among the rows `seen` was fitted on, ms: a query of less work
    /// takes the lower of `seen`'s answer and the inner model's, whose launch floor holds as
    /// work vanishes where `seen`'s trees may extrapolate upwards. `None` for models saved
    /// before it (a bundle fills it from the manifest's range): `seen` answers all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen_least_roofline_ms: Option<f64>,
    /// [`Scale::Utilisation`]: peak GFLOP/s and bandwidth of the devices the model saw
    /// training-step rows of. On a device far beyond these a training step is answered as its
    /// forward pass times the training/forward ratio the model predicts on them (see
    /// [`Regressor::phase_devices`]); empty for models saved before it, or without training rows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phase_devices: Vec<[f64; 2]>,
    /// [`Scale::Utilisation`]: the smallest launch floor among the training devices of each
    /// vendor, ms; an unseen device of a vendor listed gets its vendor's, others `floor_ms`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vendor_floors_ms: BTreeMap<String, f64>,
    /// [`Scale::Utilisation`]: how the launch floor and the kernel's own time combine, the
    /// `p` of `latency = (floor^p + kernel^p)^(1/p)`: 1 adds them (the default, and what models
    /// saved before it do), larger `p` lets the floor overlap the kernel (`max(floor, kernel)`
    /// as `p` grows), what NeuSight's timings show: a 4M-element add on an A100 takes its
    /// 27 us floor, not floor + kernel.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub floor_norm: f64,
    /// [`Scale::Utilisation`] with a target whose spec gives `launch_us`: the kind's floor
    /// in units of a device's `launch_us` (the median over the training devices whose specs
    /// give it), so the target's floor is `launch_us x launch_ratio`; absent when no training
    /// device gave `launch_us`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_ratio: Option<f64>,
}

fn one() -> f64 {
    1.0
}

fn is_one(v: &f64) -> bool {
    *v == 1.0
}

/// `(floor^p + busy^p)^(1/p)`: the latency of a kernel of `busy` ms behind a launch floor of
/// `floor` ms ([`SavedCrossDevice::floor_norm`]); at least each of them.
pub fn combine_floor(floor: f64, busy: f64, p: f64) -> f64 {
    if p == 1.0 {
        return floor + busy;
    }
    let (hi, lo) = if floor >= busy {
        (floor, busy)
    } else {
        (busy, floor)
    };
    if hi <= 0.0 {
        return 0.0;
    }
    (hi * (1.0 + (lo / hi).powf(p)).powf(1.0 / p)).max(hi)
}

/// The busy time that [`combine_floor`] turns into `latency` behind `floor`: `(latency^p -
/// floor^p)^(1/p)`, 0 where the latency is under the floor.
pub fn busy_behind_floor(floor: f64, latency: f64, p: f64) -> f64 {
    if latency <= floor {
        return 0.0;
    }
    if p == 1.0 {
        return latency - floor;
    }
    latency * (1.0 - (floor / latency).powf(p)).powf(1.0 / p)
}

#[derive(Deserialize)]
struct UncheckedCrossDevice {
    schema: FeatureSchema,
    inner: Box<SavedModel>,
    #[serde(default)]
    fields: Vec<String>,
    #[serde(default)]
    devices: Vec<DeviceSpec>,
    #[serde(default)]
    floor_ms: f64,
    #[serde(default)]
    scale: Scale,
    #[serde(default = "default_tile")]
    tile: f64,
    #[serde(default)]
    mask: Vec<String>,
    #[serde(default)]
    only_fields: bool,
    #[serde(default)]
    seen: Option<Box<SavedModel>>,
    #[serde(default)]
    seen_devices: Vec<[f64; 2]>,
    #[serde(default)]
    seen_least_roofline_ms: Option<f64>,
    #[serde(default)]
    vendor_floors_ms: BTreeMap<String, f64>,
    #[serde(default = "one")]
    floor_norm: f64,
    #[serde(default)]
    launch_ratio: Option<f64>,
    #[serde(default)]
    phase_devices: Vec<[f64; 2]>,
}

impl TryFrom<UncheckedCrossDevice> for SavedCrossDevice {
    type Error = Error;
    fn try_from(u: UncheckedCrossDevice) -> Result<SavedCrossDevice> {
        let saved = SavedCrossDevice {
            schema: u.schema,
            inner: u.inner,
            fields: u.fields,
            devices: u.devices,
            floor_ms: u.floor_ms,
            scale: u.scale,
            tile: u.tile,
            mask: u.mask,
            only_fields: u.only_fields,
            seen: u.seen,
            seen_devices: u.seen_devices,
            seen_least_roofline_ms: u.seen_least_roofline_ms,
            vendor_floors_ms: u.vendor_floors_ms,
            floor_norm: u.floor_norm,
            launch_ratio: u.launch_ratio,
            phase_devices: u.phase_devices,
        };
        if saved
            .phase_devices
            .iter()
            .flatten()
            .any(|v| !(v.is_finite() && *v > 0.0))
        {
            return Err(Error::InvalidData(format!(
                "phase_devices must hold positive peaks and bandwidths, got {:?}",
                saved.phase_devices
            )));
        }
        check(&saved, saved.inner.clone().into_regressor().schema())?;
        Ok(saved)
    }
}

fn check(saved: &SavedCrossDevice, inner: &FeatureSchema) -> Result<(Cols, Vec<usize>)> {
    let outer = &saved.schema;
    check_fields(&saved.fields).map_err(Error::InvalidData)?;
    if !FeatureSchema::versions(outer.kind).contains(outer)
        || *inner != extended_schema_of(outer, &saved.fields)
    {
        return Err(Error::InvalidData(format!(
            "cross-device `{}` model: its feature schemas are not this perfcast's",
            outer.kind
        )));
    }
    if !(saved.floor_norm.is_finite() && saved.floor_norm >= 1.0) {
        return Err(Error::InvalidData(format!(
            "cross-device `{}` model: floor_norm {} is not >= 1",
            outer.kind, saved.floor_norm
        )));
    }
    if let Some(r) = saved.launch_ratio
        && !(r.is_finite() && r > 0.0)
    {
        return Err(Error::InvalidData(format!(
            "cross-device `{}` model: launch_ratio {r} is not positive",
            outer.kind
        )));
    }
    if !(saved.tile.is_finite() && saved.tile >= 1.0) {
        return Err(Error::InvalidData(format!(
            "cross-device `{}` model: tile {} is not >= 1",
            outer.kind, saved.tile
        )));
    }
    Ok((
        Cols::of(outer)?,
        mask_columns(inner, &saved.mask, saved.only_fields).map_err(Error::InvalidData)?,
    ))
}

impl SavedModel {
    /// Adds `device` to a cross-device model's device table, so rows of that device (which
    /// carry only its peak and bandwidth) find its other spec fields; other models are returned
    /// unchanged.
    pub fn with_device(self, device: &DeviceSpec) -> SavedModel {
        let mut saved = self;
        if let Some(s) = saved.downcast_mut::<SavedCrossDevice>() {
            s.devices.push(device.clone());
        }
        saved
    }
}

/// A fitted cross-device model: predicts `inner(row + device block) * roofline_ms`.
#[derive(Debug)]
pub struct FittedCrossDevice {
    name: &'static str,
    schema: FeatureSchema,
    cols: Cols,
    inner: Box<dyn Regressor>,
    fields: Vec<String>,
    devices: Vec<DeviceSpec>,
    how: Normalise,
    mask_names: Vec<String>,
    mask: Vec<usize>,
    only_fields: bool,
    seen: Option<Box<dyn Regressor>>,
    seen_devices: Vec<[f64; 2]>,
    seen_least_roofline_ms: Option<f64>,
    vendor_floors_ms: BTreeMap<String, f64>,
    floor_norm: f64,
    launch_ratio: Option<f64>,
    /// The specs of [`SavedCrossDevice::phase_devices`], one per device.
    phase_devices: Vec<DeviceSpec>,
}

impl FittedCrossDevice {
    /// The model of a saved form, checked (the fit builds one this way).
    pub fn new(saved: SavedCrossDevice) -> Result<FittedCrossDevice> {
        let inner = saved.inner.clone().into_regressor();
        let (cols, mask) = check(&saved, inner.schema())?;
        Ok(FittedCrossDevice::assemble(saved, cols, mask, inner))
    }

    fn assemble(
        saved: SavedCrossDevice,
        cols: Cols,
        mask: Vec<usize>,
        inner: Box<dyn Regressor>,
    ) -> FittedCrossDevice {
        let mut phase_devices: Vec<DeviceSpec> = Vec::new();
        for d in &saved.devices {
            let key = [d.peak_gflops, d.mem_bandwidth_gbs];
            let known = phase_devices
                .iter()
                .any(|p| [p.peak_gflops, p.mem_bandwidth_gbs] == key);
            if saved.phase_devices.contains(&key) && !known {
                phase_devices.push(d.clone());
            }
        }
        FittedCrossDevice {
            name: family_name(saved.scale, inner.name()),
            schema: saved.schema,
            cols,
            inner,
            fields: saved.fields,
            devices: saved.devices,
            how: Normalise {
                scale: saved.scale,
                tile: saved.tile,
                floor_ms: saved.floor_ms,
            },
            mask_names: saved.mask,
            mask,
            only_fields: saved.only_fields,
            seen: saved.seen.map(|s| s.into_regressor()),
            seen_devices: saved.seen_devices,
            seen_least_roofline_ms: saved.seen_least_roofline_ms,
            vendor_floors_ms: saved.vendor_floors_ms,
            floor_norm: saved.floor_norm,
            launch_ratio: saved.launch_ratio,
            phase_devices,
        }
    }

    /// The model behind a checked saved form ([`SavedCrossDevice`] checks itself when read
    /// and when fitted, so this cannot fail on one).
    pub(crate) fn from_saved(saved: SavedCrossDevice) -> FittedCrossDevice {
        let inner = saved.inner.clone().into_regressor();
        let (cols, mask) = check(&saved, inner.schema()).unwrap_or((
            Cols {
                work_flops: 0,
                work_bytes: 0,
                peak: 0,
                bandwidth: 0,
                roofline: 0,
                gemm_m: 0,
                gemm_n: 0,
                matmul_m: None,
                util: None,
                training: 0,
            },
            Vec::new(),
        ));
        FittedCrossDevice::assemble(saved, cols, mask, inner)
    }

    /// The model fitted on extended rows.
    pub fn inner(&self) -> &dyn Regressor {
        self.inner.as_ref()
    }

    /// Spec fields read besides peak and bandwidth.
    pub fn fields(&self) -> &[String] {
        &self.fields
    }

    /// [`Scale::Utilisation`]: the launch floor on `device`, ms: its `launch_us` times the
    /// kind's [`SavedCrossDevice::launch_ratio`] where both are known, else the smallest
    /// floor of the training devices of its vendor, else of all.
    pub fn floor_ms(&self, device: Option<&DeviceSpec>) -> f64 {
        if let (Some(ratio), Some(launch)) = (self.launch_ratio, device.and_then(|d| d.launch_us)) {
            return launch / 1e3 * ratio;
        }
        device
            .and_then(|d| self.vendor_floors_ms.get(crate::gpu_util::vendor(&d.name)))
            .copied()
            .unwrap_or(self.how.floor_ms)
    }
}

impl Regressor for FittedCrossDevice {
    fn name(&self) -> &'static str {
        self.name
    }

    fn extrapolates(&self) -> bool {
        self.how.scale == Scale::Utilisation
    }

    fn phase_devices(&self) -> &[DeviceSpec] {
        &self.phase_devices
    }

    fn schema(&self) -> &FeatureSchema {
        &self.schema
    }

    fn predict_row(&self, x: &[f64]) -> Result<f64> {
        check_width(&self.schema, x.len())?;
        let mut buf = [0.0; MAX_EXTENDED];
        if self.inner.schema().len() > MAX_EXTENDED {
            return Err(Error::FeatureWidth {
                expected: MAX_EXTENDED - DEVICE_BLOCK.len(),
                got: x.len(),
            });
        }
        // Below the least work they were fitted on, the seen trees may extrapolate upwards
        // (a one-element add at 0.7 ms) while the spec model's floor may sit above the
        // device's own: the lower of the two answers such a query.
        let mut seen_ms = None;
        if let Some(seen) = &self.seen {
            let key = [x[self.cols.peak], x[self.cols.bandwidth]];
            if self.seen_devices.contains(&key) {
                let ms = seen.predict_row(x)?.max(self.cols.least_ms(x));
                let inside = self
                    .seen_least_roofline_ms
                    .is_none_or(|least| x[self.cols.roofline] >= least);
                if inside {
                    return Ok(ms);
                }
                seen_ms = Some(ms);
            }
        }
        let (width, device) = extend(
            &self.cols,
            &self.fields,
            &self.mask,
            self.how.scale,
            &self.devices,
            x,
            &mut buf,
        )?;
        let ext = &buf[..width];
        Ok(match self.how.scale {
            // Utilisation at most 1: never below the spec roofline.
            Scale::Utilisation => {
                let floor = self.floor_ms(device);
                let cycles = self.fields.iter().any(|f| f == "cycles");
                let busy =
                    self.cols.busy_ms(x, device, cycles) * self.inner.predict_row(ext)?.max(1.0);
                let ms = combine_floor(floor, busy, self.floor_norm);
                seen_ms.map_or(ms, |s| s.min(ms))
            }
            // The roofline time on the row's device, times the inner model on the extended row.
            _ => StackWith::new(
                FromFn(|x: &[f64]| Ok(self.cols.scale(x, &self.how, device))),
                FromFn(|_: &[f64]| self.inner.predict_row(ext)),
            )
            .predict_row(x)?,
        })
    }

    fn size_bytes(&self) -> usize {
        self.inner.size_bytes() + self.seen.as_ref().map_or(0, |s| s.size_bytes())
    }

    fn to_saved(&self) -> SavedModel {
        SavedModel::new(
            "crossdevice",
            SavedCrossDevice {
                schema: self.schema.clone(),
                inner: Box::new(self.inner.to_saved()),
                fields: self.fields.clone(),
                devices: self.devices.clone(),
                floor_ms: self.how.floor_ms,
                scale: self.how.scale,
                tile: self.how.tile,
                mask: self.mask_names.clone(),
                only_fields: self.only_fields,
                seen: self.seen.as_ref().map(|s| Box::new(s.to_saved())),
                seen_devices: self.seen_devices.clone(),
                seen_least_roofline_ms: self.seen_least_roofline_ms,
                vendor_floors_ms: self.vendor_floors_ms.clone(),
                floor_norm: self.floor_norm,
                launch_ratio: self.launch_ratio,
                phase_devices: self
                    .phase_devices
                    .iter()
                    .map(|d| [d.peak_gflops, d.mem_bandwidth_gbs])
                    .collect(),
            },
        )
    }
}

impl crate::regressor::SavedForm for SavedCrossDevice {
    fn into_regressor(self) -> Box<dyn Regressor> {
        Box::new(FittedCrossDevice::from_saved(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfcast_core::ModuleKind;

    #[test]
    fn one_tile_more_than_the_sms_costs_a_whole_wave() {
        let schema = FeatureSchema::for_kind(ModuleKind::Linear);
        let cols = Cols::of(&schema).unwrap();
        let mut x = vec![0.0; schema.len()];
        let (m, n) = (
            schema.index("gemm_m").unwrap(),
            schema.index("gemm_n").unwrap(),
        );
        // 40 tiles of 64 x 64 on 40 SMs: one full wave.
        x[m] = 64.0 * 8.0;
        x[n] = 64.0 * 5.0;
        assert_eq!(cols.wave_inflation(&x, 64.0, 40.0), 1.0);
        assert_eq!(cols.waves(&x, 64.0, 40.0), (1.0, 1.0));
        // One more column: 8 x 6 = 48 tiles, two waves, the second 8 tiles.
        x[n] = 64.0 * 5.0 + 1.0;
        let inflation = cols.wave_inflation(&x, 64.0, 40.0);
        assert!(inflation > 1.9 && inflation < 2.0, "{inflation}");
        let (waves, occupancy) = cols.waves(&x, 64.0, 40.0);
        assert!((waves - 1.2).abs() < 1e-12, "{waves}");
        assert!((occupancy - 0.6).abs() < 1e-12, "{occupancy}");
    }

    #[test]
    fn a_floor_combines_with_the_kernel_between_sum_and_max_and_inverts() {
        for p in [1.0, 2.0, 3.0, 8.0] {
            for (floor, busy) in [(0.026, 0.001), (0.026, 0.026), (0.026, 0.5), (0.0, 0.3)] {
                let t = combine_floor(floor, busy, p);
                assert!(t >= floor.max(busy) && t <= floor + busy + 1e-15, "{p} {t}");
                let back = busy_behind_floor(floor, t, p);
                // A kernel far under the floor survives the p-th powers only to ~1e-6.
                assert!(
                    (back - busy).abs() <= 1e-6 * (floor + busy),
                    "{p}: {back} vs {busy}"
                );
            }
        }
        assert_eq!(combine_floor(0.02, 0.01, 1.0), 0.02 + 0.01);
        // p = 2: a kernel as long as the floor adds 41%, not 100%.
        assert!((combine_floor(1.0, 1.0, 2.0) - 2f64.sqrt()).abs() < 1e-15);
        assert_eq!(busy_behind_floor(0.03, 0.02, 2.0), 0.0);
    }
}
