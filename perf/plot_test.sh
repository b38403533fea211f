#!/bin/bash
# perf/plot.py draws one panel per collective in the CSV, a line per series
# with data, leaves out sizes below 1 KiB, and names a missing input.
set -u
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cat >"$tmp/report.csv" <<'CSV'
op,bytes,loom_us,mpi_us,loom_busbw,mpi_busbw,ratio_busbw,gloo_us,gloo_busbw,gloo_algo,pct_memcpy,samples
allreduce,8,0.8,1.6,0.01,0.005,1.9,nan,nan,,0,3
allreduce,4096,1.2,1.1,3.2,3.5,0.9,8.0,0.5,ring,28,3
allreduce,1048576,90,120,11.6,8.7,1.3,300,3.4,ring,95,3
allgather,4096,0.9,0.5,2.3,3.8,0.6,nan,nan,,20,3
allgather,1048576,60,100,8.7,5.2,1.7,nan,nan,,70,3
CSV
python3 "$here/plot.py" "$tmp" --title "test" >"$tmp/out" 2>&1 || fail "plot.py exited $?: $(cat "$tmp/out")"
svg=$tmp/plot.svg
[ -s "$svg" ] || fail "no plot.svg"
grep -q '^<svg ' "$svg" || fail "not an SVG"
[ "$(grep -c 'font-weight="bold">' "$svg")" -eq 2 ] || fail "expected 2 panels (all-reduce, all-gather)"
grep -q '>reduce-scatter<' "$svg" && fail "a panel without data"
# all-reduce: loom, MPI and Gloo lines; all-gather: loom and MPI.
[ "$(grep -c '<polyline' "$svg")" -eq 5 ] || fail "expected 5 lines, got $(grep -c '<polyline' "$svg")"
grep -q '>8<' "$svg" && fail "the 8 B row was drawn"
grep -q '>Gloo (best algorithm)<' "$svg" || fail "no Gloo legend"
python3 -c "import xml.dom.minidom,sys; xml.dom.minidom.parse(sys.argv[1])" "$svg" || fail "malformed XML"
python3 "$here/plot.py" "$tmp/missing" >/dev/null 2>&1 && fail "a missing CSV was accepted"
echo PASS
