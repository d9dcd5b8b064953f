//! A module from command-line style flags (`perfcast predict conv2d --input 3x224x224
//! --out-channels 64 --kernel 7`): the flags a kind needs, built through the spec's JSON form
//! so the spec's own checks apply, with errors that name the missing flag.

use crate::error::{Error, Result};
use crate::spec::{ModuleKind, ModuleSpec};

/// The shape and hyper-parameter flags of one module; `None` where not given (a kind's
/// optional ones take its defaults).
#[derive(Clone, Debug, Default)]
pub struct SpecFlags {
    /// Input shape per sample: `CxHxW` for conv and pools, `TOKENSxFEATURES` or `FEATURES` for
    /// linear and layernorm, any shape for elementwise kinds.
    pub input: Option<String>,
    /// conv2d: output channels.
    pub out_channels: Option<usize>,
    /// linear: output features (embedding: the vocabulary).
    pub out_features: Option<usize>,
    /// conv2d and pools: kernel size (square).
    pub kernel: Option<usize>,
    /// conv2d and pools: stride.
    pub stride: Option<usize>,
    /// conv2d and pools: padding.
    pub padding: Option<usize>,
    /// conv2d: dilation.
    pub dilation: Option<usize>,
    /// conv2d: groups.
    pub groups: Option<usize>,
    /// conv2d and linear: no bias.
    pub no_bias: bool,
    /// matmul: heads.
    pub heads: Option<usize>,
    /// matmul: rows of the left operand.
    pub m: Option<usize>,
    /// matmul: inner dimension.
    pub k: Option<usize>,
    /// matmul: columns of the right operand.
    pub n: Option<usize>,
}

/// `3x224x224` (or `3,224,224`) as sizes.
fn dims(text: &str) -> Result<Vec<usize>> {
    text.split(['x', 'X', ','])
        .map(|d| {
            d.trim()
                .parse::<usize>()
                .ok()
                .filter(|v| *v > 0)
                .ok_or_else(|| {
                    Error::Input(format!("`--input {text}`: `{d}` is not a positive size"))
                })
        })
        .collect()
}

impl SpecFlags {
    /// The module of `kind` the flags describe, validated.
    pub fn spec(&self, kind: ModuleKind) -> Result<ModuleSpec> {
        use serde_json::{Value, json};
        let a = self;
        let input = a.input.as_deref().map(dims).transpose()?;
        let need = |name: &str| Error::Input(format!("`perfcast predict {kind}` needs `--{name}`"));
        let chw = || -> Result<(usize, [usize; 2])> {
            match input.as_deref() {
                Some([c, h, w]) => Ok((*c, [*h, *w])),
                _ => Err(Error::Input(format!(
                    "`perfcast predict {kind}` needs `--input CxHxW`"
                ))),
            }
        };
        let tf = || -> Result<(usize, usize)> {
            match input.as_deref() {
                Some([f]) => Ok((1, *f)),
                Some([t, f]) => Ok((*t, *f)),
                _ => Err(Error::Input(format!(
                    "`perfcast predict {kind}` needs `--input FEATURES` or `TOKENSxFEATURES`"
                ))),
            }
        };
        let mut v: Value = match kind {
            ModuleKind::Conv2d => {
                let (c, hw) = chw()?;
                json!({"in_channels": c, "input_hw": hw,
                   "out_channels": a.out_channels.ok_or_else(|| need("out-channels"))?,
                   "kernel": a.kernel.ok_or_else(|| need("kernel"))?,
                   "stride": a.stride.unwrap_or(1), "padding": a.padding.unwrap_or(0),
                   "dilation": a.dilation.unwrap_or(1), "groups": a.groups.unwrap_or(1),
                   "bias": !a.no_bias})
            }
            ModuleKind::Linear => {
                let (t, f) = tf()?;
                json!({"tokens": t, "in_features": f,
                   "out_features": a.out_features.ok_or_else(|| need("out-features"))?,
                   "bias": !a.no_bias})
            }
            ModuleKind::Matmul => json!({"heads": a.heads.unwrap_or(1),
            "m": a.m.ok_or_else(|| need("m"))?, "k": a.k.ok_or_else(|| need("k"))?,
            "n": a.n.ok_or_else(|| need("n"))?}),
            ModuleKind::MaxPool2d | ModuleKind::AvgPool2d => {
                let (c, hw) = chw()?;
                let mut p = json!({"channels": c, "input_hw": hw,
                "kernel": a.kernel.ok_or_else(|| need("kernel"))?, "padding": a.padding.unwrap_or(0)});
                if let Some(s) = a.stride {
                    p["stride"] = json!(s);
                }
                p
            }
            ModuleKind::BatchNorm2d => {
                let (c, hw) = chw()?;
                json!({"channels": c, "input_hw": hw})
            }
            ModuleKind::LayerNorm | ModuleKind::RmsNorm => {
                let (t, f) = tf()?;
                json!({"tokens": t, "features": f})
            }
            ModuleKind::Embedding => {
                let (t, f) = tf()?;
                json!({"tokens": t, "features": f,
                   "vocab": a.out_features.ok_or_else(|| need("out-features (the vocabulary)"))?})
            }
            _ => {
                let mut shape = input.ok_or_else(|| need("input"))?;
                if shape.len() > 3 {
                    return Err(Error::Input(
                        "`--input`: at most 3 dimensions per sample".into(),
                    ));
                }
                while shape.len() < 3 {
                    shape.insert(0, 1);
                }
                json!({"shape": shape})
            }
        };
        v["kind"] = json!(kind.name());
        let spec: ModuleSpec = serde_json::from_value(v)
            .map_err(|e| Error::Input(format!("building the module: {e}")))?;
        spec.validate()?;
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_build_checked_specs_and_name_what_is_missing() {
        let conv = SpecFlags {
            input: Some("3x224x224".into()),
            out_channels: Some(64),
            kernel: Some(7),
            stride: Some(2),
            padding: Some(3),
            ..SpecFlags::default()
        };
        let spec = conv.spec(ModuleKind::Conv2d).expect("conv2d");
        assert_eq!(spec.output_shape().expect("shape"), vec![64, 112, 112]);
        let err = SpecFlags {
            kernel: None,
            ..conv.clone()
        }
        .spec(ModuleKind::Conv2d)
        .expect_err("no kernel")
        .to_string();
        assert_eq!(err, "`perfcast predict conv2d` needs `--kernel`");
        let relu = SpecFlags {
            input: Some("8".into()),
            ..SpecFlags::default()
        };
        assert_eq!(
            relu.spec(ModuleKind::Relu)
                .expect("relu")
                .output_shape()
                .expect("shape"),
            vec![1, 1, 8]
        );
        let err = SpecFlags {
            input: Some("3x0".into()),
            ..SpecFlags::default()
        }
        .spec(ModuleKind::Relu)
        .expect_err("zero size")
        .to_string();
        assert_eq!(err, "`--input 3x0`: `0` is not a positive size");
    }
}
