//! The one interface every fitted model implements, and the saved form of every fitted model.
//!
//! Fitted models are used through `Box<dyn Regressor>`, so the predictor, evaluation and
//! auto-selection treat them all alike; fitting them (hyper-parameters and the `Fit` trait) is
//! perfcast-models' work. Every model predicts milliseconds and works in log space internally,
//! so predictions are positive.

use std::any::Any;

use perfcast_core::Phase;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{Error, Result};
pub use crate::features::check_width;
use crate::features::{FeatureSchema, row_in_phase};
use crate::matrix::Matrix;

/// A fitted latency model.
///
/// `Any` lets the predictor recognise a family it batches specially (a MEDN shared by several
/// kinds runs once for all of their rows) behind `&dyn Regressor`.
pub trait Regressor: std::any::Any + Send + Sync + std::fmt::Debug {
    /// Model family name: `ridge`, `knn`, `trees`, `roofline`, ...
    fn name(&self) -> &'static str;

    /// The schema the model was fitted on (row width and meaning).
    fn schema(&self) -> &FeatureSchema;

    /// Predicted latency (ms) of one raw feature row in schema order.
    ///
    /// Must not allocate on the hot path: single-row prediction is timed in microseconds.
    fn predict_row(&self, x: &[f64]) -> Result<f64>;

    /// Predicted latencies (ms) of every row.
    fn predict(&self, x: &Matrix) -> Result<Vec<f64>> {
        check_width(self.schema(), x.cols())?;
        x.iter_rows().map(|r| self.predict_row(r)).collect()
    }

    /// Predicted latencies (ms) of rows held one after another in `rows` (schema order) into
    /// `out`, one per row: the batch entry of the prediction path. The default predicts row
    /// by row; a model whose single row is latency-bound (trees walk one node after another)
    /// interleaves rows. Results equal [`Regressor::predict_row`]'s.
    fn predict_rows(&self, rows: &[f64], out: &mut [f64]) -> Result<()> {
        let width = self.schema().len();
        check_rows(width, rows, out)?;
        for (x, o) in rows.chunks_exact(width).zip(out.iter_mut()) {
            *o = self.predict_row(x)?;
        }
        Ok(())
    }

    /// Whether the model's own answer holds outside its trained ranges, so the predictor
    /// asks it directly instead of scaling the nearest trained configuration by the work
    /// ratio: a model of the efficiency below the spec roofline (the GPU utilisation model)
    /// counts the extra work through the roofline itself, and scaling its whole answer would
    /// scale its launch floor too. Default false.
    fn extrapolates(&self) -> bool {
        false
    }

    /// Devices whose training-step rows a cross-device model learned from. On a device far
    /// beyond them the predictor answers a training step as the forward pass on that device
    /// times the training/forward ratio the model gives on these: a backward kernel's cost
    /// relative to its forward follows the algorithm (nearly the same on DeepBench's GPUs and
    /// the H100), where its absolute efficiency on a GPU newer than every training-step row
    /// does not. Default none (answer as given).
    fn phase_devices(&self) -> &[perfcast_core::DeviceSpec] {
        &[]
    }

    /// Whether the model reads every query in its training-phase form and picks its output by
    /// phase, so [`Regressor::predict_tasks`] is its fast path (multi-task MEDN). Default false.
    fn multi_task(&self) -> bool {
        false
    }

    /// Predicted latencies (ms) of training-phase rows (`rows` holds them one after another,
    /// each in schema order), row `i` asked for in `phases[i]`, into `out[i]`.
    ///
    /// Every row carries everything its other phase's row is computed from, so any model
    /// answers: the default rewrites a row into its `phases[i]` form and predicts it.
    /// Multi-task models answer from the training-phase form directly, many rows per pass.
    fn predict_tasks(&self, rows: &[f64], phases: &[Phase], out: &mut [f64]) -> Result<()> {
        let width = check_tasks(self.schema(), rows.len(), phases.len(), out.len())?;
        for ((x, phase), o) in rows.chunks_exact(width).zip(phases).zip(out.iter_mut()) {
            *o = match phase {
                Phase::Training => self.predict_row(x)?,
                Phase::Inference => self.predict_row(&row_in_phase(self.schema(), x, *phase)?)?,
            };
        }
        Ok(())
    }

    /// Memory the fitted parameters take, in bytes (what a bundle would store).
    fn size_bytes(&self) -> usize;

    /// The saved form of the model.
    fn to_saved(&self) -> SavedModel;
}

/// The row width of [`Regressor::predict_tasks`] arguments, or an error unless `rows` values
/// hold `phases` whole rows of `schema` and `out` has room for them.
pub fn check_tasks(
    schema: &FeatureSchema,
    rows: usize,
    phases: usize,
    out: usize,
) -> Result<usize> {
    let width = schema.len();
    if rows != width * phases || out != phases {
        return Err(Error::InvalidData(format!(
            "{rows} values for {phases} rows of {width} features into {out} outputs"
        )));
    }
    Ok(width)
}

/// Checks that `rows` holds exactly `out.len()` rows of `width` values (the batch entry's
/// contract, shared by every model's [`Regressor::predict_rows`]).
pub fn check_rows(width: usize, rows: &[f64], out: &[f64]) -> Result<()> {
    if rows.len() != width * out.len() {
        return Err(Error::InvalidData(format!(
            "{} values for {} rows of {width} features",
            rows.len(),
            out.len()
        )));
    }
    Ok(())
}

/// Per-feature standardisation of `ln(1 + x)`, fitted on the training rows.
///
/// Constant columns get scale 1 so they contribute nothing instead of dividing by zero.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogStandardiser {
    /// Mean of each transformed column.
    pub mean: Vec<f64>,
    /// Reciprocal standard deviation of each transformed column.
    pub inv_std: Vec<f64>,
}

impl LogStandardiser {
    /// Transforms one row into `out` (same width), without allocating.
    #[inline]
    pub fn transform_into(&self, row: &[f64], out: &mut [f64]) {
        for (((o, v), m), s) in out.iter_mut().zip(row).zip(&self.mean).zip(&self.inv_std) {
            *o = (crate::features::log1p_pos(*v) - m) * s;
        }
    }

    /// Transforms every row.
    pub fn transform(&self, x: &Matrix) -> Matrix {
        let mut out = Matrix::with_cols(x.cols());
        let mut buf = vec![0.0; x.cols()];
        for r in x.iter_rows() {
            self.transform_into(r, &mut buf);
            out.push_row(&buf);
        }
        out
    }
}

/// A family's saved form: what its model file holds besides the `model` tag.
///
/// The serde form is the file format, read bit for bit (floats round-trip exactly); a type
/// that can be read but not trusted checks itself in [`SavedForm::check`] or while
/// deserialising.
pub trait SavedForm:
    Serialize + DeserializeOwned + Clone + std::fmt::Debug + Send + Sync + 'static
{
    /// Consistency of the parts deserialisation alone cannot check, so a corrupt file is
    /// refused at load instead of failing (or panicking) at prediction time. Default: none.
    fn check_form(&self) -> Result<()> {
        Ok(())
    }

    /// The model behind the interface.
    fn into_regressor(self) -> Box<dyn Regressor>;
}

/// Any family's saved form, under its tag; `serde` gives the file format (JSON: the tag as
/// the `model` field, then the form's fields).
pub struct SavedModel {
    tag: &'static str,
    form: Box<dyn DynForm>,
}

impl SavedModel {
    /// `form` saved under `tag` (one of its family's [`crate::registry::SavedFamily::tags`]).
    pub fn new<T: SavedForm>(tag: &'static str, form: T) -> SavedModel {
        SavedModel {
            tag,
            form: Box::new(form),
        }
    }

    /// The `model` tag of the file.
    pub fn tag(&self) -> &'static str {
        self.tag
    }

    /// The saved form, when it is a `T`.
    pub fn downcast_ref<T: SavedForm>(&self) -> Option<&T> {
        self.form.as_any().downcast_ref()
    }

    /// The saved form, mutably, when it is a `T`.
    pub fn downcast_mut<T: SavedForm>(&mut self) -> Option<&mut T> {
        self.form.as_any_mut().downcast_mut()
    }

    /// Consistency of the parts deserialisation alone cannot check ([`SavedForm::check_form`]).
    pub fn check(&self) -> Result<()> {
        self.form.check_form()
    }

    /// The model behind the interface.
    pub fn into_regressor(self) -> Box<dyn Regressor> {
        self.form.into_regressor()
    }
}

impl Clone for SavedModel {
    fn clone(&self) -> SavedModel {
        SavedModel {
            tag: self.tag,
            form: self.form.clone_box(),
        }
    }
}

impl std::fmt::Debug for SavedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple(self.tag).field(&self.form).finish()
    }
}

/// The object-safe face of a [`SavedForm`].
trait DynForm: std::fmt::Debug + Send + Sync {
    fn clone_box(&self) -> Box<dyn DynForm>;
    fn check_form(&self) -> Result<()>;
    fn into_regressor(self: Box<Self>) -> Box<dyn Regressor>;
    fn to_json(&self, tag: &str) -> serde_json::Result<String>;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

/// The file form: the tag first, then the form's own fields, as serde's internally tagged
/// enums write them (the `SavedModel` enum before the table did).
#[derive(Serialize)]
struct Tagged<'a, T> {
    model: &'a str,
    #[serde(flatten)]
    form: &'a T,
}

impl<T: SavedForm> DynForm for T {
    fn clone_box(&self) -> Box<dyn DynForm> {
        Box::new(self.clone())
    }
    fn check_form(&self) -> Result<()> {
        SavedForm::check_form(self)
    }
    fn into_regressor(self: Box<Self>) -> Box<dyn Regressor> {
        SavedForm::into_regressor(*self)
    }
    fn to_json(&self, tag: &str) -> serde_json::Result<String> {
        serde_json::to_string(&Tagged {
            model: tag,
            form: self,
        })
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

impl Serialize for SavedModel {
    /// The tag, then the form's fields in its own order with its own numbers: the form is
    /// written to JSON by its own `Serialize` and replayed into `s` ([`Replay`]).
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::Error as _;
        let json = self.form.to_json(self.tag).map_err(S::Error::custom)?;
        serde_json::from_str::<Replay>(&json)
            .map_err(S::Error::custom)?
            .serialize(s)
    }
}

/// JSON read back in its own order, to be written again unchanged: a saved form behind
/// `dyn` cannot take a generic serializer, and `serde_json::Value` would sort the keys.
/// Numbers keep their kind (floats reparse exactly, `float_roundtrip`).
enum Replay {
    Null,
    Bool(bool),
    U64(u64),
    I64(i64),
    F64(f64),
    Str(String),
    Seq(Vec<Replay>),
    Map(Vec<(String, Replay)>),
}

impl<'de> Deserialize<'de> for Replay {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Replay, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Replay;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_unit<E>(self) -> std::result::Result<Replay, E> {
                Ok(Replay::Null)
            }
            fn visit_bool<E>(self, v: bool) -> std::result::Result<Replay, E> {
                Ok(Replay::Bool(v))
            }
            fn visit_u64<E>(self, v: u64) -> std::result::Result<Replay, E> {
                Ok(Replay::U64(v))
            }
            fn visit_i64<E>(self, v: i64) -> std::result::Result<Replay, E> {
                Ok(Replay::I64(v))
            }
            fn visit_f64<E>(self, v: f64) -> std::result::Result<Replay, E> {
                Ok(Replay::F64(v))
            }
            fn visit_str<E>(self, v: &str) -> std::result::Result<Replay, E> {
                Ok(Replay::Str(v.to_string()))
            }
            fn visit_string<E>(self, v: String) -> std::result::Result<Replay, E> {
                Ok(Replay::Str(v))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<Replay, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = seq.next_element()? {
                    out.push(v);
                }
                Ok(Replay::Seq(out))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Replay, A::Error> {
                let mut out = Vec::new();
                while let Some(kv) = map.next_entry()? {
                    out.push(kv);
                }
                Ok(Replay::Map(out))
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl Serialize for Replay {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self {
            Replay::Null => s.serialize_unit(),
            Replay::Bool(v) => s.serialize_bool(*v),
            Replay::U64(v) => s.serialize_u64(*v),
            Replay::I64(v) => s.serialize_i64(*v),
            Replay::F64(v) => s.serialize_f64(*v),
            Replay::Str(v) => s.serialize_str(v),
            Replay::Seq(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for v in items {
                    seq.serialize_element(v)?;
                }
                seq.end()
            }
            Replay::Map(entries) => {
                let mut map = s.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}
