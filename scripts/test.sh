#!/bin/sh
# Builds loom with warnings as errors and runs the whole test suite, then the
# multi-rank tests again under ASan+UBSan and the runtime core under TSan,
# then the fuzz targets for a minute each.
#   scripts/test.sh            everything (what CI runs)
#   scripts/test.sh --quick    one build, labels unit and mp only, small counts
# Each expensive combination runs once: the full conformance counts, the
# namespace tests and the trainer's tolerance tiers only in the optimised
# build; the sanitizer passes take the small counts (LOOM_TEST_QUICK).
# Prints every phase's wall time at the end, also when a phase fails.
set -eu
cd "$(dirname "$0")/.."
JOBS=$(nproc)
quick=0
[ "${1:-}" = "--quick" ] && quick=1

phases=""
start=$(date +%s)
report() {
  [ -n "$phases" ] || return 0
  echo "== phase wall times"
  printf '%b' "$phases"
  echo "   total $(( $(date +%s) - start ))s"
}
trap report EXIT

phase() {  # name command...
  name=$1; shift
  t0=$(date +%s)
  "$@"
  phases="$phases   $name $(( $(date +%s) - t0 ))s\n"
}

build() {  # dir cmake-args
  echo "== configure+build $1 ($2)"
  # shellcheck disable=SC2086
  cmake -S . -B "$1" -G Ninja -DLOOM_WERROR=ON $2 >/dev/null
  cmake --build "$1" -j "$JOBS"
}

run_tests() {  # dir ctest-args
  dir=$1; shift
  echo "== ctest $dir $*"
  (cd "$dir" && ctest --output-on-failure -j "$JOBS" "$@")
}

SANITIZED="-DLOOM_BUILD_BENCHMARKS=OFF -DLOOM_WITH_CUDA=off -DLOOM_WITH_TORCH=off"
if [ $quick = 1 ]; then
  phase build build build "-DCMAKE_BUILD_TYPE=RelWithDebInfo"
  LOOM_TEST_QUICK=1 phase tests run_tests build -L "unit|mp"
else
  phase build build build "-DCMAKE_BUILD_TYPE=RelWithDebInfo"
  phase tests run_tests build
  # ASan+UBSan on the multi-rank tests with the small counts; the trainer's
  # exact tiers exercise the runtime here, its tolerance tiers, mutants and
  # learning run only above (in a Debug build they are minutes of math).
  phase asan-build build build-asan "-DCMAKE_BUILD_TYPE=Debug -DLOOM_SANITIZE=address,undefined $SANITIZED"
  LOOM_TEST_QUICK=1 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    phase asan-tests run_tests build-asan -L "unit|mp" -E "trainer_.*_tol|trainer_mutant|trainer_markov"
  # TSan covers the runtime (the trainer runs under the other two passes).
  # UCX_MEM_EVENTS=no: UCX's memory hooks (libucm) intercept the madvise
  # glibc makes on a finished thread's stack and take a lock there, which
  # crashes TSan's interceptor (seen running the test binaries directly).
  phase tsan-build build build-tsan "-DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_SANITIZE=thread $SANITIZED"
  LOOM_TEST_QUICK=1 TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" UCX_MEM_EVENTS=no \
    phase tsan-tests run_tests build-tsan -L "unit|mp" -E "launcher|c_api|trainer"
  # Every decoder of outside bytes under libFuzzer, a minute each
  # (scripts/fuzz.sh runs them longer by hand).
  phase fuzz scripts/fuzz.sh 60
fi
echo "== all tests passed in $(( $(date +%s) - start ))s"
