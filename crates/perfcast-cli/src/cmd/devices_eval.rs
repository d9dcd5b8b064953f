//! Cross-device evaluation: `perfcast eval devices` (leave one device out; also
//! `perfcast eval --leave-one-device-out`) and `perfcast eval anchor` (PROFET-style mapping
//! from an anchor device's measured latency).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use perfcast_core::{DeviceSpec, ModuleKind, Phase};
use perfcast_data::DatasetDir;
use perfcast_models::TrainSet;
use perfcast_models::anchor::{self, AnchorMode};
use perfcast_models::device_features::{CrossDeviceParams, HeldOutDevice, Scale, concat, thin};
use perfcast_models::eval::ModelParams;
use serde::Serialize;

use crate::Ui;
use crate::output::{Format, emit, emit_json, progress, sig3};

/// The dataset directories behind `--data` values: a directory with a `device.json` is one
/// device's dataset; any other directory stands for every dataset directly inside it
/// (`datasets/neusight` is the five NeuSight GPUs).
pub fn resolve_datasets(paths: &[PathBuf]) -> anyhow::Result<Vec<DatasetDir>> {
    let mut out: Vec<DatasetDir> = Vec::new();
    for path in paths {
        if path.join("device.json").is_file() {
            out.push(DatasetDir::open(path)?);
            continue;
        }
        anyhow::ensure!(
            path.is_dir(),
            "`{}` is not a dataset directory\n\nhint: `perfcast import` writes one per device",
            path.display()
        );
        let mut subdirs: Vec<PathBuf> = std::fs::read_dir(path)
            .with_context(|| format!("reading `{}`", path.display()))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.join("device.json").is_file())
            .collect();
        subdirs.sort();
        anyhow::ensure!(
            !subdirs.is_empty(),
            "`{}` holds neither a `device.json` nor dataset directories with one",
            path.display()
        );
        for d in subdirs {
            out.push(DatasetDir::open(d)?);
        }
    }
    Ok(out)
}

/// One device's rows of a kind (failed rows left out), or `None` when it has no such table.
pub fn device_set(
    dir: &DatasetDir,
    device: &DeviceSpec,
    kind: ModuleKind,
    phase: Option<Phase>,
) -> anyhow::Result<Option<TrainSet>> {
    if !dir.kinds().contains(&kind) {
        return Ok(None);
    }
    let mut records = dir.read(kind)?;
    if let Some(phase) = phase {
        records.retain(|r| r.context.phase == phase);
    }
    let set = TrainSet::from_records(kind, &records, device)
        .with_context(|| format!("`{}`", dir.module_path(kind).display()))?;
    Ok((!set.is_empty()).then_some(set))
}

/// Which phase's rows to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PhaseChoice {
    /// Both phases
    #[default]
    All,
    /// Forward rows only
    Inference,
    /// Training-step rows only
    Training,
}

impl PhaseChoice {
    pub fn phase(self) -> Option<Phase> {
        match self {
            PhaseChoice::All => None,
            PhaseChoice::Inference => Some(Phase::Inference),
            PhaseChoice::Training => Some(Phase::Training),
        }
    }
}

/// Arguments of `perfcast eval devices`.
#[derive(Debug, Args)]
pub struct EvalDevicesArgs {
    /// Dataset directories, one per device, or folders of them (`datasets/neusight`)
    #[arg(long, required = true, num_args = 1..)]
    pub data: Vec<PathBuf>,
    /// Model families, comma-separated: ridge, knn, trees, medn, mlp (each fitted across
    /// devices with the device block and a roofline-normalised target), roofline, util (the
    /// GPU utilisation model: spec roofline / learned utilisation, never below the roofline);
    /// `<family>-raw` fits a family on the plain rows, for comparison
    #[arg(long, value_delimiter = ',', default_value = "ridge,knn,trees")]
    pub models: Vec<String>,
    /// Module kinds (default: every kind two devices or more have)
    #[arg(long, value_delimiter = ',')]
    pub modules: Vec<ModuleKind>,
    /// Rows of which phase
    #[arg(long, value_enum, default_value_t)]
    pub phase: PhaseChoice,
    /// Hold out only these devices (dataset folder names or device names; default: each in turn)
    #[arg(long, value_delimiter = ',')]
    pub holdout: Vec<String>,
    /// Use at most this many rows per device and kind (evenly spaced; 0: all), to bound time
    #[arg(long, default_value_t = 0)]
    pub max_rows: usize,
    /// Set a hyper-parameter, e.g. `--set trees.n_trees=600` (repeatable)
    #[arg(long = "set", value_name = "MODEL.FIELD=VALUE")]
    pub set: Vec<String>,
    /// Spec fields the cross-device models read besides peak GFLOP/s and bandwidth: sms,
    /// shaders, clock, memory, cache, waves (default: none)
    #[arg(long, value_delimiter = ',')]
    pub device_fields: Vec<String>,
    /// Per-call floor added to the roofline time latencies are normalised by, microseconds
    /// (not for `util`, which fits its own launch floor)
    #[arg(long, default_value_t = 1e3 * perfcast_models::device_features::DEFAULT_FLOOR_MS)]
    pub floor_us: f64,
    /// What cross-device models normalise latencies by: `roofline`, or `waves` (the roofline
    /// with the compute time of whole waves of `--tile` square output tiles over the SMs)
    #[arg(long, default_value = "roofline")]
    pub scale: String,
    /// Tile side of `--scale waves`
    #[arg(long, default_value_t = perfcast_models::device_features::DEFAULT_TILE)]
    pub tile: f64,
    /// Extended-row columns the cross-device models see as zero (e.g. dev_peak_gflops)
    #[arg(long, value_delimiter = ',')]
    pub mask: Vec<String>,
    /// Also write every held-out row's measured and predicted latency to this CSV (kind, model,
    /// device, the row's GEMM dimensions and roofline time), for error analysis
    #[arg(long, value_name = "CSV")]
    pub predictions: Option<PathBuf>,
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

/// One family's leave-one-device-out result on one kind.
#[derive(Debug, Serialize)]
struct FamilyResult {
    model: String,
    devices: Vec<HeldOutDevice>,
    mean_mape: f64,
}

/// One kind's table.
#[derive(Debug, Serialize)]
struct KindResult {
    kind: ModuleKind,
    phase: PhaseChoice,
    devices: Vec<String>,
    models: Vec<FamilyResult>,
}

/// A family by name in cross-device mode (`<family>-raw`: the plain family).
fn cross_device_params(name: &str) -> anyhow::Result<ModelParams> {
    let name = name.trim();
    if let Some(raw) = name.strip_suffix("-raw") {
        return Ok(ModelParams::by_name(raw)?);
    }
    Ok(CrossDeviceParams::wrap(ModelParams::by_name(name)?))
}

/// Applies `--set model.field=value` to the inner parameters of a family (named without `-xdev`).
pub fn with_overrides(
    name: &str,
    sets: &[String],
    fields: &[String],
    devices: &[DeviceSpec],
) -> anyhow::Result<ModelParams> {
    let base = name
        .trim()
        .trim_end_matches("-raw")
        .trim_end_matches("-xdev");
    let inner = ModelParams::by_name(base)?.with_sets(sets)?;
    let params = if name.trim().ends_with("-raw") {
        inner
    } else {
        CrossDeviceParams::wrap_with(inner, fields, devices)
    };
    params.validate()?;
    Ok(params)
}

fn matches_device(dir: &DatasetDir, device: &DeviceSpec, wanted: &[String]) -> bool {
    let folder = dir
        .root()
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    wanted
        .iter()
        .any(|w| *w == folder || *w == device.name || perfcast_core::slugify(w) == device.slug())
}

/// Runs `perfcast eval devices`.
pub fn eval_devices(a: EvalDevicesArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    let dirs = resolve_datasets(&a.data)?;
    anyhow::ensure!(
        dirs.len() >= 2,
        "leave-one-device-out needs datasets of at least 2 devices, `--data` gives {}",
        dirs.len()
    );
    for name in &a.models {
        cross_device_params(name)?;
    }
    let devices: Vec<DeviceSpec> = dirs
        .iter()
        .map(DatasetDir::device)
        .collect::<Result<_, _>>()?;
    for w in &a.holdout {
        anyhow::ensure!(
            dirs.iter()
                .zip(&devices)
                .any(|(d, s)| matches_device(d, s, std::slice::from_ref(w))),
            "`--holdout {w}` names none of the devices in `--data`"
        );
    }
    let kinds: Vec<ModuleKind> = if a.modules.is_empty() {
        ModuleKind::ALL
            .iter()
            .copied()
            .filter(|k| dirs.iter().filter(|d| d.kinds().contains(k)).count() >= 2)
            .collect()
    } else {
        a.modules.clone()
    };
    anyhow::ensure!(
        !kinds.is_empty(),
        "no module kind is measured on two devices or more"
    );
    let mut results = Vec::new();
    let mut dumped = String::new();
    let bar = progress(ui, (kinds.len() * a.models.len()) as u64, "devices");
    for kind in kinds {
        let mut sets: Vec<(String, TrainSet)> = Vec::new();
        let mut held: Vec<bool> = Vec::new();
        for (dir, device) in dirs.iter().zip(&devices) {
            if let Some(set) = device_set(dir, device, kind, a.phase.phase())? {
                sets.push((device.name.clone(), thin(&set, a.max_rows)));
                held.push(a.holdout.is_empty() || matches_device(dir, device, &a.holdout));
            }
        }
        anyhow::ensure!(
            sets.len() >= 2,
            "`{kind}` rows exist on {} device(s) of `--data`; leaving one out needs 2",
            sets.len()
        );
        let mut models = Vec::new();
        for name in &a.models {
            bar.set_message(format!("{kind}: {name}"));
            let mut params = with_overrides(name, &a.set, &a.device_fields, &devices)?;
            if let ModelParams::CrossDevice(p) = &mut params {
                // `util` fits its own floor and keeps its own target.
                if p.scale != Scale::Utilisation {
                    p.floor_ms = a.floor_us / 1e3;
                    p.scale = parse_scale(&a.scale)?;
                    p.tile = a.tile;
                }
                p.mask = a.mask.clone();
                p.validate()?;
            }
            let mut scores = Vec::new();
            for (i, keep) in held.iter().enumerate() {
                if !keep {
                    continue;
                }
                let others: Vec<&TrainSet> = sets
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, (_, s))| s)
                    .collect();
                let rest = concat(&others)?;
                let (device, test) = (&sets[i].0, &sets[i].1);
                let model = params
                    .fit(&rest)
                    .with_context(|| format!("`{kind}`, {name}, `{device}` left out"))?;
                let mut pred = model.predict(&test.x)?;
                // Scored as the predictor answers: a GPU prediction below the spec roofline
                // is raised to it (the count says how often the model needed that).
                let gpu = devices
                    .iter()
                    .any(|d| &d.name == device && d.kind == perfcast_core::DeviceKind::Gpu);
                let raised = if gpu {
                    perfcast_models::device_features::raise_to_roofline(test, &mut pred)
                } else {
                    0
                };
                let metrics = perfcast_core::Metrics::compute(&pred, &test.y)
                    .ok_or_else(|| anyhow::anyhow!("no rows of `{device}` to score"))?;
                if a.predictions.is_some() {
                    dump_rows(&mut dumped, kind, params.name(), device, test, &pred)?;
                }
                scores.push(HeldOutDevice {
                    device: device.clone(),
                    train_rows: rest.len(),
                    metrics,
                    raised_to_roofline: raised,
                });
            }
            let mean_mape =
                scores.iter().map(|s| s.metrics.mape).sum::<f64>() / scores.len().max(1) as f64;
            models.push(FamilyResult {
                model: params.name().to_string(),
                devices: scores,
                mean_mape,
            });
            bar.inc(1);
        }
        results.push(KindResult {
            kind,
            phase: a.phase,
            devices: sets.iter().map(|(n, _)| n.clone()).collect(),
            models,
        });
    }
    bar.finish_and_clear();
    if let Some(path) = &a.predictions {
        std::fs::write(path, dumped).with_context(|| format!("writing `{}`", path.display()))?;
    }
    match a.format {
        Format::Json => emit_json(&results)?,
        Format::Text => emit(&devices_table(&results))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// A `--scale` value.
fn parse_scale(s: &str) -> anyhow::Result<Scale> {
    match s {
        "roofline" => Ok(Scale::Roofline),
        "waves" => Ok(Scale::Waves),
        other => anyhow::bail!("`--scale {other}` is not `roofline` or `waves`"),
    }
}

/// Appends a held-out device's rows to the `--predictions` CSV (header first).
fn dump_rows(
    out: &mut String,
    kind: ModuleKind,
    model: &str,
    device: &str,
    test: &TrainSet,
    pred: &[f64],
) -> anyhow::Result<()> {
    use std::fmt::Write as _;
    if out.is_empty() {
        out.push_str(
            "kind,model,device,gemm_m,gemm_n,gemm_k,flops,roofline_ms,measured_ms,predicted_ms\n",
        );
    }
    let at = |name: &str| {
        test.schema
            .index(name)
            .ok_or_else(|| anyhow::anyhow!("the `{kind}` schema has no `{name}`"))
    };
    let cols = [
        at("gemm_m")?,
        at("gemm_n")?,
        at("gemm_k")?,
        at("work_flops")?,
        at("roofline_ms")?,
    ];
    let device = device.replace(',', " ");
    for ((r, y), p) in test.x.iter_rows().zip(&test.y).zip(pred) {
        write!(out, "{kind},{model},{device}")?;
        for c in cols {
            write!(out, ",{}", r[c])?;
        }
        writeln!(out, ",{y},{p}")?;
    }
    Ok(())
}

fn devices_table(results: &[KindResult]) -> String {
    let mut t = String::new();
    for r in results {
        t.push_str(&format!(
            "{} ({} rows), MAPE % with the device left out, trained on the others\n",
            r.kind,
            match r.phase {
                PhaseChoice::All => "all",
                PhaseChoice::Inference => "inference",
                PhaseChoice::Training => "training",
            }
        ));
        t.push_str(&format!("{:<28} {:>8}", "held-out device", "rows"));
        for m in &r.models {
            t.push_str(&format!(" {:>12}", m.model));
        }
        t.push('\n');
        let mut names: Vec<&String> = Vec::new();
        for m in &r.models {
            for d in &m.devices {
                if !names.contains(&&d.device) {
                    names.push(&d.device);
                }
            }
        }
        for name in names {
            let rows = r
                .models
                .iter()
                .flat_map(|m| &m.devices)
                .find(|d| &d.device == name)
                .map_or(0, |d| d.metrics.n);
            t.push_str(&format!("{name:<28} {rows:>8}"));
            for m in &r.models {
                let v = m
                    .devices
                    .iter()
                    .find(|d| &d.device == name)
                    .map_or("-".to_string(), |d| sig3(d.metrics.mape));
                t.push_str(&format!(" {v:>12}"));
            }
            t.push('\n');
        }
        t.push_str(&format!("{:<28} {:>8}", "mean", ""));
        for m in &r.models {
            t.push_str(&format!(" {:>12}", sig3(m.mean_mape)));
        }
        t.push('\n');
        let raised: usize = r
            .models
            .iter()
            .flat_map(|m| &m.devices)
            .map(|d| d.raised_to_roofline)
            .sum();
        if raised > 0 {
            t.push_str(&format!(
                "({raised} GPU predictions below the spec roofline raised to it, as the predictor does)\n"
            ));
        }
        t.push('\n');
    }
    t
}

/// Arguments of `perfcast eval anchor`.
#[derive(Debug, Args)]
pub struct EvalAnchorArgs {
    /// Dataset directories of devices that measured the same configurations (DeepBench), or
    /// a folder of them
    #[arg(long, required = true, num_args = 1..)]
    pub data: Vec<PathBuf>,
    /// Module kinds (default: every kind two devices or more have)
    #[arg(long, value_delimiter = ',')]
    pub modules: Vec<ModuleKind>,
    /// Rows of which phase (DeepBench's training rows are forward + both backward kernels)
    #[arg(long, value_enum, default_value_t)]
    pub phase: PhaseChoice,
    /// Which measured device each prediction starts from: `nearest` (the other device closest
    /// in peak GFLOP/s and bandwidth), `all` (every other device, each scored), or a device name;
    /// `nearest` and `all` choose among devices on the target's software stack (`software` in
    /// `device.json`) when any is
    #[arg(long, default_value = "nearest")]
    pub anchor: String,
    /// Leave out devices of another kind than the target (a CPU as anchor for GPUs)
    #[arg(long)]
    pub same_kind: bool,
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(Debug, Serialize)]
struct AnchorKindResult {
    kind: ModuleKind,
    phase: PhaseChoice,
    anchor: String,
    devices: Vec<anchor::HeldOutTarget>,
    /// Mean over held-out devices of each method's MAPE.
    mean_mape: BTreeMap<String, f64>,
}

/// The `kind` rows of `phase` of every dataset that has some, keyed for anchor mapping.
pub fn anchor_rows(
    dirs: &[DatasetDir],
    devices: &[DeviceSpec],
    kind: ModuleKind,
    phase: PhaseChoice,
) -> anyhow::Result<Vec<anchor::DeviceRows>> {
    let mut measured = Vec::new();
    for (dir, device) in dirs.iter().zip(devices) {
        let mut records = dir.read(kind)?;
        if let Some(phase) = phase.phase() {
            records.retain(|r| r.context.phase == phase);
        }
        if !records.is_empty() {
            measured.push(anchor::DeviceRows::new(device.clone(), &records));
        }
    }
    Ok(measured)
}

/// Runs `perfcast eval anchor`.
pub fn eval_anchor(a: EvalAnchorArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    let dirs = resolve_datasets(&a.data)?;
    anyhow::ensure!(
        dirs.len() >= 3,
        "anchor mapping with a device left out needs datasets of at least 3 devices, `--data` \
         gives {}",
        dirs.len()
    );
    let devices: Vec<DeviceSpec> = dirs
        .iter()
        .map(DatasetDir::device)
        .collect::<Result<_, _>>()?;
    let mode = match a.anchor.as_str() {
        "nearest" => AnchorMode::Nearest,
        "all" => AnchorMode::All,
        name => {
            let i = dirs
                .iter()
                .zip(&devices)
                .position(|(d, s)| matches_device(d, s, &[name.to_string()]))
                .ok_or_else(|| {
                    anyhow::anyhow!("`--anchor {name}` names none of the devices in `--data`")
                })?;
            AnchorMode::Device(devices[i].name.clone())
        }
    };
    let kinds: Vec<ModuleKind> = if a.modules.is_empty() {
        ModuleKind::ALL
            .iter()
            .copied()
            .filter(|k| dirs.iter().filter(|d| d.kinds().contains(k)).count() >= 2)
            .collect()
    } else {
        a.modules.clone()
    };
    let bar = progress(ui, kinds.len() as u64, "anchor");
    let mut results = Vec::new();
    for kind in kinds {
        bar.set_message(kind.to_string());
        let measured = anchor_rows(&dirs, &devices, kind, a.phase)?;
        let scores = anchor::leave_one_target_out(kind, &measured, &mode, a.same_kind)
            .with_context(|| format!("anchor mapping of `{kind}`"))?;
        let mut mean_mape = BTreeMap::new();
        for method in anchor::METHODS {
            let v: Vec<f64> = scores
                .iter()
                .filter_map(|s| s.mape.get(*method).copied())
                .collect();
            if !v.is_empty() {
                mean_mape.insert(method.to_string(), v.iter().sum::<f64>() / v.len() as f64);
            }
        }
        results.push(AnchorKindResult {
            kind,
            phase: a.phase,
            anchor: a.anchor.clone(),
            devices: scores,
            mean_mape,
        });
        bar.inc(1);
    }
    bar.finish_and_clear();
    match a.format {
        Format::Json => emit_json(&results)?,
        Format::Text => {
            let mut t = String::new();
            for r in &results {
                t.push_str(&format!(
                    "{} ({:?} rows), anchor {}: MAPE % predicting the held-out device\n",
                    r.kind, r.phase, r.anchor
                ));
                t.push_str(&format!(
                    "{:<30} {:<30} {:>6}",
                    "held-out device", "anchor", "pairs"
                ));
                for m in anchor::METHODS {
                    t.push_str(&format!(" {m:>10}"));
                }
                t.push('\n');
                for d in &r.devices {
                    t.push_str(&format!(
                        "{:<30} {:<30} {:>6}",
                        d.device,
                        d.anchors.join("+"),
                        d.pairs
                    ));
                    for m in anchor::METHODS {
                        let v = d.mape.get(*m).map_or("-".to_string(), |v| sig3(*v));
                        t.push_str(&format!(" {v:>10}"));
                    }
                    t.push('\n');
                }
                t.push_str(&format!("{:<30} {:<30} {:>6}", "mean", "", ""));
                for m in anchor::METHODS {
                    let v = r.mean_mape.get(*m).map_or("-".to_string(), |v| sig3(*v));
                    t.push_str(&format!(" {v:>10}"));
                }
                t.push_str("\n\n");
            }
            emit(&t)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `perfcast eval --leave-one-device-out --data <datasets> --models ridge,knn,...`: the flag
/// form of [`eval_devices`], where `--models` lists families instead of a trained directory.
pub fn eval_flag_form(
    models: &Path,
    data: &[PathBuf],
    format: Format,
    ui: &Ui,
) -> anyhow::Result<ExitCode> {
    let models: Vec<String> = models
        .to_string_lossy()
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    eval_devices(
        EvalDevicesArgs {
            data: data.to_vec(),
            models,
            modules: Vec::new(),
            phase: PhaseChoice::All,
            holdout: Vec::new(),
            max_rows: 0,
            set: Vec::new(),
            device_fields: Vec::new(),
            floor_us: 1e3 * perfcast_models::device_features::DEFAULT_FLOOR_MS,
            scale: "roofline".into(),
            tile: perfcast_models::device_features::DEFAULT_TILE,
            mask: Vec::new(),
            predictions: None,
            format,
        },
        ui,
    )
}

/// What `perfcast train --data` reads: one device's dataset (the single-device mode, unchanged)
/// or several (cross-device mode: every kind's rows stacked over the devices that have it, each
/// row with its own device's spec, and every family fitted across devices).
pub struct TrainSource {
    dirs: Vec<DatasetDir>,
    /// Each dataset's device, in `dirs` order.
    pub devices: Vec<DeviceSpec>,
    /// The device recorded as the bundle's (the first dataset's).
    pub device: DeviceSpec,
    /// Only rows of this phase (`None`: both).
    pub phase: Option<Phase>,
    /// Tables left out: (device name, kind), e.g. those `datasets check` flags.
    pub excluded: Vec<(String, ModuleKind)>,
}

impl TrainSource {
    /// Resolves `--data` values ([`resolve_datasets`]).
    pub fn open(paths: &[PathBuf]) -> anyhow::Result<TrainSource> {
        let dirs = resolve_datasets(paths)?;
        let devices: Vec<DeviceSpec> = dirs
            .iter()
            .map(DatasetDir::device)
            .collect::<Result<_, _>>()?;
        let device = devices
            .first()
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("`--data` names no dataset"))?;
        Ok(TrainSource {
            dirs,
            devices,
            device,
            phase: None,
            excluded: Vec::new(),
        })
    }

    /// The GEMM consistency check over the datasets (`perfcast datasets check`): each flagged
    /// device with the table at fault. Empty with fewer than three devices to compare.
    pub fn flagged(&self) -> anyhow::Result<Vec<(String, ModuleKind, String)>> {
        let report = perfcast_data::consistency::gemm_consistency(&self.dirs)?;
        Ok(report
            .iter()
            .filter_map(|c| {
                c.faulty_kind(&report).map(|k| {
                    let why = format!(
                        "linear/bmm efficiency {:.2}/{:.2}, ln ratio {:+.2} against the others' {:+.2}",
                        c.linear_efficiency, c.matmul_efficiency, c.log_ratio, c.others_log_ratio
                    );
                    (c.device.clone(), k, why)
                })
            })
            .collect())
    }

    /// Whether rows of several datasets are stacked.
    pub fn cross_device(&self) -> bool {
        self.dirs.len() > 1
    }

    /// Kinds any dataset has.
    pub fn kinds(&self) -> Vec<ModuleKind> {
        ModuleKind::ALL
            .iter()
            .copied()
            .filter(|k| self.dirs.iter().any(|d| d.kinds().contains(k)))
            .collect()
    }

    /// The datasets, for messages.
    pub fn label(&self) -> String {
        self.dirs
            .iter()
            .map(|d| d.root().display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The tables of a kind, for messages.
    pub fn path(&self, kind: ModuleKind) -> String {
        self.dirs
            .iter()
            .filter(|d| d.kinds().contains(&kind))
            .map(|d| d.module_path(kind).display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Every row of a kind, over the datasets that have it.
    pub fn train_set(&self, kind: ModuleKind) -> anyhow::Result<TrainSet> {
        let mut sets = Vec::new();
        for (dir, device) in self.dirs.iter().zip(&self.devices) {
            if self.excluded.contains(&(device.name.clone(), kind)) {
                continue;
            }
            if let Some(s) = device_set(dir, device, kind, self.phase)? {
                sets.push(s);
            }
        }
        let refs: Vec<&TrainSet> = sets.iter().collect();
        match refs.as_slice() {
            [] => Ok(TrainSet {
                schema: perfcast_models::FeatureSchema::for_kind(kind),
                x: perfcast_models::Matrix::with_cols(
                    perfcast_models::FeatureSchema::for_kind(kind).len(),
                ),
                y: Vec::new(),
                groups: Vec::new(),
            }),
            _ => Ok(concat(&refs)?),
        }
    }

    /// The families to fit: as given on one device, in cross-device mode on several.
    pub fn params(&self, params: Vec<ModelParams>) -> Vec<ModelParams> {
        params
            .into_iter()
            .map(|p| match p {
                // `util` reads the device's spec even on one device.
                ModelParams::CrossDevice(_) => CrossDeviceParams::wrap_with(p, &[], &self.devices),
                p if self.cross_device() => CrossDeviceParams::wrap_with(p, &[], &self.devices),
                p => p,
            })
            .collect()
    }
}
