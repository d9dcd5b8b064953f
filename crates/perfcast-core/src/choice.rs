//! A network named on the command line: a zoo name with an optional input resolution
//! (`vgg16@112`), with the label tables show it by.

use crate::error::{Error, Result};
use crate::network::Network;
use crate::zoo;

/// A network to run or predict, with its label.
#[derive(Clone, Debug)]
pub struct NetworkChoice {
    /// Label in tables (`vgg16@112`, or a file's network name).
    pub label: String,
    /// The network.
    pub network: Network,
    /// Resolution it was built at, for zoo networks given one.
    pub resolution: Option<usize>,
}

impl NetworkChoice {
    /// A zoo network from `name[@resolution]`; without `@`, at `default_resolution` (the
    /// network's own when `None`). Errors name the entry.
    pub fn zoo(entry: &str, default_resolution: Option<usize>) -> Result<NetworkChoice> {
        let (name, res) = match entry.split_once('@') {
            Some((n, r)) => {
                let r: usize = r.trim().parse().map_err(|_| {
                    Error::Input(format!(
                        "`{entry}`: the resolution after `@` must be a whole number"
                    ))
                })?;
                (n.trim(), Some(r))
            }
            None => (entry.trim(), default_resolution),
        };
        let network = zoo::build(name, res)?;
        Ok(NetworkChoice {
            label: match res {
                Some(r) => format!("{name}@{r}"),
                None => name.to_string(),
            },
            network,
            resolution: res,
        })
    }

    /// Every zoo entry of `entries` ([`NetworkChoice::zoo`]).
    pub fn zoo_all(entries: &[String], default_resolution: Option<usize>) -> Result<Vec<Self>> {
        entries
            .iter()
            .map(|e| NetworkChoice::zoo(e, default_resolution))
            .collect()
    }

    /// A network read elsewhere (a JSON file, an import), labelled by its name.
    pub fn named(network: Network) -> NetworkChoice {
        NetworkChoice {
            label: network.name.clone(),
            network,
            resolution: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zoo_entries_take_an_optional_resolution() {
        let plain = NetworkChoice::zoo("lenet5", None).expect("lenet5");
        assert_eq!((plain.label.as_str(), plain.resolution), ("lenet5", None));
        let at = NetworkChoice::zoo(" vgg11@64", None).expect("vgg11@64");
        assert_eq!((at.label.as_str(), at.resolution), ("vgg11@64", Some(64)));
        let default = NetworkChoice::zoo("resnet18", Some(32)).expect("resnet18");
        assert_eq!(default.label, "resnet18@32");
        assert_eq!(
            NetworkChoice::zoo("vgg16@big", None)
                .expect_err("bad resolution")
                .to_string(),
            "`vgg16@big`: the resolution after `@` must be a whole number"
        );
        assert!(NetworkChoice::zoo("nope", None).is_err());
        let all = NetworkChoice::zoo_all(&["lenet5".into(), "alexnet@96".into()], None)
            .expect("two entries");
        assert_eq!(all[1].label, "alexnet@96");
        let named = NetworkChoice::named(plain.network);
        assert_eq!(named.label, named.network.name);
    }
}
