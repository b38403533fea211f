#!/usr/bin/env python3
"""Reads the tables compare.sh wrote and prints medians and ratios.

Anchor tables: '# op size count type time(us) algbw busbw #wrong'.
loom perf tables: nccl-tests columns; the out-of-place time and busbw are used.
Ratios are loom over the anchor (> 1: loom is faster): of busbw, or of time
below 1 KiB. Gloo's column is its best all-reduce algorithm at each size.
The allreduce_lat row is the 8 B latency pass (10000 iterations); in
allreduce_lat_b2b loom makes the same calls blocking and back to back
(--back-to-back 1), as the anchors do, against the same anchor figures.

With ceiling.r*.txt (perf/ring_memory_bench, shared memory, 2 ranks) two
more columns for sizes from 64 MiB, where the buffers are far larger than
the cache: %ceil, loom's busbw as a share of what the memory traffic alone
allows (the ring all-reduce out of place; the one-copy all-gather), and
ceil/MPI, the largest loom/MPI ratio any implementation could reach there.
"""
import csv
import glob
import os
import statistics
import sys

LOOM_OPS = {"all_reduce": "allreduce", "reduce_scatter": "reduce_scatter", "all_gather": "allgather"}


def read_anchor(path):
    rows = {}
    for line in open(path, errors="replace"):
        f = line.split()
        if len(f) >= 8 and not line.startswith("#") and f[1].isdigit():
            rows[(f[0], int(f[1]))] = (float(f[4]), float(f[6]), int(f[7]))
    return rows


def read_loom(path, op):
    rows = {}
    for line in open(path, errors="replace"):
        f = line.split()
        if len(f) >= 9 and not line.startswith("#") and f[0].isdigit():
            rows[(op, int(f[0]))] = (float(f[5]), float(f[7]), int(f[8]))
    return rows


def memcpy_gbs(out):
    vals = []
    for path in glob.glob(os.path.join(out, "memcpy.r*.txt")):
        for line in open(path, errors="replace"):
            f = line.split()
            if len(f) >= 4 and f[0] == "memcpy" and f[1] == "268435456":
                vals.append(float(f[3]))
    return statistics.median(vals) if vals else None


CEILING_ROWS = {"allreduce": "ring out of place", "allgather": "all-gather, one copy"}
CEILING_SHOWN = ("ring out of place", "ring in place", "all-gather, one copy",
                 "all-gather, through a FIFO")
CEILING_MIN_BYTES = 64 << 20


def ceilings(out):
    """Median GB/s per ring_memory_bench pattern over the repeats; busbw of 2
    ranks (the all-gather's algbw is halved)."""
    vals = {}
    for path in glob.glob(os.path.join(out, "ceiling.r*.txt")):
        for line in open(path, errors="replace"):
            f = line.split()
            if line.startswith("#") or len(f) < 3:
                continue
            try:
                vals.setdefault(" ".join(f[:-2]), []).append(float(f[-2]))
            except ValueError:
                continue
    med = {k: statistics.median(v) for k, v in vals.items() if k in CEILING_SHOWN}
    for k in med:
        if k.startswith("all-gather"):
            med[k] /= 2
    return med


def collect(out, impl):
    data = {}  # (op, size) -> list of (time, busbw)
    for path in sorted(glob.glob(os.path.join(out, f"{impl}.*.r*.txt"))):
        op = os.path.basename(path).split(".")[1]
        rows = read_loom(path, op) if impl == "loom" else read_anchor(path)
        if op.endswith("_lat"):  # compare.sh's latency pass: its own row
            rows = {(op, size): v for (_, size), v in rows.items()}
        for key, (t, bw, wrong) in rows.items():
            if wrong:
                continue  # a wrong result is not a measurement
            data.setdefault((key[0], key[1]), []).append((t, bw))
    return {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v), len(v))
            for k, v in data.items()}


def speedup(size, loom_t, loom_bw, anchor_t, anchor_bw):
    """loom over the anchor, > 1 when loom is faster: busbw ratio, or the time
    ratio below 1 KiB, where busbw rounds to zero."""
    if size < 1024:
        return anchor_t / loom_t if anchor_t == anchor_t and loom_t > 0 else float("nan")
    return loom_bw / anchor_bw if anchor_bw == anchor_bw and anchor_bw > 0 else float("nan")


def gloo_best(gloo, size):
    """The fastest Gloo all-reduce algorithm at `size`: (name, time, busbw)."""
    cands = [(op, v[0], v[1]) for (op, sz), v in gloo.items() if sz == size and op.startswith("allreduce")]
    if not cands:
        return ("", float("nan"), float("nan"))
    # At one size the fastest has the least time (busbw is rounded to 3 decimals).
    return min(cands, key=lambda c: c[1])


def main():
    out = sys.argv[1]
    loom, mpi, gloo = collect(out, "loom"), collect(out, "mpi"), collect(out, "gloo")
    mc = memcpy_gbs(out)
    ceil = ceilings(out)
    if mc:
        print(f"# memcpy 256 MiB, one thread, median of this run: {mc:.2f} GB/s")
    for name in CEILING_SHOWN:
        if name not in ceil:
            continue
        gbs = ceil[name]
        pct = f" ({100 * gbs / mc:.0f}% of memcpy)" if mc else ""
        print(f"# ceiling, {name}: {gbs:.2f} GB/s busbw{pct}")
    print(f"# {'op':<15}{'size':>11}{'loom us':>11}{'MPI us':>11}{'loom GB/s':>11}{'MPI GB/s':>10}"
          f"{'loom/MPI':>10}{'Gloo GB/s':>11}{'loom/Gloo':>10}{'%memcpy':>9}{'%ceil':>7}{'ceil/MPI':>9}"
          f"  Gloo best")
    with open(os.path.join(out, "report.csv"), "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["op", "bytes", "loom_us", "mpi_us", "loom_busbw", "mpi_busbw", "ratio_busbw",
                    "gloo_us", "gloo_busbw", "gloo_algo", "pct_memcpy", "samples", "pct_ceiling",
                    "ceiling_over_mpi"])
        for key in sorted(loom, key=lambda k: (k[0], k[1])):
            lt, lb, n = loom[key]
            akey = ("allreduce_lat", key[1]) if key[0] == "allreduce_lat_b2b" else key
            mt, mb, _ = mpi.get(akey, (float("nan"), float("nan"), 0))
            galgo, gt, gb = gloo_best(gloo, key[1]) if key[0] == "allreduce" else ("", float("nan"), float("nan"))
            ratio, gratio = speedup(key[1], lt, lb, mt, mb), speedup(key[1], lt, lb, gt, gb)
            pct = 100 * lb / mc if mc else float("nan")
            cb = ceil.get(CEILING_ROWS.get(key[0], ""), float("nan"))
            if key[1] < CEILING_MIN_BYTES:
                cb = float("nan")
            pct_ceil = 100 * lb / cb if cb == cb else float("nan")
            ceil_mpi = cb / mb if cb == cb and mb == mb and mb > 0 else float("nan")
            cols = f"{pct_ceil:>6.0f}%{ceil_mpi:>9.2f}" if cb == cb else f"{'':>7}{'':>9}"
            print(f"  {key[0]:<15}{key[1]:>11}{lt:>11.2f}{mt:>11.2f}{lb:>11.3f}{mb:>10.3f}{ratio:>10.2f}"
                  f"{gb:>11.3f}{gratio:>10.2f}{pct:>8.0f}%{cols}  {galgo}")
            w.writerow([key[0], key[1], lt, mt, lb, mb, ratio, gt, gb, galgo, pct, n, pct_ceil, ceil_mpi])


if __name__ == "__main__":
    main()
