#!/bin/bash
# The bash completion against the loom binary it completes: commands,
# options of a command, values of --bind-to, collectives of perf, and the
# program after `loom run ... --`.
#   completion_test.sh LOOM COMPLETION_SCRIPT
set -u
loom=$1
source "$2"
failures=0
# expect WANTED-WORD WORDS...: completing WORDS (the last one is the word
# under the cursor) offers WANTED-WORD.
expect() {
  local want=$1
  shift
  COMP_WORDS=("$loom" "$@")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  _loom
  if [[ " ${COMPREPLY[*]} " != *" $want "* ]]; then
    echo "FAIL: loom $* <TAB> offers '${COMPREPLY[*]}', not '$want'"
    failures=$((failures + 1))
  fi
}
expect run ""
expect perf pe
expect doctor help d
expect --bind-to run --bi
expect core run -np 2 --bind-to ""
expect --tag-output run --tag
expect all_reduce perf al
expect alltoall perf ""
expect --minbytes perf all_reduce --min
expect --hosts doctor --h
expect --ranks-per-host topo --r
expect --params info --
expect bash run -np 2 -- bas
[ "$failures" -eq 0 ] && echo "PASS: completion" || exit 1
