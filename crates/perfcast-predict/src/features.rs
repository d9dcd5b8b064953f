//! The feature rows models learn from: a module's configuration, its context, derived work and
//! the device's spec, in one fixed order per module kind (the schema).
//!
//! Features are computed from specs at training and query time, never stored as the only copy.
//! Rows are raw (no logs): each model applies its own transform, so trees, k-NN and ridge see
//! the same inputs.

use perfcast_core::{Context, DeviceSpec, Dims, ModuleKind, ModuleSpec, Phase, features};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Feature names after the kind's configuration columns.
pub const COMMON: &[&str] = &[
    "batch",
    "training",
    "threads",
    "utilisation",
    "flops",
    "work_flops",
    "bytes",
    "work_bytes",
    "params",
    "output_elems",
    "input_elems",
    "intensity",
    "dev_peak_gflops",
    "dev_bandwidth_gbs",
    "roofline_ms",
    "gemm_m",
    "gemm_n",
    "gemm_k",
    "gemm_min",
    "gemm_m_align",
    "gemm_n_align",
    "gemm_k_align",
    "conv_pointwise",
    "conv_depthwise",
    "conv_small_channel",
    "conv_grouped",
];

/// Extra feature names of conv2d, after [`COMMON`]: the shapes of the two convolutions a
/// training step adds (see [`conv_backward_features`]), then [`im2col_mib`].
pub const CONV_EXTRA: &[&str] = &[
    "wgrad_calls",
    "wgrad_small_channel",
    "wgrad_taps",
    "wgrad_gemm_m",
    "wgrad_gemm_n",
    "wgrad_gemm_k",
    "xgrad_columns_mib",
    "xgrad_tiled",
    "im2col_mib",
];

/// Extra feature names of linear, after [`COMMON`]: the output and input widths' alignment up
/// to [`WIDE_ALIGN_MAX`] ([`wide_alignment`]) and whether the CPU GEMM reads the weights
/// unpacked ([`unpacked_weights`]). Added in schema version 2 of the kind; rows of version 1
/// are these rows without them ([`FeatureSchema::versions`]).
pub const LINEAR_EXTRA: &[&str] = &[
    "gemm_n_wide_align",
    "gemm_k_wide_align",
    "gemm_unpacked_weights",
];

/// Rows of a GEMM up to which the `gemm` crate (burn-flex's matmul) reads a transposed
/// weight matrix in place instead of packing it: twice its f32 micro-kernel's rows on x86-64
/// AVX2 (`m > 2 * MR` packs).
pub const UNPACKED_WEIGHTS_MAX_M: f64 = 48.0;

/// 1 when a linear layer's GEMM (`m` rows: batch x tokens) reads its weights unpacked on a
/// CPU ([`UNPACKED_WEIGHTS_MAX_M`]): each micro-kernel call then walks weight rows a whole
/// input width apart, and above a few MiB of weights the layer runs about twice as long per
/// FLOP as one with a few more rows. A step in the library's dispatch, not a trend a smooth
/// model finds from `m`.
pub fn unpacked_weights(m: f64) -> f64 {
    f64::from(u8::from((1.0..=UNPACKED_WEIGHTS_MAX_M).contains(&m)))
}

/// The largest alignment [`wide_alignment`] tells apart, in elements (16 KiB of f32: a page
/// and more).
pub const WIDE_ALIGN_MAX: u32 = 4096;

/// The largest power of two dividing a GEMM width, up to [`WIDE_ALIGN_MAX`]; 0 for none.
///
/// On a CPU a row stride on a multiple of 1,024 floats (4 KiB) maps every row of a weight
/// panel to the same cache sets, so such widths run slower than their neighbours; the
/// 128-capped [`alignment`] cannot tell 1,024 from 128. GPU rows hold 0: their caches are
/// not indexed this way and their models keep the previous inputs.
pub fn wide_alignment(dim: f64) -> f64 {
    power_of_two_divisor(dim, WIDE_ALIGN_MAX)
}

/// The unfolded-input buffer of a conv lowered to GEMM (im2col), MiB over the batch; 0 on the
/// paths that skip it (1x1, depthwise, small-channel). Writing and re-reading it is memory
/// traffic that the module's own input and output bytes do not count, and the weight-gradient
/// conv of a training step unfolds a buffer of the same size.
pub fn im2col_mib(spec: &ModuleSpec, batch: usize) -> f64 {
    im2col_mib_of(spec, batch, &spec.output_shape().unwrap_or_default())
}

/// [`im2col_mib`] given the spec's output shape.
fn im2col_mib_of(spec: &ModuleSpec, batch: usize, out: &[usize]) -> f64 {
    let ModuleSpec::Conv2d(c) = spec else {
        return 0.0;
    };
    let [pointwise, depthwise, small, _] = conv_algorithm_flags(spec);
    if pointwise + depthwise + small > 0.0 {
        return 0.0;
    }
    // In f64: batch x positions x taps can pass 2^64 for valid specs at large batches (the
    // products are exact below 2^53, where every real layer is).
    let positions: f64 = out.iter().skip(1).map(|&d| d as f64).product();
    let per_group = (c.in_channels / c.groups.max(1)) as f64 * (c.kernel[0] * c.kernel[1]) as f64;
    4.0 * (batch as f64 * positions * per_group * c.groups.max(1) as f64) / (1024.0 * 1024.0)
}

/// Bytes above which burn-flex's transposed convolution tiles its column buffer.
const XGRAD_TILE_BYTES: f64 = 8.0 * 1024.0 * 1024.0;

/// The backward pass of a conv is two more convolutions whose shapes are nothing like the
/// forward one, and on the CPU they dominate a training step for small channel counts:
/// burn computes the weight gradient as a conv whose batch is `c_in / groups`, whose channels
/// are the batch, and whose *kernel* is the whole output plane (one call per group), and the
/// input gradient as a transposed conv (GEMM into a column buffer, tiled above 8 MiB).
/// A 1x1 conv on an 82x82 image with 14 output channels thus runs a 6,724-tap direct
/// convolution in training. Zeros for inference rows and other kinds.
pub fn conv_backward_features(spec: &ModuleSpec, context: &Context) -> [f64; 8] {
    conv_backward_of(spec, context, &spec.output_shape().unwrap_or_default())
}

/// Whether a training step's weight-gradient conv of `c` at `batch` takes flex's
/// small-channel direct path: that conv has `batch` input channels and the group's output
/// channels, so the path takes it under the same thresholds as a forward conv.
pub fn wgrad_on_direct_path(c: &perfcast_core::Conv2d, batch: usize) -> bool {
    c.in_channels > 0 && batch <= 4 && c.out_channels / c.groups.max(1) <= 16
}

/// [`conv_backward_features`] given the spec's output shape.
fn conv_backward_of(spec: &ModuleSpec, context: &Context, out: &[usize]) -> [f64; 8] {
    let ModuleSpec::Conv2d(c) = spec else {
        return [0.0; 8];
    };
    if context.phase != Phase::Training {
        return [0.0; 8];
    }
    let (oh, ow) = (
        out.get(1).copied().unwrap_or(1) as f64,
        out.get(2).copied().unwrap_or(1) as f64,
    );
    let g = c.groups.max(1) as f64;
    let batch = context.batch as f64;
    let cin_g = c.in_channels as f64 / g;
    let cout_g = c.out_channels as f64 / g;
    let taps = oh * ow;
    let small = wgrad_on_direct_path(c, context.batch);
    let kernel_taps = (c.kernel[0] * c.kernel[1]) as f64;
    let columns = 4.0 * cin_g * kernel_taps * taps;
    [
        g,
        f64::from(u8::from(small)),
        taps,
        cin_g * kernel_taps,
        cout_g,
        batch * taps,
        columns / (1024.0 * 1024.0),
        f64::from(u8::from(columns > XGRAD_TILE_BYTES)),
    ]
}

/// Which family of algorithm a CPU backend picks for a conv, as 0/1 flags: `[pointwise (1x1),
/// depthwise, small-channel direct, other grouped]`; all zero for the generic im2col + GEMM path
/// and for other kinds. burn-flex dispatches exactly on these (1x1 -> GEMM on NCHW; groups =
/// c_in = c_out -> direct depthwise; groups = 1 with c_in <= 4 and c_out <= 16 -> direct
/// small-channel), and each path has its own efficiency curve, so trees need the switch points
/// as inputs rather than guessing them from the channel counts.
pub fn conv_algorithm_flags(spec: &ModuleSpec) -> [f64; 4] {
    let ModuleSpec::Conv2d(c) = spec else {
        return [0.0; 4];
    };
    let pointwise = c.kernel == [1, 1] && c.stride == [1, 1] && c.padding == [0, 0];
    let depthwise =
        !pointwise && c.groups == c.in_channels && c.out_channels == c.in_channels && c.groups > 1;
    let small = !pointwise && c.groups == 1 && c.in_channels <= 4 && c.out_channels <= 16;
    let grouped = !pointwise && !depthwise && c.groups > 1;
    [pointwise, depthwise, small, grouped].map(|b| f64::from(u8::from(b)))
}

/// The GEMM a CPU or GPU backend lowers a module to, `(M, N, K)` for the whole batch (zeros
/// for kinds that are not GEMM-like). Efficiency depends on these far more than on FLOPs alone:
/// a conv with 2 output channels is a GEMM with N = 2, memory-bound at any size.
pub fn gemm_dims(spec: &ModuleSpec, batch: usize) -> (f64, f64, f64) {
    gemm_dims_of(spec, batch, &spec.output_shape().unwrap_or_default())
}

/// [`gemm_dims`] given the spec's output shape.
fn gemm_dims_of(spec: &ModuleSpec, batch: usize, out: &[usize]) -> (f64, f64, f64) {
    let n = batch as f64;
    match spec {
        ModuleSpec::Conv2d(c) => {
            let hw = out.iter().skip(1).map(|&d| d as f64).product::<f64>();
            let g = c.groups.max(1) as f64;
            (
                n * hw * g,
                c.out_channels as f64 / g,
                (c.in_channels as f64 / g) * (c.kernel[0] * c.kernel[1]) as f64,
            )
        }
        ModuleSpec::Linear(l) => (
            n * l.tokens as f64,
            l.out_features as f64,
            l.in_features as f64,
        ),
        ModuleSpec::Matmul(m) => (n * (m.heads * m.m) as f64, m.n as f64, m.k as f64),
        _ => (0.0, 0.0, 0.0),
    }
}

/// The alignment features of [`COMMON`].
pub const ALIGNMENT: [&str; 3] = ["gemm_m_align", "gemm_n_align", "gemm_k_align"];

/// The largest power of two (up to 128) dividing a GEMM dimension; 0 for no GEMM.
///
/// SIMD micro-kernels on CPUs and tiled kernels on GPUs run at full speed only on whole
/// vectors and tiles, so latency is not smooth in the shapes: 512 and 513 output features
/// differ by a whole extra tile. Smooth models cannot find these steps from the sizes alone.
pub fn alignment(dim: f64) -> f64 {
    power_of_two_divisor(dim, 128)
}

/// The largest power of two dividing `dim`, up to `max` (a power of two); 0 below 1.
fn power_of_two_divisor(dim: f64, max: u32) -> f64 {
    if dim < 1.0 {
        return 0.0;
    }
    let d = dim.round() as u64;
    f64::from(1u32 << d.trailing_zeros().min(max.trailing_zeros()))
}

/// The ordered feature names of one module kind.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeatureSchema {
    /// Module kind.
    pub kind: ModuleKind,
    /// Names, in row order.
    pub names: Vec<String>,
}

impl FeatureSchema {
    /// The schema of a kind: its configuration columns, then [`COMMON`], then the kind's
    /// extras ([`CONV_EXTRA`] for conv2d, [`LINEAR_EXTRA`] for linear).
    pub fn for_kind(kind: ModuleKind) -> FeatureSchema {
        let extra: &[&str] = match kind {
            ModuleKind::Conv2d => CONV_EXTRA,
            ModuleKind::Linear => LINEAR_EXTRA,
            _ => &[],
        };
        let names = kind
            .config_columns()
            .iter()
            .chain(COMMON)
            .chain(extra)
            .map(|s| (*s).to_string())
            .collect();
        FeatureSchema { kind, names }
    }

    /// Every schema version of a kind, the current ([`FeatureSchema::for_kind`]) first. Each
    /// older one is a prefix of the current: a later version only appends columns, so a model
    /// fitted on an older version reads the first columns of a current row.
    pub fn versions(kind: ModuleKind) -> Vec<FeatureSchema> {
        let current = FeatureSchema::for_kind(kind);
        let mut out = vec![current.clone()];
        if kind == ModuleKind::Linear {
            let mut v1 = current;
            v1.names.truncate(v1.names.len() - LINEAR_EXTRA.len());
            out.push(v1);
        }
        out
    }

    /// Whether this is an older version of its kind's schema ([`FeatureSchema::versions`]),
    /// not the current one.
    pub fn is_older_version(&self) -> bool {
        FeatureSchema::versions(self.kind)
            .iter()
            .skip(1)
            .any(|v| v == self)
    }

    /// Index of a feature by name.
    pub fn index(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    /// Stable hash of the kind and names: a saved model refuses rows of another schema.
    pub fn hash(&self) -> u64 {
        fnv1a(self.kind.name().bytes().chain(self.names.join(",").bytes()))
    }

    /// Width of a row.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether the schema is empty (never, for a real kind).
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// Training phases multiply the bytes moved: activations are read again and gradients written.
const TRAINING_BYTES_FACTOR: f64 = 3.0;

/// The feature row of a module in a context on a device, in [`FeatureSchema::for_kind`] order.
pub fn row(spec: &ModuleSpec, context: &Context, device: &DeviceSpec) -> Vec<f64> {
    // Sized once: rows are built per query on the prediction path.
    let mut out = Vec::with_capacity(MAX_ROW);
    row_into(spec, context, device, &mut out);
    out
}

/// The widest feature row of any kind.
pub const MAX_ROW: usize = 14 + COMMON.len() + CONV_EXTRA.len();

/// [`row`], appended to `out`: the prediction path builds many rows into one buffer. The
/// output shape is inferred once and shared by every feature that needs it.
pub fn row_into(spec: &ModuleSpec, context: &Context, device: &DeviceSpec, out: &mut Vec<f64>) {
    let shape = spec.output_dims().unwrap_or_default();
    row_into_shaped(spec, context, device, &shape, out);
}

/// [`row_into`] with the spec's output shape already derived (by its validation), so a
/// one-module query derives and checks it once.
pub fn row_into_shaped(
    spec: &ModuleSpec,
    context: &Context,
    device: &DeviceSpec,
    shape: &Dims,
    out: &mut Vec<f64>,
) {
    let d = features::derive_with(spec, context.batch, shape);
    let training = context.phase == Phase::Training;
    // Derived counts fp32 elements; a half-precision device view moves half the bytes.
    let bytes = (d.bytes_read + d.bytes_written) * device.element_scale();
    let intensity = if bytes > 0.0 { d.flops / bytes } else { 0.0 };
    let work_flops = if training { d.train_flops } else { d.flops };
    let work_bytes = if training {
        TRAINING_BYTES_FACTOR * bytes
    } else {
        bytes
    };
    let roofline_s = (work_flops / (device.peak_gflops * 1e9))
        .max(work_bytes / (device.mem_bandwidth_gbs * 1e9));
    out.reserve(MAX_ROW);
    spec.config_into(out);
    out.extend_from_slice(&[
        context.batch as f64,
        f64::from(u8::from(training)),
        context.threads as f64,
        context.utilisation,
        d.flops,
        work_flops,
        bytes,
        work_bytes,
        d.params,
        d.output_elems,
        d.input_elems,
        intensity,
        device.peak_gflops,
        device.mem_bandwidth_gbs,
        roofline_s * 1e3,
    ]);
    let (gm, gn, gk) = gemm_dims_of(spec, context.batch, shape);
    out.extend_from_slice(&[gm, gn, gk, gm.min(gn).min(gk)]);
    out.extend_from_slice(&[alignment(gm), alignment(gn), alignment(gk)]);
    out.extend_from_slice(&conv_algorithm_flags(spec));
    if spec.kind() == ModuleKind::Conv2d {
        out.extend_from_slice(&conv_backward_of(spec, context, shape));
        out.push(im2col_mib_of(spec, context.batch, shape));
    }
    if spec.kind() == ModuleKind::Linear {
        let cpu = f64::from(u8::from(device.kind != perfcast_core::DeviceKind::Gpu));
        out.extend_from_slice(&[
            cpu * wide_alignment(gn),
            cpu * wide_alignment(gk),
            cpu * unpacked_weights(gm),
        ]);
    }
}

/// [`perfcast_core::canonical::least_cpu_compute_time_s`] in ms, read off a row [`row_into`]
/// built for `spec` in `phase`, or in the training phase for an inference query (its FLOP
/// columns hold the derived work), so a query's
/// shapes are derived once for the row and the bound; the same value, bit for bit.
pub fn cpu_floor_ms_of_row(
    spec: &ModuleSpec,
    phase: Phase,
    row: &[f64],
    device: &DeviceSpec,
) -> f64 {
    if !matches!(
        spec,
        ModuleSpec::Conv2d(_) | ModuleSpec::Linear(_) | ModuleSpec::Matmul(_)
    ) {
        return 0.0;
    }
    // After the configuration: batch, phase, threads, utilisation, flops, work_flops (the
    // training FLOPs in a training-phase row, the only row a training query has).
    let at = spec.kind().config_columns().len() + 4;
    let flops = match phase {
        Phase::Training => row[at + 1],
        Phase::Inference => row[at],
    };
    flops / perfcast_core::canonical::conv_work_saving(spec) / (device.peak_gflops * 1e9) * 1e3
}

/// The inference row of a module and context, appended to `out`, from its training-phase row
/// as [`row_into`] built it (`kind`'s schema): the columns that depend on the phase are the
/// `training` flag, the work and roofline columns and conv2d's gradient-conv shapes, so the
/// rest is copied. Equal to [`row_into`]'s inference row bit for bit, at a fraction of its
/// cost (no shapes to derive): the predictor's blends need both forms of each row.
pub fn inference_row_from_training(kind: ModuleKind, training: &[f64], out: &mut Vec<f64>) {
    let start = out.len();
    out.extend_from_slice(training);
    let row = &mut out[start..];
    let c = kind.config_columns().len();
    // COMMON's order: batch, training, threads, utilisation, flops, work_flops, bytes,
    // work_bytes, ..., dev_peak_gflops (12), dev_bandwidth_gbs (13), roofline_ms (14).
    let (flops, bytes) = (row[c + 4], row[c + 6]);
    row[c + 1] = 0.0;
    row[c + 5] = flops;
    row[c + 7] = bytes;
    let roofline_s = (flops / (row[c + 12] * 1e9)).max(bytes / (row[c + 13] * 1e9));
    row[c + 14] = roofline_s * 1e3;
    if kind == ModuleKind::Conv2d {
        let grad = c + COMMON.len();
        row[grad..grad + 8].fill(0.0);
    }
}

/// Names of the device block a cross-device model appends to a single-device row: roofline
/// compute and memory time on the row's device, its ridge point and the compute share. The
/// block is part of the row format, so rows are rebuilt here without knowing the model.
pub const DEVICE_BLOCK: &[&str] = &[
    "xd_compute_ms",
    "xd_memory_ms",
    "xd_ridge_flop_per_byte",
    "xd_compute_share",
];

/// The device block ([`DEVICE_BLOCK`] order) of a row's work and device columns.
pub fn block_values(
    work_flops: f64,
    work_bytes: f64,
    peak_gflops: f64,
    bandwidth_gbs: f64,
) -> [f64; 4] {
    let peak = peak_gflops.max(f64::MIN_POSITIVE);
    let bandwidth = bandwidth_gbs.max(f64::MIN_POSITIVE);
    let compute_ms = work_flops / (peak * 1e6);
    let memory_ms = work_bytes / (bandwidth * 1e6);
    let total = compute_ms + memory_ms;
    [
        compute_ms,
        memory_ms,
        peak / bandwidth,
        if total > 0.0 { compute_ms / total } else { 0.0 },
    ]
}

/// The device block of a single-device row `x` of `base`.
pub fn device_block(base: &FeatureSchema, x: &[f64]) -> Result<[f64; 4]> {
    check_width(base, x.len())?;
    let at = |name: &str| {
        base.index(name).ok_or_else(|| {
            Error::InvalidData(format!(
                "cross-device models need feature `{name}`, the `{}` schema has none",
                base.kind
            ))
        })
    };
    Ok(block_values(
        x[at("work_flops")?],
        x[at("work_bytes")?],
        x[at("dev_peak_gflops")?],
        x[at("dev_bandwidth_gbs")?],
    ))
}

/// The single-device schema a cross-device `schema` starts with (any version of its kind's),
/// when the [`DEVICE_BLOCK`] (and spec fields) follow it.
pub fn device_block_base(schema: &FeatureSchema) -> Option<FeatureSchema> {
    FeatureSchema::versions(schema.kind)
        .into_iter()
        .find(|base| {
            let n = base.len();
            schema.len() >= n + DEVICE_BLOCK.len()
                && schema.names[..n] == base.names[..]
                && schema.names[n..n + DEVICE_BLOCK.len()]
                    .iter()
                    .zip(DEVICE_BLOCK)
                    .all(|(a, b)| a == b)
        })
}

/// A row of the wrong width is an error naming both widths, not a panic.
pub fn check_width(schema: &FeatureSchema, width: usize) -> Result<()> {
    if width != schema.len() {
        return Err(Error::FeatureWidth {
            expected: schema.len(),
            got: width,
        });
    }
    Ok(())
}

/// The feature row of the same module and context in `phase`, recomputed from the row's own
/// configuration, context and device columns (a row carries everything [`row`] reads).
///
/// Multi-task models see one input per (module, context) and predict every phase from it, so
/// they canonicalise each row to its training-phase form, which holds both the forward work
/// and the backward shapes.
pub fn row_in_phase(schema: &FeatureSchema, x: &[f64], phase: Phase) -> Result<Vec<f64>> {
    check_width(schema, x.len())?;
    if let Some(base) = device_block_base(schema) {
        // A cross-device model's inner row: the single-device row, then its device block.
        // Spec fields after the block do not depend on the phase.
        let mut out = row_in_phase(&base, &x[..base.len()], phase)?;
        let block = device_block(&base, &out)?;
        out.extend_from_slice(&block);
        out.extend_from_slice(&x[out.len()..]);
        return Ok(out);
    }
    let at = |name: &str| -> Result<f64> {
        schema
            .index(name)
            .map(|i| x[i])
            .ok_or_else(|| Error::InvalidData(format!("schema has no `{name}` column")))
    };
    let n_config = schema.kind.config_columns().len();
    let config: Vec<i64> = x[..n_config].iter().map(|&v| v.round() as i64).collect();
    let spec = ModuleSpec::from_config(schema.kind, &config)
        .map_err(|e| Error::InvalidData(e.to_string()))?;
    let context = Context {
        batch: at("batch")?.round().max(1.0) as usize,
        phase,
        threads: at("threads")?.round().max(1.0) as usize,
        utilisation: at("utilisation")?,
    };
    let device = DeviceSpec {
        name: String::new(),
        kind: perfcast_core::DeviceKind::Cpu,
        peak_gflops: at("dev_peak_gflops")?,
        mem_bandwidth_gbs: at("dev_bandwidth_gbs")?,
        cores: 1,
        threads: 1,
        clock_mhz: 0.0,
        memory_gb: 0.0,
        cache_mb: 0.0,
        caches: Default::default(),
        source: perfcast_core::SpecSource::Published,
        software: None,
        launch_us: None,
        tdp_w: None,
        dtype: Default::default(),
        peaks: Default::default(),
        links: Default::default(),
    };
    let mut out = row(&spec, &context, &device);
    // Linear's extras do not depend on the phase, and the row does not say whether its
    // device is a GPU (where they are 0): they are the row's own.
    for name in LINEAR_EXTRA {
        if let Some(i) = schema.index(name) {
            out[i] = x[i];
        }
    }
    // A model of an older schema version reads the current row's first columns.
    out.truncate(schema.len());
    Ok(out)
}

/// 64-bit FNV-1a: stable across runs and platforms, unlike `std`'s randomly seeded hasher.
pub fn fnv1a(bytes: impl Iterator<Item = u8>) -> u64 {
    bytes.fold(0xcbf2_9ce4_8422_2325, |h, byte| {
        (h ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// [`perfcast_core::canonical::canonical`] when `device` is a GPU: what a GPU library runs.
/// CPU rows keep the form they were measured in (a CPU backend's kernels differ by form).
pub fn gpu_canonical(
    spec: &ModuleSpec,
    context: &Context,
    device: &DeviceSpec,
) -> Option<(ModuleSpec, Context)> {
    if device.kind != perfcast_core::DeviceKind::Gpu {
        return None;
    }
    perfcast_core::canonical::canonical(spec, context)
}

/// `ln(1 + max(v, 0))`: the transform for non-negative count-like features.
///
/// Zero (flags, absent columns of a shared input) skips the logarithm: half of some rows.
/// NaN maps to 0, as `max` did. Small whole numbers (channels, sizes, kernels, batch, threads,
/// alignments: most of a row) are looked up in a table `ln_1p` itself filled, so the prediction
/// path skips most logarithms. Other values from [`LN_DIRECT`] up take `ln(1 + v)`, whose
/// table-driven libm routine takes about half the instructions of `ln_1p`; rounding `1 + v`
/// costs at most `1.2e-13` of the result there, far below the `f32` the networks read.
#[inline]
pub fn log1p_pos(v: f64) -> f64 {
    log1p_in(log1p_table(), v)
}

/// The table [`log1p_pos`] looks whole numbers up in, for [`log1p_in`]: a loop over a row
/// takes it once instead of checking its initialisation per value.
#[inline]
pub fn log1p_table() -> &'static [f64] {
    &LOG1P_SMALL
}

/// [`log1p_pos`] with its table ([`log1p_table`]) at hand; the same bits.
#[inline(always)]
pub fn log1p_in(table: &[f64], v: f64) -> f64 {
    if v > 0.0 {
        let k = v as u32;
        if let Some(t) = table.get(k as usize)
            && f64::from(k) == v
        {
            return *t;
        }
        if v >= LN_DIRECT {
            (1.0 + v).ln()
        } else {
            v.ln_1p()
        }
    } else {
        0.0
    }
}

/// Values from this up take `ln(1 + v)` in [`log1p_in`]; below it `ln_1p` keeps the
/// precision of values near zero.
pub const LN_DIRECT: f64 = 1e-3;

/// Whole numbers below this have their `ln(1 + k)` in [`LOG1P_SMALL`].
const LOG1P_TABLE: usize = 4096;

/// `ln(1 + k)` for `k` in `0..LOG1P_TABLE`, computed by `ln_1p` once.
static LOG1P_SMALL: std::sync::LazyLock<Vec<f64>> =
    std::sync::LazyLock::new(|| (0..LOG1P_TABLE).map(|k| (k as f64).ln_1p()).collect());

#[cfg(test)]
mod tests {
    use super::*;
    use perfcast_core::testing;

    pub(crate) fn device() -> DeviceSpec {
        testing::cpu_device()
    }

    #[test]
    fn the_floor_read_off_a_row_is_the_derived_one() {
        let device = device();
        for spec in testing::one_of_each_kind() {
            for (phase, row_phase) in [
                (Phase::Inference, Phase::Inference),
                (Phase::Inference, Phase::Training),
                (Phase::Training, Phase::Training),
            ] {
                let context = Context {
                    batch: 3,
                    phase,
                    threads: 1,
                    utilisation: 0.0,
                };
                let mut x = Vec::new();
                let as_built = Context {
                    phase: row_phase,
                    ..context.clone()
                };
                row_into(&spec, &as_built, &device, &mut x);
                let want =
                    perfcast_core::canonical::least_cpu_compute_time_s(&spec, &context, &device);
                assert_eq!(
                    cpu_floor_ms_of_row(&spec, phase, &x, &device).to_bits(),
                    (want * 1e3).to_bits(),
                    "{} {phase:?} from a {row_phase:?} row",
                    spec.describe()
                );
            }
        }
    }

    #[test]
    fn rows_match_the_schema_for_every_kind() {
        for spec in testing::one_of_each_kind() {
            let schema = FeatureSchema::for_kind(spec.kind());
            let ctx = Context {
                batch: 4,
                phase: Phase::Training,
                threads: 1,
                utilisation: 0.0,
            };
            let r = row(&spec, &ctx, &device());
            assert_eq!(r.len(), schema.len(), "{}", spec.kind());
            assert!(r.iter().all(|v| v.is_finite() && *v >= 0.0));
            let work = schema.index("work_flops").unwrap();
            let flops = schema.index("flops").unwrap();
            assert!(r[work] >= r[flops]);
            // A view moves nothing: its roofline is zero, and predictors answer it as such.
            let roofline = r[schema.index("roofline_ms").unwrap()];
            if spec.kind().is_zero_cost() {
                assert_eq!(roofline, 0.0);
            } else {
                assert!(roofline > 0.0, "{}", spec.kind());
            }
        }
    }

    #[test]
    fn inference_rows_rewritten_from_training_rows_are_built_rows_bit_for_bit() {
        let mut specs = testing::one_of_each_kind();
        specs.push(testing::conv(64, 32, 40, 3, 1, 1));
        specs.push(testing::conv(32, 32, 17, 3, 2, 32));
        for spec in specs {
            for batch in [1, 3, 64] {
                let ctx = |phase| Context {
                    batch,
                    phase,
                    threads: 2,
                    utilisation: 0.25,
                };
                let training = row(&spec, &ctx(Phase::Training), &device());
                let mut out = vec![7.0];
                inference_row_from_training(spec.kind(), &training, &mut out);
                let built = row(&spec, &ctx(Phase::Inference), &device());
                assert_eq!(out[0], 7.0);
                let same = out[1..]
                    .iter()
                    .zip(&built)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same && out.len() == built.len() + 1, "{}", spec.describe());
                if spec.kind() == ModuleKind::Conv2d {
                    assert_ne!(training, built, "the phases' rows differ");
                }
            }
        }
    }

    #[test]
    fn conv_algorithm_flags_follow_the_backend_dispatch() {
        let conv = |cin, cout, k, stride, groups| {
            perfcast_core::testing::conv(cin, cout, 16, k, stride, groups)
        };
        assert_eq!(
            conv_algorithm_flags(&conv(64, 32, 1, 1, 1)),
            [1.0, 0.0, 0.0, 0.0]
        );
        // A strided 1x1 conv is not the pointwise fast path.
        assert_eq!(conv_algorithm_flags(&conv(64, 32, 1, 2, 1)), [0.0; 4]);
        assert_eq!(
            conv_algorithm_flags(&conv(32, 32, 3, 1, 32)),
            [0.0, 1.0, 0.0, 0.0]
        );
        assert_eq!(
            conv_algorithm_flags(&conv(3, 16, 3, 1, 1)),
            [0.0, 0.0, 1.0, 0.0]
        );
        assert_eq!(conv_algorithm_flags(&conv(3, 64, 3, 1, 1)), [0.0; 4]);
        assert_eq!(
            conv_algorithm_flags(&conv(32, 64, 3, 1, 4)),
            [0.0, 0.0, 0.0, 1.0]
        );
        let linear = perfcast_core::testing::one_of_each_kind().remove(1);
        assert_eq!(conv_algorithm_flags(&linear), [0.0; 4]);
    }

    #[test]
    fn conv_backward_features_describe_the_gradient_convs() {
        let spec = ModuleSpec::Conv2d(perfcast_core::Conv2d {
            in_channels: 107,
            out_channels: 14,
            input_hw: [82, 82],
            kernel: [1, 1],
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
            bias: true,
        });
        let mut ctx = Context {
            batch: 1,
            phase: Phase::Inference,
            threads: 1,
            utilisation: 0.0,
        };
        assert_eq!(conv_backward_features(&spec, &ctx), [0.0; 8]);
        ctx.phase = Phase::Training;
        let f = conv_backward_features(&spec, &ctx);
        // One call, small-channel path (batch 1 <= 4, 14 <= 16), an 82x82-tap kernel.
        assert_eq!(&f[..6], &[1.0, 1.0, 6724.0, 107.0, 14.0, 6724.0]);
        assert_eq!(f[7], 0.0);
        ctx.batch = 8;
        let f = conv_backward_features(&spec, &ctx);
        assert_eq!(f[1], 0.0, "batch 8 leaves the small-channel path");
        assert_eq!(f[5], 8.0 * 6724.0);
        let schema = FeatureSchema::for_kind(ModuleKind::Conv2d);
        assert_eq!(row(&spec, &ctx, &device()).len(), schema.len());
        assert_eq!(schema.names.last().unwrap(), "im2col_mib");
        // A 1x1 conv skips the unfolding; a 3x3 one unfolds 9 values per output position.
        assert_eq!(im2col_mib(&spec, 8), 0.0);
        let ModuleSpec::Conv2d(mut c) = spec.clone() else {
            unreachable!()
        };
        c.kernel = [3, 3];
        c.padding = [1, 1];
        let k3 = ModuleSpec::Conv2d(c);
        let expected = 4.0 * (2 * 82 * 82 * 107 * 9) as f64 / 1048576.0;
        assert!((im2col_mib(&k3, 2) - expected).abs() < 1e-9);
    }

    #[test]
    fn row_in_phase_recomputes_the_other_phase_exactly() {
        for spec in testing::one_of_each_kind() {
            let schema = FeatureSchema::for_kind(spec.kind());
            let mut ctx = Context {
                batch: 3,
                phase: Phase::Inference,
                threads: 2,
                utilisation: 0.25,
            };
            let inference = row(&spec, &ctx, &device());
            ctx.phase = Phase::Training;
            let training = row(&spec, &ctx, &device());
            let back = row_in_phase(&schema, &training, Phase::Inference).unwrap();
            assert_eq!(back, inference, "{}", spec.kind());
            let forth = row_in_phase(&schema, &inference, Phase::Training).unwrap();
            assert_eq!(forth, training, "{}", spec.kind());
        }
    }

    #[test]
    fn log1p_pos_is_ln_1p_bit_for_bit_on_the_table_and_within_rounding_elsewhere() {
        for k in 0..LOG1P_TABLE + 3 {
            let v = k as f64;
            let want = if v > 0.0 { v.ln_1p() } else { 0.0 };
            if k < LOG1P_TABLE {
                assert_eq!(log1p_pos(v).to_bits(), want.to_bits(), "{k}");
            } else {
                assert!((log1p_pos(v) - want).abs() < 1e-15 * want, "{k}");
            }
            let frac = v + 0.37;
            let rel = (log1p_pos(frac) - frac.ln_1p()).abs() / frac.ln_1p();
            assert!(rel < 1e-15, "{frac}: {rel}");
        }
        // Across the direct form's range, from its threshold to the largest sizes.
        let mut v = LN_DIRECT;
        while v < 1e300 {
            let rel = (log1p_pos(v) - v.ln_1p()).abs() / v.ln_1p();
            assert!(rel < 2e-13, "{v}: {rel}");
            v *= 1.37;
        }
        // Below it, `ln_1p` itself.
        for v in [1e-300, 1e-12, 3.7e-7, LN_DIRECT * 0.999] {
            assert_eq!(log1p_pos(v).to_bits(), v.ln_1p().to_bits(), "{v}");
        }
        assert_eq!(log1p_pos(f64::NAN), 0.0);
        assert_eq!(log1p_pos(-3.0), 0.0);
        assert_eq!(log1p_pos(f64::INFINITY), f64::INFINITY);
    }

    #[test]
    fn alignment_is_the_power_of_two_dividing_a_dimension() {
        assert_eq!(alignment(0.0), 0.0);
        assert_eq!(alignment(513.0), 1.0);
        assert_eq!(alignment(24.0), 8.0);
        assert_eq!(alignment(4096.0), 128.0);
    }

    #[test]
    fn schema_hash_differs_between_kinds() {
        let a = FeatureSchema::for_kind(ModuleKind::Conv2d).hash();
        let b = FeatureSchema::for_kind(ModuleKind::Linear).hash();
        assert_ne!(a, b);
        assert_eq!(a, FeatureSchema::for_kind(ModuleKind::Conv2d).hash());
    }
}
