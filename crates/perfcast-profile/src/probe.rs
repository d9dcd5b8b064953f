//! The local device's spec: the OS's topology plus peaks measured by two micro-benchmarks.
//!
//! Peak fp32 GFLOP/s is the best of several large square GEMMs on the default backend with
//! every hardware thread (what this machine can actually deliver through burn, not a data-sheet
//! number); bandwidth is a STREAM-style triad `a = b + s * c` over arrays far larger than the
//! last-level cache, best of five, counting 12 bytes per element. A third probe times a linear
//! layer with its weights cached and uncached ([`uncached_weights`]).

use std::time::Instant;

use burn::tensor::{Distribution, Tensor};
use perfcast_core::{CpuTopology, DeviceKind, DeviceSpec, SpecSource, UncachedWeights};

use crate::backend::Backend;
use crate::error::Result;
use crate::pool::with_threads;
use crate::timer::{TimingConfig, measure};

/// The file whose lock [`measure_peaks`] holds, because two processes probing at once each
/// measure half the machine and `device.json` would keep it.
fn peaks_lock_path() -> std::path::PathBuf {
    std::env::temp_dir().join("perfcast-peaks.lock")
}

/// Waits for, then holds, the machine-wide peaks lock; `None` where the lock file cannot be
/// made (the probe then runs unguarded, as before).
fn peaks_lock() -> Option<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(peaks_lock_path())
        .ok()?;
    file.lock().ok()?;
    Some(file)
}

/// Figures of the two micro-benchmarks.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Peaks {
    /// Best GEMM throughput, GFLOP/s.
    pub gflops: f64,
    /// GEMM size used.
    pub gemm_n: usize,
    /// Triad bandwidth, GB/s.
    pub bandwidth_gbs: f64,
    /// Elements per triad array.
    pub triad_elems: usize,
}

/// Measures GEMM throughput with `threads` threads on `backend`.
pub fn gemm_gflops(backend: Backend, threads: usize, n: usize) -> Result<f64> {
    let device = backend.device()?;
    let config = TimingConfig {
        max_time_s: 0.5,
        ..TimingConfig::default()
    };
    let timing = with_threads(threads, || {
        let a = Tensor::<2>::random([n, n], Distribution::Uniform(-1.0, 1.0), &device);
        let b = Tensor::<2>::random([n, n], Distribution::Uniform(-1.0, 1.0), &device);
        let mut call = || -> std::result::Result<(), String> {
            let c = a.clone().matmul(b.clone());
            device.sync().map_err(|e| e.to_string())?;
            drop(c);
            Ok(())
        };
        measure(&mut call, &config)
    })
    .map_err(|reason| crate::Error::Backend {
        name: backend.name().into(),
        reason,
    })?;
    let flops = 2.0 * (n as f64).powi(3);
    let best_ms = timing.min_ms.unwrap_or(timing.median_ms);
    Ok(flops / (best_ms / 1e3) / 1e9)
}

/// Measures triad bandwidth (GB/s) with `threads` threads over arrays of `elems` f32.
pub fn triad_bandwidth(threads: usize, elems: usize) -> f64 {
    let threads = threads.max(1);
    let mut a = vec![0.0f32; elems];
    let b = vec![1.0f32; elems];
    let c = vec![2.0f32; elems];
    let chunk = elems.div_ceil(threads);
    let mut best = f64::INFINITY;
    for _ in 0..6 {
        let start = Instant::now();
        std::thread::scope(|scope| {
            for ((a, b), c) in a
                .chunks_mut(chunk)
                .zip(b.chunks(chunk))
                .zip(c.chunks(chunk))
            {
                scope.spawn(move || {
                    for ((x, y), z) in a.iter_mut().zip(b).zip(c) {
                        *x = y + 3.0 * z;
                    }
                });
            }
        });
        best = best.min(start.elapsed().as_secs_f64());
    }
    std::hint::black_box(&a);
    12.0 * elems as f64 / best / 1e9
}

/// Runs both micro-benchmarks with every hardware thread.
pub fn measure_peaks(backend: Backend, threads: usize) -> Result<Peaks> {
    let _alone = peaks_lock();
    let gemm_n = 1024;
    let gflops = gemm_gflops(backend, threads, gemm_n)?;
    let triad_elems = 1 << 24; // 64 MiB per array, 192 MiB in all: far beyond any LLC
    let bandwidth_gbs = triad_bandwidth(threads, triad_elems);
    Ok(Peaks {
        gflops,
        gemm_n,
        bandwidth_gbs,
        triad_elems,
    })
}

/// Rows per GEMM call [`uncached_weights`] measures: a vector product, the sizes around the
/// point where GEMM kernels start packing their weights, and a few beyond it.
pub const UNCACHED_ROWS: [usize; 11] = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128];

/// Times linear layers whose weights come from memory (one thread, the profiler's operand
/// layout) at each of `rows` rows per call, and returns their time per MB of weights: the
/// least time such a layer takes in a network whose weights pass the cache. Two layers share
/// each weight matrix, `in_features` -> 3,072 and 3,072 -> `in_features` (a transformer's two
/// FFN shapes); the probe cycles through enough copies that every call's weights were last
/// read eight caches ago, and keeps the mean over a pass of copies (one copy's pages can land
/// well or badly in the cache, a pass averages them), the median of three passes.
///
/// The cached time is not measured: on a machine that shares its last-level cache with
/// others it flips between modes from run to run, and the layer's own model already holds it.
pub fn uncached_weights_with(
    backend: Backend,
    cache_bytes: f64,
    in_features: usize,
    rows: &[usize],
) -> Result<UncachedWeights> {
    const OUT: usize = 3072;
    const ROUNDS: usize = 3;
    let device = backend.device()?;
    let fit = (cache_bytes / 2.0 / (4.0 * OUT as f64)).floor() as usize;
    let k = in_features.min(fit).max(8);
    let bytes = (4 * k * OUT) as f64;
    let copies = ((8.0 * cache_bytes / bytes).ceil() as usize).clamp(4, 256);
    let floors = with_threads(1, || {
        let weights: Vec<Tensor<2>> = (0..copies)
            .map(|_| Tensor::<2>::random([k, OUT], Distribution::Uniform(-0.03, 0.03), &device))
            .collect();
        let mut out = Vec::with_capacity(rows.len());
        for &m in rows {
            let mut per_shape = Vec::with_capacity(2);
            for (inputs, shape) in [(k, [k, OUT]), (OUT, [OUT, k])] {
                let x =
                    Tensor::<4>::random([1, 1, m, inputs], Distribution::Normal(0.0, 1.0), &device);
                let pass = || -> std::result::Result<f64, String> {
                    let start = Instant::now();
                    for w in &weights {
                        let y =
                            burn::tensor::module::linear(x.clone(), w.clone().reshape(shape), None);
                        device.sync().map_err(|e| e.to_string())?;
                        drop(y);
                    }
                    Ok(start.elapsed().as_secs_f64() * 1e3 / copies as f64)
                };
                // The first pass evicts what an earlier row count left cached.
                pass()?;
                let mut passes = (0..ROUNDS)
                    .map(|_| pass())
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                per_shape.push(median(&mut passes) / (bytes / 1e6));
            }
            out.push(per_shape.iter().sum::<f64>() / per_shape.len() as f64);
        }
        Ok::<_, String>(out)
    })
    .map_err(|reason| crate::Error::Backend {
        name: backend.name().into(),
        reason,
    })?;
    Ok(UncachedWeights {
        rows: rows.to_vec(),
        ms_per_mb: Vec::new(),
        floor_ms_per_mb: floors.into_iter().map(round3).collect(),
    })
}

/// [`uncached_weights_with`] at 768 input features over [`UNCACHED_ROWS`]: a transformer
/// layer's 9.4 MB projection, where the cache allows.
pub fn uncached_weights(backend: Backend, cache_bytes: f64) -> Result<UncachedWeights> {
    uncached_weights_with(backend, cache_bytes, 768, &UNCACHED_ROWS)
}

/// The median of `v`, which it sorts.
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    perfcast_data::summary::quantile(v, 0.5)
}

/// The local CPU's spec with measured peaks.
pub fn local_cpu(backend: Backend) -> Result<(DeviceSpec, Peaks)> {
    let topo = CpuTopology::detect();
    let peaks = measure_peaks(backend, topo.threads as usize)?;
    let cache_mb = topo
        .caches
        .l3_kb
        .or(topo.caches.l2_kb)
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0);
    let mut caches = topo.caches.clone();
    let cache_bytes = if cache_mb > 0.0 { cache_mb } else { 32.0 } * 1024.0 * 1024.0;
    // Under the peaks lock too: a second process probing at once would evict the cached case.
    let alone = peaks_lock();
    caches.uncached_weights = Some(uncached_weights(backend, cache_bytes)?);
    drop(alone);
    let spec = DeviceSpec {
        name: topo.model.clone(),
        kind: DeviceKind::Cpu,
        peak_gflops: round3(peaks.gflops),
        mem_bandwidth_gbs: round3(peaks.bandwidth_gbs),
        cores: topo.cores,
        threads: topo.threads,
        clock_mhz: if topo.clock_mhz > 0.0 {
            topo.clock_mhz
        } else {
            1.0
        },
        memory_gb: round3(topo.memory_gb.max(0.001)),
        cache_mb: round3(cache_mb),
        caches,
        source: SpecSource::Measured,
        software: None,
        launch_us: None,
        tdp_w: None,
        dtype: Default::default(),
        peaks: Default::default(),
        links: Default::default(),
    };
    Ok((spec, peaks))
}

/// Busy jiffies and total jiffies of the whole machine, from `/proc/stat`'s first line.
fn parse_proc_stat(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().next()?;
    let mut fields = line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let v: Vec<u64> = fields.map(|f| f.parse().ok()).collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal ...: idle and iowait are not busy.
    if v.len() < 5 {
        return None;
    }
    let total: u64 = v.iter().take(8).sum();
    Some((total - v[3] - v[4], total))
}

/// This process's own user + system jiffies, from `/proc/self/stat`.
fn parse_self_stat(text: &str) -> Option<u64> {
    // The command name (field 2) may hold spaces: fields are counted after its closing `)`.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After `)`: state is field 3, so utime (14) and stime (15) are at 11 and 12.
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// How many cores other processes kept busy over `window`, measured now (Linux; `None`
/// elsewhere). Timings taken while other work runs come out inflated, so `profile` and
/// `quickstart` warn on it.
pub fn busy_cores_elsewhere(window: std::time::Duration) -> Option<f64> {
    let read = || -> Option<(u64, u64, u64)> {
        let (busy, total) = parse_proc_stat(&std::fs::read_to_string("/proc/stat").ok()?)?;
        let mine = parse_self_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
        Some((busy, total, mine))
    };
    let (b0, t0, m0) = read()?;
    std::thread::sleep(window);
    let (b1, t1, m1) = read()?;
    let cores = std::thread::available_parallelism().map_or(1, usize::from) as f64;
    let total = t1.saturating_sub(t0);
    if total == 0 {
        return None;
    }
    let others = b1.saturating_sub(b0).saturating_sub(m1.saturating_sub(m0));
    Some(others as f64 / total as f64 * cores)
}

fn round3(v: f64) -> f64 {
    if v == 0.0 {
        return 0.0;
    }
    let scale = 10f64.powf(2.0 - v.abs().log10().floor());
    (v * scale).round() / scale
}

/// A warning for the user when other processes keep more than a quarter of a core busy now:
/// every timing taken meanwhile would come out inflated.
pub fn busy_warning() -> Option<String> {
    let busy = busy_cores_elsewhere(std::time::Duration::from_millis(300))?;
    (busy > 0.25).then(|| {
        format!(
            "warning: other processes are keeping {busy:.1} core(s) busy; timings taken now \
             come out inflated (by 30-70% for large layers on a 2-core machine); stop them \
             or measure later"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_probe_waits_for_the_first() {
        let held = peaks_lock().expect("the lock file can be made in the temp directory");
        let other = std::fs::File::open(peaks_lock_path()).unwrap();
        assert!(matches!(
            other.try_lock(),
            Err(std::fs::TryLockError::WouldBlock)
        ));
        drop(held);
        other.try_lock().expect("free once the first is done");
    }

    #[test]
    fn proc_stat_busy_excludes_idle_and_iowait() {
        let text = "cpu  100 5 50 800 40 3 2 0 0 0\ncpu0 1 2 3 4 5 6 7 8\n";
        assert_eq!(parse_proc_stat(text), Some((160, 1000)));
        assert_eq!(parse_proc_stat("intr 1 2 3\n"), None);
        assert_eq!(parse_proc_stat("cpu 1 x 3 4 5\n"), None);
    }

    #[test]
    fn self_stat_reads_utime_and_stime_past_a_spaced_name() {
        let text = "42 (my prog) R 1 42 42 0 -1 4194304 100 0 0 0 250 37 0 0 20 0 1 0";
        assert_eq!(parse_self_stat(text), Some(287));
        assert_eq!(parse_self_stat("42 (x) R 1"), None);
    }

    #[test]
    fn busy_cores_elsewhere_is_a_share_of_the_machine() {
        if let Some(c) = busy_cores_elsewhere(std::time::Duration::from_millis(50)) {
            let cores = std::thread::available_parallelism().map_or(1, usize::from) as f64;
            assert!((0.0..=cores + 1e-9).contains(&c), "{c} of {cores}");
        }
    }

    #[test]
    fn round_to_three_significant_digits() {
        assert_eq!(round3(123.456), 123.0);
        assert_eq!(round3(0.012345), 0.0123);
        assert_eq!(round3(98765.0), 98800.0);
    }

    #[test]
    fn triad_reports_a_plausible_bandwidth() {
        let gbs = triad_bandwidth(1, 1 << 20);
        assert!(gbs > 0.1 && gbs < 10_000.0, "{gbs}");
    }

    #[test]
    fn the_uncached_weights_probe_answers_every_row_count_it_was_asked() {
        // A small cache keeps the probe's matrices small: the table's form is what is checked.
        let table = uncached_weights_with(Backend::Flex, 256.0 * 1024.0, 64, &[1, 8, 32]).unwrap();
        assert_eq!(table.rows, vec![1, 8, 32]);
        assert_eq!(table.floor_ms_per_mb.len(), 3);
        assert!(table.ms_per_mb.is_empty());
        // A GEMM that reads its weights takes time: every floor is positive.
        assert!(table.floor_ms_per_mb.iter().all(|&v| v > 0.0), "{table:?}");
        table.check().unwrap();
    }
}
