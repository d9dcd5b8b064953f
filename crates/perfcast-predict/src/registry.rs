//! The table of saved forms: every model family's file format and how a file becomes a model.
//!
//! A model file is one JSON object whose `model` field names its family (the tag: `ridge`,
//! `ridge-trees`, `crossdevice`, ...) and whose other fields are the family's saved form, a
//! type implementing [`SavedForm`] ([`crate::regressor`], beside the interface it loads into).
//! [`SavedModel`] holds any of them; reading one looks its
//! tag up in [`FAMILIES`] (and the families [`register`]ed at run time), so adding a family
//! here is one line of the table plus the family's own file, and nothing matches on families.
//!
//! perfcast-models keeps the other half, the table of families it fits
//! (`perfcast_models::registry`), whose entries name the tags here.

use std::sync::RwLock;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

use crate::error::Result;
pub use crate::regressor::{SavedForm, SavedModel};

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
