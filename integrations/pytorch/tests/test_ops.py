#!/usr/bin/env python3
"""Every torch.distributed operation on backend "loom" against values
computed locally, on 2, 3 and 2 ranks (file://, tcp://, env:// init): dtypes (float16/bfloat16, int, bool,
complex, int16), non-contiguous tensors, uneven all-to-all, AVG and
PREMUL_SUM, async Work and Future, subgroups, and the clear errors for what
loom refuses. Prints 'N passed, N failed'; exits non-zero on any failure.

  PYTHONPATH=<build>/integrations/pytorch/python test_ops.py [--world-sizes 2,3,2]
"""
import argparse
import datetime
import faulthandler
import os
import socket
import sys
import tempfile
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import loom_torch  # noqa: F401  registers "loom"

CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def ranks_value(world, fn):
    """The list [fn(r) for each rank]: what every rank contributed."""
    return [fn(r) for r in range(world)]


@check
def all_reduce_ops_and_dtypes(rank, world):
    dtypes = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
              torch.uint8, torch.int32, torch.int64]
    ops = {dist.ReduceOp.SUM: lambda xs: sum(xs), dist.ReduceOp.MAX: lambda xs: max(xs),
           dist.ReduceOp.MIN: lambda xs: min(xs),
           dist.ReduceOp.PRODUCT: lambda xs: __import__("math").prod(xs)}
    for dt in dtypes:
        for op, ref in ops.items():
            t = torch.tensor([rank + 1, 2 * rank + 1, 3], dtype=dt)
            dist.all_reduce(t, op=op)
            want = torch.tensor([ref(ranks_value(world, lambda r: r + 1)),
                                 ref(ranks_value(world, lambda r: 2 * r + 1)),
                                 ref([3] * world)], dtype=dt)
            assert torch.equal(t, want), (dt, op, t, want)


@check
def all_reduce_avg_premul(rank, world):
    t = torch.tensor([float(rank), 1.0])
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    assert torch.allclose(t, torch.tensor([sum(range(world)) / world, 1.0])), t
    t = torch.tensor([float(rank + 1)], dtype=torch.float64)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
    assert t.item() == sum(r + 1 for r in range(world)) * 0.5, t


@check
def all_reduce_bool_complex(rank, world):
    t = torch.tensor([rank == 0, True, False])
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    assert t.tolist() == [True, True, False], t
    t = torch.tensor([rank == 0, True, False])
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    assert t.tolist() == [world == 1, True, False], t
    c = torch.tensor([complex(rank, 1), complex(1, -rank)], dtype=torch.complex64)
    dist.all_reduce(c)
    assert torch.equal(c, torch.tensor([complex(sum(range(world)), world),
                                        complex(world, -sum(range(world)))],
                                       dtype=torch.complex64)), c


@check
def refused_reductions_are_clear_errors(rank, world):
    for t, op, words in [(torch.ones(2, dtype=torch.int32), dist.ReduceOp.BAND, "BAND"),
                         (torch.ones(2, dtype=torch.int16), dist.ReduceOp.SUM, "Short"),
                         (torch.ones(2, dtype=torch.bool), dist.ReduceOp.BXOR, "BXOR")]:
        try:
            dist.all_reduce(t, op=op)
        except (RuntimeError, ValueError) as e:
            assert "loom" in str(e) and words in str(e), str(e)
        else:
            raise AssertionError(f"{t.dtype} {op} was accepted")
    try:
        dist.recv(torch.zeros(1))
    except RuntimeError as e:
        assert "any source" in str(e), str(e)
    else:
        raise AssertionError("recv from any source was accepted")
    dist.barrier()  # the group still works after refusals


@check
def non_contiguous_in_and_out(rank, world):
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4).t() * (rank + 1)  # 4x3, strided
    assert not t.is_contiguous()
    want = torch.arange(12, dtype=torch.float32).reshape(3, 4).t() * sum(range(1, world + 1))
    dist.all_reduce(t)
    assert torch.equal(t, want), t
    outs = [torch.empty(3, 2).t() for _ in range(world)]
    dist.all_gather(outs, torch.full((2, 3), float(rank)))
    for r, o in enumerate(outs):
        assert torch.equal(o, torch.full((2, 3), float(r))), (r, o)
    b = torch.arange(6.0).reshape(2, 3).t() + rank
    dist.broadcast(b, src=world - 1)
    assert torch.equal(b, torch.arange(6.0).reshape(2, 3).t() + world - 1), b


@check
def broadcast_reduce_gather_scatter(rank, world):
    for dt in [torch.float16, torch.bfloat16, torch.int16, torch.bool, torch.complex128]:
        t = (torch.arange(5) + rank).to(dt)
        dist.broadcast(t, src=1 % world)
        assert torch.equal(t, (torch.arange(5) + 1 % world).to(dt)), (dt, t)
    t = torch.tensor([float(rank + 1)])
    dist.reduce(t, dst=0, op=dist.ReduceOp.MAX)
    if rank == 0:
        assert t.item() == world, t
    root = world - 1
    gl = [torch.empty(2, dtype=torch.int64) for _ in range(world)] if rank == root else None
    dist.gather(torch.tensor([rank, -rank]), gather_list=gl, dst=root)
    if rank == root:
        assert [g.tolist() for g in gl] == [[r, -r] for r in range(world)], gl
    out = torch.empty(3, dtype=torch.float64)
    sl = [torch.full((3,), float(r * 10)) .double() for r in range(world)] if rank == 0 else None
    dist.scatter(out, scatter_list=sl, src=0)
    assert torch.equal(out, torch.full((3,), float(rank * 10)).double()), out


@check
def gathers_and_reduce_scatters(rank, world):
    x = torch.tensor([rank, rank + 100], dtype=torch.int32)
    out = torch.empty(2 * world, dtype=torch.int32)
    dist.all_gather_into_tensor(out, x)
    assert out.tolist() == sum(([r, r + 100] for r in range(world)), []), out
    inp = torch.arange(world * 2, dtype=torch.float32) * (rank + 1)
    o = torch.empty(2)
    dist.reduce_scatter_tensor(o, inp)
    s = sum(range(1, world + 1))
    assert o.tolist() == [2 * rank * s, (2 * rank + 1) * s], o
    o2 = torch.empty(2)
    dist.reduce_scatter(o2, [torch.full((2,), float(r + rank)) for r in range(world)])
    assert o2.tolist() == [float(world * rank + sum(range(world)))] * 2, o2
    # allgather_coalesced and allreduce_coalesced
    outs = [[torch.empty(2), torch.empty(1)] for _ in range(world)]
    dist.all_gather_coalesced(outs, [torch.full((2,), float(rank)), torch.tensor([rank * 3.0])])
    for r in range(world):
        assert outs[r][0].tolist() == [float(r)] * 2 and outs[r][1].item() == r * 3.0, outs
    ts = [torch.ones(3) * rank, torch.ones(2) * 2]
    dist.all_reduce_coalesced(ts)
    assert ts[0].tolist() == [float(sum(range(world)))] * 3 and ts[1].tolist() == [2.0 * world] * 2


@check
def all_to_all_even_and_uneven(rank, world):
    inp = torch.arange(world * 2, dtype=torch.float32) + 100 * rank
    out = torch.empty(world * 2)
    dist.all_to_all_single(out, inp)
    assert out.tolist() == sum(([100 * r + 2 * rank, 100 * r + 2 * rank + 1]
                                for r in range(world)), []), out
    # rank r sends (p + 1) rows to peer p; receives (rank + 1) rows from each
    in_splits = [p + 1 for p in range(world)]
    out_splits = [rank + 1] * world
    inp = torch.cat([torch.full((p + 1, 2), float(rank * 10 + p)) for p in range(world)])
    out = torch.empty(sum(out_splits), 2)
    dist.all_to_all_single(out, inp, out_splits, in_splits)
    want = torch.cat([torch.full((rank + 1, 2), float(r * 10 + rank)) for r in range(world)])
    assert torch.equal(out, want), out
    outs = [torch.empty(rank + 1, dtype=torch.int64) for _ in range(world)]
    dist.all_to_all(outs, [torch.full((p + 1,), rank) for p in range(world)])
    assert [o.tolist() for o in outs] == [[r] * (rank + 1) for r in range(world)], outs


@check
def send_recv_async_future(rank, world):
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    if world > 1:
        buf = torch.empty(1000)
        if rank % 2 == 0:
            dist.send(torch.full((1000,), float(rank)), nxt)
            dist.recv(buf, prv)
        else:
            dist.recv(buf, prv)
            dist.send(torch.full((1000,), float(rank)), nxt)
        assert torch.equal(buf, torch.full((1000,), float(prv))), buf[:3]
    works = [dist.all_reduce(torch.full((100,), float(k)), async_op=True) for k in range(10)]
    futs = [w.get_future() for w in works]
    got = [f.wait()[0][0].item() for f in futs]
    assert got == [float(k * world) for k in range(10)], got
    for w in works:
        # (Work.exception() cannot be called from Python in torch 1.13: no binding for
        # std::exception_ptr, on every backend.)
        assert w.is_completed() and w.is_success()
        assert w.wait()
    chained = dist.all_reduce(torch.ones(4), async_op=True).get_future().then(
        lambda f: f.value()[0] * 2)
    assert chained.wait().tolist() == [2.0 * world] * 4


@check
def batch_isend_irecv_both_ways(rank, world):
    # Every rank receives from each peer before sending to it: one by one
    # that waits forever on loom (ops run in order); batched it completes.
    ops, recvs = [], {}
    for peer in range(world):
        if peer == rank:
            continue
        recvs[peer] = torch.empty(100000)
        ops.append(dist.P2POp(dist.irecv, recvs[peer], peer))
        ops.append(dist.P2POp(dist.isend, torch.full((100000,), float(rank)), peer))
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    for peer, t in recvs.items():
        assert torch.equal(t, torch.full((100000,), float(peer))), (peer, t[:3])


@check
def subgroups(rank, world):
    if world < 2:
        return
    g = dist.new_group([0, 1], backend="loom")
    if rank in (0, 1):
        t = torch.tensor([float(rank + 1)])
        dist.all_reduce(t, group=g)
        assert t.item() == 3.0, t
        outs = [torch.empty(1) for _ in range(2)]
        dist.all_gather(outs, torch.tensor([rank * 1.0]), group=g)
        assert [o.item() for o in outs] == [0.0, 1.0]
    dist.barrier()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_rank(rank, world, init, failures):
    # A hung rank prints every thread's stack before the parent gives up on it.
    faulthandler.dump_traceback_later(int(os.environ.get("LOOM_TEST_OPS_STACKS_AFTER", "240")), exit=True)
    timeout = datetime.timedelta(seconds=60)
    if init.startswith("env://"):
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=init[len("env://"):],
                          RANK=str(rank), WORLD_SIZE=str(world))
        dist.init_process_group("loom", init_method="env://", timeout=timeout)
    else:
        dist.init_process_group("loom", init_method=init, rank=rank, world_size=world,
                                timeout=timeout)
    for fn in CHECKS:
        if os.environ.get("LOOM_TEST_OPS_VERBOSE"):
            print(f"world {world} rank {rank}: {fn.__name__}", file=sys.stderr, flush=True)
        try:
            fn(rank, world)
        except Exception:  # noqa: BLE001  report every check, not the first only
            failures.put((world, rank, fn.__name__, traceback.format_exc()))
            dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--world-sizes", default="2,3,2")
    args = p.parse_args()
    ctx = mp.get_context("fork")
    passed = failed = 0
    # Each world size once per init method torch offers (file://, tcp://, env://).
    inits = [lambda: "file://" + tempfile.mktemp(prefix="loom_test_ops_"),
             lambda: f"tcp://127.0.0.1:{free_port()}", lambda: f"env://{free_port()}"]
    for k, world in enumerate(int(w) for w in args.world_sizes.split(",")):
        failures = ctx.Queue()
        init = inits[k % len(inits)]()
        print(f"world {world}: init_method {init.split(':')[0]}://", flush=True)
        procs = [ctx.Process(target=run_rank, args=(r, world, init, failures))
                 for r in range(world)]
        for pr in procs:
            pr.start()
        for pr in procs:
            pr.join(270)
            if pr.is_alive():
                pr.kill()
        bad = set()
        while not failures.empty():
            w, r, name, tb = failures.get()
            bad.add(name)
            print(f"FAIL world {w} rank {r} {name}:\n{tb}")
        if any(pr.exitcode != 0 for pr in procs):
            bad.add(f"a rank exited with {[pr.exitcode for pr in procs]}")
            print(f"FAIL world {world}: exit codes {[pr.exitcode for pr in procs]}")
        for fn in CHECKS:
            print(f"world {world} {fn.__name__}: {'FAIL' if fn.__name__ in bad else 'ok'}")
        failed += len(bad)
        passed += len(CHECKS) - len([n for n in bad if n in {f.__name__ for f in CHECKS}])
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
