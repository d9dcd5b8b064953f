//! Vidur (Microsoft's LLM inference simulator): fp16 kernel times of one transformer decoder
//! layer's non-attention ops, per model, token count and tensor-parallel degree, on A100 and A40.
//!
//! Reads `compute/<gpu>/<org>/<model>/mlp.csv` under the folder given (the repository's
//! `data/profiling` folder, or its `compute` folder). Times are CUDA-profiler milliseconds; the
//! median of the repeats is imported. Every op is imported as the kernel that ran, with shapes
//! after the tensor-parallel split (each worker's shard), batch 1 and `num_tokens` rows:
//! - `attn_pre_proj`: `linear` `n_embd` -> (`n_head` + 2 `n_kv_head`) x head_dim / TP (the
//!   fused QKV GEMM), head_dim = `n_embd` / `n_head`;
//! - `attn_post_proj`: `linear` `n_embd` / TP -> `n_embd`;
//! - `mlp_up_proj`: `linear` `n_embd` -> `n_expanded_embd` / TP, twice that when gated (gate
//!   and up fused);
//! - `mlp_down_proj`: `linear` `n_expanded_embd` / TP -> `n_embd`;
//! - `input_layernorm`, `post_attention_layernorm`: `rmsnorm` over `n_embd` for the gated
//!   (Llama-style) models, `layernorm` for the others (phi-2);
//! - `mlp_act`: `gelu` on the shard for ungated models; the gated models' fused
//!   SiLU-and-multiply is no module kind and is skipped and counted, as is `attn_rope`;
//! - `add`: the residual `add` over `n_embd`;
//! - `emb`: `embedding` of the vocabulary shard (`vocab_size` / TP rows).
//!
//! Linear rows carry no bias (Sarathi's layers add none for the Llama family; phi-2's bias adds
//! one element-wise pass the GEMM's time includes). Device specs are the catalogue's, seen in
//! fp16: `a100` is the A100 SXM4 80GB (Vidur's DGX A100), `a40` the A40.

use std::path::{Path, PathBuf};

use perfcast_core::{
    DType, DeviceSpec, Elementwise, Embedding, LayerNorm, Linear, ModuleKind, ModuleSpec, Phase,
};

use super::read::{Col, CsvFile};
use super::{Devices, Import, cannot_read, checked_spec, record};
use crate::error::{Error, Result};
use crate::record::Timing;

/// Backend name of imported rows.
pub const BACKEND: &str = "vidur:sarathi-fp16";

/// The catalogue device (seen in fp16) of a Vidur GPU folder name.
pub fn device(gpu: &str) -> Option<DeviceSpec> {
    let name = match gpu {
        "a100" => "NVIDIA A100-SXM4-80GB",
        "a40" => "NVIDIA A40",
        _ => return None,
    };
    perfcast_core::known::known()
        .into_iter()
        .find(|s| s.name == name)
        .and_then(|s| s.at_dtype(DType::Fp16).ok())
}

/// Reads every `compute/<gpu>/<org>/<model>/mlp.csv` under `dir`.
pub fn import(dir: &Path) -> Result<Import> {
    if !dir.is_dir() {
        return Err(Error::unreadable(dir, "cannot read it: no such folder"));
    }
    let compute = if dir.join("compute").is_dir() {
        dir.join("compute")
    } else {
        dir.to_path_buf()
    };
    let files = mlp_files(&compute)?;
    if files.is_empty() {
        return Err(Error::schema(
            dir,
            "the folder holds no `<gpu>/<org>/<model>/mlp.csv` (Vidur's `data/profiling/compute`)",
        ));
    }
    let mut devices = Devices::default();
    for (gpu, path) in files {
        read_file(&path, &gpu, &mut devices)?;
    }
    let mut out = Import::new("vidur", dir);
    out.devices = devices.into_vec();
    for d in &mut out.devices {
        // Vidur times kernels with the CUDA profiler, so its smallest adds are a kernel's own
        // floor, without the framework dispatch NeuSight's carry: the floor of these timings.
        let adds = d
            .tables
            .get(&ModuleKind::Add)
            .map_or(&[][..], Vec::as_slice);
        let floor = super::launch_floor_us(
            adds.iter()
                .filter_map(|r| r.timing().map(|t| t.median_ms))
                .collect(),
        );
        if let Some(spec) = &mut d.device {
            spec.launch_us = floor;
        }
    }
    Ok(out)
}

/// `(gpu folder, path)` of every `mlp.csv` three levels under `compute`, sorted.
fn mlp_files(compute: &Path) -> Result<Vec<(String, PathBuf)>> {
    let list = |dir: &Path| -> Result<Vec<PathBuf>> {
        let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| cannot_read(dir, &e))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        out.sort();
        Ok(out)
    };
    let mut files = Vec::new();
    for gpu in list(compute)? {
        let name = gpu
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for org in list(&gpu)? {
            for model in list(&org)? {
                let path = model.join("mlp.csv");
                if path.is_file() {
                    files.push((name.clone(), path));
                }
            }
        }
    }
    Ok(files)
}

/// The ops of an `mlp.csv` row, in the file's column order.
const OPS: [&str; 10] = [
    "emb",
    "input_layernorm",
    "attn_pre_proj",
    "attn_rope",
    "attn_post_proj",
    "post_attention_layernorm",
    "mlp_up_proj",
    "mlp_act",
    "mlp_down_proj",
    "add",
];

/// The model's shape columns of one row.
struct Shape {
    heads: usize,
    kv_heads: usize,
    embd: usize,
    expanded: usize,
    vocab: usize,
    gated: bool,
    tokens: usize,
    tp: usize,
}

impl Shape {
    /// A shard width: `total / tp`, which must divide evenly.
    fn shard(&self, total: usize, what: &str) -> std::result::Result<usize, String> {
        if !total.is_multiple_of(self.tp) || total == 0 {
            return Err(format!(
                "{what} {total} does not split over {} tensor-parallel workers",
                self.tp
            ));
        }
        Ok(total / self.tp)
    }

    /// The module an op ran, or why it is not imported.
    fn spec(&self, op: &str) -> std::result::Result<ModuleSpec, String> {
        let linear = |in_features, out_features| {
            ModuleSpec::Linear(Linear {
                tokens: self.tokens,
                in_features,
                out_features,
                bias: false,
            })
        };
        let rows = |features| LayerNorm {
            tokens: self.tokens,
            features,
        };
        let flat = |features| Elementwise {
            shape: [1, self.tokens, features],
        };
        if self.heads == 0 || !self.embd.is_multiple_of(self.heads) {
            return Err(format!(
                "n_embd {} is not a multiple of n_head {}",
                self.embd, self.heads
            ));
        }
        let head_dim = self.embd / self.heads;
        Ok(match op {
            "attn_pre_proj" => linear(
                self.embd,
                self.shard((self.heads + 2 * self.kv_heads) * head_dim, "QKV width")?,
            ),
            "attn_post_proj" => linear(self.shard(self.embd, "n_embd")?, self.embd),
            "mlp_up_proj" => {
                let width = self.shard(self.expanded, "n_expanded_embd")?;
                linear(self.embd, if self.gated { 2 * width } else { width })
            }
            "mlp_down_proj" => linear(self.shard(self.expanded, "n_expanded_embd")?, self.embd),
            "input_layernorm" | "post_attention_layernorm" if self.gated => {
                ModuleSpec::RmsNorm(rows(self.embd))
            }
            "input_layernorm" | "post_attention_layernorm" => {
                ModuleSpec::LayerNorm(rows(self.embd))
            }
            "mlp_act" if self.gated => {
                return Err("fused SiLU-and-multiply: no module kind".into());
            }
            "mlp_act" => ModuleSpec::Gelu(flat(self.shard(self.expanded, "n_expanded_embd")?)),
            "add" => ModuleSpec::Add(flat(self.embd)),
            "emb" => ModuleSpec::Embedding(Embedding {
                tokens: self.tokens,
                vocab: self.shard(self.vocab, "vocab_size")?,
                features: self.embd,
            }),
            "attn_rope" => return Err("rotary embedding: no module kind".into()),
            other => return Err(format!("unknown op `{other}`")),
        })
    }
}

/// The kind an op's rows are counted under when skipped.
fn kind_of(op: &str, gated: bool) -> ModuleKind {
    match op {
        "attn_pre_proj" | "attn_post_proj" | "mlp_up_proj" | "mlp_down_proj" => ModuleKind::Linear,
        "input_layernorm" | "post_attention_layernorm" if gated => ModuleKind::RmsNorm,
        "input_layernorm" | "post_attention_layernorm" => ModuleKind::LayerNorm,
        "mlp_act" if gated => ModuleKind::Silu,
        "mlp_act" => ModuleKind::Gelu,
        "emb" => ModuleKind::Embedding,
        "attn_rope" => ModuleKind::Mul,
        _ => ModuleKind::Add,
    }
}

fn read_file(path: &Path, gpu: &str, devices: &mut Devices) -> Result<()> {
    let csv = CsvFile::read(path)?;
    let col = |name: &str| csv.column_for(name, " (Vidur's mlp.csv names the model's shape)");
    let heads = col("n_head")?;
    let kv_heads = col("n_kv_head")?;
    let embd = col("n_embd")?;
    let expanded = col("n_expanded_embd")?;
    let vocab = col("vocab_size")?;
    let gated = col("use_gated_mlp")?;
    let tokens = col("num_tokens")?;
    let tp = col("num_tensor_parallel_workers")?;
    let times: Vec<(&str, Option<Col<'_>>)> = OPS
        .iter()
        .map(|op| {
            let name = format!("time_stats.{op}.median");
            (*op, csv.has(&name).then(|| csv.column(&name)).transpose())
        })
        .map(|(op, c)| c.map(|c| (op, c)))
        .collect::<Result<_>>()?;
    let rows = devices.get(gpu, || device(gpu));
    for row in 0..csv.rows() {
        let shape = Shape {
            heads: heads.count(row)?,
            kv_heads: kv_heads.count(row)?,
            embd: embd.count(row)?,
            expanded: expanded.count(row)?,
            vocab: vocab.count(row)?,
            gated: gated.flag(row)?,
            tokens: tokens.count(row)?,
            tp: tp.count(row)?.max(1),
        };
        for (op, time) in &times {
            let kind = kind_of(op, shape.gated);
            if rows.device.is_none() {
                rows.skip(kind, format!("no published spec for GPU folder `{gpu}`"));
                continue;
            }
            let Some(time) = time else {
                rows.skip(kind, format!("`time_stats.{op}.median` not published"));
                continue;
            };
            if time.raw(row).is_none_or(|v| v.eq_ignore_ascii_case("nan")) {
                rows.skip(kind, format!("`{}` not published", time.name()));
                continue;
            }
            let spec = match shape.spec(op).and_then(checked_spec) {
                Ok(s) => s,
                Err(reason) => {
                    rows.skip(kind, format!("{op}: {reason}"));
                    continue;
                }
            };
            let ms = time.time_ms(row, 1.0)?;
            rows.push(record(
                spec,
                1,
                Phase::Inference,
                1,
                BACKEND,
                Timing::median_only(ms),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "time_stats.attn_pre_proj.median,time_stats.mlp_act.median,\
        time_stats.input_layernorm.median,time_stats.add.median,time_stats.attn_rope.median,\
        n_head,n_kv_head,n_embd,n_expanded_embd,vocab_size,use_gated_mlp,num_tokens,\
        num_tensor_parallel_workers";

    fn folder(rows: &[&str]) -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("compute/a40/meta-llama/Llama-2-7b-hf");
        std::fs::create_dir_all(&dir).unwrap();
        let mut text = format!("{HEADER}\n");
        for r in rows {
            text.push_str(r);
            text.push('\n');
        }
        std::fs::write(dir.join("mlp.csv"), text).unwrap();
        tmp
    }

    #[test]
    fn ops_become_the_kernels_that_ran_after_the_tp_split() {
        let tmp = folder(&["0.5,0.1,0.02,0.03,0.04,32,8,4096,14336,128256,True,512,2"]);
        let import = import(tmp.path()).unwrap();
        let d = &import.devices[0];
        let spec = d.device.as_ref().unwrap();
        assert_eq!(spec.dtype, DType::Fp16);
        assert_eq!(spec.peak_gflops, 149_700.0);
        assert_eq!(spec.slug(), "nvidia-a40-fp16");
        // The one residual add of 0.03 ms is the floor.
        assert_eq!(spec.launch_us, Some(30.0));
        let linear = &d.tables[&ModuleKind::Linear][0];
        // (32 + 2 x 8) heads of 128 over 2 workers.
        assert_eq!(
            linear.spec,
            ModuleSpec::Linear(Linear {
                tokens: 512,
                in_features: 4096,
                out_features: 3072,
                bias: false,
            })
        );
        assert_eq!(linear.timing().unwrap().median_ms, 0.5);
        assert!(d.tables.contains_key(&ModuleKind::RmsNorm));
        assert!(d.tables.contains_key(&ModuleKind::Add));
        // The fused SiLU-and-multiply and the rotary embedding have no kind: counted, not kept.
        assert_eq!(d.skipped[&ModuleKind::Silu].values().sum::<usize>(), 1);
        assert_eq!(d.skipped[&ModuleKind::Mul].values().sum::<usize>(), 1);
    }

    #[test]
    fn bad_cells_name_the_file_line_and_value() {
        let tmp = folder(&["-0.5,0.1,0.02,0.03,0.04,32,8,4096,14336,128256,True,512,1"]);
        let err = import(tmp.path()).unwrap_err().to_string();
        assert!(err.contains("mlp.csv") && err.contains("negative"), "{err}");
        let tmp = folder(&["0.5,0.1,0.02,0.03,0.04,32,8,4096,14336,128256,maybe,512,1"]);
        let err = import(tmp.path()).unwrap_err().to_string();
        assert!(err.contains("`maybe`"), "{err}");
        // A width that does not split over the workers is skipped with its reason.
        let tmp = folder(&["0.5,0.1,0.02,0.03,0.04,32,8,4096,14336,128256,True,512,5"]);
        let import = import(tmp.path()).unwrap();
        let skipped = &import.devices[0].skipped[&ModuleKind::Linear];
        assert!(
            skipped.keys().any(|k| k.contains("does not split")),
            "{skipped:?}"
        );
    }

    #[test]
    fn a_folder_without_vidur_files_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let err = import(tmp.path()).unwrap_err().to_string();
        assert!(err.contains("mlp.csv"), "{err}");
    }
}
