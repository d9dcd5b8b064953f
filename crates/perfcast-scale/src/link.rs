//! Links between devices: a bandwidth and a per-message latency (the `alpha`-`beta` model).
//!
//! A collective that moves `m` bytes in one step over a link costs `latency + m / bandwidth`.
//! Bandwidths are per direction (links are full duplex) in GB/s (10^9 bytes per second).
//!
//! The presets' bandwidths are the published peaks per direction; collectives measured with
//! NCCL reach most, not all, of them. Their latencies are the per-step latencies NCCL's own
//! cost model assumes for its ring algorithm with the Simple protocol (`hwLat` in NCCL's
//! `src/graph/tuning.cc`), except Ethernet, which that table does not cover. For a measured
//! link, pass `GBPS:US` (e.g. `11.2:6`) wherever a preset name is accepted.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// A point-to-point link.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Link {
    /// Preset name, or `custom`.
    pub name: String,
    /// Bandwidth per direction, GB/s.
    pub bandwidth_gbs: f64,
    /// Latency per message (per collective step), microseconds.
    pub latency_us: f64,
}

/// The presets: name, GB/s per direction, latency in µs, what the figures are.
pub const PRESETS: &[(&str, f64, f64, &str)] = &[
    // PCI-SIG PCIe 3.0: 8 GT/s per lane, 128b/130b encoding: 16 x 8 x 128/130 / 8 = 15.75 GB/s.
    // Latency: NCCL hwLat, PCI, Ring/Simple (5.7 us).
    ("pcie3", 15.75, 5.7, "PCIe 3.0 x16"),
    // PCIe 4.0 doubles the transfer rate to 16 GT/s: 31.5 GB/s per direction.
    ("pcie4", 31.5, 5.7, "PCIe 4.0 x16"),
    // PCIe 5.0 doubles it again, 32 GT/s: 63 GB/s per direction.
    ("pcie5", 63.0, 5.7, "PCIe 5.0 x16"),
    // NVIDIA A100 SXM4 datasheet: NVLink 3, 600 GB/s bidirectional = 12 links x 25 GB/s per
    // direction. Latency: NCCL hwLat, NVLink, Ring/Simple (3.4 us).
    ("nvlink", 300.0, 3.4, "NVLink 3 (A100 SXM4, 12 links)"),
    // NVIDIA H100 SXM5 datasheet: NVLink 4, 900 GB/s bidirectional = 18 links x 25 GB/s per
    // direction. Latency as NVLink 3.
    ("nvlink4", 450.0, 3.4, "NVLink 4 (H100 SXM5, 18 links)"),
    // NVIDIA HGX B200 datasheet: NVLink 5, 1.8 TB/s bidirectional per GPU = 18 links x 50 GB/s
    // per direction. Latency as NVLink 3.
    ("nvlink5", 900.0, 3.4, "NVLink 5 (B200, 18 links)"),
    // NVIDIA V100 SXM2 datasheet: NVLink 2, 300 GB/s bidirectional = 6 links x 25 GB/s.
    ("nvlink2", 150.0, 3.4, "NVLink 2 (V100 SXM2, 6 links)"),
    // InfiniBand HDR: 200 Gb/s per port = 25 GB/s. Latency: NCCL hwLat, NET, Ring/Simple
    // (9.6 us; RDMA).
    ("infiniband", 25.0, 9.6, "InfiniBand HDR 200 Gb/s"),
    // 10 Gigabit Ethernet: 1.25 GB/s. Latency: kernel TCP sockets, a typical one-way figure of
    // tens of microseconds (NCCL's table assumes RDMA and has no TCP row).
    ("ethernet", 1.25, 30.0, "10 Gigabit Ethernet, TCP"),
];

/// The fastest link a plan takes, GB/s per direction: 100x NVLink 4's 450, beyond which a
/// figure is a typo (1e308 printed 300-digit times).
pub const MAX_LINK_GBS: f64 = 1e5;
/// The slowest link latency a plan takes, microseconds (one second).
pub const MAX_LINK_LATENCY_US: f64 = 1e6;

/// A figure for an error message: as written below a million, in exponent form above (1e308
/// spelt out is 309 digits).
pub fn short(v: f64) -> String {
    if v.abs() < 1e6 {
        format!("{v}")
    } else {
        format!("{v:e}")
    }
}

impl Link {
    /// A preset by name (case-insensitive).
    pub fn preset(name: &str) -> Option<Link> {
        let name = name.trim().to_ascii_lowercase();
        PRESETS
            .iter()
            .find(|(n, ..)| *n == name)
            .map(|&(n, bw, lat, _)| Link {
                name: n.to_string(),
                bandwidth_gbs: bw,
                latency_us: lat,
            })
    }

    /// A link with measured figures; both must be finite, bandwidth positive, latency not
    /// negative.
    pub fn custom(bandwidth_gbs: f64, latency_us: f64) -> Result<Link> {
        let link = Link {
            name: "custom".into(),
            bandwidth_gbs,
            latency_us,
        };
        link.validate()?;
        Ok(link)
    }

    /// A preset name, or `GBPS:US` for a measured link.
    pub fn parse(text: &str) -> Result<Link> {
        if let Some(link) = Link::preset(text) {
            return Ok(link);
        }
        let names: Vec<&str> = PRESETS.iter().map(|p| p.0).collect();
        let unknown = || {
            Error::invalid("link", format!("unknown link `{text}`")).with_hint(format!(
                "presets are {}, or give `GBPS:US` (bandwidth in GB/s per direction, latency in \
                 microseconds), e.g. `12:5`",
                names.join(", ")
            ))
        };
        let (bw, lat) = text.split_once(':').ok_or_else(unknown)?;
        let bw: f64 = bw.trim().parse().map_err(|_| unknown())?;
        let lat: f64 = lat.trim().parse().map_err(|_| unknown())?;
        Link::custom(bw, lat)
    }

    /// Checks the figures; errors name the value.
    pub fn validate(&self) -> Result<()> {
        if !(self.bandwidth_gbs.is_finite()
            && self.bandwidth_gbs > 0.0
            && self.bandwidth_gbs <= MAX_LINK_GBS)
        {
            return Err(Error::invalid(
                "link",
                format!(
                    "`{}`: bandwidth must be positive and at most {MAX_LINK_GBS} GB/s, got {} GB/s",
                    self.name,
                    short(self.bandwidth_gbs)
                ),
            ));
        }
        if !(self.latency_us.is_finite()
            && self.latency_us >= 0.0
            && self.latency_us <= MAX_LINK_LATENCY_US)
        {
            return Err(Error::invalid(
                "link",
                format!(
                    "`{}`: latency must be between 0 and {MAX_LINK_LATENCY_US} us, got {} us",
                    self.name,
                    short(self.latency_us)
                ),
            ));
        }
        Ok(())
    }

    /// Bytes per second.
    pub fn bytes_per_s(&self) -> f64 {
        self.bandwidth_gbs * 1e9
    }

    /// Latency in seconds.
    pub fn latency_s(&self) -> f64 {
        self.latency_us * 1e-6
    }

    /// Seconds to send `bytes` in one message.
    pub fn transfer_s(&self, bytes: f64) -> f64 {
        self.latency_s() + bytes / self.bytes_per_s()
    }

    /// This link with its bandwidth divided among `ways` senders sharing it.
    pub(crate) fn shared(&self, ways: usize) -> Link {
        Link {
            name: self.name.clone(),
            bandwidth_gbs: self.bandwidth_gbs / ways.max(1) as f64,
            latency_us: self.latency_us,
        }
    }
}

impl std::fmt::Display for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({} GB/s, {} us)",
            self.name, self.bandwidth_gbs, self.latency_us
        )
    }
}

/// Ring all-reduce over `link`: `2 (P-1)/P * S/B + 2 (P-1) alpha`.
pub fn ring_allreduce_s(devices: usize, bytes: f64, link: &Link) -> f64 {
    if devices <= 1 {
        return 0.0;
    }
    let p = devices as f64;
    2.0 * (p - 1.0) / p * bytes / link.bytes_per_s() + 2.0 * (p - 1.0) * link.latency_s()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_and_custom_links_parse() {
        let nv = Link::parse("NVLink").unwrap();
        assert_eq!((nv.name.as_str(), nv.bandwidth_gbs), ("nvlink", 300.0));
        for (name, ..) in PRESETS {
            Link::parse(name).unwrap().validate().unwrap();
        }
        let c = Link::parse("12.5:2").unwrap();
        assert_eq!((c.bandwidth_gbs, c.latency_us), (12.5, 2.0));
        // 1 GB over 12.5 GB/s is 80 ms, plus 2 us.
        assert!((c.transfer_s(1e9) - 0.080_002).abs() < 1e-12);
    }

    #[test]
    fn bad_links_name_the_value() {
        let e = Link::parse("token-ring").unwrap_err();
        assert!(e.hint().is_some_and(|h| h.starts_with("presets are ")));
        let e = e.to_string();
        assert!(e.contains("`token-ring`") && e.contains("nvlink"), "{e}");
        let e = Link::parse("0:5").unwrap_err().to_string();
        assert!(
            e.contains("bandwidth must be positive") && e.contains("got 0"),
            "{e}"
        );
        let e = Link::parse("10:-1").unwrap_err().to_string();
        assert!(e.contains("got -1 us"), "{e}");
        // Figures no link has are typos, not plans of 300-digit times.
        let e = Link::parse("1e308:5").unwrap_err().to_string();
        assert!(
            e.contains("at most 100000 GB/s") && e.contains("1e308"),
            "{e}"
        );
        let e = Link::parse("10:1e308").unwrap_err().to_string();
        assert!(e.contains("between 0 and 1000000 us"), "{e}");
    }
}
