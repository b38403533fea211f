#!/usr/bin/env python3
"""Failures on backend "loom" end in clear errors within the timeout:
a rank killed during DDP training makes the others raise a RuntimeError
naming it; a world size larger than the ranks started fails init naming
the missing rank. Prints 'N passed, N failed'.

  PYTHONPATH=<build>/integrations/pytorch/python test_failure.py
"""
import datetime
import os
import signal
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import loom_torch  # noqa: F401

TIMEOUT_S = 15


def ddp_rank(rank, world, path, victim, out):
    torch.set_num_threads(1)
    dist.init_process_group("loom", init_method="file://" + path, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=TIMEOUT_S))
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 8)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    t0 = None
    try:
        for step in range(1000):
            loss = model(torch.randn(32, 64)).sum()
            if step == 5 and rank == victim:
                os.kill(os.getpid(), signal.SIGKILL)  # dies before its part of the all-reduce
            if step == 5:
                t0 = time.time()
            loss.backward()
            opt.step()
            opt.zero_grad()
        out.put((rank, "finished without an error", 0.0))
    except RuntimeError as e:
        out.put((rank, str(e), time.time() - (t0 or time.time())))


def killed_rank_is_named(ctx):
    world, victim = 3, 2
    path = tempfile.mktemp(prefix="loom_fail_")
    out = ctx.Queue()
    procs = [ctx.Process(target=ddp_rank, args=(r, world, path, victim, out))
             for r in range(world)]
    for p in procs:
        p.start()
    problems = []
    for _ in range(world - 1):
        try:
            rank, msg, seconds = out.get(timeout=TIMEOUT_S * 3)
        except Exception:  # noqa: BLE001
            problems.append("a surviving rank neither finished nor raised in time")
            break
        first = msg.splitlines()[0] if msg else msg
        print(f"  rank {rank} after {seconds:.1f} s: {first[:300]}")
        if f"rank {victim}" not in msg:
            problems.append(f"rank {rank}'s error does not name rank {victim}: {first[:200]}")
        if seconds > TIMEOUT_S + 5:
            problems.append(f"rank {rank} raised after {seconds:.1f} s > timeout {TIMEOUT_S} s")
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.kill()
    return problems


def init_rank(rank, world, path, out):
    t0 = time.time()
    try:
        dist.init_process_group("loom", init_method="file://" + path, rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=5))
        out.put((rank, "init succeeded", time.time() - t0))
    except RuntimeError as e:
        out.put((rank, str(e), time.time() - t0))


def wrong_world_size_is_clear(ctx):
    # Two ranks started, three announced.
    path = tempfile.mktemp(prefix="loom_fail_ws_")
    out = ctx.Queue()
    procs = [ctx.Process(target=init_rank, args=(r, 3, path, out)) for r in range(2)]
    for p in procs:
        p.start()
    problems = []
    for _ in range(2):
        try:
            rank, msg, seconds = out.get(timeout=60)
        except Exception:  # noqa: BLE001
            problems.append("init neither failed nor succeeded within 60 s")
            break
        first = msg.splitlines()[0] if msg else msg
        print(f"  rank {rank} after {seconds:.1f} s: {first[:300]}")
        if "world_size 3" not in msg:
            problems.append(f"rank {rank}: the error does not name world_size 3: {first}")
        # The store's host (rank 0) sees who is missing; rank 1 sees rank 0 give up.
        if rank == 0 and "rank(s) 2 never connected" not in msg:
            problems.append(f"rank 0: the error does not name missing rank 2: {first}")
        if seconds > 30:
            problems.append(f"rank {rank} gave up after {seconds:.1f} s")
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.kill()
    return problems


def main():
    ctx = mp.get_context("fork")
    passed = failed = 0
    for check in (killed_rank_is_named, wrong_world_size_is_clear):
        print(f"{check.__name__}:", flush=True)
        problems = check(ctx)
        for pr in problems:
            print("  FAIL: " + pr)
        print(f"{check.__name__}: {'FAIL' if problems else 'ok'}", flush=True)
        failed += bool(problems)
        passed += not problems
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
