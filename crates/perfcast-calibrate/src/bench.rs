//! Timing the in-process predictor on a bundle (`perfcast bundle bench`): one module, a VGG-16
//! query (shapes checked, and prepared once), and batched throughput, each the median and p99
//! over many calls after a warm-up.

use perfcast_predict::bench_queries::BenchQueries;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::predictor::Predictor;

/// Timing of one query kind.
#[derive(Debug, Clone, Serialize)]
pub struct BenchLine {
    /// What was asked.
    pub query: String,
    /// Median time per call (per module for batches), microseconds.
    pub p50_us: f64,
    /// 99th percentile, microseconds.
    pub p99_us: f64,
    /// Calls (modules) per second at the median.
    pub per_second: f64,
}

/// Median and p99 of `n` timed calls of `f`, microseconds, after `n / 10` (at least 10)
/// untimed ones.
fn time_calls(n: usize, mut f: impl FnMut() -> Result<()>) -> Result<(f64, f64)> {
    for _ in 0..(n / 10).max(10) {
        f()?;
    }
    let mut us = Vec::with_capacity(n);
    for _ in 0..n {
        let t = std::time::Instant::now();
        f()?;
        us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    us.sort_by(f64::total_cmp);
    let q = |p: f64| us[((us.len() - 1) as f64 * p).round() as usize];
    Ok((q(0.5), q(0.99)))
}

/// Times `predictor`: `iterations` calls of one module, a tenth as many network queries, and
/// batches of 10,000 module queries on one thread and on every core.
pub fn bench(predictor: &Predictor, iterations: usize) -> Result<Vec<BenchLine>> {
    if iterations < 10 {
        return Err(Error::Input(format!(
            "`--iterations` must be at least 10, got {iterations}"
        )));
    }
    let a_iterations = iterations;
    let BenchQueries {
        conv,
        one,
        vgg,
        batch: queries,
    } = BenchQueries::new()?;
    let mut lines = Vec::new();
    let (p50, p99) = time_calls(a_iterations, || {
        std::hint::black_box(predictor.predict_module(&conv, &one)?);
        Ok(())
    })?;
    lines.push(BenchLine {
        query: "one module (conv2d 64->64 k3 @56x56, batch 1)".into(),
        p50_us: p50,
        p99_us: p99,
        per_second: 1e6 / p50,
    });
    let (p50, p99) = time_calls(a_iterations.div_ceil(10), || {
        std::hint::black_box(predictor.predict_network(&vgg, &one)?);
        Ok(())
    })?;
    lines.push(BenchLine {
        query: format!(
            "vgg16 ({} layers, batch 1), shapes checked",
            vgg.layers.len()
        ),
        p50_us: p50,
        p99_us: p99,
        per_second: 1e6 / p50,
    });
    let prepared = predictor.prepare(&vgg)?;
    let (p50, p99) = time_calls(a_iterations.div_ceil(10), || {
        std::hint::black_box(predictor.predict_prepared(&prepared, &one)?);
        Ok(())
    })?;
    lines.push(BenchLine {
        query: format!(
            "vgg16 prepared ({} distinct modules), batch 1",
            prepared.distinct_modules()
        ),
        p50_us: p50,
        p99_us: p99,
        per_second: 1e6 / p50,
    });
    // Batched: 10,000 module queries of every layer of VGG-16 at several batch sizes.
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    for threads in [1, cores] {
        let (p50, p99) = time_calls(20, || {
            std::hint::black_box(predictor.predict_modules_threads(&queries, threads)?);
            Ok(())
        })?;
        lines.push(BenchLine {
            query: format!(
                "batch of 10,000 modules ({threads} thread{}), per module",
                if threads == 1 { "" } else { "s" }
            ),
            p50_us: p50 / 1e4,
            p99_us: p99 / 1e4,
            per_second: 1e10 / p50,
        });
        if cores == 1 {
            break;
        }
    }
    Ok(lines)
}
