#!/bin/bash
# Chaos: 3 hosts x 2 ranks (network namespaces from netsim.sh) run all-reduce
# loops that check every result, and each trial injects one fault at a random
# moment: a rank killed (SIGKILL), a host's data link cut (`ip link set data0
# down`, or iptables DROP on data0 both ways), or a rank stopped (SIGSTOP).
# Every trial must end with every process exited, every survivor non-zero,
# each survivor's error naming the fault (a killed rank by its number; a
# stopped rank, or a rank of its host: across the network a stalled process
# and a stalled host look alike; for a cut link, a rank across the cut), the
# last survivor gone within LOOM_TIMEOUT_MS + 5 s of the fault, no wrong
# result, and no name of the job left in /dev/shm. Prints one row per trial.
# Needs root, ip and iptables; exits 77 (skip) without them.
#   chaos_test.sh LOOM NETSIM NET_BASE [TRIALS [SEED]]
# NET_BASE: second octet of the networks (mgmt 10.B.0.x, data 10.B+1.0.x).
# A trial's fault, target and moment follow from SEED and its number alone:
# CHAOS_ONLY=K replays trial K (its fault; which rank times out first, and so
# what the errors say, is up to the scheduler). CHAOS_TIMEOUT_MS (default
# 5000) is the ranks' LOOM_TIMEOUT_MS; CHAOS_LOGS=DIR keeps every rank's
# output there. CHAOS_NAMING=each (default): every survivor must name the
# fault as above; =any: one error naming the fault itself is enough (the
# issue's "an error naming the right rank/host": the killed or stopped rank
# by number, or a rank of the cut host named from another host); =kills:
# as each for a killed rank, and only shown in the table for a stopped rank
# or a cut link; =report: shown, never judged.
set -u
export LC_ALL=C
LOOM=$1 NETSIM=$2
export NETSIM_NET=$3 NETSIM_PREFIX=ch$$
TRIALS=${4:-30} SEED=${5:-$((${EPOCHREALTIME/./} % 100000))}
readonly TIMEOUT_MS=${CHAOS_TIMEOUT_MS:-5000} NAMING=${CHAOS_NAMING:-each}
[[ $NAMING == each || $NAMING == any || $NAMING == kills || $NAMING == report ]] ||
  { echo "CHAOS_NAMING: each, any, kills or report, not '$NAMING'"; exit 2; }
readonly MGMT=10.$NETSIM_NET HOSTS=3 RPH=2 NRANKS=6 PORT_BASE=23000
# The stop victim is judged apart: it cannot exit while stopped.
readonly BOUND_MS=$((TIMEOUT_MS + 5000))
# A mix of every kind whatever the seed: kinds in turn, targets and moments at random.
readonly KINDS=(kill stop link-down link-drop)
# Small to medium sizes, each checked once per cycle, cycles until stopped.
readonly WORKLOAD=(perf all_reduce -b 8 -e 2M -f 8 -n 2 -w 1 -c 1 -N 0)

skip() { echo "SKIP: $*"; exit 77; }
[ -f "$NETSIM" ] || skip "no $NETSIM"
[ "$(id -u)" = 0 ] || skip "needs root for network namespaces"
command -v ip >/dev/null || skip "no iproute2"
command -v iptables >/dev/null || skip "no iptables"

tmp=$(mktemp -d)
logs=${CHAOS_LOGS:-$tmp}
mkdir -p "$logs"
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do
    kill -CONT "$p" 2>/dev/null
    kill -KILL "$p" 2>/dev/null && { wait "$p"; } 2>/dev/null
  done
  # netsim's down also ends whatever still runs inside the namespaces.
  bash "$NETSIM" down >/dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

bash "$NETSIM" up $HOSTS >"$tmp/netsim.log" 2>&1 || { cat "$tmp/netsim.log"; skip "cannot create network namespaces here"; }
ip netns exec "${NETSIM_PREFIX}h1" iptables -L INPUT -n >/dev/null 2>&1 || skip "iptables does not work in a namespace"

now_ms() { local us=${EPOCHREALTIME/./}; now=$((us / 1000)); }  # sets $now, forks nothing
host_of() { echo $(($1 / RPH + 1)); }
# ranks_on on|off H: the ranks on host H (or on the others) as a regex alternation.
ranks_on() {
  local p out=()
  for ((p = 0; p < NRANKS; ++p)); do
    if (($(host_of $p) == $2)); then [ "$1" = on ] && out+=("$p"); else [ "$1" = off ] && out+=("$p"); fi
  done
  local IFS='|'
  echo "${out[*]}"
}
# This job's names in /dev/shm: its store port is in every one ("loom-<secret>-<port>-...").
shm_names() {
  local f
  for f in /dev/shm/loom-*-"$1"-*; do [ -e "$f" ] && echo "${f#/dev/shm/}"; done | sort
}
# Error lines of a rank's output: neither perf's header/comments nor table rows.
errors_of() { grep -Ev '^#|^ *[0-9]' "$1"; }
# Does file $1 name one of the ranks $2 (a regex alternation such as "2|3")?
# "rank 3 (", "rank 3,", "rank(s) 1,3 never connected", "ranks 2".
names_rank() { errors_of "$1" | grep -Eq "ranks?(\(s\))? ([0-9]+,)*($2)([^0-9]|$)"; }

row_fmt='%5s  %-9s  %-12s  %5s  %6s  %-20s  %5s  %5s  %5s  %3s  %s\n'
printf "chaos: %d trials, seed %d, %d hosts x %d ranks, LOOM_TIMEOUT_MS=%d, bound %.1f s from the fault, naming: %s survivor\n" \
  "$TRIALS" "$SEED" $HOSTS $RPH "$TIMEOUT_MS" "$(awk -v b=$BOUND_MS 'BEGIN { print b / 1000 }')" "$NAMING"
echo "replay: bash $0 $LOOM $NETSIM $NETSIM_NET $TRIALS $SEED   (one trial: CHAOS_ONLY=K)"
echo "exit codes per rank 0..5: K = killed by the test, S<rc> = stopped, continued after the survivors ended"
# shellcheck disable=SC2059
printf "$row_fmt" trial fault target at_s exit_s "exit codes" named rows wrong shm verdict
failures=0 failed_trials="" unpinned_trials="" start_all=$SECONDS
details=$tmp/details
: >"$details"

# One trial: start the job, inject the fault, judge the outcome, print a row.
trial() {
  local t=$1
  local dir=$logs/trial.$t
  mkdir -p "$dir"
  RANDOM=$((SEED * 1000 + t))
  local kind=${KINDS[$(((t - 1) % ${#KINDS[@]}))]}
  local at_ms=$((300 + RANDOM % 1701)) victim=$((RANDOM % NRANKS)) cut=$((RANDOM % HOSTS + 1))
  local port=$((PORT_BASE + t)) target why=()
  case $kind in
    kill | stop) target="rank $victim (h$(host_of $victim))" ;;
    *) target="host $cut data0"; victim=-1 ;;
  esac
  # note TAG TEXT: a reason the trial fails (TAG goes into the verdict).
  note() {
    [[ " ${why[*]} " == *" $1 "* ]] || why+=("$1")
    echo "trial $t ($kind $target): $2" >>"$details"
  }

  # Names with this job's port present before it (none, unless another job used it).
  shm_names $port >"$dir/shm.before"

  local h l r
  pids=()
  for ((h = 1; h <= HOSTS; ++h)); do
    for ((l = 0; l < RPH; ++l)); do
      r=$(((h - 1) * RPH + l))
      ip netns exec "${NETSIM_PREFIX}h$h" env LOOM_RANK=$r LOOM_WORLD_SIZE=$NRANKS LOOM_LOCAL_RANK=$l \
        LOOM_ROOT="$MGMT.0.1:$port" LOOM_HOSTID="netsim-host$h" LOOM_JOB_ID="chaos-$$-$t" \
        LOOM_TIMEOUT_MS="$TIMEOUT_MS" NCCL_SOCKET_IFNAME==data0 \
        "$LOOM" "${WORKLOAD[@]}" >"$dir/rank.$r" 2>&1 &
      pids[r]=$!
    done
  done
  sleep "$((at_ms / 1000)).$(printf '%03d' $((at_ms % 1000)))"

  local rc=() early=""
  for ((r = 0; r < NRANKS; ++r)); do
    kill -0 "${pids[r]}" 2>/dev/null || early+=" $r"
  done
  [ -z "$early" ] || note early "rank(s)$early exited before the fault"
  # rank 0's table so far: the results checked before the fault.
  local checked_bytes
  checked_bytes=$(stat -c %s "$dir/rank.0")
  now_ms
  local fault_ms=$now
  case $kind in
    kill)  # reaped at once: bash would otherwise print a "Killed" notice
      kill -KILL "${pids[victim]}" && { wait "${pids[victim]}"; } 2>/dev/null
      rc[victim]=$? ;;
    stop) kill -STOP "${pids[victim]}" ;;
    link-down) ip -n "${NETSIM_PREFIX}h$cut" link set data0 down ;;
    link-drop)
      ip netns exec "${NETSIM_PREFIX}h$cut" iptables -A INPUT -i data0 -j DROP &&
        ip netns exec "${NETSIM_PREFIX}h$cut" iptables -A OUTPUT -o data0 -j DROP ;;
  esac || note inject "could not inject the fault"

  # Wait for every process but a stopped one, until the bound.
  local alive=1 last_ms=$fault_ms
  while ((alive)); do
    alive=0
    now_ms
    for ((r = 0; r < NRANKS; ++r)); do
      [ -n "${rc[r]:-}" ] && continue
      [ "$kind" = stop ] && ((r == victim)) && continue
      if kill -0 "${pids[r]}" 2>/dev/null; then
        alive=1
      else
        { wait "${pids[r]}"; } 2>/dev/null  # no "Killed" notice from bash
        rc[r]=$?
        ((now > last_ms)) && last_ms=$now
      fi
    done
    ((alive)) || break
    if ((now - fault_ms > BOUND_MS)); then
      for ((r = 0; r < NRANKS; ++r)); do
        [ -n "${rc[r]:-}" ] && continue
        [ "$kind" = stop ] && ((r == victim)) && continue
        note hang "rank $r still ran $((BOUND_MS / 1000)) s after the fault (killed): $(errors_of "$dir/rank.$r" | tail -n 1)"
        kill -KILL "${pids[r]}" 2>/dev/null
        { wait "${pids[r]}"; } 2>/dev/null
        rc[r]=hung
      done
      last_ms=$now
      break
    fi
    sleep 0.05
  done
  local took_ms=$((last_ms - fault_ms))

  # The stopped rank, continued: it must end on its own, non-zero.
  if [ "$kind" = stop ]; then
    kill -CONT "${pids[victim]}"
    now_ms
    local cont_ms=$now
    while kill -0 "${pids[victim]}" 2>/dev/null; do
      now_ms
      if ((now - cont_ms > BOUND_MS)); then
        note hang "rank $victim still ran $((BOUND_MS / 1000)) s after SIGCONT (killed)"
        kill -KILL "${pids[victim]}"
        break
      fi
      sleep 0.05
    done
    { wait "${pids[victim]}"; } 2>/dev/null
    local vrc=$?
    [ -n "${rc[victim]:-}" ] || rc[victim]=$vrc
    [ "${rc[victim]}" = 0 ] && note exit0 "the stopped rank $victim exited 0 once continued"
  fi

  # Heal the link for the next trial.
  case $kind in
    link-down) ip -n "${NETSIM_PREFIX}h$cut" link set data0 up ;;
    link-drop)
      ip netns exec "${NETSIM_PREFIX}h$cut" iptables -F INPUT
      ip netns exec "${NETSIM_PREFIX}h$cut" iptables -F OUTPUT ;;
  esac

  # Nothing may still run inside the hosts.
  local left
  for ((h = 1; h <= HOSTS; ++h)); do
    left=$(ip netns pids "${NETSIM_PREFIX}h$h" 2>/dev/null | tr '\n' ' ')
    if [ -n "$left" ]; then
      note left "processes left on host $h: $left(killed)"
      # shellcheck disable=SC2086
      kill -KILL $left 2>/dev/null
    fi
  done

  # Judge the survivors.
  local codes="" named=0 pinned=0 survivors=0 expect misses=() m
  for ((r = 0; r < NRANKS; ++r)); do
    if ((r == victim)); then
      [ "$kind" = kill ] && codes+="K " || codes+="S${rc[r]} "
      continue
    fi
    codes+="${rc[r]} "
    survivors=$((survivors + 1))
    case ${rc[r]} in
      0) note exit0 "rank $r exited 0" ;;
      1) note wrong "rank $r exited 1 (perf's code for wrong results)" ;;
      hung) ;;
    esac
    if [ "$kind" = kill ]; then
      expect=$victim
    elif [ "$kind" = stop ]; then
      # Its host-mates see it stopped; from across the network a stalled
      # process and a stalled host look alike.
      if (($(host_of $r) == $(host_of $victim))); then
        expect=$victim
      else
        expect=$(ranks_on on "$(host_of $victim)")
      fi
    elif (($(host_of $r) == cut)); then  # a rank across the cut
      expect=$(ranks_on off $cut)
    else
      expect=$(ranks_on on $cut)
    fi
    if names_rank "$dir/rank.$r" "$expect"; then
      named=$((named + 1))
    else
      misses+=("rank $r names none of ranks $expect: $(errors_of "$dir/rank.$r" | tail -n 1)")
    fi
    # The fault itself: the victim by number, or a cut host's rank named from outside it.
    if ((victim >= 0)) && names_rank "$dir/rank.$r" $victim; then
      pinned=$((pinned + 1))
    elif ((victim < 0 && $(host_of $r) != cut)) && names_rank "$dir/rank.$r" "$(ranks_on on $cut)"; then
      pinned=$((pinned + 1))
    fi
  done
  ((pinned > 0)) || unpinned_trials+=" $t"
  if [ "$NAMING" = each ] || { [ "$NAMING" = kills ] && [ "$kind" = kill ]; }; then
    for m in "${misses[@]}"; do note named "$m"; done
  elif [ "$NAMING" = any ] && ((pinned == 0)); then
    note named "no error names $target itself"
  fi
  ((took_ms <= BOUND_MS)) || note slow "the last survivor ended $((took_ms))ms after the fault (bound ${BOUND_MS}ms)"

  # Results: rank 0's rows up to the fault (and after, which must be right too).
  local rows wrong wrong_after
  read -r rows wrong < <(head -c "$checked_bytes" "$dir/rank.0" |
    awk '$1 ~ /^[0-9]+$/ && NF >= 13 { n++; if ($9 != 0 || $13 != 0) w++ } END { print n + 0, w + 0 }')
  wrong_after=$(tail -c +"$((checked_bytes + 1))" "$dir/rank.0" |
    awk '$1 ~ /^[0-9]+$/ && NF >= 13 && ($9 != 0 || $13 != 0) { w++ } END { print w + 0 }')
  ((wrong == 0)) || note wrong "$wrong row(s) with wrong results before the fault"
  ((wrong_after == 0)) || note wrong "$wrong_after row(s) with wrong results after the fault"

  # /dev/shm: no name of this job may outlive it.
  shm_names $port | comm -13 "$dir/shm.before" - >"$dir/shm.left"
  local shm_left
  shm_left=$(wc -l <"$dir/shm.left")
  if ((shm_left > 0)); then
    note shm "left in /dev/shm: $(paste -sd' ' "$dir/shm.left") (removed)"
    sed 's|^|/dev/shm/|' "$dir/shm.left" | xargs rm -f
  fi

  local verdict=PASS
  if ((${#why[@]})); then
    verdict="FAIL($(IFS=,; echo "${why[*]}"))"
    failures=$((failures + 1))
    failed_trials+=" $t"
    for ((r = 0; r < NRANKS; ++r)); do
      echo "    rank $r (rc ${rc[r]}): $(errors_of "$dir/rank.$r" | tail -n 1)" >>"$details"
    done
  fi
  # shellcheck disable=SC2059
  printf "$row_fmt" "$t" "$kind" "$target" "$(awk -v m=$at_ms 'BEGIN { printf "%.2f", m / 1000 }')" \
    "$(awk -v m=$took_ms 'BEGIN { printf "%.2f", m / 1000 }')" "$codes" "$named/$survivors" "$rows" \
    "$wrong" "$shm_left" "$verdict"
  pids=()
}

if [ -n "${CHAOS_ONLY:-}" ]; then
  trial "$CHAOS_ONLY"
else
  for ((t = 1; t <= TRIALS; ++t)); do trial "$t"; done
fi

echo "chaos: $failures failed trial(s) in $((SECONDS - start_all)) s (seed $SEED)"
[ -z "$unpinned_trials" ] || echo "trials where no error names the fault itself:$unpinned_trials"
if ((failures)); then
  echo "failed trials:$failed_trials"
  cat "$details"
  exit 1
fi
echo "PASS: chaos"
