//! Real models as networks: `--transformer config.json --seq N` and `--onnx model.onnx`, shared
//! by `predict`, `measure`, `eval networks` and `scale predict` (one library call each:
//! perfcast-graph builds the network).

use std::path::PathBuf;

use clap::Args;
use perfcast_core::{ModuleKind, Network, Phase};
pub use perfcast_graph::onnx::ImportReport;
use perfcast_graph::onnx::{ImportOptions, import_file};
use perfcast_graph::transformer::{BuildOptions, TransformerConfig};

/// Flags that load a real model.
#[derive(Clone, Debug, Default, Args)]
pub struct ModelArgs {
    /// A transformer from a Hugging Face style config.json (BERT, GPT-2/GPT-3, OPT, Llama);
    /// needs `--seq` (examples: `examples/transformers/`)
    #[arg(long, value_name = "CONFIG.json")]
    pub transformer: Option<PathBuf>,
    /// An ONNX model; symbolic batch axes are 1 (the batch is `--batch`), symbolic sequence axes
    /// `--seq`
    #[arg(long, value_name = "MODEL.onnx", conflicts_with = "transformer")]
    pub onnx: Option<PathBuf>,
    /// Tokens per sample for `--transformer`, and for symbolic sequence axes of `--onnx`
    #[arg(long)]
    pub seq: Option<usize>,
    /// Full shape of an `--onnx` input, `NAME=DIMS` (e.g. `ids=1x128`); repeatable
    #[arg(long = "onnx-input", value_name = "NAME=DIMS")]
    pub onnx_input: Vec<String>,
    /// `--onnx`: an op with no perfcast kind is an error instead of being listed
    #[arg(long)]
    pub strict: bool,
    /// `--onnx`: fold a batch norm after a conv into the conv's bias (as inference runtimes do)
    /// instead of keeping it as its own layer (as PyTorch eager runs it)
    #[arg(long)]
    pub fuse_conv_bn: bool,
    /// `--transformer`: build the LM head (`true`/`false`; default: yes for decoders, no for
    /// BERT)
    #[arg(long, value_name = "BOOL")]
    pub lm_head: Option<bool>,
}

/// A model loaded from the flags, with its import report (ONNX).
pub struct Loaded {
    /// The network.
    pub network: Network,
    /// What the ONNX import found.
    pub report: Option<ImportReport>,
}

/// Parses `NAME=DIMS`.
fn named_dims(text: &str) -> anyhow::Result<(String, Vec<usize>)> {
    let (name, dims) = text.split_once('=').ok_or_else(|| {
        anyhow::anyhow!("`--onnx-input {text}`: expected `NAME=DIMS`, e.g. `ids=1x128`")
    })?;
    let dims = dims
        .split(['x', 'X', ','])
        .map(|d| {
            d.trim()
                .parse::<usize>()
                .ok()
                .filter(|v| *v > 0)
                .ok_or_else(|| {
                    anyhow::anyhow!("`--onnx-input {text}`: `{d}` is not a positive size")
                })
        })
        .collect::<anyhow::Result<_>>()?;
    Ok((name.trim().to_string(), dims))
}

impl ModelArgs {
    /// Whether a model flag is given.
    pub fn given(&self) -> bool {
        self.transformer.is_some() || self.onnx.is_some()
    }

    /// The model the flags name, or `None` without `--transformer` / `--onnx`. A training
    /// phase builds a transformer's dropout layers. `extra_inputs` are more `NAME=DIMS` shapes
    /// (predict's `--input`).
    pub fn load(&self, phase: Phase, extra_inputs: &[String]) -> anyhow::Result<Option<Loaded>> {
        if let Some(path) = &self.transformer {
            let seq = self.seq.ok_or_else(|| {
                anyhow::anyhow!("`--transformer` needs `--seq N`, the tokens per sample")
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
            .onnx_input
            .iter()
            .chain(extra_inputs)
            .map(|s| named_dims(s))
            .collect::<anyhow::Result<_>>()?;
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

/// Zero-cost view layers of a network (predicted as 0 ms, marked `zero-cost`).
pub fn views(network: &Network) -> usize {
    network
        .layers
        .iter()
        .filter(|l| l.spec.kind() == ModuleKind::View)
        .count()
}
