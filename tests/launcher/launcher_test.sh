#!/usr/bin/env bash
# Multi-process tests of `loom run`: runs the built binary on real processes.
# usage: launcher_test.sh /path/to/loom CASE   (CASE: see the functions below)
set -u

LOOM=$1
CASE=$2
WORK=$(mktemp -d /tmp/loom_launcher_mp.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

fail() {
  echo "FAIL [$CASE]: $*" >&2
  for f in "$WORK"/stdout "$WORK"/stderr; do
    [ -f "$f" ] && { echo "--- $f" >&2; cat "$f" >&2; }
  done
  exit 1
}

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# Runs loom with the given arguments; sets RC, output in $WORK/stdout, stderr.
run_loom() {
  "$LOOM" "$@" >"$WORK/stdout" 2>"$WORK/stderr"
  RC=$?
}

expect_rc() { [ "$RC" -eq "$1" ] || fail "exit code $RC, expected $1"; }
expect_in() { grep -qF -- "$2" "$1" || fail "'$2' not in $1"; }

# True while $1 is a live process (a zombie awaiting its reaper counts as gone).
alive() {
  [ -r "/proc/$1/stat" ] || return 1
  [ "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" != Z ]
}

# Fails when any pid listed in the files $WORK/$1.* is alive 2 s after the
# launcher returned: a rank's own children (not the launcher's) were signalled
# but may take a moment to exit.
expect_all_gone() {
  local f pid i
  for f in "$WORK/$1".*; do
    [ -f "$f" ] || fail "no pid file $f"
    pid=$(cat "$f")
    for i in $(seq 20); do
      alive "$pid" || break
      sleep 0.1
    done
    if alive "$pid"; then fail "process $pid ($f) survived the job"; fi
  done
}

# Waits up to 10 s for N files $WORK/$1.*.
wait_for_files() {
  local i
  for i in $(seq 100); do
    [ "$(ls "$WORK/$1".* 2>/dev/null | wc -l)" -ge "$2" ] && return 0
    sleep 0.1
  done
  fail "ranks did not start: $(ls "$WORK")"
}

case_cli() {
  run_loom
  expect_rc 0
  expect_in "$WORK/stdout" "run"
  run_loom --version
  expect_rc 0
  grep -qE '^loom [0-9]+\.[0-9]+' "$WORK/stdout" || fail "bad --version output"
  run_loom help run
  expect_rc 0
  expect_in "$WORK/stdout" "loom run -np N"
  run_loom no-such-subcommand
  expect_rc 2
  expect_in "$WORK/stderr" "unknown command 'no-such-subcommand'"
}

case_usage_errors() {
  run_loom run -np 0 true
  expect_rc 2
  expect_in "$WORK/stderr" "-np"
  run_loom run -np 2
  expect_rc 2
  expect_in "$WORK/stderr" "missing the command"
  run_loom run true
  expect_rc 2
  expect_in "$WORK/stderr" "missing -np"
}

case_all_succeed() {
  run_loom run -np 3 --tag-output -- sh -c \
    'echo $LOOM_RANK $LOOM_WORLD_SIZE $LOOM_LOCAL_RANK $LOOM_LOCAL_SIZE; echo "id $LOOM_JOB_ID $LOOM_ROOT"'
  expect_rc 0
  [ "$(grep -v ' id ' "$WORK/stdout" | sort)" = "$(printf '[0] 0 3 0 3\n[1] 1 3 1 3\n[2] 2 3 2 3')" ] ||
    fail "wrong per-rank lines"
  # One job id and root for all ranks: 16 hex digits and 127.0.0.1:<port>.
  [ "$(grep ' id ' "$WORK/stdout" | cut -d' ' -f3- | sort -u | wc -l)" -eq 1 ] || fail "ids differ"
  grep ' id ' "$WORK/stdout" | head -1 | grep -qE '^\[[0-9]\] id [0-9a-f]{16} 127\.0\.0\.1:[0-9]+$' ||
    fail "bad LOOM_JOB_ID or LOOM_ROOT"
}

case_tag_output_streams() {
  run_loom run -np 2 --tag-output -- sh -c \
    'echo out; echo err >&2; printf "no newline"; printf "half" >&2; sleep 0.2; printf " line\n"'
  expect_rc 0
  [ "$(sort "$WORK/stdout")" = "$(printf '[0] no newline line\n[0] out\n[1] no newline line\n[1] out')" ] ||
    fail "stdout not tagged line by line"
  [ "$(sort "$WORK/stderr")" = "$(printf '[0] err\n[0] half\n[1] err\n[1] half')" ] ||
    fail "stderr not tagged, or mixed with stdout"
}

case_stdin_to_rank0() {
  echo hello | "$LOOM" run -np 2 --tag-output cat >"$WORK/stdout" 2>"$WORK/stderr"
  RC=$?
  expect_rc 0
  [ "$(cat "$WORK/stdout")" = "[0] hello" ] || fail "stdin should reach rank 0 only"
}

case_rank_fails() {
  # Ranks other than 2 leave a background sleep (a grandchild) and the shell
  # itself; rank 2 fails once they are all up. All must be gone right after.
  local start elapsed
  start=$(now_ms)
  run_loom run -np 4 -- sh -c '
    if [ "$LOOM_RANK" = 2 ]; then
      while [ "$(ls '"$WORK"'/sleep.* 2>/dev/null | wc -l)" -lt 3 ]; do sleep 0.05; done
      exit 3
    fi
    echo $$ > '"$WORK"'/shell.$LOOM_RANK
    sleep 100 & echo $! > '"$WORK"'/sleep.$LOOM_RANK
    wait'
  elapsed=$(( $(now_ms) - start ))
  expect_rc 3
  expect_in "$WORK/stderr" "rank 2 (pid "
  expect_in "$WORK/stderr" "exited with code 3; terminating the other 3 ranks"
  [ "$elapsed" -lt 5000 ] || fail "took ${elapsed} ms to end the job"
  expect_all_gone shell
  expect_all_gone sleep
}

case_rank_killed() {
  run_loom run -np 3 -- sh -c '
    echo $$ > '"$WORK"'/pid.$LOOM_RANK
    if [ "$LOOM_RANK" = 1 ]; then
      while [ "$(ls '"$WORK"'/pid.* | wc -l)" -lt 3 ]; do sleep 0.05; done
      kill -9 $$
    fi
    exec sleep 100'
  expect_rc 137
  expect_in "$WORK/stderr" "rank 1 (pid "
  expect_in "$WORK/stderr" "killed by signal 9"
  expect_all_gone pid
}

case_output_dir() {
  run_loom run -np 2 --output-dir "$WORK/logs/a" -- sh -c 'echo out $LOOM_RANK; echo err $LOOM_RANK >&2'
  expect_rc 0
  [ ! -s "$WORK/stdout" ] || fail "output leaked to the launcher's stdout"
  for r in 0 1; do
    [ "$(cat "$WORK/logs/a/rank.$r.out")" = "out $r" ] || fail "bad rank.$r.out"
    [ "$(cat "$WORK/logs/a/rank.$r.err")" = "err $r" ] || fail "bad rank.$r.err"
  done
}

case_command_not_found() {
  run_loom run -np 2 loom-no-such-command-xyz arg
  expect_rc 127
  expect_in "$WORK/stderr" "command not found: 'loom-no-such-command-xyz'"
}

case_signal_forwarding() {
  # Each rank counts the SIGTERMs it gets; it must be exactly one.
  "$LOOM" run -np 3 -- sh -c '
    n=0
    trap "n=\$((n+1)); echo term >> '"$WORK"'/term.\$LOOM_RANK" TERM
    echo $$ > '"$WORK"'/pid.$LOOM_RANK
    while [ $n -eq 0 ]; do sleep 0.05; done
    sleep 0.5
    exit 0' >"$WORK/stdout" 2>"$WORK/stderr" &
  local launcher=$!
  wait_for_files pid 3
  kill -TERM "$launcher"
  wait "$launcher"
  RC=$?
  expect_rc 143
  expect_in "$WORK/stderr" "received signal 15"
  for r in 0 1 2; do
    [ "$(wc -l < "$WORK/term.$r")" -eq 1 ] || fail "rank $r got $(wc -l < "$WORK/term.$r") SIGTERMs"
  done
  expect_all_gone pid
}

case_launcher_killed() {
  # Even a launcher killed by SIGKILL leaves no rank behind (PR_SET_PDEATHSIG).
  "$LOOM" run -np 2 -- sh -c 'echo $$ > '"$WORK"'/pid.$LOOM_RANK; exec sleep 100' \
    >"$WORK/stdout" 2>"$WORK/stderr" &
  local launcher=$!
  wait_for_files pid 2
  kill -KILL "$launcher"
  wait "$launcher" 2>/dev/null
  expect_all_gone pid
}

case_timeout() {
  local start elapsed
  start=$(now_ms)
  run_loom run -np 2 --timeout 1 -- sh -c 'echo $$ > '"$WORK"'/pid.$LOOM_RANK; exec sleep 100'
  elapsed=$(( $(now_ms) - start ))
  expect_rc 124
  expect_in "$WORK/stderr" "timed out after 1 s"
  [ "$elapsed" -lt 5000 ] || fail "took ${elapsed} ms"
  expect_all_gone pid
}

case_kill_after_grace() {
  # Ranks that ignore SIGTERM get SIGKILL after --kill-grace-ms.
  local start elapsed
  start=$(now_ms)
  run_loom run -np 2 --timeout 0.3 --kill-grace-ms 300 -- sh -c \
    'trap "" TERM; echo $$ > '"$WORK"'/pid.$LOOM_RANK; sleep 100'
  elapsed=$(( $(now_ms) - start ))
  expect_rc 124
  expect_in "$WORK/stderr" "sending SIGKILL"
  [ "$elapsed" -lt 5000 ] || fail "took ${elapsed} ms"
  expect_all_gone pid
}

"case_$CASE" || exit 1
echo "PASS [$CASE]"
