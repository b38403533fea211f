#!/usr/bin/env python3
"""Runs torch's own distributed test suite on loom and on gloo, and compares.

torch/testing/_internal/distributed/distributed_test.py holds
DistributedTest._DistTestBase, the suite upstream's test_distributed_spawn.py
runs per backend (selected by the BACKEND, WORLD_SIZE and TEMP_DIR
environment variables). This driver runs it the same way for each backend
and world size asked for, prints pass/fail/skip counts, and fails when a
test that passes on gloo does not pass on loom, unless the test is
hard-wired to gloo (skipped for any other backend name) or listed in
KNOWN_DIFFERENCES with its reason.

  run_distributed_test.py [--backends loom,gloo] [--world-sizes 2,3]
                          [-k SUBSTRING ...] [--subset ci] [--start-method fork|spawn]

Needs loom_torch importable (PYTHONPATH=<build>/integrations/pytorch/python).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# Tests that pass on gloo and are expected not to pass on loom, each with why.
KNOWN_DIFFERENCES = {
    "test_send_recv_any_source": "recv from any source: loom matches a receive to one named peer "
    "and refuses recvAnysource with an error",
    "test_send_recv_any_source_autograd_profiler": "recv from any source (as above)",
    "test_send_recv_any_source_torch_profiler": "recv from any source (as above)",
}

# Under gloo's name (--loom-as-gloo), failures that come from the name or
# from Gloo's own APIs, told apart by what the failure says: (reason,
# test-name fragment or None, fragment of the failure or None).
AS_GLOO_CAUSES = [
    ("profiler events are named after the group's backend (loom:<op>, the suite "
     "counts gloo:<op>)", None, "len(events)"),
    ("profiler events are named after the group's backend", "profiler", None),
    ("DDP logging records the group's own backend name", None, "'loom' != 'gloo'"),
    ("TORCH_DISTRIBUTED_DEBUG=DETAIL wraps the group in ProcessGroupWrapper, which takes a "
     "real ProcessGroupGloo", None, "_ProcessGroupWrapper"),
]


def as_gloo_cause(name, detail):
    for reason, in_name, in_detail in AS_GLOO_CAUSES:
        if (in_name is None or in_name in name) and (in_detail is None or in_detail in detail):
            return reason
    return None

# A quick subset for CI: the collectives, p2p, groups and a few DDP tests.
CI_SUBSET = [
    "test_all_reduce_sum", "test_all_reduce_sum_async", "test_all_reduce_product",
    "test_all_reduce_min", "test_all_reduce_max", "test_all_reduce_group_sum",
    "test_all_reduce_sum_complex", "test_all_reduce_complex_unsupported_ops",
    "test_all_reduce_coalesced_sum", "test_all_reduce_coalesced_max",
    "test_all_reduce_coalesced_group_sum", "test_all_reduce_result_cuda",
    "test_sparse_all_reduce_sum", "test_all_reduce_sum_complex_async",
    "test_broadcast", "test_broadcast_group", "test_broadcast_object_list",
    "test_reduce_sum", "test_reduce_max", "test_reduce_group_sum",
    "test_all_gather", "test_all_gather_group", "test_all_gather_object",
    "test_all_gather_coalesced_simple", "test_all_gather_coalesced_complex",
    "test_all_gather_coalesced_with_empty", "test_all_gather_into_cat_tensor_cuda",
    "test_gather", "test_gather_group", "test_gather_object", "test_scatter",
    "test_scatter_group", "test_scatter_object_list", "test_scatter_complex",
    "test_all_to_all_single_equal_split", "test_all_to_all_single_unequal_split",
    "test_all_to_all", "test_all_to_all_group", "test_all_to_all_single_unequal_split_complex",
    "test_send_recv", "test_isend", "test_irecv", "test_send_recv_with_tag",
    "test_barrier", "test_barrier_group", "test_get_backend", "test_new_subgroups",
    "test_DistributedDataParallel_SyncBatchNorm_Diff_Input_Sizes_Running_Value",
    "test_ddp_comm_hook_logging", "test_ddp_hook_parity_allreduce",
    "test_ddp_hook_parity_allreduce_process_group", "test_accumulate_gradients_no_sync",
    "test_DistributedDataParallelCPU", "test_ddp_unused_params_rebuild_buckets_exception",
    "test_ddp_uneven_inputs", "test_ddp_logging_data_cpu", "test_monitored_barrier_gloo",
]


def worker(args):
    """Runs the suite in this process (BACKEND etc. are set by the parent)."""
    import unittest

    try:
        import expecttest  # noqa: F401
    except ImportError:
        sys.path.insert(0, os.path.join(HERE, "support"))  # minimal stand-in
    import torch
    import torch.nn.parallel._replicated_tensor_ddp_utils as replicated

    # The suite turns on DDP's ReplicatedTensor mode in every test process;
    # that imports torch.distributed._shard.sharded_tensor, which fails on
    # Python 3.11 under torch 1.13 (a dataclass with a mutable default).
    # Keep the mode off: it tags DDP inputs and changes no communication.
    replicated._set_ddp_with_replicated_tensor = lambda value: None

    from torch.testing._internal import common_distributed

    if os.environ["BACKEND"] == "loom":
        import loom_torch  # noqa: F401  registers the backend

        # A third-party backend declares itself before the suite is imported
        # (its skip decorators read these sets then): "plugin" (created by
        # name), "ddp" (runs the DDP tests). Not "gpu"/"cuda"/"subgroup",
        # which are about CUDA tensors.
        for feature in ("plugin", "ddp"):
            common_distributed.DistTestCases.backend_feature[feature].add("loom")
    if args.loom_as_gloo:
        # loom under gloo's name: the tests the suite reserves for "gloo" run
        # on loom. Only the group constructor changes; isinstance checks
        # against ProcessGroupGloo and gloo-only APIs still see the real class.
        import loom_torch
        import torch.distributed.distributed_c10d as c10d

        c10d.ProcessGroupGloo = lambda store, rank, size, timeout: loom_torch.ProcessGroupLoom(
            store, rank, size, timeout)
    from torch.testing._internal.distributed import distributed_test as dt

    start_method = os.environ.get("LOOM_DIST_TEST_START", "fork")

    class TestDistBackendWithSpawn(dt.TestDistBackend, dt.DistributedTest._DistTestBase):
        def setUp(self):
            super().setUp()
            ctx = torch.multiprocessing.get_context(start_method)
            self._start_processes(ctx.Process)

    # The class must be reachable by name from spawned children.
    globals()["TestDistBackendWithSpawn"] = TestDistBackendWithSpawn
    sys.modules["__main__"].TestDistBackendWithSpawn = TestDistBackendWithSpawn

    loader = unittest.TestLoader()
    names = loader.getTestCaseNames(TestDistBackendWithSpawn)
    if args.subset == "ci":
        names = [n for n in names if n in CI_SUBSET]
    if args.k:
        names = [n for n in names if any(k in n for k in args.k)]
    suite = unittest.TestSuite(TestDistBackendWithSpawn(n) for n in names)
    outcomes = {}

    class Recorder(unittest.TextTestResult):
        def startTest(self, test):
            self._t0 = time.time()
            super().startTest(test)

        def _note(self, test, outcome, detail=""):
            outcomes[test._testMethodName] = {
                "outcome": outcome, "detail": detail[-8000:], "seconds": time.time() - self._t0}

        def addSuccess(self, test):
            super().addSuccess(test)
            self._note(test, "pass")

        def addFailure(self, test, err):
            super().addFailure(test, err)
            self._note(test, "fail", self._exc_info_to_string(err, test))

        def addError(self, test, err):
            super().addError(test, err)
            self._note(test, "fail", self._exc_info_to_string(err, test))

        def addSkip(self, test, reason):
            super().addSkip(test, reason)
            self._note(test, "skip", str(reason))

        def addExpectedFailure(self, test, err):
            super().addExpectedFailure(test, err)
            self._note(test, "pass", "expected failure")

        def addUnexpectedSuccess(self, test):
            super().addUnexpectedSuccess(test)
            self._note(test, "fail", "unexpected success")

    runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=2, resultclass=Recorder)
    # common_utils parses sys.argv on import; keep ours out of its way.
    runner.run(suite)
    with open(args.results, "w") as f:
        json.dump(outcomes, f, indent=1)


def run_one(backend, world_size, args, loom_as_gloo=False):
    with tempfile.TemporaryDirectory(prefix="loom_dist_test_") as tmp:
        for sub in ("barrier", "test_dir", "init_dir"):
            os.mkdir(os.path.join(tmp, sub))
        results = os.path.join(tmp, "results.json")
        env = dict(os.environ, BACKEND=backend, WORLD_SIZE=str(world_size), TEMP_DIR=tmp,
                   LOOM_DIST_TEST_START=args.start_method)
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--results", results,
               "--subset", args.subset] + (["--loom-as-gloo"] if loom_as_gloo else [])
        for k in args.k or []:
            cmd += ["-k", k]
        label = "loom-as-gloo" if loom_as_gloo else backend
        log = os.path.join(args.log_dir, f"distributed_test_{label}_ws{world_size}.log")
        t0 = time.time()
        with open(log, "w") as out:
            rc = subprocess.call(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=tmp)
        seconds = time.time() - t0
        outcomes = {}
        if os.path.exists(results):
            with open(results) as f:
                outcomes = json.load(f)
        return outcomes, rc, seconds, log


def counts(outcomes):
    c = {"pass": 0, "fail": 0, "skip": 0}
    for o in outcomes.values():
        c[o["outcome"]] += 1
    return c


def compare(label, loom, gloo, ws, as_gloo):
    """Every test gloo passes passes on `label`, unless hard-wired to gloo
    (skipped with gloo in the reason), in KNOWN_DIFFERENCES, or (under
    gloo's name) failing for one of AS_GLOO_CAUSES."""
    gloo_only, known, missing = [], [], []
    for name, g in sorted(gloo.items()):
        if g["outcome"] != "pass":
            continue
        l = loom.get(name, {"outcome": "missing", "detail": ""})
        if l["outcome"] == "pass":
            continue
        if l["outcome"] == "skip" and "gloo" in l["detail"].lower():
            gloo_only.append((name, l["detail"]))
        elif name in KNOWN_DIFFERENCES:
            known.append((name, KNOWN_DIFFERENCES[name]))
        elif as_gloo and as_gloo_cause(name, l["detail"]):
            known.append((name, as_gloo_cause(name, l["detail"])))
        else:
            missing.append((name, l["outcome"], l["detail"].strip().splitlines()[-1:]))
    print(f"world size {ws}: passed on gloo, not on {label}:")
    for name, why in gloo_only:
        print(f"  hard-wired to gloo: {name} (skipped: {why})")
    for name, why in known:
        print(f"  known difference: {name}: {why}")
    for name, outcome, last in missing:
        print(f"  REGRESSION: {name}: {outcome}: {' '.join(last)}")
    loom_only = sorted(n for n, l in loom.items()
                       if l["outcome"] == "pass" and gloo.get(n, {}).get("outcome") != "pass")
    print(f"world size {ws}: passed on {label}, not on gloo: {len(loom_only)}: "
          f"{', '.join(loom_only)}")
    return not missing


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--results", help=argparse.SUPPRESS)
    p.add_argument("--backends", default="loom,gloo")
    p.add_argument("--world-sizes", default="2")
    p.add_argument("-k", action="append", help="run tests whose name contains this (repeatable)")
    p.add_argument("--subset", choices=["all", "ci"], default="all")
    p.add_argument("--start-method", choices=["fork", "spawn"], default="fork")
    p.add_argument("--log-dir", default=tempfile.gettempdir())
    p.add_argument("--loom-as-gloo", action="store_true",
                   help="also run loom under the name gloo (BACKEND=gloo, gloo's constructor "
                   "replaced), so that the tests reserved for gloo run on loom")
    args = p.parse_args()
    if args.worker:
        sys.argv = sys.argv[:1]
        worker(args)
        return 0

    runs = [(b, b, False) for b in args.backends.split(",")]
    if args.loom_as_gloo:
        runs.append(("loom-as-gloo", "gloo", True))
    ok = True
    for ws in [int(w) for w in args.world_sizes.split(",")]:
        got = {}
        for label, backend, as_gloo in runs:
            outcomes, rc, seconds, log = run_one(backend, ws, args, as_gloo)
            got[label] = outcomes
            c = counts(outcomes)
            print(f"world size {ws}, {label}: {c['pass']} passed, {c['fail']} failed, "
                  f"{c['skip']} skipped in {seconds:.0f} s (log: {log})", flush=True)
            if not outcomes:
                print(f"  no results: the runner exited with {rc}; see the log")
                ok = False
        for label, as_gloo in (("loom", False), ("loom-as-gloo", True)):
            if label in got and "gloo" in got:
                ok = compare(label, got[label], got["gloo"], ws, as_gloo) and ok
    print("distributed_test comparison:", "OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
