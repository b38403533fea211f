#!/bin/bash
# loom doctor across network namespaces: three "hosts" built with netsim.sh,
# one agent per host, one failure mode per scenario; asserts on the JSON
# verdict that rank 0 prints (schema loom-doctor/1, docs/DOCTOR.md).
#   doctor_netns_test.sh LOOM NETSIM SCENARIO NET
# NET is the second octet base for netsim (mgmt 10.NET.0.x, data 10.NET+1.0.x),
# distinct per scenario so that scenarios can run in parallel.
set -euo pipefail
LOOM=$1 NETSIM=$2 SCENARIO=$3
export NETSIM_NET=$4 NETSIM_PREFIX=dr$$
readonly N=3 PORT=29400 MGMT=10.$4
[[ $(id -u) == 0 ]] || { echo "doctor netns: needs root, skipped"; exit 77; }
command -v python3 >/dev/null || { echo "doctor netns: needs python3"; exit 77; }

WORK=$(mktemp -d /tmp/doctor-netns.XXXXXX)
cleanup() { bash "$NETSIM" down >/dev/null 2>&1 || true; rm -rf "$WORK"; }
trap cleanup EXIT
bash "$NETSIM" up $N >/dev/null
printf 'node1 slots=1\nnode2 slots=1\nnode3 slots=1\n' >"$WORK/hostfile"

# Per-host extra environment (HOSTENV[i]) and doctor flags for this scenario.
declare -A HOSTENV=()
FLAGS=()
case $SCENARIO in
  healthy) ;;
  unresolvable) echo "node9 slots=1" >>"$WORK/hostfile" ;;
  loopback) bash "$NETSIM" hosts 2 "127.0.1.1 node2" ;;
  drop) bash "$NETSIM" block 2 $((PORT + 1)) drop ;;
  reject) bash "$NETSIM" block 2 $((PORT + 1)) reject ;;
  # Every high inbound port dropped on h2, ephemeral ones included: its
  # connects to the coordinator never complete.
  firewall) bash "$NETSIM" block 2 30000:65535 drop ;;
  ifname) HOSTENV[3]="NCCL_SOCKET_IFNAME=eth0" ;;
  mtu) bash "$NETSIM" mtu 3 data0 9000 ;;
  env) HOSTENV[3]="NCCL_IB_DISABLE=1" ;;
  shaped)
    bash "$NETSIM" shape 2 data0 40mbit
    for i in 1 2 3; do HOSTENV[$i]="NCCL_SOCKET_IFNAME==data0"; done
    FLAGS=(--expect 1gbit --stream-seconds 1) ;;
  shaped_nic)
    # Two data NICs per host (the filter selects both); only h2's data0 is slow.
    bash "$NETSIM" shape 2 data0 40mbit
    for i in 1 2 3; do HOSTENV[$i]="NCCL_SOCKET_IFNAME=mgmt0,data0"; done
    FLAGS=(--expect 1gbit --stream-seconds 0.5) ;;
  *) echo "unknown scenario $SCENARIO"; exit 2 ;;
esac

pids=()
for i in $(seq 1 $N); do
  # shellcheck disable=SC2086
  ip netns exec "${NETSIM_PREFIX}h$i" env LOOM_RANK=$((i - 1)) LOOM_WORLD_SIZE=$N \
    LOOM_ROOT="$MGMT.0.1:$PORT" LOOM_HOSTID="h$i" ${HOSTENV[$i]:-} \
    "$LOOM" doctor --hosts "$WORK/hostfile" --json --wait 20 --timeout-ms 1000 "${FLAGS[@]}" \
    >"$WORK/out$i" 2>"$WORK/err$i" &
  pids+=($!)
done
codes=()
for p in "${pids[@]}"; do
  rc=0; wait "$p" || rc=$?; codes+=("$rc")
done
echo "== exit codes: ${codes[*]}"
echo "== rank 0 report"; cat "$WORK/out1"
for i in 2 3; do echo "== rank $((i - 1)) stderr"; cat "$WORK/err$i"; done

# expect VERDICT [CHECK STATUS HOST SUBSTRING]: the verdict, and a finding of
# that check with that status about that host whose summary has SUBSTRING.
expect() {
  python3 - "$WORK/out1" "$@" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
verdict = sys.argv[2]
if report["verdict"] != verdict:
    sys.exit(f"verdict {report['verdict']}, expected {verdict}")
if len(sys.argv) > 3:
    check, status, host, text = sys.argv[3:7]
    hits = [f for f in report["findings"] if f["check"] == check and f["status"] == status
            and f["host"] == host and text in f["summary"]]
    if not hits:
        sys.exit(f"no {status} {check} finding about {host} containing '{text}'")
    if report["cause"] is None or report["cause"]["check"] != check:
        sys.exit(f"most likely cause is {report['cause']}, expected check {check}")
print("verdict and finding as expected")
PY
}

# Every agent exits with the job's verdict.
same_codes() { [[ ${codes[0]} == "$1" && ${codes[1]} == "$1" && ${codes[2]} == "$1" ]] || { echo "exit codes ${codes[*]}, expected $1"; exit 1; }; }

case $SCENARIO in
  healthy) expect PASS; same_codes 0 ;;
  unresolvable) expect FAIL names FAIL h1,h2,h3 "'node9' does not resolve"; same_codes 2 ;;
  loopback) expect FAIL names FAIL h2 "'node2' resolves to loopback 127.0.1.1"; same_codes 2 ;;
  drop) expect FAIL reachability FAIL h2 "port $((PORT + 1)) on mgmt0 $MGMT.0.2 dropped: no answer from h1,h3"; same_codes 2 ;;
  reject) expect FAIL reachability FAIL h2 "port $((PORT + 1)) on mgmt0 $MGMT.0.2 refused (RST) to h1,h3"; same_codes 2 ;;
  firewall)
    # Rank 0 names the rank that never came; h2 ended on its own (within
    # --wait and its connect timeouts) and printed why.
    expect FAIL agents FAIL "rank 1" "never reached the coordinator"; same_codes 2
    python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
hits = [f for f in r["findings"] if f["check"] == "reachability" and f["status"] == "FAIL"
        and "could not reach the coordinator" in f["summary"] and "a firewall may drop" in f["summary"]]
sys.exit(0 if hits else f"h2 did not say why it could not reach the coordinator: {r}")' "$WORK/out2" ;;
  ifname) expect FAIL interfaces FAIL h3 "eth0"; same_codes 2 ;;
  mtu) expect FAIL mtu_routes FAIL h3 "mtu 1500 on h1/data0,h2/data0; mtu 9000 on h3/data0"; same_codes 2 ;;
  env) expect FAIL fingerprint FAIL h3 "NCCL_IB_DISABLE differs: '0' on h1,h2; '1' on h3"; same_codes 2 ;;
  shaped) expect FAIL bandwidth FAIL h2 "sends at"; same_codes 2 ;;
  shaped_nic) expect FAIL bandwidth FAIL h2 "on data0, "; same_codes 2
    python3 -c 'import json, sys
bad = [f for f in json.load(open(sys.argv[1]))["findings"] if f["check"] == "bandwidth" and "mgmt0" in f["summary"]]
sys.exit(f"the unshaped NIC was judged: {bad}" if bad else 0)' "$WORK/out1" ;;
esac
echo "doctor netns $SCENARIO: ok"
