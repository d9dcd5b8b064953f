//! Per-kind summaries of a dataset: rows, ranges and the latency distribution.

use perfcast_core::{ModuleKind, Phase};
use serde::Serialize;

use crate::record::Record;

/// Minimum and maximum of one configuration or context column.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Range {
    /// Column name.
    pub column: String,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
}

/// Quantiles of the measured medians of one phase, in ms.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LatencyDistribution {
    /// Phase.
    pub phase: Phase,
    /// Rows measured in this phase.
    pub rows: usize,
    /// Fastest median.
    pub min_ms: f64,
    /// 10th percentile of the medians.
    pub p10_ms: f64,
    /// Median of the medians.
    pub p50_ms: f64,
    /// 90th percentile of the medians.
    pub p90_ms: f64,
    /// Slowest median.
    pub max_ms: f64,
    /// Median relative spread (MAD / median) of the rows that record a MAD (NaN if none do).
    pub median_rel_mad: f64,
    /// Counts per decade bucket of latency: `[<0.01, <0.1, <1, <10, <100, <1000, >=1000]` ms.
    pub decades: [usize; 7],
}

/// Summary of one kind's table.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KindSummary {
    /// Module kind.
    pub kind: ModuleKind,
    /// All rows.
    pub rows: usize,
    /// Rows that failed to measure.
    pub failed: usize,
    /// Backends seen.
    pub backends: Vec<String>,
    /// Ranges of the configuration and context columns.
    pub ranges: Vec<Range>,
    /// Latency distribution per phase.
    pub latency: Vec<LatencyDistribution>,
}

/// Linear-interpolated quantile of sorted values.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// Summarises the records of one kind.
pub fn summarize(kind: ModuleKind, records: &[Record]) -> KindSummary {
    let mut backends: Vec<String> = records.iter().map(|r| r.backend.clone()).collect();
    backends.sort();
    backends.dedup();
    let mut ranges = Vec::new();
    let columns = kind.config_columns();
    for (i, name) in columns.iter().enumerate() {
        let vals = records.iter().map(|r| r.spec.config()[i] as f64);
        ranges.push(range(name, vals));
    }
    ranges.push(range(
        "batch",
        records.iter().map(|r| r.context.batch as f64),
    ));
    ranges.push(range(
        "threads",
        records.iter().map(|r| r.context.threads as f64),
    ));
    ranges.push(range(
        "utilisation",
        records.iter().map(|r| r.context.utilisation),
    ));
    let mut latency = Vec::new();
    for phase in [Phase::Inference, Phase::Training] {
        let rows: Vec<&Record> = records
            .iter()
            .filter(|r| r.context.phase == phase && r.timing().is_some())
            .collect();
        if rows.is_empty() {
            continue;
        }
        let mut med: Vec<f64> = rows
            .iter()
            .filter_map(|r| r.timing())
            .map(|t| t.median_ms)
            .collect();
        med.sort_by(f64::total_cmp);
        let mut rel: Vec<f64> = rows
            .iter()
            .filter_map(|r| r.timing())
            .filter_map(|t| {
                t.mad_ms.map(|mad| {
                    if t.median_ms > 0.0 {
                        mad / t.median_ms
                    } else {
                        0.0
                    }
                })
            })
            .collect();
        rel.sort_by(f64::total_cmp);
        let mut decades = [0usize; 7];
        for &m in &med {
            let idx = if m <= 0.0 {
                0
            } else {
                ((m.log10() + 3.0).floor().max(0.0) as usize).min(6)
            };
            decades[idx] += 1;
        }
        latency.push(LatencyDistribution {
            phase,
            rows: med.len(),
            min_ms: med[0],
            p10_ms: quantile(&med, 0.1),
            p50_ms: quantile(&med, 0.5),
            p90_ms: quantile(&med, 0.9),
            max_ms: med[med.len() - 1],
            median_rel_mad: quantile(&rel, 0.5),
            decades,
        });
    }
    KindSummary {
        kind,
        rows: records.len(),
        failed: records.iter().filter(|r| r.timing().is_none()).count(),
        backends,
        ranges,
        latency,
    }
}

fn range(name: &str, vals: impl Iterator<Item = f64>) -> Range {
    let (min, max) = vals.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    Range {
        column: name.to_string(),
        min,
        max,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantile_interpolates() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(quantile(&v, 0.5), 3.0);
        assert_eq!(quantile(&v, 0.0), 1.0);
        assert_eq!(quantile(&v, 1.0), 5.0);
        assert_eq!(quantile(&v, 0.125), 1.5);
        assert!(quantile(&[], 0.5).is_nan());
    }
}
