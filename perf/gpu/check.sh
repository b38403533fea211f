#!/usr/bin/env bash
# The one GPU check for a lent device session (issue 8): builds loom with CUDA,
# runs every GPU test (ctest label "gpu") and the CUDA-layer unit tests, runs
# the reduction benchmark, and prints a short table. Budget: about 8 minutes
# on a 16-core H200 machine; every phase has its own time limit so a hang
# cannot eat the lease.
#
#   perf/gpu/check.sh                 # from the repository root
#   BUILD=/tmp/b perf/gpu/check.sh    # build folder (default /tmp/loom-gpu-build)
#   LOOM_GTEST_SOURCE_DIR=.gpudeps/googletest perf/gpu/check.sh
#
# Build: the full project (-DLOOM_WITH_CUDA=on) when its dependencies are
# there; otherwise the minimal GPU project in perf/gpu (needs only CUDA, a C++
# compiler, CMake and GoogleTest: installed, or sources carried in
# LOOM_GTEST_SOURCE_DIR, e.g. a copy of /usr/src/googletest). Only the GPU
# test programs and the benchmark are built, found from ctest's own list.
#
# Output: the table on stdout; with $OUT set (the device tool), the whole log
# and the table also go to $OUT/gpu_check.log and $OUT/gpu_check.md.
# Exit status: 0 when every test passed (skips count as failures on a GPU
# machine: there, nothing should skip), 1 otherwise.
set -u -o pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-/tmp/loom-gpu-build}
JOBS=${JOBS:-$(nproc)}
LOG=${OUT:-/tmp}/gpu_check.log
MD=${OUT:-/tmp}/gpu_check.md
export PATH=/usr/local/cuda/bin:$PATH
: >"$LOG"

rows=()  # "phase|result|seconds"
failed=0
note() { echo "== $*" | tee -a "$LOG"; }
phase() {  # phase NAME LIMIT_S CMD...: runs CMD under a time limit, logs, records a row
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS rc=0
  note "$name (limit ${limit}s): $*"
  timeout --kill-after=10 "$limit" "$@" >>"$LOG" 2>&1 || rc=$?
  local dt=$((SECONDS - t0)) result=ok
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    result="TIMEOUT"
  elif [ $rc -ne 0 ]; then
    result="FAILED (rc $rc)"
  fi
  [ "$result" = ok ] || failed=1
  rows+=("$name|$result|$dt")
  note "$name: $result in ${dt}s"
  return $rc
}

note "loom GPU check, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
DEVICE=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
note "device: ${DEVICE:-none found by nvidia-smi}; nvcc: $(nvcc --version 2>/dev/null | tail -1)"

# --- configure: full project, else the minimal GPU project ---------------------
common=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_WERROR=ON -DLOOM_WITH_CUDA=on
        -DCMAKE_CUDA_ARCHITECTURES=90-real)  # only the machine's own arch: faster build
[ -n "${LOOM_GTEST_SOURCE_DIR:-}" ] && common+=(-DLOOM_GTEST_SOURCE_DIR="$(realpath "$LOOM_GTEST_SOURCE_DIR")")
mode=full
note "configure (full project)"
if ! timeout 120 cmake -S "$ROOT" -B "$BUILD" "${common[@]}" -DLOOM_BUILD_BENCHMARKS=OFF >>"$LOG" 2>&1 \
    || ! grep -q reduce_cuda_bench "$BUILD/build.ninja"; then
  # Missing Boost, say, or a top-level CMakeLists.txt without LoomCuda.cmake.
  note "the full project does not configure with CUDA here; using the minimal GPU project"
  rm -rf "$BUILD"
  mode=minimal
  phase "configure (minimal GPU project)" 120 cmake -S "$ROOT/perf/gpu" -B "$BUILD" "${common[@]}" \
    || mode=none
fi

# --- build what the checks run ---------------------------------------------------
if [ "$mode" != none ]; then
  # Executables of every test labelled gpu, plus the CUDA-layer unit tests.
  # ctest lists a command only once its executable exists; before the build,
  # the test's name is its target's (loom_gpu_test names both alike).
  targets=$(ctest --test-dir "$BUILD" --show-only=json-v1 -L gpu 2>/dev/null | python3 -c '
import json, os, sys
tests = json.load(sys.stdin).get("tests", [])
print(" ".join(sorted({os.path.basename(t["command"][0]) if t.get("command") else t["name"]
                       for t in tests})))')
  targets="$targets cuda_runtime_test ipc_test staging_plan_test reduce_ops_test reduce_cuda_bench"
  targets="$targets device_allreduce_bench"
  # The device path's CPU-side tests (fake device), where the full project configured.
  targets="$targets fake_device_ops_test device_buffer_test"
  # Keep the names that are targets (a test of a program built under another
  # name, like reduce_cuda_bench_quick, is covered by that program's target).
  known=$(ninja -C "$BUILD" -t targets all 2>/dev/null | cut -d: -f1)
  targets=$(for t in $targets; do grep -qx "$t" <<<"$known" && echo "$t"; done | sort -u)
  # shellcheck disable=SC2086  # one word per target
  phase "build ($mode, $(echo $targets | wc -w) targets)" 300 \
    cmake --build "$BUILD" -j "$JOBS" --target $targets || mode=none
fi

# --- tests and benchmark ------------------------------------------------------------
if [ "$mode" != none ]; then
  phase "unit tests (CUDA layer)" 120 ctest --test-dir "$BUILD" --output-on-failure \
    -R '^(cuda_runtime_test|ipc_test|staging_plan_test|reduce_ops_test|fake_device_ops_test|(Modes|Staged|Ipc)/.*DeviceBuffers\..*|P2pLevel\..*)$'
  phase "gpu tests (ctest -L gpu)" 240 ctest --test-dir "$BUILD" --output-on-failure \
    --no-tests=error -L gpu -E '(reduce_cuda_bench_quick|device_allreduce_bench_quick)'
  # On a GPU machine nothing may skip: a skip there means the device was not found.
  if grep -q '\*\*\*Skipped' "$LOG"; then
    note "some tests SKIPPED on a machine that should have a GPU"
    rows+=("skips on a GPU machine|FAILED|0")
    failed=1
  fi
  bench=$(find "$BUILD" -name reduce_cuda_bench -type f -perm -u+x | head -1)
  phase "reduce benchmark" 120 "$bench" --bytes $((256 << 20)) --iters 20
  # All-reduce busbw between 2 processes on the one GPU: IPC, then staged.
  arbench=$(find "$BUILD" -name device_allreduce_bench -type f -perm -u+x | head -1)
  if [ -n "$arbench" ]; then
    phase "all-reduce busbw, 2 processes, CUDA IPC" 90 "$arbench" -n 2 -b 8 -e 256M
    phase "all-reduce busbw, 2 processes, staged" 90 "$arbench" -n 2 -b 8 -e 256M --p2p-disable
    # The IPC variants: registered buffers (kept mappings), and every size
    # mapping the user's buffers per operation (no copy buffer).
    phase "all-reduce busbw, 2 processes, CUDA IPC, registered" 60 "$arbench" -n 2 -b 8 -e 64M --register
    phase "all-reduce busbw, 2 processes, CUDA IPC, mapped per op" 60 \
      env LOOM_CUDA_IPC_COPY_BYTES=0 "$arbench" -n 2 -b 8 -e 64M
  fi
fi

# --- summary ------------------------------------------------------------------------
{
  echo "## GPU check $(date -u '+%Y-%m-%d'), ${DEVICE:-no device}, $mode build"
  echo
  echo "| phase | result | seconds |"
  echo "|---|---|---:|"
  for r in "${rows[@]}"; do echo "| ${r//|/ | } |"; done
  echo
  grep -E '^([0-9]+% tests passed|.*\*\*\*(Skipped|Failed|Timeout)|.*\(Failed\))' "$LOG" | head -30
  echo
  grep -E '^(device [0-9]+:|\| )' "$LOG"
  echo
  grep -E '^(# device all-reduce|#? +[0-9size]+ )' "$LOG"
} | tee "$MD"
echo "full log: $LOG"
exit $failed
