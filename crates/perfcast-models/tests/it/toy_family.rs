//! What adding a model family takes: this file is a whole family, a power law in
//! one feature column, added from outside perfcast-models through the registries' extension
//! point; the built-in families take one row in each table instead of `register`. It is then
//! named, configured with `--set`, fitted, cross-validated, wrapped across devices, saved and
//! loaded by the same code as every other family, and passes the same conformance checks.

use perfcast_models::eval::{Split, cross_validate};
use perfcast_models::features::{FeatureSchema, TrainSet};
use perfcast_models::registry::{self, Family};
use perfcast_models::regressor::{Fit, check_train_set, check_width};
use perfcast_models::{Error, FamilyParams, ModelParams, Regressor, SavedModel};
use perfcast_predict::registry::{SavedFamily, SavedForm};
use serde::{Deserialize, Serialize};

/// Hyper-parameters: which column the latency is a power of.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct PowerParams {
    /// Feature column; default `work_flops`.
    column: String,
}

impl Default for PowerParams {
    fn default() -> Self {
        PowerParams {
            column: "work_flops".into(),
        }
    }
}

/// `ms = exp(a) * (1 + x)^b` of the column.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct FittedPower {
    schema: FeatureSchema,
    column: usize,
    a: f64,
    b: f64,
}

impl Fit for PowerParams {
    type Fitted = FittedPower;

    fn validate(&self) -> perfcast_models::Result<()> {
        if self.column.is_empty() {
            return Err(Error::InvalidParams {
                model: "power",
                message: "column must name a feature, got an empty name".into(),
            });
        }
        Ok(())
    }

    fn fit(&self, data: &TrainSet) -> perfcast_models::Result<FittedPower> {
        self.validate()?;
        check_train_set(data, 2)?;
        let column = data
            .schema
            .index(&self.column)
            .ok_or_else(|| Error::InvalidParams {
                model: "power",
                message: format!(
                    "column `{}` is not in the `{}` rows",
                    self.column, data.schema.kind
                ),
            })?;
        let xs: Vec<f64> = data
            .x
            .iter_rows()
            .map(|r| r[column].max(0.0).ln_1p())
            .collect();
        let ys: Vec<f64> = data.y.iter().map(|y| y.ln()).collect();
        let n = xs.len() as f64;
        let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
        let sxx: f64 = xs.iter().map(|x| (x - mx).powi(2)).sum();
        let sxy: f64 = xs.iter().zip(&ys).map(|(x, y)| (x - mx) * (y - my)).sum();
        let b = if sxx > 0.0 { sxy / sxx } else { 0.0 };
        Ok(FittedPower {
            schema: data.schema.clone(),
            column,
            a: my - b * mx,
            b,
        })
    }
}

impl FamilyParams for PowerParams {
    fn name(&self) -> &'static str {
        "power"
    }
}

impl Regressor for FittedPower {
    fn name(&self) -> &'static str {
        "power"
    }

    fn schema(&self) -> &FeatureSchema {
        &self.schema
    }

    fn predict_row(&self, x: &[f64]) -> perfcast_predict::Result<f64> {
        check_width(&self.schema, x.len())?;
        Ok((self.a + self.b * x[self.column].max(0.0).ln_1p()).exp())
    }

    fn size_bytes(&self) -> usize {
        24
    }

    fn to_saved(&self) -> SavedModel {
        SavedModel::new("power", self.clone())
    }
}

impl SavedForm for FittedPower {
    fn into_regressor(self) -> Box<dyn Regressor> {
        Box::new(self)
    }
}

/// The two registrations: the fitting side's row and the light predictor's saved form.
fn register() {
    registry::register(
        Family::of::<PowerParams>("power", || ModelParams::new(PowerParams::default()))
            .saved(&["power"]),
    )
    .unwrap();
    perfcast_predict::registry::register(SavedFamily::of::<FittedPower>(&["power"])).unwrap();
}

#[test]
fn a_family_added_outside_the_crate_runs_through_the_same_code() {
    register();
    register(); // Registering again changes nothing.
    let (data, devices) = super::conformance::two_devices(120);
    let family = registry::family("power").expect("registered");
    super::conformance::conforms(&family, "power.column=", "column", &data, &devices);

    // Named, configured and cross-validated like the built-in families.
    let params = ModelParams::by_name("power")
        .unwrap()
        .with_sets(&["power.column=work_bytes".into(), "ridge.lambda=0.5".into()])
        .unwrap();
    assert_eq!(
        params.downcast_ref::<PowerParams>().unwrap().column,
        "work_bytes"
    );
    let cv = cross_validate(&params, &data, 4, Split::Group, 1).unwrap();
    assert_eq!(cv.model, "power");
    assert!(cv.pooled.mape.is_finite() && cv.fold_mape.len() == 4);
    let err = ModelParams::by_name("power")
        .unwrap()
        .with_sets(&["power.column=no_such_column".into()])
        .unwrap()
        .fit(&data)
        .unwrap_err();
    assert!(err.to_string().contains("no_such_column"), "{err}");

    // Wrapped across devices by name, saved and loaded under the wrapper's tag.
    let xdev = ModelParams::by_name("power-xdev").unwrap();
    let model = xdev.fit(&data).unwrap();
    assert_eq!(model.name(), "power-xdev");
    let json = serde_json::to_string(&model.to_saved()).unwrap();
    assert!(json.contains(r#""inner":{"model":"power""#), "{json}");
    let loaded = serde_json::from_str::<SavedModel>(&json)
        .unwrap()
        .into_regressor();
    for r in data.x.iter_rows() {
        assert_eq!(
            loaded.predict_row(r).unwrap().to_bits(),
            model.predict_row(r).unwrap().to_bits()
        );
    }
    assert!(registry::known_names().contains("power"));
}
