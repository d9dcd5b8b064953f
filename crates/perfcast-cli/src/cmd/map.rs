//! `perfcast map`: PROFET-style anchor mapping of a profile measured on one device (the anchor)
//! to a device never measured, from both specs and a mapping fitted on devices that measured the
//! same configurations (`perfcast eval anchor` scores the same mapping with devices left out).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use perfcast_core::{DeviceSpec, ModuleKind};
use perfcast_data::{DatasetDir, write_atomic};
use perfcast_models::anchor::{self, AnchorModel};
use serde::Serialize;

use super::devices_eval::{PhaseChoice, anchor_rows, resolve_datasets};
use super::target_device::target_device;
use crate::Ui;
use crate::output::{Format, emit, emit_json, fmt_ms, progress};

/// Arguments of `perfcast map`.
#[derive(Debug, Args)]
pub struct MapArgs {
    /// Dataset measured on the anchor device (its `device.json` is the anchor's spec): the
    /// modules to map
    #[arg(long)]
    pub from: PathBuf,
    /// Datasets of devices that measured the same configurations (e.g. `datasets/deepbench`),
    /// or a folder of them: the mapping is fitted on every ordered pair of them
    #[arg(long, required = true, num_args = 1..)]
    pub train: Vec<PathBuf>,
    /// Target device by name (`perfcast predict --list-devices`)
    #[arg(long, conflicts_with = "device_spec")]
    pub device: Option<String>,
    /// Target device spec: perfcast's `device.json` format (may name its `software` stack) or
    /// a NeuSight config
    #[arg(long)]
    pub device_spec: Option<PathBuf>,
    /// Module kinds (default: every kind of `--from` that two `--train` devices measured)
    #[arg(long, value_delimiter = ',')]
    pub modules: Vec<ModuleKind>,
    /// Rows of which phase
    #[arg(long, value_enum, default_value_t)]
    pub phase: PhaseChoice,
    /// Also write every mapped row to this CSV (written atomically)
    #[arg(long, value_name = "CSV")]
    pub out: Option<PathBuf>,
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

/// One mapped row.
#[derive(Debug, Serialize)]
struct Mapped {
    kind: ModuleKind,
    module: String,
    batch: usize,
    phase: String,
    anchor_ms: f64,
    predicted_ms: f64,
    roofline_ratio_ms: f64,
}

/// Runs `perfcast map`.
pub fn run(a: MapArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    let target = target_device(a.device_spec.as_deref(), a.device.as_deref())?
        .ok_or_else(|| anyhow::anyhow!("name the target with `--device` or `--device-spec`"))?;
    let from = DatasetDir::open(&a.from)?;
    let anchor_spec = from.device()?;
    let train = resolve_datasets(&a.train)?;
    let devices: Vec<DeviceSpec> = train
        .iter()
        .map(DatasetDir::device)
        .collect::<Result<_, _>>()?;
    let kinds: Vec<ModuleKind> = if a.modules.is_empty() {
        from.kinds()
            .into_iter()
            .filter(|k| train.iter().filter(|d| d.kinds().contains(k)).count() >= 2)
            .collect()
    } else {
        a.modules.clone()
    };
    anyhow::ensure!(
        !kinds.is_empty(),
        "`{}` has no module kind that two `--train` devices measured",
        a.from.display()
    );
    let bar = progress(ui, kinds.len() as u64, "map");
    let mut mapped = Vec::new();
    for kind in kinds {
        bar.set_message(kind.to_string());
        let measured = anchor_rows(&train, &devices, kind, a.phase)?;
        anyhow::ensure!(
            measured.len() >= 2,
            "`{kind}`: the mapping needs `--train` datasets of at least 2 devices with such rows, \
             found {}",
            measured.len()
        );
        let refs: Vec<&anchor::DeviceRows> = measured.iter().collect();
        let model = AnchorModel::fit(kind, &refs)
            .with_context(|| format!("fitting the `{kind}` anchor mapping"))?;
        let mut records = from.read(kind)?;
        if let Some(phase) = a.phase.phase() {
            records.retain(|r| r.context.phase == phase);
        }
        let rows: Vec<_> = records
            .iter()
            .filter_map(|r| r.timing().map(|t| (&r.spec, &r.context, t.median_ms)))
            .filter(|(_, _, ms)| ms.is_finite() && *ms > 0.0)
            .collect();
        let predicted = model.predict_rows(&rows, &anchor_spec, &target)?;
        for ((spec, context, ms), p) in rows.iter().zip(predicted) {
            mapped.push(Mapped {
                kind,
                module: spec.describe(),
                batch: context.batch,
                phase: context.phase.name().into(),
                anchor_ms: *ms,
                predicted_ms: p,
                roofline_ratio_ms: anchor::roofline_ratio_ms(
                    spec,
                    context,
                    &anchor_spec,
                    &target,
                    *ms,
                ),
            });
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    if let Some(path) = &a.out {
        let mut csv =
            String::from("kind,module,batch,phase,anchor_ms,predicted_ms,roofline_ratio_ms\n");
        for m in &mapped {
            csv.push_str(&format!(
                "{},\"{}\",{},{},{},{},{}\n",
                m.kind,
                m.module,
                m.batch,
                m.phase,
                m.anchor_ms,
                m.predicted_ms,
                m.roofline_ratio_ms
            ));
        }
        write_atomic(path, csv.as_bytes())?;
    }
    // Totals per kind and phase: what a profile of a whole network adds up to.
    let mut totals: BTreeMap<(String, String), (usize, f64, f64)> = BTreeMap::new();
    for m in &mapped {
        let t = totals
            .entry((m.kind.to_string(), m.phase.clone()))
            .or_default();
        t.0 += 1;
        t.1 += m.anchor_ms;
        t.2 += m.predicted_ms;
    }
    if a.format == Format::Json {
        let totals: Vec<_> = totals
            .iter()
            .map(|((kind, phase), (rows, anchor_ms, predicted_ms))| {
                serde_json::json!({ "kind": kind, "phase": phase, "rows": rows,
                    "anchor_ms": anchor_ms, "predicted_ms": predicted_ms })
            })
            .collect();
        emit_json(&serde_json::json!({
            "anchor": anchor_spec.name, "target": target.name,
            "same_software": anchor::same_software(&anchor_spec, &target),
            "rows": mapped, "totals": totals
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = format!(
        "{} -> {}{}\n{:<48} {:>5} {:<9} {:>10} {:>10} {:>10}\n",
        anchor_spec.name,
        target.name,
        if anchor::same_software(&anchor_spec, &target) {
            " (same software stack)"
        } else {
            ""
        },
        "module",
        "batch",
        "phase",
        "anchor",
        "mapped",
        "roofline"
    );
    for m in &mapped {
        t.push_str(&format!(
            "{:<48} {:>5} {:<9} {:>10} {:>10} {:>10}\n",
            m.module,
            m.batch,
            m.phase,
            fmt_ms(m.anchor_ms),
            fmt_ms(m.predicted_ms),
            fmt_ms(m.roofline_ratio_ms)
        ));
    }
    for ((kind, phase), (rows, anchor_ms, predicted_ms)) in &totals {
        t.push_str(&format!(
            "total {kind} {phase}: {rows} rows, {} on the anchor -> {} mapped\n",
            fmt_ms(*anchor_ms),
            fmt_ms(*predicted_ms)
        ));
    }
    emit(&t)?;
    Ok(ExitCode::SUCCESS)
}
