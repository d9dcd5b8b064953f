#!/usr/bin/env python3
"""Writes `dejavu-sans-ascii.bin`, the outlines of DejaVu Sans's printable ASCII glyphs that
perfcast's PNG charts draw text with, so the binary needs no system font and no font crate.

Usage: python3 crates/perfcast-cli/assets/make_font.py /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf
(Debian's `fonts-dejavu-core`). The licence of the outlines is `DEJAVU-LICENSE.txt` beside this
script: the data is an extract of the font, no glyph is changed.

Format (little-endian): b"PCF1", units per em (u16), ascender (i16), descender (i16), first
character (u8), glyph count (u8); then per glyph: advance (u16), contour count (u16), and per
contour its point count (u16) and points (x i16, y i16, on-curve u8), composites flattened.
"""
import struct
import sys

FIRST, LAST = 32, 126


def tables(data):
    count = struct.unpack(">H", data[4:6])[0]
    out = {}
    for i in range(count):
        tag, _, offset, length = struct.unpack(">4sIII", data[12 + 16 * i: 28 + 16 * i])
        out[tag.decode()] = data[offset: offset + length]
    return out


def cmap4(cmap):
    n = struct.unpack(">H", cmap[2:4])[0]
    for i in range(n):
        platform, encoding, offset = struct.unpack(">HHI", cmap[4 + 8 * i: 12 + 8 * i])
        if platform == 3 and encoding == 1 and struct.unpack(">H", cmap[offset: offset + 2])[0] == 4:
            sub = cmap[offset:]
            segs = struct.unpack(">H", sub[6:8])[0] // 2
            ends = struct.unpack(f">{segs}H", sub[14: 14 + 2 * segs])
            base = 16 + 2 * segs
            starts = struct.unpack(f">{segs}H", sub[base: base + 2 * segs])
            deltas = struct.unpack(f">{segs}h", sub[base + 2 * segs: base + 4 * segs])
            range_at = base + 4 * segs
            ranges = struct.unpack(f">{segs}H", sub[range_at: range_at + 2 * segs])

            def lookup(c):
                for s in range(segs):
                    if starts[s] <= c <= ends[s]:
                        if ranges[s] == 0:
                            return (c + deltas[s]) & 0xFFFF
                        at = range_at + 2 * s + ranges[s] + 2 * (c - starts[s])
                        g = struct.unpack(">H", sub[at: at + 2])[0]
                        return (g + deltas[s]) & 0xFFFF if g else 0
                return 0

            return lookup
    raise SystemExit("no Unicode BMP cmap")


def glyph_contours(glyf, loca, gid):
    start, end = loca[gid], loca[gid + 1]
    if start == end:
        return []
    g = glyf[start:end]
    n = struct.unpack(">h", g[0:2])[0]
    if n >= 0:
        ends = struct.unpack(f">{n}H", g[10: 10 + 2 * n])
        total = ends[-1] + 1 if n else 0
        at = 10 + 2 * n
        ilen = struct.unpack(">H", g[at: at + 2])[0]
        at += 2 + ilen
        flags = []
        while len(flags) < total:
            f = g[at]
            at += 1
            flags.append(f)
            if f & 8:
                rep = g[at]
                at += 1
                flags.extend([f] * rep)
        flags = flags[:total]
        coords = []
        for short, same in ((2, 16), (4, 32)):
            v, vals = 0, []
            for f in flags:
                if f & short:
                    d = g[at]
                    at += 1
                    v += d if f & same else -d
                elif not f & same:
                    v += struct.unpack(">h", g[at: at + 2])[0]
                    at += 2
                vals.append(v)
            coords.append(vals)
        points = [(x, y, f & 1) for x, y, f in zip(coords[0], coords[1], flags)]
        out, prev = [], 0
        for e in ends:
            out.append(points[prev: e + 1])
            prev = e + 1
        return out
    # Composite: components placed by x/y offsets (scale flags applied).
    at, out = 10, []
    while True:
        flags, comp = struct.unpack(">HH", g[at: at + 4])
        at += 4
        if flags & 1:
            dx, dy = struct.unpack(">hh", g[at: at + 4])
            at += 4
        else:
            dx, dy = struct.unpack(">bb", g[at: at + 2])
            at += 2
        if not flags & 2:
            raise SystemExit("point-matched components are not supported")
        a, b, c, d = 1.0, 0.0, 0.0, 1.0
        if flags & 8:
            a = d = struct.unpack(">h", g[at: at + 2])[0] / 16384
            at += 2
        elif flags & 0x40:
            a, d = (v / 16384 for v in struct.unpack(">hh", g[at: at + 4]))
            at += 4
        elif flags & 0x80:
            a, b, c, d = (v / 16384 for v in struct.unpack(">hhhh", g[at: at + 8]))
            at += 8
        for contour in glyph_contours(glyf, loca, comp):
            out.append([(round(a * x + c * y + dx), round(b * x + d * y + dy), on) for x, y, on in contour])
        if not flags & 0x20:
            return out


def main():
    data = open(sys.argv[1], "rb").read()
    t = tables(data)
    units = struct.unpack(">H", t["head"][18:20])[0]
    long_loca = struct.unpack(">h", t["head"][50:52])[0] == 1
    n_glyphs = struct.unpack(">H", t["maxp"][4:6])[0]
    ascender, descender = struct.unpack(">hh", t["hhea"][4:8])
    n_metrics = struct.unpack(">H", t["hhea"][34:36])[0]
    if long_loca:
        loca = list(struct.unpack(f">{n_glyphs + 1}I", t["loca"][: 4 * (n_glyphs + 1)]))
    else:
        loca = [2 * v for v in struct.unpack(f">{n_glyphs + 1}H", t["loca"][: 2 * (n_glyphs + 1)])]
    lookup = cmap4(t["cmap"])
    out = bytearray(b"PCF1")
    out += struct.pack("<HhhBB", units, ascender, descender, FIRST, LAST - FIRST + 1)
    for ch in range(FIRST, LAST + 1):
        gid = lookup(ch)
        advance = struct.unpack(">H", t["hmtx"][4 * min(gid, n_metrics - 1): 4 * min(gid, n_metrics - 1) + 2])[0]
        contours = glyph_contours(t["glyf"], loca, gid)
        out += struct.pack("<HH", advance, len(contours))
        for contour in contours:
            out += struct.pack("<H", len(contour))
            for x, y, on in contour:
                out += struct.pack("<hhB", x, y, on)
    open(sys.argv[0].rsplit("/", 1)[0] + "/dejavu-sans-ascii.bin", "wb").write(out)
    print(len(out), "bytes")


if __name__ == "__main__":
    main()
