#!/usr/bin/env python3
"""Plots loom-train loss curves (--losses JSON files) as one SVG, no
dependencies beyond the standard library.

usage: plot_losses.py OUT.svg REF.json [LAYOUT.json ...]
Each curve is labelled from its file's dp/tp/pp/zero fields; the first file
is drawn thick as the single-rank reference.
"""
import json
import sys

COLORS = ["#000000", "#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4",
          "#42d4f4", "#f032e6", "#9a6324", "#808000", "#469990", "#800000"]


def label(run):
    return "dp%d tp%d pp%d zero%d" % (run["dp"], run["tp"], run["pp"], run["zero"])


def main():
    out, files = sys.argv[1], sys.argv[2:]
    runs = [json.load(open(f)) for f in files]
    width, height, left, right, top, bottom = 760, 420, 60, 220, 20, 40
    losses = [r["losses"] for r in runs]
    steps = max(len(l) for l in losses)
    lo = min(min(l) for l in losses)
    hi = max(max(l) for l in losses)
    pw, ph = width - left - right, height - top - bottom

    def x(i):
        return left + pw * i / max(steps - 1, 1)

    def y(v):
        return top + ph * (hi - v) / (hi - lo if hi > lo else 1)

    svg = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="12">' % (width, height),
           '<rect width="100%" height="100%" fill="white"/>',
           '<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>'
           % (left, top, pw, ph)]
    for k in range(5):  # y ticks
        v = lo + (hi - lo) * k / 4
        svg.append('<text x="%d" y="%.1f" text-anchor="end">%.3f</text>' % (left - 4, y(v) + 4, v))
    svg.append('<text x="%d" y="%d" text-anchor="middle">step</text>' % (left + pw / 2, height - 8))
    svg.append('<text x="%d" y="%d" text-anchor="start">0</text>' % (left, top + ph + 14))
    svg.append('<text x="%d" y="%d" text-anchor="end">%d</text>' % (left + pw, top + ph + 14, steps - 1))
    for n, (run, l) in enumerate(zip(runs, losses)):
        color = COLORS[n % len(COLORS)]
        pts = " ".join("%.1f,%.1f" % (x(i), y(v)) for i, v in enumerate(l))
        widthpx = 4 if n == 0 else 1.2
        dash = '' if n == 0 else ' stroke-dasharray="%d,3"' % (2 + n % 4)
        svg.append('<polyline fill="none" stroke="%s" stroke-width="%s"%s points="%s"/>'
                   % (color, widthpx, dash, pts))
        ly = top + 14 + 16 * n
        svg.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="%s"/>'
                   % (width - right + 10, ly - 4, width - right + 30, ly - 4, color, widthpx))
        name = ("reference " if n == 0 else "") + label(run)
        svg.append('<text x="%d" y="%d">%s</text>' % (width - right + 36, ly, name))
    svg.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
