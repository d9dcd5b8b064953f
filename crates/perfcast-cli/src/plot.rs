//! Minimal charts, as SVG and PNG: log-log scatter (predicted vs measured), error CDFs, and
//! lines over scatters with their points labelled (a Pareto front).
//!
//! Hand-written output keeps the binary free of a plotting stack and of system fonts: SVG text
//! is `<text>` in DejaVu Sans (or the viewer's sans-serif), and PNG text is drawn from DejaVu
//! Sans's outlines embedded in the binary ([`font`]), anti-aliased, with the same metrics, so
//! labels are placed alike in both.

mod font;

use std::fmt::Write as _;

/// One named set of points.
pub struct Series {
    /// Legend label.
    pub name: String,
    /// (x, y) points.
    pub points: Vec<(f64, f64)>,
    /// A label per point, drawn beside it (empty: none).
    pub labels: Vec<String>,
}

impl Series {
    /// A series of unlabelled points.
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
            labels: Vec::new(),
        }
    }
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
        } else {
            // Non-negative data starts at 0; the top is rounded up to 1, 2 or 5 x 10^k.
            if lo >= 0.0 {
                lo = 0.0;
            }
            if hi <= lo {
                hi = lo + 1.0;
            }
            let step = 10f64.powf((hi - lo).log10().floor());
            hi = lo
                + [1.0, 2.0, 5.0, 10.0]
                    .iter()
                    .map(|m| m * step)
                    .find(|&span| lo + span >= hi)
                    .unwrap_or(10.0 * step);
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

/// How text is anchored at its point.
#[derive(Clone, Copy, PartialEq)]
enum Anchor {
    Start,
    Middle,
    End,
}

/// What a chart draws on: an SVG document or a pixel buffer. One layout serves both.
trait Canvas {
    fn line(&mut self, a: (f64, f64), b: (f64, f64), color: &str, dashed: bool);
    fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: Option<&str>);
    fn dot(&mut self, x: f64, y: f64, color: &str);
    fn polyline(&mut self, points: &[(f64, f64)], color: &str);
    fn text(&mut self, x: f64, y: f64, text: &str, anchor: Anchor, size: f64, vertical: bool);
}

struct Svg(String);

impl Canvas for Svg {
    fn line(&mut self, a: (f64, f64), b: (f64, f64), color: &str, dashed: bool) {
        let dash = if dashed {
            r#" stroke-dasharray="4 4""#
        } else {
            ""
        };
        let _ = write!(
            self.0,
            r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{color}"{dash}/>"#,
            a.0, a.1, b.0, b.1
        );
    }
    fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: Option<&str>) {
        match fill {
            Some(c) => {
                let _ = write!(
                    self.0,
                    r#"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="{c}"/>"#
                );
            }
            None => {
                let _ = write!(
                    self.0,
                    r#"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="none" stroke="black"/>"#
                );
            }
        }
    }
    fn dot(&mut self, x: f64, y: f64, color: &str) {
        let _ = write!(
            self.0,
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="2.2" fill="{color}" fill-opacity="0.6"/>"#
        );
    }
    fn polyline(&mut self, points: &[(f64, f64)], color: &str) {
        let path: Vec<String> = points
            .iter()
            .map(|(x, y)| format!("{x:.1},{y:.1}"))
            .collect();
        let _ = write!(
            self.0,
            r#"<polyline fill="none" stroke="{color}" stroke-width="1.8" points="{}"/>"#,
            path.join(" ")
        );
    }
    fn text(&mut self, x: f64, y: f64, text: &str, anchor: Anchor, size: f64, vertical: bool) {
        let a = match anchor {
            Anchor::Start => "start",
            Anchor::Middle => "middle",
            Anchor::End => "end",
        };
        let t = escape(text);
        if vertical {
            let _ = write!(
                self.0,
                r#"<text transform="translate({x:.1} {y:.1}) rotate(-90)" text-anchor="{a}" font-size="{size}">{t}</text>"#
            );
        } else {
            let _ = write!(
                self.0,
                r#"<text x="{x:.1}" y="{y:.1}" text-anchor="{a}" font-size="{size}">{t}</text>"#
            );
        }
    }
}

/// An RGB pixel buffer; text is filled from the embedded font's outlines.
struct Raster {
    pixels: Vec<u8>,
}

fn rgb(color: &str) -> [u8; 3] {
    let hex = color.trim_start_matches('#');
    if hex.len() != 6 {
        return [0, 0, 0];
    }
    let byte = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or(0);
    [byte(0), byte(2), byte(4)]
}

impl Raster {
    fn new() -> Raster {
        Raster {
            pixels: vec![255; (W * H) as usize * 3],
        }
    }

    fn put(&mut self, x: i64, y: i64, c: [u8; 3], alpha: f64) {
        if x < 0 || y < 0 || x >= W as i64 || y >= H as i64 {
            return;
        }
        let i = (y as usize * W as usize + x as usize) * 3;
        for (p, new) in self.pixels[i..i + 3].iter_mut().zip(c) {
            let old = f64::from(*p);
            *p = (old + alpha * (f64::from(new) - old)).round() as u8;
        }
    }

    fn png(&self) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut encoder = png::Encoder::new(&mut out, W as u32, H as u32);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().map_err(std::io::Error::other)?;
        writer
            .write_image_data(&self.pixels)
            .map_err(std::io::Error::other)?;
        writer.finish().map_err(std::io::Error::other)?;
        Ok(out)
    }
}

impl Canvas for Raster {
    fn line(&mut self, a: (f64, f64), b: (f64, f64), color: &str, dashed: bool) {
        let c = rgb(color);
        let steps = (b.0 - a.0).abs().max((b.1 - a.1).abs()).ceil().max(1.0) as i64;
        for i in 0..=steps {
            if dashed && (i / 4) % 2 == 1 {
                continue;
            }
            let t = i as f64 / steps as f64;
            self.put(
                (a.0 + t * (b.0 - a.0)).round() as i64,
                (a.1 + t * (b.1 - a.1)).round() as i64,
                c,
                1.0,
            );
        }
    }
    fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: Option<&str>) {
        match fill {
            Some(color) => {
                let c = rgb(color);
                for py in y.round() as i64..(y + h).round() as i64 {
                    for px in x.round() as i64..(x + w).round() as i64 {
                        self.put(px, py, c, 1.0);
                    }
                }
            }
            None => {
                for (a, b) in [
                    ((x, y), (x + w, y)),
                    ((x + w, y), (x + w, y + h)),
                    ((x, y + h), (x + w, y + h)),
                    ((x, y), (x, y + h)),
                ] {
                    self.line(a, b, "#000000", false);
                }
            }
        }
    }
    fn dot(&mut self, x: f64, y: f64, color: &str) {
        let c = rgb(color);
        for dy in -2i64..=2 {
            for dx in -2i64..=2 {
                if dx * dx + dy * dy <= 5 {
                    self.put(x.round() as i64 + dx, y.round() as i64 + dy, c, 0.6);
                }
            }
        }
    }
    fn polyline(&mut self, points: &[(f64, f64)], color: &str) {
        for w in points.windows(2) {
            self.line(w[0], w[1], color, false);
            self.line((w[0].0, w[0].1 + 1.0), (w[1].0, w[1].1 + 1.0), color, false);
        }
    }
    fn text(&mut self, x: f64, y: f64, text: &str, anchor: Anchor, size: f64, vertical: bool) {
        let f = font::font();
        let shift = match anchor {
            Anchor::Start => 0.0,
            Anchor::Middle => f.width(text, size) / 2.0,
            Anchor::End => f.width(text, size),
        };
        // `(x, y)` is the baseline's anchor, as in SVG; vertical text reads upwards.
        let place = |(px, py): (f64, f64)| {
            let px = px - shift;
            if vertical {
                (x + py, y - px)
            } else {
                (x + px, y + py)
            }
        };
        let segments: Vec<font::Segment> = f
            .outline(text, size)
            .into_iter()
            .map(|(a, b)| (place(a), place(b)))
            .collect();
        let points = || segments.iter().flat_map(|&(a, b)| [a, b]);
        let (Some(x0), Some(y0)) = (
            points().map(|p| p.0).reduce(f64::min),
            points().map(|p| p.1).reduce(f64::min),
        ) else {
            return;
        };
        let (x1, y1) = (
            points().map(|p| p.0).fold(x0, f64::max),
            points().map(|p| p.1).fold(y0, f64::max),
        );
        let (ox, oy) = (x0.floor() - 1.0, y0.floor() - 1.0);
        let (w, h) = ((x1 - ox).ceil() as usize + 2, (y1 - oy).ceil() as usize + 2);
        let local: Vec<font::Segment> = segments
            .iter()
            .map(|&(a, b)| ((a.0 - ox, a.1 - oy), (b.0 - ox, b.1 - oy)))
            .collect();
        let cover = font::coverage(&local, w, h);
        for j in 0..h {
            for i in 0..w {
                let alpha = cover[j * w + i];
                if alpha > 0.0 {
                    self.put(ox as i64 + i as i64, oy as i64 + j as i64, [0, 0, 0], alpha);
                }
            }
        }
    }
}

/// A chart's content: what both the SVG and the PNG show.
pub struct Chart<'a> {
    /// Title above the plot.
    pub title: &'a str,
    /// Horizontal axis label.
    pub x_label: &'a str,
    /// Vertical axis label.
    pub y_label: &'a str,
    /// The data.
    pub series: &'a [Series],
    /// Log scale on (x, y).
    pub log: (bool, bool),
    /// Points (true) or lines.
    pub scatter: bool,
    /// Draw y = x and give both axes one range.
    pub diagonal: bool,
}

impl Chart<'_> {
    /// The chart as an SVG document.
    pub fn svg(&self) -> String {
        self.svg_with_lines(&[])
    }

    /// The chart as an SVG document, with `lines` drawn as lines over it (a Pareto front over
    /// a scatter).
    pub fn svg_with_lines(&self, lines: &[Series]) -> String {
        let mut svg = Svg(format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="DejaVu Sans, Verdana, sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/>"#
        ));
        self.draw(&mut svg, lines);
        svg.0.push_str("</svg>\n");
        svg.0
    }

    /// The chart as a PNG image.
    pub fn png(&self) -> std::io::Result<Vec<u8>> {
        self.png_with_lines(&[])
    }

    /// The chart as a PNG image, with `lines` drawn as lines over it.
    pub fn png_with_lines(&self, lines: &[Series]) -> std::io::Result<Vec<u8>> {
        let mut raster = Raster::new();
        self.draw(&mut raster, lines);
        raster.png()
    }

    fn draw(&self, c: &mut dyn Canvas, lines: &[Series]) {
        let all = || {
            self.series
                .iter()
                .chain(lines)
                .flat_map(|s| s.points.iter())
        };
        let (mut xa, mut ya) = (
            Axis::fit(all().map(|p| p.0), self.log.0),
            Axis::fit(all().map(|p| p.1), self.log.1),
        );
        if self.diagonal {
            // Same range on both axes so the diagonal is the 45° line.
            let (lo, hi) = (xa.lo.min(ya.lo), xa.hi.max(ya.hi));
            xa = Axis {
                lo,
                hi,
                log: self.log.0,
            };
            ya = Axis {
                lo,
                hi,
                log: self.log.1,
            };
        }
        let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
        let px = |v: f64| LEFT + xa.frac(v) * pw;
        let py = |v: f64| TOP + (1.0 - ya.frac(v)) * ph;
        c.text(W / 2.0, 22.0, self.title, Anchor::Middle, 15.0, false);
        for t in xa.ticks() {
            let x = px(t);
            c.line((x, TOP), (x, TOP + ph), "#dddddd", false);
            c.text(x, TOP + ph + 16.0, &label(t), Anchor::Middle, 12.0, false);
        }
        for t in ya.ticks() {
            let y = py(t);
            c.line((LEFT, y), (LEFT + pw, y), "#dddddd", false);
            c.text(LEFT - 6.0, y + 4.0, &label(t), Anchor::End, 12.0, false);
        }
        c.rect(LEFT, TOP, pw, ph, None);
        c.text(
            LEFT + pw / 2.0,
            H - 12.0,
            self.x_label,
            Anchor::Middle,
            12.0,
            false,
        );
        c.text(
            16.0,
            TOP + ph / 2.0,
            self.y_label,
            Anchor::Middle,
            12.0,
            true,
        );
        if self.diagonal {
            c.line(
                (px(xa.lo), py(ya.lo)),
                (px(xa.hi), py(ya.hi)),
                "#808080",
                true,
            );
        }
        // Boxes labels must not cover: the legend, then each label placed.
        let legend_width = self
            .series
            .iter()
            .chain(lines)
            .map(|s| font::font().width(&s.name, 12.0))
            .fold(0.0, f64::max);
        let legend_rows = (self.series.len() + lines.len()) as f64;
        let (legend_w, legend_h) = (legend_width + 24.0, 4.0 + 16.0 * legend_rows);
        // The legend goes in the plot corner that covers the fewest points.
        let drawn: Vec<(f64, f64)> = all()
            .filter(|p| p.0.is_finite() && p.1.is_finite())
            .map(|&(x, y)| (px(x), py(y)))
            .collect();
        let corners = [
            (LEFT + 6.0, TOP + 4.0),
            (LEFT + pw - 6.0 - legend_w, TOP + 4.0),
            (LEFT + pw - 6.0 - legend_w, TOP + ph - 4.0 - legend_h),
            (LEFT + 6.0, TOP + ph - 4.0 - legend_h),
        ];
        let covered = |&(x0, y0): &(f64, f64)| {
            drawn
                .iter()
                .filter(|p| {
                    p.0 >= x0 - 8.0
                        && p.0 <= x0 + legend_w + 8.0
                        && p.1 >= y0 - 8.0
                        && p.1 <= y0 + legend_h + 8.0
                })
                .count()
        };
        let (lx, ly0) = corners
            .iter()
            .copied()
            .min_by_key(covered)
            .unwrap_or(corners[0]);
        let mut taken = vec![((lx, ly0, lx + legend_w, ly0 + legend_h), true)];
        for (i, ser) in self.series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let finite = ser
                .points
                .iter()
                .filter(|p| p.0.is_finite() && p.1.is_finite());
            if self.scatter {
                for &(x, y) in finite {
                    c.dot(px(x), py(y), color);
                }
            } else {
                let points: Vec<(f64, f64)> = finite.map(|&(x, y)| (px(x), py(y))).collect();
                c.polyline(&points, color);
            }
            let ly = ly0 + 12.0 + 16.0 * i as f64;
            c.rect(lx + 4.0, ly - 9.0, 10.0, 10.0, Some(color));
            c.text(lx + 20.0, ly, &ser.name, Anchor::Start, 12.0, false);
        }
        for (k, ser) in lines.iter().enumerate() {
            let points: Vec<(f64, f64)> = ser
                .points
                .iter()
                .filter(|p| p.0.is_finite() && p.1.is_finite())
                .map(|&(x, y)| (px(x), py(y)))
                .collect();
            c.polyline(&points, "#000000");
            for &(x, y) in &points {
                c.rect(x - 3.0, y - 3.0, 6.0, 6.0, None);
            }
            // The line and its markers are obstacles too: boxes every few pixels along it.
            for w in points.windows(2) {
                let (a, b) = (w[0], w[1]);
                let steps = ((b.0 - a.0).hypot(b.1 - a.1) / 4.0).ceil().max(1.0) as usize;
                for i in 0..=steps {
                    let t = i as f64 / steps as f64;
                    let (x, y) = (a.0 + t * (b.0 - a.0), a.1 + t * (b.1 - a.1));
                    taken.push(((x - 3.0, y - 3.0, x + 3.0, y + 3.0), false));
                }
            }
            taken.extend(
                points
                    .iter()
                    .map(|&(x, y)| ((x - 4.0, y - 4.0, x + 4.0, y + 4.0), false)),
            );
            let labelled = ser
                .points
                .iter()
                .zip(&ser.labels)
                .filter(|(p, _)| p.0.is_finite() && p.1.is_finite())
                .map(|(&(x, y), label)| ((px(x), py(y)), label.as_str()));
            for ((x, y), label) in labelled {
                place_label(c, &mut taken, (x, y), label, (pw, ph));
            }
            let ly = ly0 + 12.0 + 16.0 * (self.series.len() + k) as f64;
            c.line(
                (lx + 2.0, ly - 4.0),
                (lx + 16.0, ly - 4.0),
                "#000000",
                false,
            );
            c.text(lx + 20.0, ly, &ser.name, Anchor::Start, 12.0, false);
        }
    }
}

/// A box in pixels: left, top, right, bottom.
type Box2 = (f64, f64, f64, f64);

/// Draws `label` beside the point `at` where it covers no box in `taken` (boxes marked `true`
/// are other labels and the legend, the others lines and markers) and stays in the plot; the
/// places are tried nearest first (above right, below left, right, left, above, below, the
/// other diagonals), then again over lines and markers but never over a label. A label with
/// no place at all is left out rather than drawn over another.
fn place_label(
    c: &mut dyn Canvas,
    taken: &mut Vec<(Box2, bool)>,
    at: (f64, f64),
    label: &str,
    (pw, ph): (f64, f64),
) {
    const SIZE: f64 = 10.0;
    let f = font::font();
    let (w, asc) = (f.width(label, SIZE), f.ascent(SIZE));
    let (x, y) = at;
    // (left edge, baseline) of each candidate place, nearest first.
    let candidates = [5.0, 12.0, 20.0].into_iter().flat_map(|d: f64| {
        [
            (x + d, y - d - 2.0),
            (x - d - w, y + d + asc),
            (x + d + 1.0, y + asc / 2.0 - 1.0),
            (x - d - 1.0 - w, y + asc / 2.0 - 1.0),
            (x - w / 2.0, y - d - 2.0),
            (x - w / 2.0, y + d + 2.0 + asc),
            (x + d, y + d + asc),
            (x - d - w, y - d - 2.0),
        ]
    });
    let overlaps = |a: &Box2, b: &Box2| a.0 < b.2 && b.0 < a.2 && a.1 < b.3 && b.1 < a.3;
    for hard_only in [false, true] {
        for (lx, base) in candidates.clone() {
            let bbox = (lx - 1.0, base - asc - 1.0, lx + w + 1.0, base + 3.0);
            let inside =
                bbox.0 >= LEFT && bbox.2 <= LEFT + pw && bbox.1 >= TOP && bbox.3 <= TOP + ph;
            let free = !taken
                .iter()
                .any(|(t, hard)| (*hard || !hard_only) && overlaps(t, &bbox));
            if inside && free {
                c.text(lx, base, label, Anchor::Start, SIZE, false);
                taken.push((bbox, true));
                return;
            }
        }
    }
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

/// Whether a `--plot` path asks for SVG (true) or PNG (false), checked before any work; any other
/// extension is an error naming the path.
pub fn is_svg(path: &std::path::Path) -> anyhow::Result<bool> {
    match path.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("svg") => Ok(true),
        Some(e) if e.eq_ignore_ascii_case("png") => Ok(false),
        _ => anyhow::bail!(
            "`--plot {}`: the file must end in `.svg` or `.png`",
            path.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svg_has_points_axes_and_escaped_labels() {
        let series = [Series::new(
            "trees",
            vec![(0.1, 0.12), (1.0, 0.9), (10.0, 11.0)],
        )];
        let chart = Chart {
            title: "conv2d <test>",
            x_label: "measured ms",
            y_label: "predicted ms",
            series: &series,
            log: (true, true),
            scatter: true,
            diagonal: true,
        };
        let s = chart.svg();
        assert!(s.starts_with("<svg") && s.ends_with("</svg>\n"));
        assert_eq!(s.matches("<circle").count(), 3);
        assert!(s.contains("conv2d &lt;test&gt;"));
        assert!(s.contains(">0.1<") && s.contains(">10<"));
        // A linear axis of shares runs from 0 to a round top.
        let a = Axis::fit([0.833, 37.0, 100.0].into_iter(), false);
        assert_eq!((a.lo, a.hi), (0.0, 100.0));
        assert_eq!(a.ticks()[1], 20.0);
    }

    #[test]
    fn png_is_a_valid_image_with_drawn_pixels() {
        let series = [Series::new(
            "knn",
            vec![(1.0, 10.0), (5.0, 50.0), (9.0, 100.0)],
        )];
        let chart = Chart {
            title: "cdf",
            x_label: "error (%)",
            y_label: "share (%)",
            series: &series,
            log: (true, false),
            scatter: false,
            diagonal: false,
        };
        let bytes = chart.png().unwrap();
        let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), (W as u32, H as u32));
        // Black text and axes, and the series colour, are on the white page; text edges are
        // anti-aliased (greys between black and white).
        assert!(buf.chunks(3).any(|p| p == [0, 0, 0]));
        assert!(buf.chunks(3).any(|p| p == [0x1f, 0x77, 0xb4]));
        assert!(
            buf.chunks(3)
                .any(|p| p[0] == p[1] && p[1] == p[2] && (60..200).contains(&p[0]))
        );
    }

    #[test]
    fn labelled_points_get_their_labels_without_overlap() {
        let scatter = [Series::new("a100 (fits)", vec![(1.0, 10.0), (2.0, 5.0)])];
        let front = [Series {
            name: "Pareto front".into(),
            points: vec![(1.0, 10.0), (2.0, 5.0), (2.05, 5.1)],
            labels: vec![
                "a100 x8 dp8".into(),
                "a100 x4 dp4".into(),
                "a100 x4 tp4".into(),
            ],
        }];
        let chart = Chart {
            title: "plan",
            x_label: "time per step (s)",
            y_label: "cost per 1,000 steps (USD)",
            series: &scatter,
            log: (true, true),
            scatter: true,
            diagonal: false,
        };
        let svg = chart.svg_with_lines(&front);
        for label in ["a100 x8 dp8", "a100 x4 dp4", "a100 x4 tp4"] {
            assert!(svg.contains(&format!(">{label}<")), "{label}");
        }
        assert!(chart.png_with_lines(&front).is_ok());
    }

    #[test]
    fn cdf_reaches_one_hundred_percent() {
        let c = error_cdf(&[1.1, 2.0, 2.7], &[1.0, 2.0, 3.0]);
        assert_eq!(c.len(), 3);
        assert_eq!(c[2].1, 100.0);
        assert!((c[2].0 - 10.0).abs() < 1e-9);
    }
}
