//! Specimens for tests of perfcast-select and the crates above it (the fuzz harness): a
//! one-kind ridge bundle on a small synthetic linear dataset. Not part of the API.

use std::collections::BTreeMap;
use std::path::Path;

use perfcast_core::{Context, DeviceSpec, ModuleKind, ModuleSpec, Phase};
use perfcast_models::features::row;
use perfcast_models::ridge::RidgeParams;
use perfcast_models::{FeatureSchema, Fit, Matrix, Regressor, TrainSet};

use crate::bundle::{FORMAT, KindEntry, Manifest, feature_ranges, write_bundle};
use crate::error::Result;
use crate::select::{Budget, Candidate, select};

/// The test CPU ([`perfcast_core::testing::cpu_device`]) with 20 GB/s.
pub fn device() -> DeviceSpec {
    DeviceSpec {
        mem_bandwidth_gbs: 20.0,
        ..perfcast_core::testing::cpu_device()
    }
}

/// A one-token linear layer, `i` -> `o` features.
pub fn linear(i: usize, o: usize) -> ModuleSpec {
    ModuleSpec::Linear(perfcast_core::Linear {
        in_features: i,
        out_features: o,
        tokens: 1,
        bias: true,
    })
}

/// A one-thread context.
pub fn ctx(batch: usize, phase: Phase) -> Context {
    Context {
        batch,
        phase,
        threads: 1,
        utilisation: 0.0,
    }
}

/// Linear rows of `configurations` layers in both phases on [`device`], latency linear in
/// the FLOPs (three times for training).
pub fn linear_set(configurations: usize) -> TrainSet {
    let schema = FeatureSchema::for_kind(ModuleKind::Linear);
    let mut x = Matrix::with_cols(schema.len());
    let (mut y, mut groups) = (Vec::new(), Vec::new());
    for i in 0..configurations {
        let spec = linear(16 + 8 * i, 32 + 4 * i);
        for phase in [Phase::Inference, Phase::Training] {
            let c = ctx(1 + i % 8, phase);
            let f = perfcast_core::features::derive(&spec, c.batch);
            x.push_row(&row(&spec, &c, &device()));
            y.push(0.001 + f.flops / 1e8 * if phase == Phase::Training { 3.0 } else { 1.0 });
            groups.push(i as u64);
        }
    }
    TrainSet {
        schema,
        x,
        y,
        groups,
    }
}

/// Writes the bundle `name` to `dir`: one kind, linear, a ridge fitted on
/// [`linear_set`]`(configurations)`; returns the model.
pub fn write_ridge_bundle(
    dir: &Path,
    name: &str,
    configurations: usize,
) -> Result<Box<dyn Regressor>> {
    let data = linear_set(configurations);
    let model = RidgeParams::default().fit(&data)?;
    let file = "linear/ridge.json";
    let mut kinds = BTreeMap::new();
    kinds.insert(
        "linear".to_string(),
        kind_entry("ridge", file, &model, &data)?,
    );
    write_bundle(
        dir,
        &manifest(name, kinds),
        &[(file.into(), model.to_saved())],
    )?;
    Ok(Box::new(model))
}

/// The manifest entry of a kind whose only candidate is `family` (made-up scores), its
/// model in `file`, fitted on `data`.
pub fn kind_entry(
    family: &str,
    file: &str,
    model: &dyn Regressor,
    data: &TrainSet,
) -> Result<KindEntry> {
    let candidates = vec![Candidate {
        model: family.into(),
        cv_mape: 3.0,
        test_mape: 3.5,
        predict_us: 0.3,
        size_bytes: model.size_bytes(),
    }];
    let selection = select(data.schema.kind.name(), &candidates, &Budget::default())?;
    Ok(KindEntry {
        chosen: family.into(),
        file: file.into(),
        schema_hash: format!("{:016x}", data.schema.hash()),
        rows: data.len(),
        candidates,
        selection,
        ranges: feature_ranges(data),
        refitted: false,
        distilled: None,
    })
}

/// The manifest of a bundle `name` of `kinds` on [`device`], without host costs.
pub fn manifest(name: &str, kinds: BTreeMap<String, KindEntry>) -> Manifest {
    Manifest {
        format: FORMAT,
        name: name.into(),
        perfcast_version: "0".into(),
        device: device(),
        data: "synthetic".into(),
        budget: Budget::default(),
        kinds,
        host_costs: None,
        trained_devices: Vec::new(),
    }
}
