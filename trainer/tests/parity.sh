#!/bin/sh
# Runs loom-train twice (a reference and a candidate layout) and compares
# per-step losses and step-0 gradients.
#
# usage: parity.sh match|differ LOOM LOOM_TRAIN TOL NP_REF "REF ARGS" NP_CAND "CAND ARGS"
#   NP 1 runs the program directly, more under `LOOM run -np NP`.
#   match: both runs succeed and agree within TOL (0 = bit-exact).
#   differ: both runs succeed and the comparison FAILS (mutation tests:
#   proof that the check catches a broken layout).
set -u
expect=$1 loom=$2 train=$3 tol=$4 np_ref=$5 ref_args=$6 np_cand=$7 cand_args=$8
dir=$(mktemp -d "${TMPDIR:-/tmp}/loom-train-parity.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT

launch() {  # launch NP OUT ARGS
  np=$1 out=$2
  shift 2
  # shellcheck disable=SC2086  # ARGS are word-split on purpose
  if [ "$np" -eq 1 ]; then
    "$train" "$@" --quiet --losses "$dir/$out.json" --dump-grads "$dir/$out.g"
  else
    "$loom" run -np "$np" -- "$train" "$@" --quiet --losses "$dir/$out.json" --dump-grads "$dir/$out.g"
  fi
}

# shellcheck disable=SC2086
launch "$np_ref" ref $ref_args || { echo "FAIL: reference run failed"; exit 1; }
# shellcheck disable=SC2086
launch "$np_cand" cand $cand_args || { echo "FAIL: candidate run failed"; exit 1; }

status=0
"$train" compare-losses --tol "$tol" "$dir/ref.json" "$dir/cand.json" || status=1
"$train" compare-grads --tol "$tol" --ref "$dir"/ref.g.* --cand "$dir"/cand.g.* || status=1

if [ "$expect" = match ]; then
  [ $status -eq 0 ] && echo "PASS: runs agree" && exit 0
  echo "FAIL: runs differ"
  exit 1
fi
[ $status -ne 0 ] && echo "PASS: the broken run was caught" && exit 0
echo "FAIL: the broken run was not caught"
exit 1
