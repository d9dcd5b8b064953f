//! Device specifications: what a predictor knows of the hardware, measured or published.

use serde::{Deserialize, Serialize};

use crate::dtype::{DType, Links, TypePeaks};
use crate::error::{Error, Result};

/// CPU or GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// A host processor.
    Cpu,
    /// An accelerator.
    Gpu,
}

/// Where a spec's peak figures come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SpecSource {
    /// Measured here by micro-benchmarks.
    Measured,
    /// Taken from the vendor's or a paper's published figures.
    Published,
}

/// Cache sizes in KiB (per core for L1/L2 on CPUs, total for the last level).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Caches {
    /// L1 data cache per core, KiB.
    pub l1d_kb: Option<f64>,
    /// L2 cache, KiB.
    pub l2_kb: Option<f64>,
    /// L3 (last-level) cache, KiB.
    pub l3_kb: Option<f64>,
    /// What a GEMM pays for weights that come from memory instead of this cache (measured on
    /// CPUs; absent elsewhere and in older device files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncached_weights: Option<UncachedWeights>,
}

/// What a linear layer's GEMM takes when its weights come from memory rather than the
/// last-level cache, by the GEMM's rows per call.
///
/// A layer timed alone keeps weights that fit the cache hot across repetitions; in a network
/// whose weights pass the cache they come from memory on every pass. Whether that costs time
/// depends on how the backend reads them: a GEMM kernel that reads the weights in place (few
/// rows) waits on every load, one that packs them first (more rows) or a vector product (one
/// row) streams them with the hardware prefetcher. The probe measures per row count instead of
/// modelling the kernels (`perfcast_profile::probe::uncached_weights`).
///
/// Current probes store `floor_ms_per_mb`: the time per MB of weights of a GEMM that reads them
/// from memory, which bounds such a layer from below. Its cached twin is the noisy half on a
/// machine that shares its last-level cache, so a difference of the two (`ms_per_mb`, the extra
/// time per MB, kept by older probes) flips between modes from run to run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UncachedWeights {
    /// Rows per GEMM call the probe measured, ascending.
    pub rows: Vec<usize>,
    /// Extra ms per MB (1e6 bytes) of weights at each of `rows` (older probes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ms_per_mb: Vec<f64>,
    /// ms per MB of weights read from memory at each of `rows`: a least time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub floor_ms_per_mb: Vec<f64>,
}

impl UncachedWeights {
    /// The value of `table` at `rows` rows per call: the one at the largest measured row count
    /// not above `rows` (the kernel switches at whole row counts), the first one below it.
    fn at(&self, table: &[f64], rows: usize) -> f64 {
        let at = self.rows.partition_point(|&r| r <= rows);
        table.get(at.saturating_sub(1)).copied().unwrap_or(0.0)
    }

    /// The extra ms per MB at `rows` rows per call (0 for a floor table).
    pub fn ms_per_mb_at(&self, rows: usize) -> f64 {
        self.at(&self.ms_per_mb, rows)
    }

    /// The least ms per MB of weights read from memory at `rows` rows per call (0 for an
    /// older table of extras).
    pub fn floor_ms_per_mb_at(&self, rows: usize) -> f64 {
        self.at(&self.floor_ms_per_mb, rows)
    }

    /// Rejects tables a predictor cannot use, naming the problem.
    pub fn check(&self) -> std::result::Result<(), String> {
        let tables = [&self.ms_per_mb, &self.floor_ms_per_mb];
        let filled = tables.iter().filter(|t| !t.is_empty()).count();
        if self.rows.is_empty()
            || filled != 1
            || tables
                .iter()
                .any(|t| !t.is_empty() && t.len() != self.rows.len())
        {
            return Err(format!(
                "`uncached_weights` needs one value per row count in exactly one of \
                 `ms_per_mb` and `floor_ms_per_mb`, got {} rows and {} / {} values",
                self.rows.len(),
                self.ms_per_mb.len(),
                self.floor_ms_per_mb.len()
            ));
        }
        if self.rows.windows(2).any(|w| w[0] >= w[1]) || self.rows[0] == 0 {
            return Err(format!(
                "`uncached_weights.rows` must be positive and ascending, got {:?}",
                self.rows
            ));
        }
        if let Some(v) = tables
            .iter()
            .flat_map(|t| t.iter())
            .find(|v| !(v.is_finite() && (0.0..=1e3).contains(*v)))
        {
            return Err(format!(
                "`uncached_weights` values must be in [0, 1000] ms per MB, got {v}"
            ));
        }
        Ok(())
    }
}

/// A device as a predictor sees it. For a CPU, `peak_gflops` and `mem_bandwidth_gbs` are
/// measured (a GEMM and a streaming triad), not guessed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceSpec {
    /// Human name, e.g. `Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz` or `V100-PCIE-32GB`.
    pub name: String,
    /// CPU or GPU.
    pub kind: DeviceKind,
    /// Peak fp32 throughput in GFLOP/s.
    pub peak_gflops: f64,
    /// Memory bandwidth in GB/s.
    pub mem_bandwidth_gbs: f64,
    /// Physical cores (CPU) or streaming multiprocessors (GPU).
    pub cores: u32,
    /// Hardware threads (CPU) or total shader cores (GPU).
    pub threads: u32,
    /// Clock in MHz.
    pub clock_mhz: f64,
    /// Memory in GB.
    pub memory_gb: f64,
    /// Last-level cache in MB.
    pub cache_mb: f64,
    /// Cache hierarchy where known.
    #[serde(default)]
    pub caches: Caches,
    /// Whether the peaks were measured or published.
    pub source: SpecSource,
    /// The software stack the device's latencies were measured with, e.g. `CUDA 8.0.88,
    /// cuDNN 6.0.21` or `ROCm 1.7.1, MIOpen 1.3`; `None` (the default, omitted from JSON) when
    /// not known.
    ///
    /// Latency depends on the library version as much as on the silicon: DeepBench's GEMMs on
    /// near-identical GPUs differ up to 5x between cuBLAS versions. PROFET-style anchor mapping
    /// assumes anchor and target run the same stack, so it prefers anchors whose stack is equal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub software: Option<String>,
    /// The end-to-end time of a trivial op on the platform (framework dispatch and kernel
    /// launch: NeuSight's smallest element-wise `add`), microseconds; `None` (the default,
    /// omitted from JSON) when not measured. A number the user measures on their own host, not
    /// a chip spec: the same GPU under another framework build or host CPU pays another floor
    /// (docs/accuracy.md#figures-behind-code-choices). The GPU utilisation model
    /// uses it as the launch floor of a device it never measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_us: Option<f64>,
    /// Board power (TDP), W; `None` (the default, omitted from JSON) when not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tdp_w: Option<f64>,
    /// The data type `peak_gflops` counts: fp32 (the default, omitted from JSON) unless the
    /// spec is a GPU seen in another type ([`DeviceSpec::at_dtype`]).
    #[serde(default, skip_serializing_if = "DType::is_fp32")]
    pub dtype: DType,
    /// Published dense peaks of other data types, GFLOP/s (omitted when none is known).
    #[serde(default, skip_serializing_if = "TypePeaks::is_empty")]
    pub peaks: TypePeaks,
    /// Peer and host link bandwidths (omitted when neither is known).
    #[serde(default, skip_serializing_if = "Links::is_empty")]
    pub links: Links,
}

impl DeviceSpec {
    /// Rejects missing or absurd fields, naming the field and its value.
    pub fn validate(&self) -> Result<()> {
        let bad = |message: String| Error::InvalidDevice {
            device: self.name.clone(),
            message,
        };
        if self.name.trim().is_empty() {
            return Err(bad("`name` is empty".into()));
        }
        // Physically possible ranges, wide enough for any device from a microcontroller to a
        // future accelerator; outside them the ratios features are built from (roofline time,
        // ridge point) overflow or vanish (a peak of 1e-300 printed `NaN%`).
        for (field, value, low, high) in [
            ("peak_gflops", self.peak_gflops, 1e-3, 1e9),
            ("mem_bandwidth_gbs", self.mem_bandwidth_gbs, 1e-3, 1e8),
            ("clock_mhz", self.clock_mhz, 1.0, 1e6),
            ("memory_gb", self.memory_gb, 1e-6, 1e7),
        ] {
            if !(value.is_finite() && value > 0.0) {
                return Err(bad(format!("`{field}` must be positive, got {value}")));
            }
            if !(low..=high).contains(&value) {
                // `{:?}` prints 1e-300 as such, not as 300 digits.
                return Err(bad(format!(
                    "`{field}` must be in [{low}, {high}], got {value:?}"
                )));
            }
        }
        if !(self.cache_mb.is_finite() && (0.0..=1e6).contains(&self.cache_mb)) {
            return Err(bad(format!(
                "`cache_mb` must be in [0, 1000000], got {}",
                self.cache_mb
            )));
        }
        for (field, value) in [
            ("caches.l1d_kb", self.caches.l1d_kb),
            ("caches.l2_kb", self.caches.l2_kb),
            ("caches.l3_kb", self.caches.l3_kb),
        ] {
            if let Some(v) = value
                && !(v.is_finite() && (0.0..=1e9).contains(&v))
            {
                return Err(bad(format!("`{field}` must be in [0, 1e9], got {v:?}")));
            }
        }
        if let Some(u) = &self.caches.uncached_weights {
            u.check().map_err(bad)?;
        }
        if self.cores == 0 {
            return Err(bad("`cores` must be at least 1, got 0".into()));
        }
        if self.threads < self.cores {
            return Err(bad(format!(
                "`threads` {} is fewer than `cores` {}",
                self.threads, self.cores
            )));
        }
        for (field, value, high) in [
            ("launch_us", self.launch_us, 1e6),
            ("tdp_w", self.tdp_w, 1e5),
        ] {
            if let Some(v) = value
                && !(v.is_finite() && v > 0.0 && v <= high)
            {
                return Err(bad(format!("`{field}` must be in (0, {high}], got {v:?}")));
            }
        }
        for dtype in DType::ALL {
            if let Some(v) = self.peaks.get(dtype)
                && !(v.is_finite() && v > 0.0 && v <= 1e9)
            {
                return Err(bad(format!(
                    "`peaks.{dtype}` must be in (0, 1e9], got {v:?}"
                )));
            }
        }
        for (field, value) in [
            ("links.peer_gbs", self.links.peer_gbs),
            ("links.pcie_gbs", self.links.pcie_gbs),
        ] {
            if let Some(v) = value
                && !(v.is_finite() && v > 0.0 && v <= 1e6)
            {
                return Err(bad(format!("`{field}` must be in (0, 1e6], got {v:?}")));
            }
        }
        if self.links.peer_gpus == Some(0) {
            return Err(bad("`links.peer_gpus` must be at least 1, got 0".into()));
        }
        if self.software.as_ref().is_some_and(|s| s.trim().is_empty()) {
            return Err(bad(
                "`software` is empty (leave it out when the stack is not known)".into(),
            ));
        }
        Ok(())
    }

    /// The peak of `dtype`, GFLOP/s, if the spec has one: `peak_gflops` for the spec's own
    /// type, else the published per-type figure.
    pub fn peak_for(&self, dtype: DType) -> Option<f64> {
        if dtype == self.dtype {
            Some(self.peak_gflops)
        } else {
            self.peaks.get(dtype)
        }
    }

    /// The spec as a module computing in `dtype` sees it: `peak_gflops` that type's peak and
    /// `dtype` set, so rooflines and features built from it count that type's rate and element
    /// width. The error names the device and the type when the spec publishes no peak for it
    /// (fp8 is refused: nothing measured in it backs a prediction).
    pub fn at_dtype(&self, dtype: DType) -> Result<DeviceSpec> {
        let dtype = dtype.predictable()?;
        if dtype == self.dtype {
            return Ok(self.clone());
        }
        let peak = self.peak_for(dtype).ok_or_else(|| Error::InvalidDevice {
            device: self.name.clone(),
            message: format!(
                "no `{dtype}` peak in its spec (known: {}); add `peaks.{dtype}` (GFLOP/s) to a \
                 spec file and pass it with `--device-spec`",
                DType::ALL
                    .iter()
                    .filter(|&&d| self.peak_for(d).is_some())
                    .map(|d| d.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })?;
        let mut out = self.clone();
        out.peaks.set(self.dtype, Some(self.peak_gflops));
        out.peaks.set(dtype, None);
        out.peak_gflops = peak;
        out.dtype = dtype;
        Ok(out)
    }

    /// Bytes of one element of the spec's data type over an fp32 element's: the factor that
    /// turns [`crate::features::Derived`]'s fp32 byte counts into this type's traffic.
    pub fn element_scale(&self) -> f64 {
        self.dtype.bytes() / crate::features::F32_BYTES
    }

    /// A file-system-safe identifier: lower case, runs of other characters as one `-`.
    /// A spec seen in another type than fp32 ends in `-<dtype>`: its datasets are apart.
    pub fn slug(&self) -> String {
        if self.dtype.is_fp32() {
            slugify(&self.name)
        } else {
            format!("{}-{}", slugify(&self.name), self.dtype)
        }
    }

    /// Parses and validates a spec from JSON.
    pub fn from_json(text: &str) -> Result<Self> {
        let spec: DeviceSpec = serde_json::from_str(text)?;
        spec.validate()?;
        Ok(spec)
    }
}

/// Lower-cases and replaces runs of non-alphanumerics by one `-`; drops `(r)`/`(tm)` marks.
pub fn slugify(name: &str) -> String {
    let cleaned = name
        .to_ascii_lowercase()
        .replace("(r)", "")
        .replace("(tm)", "");
    let mut out = String::with_capacity(cleaned.len());
    for ch in cleaned.chars() {
        if ch.is_ascii_alphanumeric() {
            out.push(ch);
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_string()
}

/// What the operating system says of the local CPU (everything but the measured peaks).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CpuTopology {
    /// Model name.
    pub model: String,
    /// Physical cores available to this process.
    pub cores: u32,
    /// Logical CPUs available to this process.
    pub threads: u32,
    /// Maximum (or current, when no maximum is published) clock in MHz.
    pub clock_mhz: f64,
    /// Total memory in GB.
    pub memory_gb: f64,
    /// Cache sizes.
    pub caches: Caches,
}

impl CpuTopology {
    /// Reads /proc and /sys (Linux); elsewhere fills what the standard library knows.
    pub fn detect() -> CpuTopology {
        let threads = std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1);
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let max_khz =
            std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
                .ok()
                .and_then(|s| s.trim().parse::<f64>().ok());
        let mut topo = parse_cpuinfo(&cpuinfo, threads);
        if let Some(khz) = max_khz {
            topo.clock_mhz = khz / 1000.0;
        }
        topo.memory_gb = parse_meminfo_gb(&meminfo).unwrap_or(0.0);
        topo.caches = read_sys_caches();
        topo
    }
}

/// Parses `/proc/cpuinfo`; `threads` is the number of CPUs this process may use.
pub fn parse_cpuinfo(text: &str, threads: u32) -> CpuTopology {
    let field = |line: &str| line.split_once(':').map(|(_, v)| v.trim().to_string());
    let mut model = None;
    let mut mhz: Option<f64> = None;
    let mut cores_per_socket = None;
    let mut siblings = None;
    for line in text.lines() {
        let key = line.split(':').next().unwrap_or("").trim();
        match key {
            "model name" | "Model" | "Processor" if model.is_none() => model = field(line),
            "cpu MHz" if mhz.is_none() => mhz = field(line).and_then(|v| v.parse().ok()),
            "cpu cores" if cores_per_socket.is_none() => {
                cores_per_socket = field(line).and_then(|v| v.parse::<u32>().ok())
            }
            "siblings" if siblings.is_none() => {
                siblings = field(line).and_then(|v| v.parse::<u32>().ok())
            }
            _ => {}
        }
    }
    // Threads per core from the socket's siblings/cores; scale to the CPUs we may use.
    let smt = match (siblings, cores_per_socket) {
        (Some(s), Some(c)) if c > 0 && s >= c => s / c,
        _ => 1,
    };
    let cores = (threads / smt.max(1)).max(1);
    CpuTopology {
        model: model.unwrap_or_else(|| "unknown cpu".to_string()),
        cores,
        threads: threads.max(cores),
        clock_mhz: mhz.unwrap_or(0.0),
        memory_gb: 0.0,
        caches: Caches::default(),
    }
}

fn parse_meminfo_gb(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0 / 1024.0)
}

/// Parses a sysfs cache size such as `48K` or `32M` into KiB.
pub fn parse_cache_size(text: &str) -> Option<f64> {
    let t = text.trim();
    let (num, mult) = if let Some(n) = t.strip_suffix('K') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('M') {
        (n, 1024.0)
    } else if let Some(n) = t.strip_suffix('G') {
        (n, 1024.0 * 1024.0)
    } else {
        (t, 1.0 / 1024.0)
    };
    num.trim().parse::<f64>().ok().map(|v| v * mult)
}

fn read_sys_caches() -> Caches {
    let mut caches = Caches::default();
    let base = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    let Ok(entries) = std::fs::read_dir(base) else {
        return caches;
    };
    for entry in entries.flatten() {
        let dir = entry.path();
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
        let level = read("level").trim().to_string();
        let kind = read("type").trim().to_string();
        let size = parse_cache_size(&read("size"));
        match (level.as_str(), kind.as_str()) {
            ("1", "Data") => caches.l1d_kb = size,
            ("2", _) => caches.l2_kb = size,
            ("3", _) => caches.l3_kb = size,
            _ => {}
        }
    }
    caches
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> DeviceSpec {
        DeviceSpec {
            name: "Test CPU".into(),
            kind: DeviceKind::Cpu,
            peak_gflops: 100.0,
            mem_bandwidth_gbs: 20.0,
            cores: 2,
            threads: 2,
            clock_mhz: 3000.0,
            memory_gb: 24.0,
            cache_mb: 32.0,
            caches: Caches::default(),
            source: SpecSource::Measured,
            software: None,
            launch_us: None,
            tdp_w: None,
            dtype: DType::Fp32,
            peaks: TypePeaks::default(),
            links: Links::default(),
        }
    }

    #[test]
    fn absurd_fields_are_named() {
        let mut s = spec();
        s.mem_bandwidth_gbs = 0.0;
        assert!(
            s.validate()
                .unwrap_err()
                .to_string()
                .contains("`mem_bandwidth_gbs` must be positive, got 0")
        );
        let mut s = spec();
        s.peak_gflops = f64::NAN;
        assert!(
            s.validate()
                .unwrap_err()
                .to_string()
                .contains("peak_gflops")
        );
        let mut s = spec();
        s.cores = 0;
        assert!(s.validate().unwrap_err().to_string().contains("`cores`"));
        assert!(spec().validate().is_ok());
        // A peak of 1e-300 printed `NaN%`; a negative L2 was accepted.
        let mut s = spec();
        s.peak_gflops = 1e-300;
        let err = s.validate().unwrap_err().to_string();
        assert!(
            err.contains("`peak_gflops` must be in [0.001, 1000000000], got 1e-300"),
            "{err}"
        );
        let mut s = spec();
        s.caches.l2_kb = Some(-5.0);
        let err = s.validate().unwrap_err().to_string();
        assert!(
            err.contains("`caches.l2_kb` must be in [0, 1e9], got -5.0"),
            "{err}"
        );
    }

    #[test]
    fn json_round_trip() {
        let s = spec();
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(DeviceSpec::from_json(&json).unwrap(), s);
        let negative = json.replace("\"cores\":2", "\"cores\":-2");
        assert!(
            DeviceSpec::from_json(&negative)
                .unwrap_err()
                .to_string()
                .contains("-2")
        );
    }

    #[test]
    fn software_round_trips_and_is_optional() {
        // Without it: no `software` key is written, and JSON written before it existed loads.
        let s = spec();
        let json = serde_json::to_string(&s).unwrap();
        assert!(!json.contains("software"), "{json}");
        assert_eq!(DeviceSpec::from_json(&json).unwrap().software, None);
        // With it: written and read back unchanged.
        let mut with = spec();
        with.software = Some("CUDA 8.0.88, cuDNN 6.0.21".into());
        let json = serde_json::to_string(&with).unwrap();
        assert!(
            json.contains(r#""software":"CUDA 8.0.88, cuDNN 6.0.21""#),
            "{json}"
        );
        assert_eq!(DeviceSpec::from_json(&json).unwrap(), with);
        // Present but blank is refused, naming the field.
        let blank = json.replace("CUDA 8.0.88, cuDNN 6.0.21", " ");
        let err = DeviceSpec::from_json(&blank).unwrap_err().to_string();
        assert!(err.contains("`software` is empty"), "{err}");
    }

    #[test]
    fn a_bridged_peer_link_round_trips_and_a_bridge_to_nobody_is_refused() {
        let mut with = spec();
        with.links = Links {
            peer_gbs: Some(300.0),
            pcie_gbs: Some(64.0),
            peer_gpus: Some(1),
        };
        let json = serde_json::to_string(&with).unwrap();
        assert!(json.contains(r#""peer_gpus":1"#), "{json}");
        assert_eq!(DeviceSpec::from_json(&json).unwrap(), with);
        assert_eq!(with.links.node_peer_gbs(), None);
        let err = DeviceSpec::from_json(&json.replace(r#""peer_gpus":1"#, r#""peer_gpus":0"#))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`links.peer_gpus` must be at least 1"),
            "{err}"
        );
    }

    #[test]
    fn launch_and_power_round_trip_and_are_optional() {
        // Without them no key is written, so device files written before them read and write
        // the same bytes.
        let json = serde_json::to_string(&spec()).unwrap();
        assert!(
            !json.contains("launch_us") && !json.contains("tdp_w"),
            "{json}"
        );
        let mut with = spec();
        (with.launch_us, with.tdp_w) = (Some(16.7), Some(300.0));
        let json = serde_json::to_string(&with).unwrap();
        assert!(json.contains(r#""launch_us":16.7"#), "{json}");
        assert_eq!(DeviceSpec::from_json(&json).unwrap(), with);
        for bad in ["-1.0", "0.0", "1e300"] {
            let err = DeviceSpec::from_json(&json.replace("16.7", bad))
                .unwrap_err()
                .to_string();
            assert!(err.contains("`launch_us` must be in"), "{bad}: {err}");
        }
    }

    #[test]
    fn slug_is_filesystem_safe() {
        assert_eq!(
            slugify("Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz"),
            "intel-xeon-platinum-8375c-cpu-2-90ghz"
        );
        assert_eq!(slugify("V100-PCIE-32GB"), "v100-pcie-32gb");
    }

    #[test]
    fn cpuinfo_parsing_finds_model_and_smt() {
        let text = "processor\t: 0\nmodel name\t: Fancy CPU 9000\ncpu MHz\t\t: 2900.000\nsiblings\t: 4\ncpu cores\t: 2\n\nprocessor\t: 1\nmodel name\t: Fancy CPU 9000\n";
        let t = parse_cpuinfo(text, 4);
        assert_eq!(t.model, "Fancy CPU 9000");
        assert_eq!(t.cores, 2);
        assert_eq!(t.threads, 4);
        assert_eq!(t.clock_mhz, 2900.0);
    }

    #[test]
    fn cache_sizes_parse_units() {
        assert_eq!(parse_cache_size("48K"), Some(48.0));
        assert_eq!(parse_cache_size("32M\n"), Some(32.0 * 1024.0));
        assert_eq!(parse_cache_size("junk"), None);
    }

    #[test]
    fn uncached_weights_step_at_the_measured_row_counts() {
        let u = UncachedWeights {
            rows: vec![1, 16, 64],
            ms_per_mb: vec![0.01, 0.12, 0.02],
            floor_ms_per_mb: Vec::new(),
        };
        u.check().unwrap();
        assert_eq!(u.ms_per_mb_at(1), 0.01);
        assert_eq!(u.ms_per_mb_at(17), 0.12);
        assert_eq!(u.ms_per_mb_at(63), 0.12);
        assert_eq!(u.ms_per_mb_at(4096), 0.02);
        // Below the first row count: the first value.
        assert_eq!(u.ms_per_mb_at(0), 0.01);
    }

    #[test]
    fn a_device_with_a_broken_uncached_weights_table_is_refused() {
        let mut d = crate::testing::cpu_device();
        for (rows, values) in [
            (vec![16, 1], vec![0.1, 0.1]),
            (vec![1], vec![f64::NAN]),
            (vec![1, 2], vec![0.1]),
            (vec![], vec![]),
        ] {
            d.caches.uncached_weights = Some(UncachedWeights {
                rows: rows.clone(),
                ms_per_mb: values.clone(),
                floor_ms_per_mb: Vec::new(),
            });
            let e = d.validate().unwrap_err().to_string();
            assert!(e.contains("uncached_weights"), "{rows:?}: {e}");
        }
        // Both tables at once, or neither: which one the predictor should use is unclear.
        for (extras, floors) in [(vec![0.1], vec![0.2]), (vec![], vec![])] {
            d.caches.uncached_weights = Some(UncachedWeights {
                rows: vec![1],
                ms_per_mb: extras,
                floor_ms_per_mb: floors,
            });
            assert!(d.validate().is_err());
        }
    }

    #[test]
    fn a_floor_table_reads_like_an_extras_table_and_loads_from_json() {
        let u: UncachedWeights =
            serde_json::from_str(r#"{"rows": [1, 16], "floor_ms_per_mb": [0.05, 0.25]}"#).unwrap();
        u.check().unwrap();
        assert_eq!(u.floor_ms_per_mb_at(17), 0.25);
        assert_eq!(u.ms_per_mb_at(17), 0.0);
        // An older probe's table still loads, as extras.
        let old: UncachedWeights =
            serde_json::from_str(r#"{"rows": [1, 16], "ms_per_mb": [0.03, 0.08]}"#).unwrap();
        old.check().unwrap();
        assert_eq!(old.ms_per_mb_at(16), 0.08);
        assert_eq!(old.floor_ms_per_mb_at(16), 0.0);
    }
}
