//! Models saved on an older version of their kind's feature schema, answering current rows.
//!
//! A schema version only appends columns ([`FeatureSchema::versions`]), so a model fitted on
//! an older one reads the first columns of the row the predictor builds today: bundles written
//! before a feature was added keep loading and answer exactly as they did.

use perfcast_core::{ModuleKind, Phase};

use crate::error::Result;
use crate::features::{FeatureSchema, check_width};
use crate::regressor::{Regressor, SavedModel, check_rows, check_tasks};

/// `model` as a model of `kind`'s current schema: itself when it was fitted on it, wrapped
/// in [`OlderSchema`] when it was fitted on an older version, else the error to report.
pub fn on_current_schema(
    model: Box<dyn Regressor>,
    kind: ModuleKind,
) -> std::result::Result<Box<dyn Regressor>, String> {
    let current = FeatureSchema::for_kind(kind);
    let schema = model.schema();
    if schema.kind == kind && *schema == current {
        return Ok(model);
    }
    if schema.kind == kind && schema.is_older_version() {
        return Ok(Box::new(OlderSchema {
            width: schema.len(),
            current,
            inner: model,
        }));
    }
    Err(format!(
        "trained on another feature schema (hash {:016x}, this build {:016x})",
        schema.hash(),
        current.hash()
    ))
}

/// A model of an older schema version, given the first `width` columns of each current row.
#[derive(Debug)]
pub struct OlderSchema {
    width: usize,
    current: FeatureSchema,
    inner: Box<dyn Regressor>,
}

impl OlderSchema {
    /// The model as it was saved.
    pub fn inner(&self) -> &dyn Regressor {
        self.inner.as_ref()
    }

    /// The first `width` columns of each row of the current schema, one after another.
    fn narrowed(&self, rows: &[f64]) -> Vec<f64> {
        rows.chunks_exact(self.current.len())
            .flat_map(|r| &r[..self.width])
            .copied()
            .collect()
    }
}

impl Regressor for OlderSchema {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn schema(&self) -> &FeatureSchema {
        &self.current
    }

    fn predict_row(&self, x: &[f64]) -> Result<f64> {
        check_width(&self.current, x.len())?;
        self.inner.predict_row(&x[..self.width])
    }

    fn predict_rows(&self, rows: &[f64], out: &mut [f64]) -> Result<()> {
        check_rows(self.current.len(), rows, out)?;
        self.inner.predict_rows(&self.narrowed(rows), out)
    }

    fn extrapolates(&self) -> bool {
        self.inner.extrapolates()
    }

    fn phase_devices(&self) -> &[perfcast_core::DeviceSpec] {
        self.inner.phase_devices()
    }

    fn multi_task(&self) -> bool {
        self.inner.multi_task()
    }

    fn predict_tasks(&self, rows: &[f64], phases: &[Phase], out: &mut [f64]) -> Result<()> {
        check_tasks(&self.current, rows.len(), phases.len(), out.len())?;
        self.inner.predict_tasks(&self.narrowed(rows), phases, out)
    }

    fn size_bytes(&self) -> usize {
        self.inner.size_bytes()
    }

    fn to_saved(&self) -> SavedModel {
        self.inner.to_saved()
    }
}

#[cfg(test)]
mod tests {
    use perfcast_core::{Context, Linear, ModuleSpec, Phase};

    use super::*;
    use crate::Bundle;
    use crate::features::row;

    #[test]
    fn a_bundle_saved_before_the_wide_alignments_answers_from_the_first_columns() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/bundles/cpu-trees");
        let bundle = Bundle::load(&dir).unwrap();
        let device = bundle.manifest.device.clone();
        let model = bundle.model(ModuleKind::Linear).unwrap();
        let current = FeatureSchema::for_kind(ModuleKind::Linear);
        assert_eq!(model.schema(), &current);
        let older = (model as &dyn std::any::Any)
            .downcast_ref::<OlderSchema>()
            .expect("the fixture predates the wide alignments");
        let width = older.inner().schema().len();
        assert_eq!(width + crate::features::LINEAR_EXTRA.len(), current.len());

        let mut rows = Vec::new();
        let mut phases = Vec::new();
        for (i, (n, k)) in [(1024, 4096), (1000, 3000), (2048, 5632)]
            .iter()
            .enumerate()
        {
            let spec = ModuleSpec::Linear(Linear {
                tokens: 7 + i,
                in_features: *k,
                out_features: *n,
                bias: i % 2 == 0,
            });
            let context = Context {
                batch: 2,
                phase: Phase::Training,
                threads: 1,
                utilisation: 0.0,
            };
            let x = row(&spec, &context, &device);
            assert_eq!(x.len(), current.len());
            assert_eq!(
                model.predict_row(&x).unwrap(),
                older.inner().predict_row(&x[..width]).unwrap()
            );
            rows.extend_from_slice(&x);
            phases.push(if i == 1 {
                Phase::Inference
            } else {
                Phase::Training
            });
        }
        let mut out = vec![0.0; 3];
        model.predict_rows(&rows, &mut out).unwrap();
        let each: Vec<f64> = rows
            .chunks_exact(current.len())
            .map(|x| model.predict_row(x).unwrap())
            .collect();
        assert_eq!(out, each);
        let mut tasks = vec![0.0; 3];
        model.predict_tasks(&rows, &phases, &mut tasks).unwrap();
        assert_eq!(tasks[0], out[0]);
        assert!(tasks[1] < out[1], "inference below its training step");

        // Another kind's model is not a linear model of any version.
        let relu = bundle.model(ModuleKind::Relu).unwrap().to_saved();
        let err = on_current_schema(relu.into_regressor(), ModuleKind::Linear).unwrap_err();
        assert!(err.contains("another feature schema"), "{err}");
    }

    #[test]
    fn linear_extras_tell_1024_from_128_mark_unpacked_weights_and_are_zero_on_gpus() {
        use crate::features::wide_alignment;
        assert_eq!(wide_alignment(0.0), 0.0);
        assert_eq!(wide_alignment(3.0), 1.0);
        assert_eq!(wide_alignment(1024.0), 1024.0);
        assert_eq!(wide_alignment(5632.0), 512.0);
        assert_eq!(wide_alignment(3.0 * 8192.0), 4096.0);
        let spec = ModuleSpec::Linear(Linear {
            tokens: 4,
            in_features: 2048,
            out_features: 1024,
            bias: true,
        });
        let context = Context {
            batch: 1,
            phase: Phase::Inference,
            threads: 1,
            utilisation: 0.0,
        };
        let schema = FeatureSchema::for_kind(ModuleKind::Linear);
        let at = |x: &[f64], name: &str| x[schema.index(name).unwrap()];
        let cpu = perfcast_core::testing::cpu_device();
        let x = row(&spec, &context, &cpu);
        assert_eq!(at(&x, "gemm_n_wide_align"), 1024.0);
        assert_eq!(at(&x, "gemm_k_wide_align"), 2048.0);
        assert_eq!(at(&x, "gemm_unpacked_weights"), 1.0, "4 rows");
        let x4 = row(
            &spec,
            &Context {
                batch: 4,
                ..context
            },
            &cpu,
        );
        assert_eq!(at(&x4, "gemm_unpacked_weights"), 1.0, "16 rows");
        let x16 = row(
            &spec,
            &Context {
                batch: 16,
                ..context
            },
            &cpu,
        );
        assert_eq!(at(&x16, "gemm_unpacked_weights"), 0.0, "64 rows are packed");
        let gpu = perfcast_core::DeviceSpec {
            kind: perfcast_core::DeviceKind::Gpu,
            ..cpu
        };
        let x = row(&spec, &context, &gpu);
        assert_eq!(at(&x, "gemm_n_wide_align"), 0.0);
        assert_eq!(at(&x, "gemm_unpacked_weights"), 0.0);
        // Rewritten into the other phase, a row keeps its own wide alignments.
        let t = crate::features::row_in_phase(&schema, &x, Phase::Training).unwrap();
        assert_eq!(at(&t, "gemm_k_wide_align"), 0.0);
    }
}
