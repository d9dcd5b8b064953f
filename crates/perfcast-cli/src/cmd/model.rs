//! Real models as networks: `--transformer config.json --seq N` and `--onnx model.onnx`, shared
//! by `predict`, `measure`, `eval networks` and `plan` (one library call each:
//! [`perfcast_graph::ModelSource`] builds the network).

use std::path::PathBuf;

use clap::Args;
use perfcast_core::{ModuleKind, Network, Phase};
pub use perfcast_graph::onnx::ImportReport;
use perfcast_graph::{Loaded, ModelSource};

/// Flags that load a real model.
#[derive(Clone, Debug, Default, Args)]
pub struct ModelArgs {
    /// A transformer from a Hugging Face style config.json (BERT, GPT-2/GPT-3, OPT, Llama);
    /// needs `--seq` (examples: `examples/transformers/`)
    #[arg(long, value_name = "CONFIG.json")]
    pub transformer: Option<PathBuf>,
    /// An ONNX model; symbolic batch axes are 1 (the batch is `--batch`, else a batch the file
    /// fixes), symbolic sequence axes `--seq`
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

impl ModelArgs {
    /// Whether a model flag is given.
    pub fn given(&self) -> bool {
        self.source().given()
    }

    /// The model source the flags name.
    pub fn source(&self) -> ModelSource {
        ModelSource {
            transformer: self.transformer.clone(),
            onnx: self.onnx.clone(),
            seq: self.seq,
            onnx_inputs: self.onnx_input.clone(),
            strict: self.strict,
            fuse_conv_bn: self.fuse_conv_bn,
            lm_head: self.lm_head,
        }
    }

    /// The model the flags name, or `None` without `--transformer` / `--onnx` (see
    /// [`ModelSource::load`]).
    pub fn load(&self, phase: Phase, extra_inputs: &[String]) -> anyhow::Result<Option<Loaded>> {
        Ok(self.source().load(phase, extra_inputs)?)
    }
}

/// The one network named by a zoo name (optionally `@resolution`, or `resolution` given apart),
/// a network JSON, a transformer config or an ONNX file; `phase` decides whether a transformer
/// config builds its dropout layers. `what` says what the network is for, in the error.
pub fn one_network(
    zoo_name: Option<&str>,
    resolution: Option<usize>,
    file: Option<&std::path::Path>,
    model: &ModelArgs,
    phase: Phase,
    what: &str,
) -> anyhow::Result<Network> {
    let given = [zoo_name.is_some(), file.is_some(), model.given()];
    anyhow::ensure!(
        given.iter().filter(|g| **g).count() == 1,
        "{what}: give one network: `--network`, `--network-file`, `--transformer` or `--onnx`"
    );
    let network = match (zoo_name, file, model.load(phase, &[])?) {
        (_, _, Some(loaded)) => loaded.network,
        (Some(name), _, _) => perfcast_core::NetworkChoice::zoo(name, resolution)?.network,
        (_, Some(path), _) => Network::from_json_file(path)?,
        _ => unreachable!("exactly one source is given"),
    };
    network.check()?;
    Ok(network)
}

/// Zero-cost view layers of a network (predicted as 0 ms, marked `zero-cost`).
pub fn views(network: &Network) -> usize {
    network
        .layers
        .iter()
        .filter(|l| l.spec.kind() == ModuleKind::View)
        .count()
}

/// The batch to run: `--batch` when given (with a warning when it differs from the batch the
/// ONNX file fixes), else the file's, else 1.
pub fn batch(given: Option<usize>, file: Option<usize>, ui: &crate::Ui) -> usize {
    match (given, file) {
        (Some(b), Some(f)) if b != f => {
            ui.info(format!(
                "warning: `--batch {b}` overrides the batch of {f} the ONNX file fixes"
            ));
            b
        }
        (Some(b), _) => b,
        (None, Some(f)) => {
            ui.info(format!("note: batch {f}, the batch the ONNX file fixes"));
            f
        }
        (None, None) => 1,
    }
}
