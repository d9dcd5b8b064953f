//! What besides the module decides its latency: batch, phase, threads, background load.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Which pass is timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// One forward pass.
    Inference,
    /// One training step of the module: forward and backward (input and weight gradients).
    Training,
}

impl Phase {
    /// The phase's name in files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Inference => "inference",
            Phase::Training => "training",
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Phase {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "inference" | "forward" | "fwd" => Ok(Phase::Inference),
            "training" | "train" | "backward" => Ok(Phase::Training),
            other => Err(Error::InvalidContext(format!(
                "unknown phase `{other}` (expected `inference` or `training`)"
            ))),
        }
    }
}

/// Largest batch a context may hold: 2^24 samples. Batch-wide counts are computed in `f64`
/// (features) or checked integers, so this bounds them without any overflow.
pub const MAX_BATCH: usize = 1 << 24;

/// The context of one measurement or query.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Context {
    /// Samples per call.
    pub batch: usize,
    /// Forward only, or forward and backward.
    pub phase: Phase,
    /// Compute threads the backend may use.
    pub threads: usize,
    /// Share of the device's cores kept busy by background load while measuring, in [0, 1).
    pub utilisation: f64,
}

impl Context {
    /// Checks ranges; errors name the value.
    pub fn validate(&self) -> Result<()> {
        if self.batch == 0 {
            return Err(Error::InvalidContext(
                "`batch` must be at least 1, got 0".into(),
            ));
        }
        if self.batch > MAX_BATCH {
            return Err(Error::InvalidContext(format!(
                "`batch` must be at most {MAX_BATCH} (2^24), got {}",
                self.batch
            )));
        }
        if self.threads == 0 {
            return Err(Error::InvalidContext(
                "`threads` must be at least 1, got 0".into(),
            ));
        }
        if !(self.utilisation.is_finite() && (0.0..1.0).contains(&self.utilisation)) {
            return Err(Error::InvalidContext(format!(
                "`utilisation` must be in [0, 1), got {}",
                self.utilisation
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phase_parses_aliases_and_rejects_others() {
        assert_eq!("forward".parse::<Phase>().unwrap(), Phase::Inference);
        assert_eq!("Train".parse::<Phase>().unwrap(), Phase::Training);
        assert!(
            "sideways"
                .parse::<Phase>()
                .unwrap_err()
                .to_string()
                .contains("sideways")
        );
    }

    #[test]
    fn context_rejects_out_of_range_values() {
        let ok = Context {
            batch: 1,
            phase: Phase::Inference,
            threads: 1,
            utilisation: 0.5,
        };
        assert!(ok.validate().is_ok());
        let bad = Context {
            utilisation: f64::NAN,
            ..ok.clone()
        };
        assert!(bad.validate().unwrap_err().to_string().contains("NaN"));
        let bad = Context { batch: 0, ..ok };
        assert!(bad.validate().unwrap_err().to_string().contains("`batch`"));
    }

    /// Moves `"kind":"..."` from the front of a one-line JSON object to its end, keeping every
    /// other field as written (repeated ones included).
    fn kind_last(entry: &str) -> String {
        let rest = entry.strip_prefix("{\"kind\":").unwrap();
        let end = rest[1..].find('"').unwrap() + 2;
        let (kind, fields) = rest.split_at(end);
        let fields = fields.strip_prefix(',').unwrap().strip_suffix('}').unwrap();
        format!("{{{fields},\"kind\":{kind}}}")
    }

    #[test]
    fn a_query_reads_the_same_whether_its_kind_comes_first_or_last() {
        let entries = [
            r#"{"kind":"conv2d","in_channels":64,"out_channels":64,"input_hw":56,"kernel":3,"padding":1,"batch":8}"#,
            r#"{"kind":"conv2d","in_channels":3,"out_channels":8,"input_hw":[32,16],"kernel":[3,1],"stride":2,"groups":1,"phase":"training","threads":2}"#,
            r#"{"kind":"linear","tokens":128,"in_features":768,"out_features":3072}"#,
            r#"{"kind":"maxpool2d","channels":64,"input_hw":112,"kernel":3,"stride":2,"padding":1}"#,
            r#"{"kind":"rmsnorm","tokens":128,"features":768}"#,
            r#"{"kind":"relu","shape":[64,112,112],"batch":2}"#,
            r#"{"kind":"add_scalar","shape":[4,8,2]}"#,
            // Refused: an unknown field, a bad size, a repeated context field, an unknown kind,
            // a negative pair, a context field of the wrong type.
            r#"{"kind":"conv2d","in_channels":64,"out_channels":64,"input_hw":56,"kernel":3,"height":5}"#,
            r#"{"kind":"conv2d","in_channels":64,"out_channels":64,"input_hw":56,"kernel":"x"}"#,
            r#"{"kind":"relu","shape":[4,1,1],"batch":2,"batch":3}"#,
            r#"{"kind":"conv3d","in_channels":1}"#,
            r#"{"kind":"maxpool2d","channels":64,"input_hw":112,"kernel":[-1,2]}"#,
            r#"{"kind":"relu","shape":[4,1,1],"phase":"sideways"}"#,
        ];
        let mut refused = 0;
        for entry in entries {
            let first = serde_json::from_str::<ModuleQuery>(entry);
            let last = serde_json::from_str::<ModuleQuery>(&kind_last(entry));
            match (&first, &last) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{entry}"),
                (Err(_), Err(_)) => refused += 1,
                _ => panic!("{entry}: kind first {first:?}, kind last {last:?}"),
            }
        }
        assert_eq!(refused, 6);
        let q: ModuleQuery = serde_json::from_str(entries[1]).unwrap();
        assert_eq!(
            (q.batch, q.phase, q.threads),
            (None, Some(Phase::Training), Some(2))
        );
        // No kind at all, and a kind named twice.
        assert!(serde_json::from_str::<ModuleQuery>(r#"{"shape":[4,1,1]}"#).is_err());
        let twice = r#"{"kind":"relu","shape":[4,1,1],"kind":"gelu"}"#;
        let e = serde_json::from_str::<ModuleQuery>(twice).unwrap_err();
        assert!(e.to_string().contains("kind"), "{e}");
    }
}

/// A module with its own context fields, each optional: one entry of `perfcast predict
/// --modules-file` and of `POST /v1/predict` (`{"kind": "conv2d", ..., "batch": 8}`).
#[derive(Clone, Debug, PartialEq)]
pub struct ModuleQuery {
    /// The module.
    pub spec: crate::spec::ModuleSpec,
    /// Batch size; default the caller's.
    pub batch: Option<usize>,
    /// Phase; default the caller's.
    pub phase: Option<Phase>,
    /// Compute threads; default the caller's.
    pub threads: Option<usize>,
}

/// [`ModuleQuery`] as serde derives it: a flattened, internally tagged spec, which buffers the
/// whole entry before reading it. Used when `kind` is not the entry's first key.
#[derive(Deserialize)]
struct BufferedQuery {
    #[serde(flatten)]
    spec: crate::spec::ModuleSpec,
    batch: Option<usize>,
    phase: Option<Phase>,
    threads: Option<usize>,
}

impl<'de> Deserialize<'de> for ModuleQuery {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_map(query_read::QueryVisitor)
    }
}

/// Reading a [`ModuleQuery`] in one pass when its first key is `kind` (as every writer of
/// perfcast's formats puts it): the kind picks the spec's struct, which reads the rest of the
/// entry directly, the context fields taken out on the way. Any other entry is buffered and
/// read as serde derives it, so both paths accept and refuse the same entries.
mod query_read {
    use std::borrow::Cow;
    use std::fmt;

    use serde::Deserialize;
    use serde::de::value::{CowStrDeserializer, MapAccessDeserializer};
    use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, Visitor};

    use super::{BufferedQuery, ModuleQuery, Phase};
    use crate::spec::{
        BatchNorm2d, Conv2d, Elementwise, Embedding, LayerNorm, Linear, Matmul, ModuleKind,
        ModuleSpec, Pool2d,
    };

    /// A map key, borrowed from the input where it can be.
    struct Key<'de>(Cow<'de, str>);

    impl<'de> Deserialize<'de> for Key<'de> {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct KeyVisitor;
            impl<'de> Visitor<'de> for KeyVisitor {
                type Value = Key<'de>;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a field name")
                }
                fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                    Ok(Key(Cow::Borrowed(v)))
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                    Ok(Key(Cow::Owned(v.to_owned())))
                }
                fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                    Ok(Key(Cow::Owned(v)))
                }
            }
            d.deserialize_str(KeyVisitor)
        }
    }

    pub(super) struct QueryVisitor;

    impl<'de> Visitor<'de> for QueryVisitor {
        type Value = ModuleQuery;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a module: an object with its `kind` and sizes")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ModuleQuery, A::Error> {
            let Some(first) = map.next_key::<Key<'de>>()? else {
                return Err(de::Error::missing_field("kind"));
            };
            if first.0 == "kind" {
                let name = map.next_value::<Key<'de>>()?;
                if let Some(kind) = ModuleKind::ALL.iter().find(|k| k.name() == name.0) {
                    return read_spec(*kind, map);
                }
                return buffered(map, vec![("kind".into(), name.0.into_owned().into())]);
            }
            let value = map.next_value::<serde_json::Value>()?;
            buffered(map, vec![(first.0.into_owned(), value)])
        }
    }

    /// The rest of an entry read as serde derives it, after the entries already taken.
    fn buffered<'de, A: MapAccess<'de>>(
        mut map: A,
        mut entries: Vec<(String, serde_json::Value)>,
    ) -> Result<ModuleQuery, A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value::<serde_json::Value>()?;
            entries.push((key, value));
        }
        let mut object = serde_json::Map::new();
        for (key, value) in entries {
            if object.contains_key(&key) {
                return Err(de::Error::custom(format!("duplicate field `{key}`")));
            }
            object.insert(key, value);
        }
        let object = serde_json::Value::Object(object);
        let q = BufferedQuery::deserialize(object).map_err(de::Error::custom)?;
        Ok(ModuleQuery {
            spec: q.spec,
            batch: q.batch,
            phase: q.phase,
            threads: q.threads,
        })
    }

    fn read_spec<'de, A: MapAccess<'de>>(
        kind: ModuleKind,
        map: A,
    ) -> Result<ModuleQuery, A::Error> {
        let mut rest = Rest {
            map,
            batch: None,
            phase: None,
            threads: None,
        };
        let spec = {
            let d = MapAccessDeserializer::new(&mut rest);
            match kind {
                ModuleKind::Conv2d => ModuleSpec::Conv2d(Conv2d::deserialize(d)?),
                ModuleKind::Linear => ModuleSpec::Linear(Linear::deserialize(d)?),
                ModuleKind::Matmul => ModuleSpec::Matmul(Matmul::deserialize(d)?),
                ModuleKind::MaxPool2d => ModuleSpec::MaxPool2d(Pool2d::deserialize(d)?),
                ModuleKind::AvgPool2d => ModuleSpec::AvgPool2d(Pool2d::deserialize(d)?),
                ModuleKind::BatchNorm2d => ModuleSpec::BatchNorm2d(BatchNorm2d::deserialize(d)?),
                ModuleKind::LayerNorm => ModuleSpec::LayerNorm(LayerNorm::deserialize(d)?),
                ModuleKind::RmsNorm => ModuleSpec::RmsNorm(LayerNorm::deserialize(d)?),
                ModuleKind::Embedding => ModuleSpec::Embedding(Embedding::deserialize(d)?),
                other => {
                    let e = Elementwise::deserialize(d)?;
                    ModuleSpec::elementwise(other, e).ok_or_else(|| {
                        de::Error::custom(format!("`{}` is not an element-wise kind", other.name()))
                    })?
                }
            }
        };
        Ok(ModuleQuery {
            spec,
            batch: rest.batch,
            phase: rest.phase,
            threads: rest.threads,
        })
    }

    /// The entry's keys after `kind`, less the context fields, which it keeps.
    struct Rest<A> {
        map: A,
        batch: Option<usize>,
        phase: Option<Phase>,
        threads: Option<usize>,
    }

    fn once<'de, A: MapAccess<'de>, T: Deserialize<'de>>(
        map: &mut A,
        slot: &mut Option<T>,
        name: &'static str,
    ) -> Result<(), A::Error> {
        if slot.is_some() {
            return Err(de::Error::duplicate_field(name));
        }
        *slot = Some(map.next_value()?);
        Ok(())
    }

    impl<'de, A: MapAccess<'de>> MapAccess<'de> for &mut Rest<A> {
        type Error = A::Error;

        fn next_key_seed<K: DeserializeSeed<'de>>(
            &mut self,
            seed: K,
        ) -> Result<Option<K::Value>, A::Error> {
            loop {
                let Some(key) = self.map.next_key::<Key<'de>>()? else {
                    return Ok(None);
                };
                match key.0.as_ref() {
                    "batch" => once(&mut self.map, &mut self.batch, "batch")?,
                    "phase" => once(&mut self.map, &mut self.phase, "phase")?,
                    "threads" => once(&mut self.map, &mut self.threads, "threads")?,
                    "kind" => return Err(de::Error::duplicate_field("kind")),
                    _ => {
                        let d: CowStrDeserializer<'de, A::Error> = key.0.into_deserializer();
                        return seed.deserialize(d).map(Some);
                    }
                }
            }
        }

        fn next_value_seed<V: DeserializeSeed<'de>>(
            &mut self,
            seed: V,
        ) -> Result<V::Value, A::Error> {
            self.map.next_value_seed(seed)
        }
    }
}

impl ModuleQuery {
    /// The query's context: its own fields, the `defaults`' where it has none.
    pub fn context(&self, defaults: &Context) -> Context {
        Context {
            batch: self.batch.unwrap_or(defaults.batch),
            phase: self.phase.unwrap_or(defaults.phase),
            threads: self.threads.unwrap_or(defaults.threads),
            utilisation: defaults.utilisation,
        }
    }
}
