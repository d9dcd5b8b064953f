//! The GPUs people rent and buy in 2026, from their vendors' datasheets, and the per-type peaks
//! and links of the older devices [`crate::known`] already lists.
//!
//! Peaks are dense (no structured sparsity), GFLOP/s; tensor-core fp16 rates are those with
//! fp32 accumulation where a vendor publishes both (GeForce and workstation boards halve it
//! against fp16 accumulation). Links are GB/s per direction: NVLink's quoted figure is both
//! directions of every link together, so it is halved here; PCIe 4.0 x16 is 32 GB/s, 5.0 x16 64.
//! A board sold as two dies (MI250X) is described as the board.

use crate::DeviceSpec;
use crate::dtype::{Links, TypePeaks};
use crate::gpus::Published;

/// A datasheet entry: the fp32 spec, the per-type peaks, the links and the board power.
#[derive(Clone, Copy, Debug)]
pub struct Datasheet {
    /// The fp32 figures (name, peak, bandwidth, SMs, shaders, clock, memory, L2).
    pub base: Published,
    /// TF32 tensor peak, GFLOP/s.
    pub tf32: Option<f64>,
    /// fp16 tensor peak, GFLOP/s.
    pub fp16: Option<f64>,
    /// bf16 tensor peak, GFLOP/s.
    pub bf16: Option<f64>,
    /// fp8 tensor peak, GFLOP/s.
    pub fp8: Option<f64>,
    /// Peer link (NVLink, xGMI), GB/s per direction.
    pub peer_gbs: Option<f64>,
    /// Host link, GB/s per direction.
    pub pcie_gbs: Option<f64>,
    /// Board power, W.
    pub tdp_w: f64,
}

impl Datasheet {
    /// As a [`DeviceSpec`] (fp32 peak, source: published).
    pub fn spec(&self) -> DeviceSpec {
        let mut spec = self.base.spec();
        self.apply(&mut spec);
        spec
    }

    /// Sets the per-type peaks, links and power of `spec` from this entry.
    pub fn apply(&self, spec: &mut DeviceSpec) {
        spec.peaks = TypePeaks {
            fp32: None,
            tf32: self.tf32,
            fp16: self.fp16,
            bf16: self.bf16,
            fp8: self.fp8,
        };
        spec.links = links(&spec.name, self.peer_gbs, self.pcie_gbs);
        spec.tdp_w = Some(self.tdp_w);
    }
}

/// PCIe boards whose NVLink is a bridge to one peer (their datasheets), not a switch.
const BRIDGED: [&str; 4] = [
    "NVIDIA A40",
    "NVIDIA H100 PCIe",
    "NVIDIA A100-PCIE-40GB",
    "NVIDIA A100 80GB PCIe",
];

fn links(name: &str, peer_gbs: Option<f64>, pcie_gbs: Option<f64>) -> Links {
    Links {
        peer_gbs,
        pcie_gbs,
        peer_gpus: (peer_gbs.is_some() && BRIDGED.contains(&name)).then_some(1),
    }
}

/// One row: base, then tf32, fp16, bf16, fp8 (GFLOP/s), peer and host links (GB/s), power.
#[allow(clippy::too_many_arguments)]
const fn sheet(
    base: Published,
    tf32: Option<f64>,
    fp16: Option<f64>,
    bf16: Option<f64>,
    fp8: Option<f64>,
    peer_gbs: Option<f64>,
    pcie_gbs: Option<f64>,
    tdp_w: f64,
) -> Datasheet {
    Datasheet {
        base,
        tf32,
        fp16,
        bf16,
        fp8,
        peer_gbs,
        pcie_gbs,
        tdp_w,
    }
}

const A100_TENSOR: (Option<f64>, Option<f64>, Option<f64>) =
    (Some(156_000.0), Some(312_000.0), Some(312_000.0));
const HOPPER_TENSOR: (Option<f64>, Option<f64>, Option<f64>, Option<f64>) = (
    Some(494_700.0),
    Some(989_400.0),
    Some(989_400.0),
    Some(1_978_900.0),
);

/// GPUs of the 2026 catalogue that no other table lists.
pub const CURRENT: [Datasheet; 12] = [
    sheet(
        Published::gpu(
            "NVIDIA A100-SXM4-80GB",
            19_500.0,
            2_039.0,
            108,
            6_912,
            1_410.0,
            80.0,
            40.0,
            "NVIDIA A100 datasheet (SXM4 80GB)",
        ),
        A100_TENSOR.0,
        A100_TENSOR.1,
        A100_TENSOR.2,
        None,
        Some(300.0),
        Some(32.0),
        400.0,
    ),
    sheet(
        Published::gpu(
            "NVIDIA A40",
            37_400.0,
            696.0,
            84,
            10_752,
            1_740.0,
            48.0,
            6.0,
            "NVIDIA A40 datasheet; NVLink bridge to one peer",
        ),
        Some(74_800.0),
        Some(149_700.0),
        Some(149_700.0),
        None,
        Some(56.25),
        Some(32.0),
        300.0,
    ),
    sheet(
        Published::gpu(
            "NVIDIA H100 PCIe",
            51_200.0,
            2_000.0,
            114,
            14_592,
            1_755.0,
            80.0,
            50.0,
            "NVIDIA H100 datasheet (PCIe); NVLink bridge to one peer",
        ),
        Some(378_000.0),
        Some(756_000.0),
        Some(756_000.0),
        Some(1_513_000.0),
        Some(300.0),
        Some(64.0),
        350.0,
    ),
    sheet(
        Published::gpu(
            "NVIDIA H200",
            66_900.0,
            4_800.0,
            132,
            16_896,
            1_980.0,
            141.0,
            50.0,
            "NVIDIA H200 datasheet (SXM)",
        ),
        HOPPER_TENSOR.0,
        HOPPER_TENSOR.1,
        HOPPER_TENSOR.2,
        HOPPER_TENSOR.3,
        Some(450.0),
        Some(64.0),
        700.0,
    ),
    sheet(
        Published::gpu(
            "NVIDIA GH200",
            66_900.0,
            4_000.0,
            132,
            16_896,
            1_980.0,
            96.0,
            50.0,
            "NVIDIA GH200 datasheet (96 GB HBM3); the host link is NVLink-C2C to Grace",
        ),
        HOPPER_TENSOR.0,
        HOPPER_TENSOR.1,
        HOPPER_TENSOR.2,
        HOPPER_TENSOR.3,
        Some(450.0),
        Some(450.0),
        1_000.0,
    ),
    sheet(
        Published::gpu(
            "NVIDIA B200",
            75_000.0,
            8_000.0,
            148,
            18_944,
            1_965.0,
            180.0,
            126.0,
            "NVIDIA HGX B200 datasheet, per GPU (the 8-GPU board's figures over 8)",
        ),
        Some(1_125_000.0),
        Some(2_250_000.0),
        Some(2_250_000.0),
        Some(4_500_000.0),
        Some(900.0),
        Some(64.0),
        1_000.0,
    ),
    sheet(
        Published::gpu(
            "NVIDIA L40S",
            91_600.0,
            864.0,
            142,
            18_176,
            2_520.0,
            48.0,
            96.0,
            "NVIDIA L40S datasheet",
        ),
        Some(183_000.0),
        Some(362_050.0),
        Some(362_050.0),
        Some(733_000.0),
        None,
        Some(32.0),
        350.0,
    ),
    sheet(
        Published::gpu(
            "NVIDIA A10G",
            35_000.0,
            600.0,
            80,
            10_240,
            1_710.0,
            24.0,
            6.0,
            "AWS publishes no datasheet: TechPowerUp's GA102 A10G figures; tensor rates \
             at GeForce-class (half) throughput assumed",
        ),
        Some(35_000.0),
        Some(70_000.0),
        Some(70_000.0),
        None,
        None,
        Some(32.0),
        300.0,
    ),
    sheet(
        Published::gpu(
            "NVIDIA GeForce RTX 4090",
            82_600.0,
            1_008.0,
            128,
            16_384,
            2_520.0,
            24.0,
            72.0,
            "NVIDIA Ada whitepaper (RTX 4090); fp16 with fp32 accumulate",
        ),
        Some(82_600.0),
        Some(165_200.0),
        Some(165_200.0),
        Some(330_300.0),
        None,
        Some(32.0),
        450.0,
    ),
    sheet(
        Published::gpu(
            "NVIDIA RTX 6000 Ada Generation",
            91_100.0,
            960.0,
            142,
            18_176,
            2_505.0,
            48.0,
            96.0,
            "NVIDIA RTX 6000 Ada datasheet",
        ),
        Some(182_100.0),
        Some(364_200.0),
        Some(364_200.0),
        Some(728_500.0),
        None,
        Some(32.0),
        300.0,
    ),
    sheet(
        Published::gpu(
            "AMD Instinct MI250X",
            47_900.0,
            3_276.8,
            220,
            14_080,
            1_700.0,
            128.0,
            16.0,
            "AMD MI250X datasheet (the two-die board); fp32 vector peak",
        ),
        None,
        Some(383_000.0),
        Some(383_000.0),
        None,
        Some(400.0),
        Some(32.0),
        560.0,
    ),
    sheet(
        Published::gpu(
            "AMD Instinct MI300X",
            81_700.0,
            5_300.0,
            304,
            19_456,
            2_100.0,
            192.0,
            256.0,
            "AMD MI300X datasheet; fp32 vector peak; last-level cache is the 256 MB Infinity Cache",
        ),
        Some(653_700.0),
        Some(1_307_400.0),
        Some(1_307_400.0),
        Some(2_614_900.0),
        Some(448.0),
        Some(64.0),
        750.0,
    ),
];

/// Per-type peaks, links and power of devices the older tables list (by name), from the same
/// vendors' datasheets: `(name, tf32, fp16, bf16, fp8, peer GB/s, host GB/s, power W)`.
#[allow(clippy::type_complexity)]
pub const EXTRA: &[(
    &str,
    Option<f64>,
    Option<f64>,
    Option<f64>,
    Option<f64>,
    Option<f64>,
    Option<f64>,
    f64,
)] = &[
    (
        "NVIDIA A100-PCIE-40GB",
        A100_TENSOR.0,
        A100_TENSOR.1,
        A100_TENSOR.2,
        None,
        Some(300.0),
        Some(32.0),
        250.0,
    ),
    (
        "NVIDIA A100-SXM4-40GB",
        A100_TENSOR.0,
        A100_TENSOR.1,
        A100_TENSOR.2,
        None,
        Some(300.0),
        Some(32.0),
        400.0,
    ),
    (
        "NVIDIA A100 80GB PCIe",
        A100_TENSOR.0,
        A100_TENSOR.1,
        A100_TENSOR.2,
        None,
        Some(300.0),
        Some(32.0),
        300.0,
    ),
    (
        "NVIDIA H100 80GB HBM3",
        HOPPER_TENSOR.0,
        HOPPER_TENSOR.1,
        HOPPER_TENSOR.2,
        HOPPER_TENSOR.3,
        Some(450.0),
        Some(64.0),
        700.0,
    ),
    (
        "NVIDIA L4",
        Some(60_000.0),
        Some(121_000.0),
        Some(121_000.0),
        Some(242_500.0),
        None,
        Some(32.0),
        72.0,
    ),
    (
        "Tesla T4",
        None,
        Some(65_000.0),
        None,
        None,
        None,
        Some(16.0),
        70.0,
    ),
    (
        "Tesla V100-PCIE-32GB",
        None,
        Some(112_000.0),
        None,
        None,
        None,
        Some(16.0),
        250.0,
    ),
    (
        "Tesla V100-PCIE-16GB",
        None,
        Some(112_000.0),
        None,
        None,
        None,
        Some(16.0),
        250.0,
    ),
    (
        "Tesla V100-SXM2-16GB",
        None,
        Some(125_000.0),
        None,
        None,
        Some(150.0),
        Some(16.0),
        300.0,
    ),
    (
        "Tesla P100-PCIE-16GB",
        None,
        Some(18_700.0),
        None,
        None,
        None,
        Some(16.0),
        250.0,
    ),
    (
        "AMD Instinct MI100",
        None,
        Some(184_600.0),
        Some(92_300.0),
        None,
        Some(138.0),
        Some(32.0),
        300.0,
    ),
    (
        "AMD Instinct MI210",
        None,
        Some(181_000.0),
        Some(181_000.0),
        None,
        Some(150.0),
        Some(32.0),
        300.0,
    ),
    (
        "AMD Instinct MI250",
        None,
        Some(181_000.0),
        Some(181_000.0),
        None,
        Some(200.0),
        Some(32.0),
        560.0,
    ),
];

/// Sets the per-type peaks, links and power [`EXTRA`] lists for `spec`'s name, if any.
pub fn complete(spec: &mut DeviceSpec) {
    if let Some(&(_, tf32, fp16, bf16, fp8, peer, pcie, tdp)) =
        EXTRA.iter().find(|e| e.0 == spec.name)
    {
        spec.peaks = TypePeaks {
            fp32: None,
            tf32,
            fp16,
            bf16,
            fp8,
        };
        spec.links = links(&spec.name, peer, pcie);
        spec.tdp_w = spec.tdp_w.or(Some(tdp));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    #[test]
    fn every_entry_is_valid_and_tensor_peaks_exceed_fp32() {
        let mut names = std::collections::HashSet::new();
        for s in CURRENT.iter().map(Datasheet::spec) {
            s.validate().unwrap();
            assert!(names.insert(s.name.clone()), "{} twice", s.name);
            for d in [DType::Tf32, DType::Fp16, DType::Bf16, DType::Fp8] {
                if let Some(p) = s.peak_for(d) {
                    assert!(p >= s.peak_gflops, "{}: {d} {p}", s.name);
                }
            }
            // fp32 peaks are 2 FLOP per shader per cycle at the boost clock.
            let derived = 2.0 * f64::from(s.threads) * s.clock_mhz / 1e3;
            assert!(
                (derived - s.peak_gflops).abs() / s.peak_gflops < 0.03,
                "{}: {derived} vs {}",
                s.name,
                s.peak_gflops
            );
        }
        for e in EXTRA {
            assert!(
                crate::known::known().iter().any(|s| s.name == e.0),
                "{} is not a known device",
                e.0
            );
        }
    }

    #[test]
    fn a_device_seen_in_half_precision_counts_its_tensor_peak() {
        let h200 = CURRENT
            .iter()
            .find(|d| d.base.name == "NVIDIA H200")
            .unwrap();
        let bf16 = h200.spec().at_dtype(DType::Bf16).unwrap();
        assert_eq!(bf16.peak_gflops, 989_400.0);
        assert_eq!(bf16.peak_for(DType::Fp32), Some(66_900.0));
        assert_eq!(bf16.element_scale(), 0.5);
        let back = bf16.at_dtype(DType::Fp32).unwrap();
        assert_eq!(back.peak_gflops, 66_900.0);
        let mi250x = CURRENT
            .iter()
            .find(|d| d.base.name.contains("MI250X"))
            .unwrap();
        let err = mi250x.spec().at_dtype(DType::Tf32).unwrap_err().to_string();
        assert!(err.contains("no `tf32` peak"), "{err}");
    }
}
