//! Text for the PNG charts: DejaVu Sans's printable ASCII outlines (extracted by
//! `assets/make_font.py`, licence in `assets/DEJAVU-LICENSE.txt`), flattened to line segments
//! and filled with anti-aliased coverage, so charts read the same on every machine without a
//! system font or a font crate.

use std::sync::OnceLock;

/// A point of a glyph outline in font units, and whether it is on the curve.
type OutlinePoint = (f64, f64, bool);

struct Glyph {
    advance: f64,
    contours: Vec<Vec<OutlinePoint>>,
}

/// The embedded font: metrics in font units and one glyph per printable ASCII character.
pub struct Font {
    units_per_em: f64,
    ascender: f64,
    first: u32,
    glyphs: Vec<Glyph>,
}

/// A line segment in pixels, y down.
pub type Segment = ((f64, f64), (f64, f64));

const DATA: &[u8] = include_bytes!("../../assets/dejavu-sans-ascii.bin");

/// The embedded font, parsed once.
pub fn font() -> &'static Font {
    static FONT: OnceLock<Font> = OnceLock::new();
    FONT.get_or_init(|| Font::parse(DATA).expect("the embedded font is well formed"))
}

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn bytes<const N: usize>(&mut self) -> Option<[u8; N]> {
        let b = self.data.get(self.at..self.at + N)?.try_into().ok()?;
        self.at += N;
        Some(b)
    }
    fn u8(&mut self) -> Option<u8> {
        self.bytes::<1>().map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.bytes::<2>().map(u16::from_le_bytes)
    }
    fn i16(&mut self) -> Option<i16> {
        self.bytes::<2>().map(i16::from_le_bytes)
    }
}

impl Font {
    fn parse(data: &[u8]) -> Option<Font> {
        if data.get(..4)? != b"PCF1" {
            return None;
        }
        let mut r = Reader { data, at: 4 };
        let units_per_em = f64::from(r.u16()?);
        let ascender = f64::from(r.i16()?);
        let _descender = r.i16()?;
        let first = u32::from(r.u8()?);
        let count = r.u8()?;
        let mut glyphs = Vec::with_capacity(usize::from(count));
        for _ in 0..count {
            let advance = f64::from(r.u16()?);
            let n = r.u16()?;
            let mut contours = Vec::with_capacity(usize::from(n));
            for _ in 0..n {
                let points = r.u16()?;
                let mut contour = Vec::with_capacity(usize::from(points));
                for _ in 0..points {
                    let (x, y, on) = (r.i16()?, r.i16()?, r.u8()?);
                    contour.push((f64::from(x), f64::from(y), on == 1));
                }
                contours.push(contour);
            }
            glyphs.push(Glyph { advance, contours });
        }
        Some(Font {
            units_per_em,
            ascender,
            first,
            glyphs,
        })
    }

    fn glyph(&self, ch: char) -> &Glyph {
        let index = |c: char| (c as u32).checked_sub(self.first).map(|i| i as usize);
        index(ch)
            .and_then(|i| self.glyphs.get(i))
            .or_else(|| index('?').and_then(|i| self.glyphs.get(i)))
            .unwrap_or(&self.glyphs[0])
    }

    /// Width of `text` at `size` pixels per em.
    pub fn width(&self, text: &str, size: f64) -> f64 {
        let scale = size / self.units_per_em;
        text.chars().map(|c| self.glyph(c).advance * scale).sum()
    }

    /// Height above the baseline of the font's tallest glyphs at `size`.
    pub fn ascent(&self, size: f64) -> f64 {
        self.ascender * size / self.units_per_em
    }

    /// The outline of `text` at `size` pixels per em as line segments, the pen starting at
    /// (0, 0) on the baseline, y down.
    pub fn outline(&self, text: &str, size: f64) -> Vec<Segment> {
        let scale = size / self.units_per_em;
        // Curves are split finer at larger sizes so their chords stay under a tenth of a pixel.
        let steps = (size / 4.0).ceil().clamp(2.0, 8.0) as usize;
        let mut out = Vec::new();
        let mut pen = 0.0;
        for ch in text.chars() {
            let glyph = self.glyph(ch);
            for contour in &glyph.contours {
                let to_px = |(x, y): (f64, f64)| (pen + x * scale, -y * scale);
                flatten(contour, steps, &mut |a, b| out.push((to_px(a), to_px(b))));
            }
            pen += glyph.advance * scale;
        }
        out
    }
}

/// A closed TrueType contour (quadratic B-splines, with implied on-curve midpoints between
/// two off-curve points) as line segments.
fn flatten(contour: &[OutlinePoint], steps: usize, emit: &mut dyn FnMut((f64, f64), (f64, f64))) {
    let n = contour.len();
    if n < 2 {
        return;
    }
    let mid = |a: OutlinePoint, b: OutlinePoint| ((a.0 + b.0) / 2.0, (a.1 + b.1) / 2.0);
    // Start on the curve: an on-curve point, or the midpoint of two off-curve ones.
    let start_index = contour.iter().position(|p| p.2);
    let (start, order): ((f64, f64), Vec<OutlinePoint>) = match start_index {
        Some(i) => (
            (contour[i].0, contour[i].1),
            (1..=n).map(|k| contour[(i + k) % n]).collect(),
        ),
        None => (mid(contour[n - 1], contour[0]), contour.to_vec()),
    };
    let mut current = start;
    let mut control: Option<(f64, f64)> = None;
    for p in order {
        let point = (p.0, p.1);
        match (p.2, control) {
            (true, None) => {
                emit(current, point);
                current = point;
            }
            (true, Some(c)) => {
                curve(current, c, point, steps, emit);
                current = point;
                control = None;
            }
            (false, None) => control = Some(point),
            (false, Some(c)) => {
                let m = ((c.0 + point.0) / 2.0, (c.1 + point.1) / 2.0);
                curve(current, c, m, steps, emit);
                current = m;
                control = Some(point);
            }
        }
    }
    match control {
        Some(c) => curve(current, c, start, steps, emit),
        None => emit(current, start),
    }
}

/// A quadratic Bezier from `from` to `to` around `c`, as `steps` chords.
fn curve(
    from: (f64, f64),
    c: (f64, f64),
    to: (f64, f64),
    steps: usize,
    emit: &mut dyn FnMut((f64, f64), (f64, f64)),
) {
    let mut last = from;
    for s in 1..=steps {
        let t = s as f64 / steps as f64;
        let u = 1.0 - t;
        let p = (
            u * u * from.0 + 2.0 * u * t * c.0 + t * t * to.0,
            u * u * from.1 + 2.0 * u * t * c.1 + t * t * to.1,
        );
        emit(last, p);
        last = p;
    }
}

/// Coverage (0 to 1) of the shape the closed `segments` outline, over a `w` x `h` grid of
/// pixels: signed areas accumulated per cell, then summed along each row (the accumulation
/// rasteriser of font-rs), which anti-aliases edges exactly.
pub fn coverage(segments: &[Segment], w: usize, h: usize) -> Vec<f64> {
    let stride = w + 2;
    let mut acc = vec![0.0f64; stride * h + 2];
    for &(p0, p1) in segments {
        line(&mut acc, stride, h, p0, p1);
    }
    let mut out = vec![0.0; w * h];
    for y in 0..h {
        let mut sum = 0.0;
        for x in 0..stride {
            sum += acc[y * stride + x];
            if x < w {
                out[y * w + x] = sum.abs().min(1.0);
            }
        }
    }
    out
}

fn line(acc: &mut [f64], stride: usize, h: usize, p0: (f64, f64), p1: (f64, f64)) {
    if (p0.1 - p1.1).abs() < 1e-9 {
        return;
    }
    let (dir, p0, p1) = if p0.1 < p1.1 {
        (1.0, p0, p1)
    } else {
        (-1.0, p1, p0)
    };
    let dxdy = (p1.0 - p0.0) / (p1.1 - p0.1);
    let mut x = p0.0;
    let y0 = p0.1.max(0.0);
    if p0.1 < 0.0 {
        x -= p0.1 * dxdy;
    }
    let y_end = (p1.1.ceil().max(0.0) as usize).min(h);
    for y in (y0 as usize)..y_end {
        let row = y * stride;
        let dy = ((y + 1) as f64).min(p1.1) - (y as f64).max(p0.1);
        let xnext = x + dxdy * dy;
        let d = dy * dir;
        let (x0, x1) = if x < xnext { (x, xnext) } else { (xnext, x) };
        let x0 = x0.clamp(0.0, (stride - 2) as f64);
        let x1 = x1.clamp(0.0, (stride - 2) as f64);
        let x0floor = x0.floor();
        let x0i = x0floor as usize;
        let x1ceil = x1.ceil();
        let x1i = x1ceil as usize;
        if x1i <= x0i + 1 {
            let xmf = 0.5 * (x0 + x1) - x0floor;
            acc[row + x0i] += d - d * xmf;
            acc[row + x0i + 1] += d * xmf;
        } else {
            let s = 1.0 / (x1 - x0);
            let x0f = x0 - x0floor;
            let a0 = 0.5 * s * (1.0 - x0f) * (1.0 - x0f);
            let x1f = x1 - x1ceil + 1.0;
            let am = 0.5 * s * x1f * x1f;
            acc[row + x0i] += d * a0;
            if x1i == x0i + 2 {
                acc[row + x0i + 1] += d * (1.0 - a0 - am);
            } else {
                let a1 = s * (1.5 - x0f);
                acc[row + x0i + 1] += d * (a1 - a0);
                for xi in x0i + 2..x1i - 1 {
                    acc[row + xi] += d * s;
                }
                let a2 = a1 + (x1i - x0i - 3) as f64 * s;
                acc[row + x1i - 1] += d * (1.0 - a2 - am);
            }
            acc[row + x1i] += d * am;
        }
        x = xnext;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_square_is_filled_inside_and_empty_outside() {
        // A 4 x 4 square from (2, 2), edges on pixel boundaries.
        let sq = [
            ((2.0, 2.0), (6.0, 2.0)),
            ((6.0, 2.0), (6.0, 6.0)),
            ((6.0, 6.0), (2.0, 6.0)),
            ((2.0, 6.0), (2.0, 2.0)),
        ];
        let c = coverage(&sq, 8, 8);
        assert!((c[3 * 8 + 3] - 1.0).abs() < 1e-9);
        assert!(c[0].abs() < 1e-9 && c[7 * 8 + 7].abs() < 1e-9);
        let total: f64 = c.iter().sum();
        assert!((total - 16.0).abs() < 1e-9, "{total}");
    }

    #[test]
    fn text_has_width_and_ink() {
        let f = font();
        assert!(f.width("predicted (ms)", 12.0) > f.width("ms", 12.0));
        // An `l` is a bar as tall as the ascent; a space has width but no ink.
        assert!(f.outline(" ", 12.0).is_empty());
        let segments = f.outline("l", 20.0);
        let top = segments.iter().map(|s| s.0.1).fold(f64::INFINITY, f64::min);
        assert!(top < -0.6 * f.ascent(20.0), "{top}");
    }
}
