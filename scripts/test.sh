#!/bin/sh
# Builds loom with warnings as errors and runs the whole test suite, then the
# multi-rank tests again under ASan+UBSan and the runtime core under TSan.
#   scripts/test.sh            everything (what CI runs)
#   scripts/test.sh --quick    one build, labels unit and mp only, small counts
set -eu
cd "$(dirname "$0")/.."
JOBS=$(nproc)
quick=0
[ "${1:-}" = "--quick" ] && quick=1

run_suite() {  # build-dir cmake-args ctest-args
  dir=$1; shift; cmake_args=$1; shift
  echo "== configure+build $dir ($cmake_args)"
  # shellcheck disable=SC2086
  cmake -S . -B "$dir" -G Ninja -DLOOM_WERROR=ON $cmake_args >/dev/null
  cmake --build "$dir" -j "$JOBS"
  echo "== ctest $dir $*"
  (cd "$dir" && ctest --output-on-failure -j "$JOBS" "$@")
}

start=$(date +%s)
if [ $quick = 1 ]; then
  LOOM_TEST_QUICK=1 run_suite build "-DCMAKE_BUILD_TYPE=RelWithDebInfo" -L "unit|mp"
else
  run_suite build "-DCMAKE_BUILD_TYPE=RelWithDebInfo"
  # Sanitizers on the multi-rank tests, with the small conformance counts;
  # TSan covers the runtime (the trainer runs under the other two passes).
  LOOM_TEST_QUICK=1 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    run_suite build-asan "-DCMAKE_BUILD_TYPE=Debug -DLOOM_SANITIZE=address,undefined -DLOOM_BUILD_BENCHMARKS=OFF -DLOOM_WITH_CUDA=off" -L "unit|mp"
  # UCX_MEM_EVENTS=no: UCX's memory hooks (libucm) intercept the madvise
  # glibc makes on a finished thread's stack and take a lock there, which
  # crashes TSan's interceptor (seen running the test binaries directly).
  LOOM_TEST_QUICK=1 TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" UCX_MEM_EVENTS=no \
    run_suite build-tsan "-DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_SANITIZE=thread -DLOOM_BUILD_BENCHMARKS=OFF -DLOOM_WITH_CUDA=off" -L "unit|mp" -E "launcher|c_api|trainer"
fi
echo "== all tests passed in $(( $(date +%s) - start ))s"
