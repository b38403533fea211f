#!/usr/bin/env python3
"""torch.distributed on loom against gloo, alternating in one run.

For 2 and 4 local ranks (by default): all_reduce latency and bus bandwidth
from 8 B to 128 MiB, all_gather_into_tensor and reduce_scatter_tensor, and
DDP communication time per step (the step's time minus the same step under
no_sync) for a 4M- and a 25M-parameter MLP. Each measurement alternates
loom and gloo, is repeated, and reports the median; ratios are gloo/loom
for times (higher is better for loom) and loom/gloo for bandwidth.

  PYTHONPATH=<build>/integrations/pytorch/python perf/torch_bench.py [--ranks 2,4]
      [--max-bytes 128M] [--repeats 5] [--ddp-steps 10] [--skip-ddp] [--skip-collectives]

gloo in torch 1.13 lacks _allgather_base and reduce_scatter: its columns
there time all_gather into the output's chunks, and all_reduce.
Bus bandwidth as nccl-tests counts it: all_reduce 2(n-1)/n x bytes / time,
all_gather and reduce_scatter (n-1)/n x total bytes / time.
"""
import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import loom_torch  # noqa: F401


def parse_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def sizes(max_bytes):
    s, out = 8, []
    while s <= max_bytes:
        out.append(s)
        s *= 8 if s < (1 << 20) else 4
    if out[-1] != max_bytes:
        out.append(max_bytes)
    return out


def slowest(seconds, group):
    """The largest of every rank's figure (an op is over when it is over everywhere)."""
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return t.item()


def time_op(op, group, iters=None, target_s=0.2):
    """Seconds per call, every rank starting together; the slowest rank's
    figure. Without `iters`, as many calls as fill about `target_s` (3 to
    2000, from one timed call), so large sizes are not timed from a call or
    two and small ones not from a scheduler's time slice."""
    op()  # warm-up: buffers, connections
    if iters is None:
        t0 = time.perf_counter()
        op()
        once = slowest(time.perf_counter() - t0, group)
        iters = max(3, min(2000, int(target_s / max(once, 1e-7))))
    dist.barrier(group=group)
    t0 = time.perf_counter()
    for _ in range(iters):
        op()
    return slowest((time.perf_counter() - t0) / iters, group)


def bench_collectives(rank, world, groups, args, report):
    for name in ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor"):
        for nbytes in sizes(args.max_bytes):
            if name != "all_reduce" and nbytes < 8 * world:
                continue
            n = max(1, nbytes // 4)
            if name != "all_reduce":
                n = max(world, n - n % world)
            x = torch.ones(n, dtype=torch.float32)
            part = torch.empty(n // world, dtype=torch.float32)
            results = {b: [] for b in groups}
            for _ in range(args.repeats):
                for backend, g in groups.items():  # alternating
                    # gloo (torch 1.13) has neither _allgather_base nor
                    # reduce_scatter: it runs what a gloo user would, an
                    # all_gather into the output's chunks and an all_reduce.
                    if name == "all_reduce":
                        op = lambda: dist.all_reduce(x, group=g)  # noqa: E731
                    elif name == "all_gather_into_tensor" and backend == "loom":
                        op = lambda: dist.all_gather_into_tensor(x, part, group=g)  # noqa: E731
                    elif name == "all_gather_into_tensor":
                        chunks = list(x.chunk(world))
                        op = lambda: dist.all_gather(chunks, part, group=g)  # noqa: E731
                    elif backend == "loom":
                        op = lambda: dist.reduce_scatter_tensor(part, x, group=g)  # noqa: E731
                    else:
                        op = lambda: dist.all_reduce(x, group=g)  # noqa: E731
                    results[backend].append(time_op(op, g))
            if rank == 0:
                report(name, n * 4, {b: statistics.median(v) for b, v in results.items()}, world)


def mlp(params_m):
    # Linear layers of width w: about 3 w^2 parameters.
    w = int((params_m * 1e6 / 3) ** 0.5)
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(w, w), nn.ReLU(), nn.Linear(w, w), nn.ReLU(), nn.Linear(w, w))


def bench_ddp(rank, world, groups, args):
    out = {}
    for params_m in (4, 25):
        models = {b: DDP(mlp(params_m), process_group=g) for b, g in groups.items()}
        width = models["loom"].module[0].in_features
        x = torch.randn(8, width)
        comm = {b: [] for b in groups}
        for _ in range(args.repeats):
            for backend, model in models.items():
                g = groups[backend]

                def step(sync, model=model):
                    if sync:
                        model(x).sum().backward()
                    else:
                        with model.no_sync():
                            model(x).sum().backward()
                    for p in model.parameters():
                        p.grad = None

                with_sync = time_op(lambda: step(True), g, args.ddp_steps)
                without = time_op(lambda: step(False), g, args.ddp_steps)
                comm[backend].append(with_sync - without)
        nparams = sum(p.numel() for p in models["loom"].parameters())
        out[nparams] = {b: statistics.median(v) for b, v in comm.items()}
        del models
    return out


def worker(rank, world, path, args, q):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + path, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=600))
    groups = {"loom": dist.new_group(backend="loom"), "gloo": dist.new_group(backend="gloo")}
    rows = []

    def report(name, nbytes, med, n):
        factor = 2 * (n - 1) / n if name == "all_reduce" else (n - 1) / n
        rows.append((name, nbytes, med["loom"], med["gloo"],
                     factor * nbytes / med["loom"] / 1e9, factor * nbytes / med["gloo"] / 1e9))

    if not args.skip_collectives:
        bench_collectives(rank, world, groups, args, report)
    ddp = {} if args.skip_ddp else bench_ddp(rank, world, groups, args)
    if rank == 0:
        q.put((rows, ddp))
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", default="2,4")
    p.add_argument("--max-bytes", default="128M")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--ddp-steps", type=int, default=10)
    p.add_argument("--skip-ddp", action="store_true")
    p.add_argument("--skip-collectives", action="store_true")
    args = p.parse_args()
    args.max_bytes = parse_bytes(args.max_bytes)
    ctx = mp.get_context("fork")
    t_start = time.time()
    for world in [int(r) for r in args.ranks.split(",")]:
        q = ctx.Queue()
        path = tempfile.mktemp(prefix="loom_torch_bench_")
        procs = [ctx.Process(target=worker, args=(r, world, path, args, q)) for r in range(world)]
        for pr in procs:
            pr.start()
        rows = ddp = None
        while rows is None:
            try:
                rows, ddp = q.get(timeout=5)
            except Exception:  # noqa: BLE001  queue.Empty: a rank may have died
                if any(pr.exitcode not in (None, 0) for pr in procs):
                    print(f"a rank failed: exit codes {[pr.exitcode for pr in procs]}")
                    for pr in procs:
                        pr.kill()
                    return 1
        for pr in procs:
            pr.join()
        print(f"\n# {world} ranks, medians of {args.repeats} alternating repeats")
        print(f"{'op':<24}{'bytes':>11}{'loom us':>11}{'gloo us':>11}{'loom GB/s':>11}"
              f"{'gloo GB/s':>11}{'gloo/loom time':>16}")
        for name, nbytes, tl, tg, bl, bg in rows:
            print(f"{name:<24}{nbytes:>11}{tl * 1e6:>11.1f}{tg * 1e6:>11.1f}{bl:>11.3f}{bg:>11.3f}"
                  f"{tg / tl:>16.2f}")
        for nparams, med in ddp.items():
            print(f"DDP comm per step, {nparams / 1e6:.1f}M params: loom {med['loom'] * 1e3:.2f} ms, "
                  f"gloo {med['gloo'] * 1e3:.2f} ms, gloo/loom {med['gloo'] / med['loom']:.2f}")
    print(f"\n# total {time.time() - t_start:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
