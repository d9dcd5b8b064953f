//! Training rows from datasets: one device's rows of a kind, and [`TrainSource`], what
//! `perfcast train --data` reads (one dataset, or several stacked across devices with each
//! row's own device spec).

use perfcast_core::{DeviceSpec, ModuleKind, Phase};
use perfcast_data::DatasetDir;
use serde::Serialize;

use crate::device_features::{CrossDeviceParams, concat};
use crate::error::{Error, Result};
use crate::eval::ModelParams;
use crate::features::{FeatureSchema, TrainSet};
use crate::matrix::Matrix;

/// Which phase's rows to use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PhaseFilter {
    /// Both phases.
    #[default]
    All,
    /// Forward rows only.
    Inference,
    /// Training-step rows only.
    Training,
}

impl PhaseFilter {
    /// The one phase kept, or `None` for both.
    pub fn phase(self) -> Option<Phase> {
        match self {
            PhaseFilter::All => None,
            PhaseFilter::Inference => Some(Phase::Inference),
            PhaseFilter::Training => Some(Phase::Training),
        }
    }

    /// `all`, `inference` or `training`.
    pub fn name(self) -> &'static str {
        match self {
            PhaseFilter::All => "all",
            PhaseFilter::Inference => "inference",
            PhaseFilter::Training => "training",
        }
    }
}

/// One device's rows of a kind (failed rows left out), or `None` when it has no such table or
/// no such rows.
pub fn device_set(
    dir: &DatasetDir,
    device: &DeviceSpec,
    kind: ModuleKind,
    phase: Option<Phase>,
) -> Result<Option<TrainSet>> {
    if !dir.kinds().contains(&kind) {
        return Ok(None);
    }
    let mut records = dir.read(kind)?;
    if let Some(phase) = phase {
        records.retain(|r| r.context.phase == phase);
    }
    let set = TrainSet::from_records(kind, &records, device)
        .map_err(|e| e.context(format!("`{}`", dir.module_path(kind).display())))?;
    Ok((!set.is_empty()).then_some(set))
}

/// A table the GEMM consistency check flagged: device name, kind, what it found.
pub type Flagged = (String, ModuleKind, String);

/// What `perfcast train --data` reads: one device's dataset (the single-device mode) or several
/// (cross-device mode: every kind's rows stacked over the devices that have it, each row with
/// its own device's spec, and every family fitted across devices).
pub struct TrainSource {
    dirs: Vec<DatasetDir>,
    /// Each dataset's device, in dataset order.
    pub devices: Vec<DeviceSpec>,
    /// The device recorded as the bundle's (the first dataset's).
    pub device: DeviceSpec,
    /// Only rows of this phase (`None`: both).
    pub phase: Option<Phase>,
    /// Tables left out: (device name, kind), e.g. those [`TrainSource::flagged`] finds.
    pub excluded: Vec<(String, ModuleKind)>,
}

/// The GEMM consistency check over `dirs` (`perfcast datasets check`): each flagged device with
/// the table at fault and why. Empty with fewer than three devices to compare.
pub fn flagged_tables(dirs: &[DatasetDir]) -> Result<Vec<Flagged>> {
    let report = perfcast_data::consistency::gemm_consistency(dirs)?;
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

impl TrainSource {
    /// The source over resolved datasets ([`perfcast_data::resolve_datasets`]).
    pub fn new(dirs: Vec<DatasetDir>) -> Result<TrainSource> {
        let devices: Vec<DeviceSpec> = dirs
            .iter()
            .map(DatasetDir::device)
            .collect::<std::result::Result<_, _>>()?;
        let device = devices
            .first()
            .cloned()
            .ok_or_else(|| Error::Input("`--data` names no dataset".into()))?;
        Ok(TrainSource {
            dirs,
            devices,
            device,
            phase: None,
            excluded: Vec::new(),
        })
    }

    /// The GEMM consistency check over the datasets ([`flagged_tables`]).
    pub fn flagged(&self) -> Result<Vec<Flagged>> {
        flagged_tables(&self.dirs)
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
    pub fn train_set(&self, kind: ModuleKind) -> Result<TrainSet> {
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
        if refs.is_empty() {
            let schema = FeatureSchema::for_kind(kind);
            return Ok(TrainSet {
                x: Matrix::with_cols(schema.len()),
                schema,
                y: Vec::new(),
                groups: Vec::new(),
            });
        }
        concat(&refs)
    }

    /// The measured records of a kind in single-device mode (the rows [`TrainSource::train_set`]
    /// reads, before features), or `None` when several devices are stacked.
    pub fn records(&self, kind: ModuleKind) -> Result<Option<Vec<perfcast_data::Record>>> {
        let ([dir], [device]) = (self.dirs.as_slice(), self.devices.as_slice()) else {
            return Ok(None);
        };
        if !dir.kinds().contains(&kind) || self.excluded.contains(&(device.name.clone(), kind)) {
            return Ok(Some(Vec::new()));
        }
        let mut records = dir.read(kind)?;
        records.retain(|r| r.timing().is_some() && self.phase.is_none_or(|p| r.context.phase == p));
        Ok(Some(records))
    }

    /// The families to fit: as given on one device, in cross-device mode on several.
    pub fn params(&self, params: Vec<ModelParams>) -> Vec<ModelParams> {
        params
            .into_iter()
            .map(|p| {
                // `util` reads the device's spec even on one device.
                if p.is::<CrossDeviceParams>() || self.cross_device() {
                    CrossDeviceParams::wrap_with(p, &[], &self.devices)
                } else {
                    p
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfcast_core::{Context, ModuleSpec};
    use perfcast_data::{Outcome, Record, Timing};

    fn record(features: usize, phase: Phase, ms: f64) -> Record {
        Record {
            spec: ModuleSpec::from_json(&format!(
                r#"{{"kind":"linear","in_features":{features},"out_features":8}}"#
            ))
            .expect("spec"),
            context: Context {
                batch: 1,
                phase,
                threads: 1,
                utilisation: 0.0,
            },
            backend: "flex".into(),
            outcome: Outcome::Ok(Timing::median_only(ms)),
            perfcast_version: "test".into(),
            timestamp: 0,
        }
    }

    fn dataset(root: &std::path::Path, name: &str, rows: usize) -> DatasetDir {
        let device = DeviceSpec {
            name: name.into(),
            ..perfcast_core::testing::cpu_device()
        };
        let dir = DatasetDir::create_or_open(root.join(name), &device).expect("dataset");
        let records: Vec<Record> = (0..rows)
            .flat_map(|i| {
                [
                    record(8 + i, Phase::Inference, 1.0 + i as f64),
                    record(8 + i, Phase::Training, 3.0 + i as f64),
                ]
            })
            .collect();
        dir.write(ModuleKind::Linear, &records).expect("write");
        dir
    }

    #[test]
    fn rows_of_several_devices_stack_and_excluded_tables_stay_out() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let a = dataset(tmp.path(), "cpu a", 3);
        let b = dataset(tmp.path(), "cpu b", 2);
        let only_forward = device_set(
            &a,
            &a.device().expect("a"),
            ModuleKind::Linear,
            Some(Phase::Inference),
        )
        .expect("rows")
        .expect("some");
        assert_eq!(only_forward.len(), 3);
        assert!(
            device_set(&a, &a.device().expect("a"), ModuleKind::Conv2d, None)
                .expect("none")
                .is_none()
        );

        let mut source = TrainSource::new(vec![a, b]).expect("source");
        assert!(source.cross_device());
        assert_eq!(source.device.name, "cpu a");
        assert_eq!(source.kinds(), [ModuleKind::Linear]);
        assert_eq!(source.train_set(ModuleKind::Linear).expect("all").len(), 10);
        source.phase = Some(Phase::Training);
        assert_eq!(
            source
                .train_set(ModuleKind::Linear)
                .expect("training")
                .len(),
            5
        );
        source.excluded = vec![("cpu a".into(), ModuleKind::Linear)];
        assert_eq!(
            source.train_set(ModuleKind::Linear).expect("b only").len(),
            2
        );
        source.excluded = vec![
            ("cpu a".into(), ModuleKind::Linear),
            ("cpu b".into(), ModuleKind::Linear),
        ];
        assert!(
            source
                .train_set(ModuleKind::Linear)
                .expect("none")
                .is_empty()
        );
        // Two devices: every family is fitted across them.
        let params = source.params(vec![ModelParams::by_name("ridge").expect("ridge")]);
        assert!(params[0].is::<CrossDeviceParams>());

        let err = TrainSource::new(Vec::new())
            .err()
            .expect("no datasets")
            .to_string();
        assert_eq!(err, "`--data` names no dataset");
    }
}
