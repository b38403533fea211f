#!/bin/bash
# The NCCL drop-in: a C program built against NVIDIA's own nccl.h and linked
# with -lnccl (NVIDIA's libnccl.so.2 at link time) runs on loom's library when
# a directory holding loom's libnccl.so.2 leads the library path, as
# docs/API.md tells users to do. 3 ranks under `loom run`, host buffers.
#   dropin_test.sh LOOM_CLI LOOM_NCCL_LIBRARY PROGRAM_SOURCE CUDA_INCLUDE_DIR CUDA_LIBRARY_DIR
# Exits 77 (skipped) where NVIDIA's nccl.h or libnccl.so is not installed.
set -eu
loom=$1 lib=$2 src=$3 cuda_inc=$4 cuda_lib=$5
if [ ! -f "$cuda_inc/nccl.h" ] || [ ! -e "$cuda_lib/libnccl.so" ]; then
  echo "SKIP: NVIDIA's nccl.h / libnccl.so not found in $cuda_inc, $cuda_lib"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cc -std=c11 -Wall -Wextra -Werror -pedantic -I"$cuda_inc" "$src" -L"$cuda_lib" -lnccl -o "$tmp/prog"
readelf -d "$tmp/prog" | grep -q 'NEEDED.*\[libnccl\.so\.2\]' ||
  { echo "FAIL: the program does not depend on libnccl.so.2"; exit 1; }

mkdir "$tmp/lib"
ln -s "$lib" "$tmp/lib/libnccl.so.2"
export LD_LIBRARY_PATH="$tmp/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ldd "$tmp/prog" | grep -q "libnccl.so.2 => $tmp/lib/libnccl.so.2" ||
  { echo "FAIL: the loader does not pick loom's libnccl.so.2:"; ldd "$tmp/prog"; exit 1; }

status=0
NCCL_DEBUG=INFO "$loom" run -np 3 -- "$tmp/prog" "$tmp/id" > "$tmp/out" 2>&1 || status=$?
cat "$tmp/out"
[ "$status" -eq 0 ] || { echo "FAIL: exit status $status"; exit 1; }
[ "$(grep -c '^rank [0-2] of 3: passed' "$tmp/out")" -eq 3 ] ||
  { echo "FAIL: not every rank passed"; exit 1; }
# loom's own log line names the library file the loader took.
grep -q "loom INFO loom .* implementing the NCCL API 2\.28\.9, loaded from $tmp/lib/libnccl.so.2" "$tmp/out" ||
  { echo "FAIL: no loom banner naming $tmp/lib/libnccl.so.2: another libnccl ran"; exit 1; }
echo "PASS: an NVIDIA-header, -lnccl program ran on loom's libnccl.so.2"
