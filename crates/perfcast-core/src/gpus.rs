//! Published specifications of the devices in the Justus and DeepBench data sets.
//!
//! Neither data set publishes figures for its hardware (DeepBench's `specs.csv` names the GPU
//! model and library versions only), so these are the vendors' published figures: peak fp32
//! GFLOP/s (FMA counted as two FLOPs, at the boost clock given unless noted), memory bandwidth
//! GB/s, SMs (AMD: compute units), CUDA cores (AMD: stream processors), clock MHz, memory GB,
//! L2 MB. Where a data set does not say which variant of a model it used, the entry says which
//! one is assumed and why. Multi-die boards (K80, M60) are described per die: a TensorFlow
//! process of the benchmark ran on one die.

use crate::{Caches, DeviceKind, DeviceSpec, SpecSource};

/// One published spec.
#[derive(Clone, Copy, Debug)]
pub struct Published {
    /// Device name, as `nvidia-smi` (or the vendor) spells it.
    pub name: &'static str,
    /// CPU or GPU.
    pub kind: DeviceKind,
    /// Peak fp32 GFLOP/s.
    pub gflops: f64,
    /// Memory bandwidth, GB/s.
    pub bandwidth_gbs: f64,
    /// SMs / compute units (GPU) or cores (CPU).
    pub cores: u32,
    /// Shader cores (GPU) or hardware threads (CPU).
    pub threads: u32,
    /// Clock, MHz.
    pub clock_mhz: f64,
    /// Memory, GB.
    pub memory_gb: f64,
    /// Last-level cache (L2 on GPUs), MB.
    pub l2_mb: f64,
    /// Where the figures come from and what was assumed.
    pub note: &'static str,
}

impl Published {
    /// A GPU's row of a published table: name, fp32 GFLOP/s, GB/s, SMs, shader cores, clock
    /// MHz, memory GB, L2 MB, and where the figures come from.
    #[allow(clippy::too_many_arguments)]
    pub const fn gpu(
        name: &'static str,
        gflops: f64,
        bandwidth_gbs: f64,
        sms: u32,
        shaders: u32,
        clock_mhz: f64,
        memory_gb: f64,
        l2_mb: f64,
        note: &'static str,
    ) -> Published {
        Published {
            name,
            kind: DeviceKind::Gpu,
            gflops,
            bandwidth_gbs,
            cores: sms,
            threads: shaders,
            clock_mhz,
            memory_gb,
            l2_mb,
            note,
        }
    }

    /// As a [`DeviceSpec`] (source: published).
    pub fn spec(&self) -> DeviceSpec {
        DeviceSpec {
            name: self.name.to_string(),
            kind: self.kind,
            peak_gflops: self.gflops,
            mem_bandwidth_gbs: self.bandwidth_gbs,
            cores: self.cores,
            threads: self.threads,
            clock_mhz: self.clock_mhz,
            memory_gb: self.memory_gb,
            cache_mb: self.l2_mb,
            caches: match self.kind {
                DeviceKind::Gpu => Caches {
                    l1d_kb: None,
                    l2_kb: Some(self.l2_mb * 1024.0),
                    l3_kb: None,
                    uncached_weights: None,
                },
                // Knights Landing: 32 KiB L1d per core, 1 MiB L2 per two-core tile.
                DeviceKind::Cpu => Caches {
                    l1d_kb: Some(32.0),
                    l2_kb: Some(512.0),
                    l3_kb: None,
                    uncached_weights: None,
                },
            },
            source: SpecSource::Published,
            software: None,
            launch_us: None,
            tdp_w: None,
            dtype: Default::default(),
            peaks: Default::default(),
            links: Default::default(),
        }
    }
}

/// GeForce GTX 1080 Ti (GP102).
pub const GTX_1080_TI: Published = Published {
    name: "GeForce GTX 1080 Ti",
    kind: DeviceKind::Gpu,
    gflops: 11340.0,
    bandwidth_gbs: 484.0,
    cores: 28,
    threads: 3584,
    clock_mhz: 1582.0,
    memory_gb: 11.0,
    l2_mb: 2.75,
    note: "NVIDIA product page",
};
/// Tesla K40 (GK110B); NVIDIA quotes its 4.29 TFLOP/s at the 745 MHz base clock.
pub const K40: Published = Published {
    name: "Tesla K40",
    kind: DeviceKind::Gpu,
    gflops: 4290.0,
    bandwidth_gbs: 288.0,
    cores: 15,
    threads: 2880,
    clock_mhz: 745.0,
    memory_gb: 12.0,
    l2_mb: 1.5,
    note: "NVIDIA K40 datasheet (peak at base clock)",
};
/// One GK210 die of a Tesla K80 (the board has two).
pub const K80_DIE: Published = Published {
    name: "Tesla K80 (one GK210)",
    kind: DeviceKind::Gpu,
    gflops: 4368.0,
    bandwidth_gbs: 240.0,
    cores: 13,
    threads: 2496,
    clock_mhz: 875.0,
    memory_gb: 12.0,
    l2_mb: 1.5,
    note: "NVIDIA K80 datasheet, halved: 8.73 TFLOP/s, 480 GB/s, 24 GB per board",
};
/// One GM204 die of a Tesla M60 (the board has two).
pub const M60_DIE: Published = Published {
    name: "Tesla M60 (one GM204)",
    kind: DeviceKind::Gpu,
    gflops: 4825.0,
    bandwidth_gbs: 160.0,
    cores: 16,
    threads: 2048,
    clock_mhz: 1178.0,
    memory_gb: 8.0,
    l2_mb: 2.0,
    note: "NVIDIA M60 datasheet, halved: 9.65 TFLOP/s, 320 GB/s, 16 GB per board",
};
/// Tesla M40 (GM200), 12 GB.
pub const M40: Published = Published {
    name: "Tesla M40",
    kind: DeviceKind::Gpu,
    gflops: 6844.0,
    bandwidth_gbs: 288.0,
    cores: 24,
    threads: 3072,
    clock_mhz: 1114.0,
    memory_gb: 12.0,
    l2_mb: 3.0,
    note: "NVIDIA M40 datasheet; the 12 GB board assumed (DeepBench ran it with CUDA 7.5, before the 24 GB board)",
};
/// Tesla P100 for PCIe, 16 GB.
pub const P100_PCIE: Published = Published {
    name: "Tesla P100-PCIE-16GB",
    kind: DeviceKind::Gpu,
    gflops: 9300.0,
    bandwidth_gbs: 732.0,
    cores: 56,
    threads: 3584,
    clock_mhz: 1303.0,
    memory_gb: 16.0,
    l2_mb: 4.0,
    note: "NVIDIA P100 datasheet (PCIe); the 16 GB board assumed, the data sets do not say",
};
/// Tesla V100 for PCIe, 16 GB (the 32 GB board has the same compute and bandwidth).
pub const V100_PCIE: Published = Published {
    name: "Tesla V100-PCIE-16GB",
    kind: DeviceKind::Gpu,
    gflops: 14000.0,
    bandwidth_gbs: 900.0,
    cores: 80,
    threads: 5120,
    clock_mhz: 1380.0,
    memory_gb: 16.0,
    l2_mb: 6.0,
    note: "NVIDIA V100 datasheet (PCIe); 16 GB assumed, the 32 GB board differs only in memory",
};
/// Tesla V100 SXM2 (DGX-1), 16 GB.
pub const V100_SXM2: Published = Published {
    name: "Tesla V100-SXM2-16GB",
    kind: DeviceKind::Gpu,
    gflops: 15700.0,
    bandwidth_gbs: 900.0,
    cores: 80,
    threads: 5120,
    clock_mhz: 1530.0,
    memory_gb: 16.0,
    l2_mb: 6.0,
    note: "NVIDIA V100 datasheet (SXM2: DeepBench's host is a DGX-1); 16 GB assumed",
};
/// H100 SXM5 80GB (GH100), as NeuSight's config gives it: the GPU of the project's own
/// PyTorch measurements in DeepBench's layout (`bench/gpu/h100`).
pub const H100_SXM: Published = Published {
    name: "NVIDIA H100 80GB HBM3",
    kind: DeviceKind::Gpu,
    gflops: 66908.0,
    bandwidth_gbs: 3430.0,
    cores: 132,
    threads: 16896,
    clock_mhz: 1980.0,
    memory_gb: 80.0,
    l2_mb: 50.0,
    note: "NeuSight's device config (NVIDIA datasheet figures); DeepBench id `NV_H100`",
};
/// Tesla T4.
pub const T4: Published = Published {
    name: "Tesla T4",
    kind: DeviceKind::Gpu,
    gflops: 8141.0,
    bandwidth_gbs: 320.0,
    cores: 40,
    threads: 2560,
    clock_mhz: 1590.0,
    memory_gb: 16.0,
    l2_mb: 4.0,
    note: "NVIDIA T4 datasheet",
};
/// GeForce GTX TITAN X (Maxwell, GM200).
pub const TITAN_X_MAXWELL: Published = Published {
    name: "GeForce GTX TITAN X",
    kind: DeviceKind::Gpu,
    gflops: 6605.0,
    bandwidth_gbs: 336.5,
    cores: 24,
    threads: 3072,
    clock_mhz: 1075.0,
    memory_gb: 12.0,
    l2_mb: 3.0,
    note: "NVIDIA product page (Maxwell TITAN X)",
};
/// TITAN X (Pascal, GP102).
pub const TITAN_X_PASCAL: Published = Published {
    name: "TITAN X (Pascal)",
    kind: DeviceKind::Gpu,
    gflops: 10974.0,
    bandwidth_gbs: 480.0,
    cores: 28,
    threads: 3584,
    clock_mhz: 1531.0,
    memory_gb: 12.0,
    l2_mb: 3.0,
    note: "NVIDIA product page",
};
/// TITAN Xp (GP102).
pub const TITAN_XP: Published = Published {
    name: "TITAN Xp",
    kind: DeviceKind::Gpu,
    gflops: 12150.0,
    bandwidth_gbs: 547.6,
    cores: 30,
    threads: 3840,
    clock_mhz: 1582.0,
    memory_gb: 12.0,
    l2_mb: 3.0,
    note: "NVIDIA product page",
};
/// Radeon Instinct MI25 (Vega 10).
pub const MI25: Published = Published {
    name: "Radeon Instinct MI25",
    kind: DeviceKind::Gpu,
    gflops: 12288.0,
    bandwidth_gbs: 484.0,
    cores: 64,
    threads: 4096,
    clock_mhz: 1500.0,
    memory_gb: 16.0,
    l2_mb: 4.0,
    note: "AMD MI25 datasheet (compute units as cores, stream processors as threads)",
};
/// Radeon Vega Frontier Edition (Vega 10).
pub const VEGA_FE: Published = Published {
    name: "Radeon Vega Frontier Edition",
    kind: DeviceKind::Gpu,
    gflops: 13107.0,
    bandwidth_gbs: 483.0,
    cores: 64,
    threads: 4096,
    clock_mhz: 1600.0,
    memory_gb: 16.0,
    l2_mb: 4.0,
    note: "AMD product page (compute units as cores, stream processors as threads)",
};
/// Xeon Phi 7250F (Knights Landing), a CPU: 68 cores at 1.4 GHz, 4 threads each, two AVX-512
/// FMA units per core (64 fp32 FLOP per cycle).
pub const XEON_PHI_7250: Published = Published {
    name: "Intel Xeon Phi 7250F",
    kind: DeviceKind::Cpu,
    gflops: 6092.8,
    bandwidth_gbs: 490.0,
    cores: 68,
    threads: 272,
    clock_mhz: 1400.0,
    memory_gb: 16.0,
    l2_mb: 34.0,
    note: "Intel ARK (68 cores, 1.4 GHz, 34 MB L2) and its 16 GB MCDRAM at ~490 GB/s \
           (DeepBench binds memory to the MCDRAM node with numactl)",
};

/// The device of a Justus et al. `device` value.
pub fn justus(id: &str) -> Option<&'static Published> {
    Some(match id {
        "GTX1080Ti" => &GTX_1080_TI,
        "K40" => &K40,
        "K80" => &K80_DIE,
        "M60" => &M60_DIE,
        "P100" => &P100_PCIE,
        "V100" => &V100_PCIE,
        _ => return None,
    })
}

/// The device of a DeepBench `device` value.
pub fn deepbench(id: &str) -> Option<&'static Published> {
    Some(match id {
        "NV_1080Ti" => &GTX_1080_TI,
        "NV_M40" => &M40,
        "NV_P100" => &P100_PCIE,
        "NV_T4" => &T4,
        "NV_TitanX" => &TITAN_X_MAXWELL,
        "NV_TitanX_Pascal" => &TITAN_X_PASCAL,
        "NV_TitanXp" => &TITAN_XP,
        "NV_V100" => &V100_SXM2,
        "NV_H100" => &H100_SXM,
        "AMD_MI25" => &MI25,
        "AMD_VegaFE" => &VEGA_FE,
        "IA_KNL7250" => &XEON_PHI_7250,
        _ => return None,
    })
}

/// Every spec in this table.
pub fn all() -> Vec<&'static Published> {
    vec![
        &GTX_1080_TI,
        &K40,
        &K80_DIE,
        &M60_DIE,
        &M40,
        &P100_PCIE,
        &V100_PCIE,
        &V100_SXM2,
        &H100_SXM,
        &T4,
        &TITAN_X_MAXWELL,
        &TITAN_X_PASCAL,
        &TITAN_XP,
        &MI25,
        &VEGA_FE,
        &XEON_PHI_7250,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_is_a_valid_spec_with_a_unique_name() {
        let mut names = std::collections::HashSet::new();
        for p in all() {
            p.spec().validate().unwrap();
            assert!(names.insert(p.name), "{} twice", p.name);
        }
    }

    #[test]
    fn gpu_peaks_match_cores_times_clock() {
        // FMA = 2 FLOP per shader core per cycle; K40 is quoted at its base clock.
        for p in all().into_iter().filter(|p| p.kind == DeviceKind::Gpu) {
            let peak = 2.0 * f64::from(p.threads) * p.clock_mhz / 1000.0;
            assert!(
                (peak - p.gflops).abs() / p.gflops < 0.02,
                "{}: {peak} vs {}",
                p.name,
                p.gflops
            );
        }
    }

    #[test]
    fn v100_pcie_matches_the_brief() {
        let v = justus("V100").unwrap();
        assert_eq!((v.gflops, v.bandwidth_gbs), (14000.0, 900.0));
        assert!(deepbench("iPhone_7").is_none());
    }
}
