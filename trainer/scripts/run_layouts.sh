#!/bin/sh
# Trains every layout of docs/trainer.md for STEPS steps, writes the loss
# files, the comparison table (Markdown) and the loss plot.
#
# usage: run_layouts.sh BUILD_DIR OUT_DIR [STEPS]
# BUILD_DIR holds tools/loom and trainer/loom-train.
set -eu
build=$1 out=$2 steps=${3:-50}
loom=$build/tools/loom
train=$build/trainer/loom-train
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-lo}"
common="--steps $steps --micro-batches 2 --quiet"

"$train" $common --losses "$out/ref.json"
files="$out/ref.json"
table="| layout | ranks | max abs loss diff vs 1 rank | mean step ms | mean comm ms |\n|---|---|---|---|---|"
for layout in "2 1 1 0" "2 1 1 1" "1 2 1 0" "1 4 1 0" "1 1 2 0" "1 1 4 0" "4 1 1 0" \
              "2 2 1 1" "1 2 2 0" "2 1 2 1" "2 2 2 1"; do
  set -- $layout
  name="dp$1-tp$2-pp$3-zero$4"
  np=$(($1 * $2 * $3))
  "$loom" run -np $np -- "$train" $common --dp $1 --tp $2 --pp $3 --zero $4 --losses "$out/$name.json"
  files="$files $out/$name.json"
  diff=$("$train" compare-losses --tol 1 "$out/ref.json" "$out/$name.json" | sed 's/.*max |diff| \([^ ]*\).*/\1/')
  ms=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); s=r['step_ms'][1:]; c=r['comm_ms'][1:]; print('%.1f | %.1f' % (sum(s)/len(s), sum(c)/len(c)))" "$out/$name.json")
  table="$table\n| ($1, $2, $3) zero=$4 | $np | $diff | $ms |"
done
printf "%b\n" "$table" > "$out/table.md"
python3 "$here/plot_losses.py" "$out/losses.svg" $files
cat "$out/table.md"
