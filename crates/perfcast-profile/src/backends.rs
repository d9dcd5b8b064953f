//! The same conv, linear and matmul configurations timed on each CPU backend (`perfcast
//! backends compare`).

use perfcast_core::progress::Observer;
use perfcast_core::{Context, ModuleSpec, Phase};
use perfcast_data::Outcome;
use serde::Serialize;

use crate::error::Result;
use crate::run::{Job, measure_job};
use crate::sweep::Sample;
use crate::{Backend, Sweep};

/// The progress stage of [`compare_backends`].
pub const STAGE: &str = "compare";

/// The ops compared: (batch, spec JSON), small and large layers of each kind plus ResNet-like ones.
pub const OPS: &[(usize, &str)] = &[
    (
        1,
        r#"{"kind":"conv2d","in_channels":3,"out_channels":64,"input_hw":56,"kernel":3,"padding":1}"#,
    ),
    (
        1,
        r#"{"kind":"conv2d","in_channels":3,"out_channels":64,"input_hw":224,"kernel":7,"stride":2,"padding":3}"#,
    ),
    (
        8,
        r#"{"kind":"conv2d","in_channels":64,"out_channels":64,"input_hw":56,"kernel":3,"padding":1}"#,
    ),
    (
        8,
        r#"{"kind":"conv2d","in_channels":128,"out_channels":128,"input_hw":28,"kernel":3,"padding":1,"groups":128}"#,
    ),
    (
        1,
        r#"{"kind":"linear","in_features":512,"out_features":512}"#,
    ),
    (
        1024,
        r#"{"kind":"linear","in_features":1024,"out_features":1024}"#,
    ),
    (1, r#"{"kind":"matmul","m":1024,"k":1024,"n":1024}"#),
    (8, r#"{"kind":"matmul","heads":8,"m":128,"k":64,"n":128}"#),
];

/// One configuration's median per call on each backend (`None`: it failed there).
#[derive(Debug, Clone, Serialize)]
pub struct BackendRow {
    /// The module, described.
    pub module: String,
    /// Batch size.
    pub batch: usize,
    /// Phase name.
    pub phase: String,
    /// Per backend: name and median ms.
    pub ms: Vec<(String, Option<f64>)>,
}

/// Times every op of [`OPS`] in each of `phases` on every CPU backend with `threads` compute
/// threads, with the default sweep's timing.
pub fn compare_backends(
    threads: usize,
    phases: &[Phase],
    observer: &dyn Observer,
) -> Result<Vec<BackendRow>> {
    let backends = Backend::CPU;
    let sweep = Sweep::default();
    let total = OPS.len() * phases.len() * backends.len();
    observer.begin(STAGE, total as u64);
    let mut rows = Vec::new();
    for (batch, json) in OPS {
        let spec = ModuleSpec::from_json(json)?;
        for &phase in phases {
            let mut ms = Vec::new();
            for backend in backends {
                observer.message(
                    STAGE,
                    &format!("{} {} on {backend}", spec.describe(), phase),
                );
                let ctx = Context {
                    batch: *batch,
                    phase,
                    threads,
                    utilisation: 0.0,
                };
                let job = Job {
                    sample: Sample {
                        spec: spec.clone(),
                        batch: ctx.batch,
                        threads: ctx.threads,
                        utilisation: 0.0,
                    },
                    phase,
                };
                let t = match measure_job(&job, backend, &sweep, f64::INFINITY) {
                    Outcome::Ok(t) => Some(t.median_ms),
                    Outcome::Failed { .. } => None,
                };
                ms.push((backend.name().to_string(), t));
                observer.advance(STAGE, 1);
            }
            rows.push(BackendRow {
                module: spec.describe(),
                batch: *batch,
                phase: phase.name().into(),
                ms,
            });
        }
    }
    observer.end(STAGE);
    Ok(rows)
}
