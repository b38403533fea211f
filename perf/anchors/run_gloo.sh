#!/usr/bin/env bash
# run_gloo.sh NP [gloo_coll_perf options...]
# Starts NP ranks of this folder's gloo_coll_perf (rank 0 prints the table) that meet through a
# FileStore in a fresh temp directory and talk over Gloo's TCP transport on 127.0.0.1.
# Scheduling is inherited: `chrt -f 1 run_gloo.sh ...` runs every rank (and Gloo's device
# threads) at SCHED_FIFO 1.
# Env: BIN (default: built on demand into $GLOO_ANCHOR_BUILD, default /tmp/loom-gloo-anchor),
#      NICE (e.g. -10), NETNS=1 (rank i in namespace ${PREFIX:-h}i at ${SUBNET:-10.77.0}.(i+1),
#      as made by shared/anchors/netns_hosts.sh).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NP=${1:?usage: run_gloo.sh NP [gloo_coll_perf options]}
shift
if [[ -z ${BIN:-} ]]; then
  dir=${GLOO_ANCHOR_BUILD:-/tmp/loom-gloo-anchor}
  # The build must not inherit a real-time policy from the caller.
  chrt -o 0 make -s -C "$HERE" BUILD="$dir" gloo >&2
  BIN=$dir/gloo_coll_perf
fi
STORE=$(mktemp -d "${TMPDIR:-/tmp}/gloo_store.XXXXXX")
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$STORE" "$STORE".rank*.log
}
trap cleanup EXIT

launch() { # rank [args...]
  local r=$1 pre=()
  shift
  [[ -n ${NICE:-} ]] && pre=(nice -n "$NICE")
  if [[ ${NETNS:-0} == 1 ]]; then
    "${pre[@]}" ip netns exec "${PREFIX:-h}$r" "$BIN" -r "$r" -s "$NP" -p "$STORE" \
      -H "${SUBNET:-10.77.0}.$((r + 1))" "$@"
  else
    "${pre[@]}" "$BIN" -r "$r" -s "$NP" -p "$STORE" -H 127.0.0.1 "$@"
  fi
}

for ((r = 1; r < NP; r++)); do
  launch "$r" "$@" >"$STORE.rank$r.log" 2>&1 &
  pids+=($!)
done
rc=0
launch 0 "$@" || rc=$?
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || { rc=$?; echo "rank $((i + 1)) failed:" >&2; cat "$STORE.rank$((i + 1)).log" >&2; }
done
pids=()
exit $rc
