#!/usr/bin/env python3
"""Draws busbw against message size for loom and the anchors, one panel per
collective, from the report.csv that compare.sh writes. Plain SVG, no
plotting library needed.

usage: perf/plot.py RESULT_DIR_OR_CSV [-o OUT.svg] [--title TEXT]
Sizes below 1 KiB are left out (busbw rounds to zero there; compare.sh's
report compares their times instead). The default output is plot.svg next
to the CSV.
"""
import argparse
import csv
import math
import os
import sys

OPS = [("allreduce", "all-reduce"), ("reduce_scatter", "reduce-scatter"), ("allgather", "all-gather")]
SERIES = [("loom_busbw", "loom", "#1f77b4"), ("mpi_busbw", "Open MPI", "#d62728"),
          ("gloo_busbw", "Gloo (best algorithm)", "#2ca02c")]
PANEL_W, PANEL_H, MARGIN_L, MARGIN_B, MARGIN_T, GAP = 360, 260, 56, 46, 30, 30


def read_rows(path):
    """{op: [(bytes, {column: float})]} for sizes >= 1 KiB, sorted by size."""
    rows = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            size = int(r["bytes"])
            if size < 1024:
                continue
            values = {}
            for col, _, _ in SERIES:
                try:
                    v = float(r.get(col, "nan"))
                except ValueError:
                    v = math.nan
                if not math.isnan(v) and v > 0:
                    values[col] = v
            rows.setdefault(r["op"], []).append((size, values))
    for op in rows:
        rows[op].sort()
    return rows


def size_label(b):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if b >= 1 << shift:
            return f"{b >> shift}{unit}"
    return str(b)


def nice_top(v):
    """A round axis maximum at or above v."""
    if v <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(v))
    for m in (1, 2, 2.5, 5, 10):
        if m * exp >= v:
            return m * exp
    return 10 * exp


def panel(out, x0, y0, title, points):
    """One chart at (x0, y0): log2 size axis, linear GB/s axis."""
    sizes = [s for s, _ in points]
    lo, hi = math.log2(min(sizes)), math.log2(max(sizes))
    if hi == lo:
        hi = lo + 1
    top = nice_top(max((v for _, vals in points for v in vals.values()), default=1.0))

    def px(size):
        return x0 + MARGIN_L + (math.log2(size) - lo) / (hi - lo) * (PANEL_W - MARGIN_L - 10)

    def py(v):
        return y0 + MARGIN_T + (1 - v / top) * (PANEL_H - MARGIN_T - MARGIN_B)

    base, left, right = py(0), px(min(sizes)), px(max(sizes))
    out.append(f'<text x="{x0 + PANEL_W / 2}" y="{y0 + 18}" text-anchor="middle" '
               f'font-weight="bold">{title}</text>')
    for i in range(5):  # horizontal grid and GB/s labels
        v = top * i / 4
        y = py(v)
        out.append(f'<line x1="{left}" y1="{y}" x2="{right}" y2="{y}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4}" text-anchor="end">{v:g}</text>')
    for s in sizes:
        out.append(f'<line x1="{px(s)}" y1="{base}" x2="{px(s)}" y2="{base + 4}" stroke="#000"/>')
        out.append(f'<text x="{px(s)}" y="{base + 16}" text-anchor="middle">{size_label(s)}</text>')
    out.append(f'<line x1="{left}" y1="{base}" x2="{right}" y2="{base}" stroke="#000"/>')
    out.append(f'<text x="{x0 + 14}" y="{y0 + PANEL_H / 2}" text-anchor="middle" '
               f'transform="rotate(-90 {x0 + 14} {y0 + PANEL_H / 2})">busbw GB/s</text>')
    out.append(f'<text x="{x0 + PANEL_W / 2}" y="{base + 34}" text-anchor="middle">message size '
               f'(bytes)</text>')
    for col, _, color in SERIES:
        pts = [(px(s), py(vals[col])) for s, vals in points if col in vals]
        if not pts:
            continue
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for x, y in pts:
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{color}"/>')


def render(rows, title):
    ops = [(op, name) for op, name in OPS if rows.get(op)]
    if not ops:
        raise ValueError("no rows of 1 KiB or more in the CSV")
    width = len(ops) * PANEL_W + (len(ops) - 1) * GAP + 20
    height = PANEL_H + 70
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>']
    if title:
        out.append(f'<text x="10" y="16" font-size="13">{title}</text>')
    for i, (op, name) in enumerate(ops):
        panel(out, 10 + i * (PANEL_W + GAP), 20, name, rows[op])
    present = {col for op, _ in ops for _, vals in rows[op] for col in vals}
    x = 10
    for col, label, color in SERIES:  # legend
        if col not in present:
            continue
        out.append(f'<rect x="{x}" y="{height - 18}" width="14" height="4" fill="{color}"/>')
        out.append(f'<text x="{x + 20}" y="{height - 12}">{label}</text>')
        x += 30 + 7 * len(label)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", help="compare.sh's result directory or its report.csv")
    ap.add_argument("-o", "--output", help="SVG to write (default: plot.svg beside the CSV)")
    ap.add_argument("--title", default="", help="a line above the charts")
    args = ap.parse_args(argv)
    path = os.path.join(args.source, "report.csv") if os.path.isdir(args.source) else args.source
    if not os.path.isfile(path):
        print(f"plot.py: no report.csv at {path}", file=sys.stderr)
        return 2
    try:
        svg = render(read_rows(path), args.title)
    except (KeyError, ValueError) as e:
        print(f"plot.py: cannot plot {path}: {e}", file=sys.stderr)
        return 2
    out = args.output or os.path.join(os.path.dirname(os.path.abspath(path)), "plot.svg")
    with open(out, "w") as f:
        f.write(svg)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
