#!/bin/bash
# Multi-process tests through `loom run`: the main perf job, a check that
# #wrong can fail, a killed rank named by every survivor, a fingerprint
# mismatch named at init, and TCP between processes.
#   process_test.sh LOOM FAULT_RANK CASE
set -u
LOOM=$1 FAULT=$2 CASE=$3
export NCCL_SOCKET_IFNAME=lo
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; for f in "$tmp"/*; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done; exit 1; }
# The pid of rank $2 among the children of `loom run` $1 (its LOOM_RANK), or
# nothing after 5 s.
rank_pid() {
  for _ in $(seq 50); do
    for p in $(pgrep -P "$1"); do
      tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "LOOM_RANK=$2" && { echo "$p"; return; }
    done
    sleep 0.1
  done
}

case $CASE in
perf_main_job)
  # The README's main job, shortened: every size must check out (#wrong 0).
  "$LOOM" run -np 4 -- "$LOOM" perf all_reduce -b 8 -e 4M -f 4 -c 1 >"$tmp/out" 2>&1 || fail "perf exited $?"
  grep -q "Out of bounds values : 0 OK" "$tmp/out" || fail "no OK line"
  ;;
perf_all_ops)
  "$LOOM" run -np 3 -- "$LOOM" perf all -b 1 -e 256K -f 16 -d all -o all -n 2 -w 1 >"$tmp/out" 2>&1 || fail "perf all exited $?"
  ! grep -q FAILED "$tmp/out" || fail "a check failed"
  # Inputs rewritten before every call (as a training step writes them)
  # still check out, through the FIFOs and through Direct's reads.
  for algo in "" Direct; do
    NCCL_ALGO=$algo "$LOOM" run -np 3 -- "$LOOM" perf all -b 1K -e 1M -f 32 -n 2 -w 1 --back-to-back 1 \
      --rewrite-inputs 1 >"$tmp/rewrite.$algo" 2>&1 || fail "perf --rewrite-inputs 1 ($algo) exited $?"
    grep -q "# Rewrite inputs" "$tmp/rewrite.$algo" || fail "the header does not say inputs are rewritten"
    ! grep -q FAILED "$tmp/rewrite.$algo" || fail "a check failed with rewritten inputs ($algo)"
  done
  ;;
perf_shared_buffers)
  # Buffers in shareable memory (-R 1): peers map them and read them with
  # plain loads; every collective that reads peers directly must still
  # check out, for every type and operator, with 3 ranks (odd blocks). The
  # model's own choices (FIFOs at 3 ranks) must check out over them too.
  # With small counts (the sanitizer passes) 1 MiB runs for float only: it
  # is the piece arithmetic there, not the type, that a sanitizer checks.
  sweeps=("-b 4 -e 1M -f 64 -d all")
  [ -n "${LOOM_TEST_QUICK:-}" ] && sweeps=("-b 4 -e 16K -f 64 -d all" "-b 1M -e 1M -d float")
  for algo in "" Direct; do
    for sweep in "${sweeps[@]}"; do
      # shellcheck disable=SC2086
      NCCL_ALGO=$algo NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=SHM "$LOOM" run -np 3 -- "$LOOM" perf all \
        $sweep -o all -n 2 -w 1 -R 1 >>"$tmp/out.$algo" 2>&1 || fail "perf $sweep -R 1 ($algo) exited $?"
    done
    ! grep -q FAILED "$tmp/out.$algo" || fail "a check failed ($algo)"
  done
  grep -q "mapped a shareable buffer of rank" "$tmp/out.Direct" || fail "no peer buffer was mapped (Direct)"
  # At 32 MiB (kSharedDirectMinBytes) on 2 ranks an all-reduce over
  # shareable buffers reads them in place: a model choice other than Direct
  # gives way to Direct once every rank's buffers are shareable, and Direct
  # chosen by the model (where setup priced single-copy reads above the
  # FIFOs) maps them itself. Below (16 MiB), with plain buffers, or with 3
  # ranks (which never ask), nothing switches.
  for run in "2 1 32M" "2 0 32M" "3 1 32M" "2 1 16M"; do
    set -- $run
    NCCL_DEBUG=TRACE NCCL_DEBUG_SUBSYS=TUNING,SHM "$LOOM" run -np $1 -- "$LOOM" perf all_reduce -b $3 -e $3 \
      -n 2 -w 1 -R $2 >"$tmp/ar.$1.$2.$3" 2>&1 || fail "perf all_reduce -np $1 -R $2 -b $3 exited $?"
    ! grep -q FAILED "$tmp/ar.$1.$2.$3" || fail "a check failed (-np $1 -R $2 -b $3)"
  done
  if grep -q "AllReduce 33554432 bytes on 2 ranks: Direct by cost model" "$tmp/ar.2.1.32M"; then
    grep -q "mapped a shareable buffer of rank" "$tmp/ar.2.1.32M" ||
      fail "the model's Direct all-reduce did not map the shareable buffers"
  else
    grep -q "AllReduce: Direct instead, every rank's buffers are shareable" "$tmp/ar.2.1.32M" ||
      fail "all-reduce did not switch to Direct over shareable buffers"
  fi
  ! grep -q "Direct instead" "$tmp/ar.2.0.32M" || fail "plain buffers switched to Direct"
  ! grep -q "Direct instead" "$tmp/ar.3.1.32M" || fail "3 ranks asked about shareable buffers"
  ! grep -q "Direct instead" "$tmp/ar.2.1.16M" || fail "16 MiB switched to Direct (below kSharedDirectMinBytes)"
  ;;
shm_read_price)
  # Setup times single-copy reads and the FIFOs, and every rank logs the job's price;
  # LOOM_SHM_READ_PRICE replaces the measurement (4 GB/s, below the FIFOs:
  # all-gather keeps the ring at 2 MiB), and a malformed one fails creation
  # naming it.
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT "$LOOM" run -np 2 -- "$LOOM" perf all_gather -b 2M -e 2M \
    -n 2 -w 1 >"$tmp/measured" 2>&1 || fail "perf exited $?"
  [ "$(grep -c 'single-copy reads: 64 KiB' "$tmp/measured")" = 2 ] || fail "not every rank timed its reads"
  [ "$(grep -o 'peer reads [0-9.]* GB/s + [0-9.]* us' "$tmp/measured" | sort -u | wc -l)" = 1 ] ||
    fail "the ranks priced reads differently"
  # ... against the FIFOs as a ring step through them timed them, also on a
  # ring of 3 (each rank sends to one neighbour and receives from the other).
  [ "$(grep -c 'FIFOs 1 MiB [0-9.]* us (a \(streamed \)\?ring step)' "$tmp/measured")" = 2 ] ||
    fail "not every rank timed the FIFOs"
  # ... each way, and chose how its sends store into them.
  [ "$(grep -c 'shared-memory FIFOs: a 1 MiB ring step took [0-9.]* us, [0-9.]* us with streaming stores: sends' \
      "$tmp/measured")" = 2 ] || fail "not every rank chose how to send"
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT "$LOOM" run -np 3 -- "$LOOM" perf all_gather -b 3M -e 3M \
    -n 2 -w 1 >"$tmp/three" 2>&1 || fail "perf -np 3 exited $?"
  [ "$(grep -c 'FIFOs 1 MiB [0-9.]* us (a \(streamed \)\?ring step)' "$tmp/three")" = 3 ] ||
    fail "not every rank of 3 timed the FIFOs"
  [ "$(grep -o 'peer reads [0-9.]* GB/s + [0-9.]* us' "$tmp/three" | sort -u | wc -l)" = 1 ] ||
    fail "3 ranks priced reads differently"
  # A second communicator in the same processes (Split) reuses each rank's
  # measurement instead of timing the reads again.
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT "$LOOM" run -np 2 -- "$FAULT" split >"$tmp/split" 2>&1 ||
    fail "split exited $?"
  [ "$(grep -c 'single-copy reads: 64 KiB' "$tmp/split")" = 2 ] || fail "reads were timed again for the split"
  [ "$(grep -c 'as measured earlier in this process' "$tmp/split")" = 2 ] ||
    fail "the split did not reuse the measurement"
  LOOM_SHM_READ_PRICE=4 NCCL_DEBUG=TRACE NCCL_DEBUG_SUBSYS=INIT,TUNING "$LOOM" run -np 2 -- \
    "$LOOM" perf all_gather -b 2M -e 2M -n 2 -w 1 >"$tmp/fixed" 2>&1 || fail "perf (price 4) exited $?"
  ! grep -q 'single-copy reads: 64 KiB' "$tmp/fixed" || fail "reads were timed despite LOOM_SHM_READ_PRICE"
  grep -q 'peer reads 4.0 GB/s + 20.0 us' "$tmp/fixed" || fail "LOOM_SHM_READ_PRICE=4 not in the job line"
  grep -q 'AllGather 1048576 bytes on 2 ranks: Ring by cost model' "$tmp/fixed" ||
    fail "reads priced below the FIFOs still picked Direct"
  # LOOM_SHM_STREAM=1 or 0 decides without timing the FIFOs' two ways (with
  # the price named too, nothing is timed); either way the data checks out.
  # Nor do collectives explore the other way then.
  for stream in 0 1; do
    LOOM_SHM_STREAM=$stream LOOM_SHM_READ_PRICE=4 NCCL_DEBUG=TRACE NCCL_DEBUG_SUBSYS=INIT,TUNING \
      "$LOOM" run -np 2 -- "$LOOM" perf all_reduce -b 4K -e 4M -f 32 -n 8 -w 1 >"$tmp/stream.$stream" 2>&1 ||
      fail "perf with LOOM_SHM_STREAM=$stream exited $?"
    ! grep -q FAILED "$tmp/stream.$stream" || fail "a check failed with LOOM_SHM_STREAM=$stream"
    ! grep -q 'with streaming stores' "$tmp/stream.$stream" || fail "LOOM_SHM_STREAM=$stream still timed"
    ! grep -q '(explored)' "$tmp/stream.$stream" || fail "LOOM_SHM_STREAM=$stream still explored"
  done
  # Without it, every rank times its collectives and now and then sends a
  # few calls the other way (stream_chooser.h), and every op's checked calls
  # still check out (the data path is the same either way).
  # (40 calls in place and 40 out of place per size: a first exploration
  # waits 64 calls when setup's timing was clear.)
  NCCL_DEBUG=TRACE NCCL_DEBUG_SUBSYS=TUNING "$LOOM" run -np 2 -- "$LOOM" perf all -b 64K -e 1M -f 16 \
    -n 40 -w 1 >"$tmp/explore" 2>&1 || fail "perf all with explorations exited $?"
  ! grep -q FAILED "$tmp/explore" || fail "a check failed while sends changed way"
  # (Sizes per rank's buffer: reduce-scatter, all-gather and all-to-all
  # count a rank's block.)
  for op in AllReduce:1048576 ReduceScatter:524288 AllGather:524288 AllToAll:524288 \
            Broadcast:1048576 Reduce:1048576; do
    [ "$(grep "${op%:*} of ${op#*:} bytes: sends into the shared-memory FIFOs through" "$tmp/explore" |
         grep -o '^[^ ]*:[0-9]*:' | sort -u | wc -l)" = 2 ] ||
      fail "not both ranks explored the other way for ${op%:*} of ${op#*:} bytes"
  done
  LOOM_SHM_STREAM=yes "$LOOM" run -np 2 -- "$LOOM" perf all_gather -b 8 -e 8 -n 1 -w 0 \
    >"$tmp/badstream" 2>&1 && fail "a malformed LOOM_SHM_STREAM was accepted"
  grep -q "LOOM_SHM_STREAM: expected 0, 1 or nothing" "$tmp/badstream" || fail "the error does not name LOOM_SHM_STREAM"
  LOOM_SHM_READ_PRICE=fast "$LOOM" run -np 2 -- "$LOOM" perf all_gather -b 8 -e 8 -n 1 -w 0 \
    >"$tmp/bad" 2>&1 && fail "a malformed LOOM_SHM_READ_PRICE was accepted"
  grep -q "LOOM_SHM_READ_PRICE: expected GBS or GBS,US" "$tmp/bad" || fail "the error does not name the knob"
  ;;
perf_detects_corruption)
  "$LOOM" run -np 2 -- "$LOOM" perf all_reduce -b 1K -e 4K -f 2 --corrupt-for-test >"$tmp/out" 2>&1 && fail "corruption not detected"
  grep -q "FAILED" "$tmp/out" || fail "no FAILED line"
  ;;
perf_tcp)
  NCCL_SHM_DISABLE=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET "$LOOM" run -np 3 -- "$LOOM" perf all_reduce -b 8 -e 1M -f 8 >"$tmp/out" 2>&1 || fail "tcp perf exited $?"
  grep -q "via NET/Socket/lo" "$tmp/out" || fail "INFO does not show NET/Socket/lo"
  grep -q "Out of bounds values : 0 OK" "$tmp/out" || fail "no OK line"
  # Sockets within one host are priced as loopback runs (7 us, 6 GB/s), so
  # the 2-rank all-reduce turns from recursive doubling to the ring between
  # 256 and 512 KiB, where the ring measured faster.
  NCCL_SHM_DISABLE=1 NCCL_DEBUG=TRACE NCCL_DEBUG_SUBSYS=INIT,TUNING "$LOOM" run -np 2 -- "$LOOM" perf \
    all_reduce -b 256K -e 512K -f 2 -n 1 -w 0 >"$tmp/two" 2>&1 || fail "tcp perf -np 2 exited $?"
  grep -q "intra 7.0 us 6.0 GB/s" "$tmp/two" || fail "loopback sockets not priced as such"
  grep -q "AllReduce 262144 bytes on 2 ranks: RecursiveDoubling by cost model" "$tmp/two" ||
    fail "256 KiB over loopback TCP did not pick recursive doubling"
  grep -q "AllReduce 524288 bytes on 2 ranks: Ring by cost model" "$tmp/two" ||
    fail "512 KiB over loopback TCP did not pick the ring"
  ;;
killed_rank)
  # Rank 2 dies with SIGKILL mid-loop; every survivor must fail naming it,
  # well before the timeout, and the launcher must exit non-zero.
  start=$(date +%s)
  LOOM_TIMEOUT_MS=30000 "$LOOM" run -np 4 --kill-grace-ms 10000 --output-dir "$tmp" -- "$FAULT" kill 2 50
  rc=$?
  [ $rc -ne 0 ] || fail "launcher exited 0"
  elapsed=$(( $(date +%s) - start ))
  [ $elapsed -lt 25 ] || fail "took ${elapsed}s"
  for r in 0 1 3; do
    grep -q "RemoteError" "$tmp/rank.$r.err" || fail "rank $r did not report RemoteError"
    grep -q "rank 2" "$tmp/rank.$r.err" || fail "rank $r did not name rank 2"
  done
  ;;
fingerprint_mismatch)
  "$LOOM" run -np 3 --output-dir "$tmp" -- sh -c \
    'if [ "$LOOM_RANK" = 1 ]; then export NCCL_BUFFSIZE=8388608; fi; exec "$0" init' "$FAULT"
  [ $? -ne 0 ] || fail "mismatch not detected"
  grep -q "NCCL_BUFFSIZE" "$tmp/rank.0.err" || fail "rank 0 does not name the variable"
  grep -q "'8388608' on rank 1" "$tmp/rank.0.err" || fail "rank 0 does not name rank 1's value"
  ;;
no_shm_leak)
  before=$(ls /dev/shm | grep -c loom || true)
  "$LOOM" run -np 4 -- "$FAULT" init || fail "init failed"
  LOOM_TIMEOUT_MS=20000 "$LOOM" run -np 3 --kill-grace-ms 5000 --output-dir "$tmp" -- "$FAULT" kill 1 5
  after=$(ls /dev/shm | grep -c loom || true)
  [ "$after" -le "$before" ] || fail "segments left in /dev/shm: $(ls /dev/shm | grep loom)"
  ;;
killed_in_setup)
  # Ranks killed together with their launcher at random moments of startup
  # (nothing survives to reap them): whatever names they left in /dev/shm,
  # the next communicator on the host removes once they are 10 s old. The
  # kills spread over one whole startup's time, and only those between the
  # names' creation and their unlinking leave any: a slow build (sanitizers)
  # makes that window a small part of the startup, so the kills go on past
  # the first 50 until 3 have left names, up to 400.
  names() { ls /dev/shm | grep '^loom-' | sort; }
  names >"$tmp/before"
  took_ms=0  # the quickest of three plain startups: a busy host's slow one would put most kills after the end
  for _ in 1 2 3; do
    start=$(date +%s%N)
    "$LOOM" run -np 3 -- "$FAULT" init >/dev/null 2>&1 || fail "a plain startup failed"
    ms=$(( ($(date +%s%N) - start) / 1000000 + 1 ))
    [ "$took_ms" = 0 ] || [ "$ms" -lt "$took_ms" ] && took_ms=$ms
  done
  # Every name a kill left, even one a later startup removed (once 10 s old).
  : >"$tmp/stranded"
  kills=0 landed=0
  while [ $kills -lt 50 ] || { [ $landed -lt 3 ] && [ $kills -lt 400 ]; }; do
    setsid "$LOOM" run -np 3 -- "$FAULT" init >/dev/null 2>&1 &
    leader=$!
    sleep "$(awk -v r="$RANDOM" -v t="$took_ms" 'BEGIN { printf "%.3f", (r % t) / 1000 }')"
    kill -KILL -- "-$leader" 2>/dev/null  # the launcher and its ranks at once
    wait "$leader" 2>/dev/null
    kills=$((kills + 1))
    names | comm -13 "$tmp/before" - | comm -13 "$tmp/stranded" - >"$tmp/new"
    [ -s "$tmp/new" ] && landed=$((landed + 1))
    sort -o "$tmp/stranded" "$tmp/stranded" "$tmp/new"
  done
  sleep 11
  "$LOOM" run -np 2 -- "$FAULT" init || fail "a communicator after the kills failed"
  names | comm -12 "$tmp/stranded" - >"$tmp/kept"
  echo "names in /dev/shm: $(wc -l <"$tmp/stranded") left by $landed of $kills startups of ${took_ms} ms" \
       "killed at random, $(wc -l <"$tmp/kept") of them after the next communicator"
  [ -s "$tmp/stranded" ] || fail "no kill landed in setup: nothing was left to remove"
  [ ! -s "$tmp/kept" ] || fail "names left in /dev/shm: $(cat "$tmp/kept")"
  ;;
ipv6)
  # NCCL never uses ::1, so give loopback a routable IPv6 address inside a
  # private network namespace and force sockets over AF_INET6.
  command -v unshare >/dev/null || { echo "SKIP: no unshare"; exit 0; }
  unshare -n bash -c '
    ip link set lo up && ip addr add fd00:77::1/64 dev lo nodad || exit 99
    NCCL_SOCKET_FAMILY=AF_INET6 NCCL_SHM_DISABLE=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET \
      "$0" run -np 3 -- "$0" perf all_reduce -b 8 -e 1M -f 32' "$LOOM" >"$tmp/out" 2>&1
  rc=$?
  [ $rc -eq 99 ] && { echo "SKIP: cannot configure a network namespace"; exit 0; }
  [ $rc -eq 0 ] || fail "IPv6 run exited $rc"
  grep -q "Out of bounds values : 0 OK" "$tmp/out" || fail "no OK line"
  grep -q "via NET/Socket/lo" "$tmp/out" || fail "not over sockets"
  grep -q "Using \[0\]lo:\[fd00:77::1\]" "$tmp/out" || fail "not over IPv6"
  ;;
stopped_rank_named)
  # Rank 1 stopped mid-job: rank 0's timeout says the process is stopped, not
  # that it waits on rank 0 (what it published before it stopped).
  LOOM_TIMEOUT_MS=3000 "$LOOM" run -np 2 -- "$FAULT" kill -1 0 >"$tmp/job" 2>&1 &
  job=$!
  victim=$(rank_pid "$job" 1)
  [ -n "$victim" ] || { kill -9 "$job"; fail "rank 1 not found"; }
  sleep 1
  kill -STOP "$victim"
  for _ in $(seq 100); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
  kill -CONT "$victim" 2>/dev/null; kill -9 "$job" 2>/dev/null; wait "$job" 2>/dev/null
  grep -q "rank 0: .*whose process is stopped (SIGSTOP or a debugger) and made no progress" "$tmp/job" ||
    fail "rank 0 did not say rank 1 is stopped"
  ! grep -q "which is waiting on this rank" "$tmp/job" || fail "a stopped rank read as a wait-for cycle"
  ;;
attach_stopped_rank)
  # A job whose rank 1 is stopped: `loom doctor --attach` must name rank 1.
  # Ports below the kernel's ephemeral range (32768+), so no other test's
  # connection can hold one, and free right now for all three ranks.
  port=""
  for _ in $(seq 100); do
    p=$((20000 + RANDOM % 12000))
    [ -z "$(ss -Htln "( sport >= :$p and sport <= :$((p + 2)) )" 2>/dev/null)" ] && { port=$p; break; }
  done
  [ -n "$port" ] || fail "no free status ports"
  NCCL_DEBUG=WARN LOOM_STATUS_PORT=$port LOOM_TIMEOUT_MS=60000 \
    "$LOOM" run -np 3 -- "$FAULT" kill -1 0 >"$tmp/job" 2>&1 &
  job=$!
  victim=$(rank_pid "$job" 1)
  [ -n "$victim" ] || { kill -9 "$job"; fail "rank 1 not found"; }
  sleep 1
  kill -STOP "$victim"
  sleep 3
  "$LOOM" doctor --attach "127.0.0.1:$port+3" --stall-s 2 >"$tmp/doctor" 2>&1
  kill -CONT "$victim"; kill -TERM "$job"; wait "$job" 2>/dev/null
  grep -q "rank 1 of 3 did not answer" "$tmp/doctor" || fail "doctor did not name rank 1"
  grep -q "rank 0,2 wait in" "$tmp/doctor" || fail "doctor did not name the waiting ranks"
  ;;
*)
  echo "unknown case $CASE"; exit 2 ;;
esac
echo "PASS: $CASE"
