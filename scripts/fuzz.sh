#!/bin/sh
# Builds the libFuzzer targets of tests/fuzz (clang, ASan+UBSan, into
# build-fuzz/) and runs each for SECONDS (default 600; CI runs 60) from its
# seed corpus in tests/fuzz/corpus/. A crash, a leak, a slow input (over
# 10 s) or memory over 2 GiB fails the run; the input that did it is left in
# build-fuzz/findings/ (replay: build-fuzz/tests/fuzz/TARGET FILE).
#   scripts/fuzz.sh [SECONDS [TARGET...]]
set -eu
cd "$(dirname "$0")/.."
secs=${1:-600}
[ $# -gt 0 ] && shift
all="fuzz_store fuzz_topology_json fuzz_nccl_xml fuzz_settings fuzz_doctor_inputs"
targets=${*:-$all}

echo "== configure+build build-fuzz (clang, LOOM_FUZZ=ON, address,undefined)"
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DLOOM_WERROR=ON -DLOOM_FUZZ=ON \
  -DLOOM_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DLOOM_BUILD_BENCHMARKS=OFF -DLOOM_WITH_CUDA=off -DLOOM_WITH_TORCH=off >/dev/null
cmake --build build-fuzz --target fuzzers -j "$(nproc)"

mkdir -p build-fuzz/findings
for t in $targets; do
  work=build-fuzz/corpus/$t
  mkdir -p "$work"
  echo "== $t, ${secs}s"
  # New inputs go to the work directory; the committed seeds stay as they are.
  # libFuzzer exits non-zero on any finding and leaves the input behind.
  if ! build-fuzz/tests/fuzz/"$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix=build-fuzz/findings/"$t"- \
      "$work" tests/fuzz/corpus/"${t#fuzz_}" > build-fuzz/"$t".log 2>&1; then
    tail -n 40 build-fuzz/"$t".log >&2
    echo "== $t failed; its log: build-fuzz/$t.log, the input: build-fuzz/findings/" >&2
    exit 1
  fi
  grep -E "^stat::(number_of_executed_units|peak_rss_mb)" build-fuzz/"$t".log || true
done
echo "== fuzzing passed: $targets, ${secs}s each"
