#!/usr/bin/env python3
"""Reads the tables compare.sh wrote and prints medians and ratios.

Anchor tables: '# op size count type time(us) algbw busbw #wrong'.
loom perf tables: nccl-tests columns; the out-of-place time and busbw are used.
Ratios are loom over the anchor (> 1: loom is faster): of busbw, or of time
below 1 KiB. loom/MPI is the ratio of the two medians; paired is the median
of each repeat's own ratio, loom against the Open MPI sweep run just before
it: the machine changes speed between repeats (both sides alike), so one
slow repeat on one side moves the first but not the second. Gloo's column
is its best all-reduce algorithm at each size.
The allreduce_lat row is the 8 B latency pass (10000 iterations); in
allreduce_lat_b2b loom makes the same calls blocking and back to back
(--back-to-back 1), as the anchors do, against the same anchor figures.

The cores' mode (modes.r*.txt, 2 ranks bound to cores): compare.sh reads
the 8-byte exchange between the two cores before and after every sweep. A
VM's host may run its two vCPUs on one physical core ("near": a cache line
changes hands in tens of nanoseconds) or apart (several times as long),
and switch within seconds; every implementation's transfers change speed
with it, loom's and the anchors' differently. A sweep ran apart where
either reading exceeds APART_FACTOR (2.5) times the run's least reading, else
near. near / apart: the paired ratio over the repeats where both sides'
sweeps ran near (apart); Gloo near likewise against Gloo's best algorithm
of each repeat. A machine without such modes runs near throughout.

After the table, with 2 ranks, one line per goal of issue 3 for the
transport (compare.sh's file "transport"; GOALS below): where it holds by
the paired ratio (or the share of memcpy), and each size where it does
not, with its near figure and what the ceiling allows there.

Two more columns where a ceiling was measured in the same run: %ceil,
loom's busbw (or, below 1 KiB, its speed: ceiling time over loom's time) as
a share of the ceiling, and ceil/MPI, the ceiling over Open MPI's figure,
the largest loom/MPI ratio any implementation could reach there.
* Shared memory, 2 ranks (ceiling.r*.txt, perf/ring_memory_bench): from 64
  MiB, where the buffers are far larger than the cache, what the memory
  traffic alone allows (the ring all-reduce out of place; the one-copy
  all-gather; the ring reduce-scatter out of place, the faster of its two
  ways of landing the result); for the all-gather at the sizes the bench
  timed in cache (its "all-gather in cache" rows), the least time of the
  copies any implementation must make there: for plain buffers the fastest
  of a process_vm_readv and a FIFO's copies, for shareable ones (compare.sh
  --register, the file "buffers" says "shareable") plain loads of the
  peer's input; and for the 8 B rows the 8-byte exchange of a cache line
  between the two cores.
* TCP, 2 ranks (link.r*.txt, perf/tcp_exchange_bench): a plain exchange of
  the bytes each rank must send and receive (an all-reduce of S: S; a
  reduce-scatter or all-gather: S/2), from 64 KiB and for the 8 B rows; for
  the all-gather that exchange plus a copy of the S/2 bytes sent (out of
  place it copies its own block too, on cores the kernel's copies keep
  busy). A plain program's link, not a strict bound (more sockets could
  beat it).
"""
import csv
import glob
import os
import statistics
import sys

from plot import size_label  # perf/plot.py: 65536 -> "64K", as the sweeps' flags

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


# The ceiling of each collective's rows from 64 MiB: the fastest of these
# patterns (a reduce-scatter may land its result through the cache or not).
CEILING_ROWS = {"allreduce": ("ring out of place",), "allgather": ("all-gather, one copy",),
                "reduce_scatter": ("reduce-scatter out of place",
                                   "reduce-scatter out of place, streamed")}
CEILING_SHOWN = ("ring out of place", "ring in place", "all-gather, one copy",
                 "all-gather, through a FIFO", "reduce-scatter out of place",
                 "reduce-scatter out of place, streamed")
CEILING_MIN_BYTES = 64 << 20
LATENCY_ROWS = ("allreduce_lat", "allreduce_lat_b2b")
EXCHANGE = "8 B exchange"
LINK_MIN_BYTES = 64 << 10
CACHED_PREFIX = "all-gather in cache, "
CACHED_SHAREABLE = "by loads"
CACHED_PLAIN = ("by process_vm_readv", "through a FIFO", "through a FIFO, streamed",
                "through a FIFO, pipelined")


def ceilings(out):
    """Median per ring_memory_bench pattern over the repeats: busbw GB/s of
    2 ranks (the all-gather's algbw is halved), and the 8 B exchange in us."""
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
    med = {k: statistics.median(v) for k, v in vals.items() if k in CEILING_SHOWN + (EXCHANGE,)}
    for k in med:
        if k.startswith("all-gather") or k.startswith("reduce-scatter"):
            med[k] /= 2  # their bench figure is algbw; busbw is half at 2 ranks
    return med


def cached_ceilings(out):
    """Median us per (all-gather size, pattern) of the bench's in-cache rows:
    '<CACHED_PREFIX><pattern> <bytes> <us> us'."""
    vals = {}
    for path in glob.glob(os.path.join(out, "ceiling.r*.txt")):
        for line in open(path, errors="replace"):
            f = line.split()
            if not line.startswith(CACHED_PREFIX) or len(f) < 4 or f[-1] != "us" or not f[-3].isdigit():
                continue
            pattern = " ".join(f[:-3])[len(CACHED_PREFIX):]
            try:
                vals.setdefault((int(f[-3]), pattern), []).append(float(f[-2]))
            except ValueError:
                continue
    return {k: statistics.median(v) for k, v in vals.items()}


def shareable_buffers(out):
    """Whether loom ran with shareable buffers (compare.sh --register)."""
    try:
        return open(os.path.join(out, "buffers"), errors="replace").read().strip() == "shareable"
    except OSError:
        return False


def cached_ceiling(cached, size, shareable):
    """The in-cache all-gather ceiling at `size` in us, or None."""
    names = (CACHED_SHAREABLE,) if shareable else CACHED_PLAIN
    times = [cached[(size, n)] for n in names if (size, n) in cached]
    return min(times) if times else None


def link_times(out, with_copy=False):
    """Median us per exchanged size over the repeats (tcp_exchange_bench):
    the plain exchange, or with_copy the exchange plus a copy of the sent
    bytes (its "us +copy" column, where the bench printed one)."""
    vals = {}
    for path in glob.glob(os.path.join(out, "link.r*.txt")):
        for line in open(path, errors="replace"):
            f = line.split()
            if line.startswith("#") or len(f) < 3 or not f[0].isdigit():
                continue
            col = 3 if with_copy else 1
            try:
                us = float(f[col])
            except (IndexError, ValueError):
                continue  # an older bench's row: no +copy column
            vals.setdefault(int(f[0]), []).append(us)
    return {k: statistics.median(v) for k, v in vals.items()}


def ceiling_for(op, size, ceil, link, cached_us=None, link_copy=None):
    """The ceiling of a row as ("busbw", GB/s) or ("time", us); None where
    none was measured. cached_us: the in-cache all-gather ceiling at size;
    link_copy: the TCP exchange with the own block's copy, for the
    all-gather (out of place, it copies its own block too)."""
    if op == "allgather" and cached_us is not None and not link:
        return ("time", cached_us)
    if op in LATENCY_ROWS:
        if link:
            return ("time", link[8]) if 8 in link else None
        return ("time", ceil[EXCHANGE]) if EXCHANGE in ceil else None
    if link:
        exchanged = size if op == "allreduce" else size // 2
        if op == "allgather" and link_copy and exchanged in link_copy:
            link = link_copy
        if size < LINK_MIN_BYTES or exchanged not in link:
            return None
        # 2 ranks: all-reduce busbw = algbw, the others algbw / 2.
        algbw = size / (link[exchanged] * 1e-6) / 1e9
        return ("busbw", algbw if op == "allreduce" else algbw / 2)
    known = [ceil[name] for name in CEILING_ROWS.get(op, ()) if name in ceil]
    if size < CEILING_MIN_BYTES or not known:
        return None
    return ("busbw", max(known))


def collect_repeats(out, impl):
    """(op, size) -> {repeat: (time, busbw)}, right results only."""
    data = {}
    for path in sorted(glob.glob(os.path.join(out, f"{impl}.*.r*.txt"))):
        _, op, repeat = os.path.basename(path).split(".")[:3]
        rows = read_loom(path, op) if impl == "loom" else read_anchor(path)
        if op.endswith("_lat"):  # compare.sh's latency pass: its own row
            rows = {(op, size): v for (_, size), v in rows.items()}
        for key, (t, bw, wrong) in rows.items():
            if wrong:
                continue  # a wrong result is not a measurement
            data.setdefault((key[0], key[1]), {})[repeat] = (t, bw)
    return data


def collect(out, impl):
    """(op, size) -> (median time, median busbw, repeats)."""
    return {k: (statistics.median(t for t, _ in v.values()), statistics.median(b for _, b in v.values()),
                len(v))
            for k, v in collect_repeats(out, impl).items()}


def paired(size, loom_runs, anchor_runs):
    """The median over repeats of loom's ratio to the anchor in the same
    repeat (nan where no repeat has both)."""
    ratios = [speedup(size, *loom_runs[r], *anchor_runs[r]) for r in loom_runs if r in anchor_runs]
    ratios = [x for x in ratios if x == x]
    return statistics.median(ratios) if ratios else float("nan")


APART_FACTOR = 2.5


def read_modes(out):
    """(side, op, repeat) -> [(min bytes, max bytes, before us, after us)]
    from compare.sh's readings of the cores, and the least reading."""
    modes, least = {}, float("inf")
    for path in glob.glob(os.path.join(out, "modes.r*.txt")):
        repeat = os.path.basename(path).split(".")[1]
        for line in open(path, errors="replace"):
            f = line.split()
            if len(f) != 6 or not f[2].isdigit() or not f[3].isdigit():
                continue
            try:
                before, after = float(f[4]), float(f[5])
            except ValueError:
                continue
            modes.setdefault((f[0], f[1], repeat), []).append((int(f[2]), int(f[3]), before, after))
            least = min([least] + [x for x in (before, after) if x == x and x > 0])
    return modes, least


def mode_of(modes, least, side, op, repeat, size):
    """"near" or "apart" for the sweep of `side` that timed (op, size) in
    `repeat`; None where it was not read."""
    for b, e, before, after in modes.get((side, op, repeat), ()):
        if b <= size <= e and before == before and after == after and least < float("inf"):
            return "apart" if max(before, after) > APART_FACTOR * least else "near"
    return None


def paired_in_mode(size, loom_runs, anchor_runs, loom_mode, anchor_mode, mode):
    """paired() over the repeats where both sides ran in `mode`
    (loom_mode, anchor_mode: repeat -> mode)."""
    same = {r: v for r, v in loom_runs.items() if loom_mode(r) == mode and anchor_mode(r) == mode}
    return paired(size, same, anchor_runs)


def gloo_best_runs(gloo_runs, size):
    """repeat -> (time, busbw) of Gloo's fastest all-reduce algorithm there."""
    best = {}
    for (op, sz), runs in gloo_runs.items():
        if sz != size or not op.startswith("allreduce"):
            continue
        for r, (t, bw) in runs.items():
            if r not in best or t < best[r][0]:
                best[r] = (t, bw)
    return best


# Issue 3's goals for 2 ranks, by transport (compare.sh writes it to the
# file "transport"): (op, least size, largest size, what, threshold), where
# what is "ratio" (paired busbw ratio, or time below 1 KiB) or "memcpy"
# (loom's busbw as a share of the run's memcpy rate, %).
GOALS = {
    "shm": [(op, 64 << 10, 16 << 20, "ratio", 1.3) for op in ("allreduce", "reduce_scatter", "allgather")]
    + [(op, 64 << 20, 256 << 20, "memcpy", 60.0) for op in ("allreduce", "reduce_scatter", "allgather")]
    + [("allreduce_lat", 8, 8, "ratio", 1.0), ("allreduce_lat_b2b", 8, 8, "ratio", 1.0)],
    "tcp": [(op, 64 << 10, 256 << 20, "ratio", 1.5) for op in ("allreduce", "reduce_scatter", "allgather")]
    + [("allreduce_lat", 8, 8, "ratio", 1.0), ("allreduce_lat_b2b", 8, 8, "ratio", 1.0),
       ("allreduce", 0, 1 << 40, "gloo", 1.0)],
}


def read_transport(out):
    """("shm" or "tcp", ranks) as compare.sh wrote them, or (None, 0)."""
    try:
        f = open(os.path.join(out, "transport"), errors="replace").read().split()
        return f[0], int(f[1])
    except (OSError, IndexError, ValueError):
        return None, 0


def goal_lines(transport, rows):
    """One line per goal of `transport` over the report's rows (dicts with
    op, size, paired, near, gloo, gloo_near, pct_memcpy, pct_ceil,
    ceil_mpi): where it holds, and each size where it does not, with the
    near figure and the ceiling's where there are."""
    out = []
    fmt = lambda x: "nan" if x != x else f"{x:.2f}"
    for op, lo, hi, what, want in GOALS.get(transport, ()):
        cand = [r for r in rows if r["op"] == op and lo <= r["size"] <= hi]
        if what == "gloo":
            cand = [r for r in cand if r["gloo"] == r["gloo"]]
        if not cand:
            continue
        misses = []
        for r in cand:
            got = r["pct_memcpy"] if what == "memcpy" else r["gloo"] if what == "gloo" else r["paired"]
            if got == got and got >= want:
                continue
            if what == "memcpy":
                detail = f"{got:.0f}%"
            elif what == "gloo":
                detail = f"{fmt(got)}, near {fmt(r['gloo_near'])}"
            else:
                detail = f"{fmt(got)}, near {fmt(r['near'])}"
            if r["pct_ceil"] == r["pct_ceil"] and r["pct_ceil"] > 0:
                allows = (f"{r['pct_memcpy'] * 100 / r['pct_ceil']:.0f}% of memcpy" if what == "memcpy"
                          else f"{fmt(r['ceil_mpi'])}x")
                detail += f"; loom at {r['pct_ceil']:.0f}% of the ceiling, which allows {allows}"
            misses.append(f"{size_label(r['size'])} ({detail})")
        name = {"ratio": f"{op} >= {want}x Open MPI", "memcpy": f"{op} >= {want:.0f}% of memcpy",
                "gloo": "allreduce ahead of Gloo's best"}[what]
        span = f"{size_label(lo)}-{size_label(hi)}" if lo != hi else size_label(lo)
        span = "every size" if what == "gloo" else span + " B"
        if not misses:
            verdict = "met" if len(cand) == 1 else f"met at all {len(cand)} sizes"
        else:
            verdict = f"met at {len(cand) - len(misses)} of {len(cand)} sizes; not at " + ", ".join(misses)
        out.append(f"# goal, {name} at {span}: {verdict}")
    return out


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
    loom_runs, mpi_runs = collect_repeats(out, "loom"), collect_repeats(out, "mpi")
    mc = memcpy_gbs(out)
    ceil, link, link_copy = ceilings(out), link_times(out), link_times(out, with_copy=True)
    cached, shareable = cached_ceilings(out), shareable_buffers(out)
    gloo_runs = collect_repeats(out, "gloo")
    modes, least = read_modes(out)
    if mc:
        print(f"# memcpy 256 MiB, one thread, median of this run: {mc:.2f} GB/s")
    for name in CEILING_SHOWN:
        if name not in ceil:
            continue
        gbs = ceil[name]
        pct = f" ({100 * gbs / mc:.0f}% of memcpy)" if mc else ""
        print(f"# ceiling, {name}: {gbs:.2f} GB/s busbw{pct}")
    if EXCHANGE in ceil:
        print(f"# ceiling, {EXCHANGE} between the cores: {ceil[EXCHANGE]:.3f} us")
    for size in sorted({sz for sz, _ in cached}):
        parts = ", ".join(f"{n} {cached[(size, n)]:.2f}" for n in (CACHED_SHAREABLE,) + CACHED_PLAIN
                          if (size, n) in cached)
        print(f"# ceiling, all-gather of {size} B in cache, us: {parts} "
              f"(the row's: {'shareable' if shareable else 'plain'} buffers)")
    if link:
        sizes = ", ".join(f"{b} B {t:.2f} us" for b, t in sorted(link.items()) if b in (8, 1 << 20))
        print(f"# ceiling, a plain TCP exchange per rank (tcp_exchange_bench): {sizes}")
    if link_copy:
        sizes = ", ".join(f"{b} B {t:.2f} us" for b, t in sorted(link_copy.items()) if b == 1 << 20)
        print(f"# ceiling, the same exchange plus a copy of the sent bytes (all-gather rows): {sizes}")
    readings = [x for v in modes.values() for _, _, a, b in v for x in (a, b) if x == x]
    if readings:
        apart = [x for x in readings if x > APART_FACTOR * least]
        near = [x for x in readings if x <= APART_FACTOR * least]
        text = f"{min(near):.3f}-{max(near):.3f} us (near) in {len(near)}"
        if apart:
            text += f", {min(apart):.3f}-{max(apart):.3f} us (apart) in {len(apart)}"
        print(f"# the cores, 8 B exchange before and after each sweep: {text} of {len(readings)} readings")
    print(f"# {'op':<15}{'size':>11}{'loom us':>11}{'MPI us':>11}{'loom GB/s':>11}{'MPI GB/s':>10}"
          f"{'loom/MPI':>10}{'paired':>8}{'near':>7}{'apart':>7}{'Gloo GB/s':>11}{'loom/Gloo':>10}"
          f"{'Gloo near':>10}{'%memcpy':>9}{'%ceil':>7}{'ceil/MPI':>9}  Gloo best")
    rows = []
    with open(os.path.join(out, "report.csv"), "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["op", "bytes", "loom_us", "mpi_us", "loom_busbw", "mpi_busbw", "ratio_busbw",
                    "gloo_us", "gloo_busbw", "gloo_algo", "pct_memcpy", "samples", "pct_ceiling",
                    "ceiling_over_mpi", "ratio_paired", "ratio_paired_near", "ratio_paired_apart",
                    "gloo_ratio_paired_near"])
        for key in sorted(loom, key=lambda k: (k[0], k[1])):
            lt, lb, n = loom[key]
            akey = ("allreduce_lat", key[1]) if key[0] == "allreduce_lat_b2b" else key
            mt, mb, _ = mpi.get(akey, (float("nan"), float("nan"), 0))
            galgo, gt, gb = gloo_best(gloo, key[1]) if key[0] == "allreduce" else ("", float("nan"), float("nan"))
            ratio, gratio = speedup(key[1], lt, lb, mt, mb), speedup(key[1], lt, lb, gt, gb)
            pratio = paired(key[1], loom_runs[key], mpi_runs.get(akey, {}))
            loom_mode = lambda r, k=key: mode_of(modes, least, "loom", k[0], r, k[1])
            mpi_mode = lambda r, k=akey: mode_of(modes, least, "mpi", k[0], r, k[1])
            near, apart = (paired_in_mode(key[1], loom_runs[key], mpi_runs.get(akey, {}), loom_mode,
                                          mpi_mode, m) for m in ("near", "apart"))
            gnear = float("nan")
            if key[0] == "allreduce":
                gloo_mode = lambda r, k=key: mode_of(modes, least, "gloo", k[0], r, k[1])
                gnear = paired_in_mode(key[1], loom_runs[key], gloo_best_runs(gloo_runs, key[1]),
                                       loom_mode, gloo_mode, "near")
            pct = 100 * lb / mc if mc else float("nan")
            pct_ceil = ceil_mpi = float("nan")
            c = ceiling_for(key[0], key[1], ceil, link, cached_ceiling(cached, key[1], shareable),
                            link_copy)
            if c and c[0] == "time":
                pct_ceil = 100 * c[1] / lt if lt > 0 else float("nan")
                ceil_mpi = mt / c[1] if mt == mt and c[1] > 0 else float("nan")
            elif c:
                pct_ceil = 100 * lb / c[1] if c[1] > 0 else float("nan")
                ceil_mpi = c[1] / mb if mb == mb and mb > 0 else float("nan")
            cols = f"{pct_ceil:>6.0f}%{ceil_mpi:>9.2f}" if c else f"{'':>7}{'':>9}"
            print(f"  {key[0]:<15}{key[1]:>11}{lt:>11.2f}{mt:>11.2f}{lb:>11.3f}{mb:>10.3f}{ratio:>10.2f}"
                  f"{pratio:>8.2f}{near:>7.2f}{apart:>7.2f}{gb:>11.3f}{gratio:>10.2f}{gnear:>10.2f}"
                  f"{pct:>8.0f}%{cols}  {galgo}")
            w.writerow([key[0], key[1], lt, mt, lb, mb, ratio, gt, gb, galgo, pct, n, pct_ceil, ceil_mpi, pratio,
                        near, apart, gnear])
            rows.append({"op": key[0], "size": key[1], "paired": pratio, "near": near, "gloo": gratio,
                         "gloo_near": gnear, "pct_memcpy": pct, "pct_ceil": pct_ceil, "ceil_mpi": ceil_mpi})
    transport, ranks = read_transport(out)
    if ranks == 2:
        for line in goal_lines(transport, rows):
            print(line)


if __name__ == "__main__":
    main()
