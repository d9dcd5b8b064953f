//! Minimal SVG charts: log-log scatter (predicted vs measured) and error CDFs.
//!
//! Hand-written SVG keeps the binary free of a plotting stack and of fonts: text is `<text>`,
//! rendered by whatever views the file.

use std::fmt::Write as _;

/// One named set of points.
pub struct Series {
    /// Legend label.
    pub name: String,
    /// (x, y) points.
    pub points: Vec<(f64, f64)>,
}

const W: f64 = 640.0;
const H: f64 = 480.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 55.0;
const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
}

impl Axis {
    fn fit(values: impl Iterator<Item = f64>, log: bool) -> Axis {
        let (mut lo, mut hi) = values
            .filter(|v| v.is_finite() && (!log || *v > 0.0))
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
                (a.min(v), b.max(v))
            });
        if !lo.is_finite() {
            (lo, hi) = (1.0, 10.0);
        }
        if log {
            lo = 10f64.powf(lo.log10().floor());
            hi = 10f64.powf(hi.log10().ceil().max(lo.log10() + 1.0));
        } else if hi <= lo {
            hi = lo + 1.0;
        }
        Axis { lo, hi, log }
    }

    fn frac(&self, v: f64) -> f64 {
        if self.log {
            (v.max(self.lo).log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        }
    }

    fn ticks(&self) -> Vec<f64> {
        if self.log {
            let (a, b) = (
                self.lo.log10().round() as i32,
                self.hi.log10().round() as i32,
            );
            (a..=b).map(|e| 10f64.powi(e)).collect()
        } else {
            (0..=5)
                .map(|i| self.lo + (self.hi - self.lo) * f64::from(i) / 5.0)
                .collect()
        }
    }
}

fn label(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if (1e-3..1e4).contains(&v.abs()) {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        format!("{v:.0e}")
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Draws series as points (`scatter`) or lines, with an optional y = x diagonal.
pub fn chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log: (bool, bool),
    scatter: bool,
    diagonal: bool,
) -> String {
    let all = || series.iter().flat_map(|s| s.points.iter());
    let (mut xa, mut ya) = (
        Axis::fit(all().map(|p| p.0), log.0),
        Axis::fit(all().map(|p| p.1), log.1),
    );
    if diagonal {
        // Same range on both axes so the diagonal is the 45° line.
        let (lo, hi) = (xa.lo.min(ya.lo), xa.hi.max(ya.hi));
        xa = Axis { lo, hi, log: log.0 };
        ya = Axis { lo, hi, log: log.1 };
    }
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let px = |v: f64| LEFT + xa.frac(v) * pw;
    let py = |v: f64| TOP + (1.0 - ya.frac(v)) * ph;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/><text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
        W / 2.0,
        escape(title)
    );
    for t in xa.ticks() {
        let x = px(t);
        let _ = write!(
            s,
            r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#ddd"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            TOP + ph,
            TOP + ph + 16.0,
            label(t)
        );
    }
    for t in ya.ticks() {
        let y = py(t);
        let _ = write!(
            s,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT + pw,
            LEFT - 6.0,
            y + 4.0,
            label(t)
        );
    }
    let _ = write!(
        s,
        r#"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="black"/><text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text><text transform="translate(16 {:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
        LEFT + pw / 2.0,
        H - 12.0,
        escape(x_label),
        TOP + ph / 2.0,
        escape(y_label)
    );
    if diagonal {
        let _ = write!(
            s,
            r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="gray" stroke-dasharray="4 4"/>"#,
            px(xa.lo),
            py(ya.lo),
            px(xa.hi),
            py(ya.hi)
        );
    }
    for (i, ser) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        if scatter {
            for &(x, y) in &ser.points {
                if x.is_finite() && y.is_finite() {
                    let _ = write!(
                        s,
                        r#"<circle cx="{:.1}" cy="{:.1}" r="2.2" fill="{c}" fill-opacity="0.6"/>"#,
                        px(x),
                        py(y)
                    );
                }
            }
        } else {
            let path: Vec<String> = ser
                .points
                .iter()
                .filter(|p| p.0.is_finite() && p.1.is_finite())
                .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
                .collect();
            let _ = write!(
                s,
                r#"<polyline fill="none" stroke="{c}" stroke-width="1.8" points="{}"/>"#,
                path.join(" ")
            );
        }
        let ly = TOP + 16.0 + 16.0 * i as f64;
        let _ = write!(
            s,
            r#"<rect x="{:.1}" y="{:.1}" width="10" height="10" fill="{c}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            LEFT + 10.0,
            ly - 9.0,
            LEFT + 26.0,
            ly,
            escape(&ser.name)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Points of the empirical CDF of absolute percentage errors (x: error %, y: share %).
pub fn error_cdf(pred: &[f64], truth: &[f64]) -> Vec<(f64, f64)> {
    let mut ape: Vec<f64> = pred
        .iter()
        .zip(truth)
        .map(|(p, t)| 100.0 * (p - t).abs() / t)
        .filter(|v| v.is_finite())
        .collect();
    ape.sort_by(f64::total_cmp);
    let n = ape.len() as f64;
    ape.iter()
        .enumerate()
        .map(|(i, &a)| (a.max(0.01), 100.0 * (i + 1) as f64 / n))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svg_has_points_axes_and_escaped_labels() {
        let s = chart(
            "conv2d <test>",
            "measured ms",
            "predicted ms",
            &[Series {
                name: "trees".into(),
                points: vec![(0.1, 0.12), (1.0, 0.9), (10.0, 11.0)],
            }],
            (true, true),
            true,
            true,
        );
        assert!(s.starts_with("<svg") && s.ends_with("</svg>\n"));
        assert_eq!(s.matches("<circle").count(), 3);
        assert!(s.contains("conv2d &lt;test&gt;"));
        assert!(s.contains(">0.1<") && s.contains(">10<"));
    }

    #[test]
    fn cdf_reaches_one_hundred_percent() {
        let c = error_cdf(&[1.1, 2.0, 2.7], &[1.0, 2.0, 3.0]);
        assert_eq!(c.len(), 3);
        assert_eq!(c[2].1, 100.0);
        assert!((c[2].0 - 10.0).abs() < 1e-9);
    }
}
