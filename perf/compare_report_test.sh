#!/bin/bash
# perf/compare_report.py: medians over repeats, ratios loom over Open MPI,
# wrong results left out, and the ceiling columns (ring_memory_bench) only
# from 64 MiB and only for the collectives that have a ceiling.
set -u
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; cat "$tmp/report.txt" 2>/dev/null; exit 1; }
for r in 1 2 3; do
  # Open MPI: 2 MiB at 4 GB/s busbw, 128 MiB at 2 GB/s; repeat 3 is slower.
  if [ $r = 3 ]; then t2=524.0 b2=2.000 t128=67108.0 b128=1.000; else t2=262.0 b2=4.000 t128=33554.0 b128=2.000; fi
  cat >"$tmp/mpi.allgather.r$r.txt" <<EOT
# op                  size(B)       count  type    time(us)     algbw     busbw  #wrong
  allgather           2097152      262144 float      $t2     8.000     $b2       0
  allgather         134217728    16777216 float    $t128     4.000     $b128       0
EOT
  # loom: 6 GB/s at 2 MiB; 3 GB/s at 128 MiB, except a wrong result in repeat 2.
  wrong=$([ $r = 2 ] && echo 1 || echo 0)
  cat >"$tmp/loom.allgather.r$r.txt" <<EOT
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
     2097152        262144     float    none      -1    174.8   12.00    6.00      0    100.0   20.00   10.00      0
   134217728      16777216     float    none      -1    22369    6.00    3.00 $wrong    10000   13.40    6.70      0
EOT
  cat >"$tmp/memcpy.r$r.txt" <<EOT
# kernel        size(B)   time(us)       GB/s
  memcpy      268435456   20000.00      $((10 + r)).00
EOT
  cat >"$tmp/ceiling.r$r.txt" <<EOT
# pattern                          GB/s  %memcpy
memcpy, 1 thread                  12.00     100%
ring out of place                  7.00      58%
ring in place                      9.00      75%
all-gather, one copy              $((10 + r)).00      90%
all-gather, through a FIFO        10.00      83%
EOT
done
python3 "$here/compare_report.py" "$tmp" >"$tmp/report.txt" 2>&1 || fail "compare_report.py exited $?"
grep -q "memcpy 256 MiB, one thread, median of this run: 12.00 GB/s" "$tmp/report.txt" || fail "memcpy median"
# The all-gather's ceiling is half its algbw at 2 ranks: median 12 -> 6 GB/s busbw.
grep -q "ceiling, all-gather, one copy: 6.00 GB/s busbw (50% of memcpy)" "$tmp/report.txt" ||
  fail "all-gather ceiling"
grep -q "ceiling, ring out of place: 7.00 GB/s" "$tmp/report.txt" || fail "ring ceiling"
grep -q "ceiling, memcpy" "$tmp/report.txt" && fail "memcpy printed as a ceiling"
row2=$(grep -E '^  allgather +2097152 ' "$tmp/report.txt") || fail "no 2 MiB row"
row128=$(grep -E '^  allgather +134217728 ' "$tmp/report.txt") || fail "no 128 MiB row"
# 2 MiB: loom/MPI = 6/4; no ceiling columns below 64 MiB.
read -r -a f2 <<<"$row2"
[ "${f2[6]}" = 1.50 ] || fail "2 MiB ratio ${f2[6]}, expected 1.50 (median MPI busbw 4)"
[ "${#f2[@]}" -eq 10 ] || fail "2 MiB row has ${#f2[@]} fields, expected no ceiling columns"
# 128 MiB: the wrong repeat is left out, loom 3 GB/s over MPI's median 2:
# 1.50; 3 of the ceiling's 6 is 50%; ceil/MPI = 6/2 = 3.00.
read -r -a f128 <<<"$row128"
[ "${f128[6]}" = 1.50 ] || fail "128 MiB ratio ${f128[6]}, expected 1.50"
[ "${f128[10]}" = 50% ] || fail "128 MiB %ceil ${f128[10]}, expected 50%"
[ "${f128[11]}" = 3.00 ] || fail "128 MiB ceil/MPI ${f128[11]}, expected 3.00"
tr -d '\r' <"$tmp/report.csv" | grep -q '^allgather,134217728,.*,50.0,3.0$' || fail "CSV ceiling columns: $(grep 134217728 "$tmp/report.csv")"
echo PASS
