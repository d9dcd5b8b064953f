//! A real model named by flags: a transformer config with a sequence length, or an ONNX file
//! with its input shapes, loaded into a network (with the ONNX import's report). What the
//! CLI's `--transformer` / `--onnx` flags, and anything else naming a model, hand over.

use std::path::PathBuf;

use perfcast_core::{Network, NetworkChoice, Phase, zoo};

use crate::error::{Error, Result};
use crate::onnx::{ImportOptions, ImportReport, import_file};
use crate::transformer::{BuildOptions, TransformerConfig};

/// Where a model comes from, and how to build it.
#[derive(Clone, Debug, Default)]
pub struct ModelSource {
    /// A Hugging Face style `config.json` (needs `seq`).
    pub transformer: Option<PathBuf>,
    /// An ONNX model.
    pub onnx: Option<PathBuf>,
    /// Tokens per sample (the transformer's, and symbolic sequence axes of an ONNX model).
    pub seq: Option<usize>,
    /// Full shapes of ONNX inputs, `NAME=DIMS` (`ids=1x128`).
    pub onnx_inputs: Vec<String>,
    /// An ONNX op with no perfcast kind is an error instead of being listed.
    pub strict: bool,
    /// Fold a batch norm after a conv into the conv's bias.
    pub fuse_conv_bn: bool,
    /// Build a transformer's LM head (default: yes for decoders, no for BERT).
    pub lm_head: Option<bool>,
}

/// A model loaded from its source, with the ONNX import's report.
pub struct Loaded {
    /// The network.
    pub network: Network,
    /// What the ONNX import found.
    pub report: Option<ImportReport>,
}

impl Loaded {
    /// The batch the model file fixes (an ONNX export at a fixed batch above 1), if any.
    pub fn file_batch(&self) -> Option<usize> {
        self.report.as_ref().and_then(|r| r.batch)
    }
}

/// The networks to measure, with the batch the model file fixes (see [`Loaded::file_batch`]).
pub struct Measured {
    /// The networks, in order.
    pub networks: Vec<NetworkChoice>,
    /// The batch the ONNX file fixes, if any.
    pub file_batch: Option<usize>,
}

/// Parses `NAME=DIMS` (`ids=1x128`).
pub fn named_dims(text: &str) -> Result<(String, Vec<usize>)> {
    let (name, dims) = text.split_once('=').ok_or_else(|| {
        Error::Input(format!(
            "`--onnx-input {text}`: expected `NAME=DIMS`, e.g. `ids=1x128`"
        ))
    })?;
    let dims = dims
        .split(['x', 'X', ','])
        .map(|d| {
            d.trim()
                .parse::<usize>()
                .ok()
                .filter(|v| *v > 0)
                .ok_or_else(|| {
                    Error::Input(format!(
                        "`--onnx-input {text}`: `{d}` is not a positive size"
                    ))
                })
        })
        .collect::<Result<_>>()?;
    Ok((name.trim().to_string(), dims))
}

impl ModelSource {
    /// Whether a model is named.
    pub fn given(&self) -> bool {
        self.transformer.is_some() || self.onnx.is_some()
    }

    /// The model, or `None` when none is named. A training phase builds a transformer's
    /// dropout layers. `extra_inputs` are more `NAME=DIMS` shapes.
    pub fn load(&self, phase: Phase, extra_inputs: &[String]) -> Result<Option<Loaded>> {
        if let Some(path) = &self.transformer {
            let seq = self.seq.ok_or_else(|| {
                Error::Input("`--transformer` needs `--seq N`, the tokens per sample".into())
            })?;
            let config = TransformerConfig::from_file(path)?;
            let network = config.build(&BuildOptions {
                seq,
                lm_head: self.lm_head,
                dropout: phase == Phase::Training,
            })?;
            return Ok(Some(Loaded {
                network,
                report: None,
            }));
        }
        let Some(path) = &self.onnx else {
            return Ok(None);
        };
        let inputs = self
            .onnx_inputs
            .iter()
            .chain(extra_inputs)
            .map(|s| named_dims(s))
            .collect::<Result<_>>()?;
        let imported = import_file(
            path,
            &ImportOptions {
                seq: self.seq,
                inputs,
                strict: self.strict,
                fuse_conv_bn: self.fuse_conv_bn,
            },
        )?;
        let report = ImportReport::new(path.clone(), &imported);
        Ok(Some(Loaded {
            network: imported.network,
            report: Some(report),
        }))
    }
}

/// The networks to measure: the model `source` names (built as an inference graph, no
/// dropout layers, for every phase measured; an ONNX model with unmapped ops is refused, since
/// a measured run would include them and its prediction not), zoo entries (`vgg16@112`, at
/// `resolution` without `@`) and network files, in that order; at least one. With them, the
/// batch the ONNX file fixes, if any.
pub fn measured_networks(
    source: &ModelSource,
    names: &[String],
    files: &[PathBuf],
    resolution: Option<usize>,
) -> Result<Measured> {
    let mut out = Vec::new();
    let mut file_batch = None;
    if let Some(loaded) = source.load(Phase::Inference, &[])? {
        file_batch = loaded.file_batch();
        if let Some(report) = &loaded.report
            && !report.unmapped.is_empty()
        {
            return Err(Error::Input(format!(
                "`{}` has ops perfcast has no kind for ({}): a measured run would include them \
                 and its prediction not",
                report.source.display(),
                report
                    .unmapped
                    .iter()
                    .map(|u| u.op.op.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
            .with_hint("`perfcast predict --onnx` lists them"));
        }
        out.push(NetworkChoice::named(loaded.network));
    }
    for name in names {
        out.push(NetworkChoice::zoo(name, resolution)?);
    }
    for path in files {
        out.push(NetworkChoice::named(Network::from_json_file(path)?));
    }
    if out.is_empty() {
        return Err(Error::Input("no network given".into()).with_hint(format!(
            "`--network vgg16` (zoo: {}), `--network vgg16@112` for another resolution, \
             `--network-file net.json`, `--transformer config.json --seq N` or `--onnx \
             model.onnx`",
            zoo::names().join(", ")
        )));
    }
    Ok(Measured {
        networks: out,
        file_batch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_shapes_parse_and_errors_name_the_flag() {
        assert_eq!(
            named_dims("ids=1x128").expect("dims"),
            ("ids".to_string(), vec![1, 128])
        );
        assert_eq!(
            named_dims("ids").expect_err("no dims").to_string(),
            "`--onnx-input ids`: expected `NAME=DIMS`, e.g. `ids=1x128`"
        );
        assert_eq!(
            named_dims("ids=1x0").expect_err("zero").to_string(),
            "`--onnx-input ids=1x0`: `0` is not a positive size"
        );
        let none = ModelSource::default();
        assert!(!none.given());
        assert!(none.load(Phase::Inference, &[]).expect("nothing").is_none());
        let err = ModelSource {
            transformer: Some("gpt2.json".into()),
            ..ModelSource::default()
        }
        .load(Phase::Inference, &[])
        .err()
        .expect("no seq")
        .to_string();
        assert_eq!(
            err,
            "`--transformer` needs `--seq N`, the tokens per sample"
        );
    }
}
