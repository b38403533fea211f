#!/usr/bin/env python3
"""Failures on backend "loom" end in clear errors within the timeout:
a rank killed during DDP training makes the others raise a RuntimeError
naming it; a world size larger than the ranks started fails init naming
the missing rank; group.monitored_barrier() names the ranks that stay away
as Gloo's does, and a timed-out barrier says "Timed out". Prints 'N passed,
N failed'.

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


def reports(out, count, timeout, problems, missing):
    """Yields up to `count` reports from the ranks' queue; a report that does
    not come within `timeout` s ends it with `missing` among the problems."""
    for _ in range(count):
        try:
            yield out.get(timeout=timeout)
        except Exception:  # noqa: BLE001  queue.Empty
            problems.append(missing)
            return


def reap(procs, seconds):
    for p in procs:
        p.join(seconds)
        if p.is_alive():
            p.kill()


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
    for rank, msg, seconds in reports(out, world - 1, TIMEOUT_S * 3, problems,
                                      "a surviving rank neither finished nor raised in time"):
        first = msg.splitlines()[0] if msg else msg
        print(f"  rank {rank} after {seconds:.1f} s: {first[:300]}")
        if f"rank {victim}" not in msg:
            problems.append(f"rank {rank}'s error does not name rank {victim}: {first[:200]}")
        if seconds > TIMEOUT_S + 5:
            problems.append(f"rank {rank} raised after {seconds:.1f} s > timeout {TIMEOUT_S} s")
    reap(procs, 10)
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
    for rank, msg, seconds in reports(out, 2, 60, problems,
                                      "init neither failed nor succeeded within 60 s"):
        first = msg.splitlines()[0] if msg else msg
        print(f"  rank {rank} after {seconds:.1f} s: {first[:300]}")
        if "world_size 3" not in msg:
            problems.append(f"rank {rank}: the error does not name world_size 3: {first}")
        # The store's host (rank 0) sees who is missing; rank 1 sees rank 0 give up.
        if rank == 0 and "rank(s) 2 never connected" not in msg:
            problems.append(f"rank 0: the error does not name missing rank 2: {first}")
        if seconds > 30:
            problems.append(f"rank {rank} gave up after {seconds:.1f} s")
    reap(procs, 10)
    return problems


def monitored_rank(rank, world, path, out):
    """Runs the monitored-barrier cases; reports (rank, case, outcome)."""
    dist.init_process_group("loom", init_method="file://" + path, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=20))
    pg = dist.group.WORLD
    short = datetime.timedelta(seconds=1)

    def outcome(fn):
        t0 = time.time()
        try:
            fn()
            return "passed", time.time() - t0
        except RuntimeError as e:
            return str(e).splitlines()[0], time.time() - t0

    def report(case, fn):
        msg, seconds = outcome(fn)
        out.put((rank, case, msg, seconds))

    def sync():  # outside loom: the store
        dist.barrier()

    report("all arrive", lambda: pg.monitored_barrier(short))
    report("all arrive, wait_all_ranks", lambda: pg.monitored_barrier(short, wait_all_ranks=True))
    sync()
    # Rank 1 stays away: rank 0 names it, the others hear that rank 0 failed.
    if rank != 1:
        report("rank 1 away", lambda: pg.monitored_barrier(short))
    sync()
    # Ranks 1 and 2 away, all of them named.
    if rank == 0:
        report("ranks 1, 2 away", lambda: pg.monitored_barrier(short, wait_all_ranks=True))
    sync()
    if rank == 0:
        report("timeout 0", lambda: pg.monitored_barrier(datetime.timedelta(seconds=0)))
    sync()
    dist.destroy_process_group()
    # A barrier only rank 0 enters times out with "Timed out" in the error.
    dist.init_process_group("loom", init_method="file://" + path + ".2", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=1))
    if rank == 0:
        report("lonely barrier", dist.barrier)
    else:
        time.sleep(4)  # alive, but never in that barrier
    out.close()
    out.join_thread()
    os._exit(0)  # the others never entered the barrier: no orderly teardown


def monitored_barrier_names_late_ranks(ctx):
    world = 3
    path = tempfile.mktemp(prefix="loom_monitored_")
    out = ctx.Queue()
    procs = [ctx.Process(target=monitored_rank, args=(r, world, path, out)) for r in range(world)]
    for p in procs:
        p.start()
    expected = {
        "all arrive": {r: "passed" for r in range(world)},
        "all arrive, wait_all_ranks": {r: "passed" for r in range(world)},
        "rank 1 away": {0: "[Rank 0]: Rank 1 failed to pass monitoredBarrier in 1000 ms",
                        2: "Rank 2 successfully reached monitoredBarrier, but received errors "
                           "while waiting for send/recv from rank 0"},
        "ranks 1, 2 away": {0: "[Rank 0]: Ranks 1, 2 failed to pass monitoredBarrier in 1000 ms"},
        "timeout 0": {0: "Rank 0 timed out in monitoredBarrier after 0 ms"},
        "lonely barrier": {0: "loom: Timed out (Timeout: "},
    }
    want = sum(len(v) for v in expected.values())
    problems = []
    for rank, case, msg, seconds in reports(out, want, 60, problems,
                                            "a rank neither passed nor raised within 60 s"):
        print(f"  rank {rank}, {case}, after {seconds:.1f} s: {msg[:200]}")
        exp = expected.get(case, {}).get(rank)
        if exp is None or not msg.startswith(exp):
            problems.append(f"rank {rank}, {case}: expected {exp!r}, got {msg[:200]!r}")
        if seconds > 5:
            problems.append(f"rank {rank}, {case}: took {seconds:.1f} s (timeouts of 0-1 s)")
    reap(procs, 30)
    return problems


def main():
    ctx = mp.get_context("fork")
    passed = failed = 0
    for check in (killed_rank_is_named, wrong_world_size_is_clear, monitored_barrier_names_late_ranks):
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
