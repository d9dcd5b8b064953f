//! A GPU's architecture generation, read from its product name.
//!
//! Peak FLOP/s and bandwidth do not say which generation a GPU belongs to: a Maxwell Tesla M60
//! has the spec of a Kepler K80, and a Volta V100 the spec of a faster Pascal, while their
//! kernels run at the efficiencies of their own generations. The launch year of the
//! architecture is an ordinal that places a GPU beside its own generation (and the ones next to
//! it), taken from the vendors' published product lines.

use crate::{DeviceKind, DeviceSpec};

/// A GPU architecture and the year its first product shipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Architecture {
    /// The vendor's name for it.
    pub name: &'static str,
    /// Year of its first product.
    pub year: u16,
}

const KEPLER: Architecture = Architecture {
    name: "Kepler",
    year: 2012,
};
const MAXWELL: Architecture = Architecture {
    name: "Maxwell",
    year: 2014,
};
const PASCAL: Architecture = Architecture {
    name: "Pascal",
    year: 2016,
};
const VOLTA: Architecture = Architecture {
    name: "Volta",
    year: 2017,
};
const TURING: Architecture = Architecture {
    name: "Turing",
    year: 2018,
};
const AMPERE: Architecture = Architecture {
    name: "Ampere",
    year: 2020,
};
const ADA: Architecture = Architecture {
    name: "Ada Lovelace",
    year: 2022,
};
const HOPPER: Architecture = Architecture {
    name: "Hopper",
    year: 2022,
};
const BLACKWELL: Architecture = Architecture {
    name: "Blackwell",
    year: 2024,
};
const VEGA: Architecture = Architecture {
    name: "GCN 5 (Vega)",
    year: 2017,
};
const VEGA20: Architecture = Architecture {
    name: "GCN 5.1 (Vega 20)",
    year: 2018,
};
const CDNA: Architecture = Architecture {
    name: "CDNA",
    year: 2020,
};
const CDNA2: Architecture = Architecture {
    name: "CDNA 2",
    year: 2021,
};
const CDNA3: Architecture = Architecture {
    name: "CDNA 3",
    year: 2023,
};
const CDNA4: Architecture = Architecture {
    name: "CDNA 4",
    year: 2025,
};

/// The architecture of the GPU `name` names (as `nvidia-smi`, a datasheet or a catalogue spells
/// it, any case), or `None` when the name is not one of the known product lines.
pub fn architecture(name: &str) -> Option<Architecture> {
    let lower = name.to_ascii_lowercase();
    let tokens: Vec<&str> = lower
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|t| !t.is_empty())
        .collect();
    let has = |t: &str| tokens.contains(&t);
    // A generation named outright wins over the model number ("TITAN X (Pascal)", "RTX 6000
    // Ada Generation").
    for (word, arch) in [
        ("kepler", KEPLER),
        ("maxwell", MAXWELL),
        ("pascal", PASCAL),
        ("volta", VOLTA),
        ("turing", TURING),
        ("ampere", AMPERE),
        ("ada", ADA),
        ("hopper", HOPPER),
        ("blackwell", BLACKWELL),
    ] {
        if has(word) {
            return Some(arch);
        }
    }
    if has("titan") {
        return Some(if has("xp") {
            PASCAL
        } else if has("v") {
            VOLTA
        } else if has("rtx") {
            TURING
        } else if has("x") || has("maxwell") {
            // The GeForce GTX TITAN X; the Pascal one says so in its name.
            MAXWELL
        } else {
            KEPLER
        });
    }
    if has("vega") {
        return Some(VEGA);
    }
    tokens.iter().find_map(|t| model_number(t))
}

/// The architecture of one product-number token ("v100", "mi250x", "4090", "a10g").
fn model_number(token: &str) -> Option<Architecture> {
    let split = token
        .find(|c: char| c.is_ascii_digit())
        .unwrap_or(token.len());
    let (prefix, rest) = token.split_at(split);
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let number: u32 = digits.parse().ok()?;
    Some(match prefix {
        "k" => KEPLER,
        "m" => MAXWELL,
        "p" => PASCAL,
        "v" => VOLTA,
        "t" => TURING,
        "a" => AMPERE,
        "l" => ADA,
        "h" | "gh" => HOPPER,
        "b" | "gb" => BLACKWELL,
        "mi" => match number {
            0..=49 => VEGA,
            50..=99 => VEGA20,
            100..=199 => CDNA,
            200..=299 => CDNA2,
            300..=349 => CDNA3,
            _ => CDNA4,
        },
        // GeForce numbers: the thousands (or, before the 1000 series, hundreds) give the line.
        "" => match number {
            5000..=5999 => BLACKWELL,
            4000..=4999 => ADA,
            3000..=3999 => AMPERE,
            2000..=2999 => TURING,
            1000..=1999 => PASCAL,
            900..=999 => MAXWELL,
            600..=799 => KEPLER,
            _ => return None,
        },
        _ => return None,
    })
}

/// The architecture's year, or `None` for a name [`architecture`] does not know.
pub fn architecture_year(name: &str) -> Option<u16> {
    architecture(name).map(|a| a.year)
}

/// The architecture year of a GPU spec: its name's ([`architecture_year`]), else that of the
/// known GPU whose peak FLOP/s and bandwidth are nearest (in ratio) to the spec's, so that a
/// spec file under a name of its own still sits beside the products it resembles.
pub fn year_of(spec: &DeviceSpec) -> u16 {
    if let Some(year) = architecture_year(&spec.name) {
        return year;
    }
    let distance = |d: &DeviceSpec| {
        let r = (d.peak_gflops.max(1e-9) / spec.peak_gflops.max(1e-9)).ln();
        let b = (d.mem_bandwidth_gbs.max(1e-9) / spec.mem_bandwidth_gbs.max(1e-9)).ln();
        r * r + b * b
    };
    crate::known::known()
        .iter()
        .filter(|d| d.kind == DeviceKind::Gpu)
        .filter_map(|d| architecture_year(&d.name).map(|y| (distance(d), y)))
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map_or(AMPERE.year, |(_, y)| y)
}

/// A GPU's vendor from its name: `amd`, `intel` or `nvidia`.
pub fn vendor(name: &str) -> &'static str {
    let n = name.to_ascii_lowercase();
    if ["amd", "radeon", "instinct"].iter().any(|v| n.contains(v)) {
        "amd"
    } else if ["intel", " arc", "xeon", "max 1"]
        .iter()
        .any(|v| n.contains(v))
    {
        "intel"
    } else {
        "nvidia"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_gpu_of_the_data_sets_and_catalogue_has_its_generation() {
        let cases = [
            ("GeForce GTX 1080 Ti", "Pascal"),
            ("GeForce GTX TITAN X", "Maxwell"),
            ("TITAN X (Pascal)", "Pascal"),
            ("TITAN Xp", "Pascal"),
            ("Tesla K40", "Kepler"),
            ("Tesla K80 (one GK210)", "Kepler"),
            ("Tesla M40", "Maxwell"),
            ("Tesla M60 (one GM204)", "Maxwell"),
            ("Tesla P100-PCIE-16GB", "Pascal"),
            ("Tesla P4", "Pascal"),
            ("Tesla T4", "Turing"),
            ("Tesla V100-SXM2-16GB", "Volta"),
            ("NVIDIA A100-SXM4-80GB", "Ampere"),
            ("NVIDIA A10G", "Ampere"),
            ("NVIDIA A40", "Ampere"),
            ("NVIDIA L4", "Ada Lovelace"),
            ("NVIDIA L40S", "Ada Lovelace"),
            ("NVIDIA GeForce RTX 4090", "Ada Lovelace"),
            ("NVIDIA RTX 6000 Ada Generation", "Ada Lovelace"),
            ("NVIDIA H100 80GB HBM3", "Hopper"),
            ("NVIDIA GH200", "Hopper"),
            ("NVIDIA B200", "Blackwell"),
            ("Radeon Instinct MI25", "GCN 5 (Vega)"),
            ("AMD Instinct MI100", "CDNA"),
            ("AMD Instinct MI250X", "CDNA 2"),
            ("AMD Instinct MI300X", "CDNA 3"),
        ];
        for (name, arch) in cases {
            assert_eq!(architecture(name).map(|a| a.name), Some(arch), "{name}");
        }
        assert_eq!(
            architecture_year("Radeon Vega Frontier Edition"),
            Some(2017)
        );
        assert_eq!(architecture_year("Intel Xeon Phi 7250F"), None);
        assert_eq!(architecture_year("my accelerator"), None);
    }

    #[test]
    fn every_known_gpu_is_named_and_an_unnamed_spec_takes_its_nearest() {
        for spec in crate::known::known() {
            if spec.kind == DeviceKind::Gpu {
                assert!(architecture_year(&spec.name).is_some(), "{}", spec.name);
            }
        }
        let mut spec = crate::known::lookup("t4").unwrap();
        spec.name = "my accelerator".to_string();
        spec.peak_gflops *= 1.05;
        assert_eq!(year_of(&spec), TURING.year);
    }
}
