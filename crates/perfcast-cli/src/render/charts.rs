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
    let bytes = if plot::is_svg(path)? {
        chart.svg().into_bytes()
    } else {
        chart.png()?
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
        .map(|(name, pred, _)| Series {
            name: name.to_string(),
            points: held
                .measured
                .iter()
                .copied()
                .zip(pred.iter().copied())
                .collect(),
        })
        .collect();
    let cdfs: Vec<Series> = held
        .models
        .iter()
        .map(|(name, pred, mape)| Series {
            name: format!("{name} (MAPE {}%)", sig3(*mape)),
            points: plot::error_cdf(pred, held.measured),
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
    runs: &[perfcast_select::calibrate::Compared],
    device: &str,
) -> anyhow::Result<()> {
    use perfcast_core::Phase;
    let mut series = Vec::new();
    for phase in [Phase::Inference, Phase::Training] {
        let rows: Vec<_> = runs.iter().filter(|c| c.phase == phase).collect();
        if rows.is_empty() {
            continue;
        }
        series.push(Series {
            name: format!("{} plain sum", phase.name()),
            points: rows.iter().map(|c| (c.measured_ms, c.plain_ms)).collect(),
        });
        if rows.iter().all(|c| c.composed.is_some()) {
            series.push(Series {
                name: format!("{} composed", phase.name()),
                points: rows
                    .iter()
                    .filter_map(|c| c.composed.as_ref().map(|x| (c.measured_ms, x.total_ms)))
                    .collect(),
            });
        }
    }
    let title = format!("{device}: networks");
    let chart = Chart {
        title: &title,
        x_label: "measured (ms)",
        y_label: "predicted (ms)",
        series: &series,
        log: (true, true),
        scatter: true,
        diagonal: true,
    };
    let bytes = match path.extension().and_then(|e| e.to_str()) {
        Some("png") => chart.png()?,
        Some("svg") => chart.svg().into_bytes(),
        _ => anyhow::bail!(
            "`--plot {}`: the file name must end in `.svg` or `.png`",
            path.display()
        ),
    };
    perfcast_data::write_atomic(path, &bytes)
        .with_context(|| format!("writing `{}`", path.display()))?;
    Ok(())
}
