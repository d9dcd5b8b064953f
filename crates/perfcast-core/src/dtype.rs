//! Numeric data types a GPU module runs in, the per-type peaks a device spec publishes, and the
//! device's links to its peers and host.
//!
//! A device spec's `peak_gflops` counts one type (its `dtype`, fp32 unless said): asking for a
//! module in another type is asking for the same silicon at another peak and with elements of
//! another width, so [`crate::DeviceSpec::at_dtype`] gives the spec as that type sees it and
//! every roofline and feature built from it follows.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The element type a module computes in.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// IEEE single precision on the vector units.
    #[default]
    Fp32,
    /// fp32 storage, GEMMs on tensor cores in TF32.
    Tf32,
    /// IEEE half precision on tensor cores.
    Fp16,
    /// bfloat16 on tensor cores.
    Bf16,
    /// 8-bit floats: named so specs can carry the peak, refused for predictions until data
    /// measured in it exists.
    Fp8,
}

impl DType {
    /// Every type, in [`DType::name`] order of the help text.
    pub const ALL: [DType; 5] = [
        DType::Fp32,
        DType::Tf32,
        DType::Fp16,
        DType::Bf16,
        DType::Fp8,
    ];

    /// The type's name in files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            DType::Fp32 => "fp32",
            DType::Tf32 => "tf32",
            DType::Fp16 => "fp16",
            DType::Bf16 => "bf16",
            DType::Fp8 => "fp8",
        }
    }

    /// Bytes of one element in memory (TF32 is stored as fp32).
    pub fn bytes(self) -> f64 {
        match self {
            DType::Fp32 | DType::Tf32 => 4.0,
            DType::Fp16 | DType::Bf16 => 2.0,
            DType::Fp8 => 1.0,
        }
    }

    /// Whether this is fp32 (the default, omitted from files).
    pub fn is_fp32(&self) -> bool {
        *self == DType::Fp32
    }

    /// The type a prediction may be asked in: every type but fp8, which has no measured
    /// kernel behind any model yet.
    pub fn predictable(self) -> Result<DType> {
        if self == DType::Fp8 {
            return Err(Error::InvalidContext(
                "data type `fp8` is named but not predicted yet: no fp8 kernel was measured \
                 (use fp16, bf16, tf32 or fp32)"
                    .into(),
            ));
        }
        Ok(self)
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for DType {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "fp32" | "float32" | "float" | "f32" => Ok(DType::Fp32),
            "tf32" => Ok(DType::Tf32),
            "fp16" | "float16" | "half" | "f16" => Ok(DType::Fp16),
            "bf16" | "bfloat16" => Ok(DType::Bf16),
            "fp8" | "float8" | "e4m3" | "e5m2" => Ok(DType::Fp8),
            other => Err(Error::InvalidContext(format!(
                "unknown data type `{other}` (expected fp32, tf32, fp16, bf16 or fp8)"
            ))),
        }
    }
}

/// Published dense peaks per data type, GFLOP/s (tensor-core rates without sparsity); `None`
/// where the device has no such unit or the vendor publishes no figure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TypePeaks {
    /// fp32 (kept here when a spec's `dtype` is another type).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp32: Option<f64>,
    /// TF32 tensor cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tf32: Option<f64>,
    /// fp16 tensor cores (fp32 accumulate where the vendor gives both).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp16: Option<f64>,
    /// bf16 tensor cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bf16: Option<f64>,
    /// fp8 tensor cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp8: Option<f64>,
}

impl TypePeaks {
    /// The peak of one type, if published.
    pub fn get(&self, dtype: DType) -> Option<f64> {
        match dtype {
            DType::Fp32 => self.fp32,
            DType::Tf32 => self.tf32,
            DType::Fp16 => self.fp16,
            DType::Bf16 => self.bf16,
            DType::Fp8 => self.fp8,
        }
    }

    fn slot(&mut self, dtype: DType) -> &mut Option<f64> {
        match dtype {
            DType::Fp32 => &mut self.fp32,
            DType::Tf32 => &mut self.tf32,
            DType::Fp16 => &mut self.fp16,
            DType::Bf16 => &mut self.bf16,
            DType::Fp8 => &mut self.fp8,
        }
    }

    /// Sets one type's peak.
    pub fn set(&mut self, dtype: DType, gflops: Option<f64>) {
        *self.slot(dtype) = gflops;
    }

    /// Whether no type has a figure.
    pub fn is_empty(&self) -> bool {
        DType::ALL.iter().all(|&d| self.get(d).is_none())
    }
}

/// A device's links, GB/s per direction; `None` where not published.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Links {
    /// NVLink / xGMI / Infinity Fabric bandwidth to peers, all links together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_gbs: Option<f64>,
    /// Host link (PCIe generation and width as the board is sold).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_gbs: Option<f64>,
    /// Other GPUs the peer link reaches: 1 for a bridge joining a pair of PCIe boards; `None`
    /// for every GPU of the node (NVSwitch, an xGMI mesh).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_gpus: Option<u32>,
}

impl Links {
    /// Whether neither link is known.
    pub fn is_empty(&self) -> bool {
        self.peer_gbs.is_none() && self.pcie_gbs.is_none()
    }

    /// The peer link's bandwidth where it joins every GPU of a node: a ring over more GPUs
    /// than a bridge's pair runs at the host link's pace.
    pub fn node_peer_gbs(&self) -> Option<f64> {
        self.peer_gbs.filter(|_| self.peer_gpus.is_none())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_widths_are_the_formats() {
        for d in DType::ALL {
            assert_eq!(d.name().parse::<DType>().unwrap(), d);
        }
        assert_eq!("bfloat16".parse::<DType>().unwrap(), DType::Bf16);
        assert_eq!(DType::Fp16.bytes(), 2.0);
        assert_eq!(DType::Tf32.bytes(), 4.0);
        let err = "int4".parse::<DType>().unwrap_err().to_string();
        assert!(err.contains("`int4`"), "{err}");
        let err = DType::Fp8.predictable().unwrap_err().to_string();
        assert!(err.contains("fp8"), "{err}");
    }

    #[test]
    fn peaks_round_trip_and_omit_unknown_types() {
        let mut p = TypePeaks::default();
        assert!(p.is_empty());
        p.set(DType::Bf16, Some(989_400.0));
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(json, r#"{"bf16":989400.0}"#);
        let back: TypePeaks = serde_json::from_str(&json).unwrap();
        assert_eq!(back.get(DType::Bf16), Some(989_400.0));
        assert_eq!(back.get(DType::Fp16), None);
    }
}
