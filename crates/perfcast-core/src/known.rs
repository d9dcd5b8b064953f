//! The table of known devices `perfcast predict --device <name>` selects from: every
//! single-device spec NeuSight publishes in `device_configs/` (MIT; copied here as figures so
//! the binary needs no data folder), then the Justus and DeepBench devices of [`crate::gpus`].
//!
//! NeuSight's `*_TP.json` (a tensor-parallel pair of H100s with an FP8 peak) is not one device
//! and is left out, as the importer leaves it out. The AMD files give a vector and a matrix-core
//! fp32 peak; the vector one is used, as the importer does.

use crate::DeviceSpec;

use crate::gpus::{self, Published};

// One row of a published spec table: the columns are the spec's fields, in the table's order.
#[allow(clippy::too_many_arguments)]
const fn neusight(
    name: &'static str,
    gflops: f64,
    bandwidth_gbs: f64,
    sms: u32,
    per_sm: u32,
    clock_mhz: f64,
    memory_gb: f64,
    l2_mb: f64,
) -> Published {
    Published::gpu(
        name,
        gflops,
        bandwidth_gbs,
        sms,
        sms * per_sm,
        clock_mhz,
        memory_gb,
        l2_mb,
        "NeuSight device_configs (MIT)",
    )
}

/// NeuSight's published specs, in file-name order.
pub const NEUSIGHT: [Published; 12] = [
    neusight(
        "AMD Instinct MI100",
        23100.0,
        1230.0,
        120,
        4,
        1502.0,
        32.0,
        8.0,
    ),
    neusight(
        "AMD Instinct MI210",
        22600.0,
        1640.0,
        104,
        4,
        1700.0,
        64.0,
        16.0,
    ),
    neusight(
        "AMD Instinct MI250",
        22600.0,
        1640.0,
        104,
        4,
        1700.0,
        64.0,
        16.0,
    ),
    neusight(
        "NVIDIA A100-PCIE-40GB",
        19492.0,
        1555.0,
        108,
        64,
        1410.0,
        40.0,
        40.0,
    ),
    neusight(
        "NVIDIA A100-SXM4-40GB",
        19492.0,
        1555.0,
        108,
        64,
        1410.0,
        40.0,
        40.0,
    ),
    neusight(
        "NVIDIA A100 80GB PCIe",
        19492.0,
        1935.0,
        108,
        64,
        1410.0,
        80.0,
        40.0,
    ),
    neusight(
        "NVIDIA H100 80GB HBM3",
        66908.0,
        3430.0,
        132,
        128,
        1980.0,
        80.0,
        50.0,
    ),
    neusight("NVIDIA L4", 31334.0, 300.0, 60, 128, 2040.0, 24.0, 48.0),
    neusight(
        "Tesla P100-PCIE-16GB",
        9519.0,
        732.0,
        56,
        64,
        1380.0,
        16.0,
        4.0,
    ),
    neusight("Tesla P4", 5699.0, 192.0, 40, 64, 1113.0, 8.0, 2.0),
    neusight("Tesla T4", 8141.0, 320.0, 40, 64, 1590.0, 15.0, 4.0),
    neusight(
        "Tesla V100-PCIE-32GB",
        14029.0,
        900.0,
        80,
        64,
        1370.0,
        32.0,
        6.0,
    ),
];

/// Short names for the common GPUs (first match wins over a substring search).
const ALIASES: &[(&str, &str)] = &[
    ("v100", "Tesla V100-PCIE-32GB"),
    ("v100-sxm2", "Tesla V100-SXM2-16GB"),
    ("a100", "NVIDIA A100-PCIE-40GB"),
    ("a100-80gb", "NVIDIA A100 80GB PCIe"),
    ("h100", "NVIDIA H100 80GB HBM3"),
    ("l4", "NVIDIA L4"),
    ("t4", "Tesla T4"),
    ("p4", "Tesla P4"),
    ("p100", "Tesla P100-PCIE-16GB"),
    ("k40", "Tesla K40"),
    ("k80", "Tesla K80 (one GK210)"),
    ("m60", "Tesla M60 (one GM204)"),
    ("m40", "Tesla M40"),
    ("1080ti", "GeForce GTX 1080 Ti"),
    ("titan-x", "GeForce GTX TITAN X"),
    ("titan-x-pascal", "TITAN X (Pascal)"),
    ("titan-xp", "TITAN Xp"),
    ("mi25", "Radeon Instinct MI25"),
    ("vega-fe", "Radeon Vega Frontier Edition"),
    ("mi100", "AMD Instinct MI100"),
    ("mi210", "AMD Instinct MI210"),
    ("mi250", "AMD Instinct MI250"),
    ("knl", "Intel Xeon Phi 7250F"),
    ("a100-sxm4", "NVIDIA A100-SXM4-40GB"),
    ("a100-sxm4-80gb", "NVIDIA A100-SXM4-80GB"),
    ("a40", "NVIDIA A40"),
    ("h100-sxm", "NVIDIA H100 80GB HBM3"),
    ("h100-pcie", "NVIDIA H100 PCIe"),
    ("h200", "NVIDIA H200"),
    ("gh200", "NVIDIA GH200"),
    ("b200", "NVIDIA B200"),
    ("l40s", "NVIDIA L40S"),
    ("a10g", "NVIDIA A10G"),
    ("rtx4090", "NVIDIA GeForce RTX 4090"),
    ("rtx6000-ada", "NVIDIA RTX 6000 Ada Generation"),
    ("mi250x", "AMD Instinct MI250X"),
    ("mi300x", "AMD Instinct MI300X"),
];

/// Measured launch floors, microseconds ([`DeviceSpec::launch_us`]), of the devices NeuSight
/// measured element-wise ops on: what `perfcast import neusight` records for each, the 2%
/// quantile of the device's `add/` latencies (its smallest adds take the host's dispatch and
/// launch time, not the kernel's), rounded to 0.1 us. Devices not listed (the H100, the L4,
/// the A100 80GB, every Justus and DeepBench device) have no measurement and keep no
/// `launch_us`, so models fall back to the training devices' floors.
pub const LAUNCH_US: &[(&str, f64)] = &[
    ("AMD Instinct MI100", 16.7),
    ("AMD Instinct MI210", 13.6),
    ("NVIDIA A100-PCIE-40GB", 26.1),
    ("Tesla P100-PCIE-16GB", 42.5),
    ("Tesla P4", 26.0),
    ("Tesla T4", 25.8),
    ("Tesla V100-PCIE-32GB", 32.1),
];

/// Every known device: NeuSight's, then the Justus and DeepBench ones (names unique; for
/// the P100 and T4, in both tables, NeuSight's figures win). NeuSight's devices of
/// [`LAUNCH_US`] carry their measured launch floor.
pub fn known() -> Vec<DeviceSpec> {
    let mut out: Vec<DeviceSpec> = NEUSIGHT.iter().map(Published::spec).collect();
    for spec in &mut out {
        spec.launch_us = LAUNCH_US
            .iter()
            .find(|(name, _)| *name == spec.name)
            .map(|(_, us)| *us);
    }
    for p in gpus::all() {
        if !out.iter().any(|s| s.name == p.name) {
            out.push(p.spec());
        }
    }
    out.extend(crate::catalogue::CURRENT.iter().map(|d| d.spec()));
    for spec in &mut out {
        crate::catalogue::complete(spec);
    }
    out
}

/// The device a spec file (perfcast's format or a NeuSight config, [`DeviceSpec::read_file`])
/// or a known device's name selects, if either is given; an unknown name's error lists how to
/// find the known ones.
pub fn target_device(
    spec_file: Option<&std::path::Path>,
    name: Option<&str>,
) -> crate::Result<Option<DeviceSpec>> {
    match (spec_file, name) {
        (Some(path), _) => Ok(Some(
            DeviceSpec::read_file(path).map_err(|e| crate::Error::Input(e.to_string()))?,
        )),
        (None, Some(name)) => Ok(Some(lookup(name).map_err(|message| {
            crate::Error::UnknownDevice {
                message,
                hint: crate::error::Hint::new(
                    "`perfcast predict --list-devices` lists them, or pass \
                     `--device-spec <file.json>`",
                ),
            }
        })?)),
        (None, None) => Ok(None),
    }
}

/// The known device a name selects: an alias (`v100`), a full name or its slug
/// (`tesla-t4`), or a unique part of a slug (`h100`), optionally with `:<dtype>` (`h100:bf16`,
/// [`DeviceSpec::at_dtype`]). The error lists the candidates.
pub fn lookup(query: &str) -> Result<DeviceSpec, String> {
    // `h100:bf16` is the H100 as a bf16 module sees it.
    if let Some((name, dtype)) = query.rsplit_once(':') {
        let dtype: crate::DType = dtype.parse().map_err(|e: crate::Error| e.to_string())?;
        return lookup(name)?.at_dtype(dtype).map_err(|e| e.to_string());
    }
    let all = known();
    let q = crate::slugify(query);
    if let Some((_, name)) = ALIASES.iter().find(|(a, _)| *a == q)
        && let Some(s) = all.iter().find(|s| s.name == *name)
    {
        return Ok(s.clone());
    }
    if let Some(s) = all.iter().find(|s| s.slug() == q) {
        return Ok(s.clone());
    }
    let hits: Vec<&DeviceSpec> = all.iter().filter(|s| s.slug().contains(&q)).collect();
    match hits.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(format!(
            "unknown device `{query}` (known: {})",
            ALIASES
                .iter()
                .map(|(a, _)| *a)
                .collect::<Vec<_>>()
                .join(", ")
        )),
        many => Err(format!(
            "`{query}` names several devices: {}",
            many.iter()
                .map(|s| format!("`{}`", s.slug()))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measured_launch_floors_name_known_devices() {
        let known = known();
        for (name, us) in LAUNCH_US {
            let spec = known.iter().find(|s| s.name == *name).unwrap();
            assert_eq!(spec.launch_us, Some(*us), "{name}");
            assert!(*us > 1.0 && *us < 100.0, "{name}: {us}");
        }
        let h100 = lookup("h100").unwrap();
        assert_eq!(h100.launch_us, None);
        assert_eq!(lookup("a100").unwrap().launch_us, Some(26.1));
    }

    #[test]
    fn every_known_device_is_valid_and_named_once() {
        let all = known();
        let mut names = std::collections::HashSet::new();
        for s in &all {
            s.validate().unwrap();
            assert!(names.insert(s.name.clone()), "{} twice", s.name);
        }
        for (alias, name) in ALIASES {
            assert_eq!(lookup(alias).unwrap().name, *name, "{alias}");
        }
    }

    #[test]
    fn names_slugs_and_parts_select_devices() {
        assert_eq!(lookup("Tesla T4").unwrap().peak_gflops, 8141.0);
        assert_eq!(lookup("nvidia-l4").unwrap().cores, 60);
        assert!(lookup("a100-sxm4").unwrap().name.contains("SXM4"));
        assert!(lookup("tesla").unwrap_err().contains("several devices"));
        assert!(lookup("iphone").unwrap_err().contains("unknown device"));
    }

    #[test]
    fn a_dtype_suffix_selects_the_type_peak() {
        let h100 = lookup("h100:bf16").unwrap();
        assert_eq!(h100.dtype, crate::DType::Bf16);
        assert_eq!(h100.peak_gflops, 989_400.0);
        assert!(lookup("h100:int4").unwrap_err().contains("int4"));
        assert!(lookup("k80:fp16").unwrap_err().contains("no `fp16` peak"));
        assert!(lookup("h100:fp8").unwrap_err().contains("fp8"));
        for name in [
            "h200", "b200", "l40s", "a10g", "rtx4090", "mi300x", "a40", "gh200",
        ] {
            let s = lookup(name).unwrap();
            assert!(s.peak_for(crate::DType::Fp16).is_some(), "{name}");
        }
    }
}
