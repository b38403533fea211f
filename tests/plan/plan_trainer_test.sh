#!/bin/sh
# For each layout loom-train runs on a small machine (DP, TP, PP, ZeRO-1 and
# mixes, 2 to 4 ranks), runs it for two steps with --report-bytes and checks
# `loom plan --model loom-train --layout ...` against every rank's counters:
# operations and bytes per group per step, and parameter, gradient and
# optimizer-state bytes, exactly. Prints one line per layout.
#
# usage: plan_trainer_test.sh LOOM LOOM_TRAIN
set -u
loom=$1 train=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/loom-plan-trainer.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
failures=0

# check NAME LAYOUT "TRAINER FLAGS" "PLANNER FLAGS": the trainer's grid comes
# from LAYOUT (dp=D,tp=T,pp=P,zero=Z); FLAGS are the flags both take.
check() {
  name=$1 layout=$2 flags=$3
  dp=1 tp=1 pp=1 zero=0
  for kv in $(echo "$layout" | tr ',' ' '); do
    eval "${kv%%=*}=${kv#*=}"
  done
  np=$((dp * tp * pp))
  # shellcheck disable=SC2086  # FLAGS are word-split on purpose
  if ! "$loom" run -np "$np" -- "$train" --dp "$dp" --tp "$tp" --pp "$pp" --zero "$zero" $flags \
      --steps 2 --quiet --report-bytes >"$dir/$name.txt" 2>"$dir/$name.err"; then
    echo "FAIL $name: loom-train failed"; cat "$dir/$name.err"; failures=$((failures + 1)); return
  fi
  # shellcheck disable=SC2086
  if "$loom" plan --model loom-train --layout "$layout" $flags --check-trainer "$dir/$name.txt" \
      >"$dir/$name.plan" 2>&1; then
    echo "PASS $name ($layout $flags): $(grep '^  all ranks:' "$dir/$name.plan" | sed 's/^  all ranks: //')"
  else
    echo "FAIL $name ($layout $flags)"; sed -n '/^loom-train, exactly/,$p' "$dir/$name.plan"
    failures=$((failures + 1))
  fi
}

check dp2_overlap    dp=2            "--micro-batches 2"
check dp2_plain      dp=2            "--sync plain"
check dp2_zero1      dp=2,zero=1     "--micro-batches 2"
check dp4_zero1      dp=4,zero=1     "--sync bucketed --bucket-floats 10000"
check tp2            tp=2            "--micro-batches 2"
check tp4            tp=4            ""
check pp2_1f1b       pp=2            "--micro-batches 4"
check pp4_gpipe      pp=4            "--micro-batches 4 --schedule gpipe"
check pp4_1f1b       pp=4            "--micro-batches 2"
check dp2_tp2_zero1  dp=2,tp=2,zero=1 "--micro-batches 2"
check dp2_pp2_zero1  dp=2,pp=2,zero=1 "--micro-batches 2"
check tp2_pp2        tp=2,pp=2       "--micro-batches 2 --schedule gpipe"
# Uneven: stage 0 takes two of the four layers; a buffer padded to 3 ranks.
check pp3_uneven     pp=3            "--micro-batches 2"
check dp3_zero1_pad  dp=3,zero=1     "--batch 6 --layers 3 --channels 32 --heads 4 --vocab 101 --seq 16 --sync bucketed --bucket-floats 1000"

# A planner that drifts is caught: the same run against another layout.
if "$loom" plan --model loom-train --layout dp=2,zero=0 --micro-batches 2 \
    --check-trainer "$dir/dp2_zero1.txt" >"$dir/mutant.plan" 2>&1; then
  echo "FAIL: ZeRO-1 counters accepted as plain DP"; failures=$((failures + 1))
else
  echo "PASS: ZeRO-1 counters against a plain-DP prediction differ ($(grep -c 'predicted' "$dir/mutant.plan") lines)"
fi

[ "$failures" -eq 0 ] && echo "PASS: loom plan equals loom-train's counters" && exit 0
echo "FAIL: $failures layouts differ"
exit 1
