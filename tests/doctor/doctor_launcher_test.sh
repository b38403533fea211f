#!/bin/bash
# loom doctor under `loom run` with a failing check: every agent exits with
# the verdict (2), and the launcher stops the job at the first non-zero exit;
# rank 0's report must be out by then, every time. And agents are counted
# by host, not by rank.
#   doctor_launcher_test.sh LOOM [RUNS]
set -u
loom=$1 runs=${2:-20}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for i in $(seq 1 "$runs"); do
  rc=0
  NCCL_SOCKET_IFNAME=bogus0 "$loom" run -np 2 -- "$loom" doctor --json --wait 10 >"$out" 2>/dev/null || rc=$?
  if [ "$rc" -ne 2 ] || ! grep -q '"verdict": "FAIL"' "$out"; then
    echo "FAIL: run $i: exit $rc, and the report was:"; cat "$out"; exit 1
  fi
done
# Three agents of one machine are one host.
rc=0
NCCL_SOCKET_IFNAME=lo "$loom" run -np 3 -- "$loom" doctor --json --wait 10 >"$out" 2>/dev/null || rc=$?
python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
sys.exit(0 if len(r["hosts"]) == 1 else "3 agents on one machine counted as hosts %s" % r["hosts"])' "$out" ||
  { cat "$out"; exit 1; }
echo "PASS: $runs runs, the report printed in each; one host counted once"
