//! Charts the commands write beside their reports, built from report values: the held-out
//! predictions of `train`, measured against predicted networks of `eval networks`, scaling
//! curves of `scale`, and time against cost of `plan`.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use perfcast_select::pipeline::HeldOut;

use crate::output::sig3;
use crate::plot::{self, Chart, Series};

/// Writes a chart as SVG or PNG by the path's extension, atomically.
pub fn write(path: &Path, chart: &Chart<'_>) -> anyhow::Result<()> {
    write_with_lines(path, chart, &[])
}

/// [`write`] with `lines` drawn over the chart.
fn write_with_lines(path: &Path, chart: &Chart<'_>, lines: &[Series]) -> anyhow::Result<()> {
    let bytes = if plot::is_svg(path)? {
        chart.svg_with_lines(lines).into_bytes()
    } else {
        chart.png_with_lines(lines)?
    };
    perfcast_data::write_atomic(path, &bytes)
        .with_context(|| format!("writing the plot `{}`", path.display()))
}

/// `train`'s charts of one kind's held-out rows, as files relative to the output directory:
/// predicted against measured (`plots/<kind>-predicted-vs-measured.{svg,png}`) and the error
/// CDF of every family (`plots/<kind>-error-cdf.{svg,png}`).
pub fn train(held: &HeldOut<'_>, device: &str) -> anyhow::Result<Vec<(PathBuf, Vec<u8>)>> {
    let kind = held.kind;
    let scatter: Vec<Series> = held
        .models
        .iter()
        .map(|(name, pred, _)| {
            Series::new(
                name.to_string(),
                held.measured
                    .iter()
                    .copied()
                    .zip(pred.iter().copied())
                    .collect(),
            )
        })
        .collect();
    let cdfs: Vec<Series> = held
        .models
        .iter()
        .map(|(name, pred, mape)| {
            Series::new(
                format!("{name} (MAPE {}%)", sig3(*mape)),
                plot::error_cdf(pred, held.measured),
            )
        })
        .collect();
    let title = format!("{kind} on {device}: held-out rows");
    let charts = [
        (
            "predicted-vs-measured",
            Chart {
                title: &title,
                x_label: "measured (ms)",
                y_label: "predicted (ms)",
                series: &scatter,
                log: (true, true),
                scatter: true,
                diagonal: true,
            },
        ),
        (
            "error-cdf",
            Chart {
                title: &title,
                x_label: "absolute percentage error (%)",
                y_label: "share of rows (%)",
                series: &cdfs,
                log: (true, false),
                scatter: false,
                diagonal: false,
            },
        ),
    ];
    let mut files = Vec::new();
    for (name, chart) in &charts {
        let plots = Path::new("plots");
        files.push((
            plots.join(format!("{kind}-{name}.svg")),
            chart.svg().into_bytes(),
        ));
        files.push((plots.join(format!("{kind}-{name}.png")), chart.png()?));
    }
    Ok(files)
}

/// `eval networks --plot`: predicted against measured, per phase the plain sum and (when
/// every run has it) the composed prediction.
pub fn networks(
    path: &Path,
    runs: &[perfcast_calibrate::calibrate::Compared],
    device: &str,
) -> anyhow::Result<()> {
    use perfcast_core::Phase;
    let mut series = Vec::new();
    for phase in [Phase::Inference, Phase::Training] {
        let rows: Vec<_> = runs.iter().filter(|c| c.phase == phase).collect();
        if rows.is_empty() {
            continue;
        }
        series.push(Series::new(
            format!("{} plain sum", phase.name()),
            rows.iter().map(|c| (c.measured_ms, c.plain_ms)).collect(),
        ));
        if rows.iter().all(|c| c.composed.is_some()) {
            series.push(Series::new(
                format!("{} composed", phase.name()),
                rows.iter()
                    .filter_map(|c| c.composed.as_ref().map(|x| (c.measured_ms, x.total_ms)))
                    .collect(),
            ));
        }
    }
    let title = format!("{device}: whole networks, predicted against measured");
    let chart = Chart {
        title: &title,
        x_label: "measured latency (ms)",
        y_label: "predicted latency (ms)",
        series: &series,
        log: (true, true),
        scatter: true,
        diagonal: true,
    };
    write(path, &chart)
}

/// `scale predict --plot`: throughput against devices beside linear scaling from one device.
pub fn scaling(
    path: &Path,
    rows: &[perfcast_scale::IterationEstimate],
    name: &str,
    title: &str,
) -> anyhow::Result<()> {
    let base = rows
        .iter()
        .find(|r| r.devices == 1)
        .map(|r| r.throughput)
        .unwrap_or(rows[0].throughput / rows[0].speedup);
    let series = [
        Series::new(
            name,
            rows.iter()
                .map(|r| (r.devices as f64, r.throughput))
                .collect(),
        ),
        Series::new(
            "linear scaling",
            rows.iter()
                .map(|r| (r.devices as f64, base * r.devices as f64))
                .collect(),
        ),
    ];
    write(
        path,
        &Chart {
            title,
            x_label: "devices (count)",
            y_label: "throughput (samples/s)",
            series: &series,
            log: (true, true),
            scatter: false,
            diagonal: false,
        },
    )
}

/// The scaling curves (predicted time against p for up to six (b, n) pairs of the
/// runs) and measured against predicted, beside it.
pub fn scale_fit(
    path: &Path,
    fitted: &perfcast_scale::FittedExpression,
    runs: &[perfcast_scale::Run],
) -> anyhow::Result<()> {
    // Up to six (b, n) pairs of the runs, spread over their range.
    let mut pairs: Vec<(f64, f64)> = runs.iter().map(|r| (r.point.b, r.point.n)).collect();
    pairs.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    pairs.dedup();
    let shown: Vec<(f64, f64)> = if pairs.len() <= 6 {
        pairs
    } else {
        let last = (pairs.len() - 1) as f64;
        (0..6)
            .map(|i| pairs[(last * f64::from(i) / 5.0).round() as usize])
            .collect()
    };
    let max_p = runs.iter().map(|r| r.point.p).fold(1.0, f64::max);
    let top = (2.0 * max_p).ceil().max(2.0);
    let ps: Vec<f64> = (0..=48)
        .map(|i| 1.0 + (top - 1.0) * f64::from(i) / 48.0)
        .collect();
    let curves: Vec<Series> = shown
        .iter()
        .map(|&(b, n)| {
            Series::new(
                format!("b={b} n={n}"),
                ps.iter()
                    .map(|&p| (p, fitted.predict(perfcast_scale::Point { p, b, n })))
                    .collect(),
            )
        })
        .collect();
    write(
        path,
        &Chart {
            title: "predicted scaling: T(p, b, n)",
            x_label: "processors p (count)",
            y_label: "predicted time T (s)",
            series: &curves,
            log: (false, true),
            scatter: false,
            diagonal: false,
        },
    )?;
    let scatter = [Series::new(
        format!("{} runs (MAPE {}%)", runs.len(), sig3(fitted.mape(runs))),
        runs.iter()
            .map(|r| (r.time_s, fitted.predict(r.point)))
            .collect(),
    )];
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("plot");
    let ext = path.extension().and_then(|s| s.to_str()).unwrap_or("svg");
    write(
        &path.with_file_name(format!("{stem}-fit.{ext}")),
        &Chart {
            title: "fitted expression: every run",
            x_label: "measured time (s)",
            y_label: "predicted time (s)",
            series: &scatter,
            log: (true, true),
            scatter: true,
            diagonal: true,
        },
    )
}

/// `plan --plot`: seconds per step against dollars per 1,000 steps for every plan that fits
/// and has a price, one colour per device, the time-cost Pareto front drawn as a line with
/// each of its plans labelled (device, GPUs, layout) so the chart reads without the table.
pub fn plan(path: &Path, r: &perfcast_scale::plan::PlanReport) -> anyhow::Result<()> {
    let mut series: Vec<Series> = Vec::new();
    for row in r.rows.iter().filter(|r| r.fits) {
        let Some(cost) = row.cost_per_1000_steps else {
            continue;
        };
        let name = format!("{} (fits)", row.device);
        match series.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push((row.step_s, cost)),
            None => series.push(Series::new(name, vec![(row.step_s, cost)])),
        }
    }
    let mut front: Vec<((f64, f64), String)> = r
        .rows
        .iter()
        .filter(|r| r.pareto)
        .filter_map(|r| {
            let label = format!("{} x{} {}", r.device, r.gpus, r.layout_name);
            r.cost_per_1000_steps.map(|c| ((r.step_s, c), label))
        })
        .collect();
    front.sort_by(|a, b| a.0.0.total_cmp(&b.0.0));
    anyhow::ensure!(
        !series.is_empty(),
        "`--plot {}`: no plan both fits and has a price to plot",
        path.display()
    );
    let title = format!(
        "{}, batch {}: time vs cost",
        r.network, r.config.global_batch
    );
    let chart = Chart {
        title: &title,
        x_label: "time per step (s)",
        y_label: "cost per 1,000 steps (USD)",
        series: &series,
        log: (true, true),
        scatter: true,
        diagonal: false,
    };
    let (points, labels) = front.into_iter().unzip();
    let lines = [Series {
        name: "Pareto front (device xGPUs layout)".into(),
        points,
        labels,
    }];
    write_with_lines(path, &chart, &lines)
}
