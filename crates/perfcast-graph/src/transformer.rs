//! Transformer networks from Hugging Face style `config.json` files: BERT, GPT-2 / GPT-3, OPT and
//! Llama-style models, layer by layer as their PyTorch modules run.
//!
//! # Fields read
//!
//! | meaning | names tried, in order |
//! | --- | --- |
//! | family | `model_type`: `bert`, `roberta` (BERT); `gpt2`, `gpt3` (GPT); `opt`; `llama`, `mistral`, `qwen2` (Llama) |
//! | width | `hidden_size`, `n_embd`, `d_model` |
//! | layers | `num_hidden_layers`, `n_layer`, `num_layers` |
//! | heads | `num_attention_heads`, `n_head` |
//! | key/value heads | `num_key_value_heads` (Llama; default: the heads) |
//! | MLP width | `intermediate_size`, `n_inner`, `ffn_dim` (default 4 x width, GPT-2's `n_inner: null`) |
//! | vocabulary | `vocab_size` |
//! | positions | `max_position_embeddings`, `n_positions`, `n_ctx` |
//! | activation | `hidden_act`, `activation_function` (`gelu`, `gelu_pytorch_tanh` -> gelu; `gelu_new`, `gelu_fast` -> the tanh formula's eight element-wise kernels, as eager PyTorch runs them; `relu`, `silu`/`swish`, `tanh`) |
//! | norm placement | OPT's `do_layer_norm_before` (default true); BERT is post-norm, GPT-2 and Llama pre-norm |
//! | dropout (training graphs) | `hidden_dropout_prob`, `resid_pdrop`, `dropout`; attention: `attention_probs_dropout_prob`, `attn_pdrop`, `attention_dropout` |
//!
//! A missing required field is an error naming it and its aliases; so is a value of the wrong
//! type or an unknown family or activation.
//!
//! # Graph
//!
//! Per-sample shapes (the batch belongs to the [`perfcast_core::Context`]); `T` tokens, width
//! `h`, `H` heads of `d = h / H`. Linear layers run over all `T` tokens (a predictor on a GPU
//! folds the batch in: one GEMM of `B*T` rows); attention products are per-head matmuls
//! (`B*H` matrices on a GPU).
//!
//! - Embeddings: token (and learned position, and BERT's token type) lookups, added; BERT then
//!   normalises. Llama has rotary positions inside attention instead.
//! - Attention: Q, K, V projections (GPT-2's fused `c_attn`, one linear of `3h` outputs), the
//!   head split as zero-cost views (K presented transposed: the scores matmul reads it
//!   `trans_b`), scores `QK^T` per head, the scale (a scalar op), the mask (Hugging Face's eager
//!   attention adds a broadcast mask, causal for decoders: one pass over the scores, an
//!   `add_scalar`), softmax, `probs x V`, the heads merged back (`transpose().contiguous()`: a
//!   copy), the output projection. Llama adds rotary embeddings to Q and K (`x cos`, the
//!   rotate-half as a negated half and a concat, `x sin`, an add) and repeats grouped K/V heads
//!   (a concat of the copies) when it has fewer K/V heads than heads.
//! - MLP: `h -> i`, activation, `i -> h`; Llama's is gated (`silu(gate(x)) * up(x)`, then down).
//! - Residual adds; pre-norm (GPT-2, OPT, Llama) or post-norm (BERT) norms, LayerNorm or RMSNorm
//!   (Llama).
//! - Head: a final norm (pre-norm models) and the LM head (`h -> vocab`, no bias) by default for
//!   decoders; BERT's pooler (the first token through a `tanh` linear), and its MLM head only on
//!   request ([`BuildOptions::lm_head`]).
//! - Dropout layers only in training graphs ([`BuildOptions::dropout`]) and where the config's
//!   probability is above 0.
//!
//! Left out, and said here: the rotary cos/sin tables (computed once per call from `T x d/2`
//! positions, tiny), attention-mask preparation, and the loss.

use std::path::{Path, PathBuf};

use perfcast_core::{
    Elementwise, Embedding, Layer, LayerNorm, Linear, Matmul, ModuleSpec, NETWORK_INPUT, Network,
};
use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// The architecture family a config builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// BERT (and RoBERTa): post-norm encoder, token-type embeddings, pooler.
    Bert,
    /// GPT-2 and GPT-3 (dense): pre-norm decoder, fused QKV, causal `masked_fill`.
    Gpt2,
    /// OPT: pre-norm (or post-norm, `do_layer_norm_before: false`) decoder, separate QKV, ReLU.
    Opt,
    /// Llama-style: RMSNorm, rotary positions, gated SiLU MLP, grouped K/V heads, no biases.
    Llama,
}

impl Family {
    /// The family's name.
    pub fn name(self) -> &'static str {
        match self {
            Family::Bert => "bert",
            Family::Gpt2 => "gpt2",
            Family::Opt => "opt",
            Family::Llama => "llama",
        }
    }
}

/// The activation of the MLP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// GELU, one kernel (`gelu`, `gelu_pytorch_tanh`).
    Gelu,
    /// GELU's tanh approximation written out as Hugging Face's `gelu_new` runs it in eager
    /// PyTorch: `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`, eight element-wise kernels.
    GeluNew,
    /// ReLU.
    Relu,
    /// SiLU (swish).
    Silu,
    /// Tanh.
    Tanh,
}

impl Activation {
    fn spec(self, e: Elementwise) -> ModuleSpec {
        match self {
            Activation::Gelu | Activation::GeluNew => ModuleSpec::Gelu(e),
            Activation::Relu => ModuleSpec::Relu(e),
            Activation::Silu => ModuleSpec::Silu(e),
            Activation::Tanh => ModuleSpec::Tanh(e),
        }
    }
}

/// A transformer's hyper-parameters, read from a config.
#[derive(Clone, Debug, PartialEq)]
pub struct TransformerConfig {
    /// The model's name (`_name_or_path`, `name`, or the file's stem).
    pub name: String,
    /// Its family.
    pub family: Family,
    /// Width `h`.
    pub hidden: usize,
    /// Blocks.
    pub layers: usize,
    /// Attention heads `H`.
    pub heads: usize,
    /// Key/value heads (grouped-query attention); the heads unless Llama-style.
    pub kv_heads: usize,
    /// MLP width.
    pub intermediate: usize,
    /// Vocabulary.
    pub vocab: usize,
    /// Largest sequence the position table covers.
    pub max_positions: usize,
    /// Token types (BERT; 0 for others).
    pub type_vocab: usize,
    /// MLP activation.
    pub activation: Activation,
    /// Whether norms come before attention and MLP (false: after the residual add).
    pub pre_norm: bool,
    /// Dropout on hidden states (embeddings, attention output, MLP output).
    pub dropout: f64,
    /// Dropout on attention probabilities.
    pub attention_dropout: f64,
}

/// What a build adds beside the config.
#[derive(Clone, Debug, PartialEq)]
pub struct BuildOptions {
    /// Tokens per sample `T` (at most the config's positions).
    pub seq: usize,
    /// Whether the LM head is built; `None`: yes for decoders, no for BERT.
    pub lm_head: Option<bool>,
    /// Whether dropout layers are built (training graphs).
    pub dropout: bool,
}

impl BuildOptions {
    /// An inference graph of `seq` tokens with the family's default head.
    pub fn new(seq: usize) -> Self {
        BuildOptions {
            seq,
            lm_head: None,
            dropout: false,
        }
    }
}

/// Reads fields of one config object, each error naming the file and the field.
struct Fields<'a> {
    path: &'a Path,
    map: &'a Map<String, Value>,
}

/// The `model_type`s perfcast builds, as the hint of a config that names none of them.
const FAMILIES: &str = "bert, roberta, gpt2, gpt3, opt, llama, mistral or qwen2";

impl Fields<'_> {
    fn error(&self, message: String) -> Error {
        Error::Config {
            path: self.path.to_path_buf(),
            message,
        }
    }

    /// The first of `names` present and not null.
    /// The first of `names` (aliases of one field) the config sets; two set to different
    /// values are an error rather than one silently winning.
    fn find(&self, names: &[&'static str]) -> Result<Option<(&'static str, &Value)>> {
        let mut set = names
            .iter()
            .filter_map(|n| self.map.get(*n).filter(|v| !v.is_null()).map(|v| (*n, v)));
        let first = set.next();
        if let (Some((a, va)), Some((b, vb))) =
            (first, set.find(|(_, v)| Some(*v) != first.map(|f| f.1)))
        {
            return Err(self.error(format!(
                "`{a}` = {va} and `{b}` = {vb} name the same field; give one"
            )));
        }
        Ok(first)
    }

    fn usize_opt(&self, names: &[&'static str]) -> Result<Option<usize>> {
        let Some((name, v)) = self.find(names)? else {
            return Ok(None);
        };
        match v.as_u64() {
            Some(n) if n >= 1 && n <= perfcast_core::MAX_AXIS as u64 => Ok(Some(n as usize)),
            _ => Err(self.error(format!(
                "`{name}` must be an integer from 1 to {}, got {v}",
                perfcast_core::MAX_AXIS
            ))),
        }
    }

    fn usize(&self, names: &[&'static str]) -> Result<usize> {
        self.usize_opt(names)?.ok_or_else(|| {
            let aliases = if names.len() > 1 {
                format!(
                    " (or {})",
                    names[1..]
                        .iter()
                        .map(|n| format!("`{n}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            } else {
                String::new()
            };
            self.error(format!("missing field `{}`{aliases}", names[0]))
        })
    }

    fn prob(&self, names: &[&'static str]) -> Result<f64> {
        let Some((name, v)) = self.find(names)? else {
            return Ok(0.0);
        };
        match v.as_f64() {
            Some(p) if (0.0..1.0).contains(&p) => Ok(p),
            _ => Err(self.error(format!("`{name}` must be a probability in [0, 1), got {v}"))),
        }
    }

    fn str_opt(&self, names: &[&'static str]) -> Result<Option<(&'static str, &str)>> {
        match self.find(names)? {
            None => Ok(None),
            Some((name, Value::String(s))) => Ok(Some((name, s.as_str()))),
            Some((name, v)) => Err(self.error(format!("`{name}` must be a string, got {v}"))),
        }
    }

    fn bool_or(&self, name: &'static str, default: bool) -> Result<bool> {
        match self.find(&[name])? {
            None => Ok(default),
            Some((_, Value::Bool(b))) => Ok(*b),
            Some((_, v)) => Err(self.error(format!("`{name}` must be true or false, got {v}"))),
        }
    }
}

/// The most transformer blocks a config may build (the largest published models have about
/// a hundred).
pub const MAX_BLOCKS: usize = 4096;

impl TransformerConfig {
    /// Parses a config from JSON text; `path` names it in errors (and gives the default name).
    pub fn from_json(text: &str, path: &Path) -> Result<Self> {
        let value: Value = serde_json::from_str(text).map_err(|e| Error::Config {
            path: path.to_path_buf(),
            message: format!("not valid JSON: {e}"),
        })?;
        let Value::Object(map) = &value else {
            return Err(Error::Config {
                path: path.to_path_buf(),
                message: "the config must be a JSON object".into(),
            });
        };
        let f = Fields { path, map };
        let (_, model_type) = f.str_opt(&["model_type"])?.ok_or_else(|| {
            f.error("missing field `model_type`".into())
                .with_hint(FAMILIES)
        })?;
        let family = match model_type.to_ascii_lowercase().as_str() {
            "bert" | "roberta" => Family::Bert,
            "gpt2" | "gpt3" | "gpt" => Family::Gpt2,
            "opt" => Family::Opt,
            "llama" | "mistral" | "qwen2" => Family::Llama,
            other => {
                return Err(f
                    .error(format!(
                        "`model_type` `{other}` is not a family perfcast builds"
                    ))
                    .with_hint(FAMILIES));
            }
        };
        let hidden = f.usize(&["hidden_size", "n_embd", "d_model"])?;
        let layers = f.usize(&["num_hidden_layers", "n_layer", "num_layers"])?;
        // Each block is a dozen layers or more, built before anything is predicted: a count past
        // this is a typo that would fill memory (16.7M blocks aborted the allocator).
        if layers > MAX_BLOCKS {
            let name = f
                .find(&["num_hidden_layers", "n_layer", "num_layers"])?
                .map_or("num_hidden_layers", |(n, _)| n);
            return Err(f.error(format!(
                "`{name}` must be at most {MAX_BLOCKS} blocks, got {layers}"
            )));
        }
        let heads = f.usize(&["num_attention_heads", "n_head"])?;
        if hidden % heads != 0 {
            return Err(f.error(format!(
                "the width {hidden} is not a multiple of the {heads} attention heads"
            )));
        }
        let kv_heads = if family == Family::Llama {
            f.usize_opt(&["num_key_value_heads"])?.unwrap_or(heads)
        } else {
            heads
        };
        if heads % kv_heads != 0 {
            return Err(f.error(format!(
                "`num_key_value_heads` {kv_heads} must divide the {heads} attention heads"
            )));
        }
        let intermediate = match family {
            // Llama's MLP width is not a fixed multiple of the width.
            Family::Llama => f.usize(&["intermediate_size"])?,
            _ => f
                .usize_opt(&["intermediate_size", "n_inner", "ffn_dim"])?
                .unwrap_or(4 * hidden),
        };
        let vocab = f.usize(&["vocab_size"])?;
        let max_positions = f.usize(&["max_position_embeddings", "n_positions", "n_ctx"])?;
        let type_vocab = match family {
            Family::Bert => f.usize_opt(&["type_vocab_size"])?.unwrap_or(2),
            _ => 0,
        };
        let default_act = match family {
            Family::Bert | Family::Gpt2 => "gelu",
            Family::Opt => "relu",
            Family::Llama => "silu",
        };
        let (act_field, act) = f
            .str_opt(&["hidden_act", "activation_function"])?
            .unwrap_or(("hidden_act", default_act));
        let activation = match act.to_ascii_lowercase().as_str() {
            "gelu_new" | "gelu_fast" => Activation::GeluNew,
            a if a.starts_with("gelu") => Activation::Gelu,
            "relu" => Activation::Relu,
            "silu" | "swish" => Activation::Silu,
            "tanh" => Activation::Tanh,
            other => {
                return Err(f.error(format!(
                    "`{act_field}` `{other}` is not an activation perfcast builds (gelu, relu, \
                     silu, tanh)"
                )));
            }
        };
        let pre_norm = match family {
            Family::Bert => false,
            Family::Gpt2 | Family::Llama => true,
            Family::Opt => f.bool_or("do_layer_norm_before", true)?,
        };
        let dropout = f.prob(&["hidden_dropout_prob", "resid_pdrop", "dropout"])?;
        let attention_dropout = f.prob(&[
            "attention_probs_dropout_prob",
            "attn_pdrop",
            "attention_dropout",
        ])?;
        let name = match f.str_opt(&["_name_or_path", "name"])? {
            Some((_, n)) if !n.trim().is_empty() => n.trim().to_string(),
            _ => path
                .file_stem()
                .map_or("transformer".into(), |s| s.to_string_lossy().into_owned()),
        };
        Ok(TransformerConfig {
            name,
            family,
            hidden,
            layers,
            heads,
            kv_heads,
            intermediate,
            vocab,
            max_positions,
            type_vocab,
            activation,
            pre_norm,
            dropout,
            attention_dropout,
        })
    }

    /// Reads and parses a config file; errors name the file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| Error::Config {
            path: path.to_path_buf(),
            message: format!("cannot read it: {e}"),
        })?;
        Self::from_json(&text, path)
    }

    /// Width of one head.
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }

    /// Trainable parameters of the built network (embeddings, projections, norms, head), for
    /// checks against published sizes.
    pub fn parameters(&self, options: &BuildOptions) -> Result<f64> {
        let net = self.build(options)?;
        Ok(net
            .modules()
            .iter()
            .map(|(_, s)| perfcast_core::features::derive(s, 1).params)
            .sum())
    }

    /// Builds the network of `options.seq` tokens per sample, checked.
    pub fn build(&self, options: &BuildOptions) -> Result<Network> {
        let config_error = |message: String| Error::Config {
            path: PathBuf::from(&self.name),
            message,
        };
        let t = options.seq;
        if t == 0 {
            return Err(config_error("`--seq` must be at least 1, got 0".into()));
        }
        if t > self.max_positions {
            return Err(config_error(format!(
                "`--seq` {t} exceeds the {} positions of the config (`max_position_embeddings`)",
                self.max_positions
            )));
        }
        let mut b = Builder {
            layers: Vec::new(),
            config: self,
            options,
            t,
        };
        let x = b.embeddings()?;
        let mut x = x;
        for i in 0..self.layers {
            x = b.block(&format!("h{i}"), &x);
        }
        b.head(&x);
        let network = Network {
            name: format!("{}-seq{t}", self.name),
            input: vec![t],
            layers: b.layers,
        };
        network.check()?;
        Ok(network)
    }
}

/// Builds layers in order; every method returns the name of the layer it added last.
struct Builder<'a> {
    layers: Vec<Layer>,
    config: &'a TransformerConfig,
    options: &'a BuildOptions,
    t: usize,
}

fn ew(shape: [usize; 3]) -> Elementwise {
    Elementwise { shape }
}

impl Builder<'_> {
    fn push(&mut self, layer: Layer) -> String {
        let name = layer.name.clone();
        self.layers.push(layer);
        name
    }

    fn linear(&mut self, name: &str, from: &str, inf: usize, outf: usize, bias: bool) -> String {
        let spec = ModuleSpec::Linear(Linear {
            tokens: self.t,
            in_features: inf,
            out_features: outf,
            bias,
        });
        self.push(Layer::new(name, spec).reads(from))
    }

    fn norm(&mut self, name: &str, from: &str) -> String {
        let l = LayerNorm {
            tokens: self.t,
            features: self.config.hidden,
        };
        let spec = if self.config.family == Family::Llama {
            ModuleSpec::RmsNorm(l)
        } else {
            ModuleSpec::LayerNorm(l)
        };
        self.push(Layer::new(name, spec).reads(from))
    }

    fn unary(&mut self, name: &str, from: &str, spec: ModuleSpec) -> String {
        self.push(Layer::new(name, spec).reads(from))
    }

    fn binary(&mut self, name: &str, a: &str, b: &str, spec: ModuleSpec) -> String {
        self.push(Layer::new(name, spec).reads(a).second(b))
    }

    /// A dropout layer over `shape` when the graph has them and `p > 0`; else `from`.
    fn dropout(&mut self, name: &str, from: &str, p: f64, shape: [usize; 3]) -> String {
        if self.options.dropout && p > 0.0 {
            self.unary(name, from, ModuleSpec::Dropout(ew(shape)))
        } else {
            from.to_string()
        }
    }

    fn hidden_shape(&self) -> [usize; 3] {
        [1, self.t, self.config.hidden]
    }

    fn embedding(&mut self, name: &str, vocab: usize) -> String {
        let spec = ModuleSpec::Embedding(Embedding {
            tokens: self.t,
            vocab,
            features: self.config.hidden,
        });
        self.push(Layer::new(name, spec).reads(NETWORK_INPUT))
    }

    fn embeddings(&mut self) -> Result<String> {
        let c = self.config;
        let hs = self.hidden_shape();
        let tokens = self.embedding("embed.tokens", c.vocab);
        let x = match c.family {
            Family::Bert => {
                let types = self.embedding("embed.types", c.type_vocab.max(1));
                let sum = self.binary("embed.add_types", &tokens, &types, ModuleSpec::Add(ew(hs)));
                let pos = self.embedding("embed.positions", c.max_positions);
                let sum = self.binary("embed.add_positions", &sum, &pos, ModuleSpec::Add(ew(hs)));
                self.norm("embed.norm", &sum)
            }
            Family::Gpt2 | Family::Opt => {
                // OPT's learned positions are offset by 2 rows.
                let rows = c.max_positions + if c.family == Family::Opt { 2 } else { 0 };
                let pos = self.embedding("embed.positions", rows);
                self.binary(
                    "embed.add_positions",
                    &tokens,
                    &pos,
                    ModuleSpec::Add(ew(hs)),
                )
            }
            Family::Llama => tokens,
        };
        Ok(self.dropout("embed.dropout", &x, c.dropout, hs))
    }

    /// Rotary embedding of a `[heads, T, d]` view: `x cos + rotate_half(x) sin`.
    fn rotary(&mut self, p: &str, from: &str, heads: usize) -> String {
        let (t, d) = (self.t, self.config.head_dim());
        let full = [heads, t, d];
        let cos = self.unary(&format!("{p}.cos"), from, ModuleSpec::MulScalar(ew(full)));
        // rotate_half: the second half negated (its first half a view), then both halves joined.
        let half = self.push(
            Layer::new(format!("{p}.half"), ModuleSpec::View(ew([heads, t, d / 2]))).reads(from),
        );
        let neg = self.unary(
            &format!("{p}.neg"),
            &half,
            ModuleSpec::MulScalar(ew([heads, t, d / 2])),
        );
        let cat = self.unary(&format!("{p}.rotate"), &neg, ModuleSpec::Concat(ew(full)));
        let sin = self.unary(&format!("{p}.sin"), &cat, ModuleSpec::MulScalar(ew(full)));
        self.binary(&format!("{p}.add"), &cos, &sin, ModuleSpec::Add(ew(full)))
    }

    fn view(&mut self, name: &str, from: &str, shape: [usize; 3]) -> String {
        self.push(Layer::new(name, ModuleSpec::View(ew(shape))).reads(from))
    }

    fn attention(&mut self, p: &str, x: &str) -> String {
        let c = self.config;
        let (t, h, heads, kv, d) = (self.t, c.hidden, c.heads, c.kv_heads, c.head_dim());
        let bias = c.family != Family::Llama;
        let (q, k, v) = if c.family == Family::Gpt2 {
            let qkv = self.linear(&format!("{p}.qkv"), x, h, 3 * h, true);
            (qkv.clone(), qkv.clone(), qkv)
        } else {
            let q = self.linear(&format!("{p}.q"), x, h, heads * d, bias);
            let k = self.linear(&format!("{p}.k"), x, h, kv * d, bias);
            let v = self.linear(&format!("{p}.v"), x, h, kv * d, bias);
            (q, k, v)
        };
        // OPT scales the queries before the product; the others scale the scores.
        let q = if c.family == Family::Opt {
            self.unary(
                &format!("{p}.q_scale"),
                &q,
                ModuleSpec::MulScalar(ew([1, t, h])),
            )
        } else {
            q
        };
        let mut qh = self.view(&format!("{p}.q_heads"), &q, [heads, t, d]);
        let mut kh = self.view(&format!("{p}.k_heads"), &k, [kv, t, d]);
        let mut vh = self.view(&format!("{p}.v_heads"), &v, [kv, t, d]);
        if c.family == Family::Llama {
            qh = self.rotary(&format!("{p}.q_rope"), &qh, heads);
            kh = self.rotary(&format!("{p}.k_rope"), &kh, kv);
            if kv < heads {
                // repeat_kv: expand and reshape, materialised.
                let full = ModuleSpec::Concat(ew([heads, t, d]));
                kh = self.unary(&format!("{p}.k_repeat"), &kh, full.clone());
                vh = self.unary(&format!("{p}.v_repeat"), &vh, full);
            }
        }
        // K presented transposed: a view the matmul reads as `trans_b`.
        let kt = self.view(&format!("{p}.k_t"), &kh, [heads, d, t]);
        let scores = self.binary(
            &format!("{p}.scores"),
            &qh,
            &kt,
            ModuleSpec::Matmul(Matmul {
                heads,
                m: t,
                k: d,
                n: t,
                trans_a: false,
                trans_b: true,
            }),
        );
        let st = [heads, t, t];
        // Hugging Face's eager attention: scores times the scale, plus an
        // additive mask (causal for decoders, padding for BERT), one pass each.
        let scaled = if c.family == Family::Opt {
            scores
        } else {
            self.unary(
                &format!("{p}.scale"),
                &scores,
                ModuleSpec::MulScalar(ew(st)),
            )
        };
        let masked = self.unary(&format!("{p}.mask"), &scaled, ModuleSpec::AddScalar(ew(st)));
        let probs = self.unary(
            &format!("{p}.softmax"),
            &masked,
            ModuleSpec::Softmax(ew(st)),
        );
        let probs = self.dropout(
            &format!("{p}.attn_dropout"),
            &probs,
            c.attention_dropout,
            st,
        );
        let context = self.binary(
            &format!("{p}.context"),
            &probs,
            &vh,
            ModuleSpec::Matmul(Matmul {
                heads,
                m: t,
                k: t,
                n: d,
                trans_a: false,
                trans_b: false,
            }),
        );
        let merged = self.push(
            Layer::new(
                format!("{p}.merge_heads"),
                ModuleSpec::Copy(ew([1, t, heads * d])),
            )
            .reads(&context)
            .reshaped(),
        );
        let out = self.linear(&format!("{p}.out"), &merged, heads * d, h, bias);
        // The merged heads `[T, H, d]` are read as `[T, H*d]` rows.
        if let Some(last) = self.layers.last_mut() {
            last.reshape = true;
        }
        self.dropout(
            &format!("{p}.dropout"),
            &out,
            c.dropout,
            self.hidden_shape(),
        )
    }

    fn mlp(&mut self, p: &str, x: &str) -> String {
        let c = self.config;
        let (h, i) = (c.hidden, c.intermediate);
        let inner = [1, self.t, i];
        let out = if c.family == Family::Llama {
            let gate = self.linear(&format!("{p}.gate"), x, h, i, false);
            let up = self.linear(&format!("{p}.up"), x, h, i, false);
            let act = self.unary(&format!("{p}.act"), &gate, c.activation.spec(ew(inner)));
            let prod = self.binary(&format!("{p}.gated"), &act, &up, ModuleSpec::Mul(ew(inner)));
            self.linear(&format!("{p}.down"), &prod, i, h, false)
        } else {
            let fc = self.linear(&format!("{p}.fc1"), x, h, i, true);
            let act = self.activation(&format!("{p}.act"), &fc, inner);
            self.linear(&format!("{p}.fc2"), &act, i, h, true)
        };
        self.dropout(
            &format!("{p}.dropout"),
            &out,
            c.dropout,
            self.hidden_shape(),
        )
    }

    /// The MLP activation over `shape`; `gelu_new` as its eight kernels.
    fn activation(&mut self, p: &str, x: &str, shape: [usize; 3]) -> String {
        if self.config.activation != Activation::GeluNew {
            return self.unary(p, x, self.config.activation.spec(ew(shape)));
        }
        let e = ew(shape);
        let cube = self.unary(&format!("{p}.pow"), x, ModuleSpec::PowScalar(e.clone()));
        let scaled = self.unary(
            &format!("{p}.mul1"),
            &cube,
            ModuleSpec::MulScalar(e.clone()),
        );
        let inner = self.binary(&format!("{p}.add1"), x, &scaled, ModuleSpec::Add(e.clone()));
        let arg = self.unary(
            &format!("{p}.mul2"),
            &inner,
            ModuleSpec::MulScalar(e.clone()),
        );
        let tanh = self.unary(&format!("{p}.tanh"), &arg, ModuleSpec::Tanh(e.clone()));
        let one = self.unary(
            &format!("{p}.add2"),
            &tanh,
            ModuleSpec::AddScalar(e.clone()),
        );
        let half = self.unary(&format!("{p}.mul3"), x, ModuleSpec::MulScalar(e.clone()));
        self.binary(&format!("{p}.mul4"), &half, &one, ModuleSpec::Mul(e))
    }

    fn block(&mut self, p: &str, x: &str) -> String {
        let hs = ModuleSpec::Add(ew(self.hidden_shape()));
        if self.config.pre_norm {
            let n1 = self.norm(&format!("{p}.norm1"), x);
            let a = self.attention(&format!("{p}.attn"), &n1);
            let r1 = self.binary(&format!("{p}.residual1"), &a, x, hs.clone());
            let n2 = self.norm(&format!("{p}.norm2"), &r1);
            let m = self.mlp(&format!("{p}.mlp"), &n2);
            self.binary(&format!("{p}.residual2"), &m, &r1, hs)
        } else {
            let a = self.attention(&format!("{p}.attn"), x);
            let r1 = self.binary(&format!("{p}.residual1"), &a, x, hs.clone());
            let n1 = self.norm(&format!("{p}.norm1"), &r1);
            let m = self.mlp(&format!("{p}.mlp"), &n1);
            let r2 = self.binary(&format!("{p}.residual2"), &m, &n1, hs);
            self.norm(&format!("{p}.norm2"), &r2)
        }
    }

    fn head(&mut self, x: &str) {
        let c = self.config;
        let h = c.hidden;
        let x = if c.pre_norm {
            self.norm("final_norm", x)
        } else {
            x.to_string()
        };
        let lm_head = self.options.lm_head.unwrap_or(c.family != Family::Bert);
        if c.family == Family::Bert {
            // The pooler: the first token through a tanh linear.
            let first = self.unary("pooler.first", &x, ModuleSpec::Slice(ew([1, 1, h])));
            let dense = self.push(
                Layer::new(
                    "pooler.dense",
                    ModuleSpec::Linear(Linear {
                        tokens: 1,
                        in_features: h,
                        out_features: h,
                        bias: true,
                    }),
                )
                .reads(&first),
            );
            self.unary("pooler.tanh", &dense, ModuleSpec::Tanh(ew([1, 1, h])));
            if lm_head {
                // The MLM head: transform (dense, activation, norm), then the decoder.
                let dense = self.linear("mlm.dense", &x, h, h, true);
                let act = self.unary(
                    "mlm.act",
                    &dense,
                    c.activation.spec(ew(self.hidden_shape())),
                );
                let norm = self.norm("mlm.norm", &act);
                self.linear("lm_head", &norm, h, c.vocab, true);
            }
        } else if lm_head {
            self.linear("lm_head", &x, h, c.vocab, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfcast_core::{ModuleKind, features};

    fn examples() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/transformers")
    }

    fn load(name: &str) -> TransformerConfig {
        TransformerConfig::from_file(examples().join(format!("{name}.json"))).unwrap()
    }

    fn count(net: &Network, kind: ModuleKind) -> usize {
        net.modules()
            .iter()
            .filter(|(_, s)| s.kind() == kind)
            .count()
    }

    fn params(net: &Network) -> f64 {
        net.modules()
            .iter()
            .map(|(_, s)| features::derive(s, 1).params)
            .sum()
    }

    #[test]
    fn shipped_configs_match_published_parameter_counts() {
        // Published sizes (embeddings and heads included; tied LM heads counted once by the
        // papers, twice here since the head runs as its own GEMM).
        let cases = [
            ("bert-base", 109.5e6, false),
            ("bert-large", 335.1e6, false),
            ("gpt2", 124.4e6, true),
            ("gpt2-medium", 354.8e6, true),
            ("gpt2-large", 774.0e6, true),
            ("gpt2-xl", 1557.6e6, true),
            ("gpt3-xl", 1.3e9, true),
            ("gpt3-2.7b", 2.7e9, true),
            ("opt-1.3b", 1.3e9, true),
            ("llama-7b", 6.74e9, false),
        ];
        for (name, published, tied) in cases {
            let config = load(name);
            let net = config.build(&BuildOptions::new(128)).unwrap();
            let mut p = params(&net);
            if tied {
                p -= (config.vocab * config.hidden) as f64;
            }
            let error = (p - published).abs() / published;
            assert!(error < 0.03, "{name}: {p} vs {published} ({error})");
        }
    }

    #[test]
    fn bert_base_has_the_published_layer_structure() {
        let net = load("bert-base").build(&BuildOptions::new(128)).unwrap();
        assert_eq!(net.input, vec![128]);
        // 3 projections, output, 2 MLP per block; the pooler.
        assert_eq!(count(&net, ModuleKind::Linear), 12 * 6 + 1);
        assert_eq!(count(&net, ModuleKind::Matmul), 24);
        assert_eq!(count(&net, ModuleKind::Softmax), 12);
        assert_eq!(count(&net, ModuleKind::LayerNorm), 1 + 24);
        assert_eq!(count(&net, ModuleKind::Embedding), 3);
        assert_eq!(count(&net, ModuleKind::Dropout), 0);
        let scores = net
            .layers
            .iter()
            .find(|l| l.name == "h0.attn.scores")
            .unwrap();
        assert_eq!(
            scores.spec,
            ModuleSpec::Matmul(Matmul {
                heads: 12,
                m: 128,
                k: 64,
                n: 128,
                trans_a: false,
                trans_b: true
            })
        );
        // The last layer is the pooler's tanh over the first token.
        assert_eq!(net.output_shape().unwrap(), vec![1, 1, 768]);
    }

    #[test]
    fn gpt2_is_pre_norm_with_fused_qkv_additive_mask_gelu_new_and_lm_head() {
        let config = load("gpt2");
        assert_eq!(config.family, Family::Gpt2);
        assert!(config.pre_norm);
        let net = config.build(&BuildOptions::new(64)).unwrap();
        let qkv = net.layers.iter().find(|l| l.name == "h3.attn.qkv").unwrap();
        assert_eq!(qkv.spec.output_shape().unwrap(), vec![64, 2304]);
        assert_eq!(count(&net, ModuleKind::AddScalar), 12 * 2);
        // gelu_new as eager PyTorch runs it: eight kernels, one of them a tanh.
        assert_eq!(count(&net, ModuleKind::Tanh), 12);
        assert_eq!(count(&net, ModuleKind::Gelu), 0);
        assert_eq!(count(&net, ModuleKind::LayerNorm), 2 * 12 + 1);
        assert_eq!(net.output_shape().unwrap(), vec![64, 50257]);
        // Training graphs get the config's dropout layers: embeddings, and per block the
        // attention probabilities, attention output and MLP output.
        let training = config
            .build(&BuildOptions {
                dropout: true,
                ..BuildOptions::new(64)
            })
            .unwrap();
        assert_eq!(count(&training, ModuleKind::Dropout), 1 + 3 * 12);
    }

    #[test]
    fn llama_has_rms_norm_rotary_gated_silu_and_no_biases() {
        let net = load("llama-7b").build(&BuildOptions::new(32)).unwrap();
        assert_eq!(count(&net, ModuleKind::LayerNorm), 0);
        assert_eq!(count(&net, ModuleKind::RmsNorm), 2 * 32 + 1);
        assert_eq!(count(&net, ModuleKind::Silu), 32);
        assert_eq!(count(&net, ModuleKind::Concat), 2 * 32);
        for (_, spec) in net.modules() {
            if let ModuleSpec::Linear(l) = spec {
                assert!(!l.bias, "{}", spec.describe());
            }
        }
        let views = count(&net, ModuleKind::View);
        assert!(views > 0);
    }

    #[test]
    fn grouped_kv_heads_are_repeated() {
        let text = r#"{"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2,
            "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 512,
            "vocab_size": 1000, "max_position_embeddings": 128}"#;
        let config = TransformerConfig::from_json(text, Path::new("gqa.json")).unwrap();
        assert_eq!(config.name, "gqa");
        let net = config.build(&BuildOptions::new(16)).unwrap();
        let k = net.layers.iter().find(|l| l.name == "h0.attn.k").unwrap();
        assert_eq!(k.spec.output_shape().unwrap(), vec![16, 64]);
        assert!(net.layers.iter().any(|l| l.name == "h1.attn.v_repeat"));
    }

    #[test]
    fn two_names_of_one_field_must_agree() {
        let config = |layers: &str| {
            let text = format!(
                r#"{{"model_type": "gpt2", "n_embd": 64, "n_head": 2, "vocab_size": 10,
                "n_positions": 8, {layers}}}"#
            );
            TransformerConfig::from_json(&text, Path::new("both.json"))
        };
        let err = config(r#""n_layer": 2, "num_hidden_layers": 4"#)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`num_hidden_layers` = 4 and `n_layer` = 2 name the same field"),
            "{err}"
        );
        // The same value under both names is one field given twice.
        assert!(config(r#""n_layer": 2, "num_hidden_layers": 2"#).is_ok());
        // A block count that would fill memory is refused before anything is built.
        let err = config(r#""n_layer": 16777216"#).unwrap_err().to_string();
        assert!(
            err.contains("`n_layer` must be at most 4096 blocks"),
            "{err}"
        );
    }

    #[test]
    fn missing_and_bad_fields_are_named_with_the_file() {
        let path = Path::new("cfg/broken.json");
        let err = TransformerConfig::from_json(
            r#"{"model_type": "gpt2", "n_layer": 2, "n_head": 2, "vocab_size": 10, "n_positions": 8}"#,
            path,
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "transformer config `cfg/broken.json`: missing field `hidden_size` (or `n_embd`, `d_model`)"
        );
        let err = TransformerConfig::from_json(r#"{"hidden_size": 8}"#, path)
            .unwrap_err()
            .to_string();
        assert!(err.contains("missing field `model_type`"), "{err}");
        let err = TransformerConfig::from_json(r#"{"model_type": "t5"}"#, path).unwrap_err();
        assert_eq!(err.hint(), Some(FAMILIES));
        assert!(
            err.to_string()
                .ends_with("`model_type` `t5` is not a family perfcast builds\n\nhint: bert, roberta, gpt2, gpt3, opt, llama, mistral or qwen2"),
            "{err}"
        );
        let err =
            TransformerConfig::from_json(r#"{"model_type": "bert", "hidden_size": -4}"#, path)
                .unwrap_err()
                .to_string();
        assert!(err.contains("`hidden_size` must be an integer"), "{err}");
        let err = TransformerConfig::from_json("{not json", path)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("transformer config `cfg/broken.json`: not valid JSON"),
            "{err}"
        );
        let err = load("gpt2")
            .build(&BuildOptions::new(4096))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`--seq` 4096 exceeds the 1024 positions"),
            "{err}"
        );
    }

    #[test]
    fn every_shipped_config_builds_and_checks() {
        let mut n = 0;
        for entry in std::fs::read_dir(examples()).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "json") {
                let config = TransformerConfig::from_file(&path).unwrap();
                config.build(&BuildOptions::new(16)).unwrap();
                n += 1;
            }
        }
        assert_eq!(n, 10);
    }
}
