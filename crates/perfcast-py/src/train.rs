//! `perfcast.quickstart(...)`, behind the `train` feature: the quickstart workflow from Python,
//! the same library call the CLI makes. It brings burn and polars into the extension, which the
//! default build (the light predictor alone) keeps out.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use perfcast_core::progress::Silent;
use perfcast_profile::Sweep;
use perfcast_workflow::quickstart::QuickstartPlan;
use pyo3::prelude::*;

/// Profiles this machine into `data`, trains and selects a bundle (`checkpoints/<bundle>/`),
/// calibrates it and predicts the networks, as `perfcast quickstart` does; returns the report
/// as a dict. `sweep`, a sweep TOML (docs/profiling.md), replaces the random sweeps. The GIL
/// is released while it runs.
#[pyfunction]
#[pyo3(signature = (data, bundle = "local".to_string(), samples = 40, fast = false, budget_s = None, models = None, networks = None, sweep = None))]
#[allow(clippy::too_many_arguments)]
pub fn quickstart<'py>(
    py: Python<'py>,
    data: PathBuf,
    bundle: String,
    samples: usize,
    fast: bool,
    budget_s: Option<f64>,
    models: Option<Vec<String>>,
    networks: Option<Vec<String>>,
    sweep: Option<PathBuf>,
) -> PyResult<Bound<'py, PyAny>> {
    // The CLI's defaults wherever an argument is `None`.
    let mut plan = QuickstartPlan::new(samples, data, bundle).map_err(crate::input_err)?;
    plan.fast = fast;
    if let Some(budget_s) = budget_s {
        plan.budget_s = budget_s;
    }
    if let Some(models) = models {
        plan.models = models;
    }
    if let Some(networks) = networks {
        plan.networks = networks;
    }
    if let Some(path) = sweep {
        plan.sweeps = vec![Sweep::from_file(&path).map_err(crate::input_err)?];
    }
    let report = py
        .detach(|| {
            perfcast_workflow::quickstart::run(&plan, Arc::new(Silent), &AtomicBool::new(false))
        })
        .map_err(|e| crate::Error::new_err(e.to_string()))?;
    crate::serialize(py, &report)
}
