//! The table of model families: each one's name, parameters (defaults, parsed and validated
//! through their serde form), fit, saved form and cross-device form, in one row.
//!
//! Everything that picks a family by name goes through it: [`ModelParams::by_name`] (the
//! `--models` of `perfcast train` and `perfcast eval devices`), `--set model.field=value`
//! ([`ModelParams::with_sets`]), the `<family>-xdev` cross-device forms
//! ([`crate::device_features::CrossDeviceParams::wrap`]) and the list of known names in
//! errors. Adding a family is its own file (parameters implementing [`FamilyParams`], a
//! fitted model implementing [`Regressor`] and perfcast-predict's `SavedForm`) plus one row
//! here and one in `perfcast_predict::registry::FAMILIES` (the light predictor reads saved
//! forms without this crate). A family defined outside perfcast-models (a plug-in, a test)
//! is added with [`register`] and perfcast-predict's `register` instead of the rows.

use std::sync::RwLock;

use serde::{Deserialize, Deserializer};

use crate::device_features::CrossDeviceParams;
use crate::error::{Error, Result};
use crate::knn::KnnParams;
use crate::medn::MednParams;
use crate::params::parse;
pub use crate::params::{CrossDevice, FamilyParams, ModelParams};
use crate::ridge::RidgeParams;
use crate::roofline::RooflineParams;
use crate::stack::RidgeTreesParams;
use crate::trees::TreeParams;

/// Fewest training rows MEDN and the MLP are fitted on. A quickstart's smallest kinds (10
/// configurations, 16 training rows) are below it, its elementwise kinds (67 and more) above.
pub const NETWORK_MIN_ROWS: usize = 40;

/// The rows: every family perfcast fits.
pub static FAMILIES: &[Family] = &[
    Family::of::<RidgeParams>("ridge", || ModelParams::new(RidgeParams::default()))
        .about("ridge regression on log features")
        .saved(&["ridge"]),
    Family::of::<KnnParams>("knn", || ModelParams::new(KnnParams::default()))
        .about("k nearest neighbours")
        .saved(&["knn"]),
    Family::of::<TreeParams>("trees", || ModelParams::new(TreeParams::default()))
        .about("gradient-boosted trees")
        .aliases(&["gbdt"])
        .saved(&["trees"]),
    Family::of::<RidgeTreesParams>("ridge-trees", || {
        ModelParams::new(RidgeTreesParams::default())
    })
    .about("trees on a degree-2 ridge's residuals")
    .saved(&["ridge-trees"]),
    Family::of::<RooflineParams>("roofline", || ModelParams::new(RooflineParams::default()))
        .about("roofline with fitted efficiencies")
        .cross_device(CrossDevice::Itself)
        .saved(&["roofline"]),
    Family::of::<MednParams>("medn", || ModelParams::new(MednParams::default()))
        .about("multi-task encoder-decoder network")
        .min_rows(NETWORK_MIN_ROWS)
        .saved(&["medn"]),
    Family::of::<MednParams>("mlp", || ModelParams::new(MednParams::mlp()))
        .about("single-task MLP of the same size")
        .min_rows(NETWORK_MIN_ROWS)
        .saved(&["mlp"]),
    Family::of::<CrossDeviceParams>(crate::device_features::UTIL, || {
        ModelParams::new(CrossDeviceParams::utilisation(&[]))
    })
    .about("GPU utilisation: spec roofline over a learned utilisation")
    .cross_device(CrossDevice::Itself)
    .saved(&["crossdevice"]),
];

/// Saved forms no family fits: built from other families' fitted models. `blend` (the
/// geometric mean of two candidates) is made by auto-selection (perfcast-select) from the
/// candidates' out-of-fold predictions.
pub const COMPOSED: &[&str] = &["blend"];

/// One row of the table.
#[derive(Clone, Copy)]
pub struct Family {
    /// The name `--models` takes.
    pub name: &'static str,
    /// Other names for it (`gbdt` for `trees`).
    pub aliases: &'static [&'static str],
    /// What it is, in a few words (for `--help`).
    pub about: &'static str,
    /// Its default parameters.
    pub defaults: fn() -> ModelParams,
    /// How it predicts other devices.
    pub cross_device: CrossDevice,
    /// The `model` tags of its saved forms (rows of `perfcast_predict::registry::FAMILIES`).
    pub saved: &'static [&'static str],
    /// Fewest training rows it is worth fitting on: the train pipeline skips it, with a note,
    /// for a module kind with fewer (a network of thousands of weights on a few dozen rows
    /// cannot win and costs the most time); 0 for any.
    pub min_rows: usize,
    parse: fn(serde_json::Value) -> serde_json::Result<ModelParams>,
}

impl Family {
    /// A family named `name` whose parameters are a `P`, defaults from `defaults`; wrapped
    /// across devices, no aliases, saved under its name.
    pub const fn of<P: FamilyParams>(name: &'static str, defaults: fn() -> ModelParams) -> Family {
        Family {
            name,
            aliases: &[],
            about: "",
            defaults,
            cross_device: CrossDevice::Wrap,
            saved: &[],
            min_rows: 0,
            parse: parse::<P>,
        }
    }

    /// With other names.
    pub const fn aliases(mut self, aliases: &'static [&'static str]) -> Family {
        self.aliases = aliases;
        self
    }

    /// With a description for `--help`.
    pub const fn about(mut self, about: &'static str) -> Family {
        self.about = about;
        self
    }

    /// With a cross-device form other than [`CrossDevice::Wrap`].
    pub const fn cross_device(mut self, cross_device: CrossDevice) -> Family {
        self.cross_device = cross_device;
        self
    }

    /// With the tags of its saved forms.
    pub const fn saved(mut self, tags: &'static [&'static str]) -> Family {
        self.saved = tags;
        self
    }

    /// With a fewest number of training rows ([`Family::min_rows`]).
    pub const fn min_rows(mut self, rows: usize) -> Family {
        self.min_rows = rows;
        self
    }

    /// Whether `name` names this family.
    pub fn is(&self, name: &str) -> bool {
        self.name == name || self.aliases.contains(&name)
    }
}

impl std::fmt::Debug for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Family")
            .field("name", &self.name)
            .field("aliases", &self.aliases)
            .field("cross_device", &self.cross_device)
            .field("saved", &self.saved)
            .finish()
    }
}

/// Families registered at run time ([`register`]).
static REGISTERED: RwLock<Vec<Family>> = RwLock::new(Vec::new());

/// Adds a family defined outside this crate (a plug-in, a test), after the built-in ones:
/// `by_name`, `--set` and the cross-device forms then know it. Its saved forms are registered
/// with `perfcast_predict::registry::register`. Registering a family of the same name and
/// name again is a no-op; a name another family takes is refused, naming it.
pub fn register(family: Family) -> Result<()> {
    let mut registered = REGISTERED.write().unwrap_or_else(|e| e.into_inner());
    for name in std::iter::once(family.name).chain(family.aliases.iter().copied()) {
        let taken = FAMILIES
            .iter()
            .chain(registered.iter())
            .find(|f| f.is(name));
        match taken {
            Some(f) if f.name == family.name && registered.iter().any(|r| r.name == f.name) => {
                return Ok(());
            }
            Some(_) => {
                return Err(Error::InvalidParams {
                    model: "registry",
                    message: format!("family name `{name}` is taken"),
                });
            }
            None => {}
        }
    }
    registered.push(family);
    Ok(())
}

/// Every family, built-in ones first.
pub fn families() -> Vec<Family> {
    let registered = REGISTERED.read().unwrap_or_else(|e| e.into_inner());
    FAMILIES.iter().chain(registered.iter()).copied().collect()
}

/// The family `name` names (or one of its aliases), if any.
pub fn family(name: &str) -> Option<Family> {
    families().into_iter().find(|f| f.is(name.trim()))
}

/// The fewest training rows the family of `name` (a family, an alias, or its `-xdev` form)
/// is fitted on; 0 for names the table does not hold.
pub fn min_rows(name: &str) -> usize {
    let name = name.trim();
    family(name.strip_suffix("-xdev").unwrap_or(name)).map_or(0, |f| f.min_rows)
}

/// The names `--models` takes, for help and errors: every family, then `<family>-xdev`.
pub fn known_names() -> String {
    let mut names: Vec<&str> = families().iter().map(|f| f.name).collect();
    names.push("<family>-xdev");
    names.join(", ")
}

/// One line per family for `--help`: `name: about` (`name (alias)` where it has aliases).
pub fn help() -> String {
    let mut out = String::from("Model families, comma-separated:");
    for f in families() {
        out.push_str(&format!("\n  {}", f.name));
        for a in f.aliases {
            out.push_str(&format!(" ({a})"));
        }
        if !f.about.is_empty() {
            out.push_str(&format!(": {}", f.about));
        }
    }
    out.push_str(
        "\n  <family>-xdev: a family fitted across devices (device block, roofline-normalised \
         target); data of several devices wraps every family",
    );
    out
}

/// [`help`] for `eval devices`, whose families are all fitted across devices, plus its
/// `<family>-raw` form.
pub fn help_cross_device() -> String {
    help() + "\n  <family>-raw: a family on the plain rows, for comparison"
}

/// Whether `params` can be wrapped for cross-device fitting: its family is
/// [`CrossDevice::Wrap`] and it is not wrapped already.
pub fn wraps(params: &ModelParams) -> bool {
    params.wraps()
}

impl ModelParams {
    /// Defaults of a family by name (`trees`, an alias such as `gbdt`, or `<family>-xdev`).
    pub fn by_name(name: &str) -> Result<ModelParams> {
        let name = name.trim();
        if let Some(f) = family(name) {
            return Ok((f.defaults)());
        }
        if let Some(inner) = name.strip_suffix("-xdev") {
            return Ok(CrossDeviceParams::wrap(ModelParams::by_name(inner)?));
        }
        Err(Error::UnknownModel {
            name: name.to_string(),
            known: known_names(),
        })
    }

    /// These parameters with the `model.field=value` settings addressed to this family applied
    /// (`--set trees.n_trees=600`; settings for other families are skipped, after checking
    /// that they name a family), through the serde form, so unknown fields and bad values are
    /// refused by the same checks as a config file; a value is a JSON literal (number, bool)
    /// when it parses as one, a string otherwise.
    pub fn with_sets(&self, sets: &[String]) -> Result<ModelParams> {
        let bad = |message: String| Error::InvalidParams {
            model: "--set",
            message,
        };
        let name = self.name();
        let mut value = self.to_value().map_err(|e| bad(e.to_string()))?;
        for set in sets {
            let shape = || bad(format!("`--set {set}` must look like `model.field=value`"));
            let (key, raw) = set.split_once('=').ok_or_else(shape)?;
            let (model, field) = key.split_once('.').ok_or_else(shape)?;
            ModelParams::by_name(model)?;
            if model != name {
                continue;
            }
            value[field] = serde_json::from_str(raw)
                .unwrap_or_else(|_| serde_json::Value::String(raw.to_string()));
        }
        let updated = self
            .reparse(value)
            .map_err(|e| bad(format!("invalid `--set` for `{name}`: {e}")))?;
        updated.validate()?;
        Ok(updated)
    }
}

impl<'de> Deserialize<'de> for ModelParams {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<ModelParams, D::Error> {
        use serde::de::Error as _;
        let mut value = serde_json::Value::deserialize(d)?;
        let name = match value.as_object_mut().and_then(|o| o.remove("model")) {
            Some(serde_json::Value::String(name)) => name,
            _ => return Err(D::Error::missing_field("model")),
        };
        let parse = match family(&name) {
            Some(f) => f.parse,
            None if name.ends_with("-xdev") => parse::<CrossDeviceParams>,
            None => {
                return Err(D::Error::custom(Error::UnknownModel {
                    name,
                    known: known_names(),
                }));
            }
        };
        parse(value).map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rows_cross_device_form_is_what_its_parameters_say() {
        for f in families() {
            assert_eq!(
                (f.defaults)().wraps(),
                f.cross_device == CrossDevice::Wrap,
                "{}",
                f.name
            );
        }
        let trees = ModelParams::by_name("trees").unwrap();
        assert!(wraps(&trees));
        assert!(!wraps(&CrossDeviceParams::wrap(trees)));
    }

    #[test]
    fn networks_need_rows_that_other_families_do_not() {
        for name in ["medn", "mlp", "medn-xdev", " mlp "] {
            assert_eq!(min_rows(name), NETWORK_MIN_ROWS, "{name}");
        }
        for name in [
            "ridge",
            "trees",
            "gbdt",
            "roofline",
            "util",
            "trees-xdev",
            "nope",
        ] {
            assert_eq!(min_rows(name), 0, "{name}");
        }
    }
}
