//! One dataset row: a module configuration in a context, and what measuring it gave.

use perfcast_core::{Context, ModuleSpec};
use serde::{Deserialize, Serialize};

/// Summary statistics of one configuration's repeated timings, in milliseconds.
///
/// perfcast's own measurements fill every field. Imported measurements carry what their authors
/// published (often one latency, sometimes a minimum or a repeat count): the rest is `None`,
/// never invented.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// Median of the repetitions (the target predictors learn; for imports, the published
    /// central latency).
    pub median_ms: f64,
    /// Fastest repetition.
    pub min_ms: Option<f64>,
    /// Median absolute deviation from the median.
    pub mad_ms: Option<f64>,
    /// 10th percentile.
    pub p10_ms: Option<f64>,
    /// 90th percentile.
    pub p90_ms: Option<f64>,
    /// Timed repetitions behind the statistics.
    pub repetitions: Option<u32>,
}

impl Timing {
    /// A timing of which only the central latency is known.
    pub fn median_only(median_ms: f64) -> Timing {
        Timing {
            median_ms,
            min_ms: None,
            mad_ms: None,
            p10_ms: None,
            p90_ms: None,
            repetitions: None,
        }
    }
}

/// How measuring a configuration ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum Outcome {
    /// Measured.
    Ok(Timing),
    /// Could not be measured (out of memory, backend error); the reason is kept.
    Failed {
        /// Why.
        reason: String,
    },
}

/// One row of a dataset.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The module measured.
    pub spec: ModuleSpec,
    /// Batch, phase, threads, utilisation.
    pub context: Context,
    /// Backend name, e.g. `ndarray`, `flex`, `wgpu`, or an importer's source.
    pub backend: String,
    /// Result.
    pub outcome: Outcome,
    /// perfcast version that measured it.
    pub perfcast_version: String,
    /// Unix time of the measurement, seconds.
    pub timestamp: i64,
}

impl Record {
    /// The identity of a measurement: configuration plus context plus backend. A resumed run
    /// skips rows whose key is already stored.
    pub fn key(&self) -> String {
        measurement_key(&self.spec, &self.context, &self.backend)
    }

    /// The timing, if measured.
    pub fn timing(&self) -> Option<&Timing> {
        match &self.outcome {
            Outcome::Ok(t) => Some(t),
            Outcome::Failed { .. } => None,
        }
    }
}

/// See [`Record::key`].
pub fn measurement_key(spec: &ModuleSpec, context: &Context, backend: &str) -> String {
    let mut config: Vec<String> = spec.config().iter().map(i64::to_string).collect();
    // A non-default layout (a transposed matmul operand) is another measurement; the keys of
    // default layouts stay what they were before layouts existed.
    if !spec.default_layout() {
        let names = spec.kind().layout_columns();
        for (name, v) in names.iter().zip(spec.layout()) {
            config.push(format!("{name}={v}"));
        }
    }
    format!(
        "{}|{}|b{}|{}|t{}|u{:.3}|{}",
        spec.kind(),
        config.join(","),
        context.batch,
        context.phase,
        context.threads,
        context.utilisation,
        backend
    )
}
