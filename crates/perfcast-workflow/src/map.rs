//! `perfcast map` as workflows: [`profile`] maps a profile measured on one device (the
//! anchor) to a device never measured, PROFET-style, with a mapping fitted on devices that
//! measured the same configurations (perfcast-models); [`network`] carries one step measured
//! on the anchor to other devices by a bundle's ratio (perfcast-calibrate).

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use perfcast_calibrate::step_map::{MappedStep, StepParts, map_step};
use perfcast_core::progress::Observer;
use perfcast_core::{Context, DeviceSpec, ModuleKind, Network, NetworkChoice, Phase};
use perfcast_data::{DatasetDir, resolve_datasets};
use perfcast_models::devices_eval::{MapReport, map_profile, write_mapped};
use perfcast_models::source::PhaseFilter;
use serde::Serialize;

use crate::{Error, Result, check};

/// Longest step [`network`] takes, ms (a day).
const MAX_STEP_MS: f64 = 8.64e7;

/// What [`profile`] maps.
#[derive(Clone, Debug)]
pub struct ProfileMap {
    /// The dataset measured on the anchor (its `device.json` is the anchor's spec).
    pub from: PathBuf,
    /// Datasets of devices that measured the same configurations, or folders of them.
    pub train: Vec<PathBuf>,
    /// The target by name.
    pub device: Option<String>,
    /// The target's spec file (perfcast's `device.json` or a NeuSight config); wins over
    /// [`ProfileMap::device`].
    pub device_spec: Option<PathBuf>,
    /// Module kinds (empty: every kind of `from` that two training devices measured).
    pub modules: Vec<ModuleKind>,
    /// Rows of which phase.
    pub phase: PhaseFilter,
    /// Also write every mapped row to this CSV (atomically).
    pub out: Option<PathBuf>,
}

/// Maps `plan.from` to the target and writes the rows to `plan.out` when named.
pub fn profile(
    plan: &ProfileMap,
    observer: &dyn Observer,
    interrupt: &AtomicBool,
) -> Result<MapReport> {
    let target = perfcast_core::known::target_device(
        plan.device_spec.as_deref(),
        plan.device.as_deref(),
    )?
    .ok_or_else(|| Error::Input("name the target with `--device` or `--device-spec`".into()))?;
    let from = DatasetDir::open(&plan.from)?;
    let train = resolve_datasets(&plan.train)?;
    check(interrupt, "mapping the profile")?;
    let report = map_profile(&from, &train, &target, &plan.modules, plan.phase, observer)?;
    if let Some(path) = &plan.out {
        write_mapped(path, &report.rows)?;
    }
    Ok(report)
}

/// What [`network`] maps.
#[derive(Clone, Debug)]
pub struct StepMap {
    /// A zoo network (`resnet50`, `resnet50@128`) or a network JSON file.
    pub network: String,
    /// Samples per step.
    pub batch: usize,
    /// Inference (forward) or training (a whole step).
    pub step: Phase,
    /// The step time measured on the anchor, ms.
    pub measured_ms: f64,
    /// The device it was measured on (a known name).
    pub anchor: String,
    /// Targets by name.
    pub devices: Vec<String>,
    /// A target's spec file, before the named ones.
    pub device_spec: Option<PathBuf>,
    /// The bundle whose ratio maps the step.
    pub bundle: PathBuf,
}

/// A step mapped by [`network`].
#[derive(Clone, Debug, Serialize)]
pub struct StepMapReport {
    /// The network's name.
    pub network: String,
    /// Samples per step.
    pub batch: usize,
    /// Inference or training.
    pub step: Phase,
    /// The time measured on the anchor, ms.
    pub measured_ms: f64,
    /// The anchor's name.
    pub anchor: String,
    /// The bundle's prediction on the anchor, ms.
    pub anchor_ms: f64,
    /// What the bundle attributes its prediction on the anchor to.
    pub anchor_parts: StepParts,
    /// The spec roofline of the step on the anchor, ms.
    pub anchor_roofline_ms: f64,
    /// What the input says about itself: a measured time below the anchor's roofline.
    pub warnings: Vec<String>,
    /// Each target's mapped time beside the bundle's and the FLOP ratio's.
    pub targets: Vec<MappedStep>,
}

/// Carries `plan.measured_ms` from the anchor to each target.
pub fn network(plan: &StepMap, interrupt: &AtomicBool) -> Result<StepMapReport> {
    let measured_ms = plan.measured_ms;
    if !(measured_ms.is_finite() && measured_ms > 0.0 && measured_ms <= MAX_STEP_MS) {
        return Err(Error::Input(format!(
            "`--measured-ms` must be a positive time of at most a day, got {measured_ms}"
        )));
    }
    let anchor = perfcast_core::known::lookup(&plan.anchor)
        .map_err(|e| Error::Input(format!("`--anchor`: {e}")))?;
    let network = if Path::new(&plan.network).is_file() {
        Network::from_json_file(Path::new(&plan.network))?
    } else {
        NetworkChoice::zoo(&plan.network, None)?.network
    };
    let context = Context {
        batch: plan.batch,
        phase: plan.step,
        threads: 1,
        utilisation: 0.0,
    };
    context.validate()?;
    let mut targets: Vec<DeviceSpec> = Vec::new();
    if let Some(path) = &plan.device_spec {
        targets.push(DeviceSpec::read_file(path)?);
    }
    for name in &plan.devices {
        targets.push(
            perfcast_core::known::lookup(name)
                .map_err(|e| Error::Input(format!("`--device`: {e}")))?,
        );
    }
    if targets.is_empty() {
        return Err(Error::Input(
            "name the targets with `--device a,b` or `--device-spec <file>`".into(),
        ));
    }
    check(interrupt, "mapping the step")?;
    let (anchor_step, targets) = map_step(
        &plan.bundle,
        &network,
        &context,
        measured_ms,
        &anchor,
        &targets,
    )?;
    // No run in the anchor's type is faster than its roofline: such a time was measured in
    // another type (TF32 convs are PyTorch's default on Ampere and later), at another batch,
    // or on another device, and every target inherits the error.
    let mut warnings = Vec::new();
    if measured_ms < anchor_step.roofline_ms {
        let roofline = anchor_step.roofline_ms;
        let digits = (3.0 - roofline.log10().floor()).clamp(0.0, 9.0) as usize;
        warnings.push(format!(
            "the measured {measured_ms} ms is below `{}`'s {} roofline for this step \
             ({roofline:.digits$} ms), which no {} run reaches: was it measured in another \
             data type (name the anchor with it, e.g. `{}:fp16`), at another batch or on \
             another device?",
            anchor.name,
            anchor.dtype,
            anchor.dtype,
            plan.anchor.split(':').next().unwrap_or(&plan.anchor)
        ));
    }
    Ok(StepMapReport {
        network: network.name,
        batch: plan.batch,
        step: plan.step,
        measured_ms,
        anchor: anchor.name,
        anchor_ms: anchor_step.predicted_ms,
        anchor_parts: anchor_step.parts,
        anchor_roofline_ms: anchor_step.roofline_ms,
        warnings,
        targets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfcast_core::progress::Silent;

    fn step() -> StepMap {
        StepMap {
            network: "lenet5".into(),
            batch: 4,
            step: Phase::Training,
            measured_ms: 2.0,
            anchor: "t4".into(),
            devices: vec!["v100".into(), "l4".into()],
            device_spec: None,
            bundle: concat!(env!("CARGO_MANIFEST_DIR"), "/../../checkpoints/gpu").into(),
        }
    }

    #[test]
    fn a_step_faster_than_the_anchors_roofline_is_named() {
        let fine = network(&step(), &AtomicBool::new(false)).expect("map");
        assert!(fine.warnings.is_empty(), "{:?}", fine.warnings);
        let impossible = StepMap {
            measured_ms: fine.anchor_roofline_ms / 2.0,
            ..step()
        };
        let report = network(&impossible, &AtomicBool::new(false)).expect("map");
        assert_eq!(report.warnings.len(), 1, "{:?}", report.warnings);
        assert!(
            report.warnings[0].contains("roofline"),
            "{:?}",
            report.warnings
        );
        // Every target is still answered, none below its own roofline.
        assert!(report.targets.iter().all(|t| t.mapped_ms >= t.roofline_ms));
    }

    #[test]
    fn a_step_measured_on_one_gpu_is_carried_to_two_others() {
        let report = network(&step(), &AtomicBool::new(false)).expect("map");
        assert_eq!(report.network, "lenet5");
        assert!(report.anchor_ms > 0.0, "{report:?}");
        assert_eq!(report.targets.len(), 2);
        for t in &report.targets {
            assert!(t.mapped_ms > 0.0 && t.mapped_ms >= t.roofline_ms, "{t:?}");
            assert!(t.parts_ratio_ms > 0.0, "{t:?}");
        }
        // The parts add up to the bundle's answer on the anchor; a training step has launch
        // floors and host costs.
        let parts = report.anchor_parts;
        assert!(
            (parts.total_ms() / report.anchor_ms - 1.0).abs() < 1e-9,
            "{parts:?} vs {}",
            report.anchor_ms
        );
        assert!(parts.launch_ms > 0.0 && parts.host_ms > 0.0, "{parts:?}");
        // Mapped to the anchor itself, every ratio gives back the measured step.
        let mut plan = step();
        plan.devices = vec!["t4".into()];
        let own = network(&plan, &AtomicBool::new(false)).expect("map");
        let t = &own.targets[0];
        for ms in [t.bundle_ratio_ms, t.flop_ratio_ms, t.parts_ratio_ms] {
            assert!((ms / 2.0 - 1.0).abs() < 1e-9, "{t:?}");
        }
    }

    #[test]
    fn a_step_without_targets_or_with_an_absurd_time_is_refused() {
        let mut plan = step();
        plan.devices.clear();
        let err = network(&plan, &AtomicBool::new(false)).expect_err("no targets");
        assert!(err.to_string().starts_with("name the targets"), "{err}");
        plan.measured_ms = f64::NAN;
        let err = network(&plan, &AtomicBool::new(false)).expect_err("nan");
        assert!(err.to_string().starts_with("`--measured-ms`"), "{err}");
    }

    #[test]
    fn a_profile_without_a_target_is_refused_before_any_dataset_is_read() {
        let plan = ProfileMap {
            from: "/nonexistent".into(),
            train: Vec::new(),
            device: None,
            device_spec: None,
            modules: Vec::new(),
            phase: PhaseFilter::All,
            out: None,
        };
        let err = profile(&plan, &Silent, &AtomicBool::new(false)).expect_err("no target");
        assert_eq!(
            err.to_string(),
            "name the target with `--device` or `--device-spec`"
        );
    }
}
