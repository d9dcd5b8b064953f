//! The table of saved forms: every model family's file format and how a file becomes a model.
//!
//! A model file is one JSON object whose `model` field names its family (the tag: `ridge`,
//! `ridge-trees`, `crossdevice`, ...) and whose other fields are the family's saved form, a
//! type implementing [`SavedForm`]. [`SavedModel`] holds any of them; reading one looks its
//! tag up in [`FAMILIES`] (and the families [`register`]ed at run time), so adding a family
//! here is one line of the table plus the family's own file, and nothing matches on families.
//!
//! perfcast-models keeps the other half, the table of families it fits
//! (`perfcast_models::registry`), whose entries name the tags here.

use std::any::Any;
use std::sync::RwLock;

use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::Result;
use crate::regressor::Regressor;

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

/// One row of the table: the tags a saved form is written under and how it is read.
#[derive(Clone, Copy)]
pub struct SavedFamily {
    /// The `model` tags of its files (`medn` and `mlp` share one form).
    pub tags: &'static [&'static str],
    load: Loader,
}

/// Reads a saved form's fields (the tag removed) into a [`SavedModel`] under the tag.
type Loader = fn(&'static str, serde_json::Value) -> serde_json::Result<SavedModel>;

impl SavedFamily {
    /// The family whose files hold a `T` under `tags`.
    pub const fn of<T: SavedForm>(tags: &'static [&'static str]) -> SavedFamily {
        SavedFamily {
            tags,
            load: load::<T>,
        }
    }
}

impl std::fmt::Debug for SavedFamily {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SavedFamily")
            .field("tags", &self.tags)
            .finish()
    }
}

fn load<T: SavedForm>(
    tag: &'static str,
    fields: serde_json::Value,
) -> serde_json::Result<SavedModel> {
    Ok(SavedModel::new(tag, T::deserialize(fields)?))
}

/// The saved forms this crate reads, by tag.
pub static FAMILIES: &[SavedFamily] = &[
    SavedFamily::of::<crate::ridge::FittedRidge>(&["ridge"]),
    SavedFamily::of::<crate::knn::FittedKnn>(&["knn"]),
    SavedFamily::of::<crate::trees::FittedTrees>(&["trees"]),
    SavedFamily::of::<crate::stack::FittedRidgeTrees>(&["ridge-trees"]),
    SavedFamily::of::<crate::roofline::FittedRoofline>(&["roofline"]),
    SavedFamily::of::<crate::medn::FittedMedn>(&["medn", "mlp"]),
    SavedFamily::of::<crate::device_features::SavedCrossDevice>(&["crossdevice"]),
    SavedFamily::of::<crate::blend::SavedBlend>(&["blend"]),
];

/// Families registered at run time ([`register`]): saved forms defined outside this crate.
static REGISTERED: RwLock<Vec<SavedFamily>> = RwLock::new(Vec::new());

/// Adds a saved form defined outside this crate, so its files load like the built-in ones
/// (an extension point for families fitted elsewhere, and for tests). Registering the same
/// tags again is a no-op; a tag another family already reads is refused, naming it.
pub fn register(family: SavedFamily) -> Result<()> {
    let mut registered = REGISTERED.write().unwrap_or_else(|e| e.into_inner());
    for tag in family.tags {
        if let Some((known, _)) = find_in(FAMILIES, tag).or_else(|| find_in(&registered, tag)) {
            if registered.iter().any(|r| r.tags == family.tags) {
                return Ok(());
            }
            return Err(crate::Error::InvalidData(format!(
                "saved-model tag `{known}` is taken"
            )));
        }
    }
    registered.push(family);
    Ok(())
}

fn find_in(families: &[SavedFamily], tag: &str) -> Option<(&'static str, Loader)> {
    families
        .iter()
        .find_map(|f| f.tags.iter().find(|t| **t == tag).map(|t| (*t, f.load)))
}

/// Every tag a model file may carry, built-in ones first.
pub fn tags() -> Vec<&'static str> {
    let registered = REGISTERED.read().unwrap_or_else(|e| e.into_inner());
    FAMILIES
        .iter()
        .chain(registered.iter())
        .flat_map(|f| f.tags.iter().copied())
        .collect()
}

/// Any family's saved form, under its tag; `serde` gives the file format (JSON: the tag as
/// the `model` field, then the form's fields).
pub struct SavedModel {
    tag: &'static str,
    form: Box<dyn DynForm>,
}

impl SavedModel {
    /// `form` saved under `tag` (one of its family's [`SavedFamily::tags`]).
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

impl<'de> Deserialize<'de> for SavedModel {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<SavedModel, D::Error> {
        let mut value = serde_json::Value::deserialize(d)?;
        let tag = match value.as_object_mut().map(|o| o.remove("model")) {
            Some(Some(serde_json::Value::String(tag))) => tag,
            Some(Some(other)) => {
                return Err(D::Error::custom(format!(
                    "`model` names a family, got {other}"
                )));
            }
            Some(None) => return Err(D::Error::missing_field("model")),
            None => {
                return Err(D::Error::custom(
                    "a saved model is a JSON object with a `model` field",
                ));
            }
        };
        let found = find_in(FAMILIES, &tag).or_else(|| {
            let registered = REGISTERED.read().unwrap_or_else(|e| e.into_inner());
            find_in(&registered, &tag)
        });
        let Some((tag, load)) = found else {
            return Err(D::Error::custom(format!(
                "unknown model `{tag}` (known: {})",
                tags().join(", ")
            )));
        };
        load(tag, value).map_err(D::Error::custom)
    }
}
