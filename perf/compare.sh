#!/bin/bash
# Runs loom and the anchors (Open MPI, Gloo) alternately on this machine and
# prints busbw ratios with medians over repeats (loom/MPI: of the medians;
# paired: the median of each repeat's own ratio), plus the memcpy limit
# measured in the same run and, with 2 ranks, a ceiling: for shared memory
# what the memory traffic alone allows and an 8-byte exchange of a cache
# line (perf/ring_memory_bench), for TCP a plain exchange over loopback of
# the bytes each collective moves (perf/tcp_exchange_bench).
# Needs the anchor packages:
#   apt-get install -y openmpi-bin libopenmpi-dev libgloo-dev
# usage: perf/compare.sh [-r REPEAT] [-n NP] [-t shm|tcp] [-o ops] [-b MIN] [-e MAX] [-f F] [--iters N] [--split BYTES] [--gloo] [--rt] [--register] [--bind core|none] [--blocking] [--rewrite-inputs] [--mpi-heap] [--out DIR]
#   --rt: run loom and every anchor alike under chrt -f 1 (root), so that
#         background load (builds, other jobs) cannot preempt either side;
#         the kernel still holds a real-time task that stays busy off its
#         core for the rest of each second once it ran 0.95 s of it
#         (sched_rt_runtime_us), which busy TCP ranks reach: one 40-50 ms
#         stall a second on either side (docs/PERFORMANCE.md)
#   --bind core: bind each rank of loom and of Open MPI to a core of its own
#         (loom run --bind-to core, mpirun --bind-to core; default none, and
#         Gloo's processes are never bound): unbound, two ranks sometimes
#         share one core for a whole run (docs/PERFORMANCE.md)
#   --blocking: loom's sweeps call the blocking forms back to back, as the
#         anchors call MPI and Gloo (loom perf --back-to-back 1); by default
#         they issue non-blocking calls and wait once, as nccl-tests does,
#         which adds the queue's bookkeeping to every call (0.07-0.1 us at 8 B)
#   --rewrite-inputs: before every call both sides write each cache line of
#         its input back unchanged (loom perf --rewrite-inputs 1, and the MPI
#         harness built with perf/anchors/mpi_rewrite_inputs.c), as a training
#         step writes the gradients it reduces: peers that read the input
#         directly then meet freshly written memory. Implies --blocking; not
#         with --gloo
#   --mpi-heap: Open MPI's processes keep large allocations on the heap
#         (GLIBC_TUNABLES=glibc.malloc.mmap_max=0, a trim threshold of
#         4 GiB): by default glibc maps every allocation of 32 MiB or more
#         afresh, so Open MPI's per-call temporary buffers first-touch new
#         pages on every call from there (12-15 us a page on the
#         development VM), its cliff at 32 MiB; this times its algorithms
#         without it
#   --register: loom's buffers in shareable memory (loom perf -R 1); the
#         anchors keep plain malloc'd buffers (they have no equivalent here)
#   --iters N: timed calls per size, for loom and every anchor alike, after
#         5 warm-up calls (default 20, the anchors' own default); more calls
#         steady the small sizes' figures on a noisy host
#   --split BYTES: sizes below it run in a sweep of their own, with buffers
#         no larger than its largest size, for loom and the anchors alike
#         (default 8M; 0: one sweep). Buffers of 256 MiB made small sizes
#         vary 1-10 us here: the hypervisor's cost of pages it has evicted
#   ops: comma list of allreduce,reduce_scatter,allgather (default all three)
# With 2 ranks bound to cores, every sweep of every side is bracketed by a
# reading of the 8-byte exchange between the two cores (ring_memory_bench,
# about 20 ms; modes.r*.txt): a VM's host may move its vCPUs between sharing
# a physical core and sitting apart within seconds, which changes the time
# of every implementation's transfers, and the report sets loom against
# the anchor in the repeats where both sides ran in the same such mode.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
ANCHORS=${ANCHORS:-$root/perf/anchors}  # builds the MPI, memcpy and Gloo anchors
BUILD=${BUILD:-$root/build}
REPEAT=3 NP=2 TRANSPORT=shm OPS=allreduce,reduce_scatter,allgather MINB=8 MAXB=256M FACTOR=8
ITERS=20 MPI_HEAP=0 GLOO=0 OUT="" RT=() LOOM_REG=() SPLIT=8M BIND=none LOOM_CALLS=() LOOM_REWRITE=() MPI_BIN=mpi_coll_perf
GLOO_ALGOS=allreduce,allreduce_ring,allreduce_ring_chunked,allreduce_hd,allreduce_bcube
while [[ $# -gt 0 ]]; do
  case $1 in
    -r) REPEAT=$2; shift 2 ;;  -n) NP=$2; shift 2 ;;  -t) TRANSPORT=$2; shift 2 ;;
    -o) OPS=$2; shift 2 ;;     -b) MINB=$2; shift 2 ;; -e) MAXB=$2; shift 2 ;;
    -f) FACTOR=$2; shift 2 ;;  --gloo) GLOO=1; shift ;; --out) OUT=$2; shift 2 ;;
    --rt) RT=(chrt -f 1); shift ;;
    --split) SPLIT=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    --register) LOOM_REG=(-R 1); shift ;;
    --bind) BIND=$2; shift 2 ;;
    --blocking) LOOM_CALLS=(--back-to-back 1); shift ;;
    --mpi-heap) MPI_HEAP=1; shift ;;
    --rewrite-inputs) LOOM_CALLS=(--back-to-back 1); LOOM_REWRITE=(--rewrite-inputs 1); MPI_BIN=mpi_coll_perf_rewrite; shift ;;
    -h|--help) sed -n 2,48p "$0"; exit 0 ;;
    *) echo "compare.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
if ((GLOO && ${#LOOM_REWRITE[@]})); then
  echo "compare.sh: --rewrite-inputs has no Gloo side yet; drop --gloo" >&2; exit 2
fi
OUT=${OUT:-$root/perf/results/$(date +%Y%m%d-%H%M%S)-$TRANSPORT-np$NP}
mkdir -p "$OUT"
# The report reads every result file in $OUT: drop an earlier run's, so a
# reused --out never mixes another run's operations into this report.
rm -f "$OUT"/{loom,mpi,gloo}.*.txt "$OUT"/{memcpy,ceiling,link,modes}.r*.txt "$OUT"/report.{txt,csv} \
  "$OUT"/plot.svg "$OUT"/buffers "$OUT"/transport
LOOM=$BUILD/tools/loom
[[ -x $LOOM ]] || { echo "build loom first (scripts/build.sh)" >&2; exit 2; }
make -s -C "$ANCHORS" BUILD="$OUT/anchors" >/dev/null
# Which ceiling the report sets loom's all-gather against (compare_report.py).
echo "$([[ ${#LOOM_REG[@]} -gt 0 ]] && echo shareable || echo plain)" > "$OUT/buffers"
# Which goals the report checks (compare_report.py: issue 3's, for 2 ranks).
echo "$TRANSPORT $NP" > "$OUT/transport"
export NCCL_SOCKET_IFNAME=lo

[[ $BIND == core || $BIND == none ]] || { echo "compare.sh: --bind takes core or none, got $BIND" >&2; exit 2; }
if [[ $BIND == core ]] && ((NP > $(nproc))); then
  echo "compare.sh: --bind core needs a core per rank: $NP ranks, $(nproc) CPUs here" >&2; exit 2
fi
mpi_args=(--allow-run-as-root --oversubscribe --bind-to "$BIND" -np "$NP" --mca pml ob1)
if ((MPI_HEAP)); then
  mpi_args+=(-x GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967295)
fi
if [[ $TRANSPORT == shm ]]; then
  mpi_args+=(--mca btl self,vader)
  loom_env=()
else
  mpi_args+=(--mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
  loom_env=(NCCL_SHM_DISABLE=1)
fi

# loom perf timed as the anchors time: one buffer over and over, the warm-up
# calls before every size (not at the largest and smallest first, as
# nccl-tests and loom perf do by default), and the slowest rank's time.
LOOM_AS_ANCHOR=(--fixed-buffers --warmup-per-size 1 -a 3)

# "256M" -> bytes (K, M, G: powers of 1024, as the anchors and loom perf read them).
to_bytes() {
  local v=$1
  case $v in
    *K) echo $((${v%K} << 10)) ;; *M) echo $((${v%M} << 20)) ;; *G) echo $((${v%G} << 30)) ;;
    *) echo "$v" ;;
  esac
}
# The sweeps as "MIN MAX" pairs: the sizes below SPLIT, then the rest.
SWEEPS=()
split_b=$(to_bytes "$SPLIT") lo=$(to_bytes "$MINB") hi=$(to_bytes "$MAXB")
small_end=0 big_start=0
for ((s = lo; s <= hi; s *= FACTOR)); do
  if ((split_b > 0 && s < split_b)); then small_end=$s; elif ((big_start == 0)); then big_start=$s; fi
done
if ((small_end > 0 && big_start > 0)); then
  SWEEPS=("$lo $small_end" "$big_start $hi")
else
  SWEEPS=("$lo $hi")
fi

# The 8-byte exchange between the two ranks' cores, in us ("nan" where it
# means nothing: other than 2 ranks bound to cores, or no bench built).
read_cores() {
  local us=""
  if [[ $NP == 2 && $BIND == core && -x $BUILD/perf/ring_memory_bench ]]; then
    us=$("${RT[@]}" "$BUILD/perf/ring_memory_bench" --bytes 2097152 --reps 1 --cached-sizes 0 \
      --rounds 100000 2>/dev/null | awk '/^8 B exchange/{print $4; exit}') || true
  fi
  echo "${us:-nan}"
}
# timed SIDE OP MIN MAX REPEAT -- command...: runs the command between two
# readings of the cores and notes them in modes.rREPEAT.txt.
timed() {
  local side=$1 op=$2 b=$3 e=$4 r=$5 before after
  shift 6
  before=$(read_cores)
  "$@"
  after=$(read_cores)
  echo "$side $op $(to_bytes "$b") $(to_bytes "$e") $before $after" >> "$OUT/modes.r$r.txt"
}

loom_op() { case $1 in allreduce) echo all_reduce ;; reduce_scatter) echo reduce_scatter ;; allgather) echo all_gather ;; esac; }

for ((r = 1; r <= REPEAT; r++)); do
  echo "== repeat $r/$REPEAT (load: $(cut -d' ' -f1-3 /proc/loadavg))"
  "${RT[@]}" "$OUT/anchors/memcpy_bw" -t 1 64M 256M > "$OUT/memcpy.r$r.txt" 2>&1 || true
  if [[ $TRANSPORT == shm && $NP == 2 && -x $BUILD/perf/ring_memory_bench ]]; then
    # The ceiling: the memory traffic of the 2-rank ring all-reduce and
    # reduce-scatter and of a one-copy all-gather alone, both cores at once,
    # and the all-gather's patterns over the same buffers again and again,
    # from 64 KiB (the goals' least size) and also at 4 and 8 MiB, where
    # both ranks' working set leaves the L3 (perf/ring_memory_bench.cc).
    "${RT[@]}" "$BUILD/perf/ring_memory_bench" --reps 3 \
      --cached-sizes 65536,262144,2097152,4194304,8388608,16777216 > "$OUT/ceiling.r$r.txt" 2>&1 || true
  fi
  if [[ $TRANSPORT == tcp && $NP == 2 && -x $BUILD/perf/tcp_exchange_bench ]]; then
    # The link: two processes exchanging the same bytes over loopback.
    "${RT[@]}" "$BUILD/perf/tcp_exchange_bench" --processes --reps 3 > "$OUT/link.r$r.txt" 2>&1 || true
  fi
  for op in ${OPS//,/ }; do
    : > "$OUT/mpi.$op.r$r.txt"
    : > "$OUT/loom.$op.r$r.txt"
    for sweep in "${SWEEPS[@]}"; do
      read -r b e <<<"$sweep"
      timed mpi "$op" "$b" "$e" "$r" -- \
        "${RT[@]}" mpirun "${mpi_args[@]}" "$OUT/anchors/$MPI_BIN" -b "$b" -e "$e" -f "$FACTOR" -n "$ITERS" -o "$op" \
        >> "$OUT/mpi.$op.r$r.txt" 2>&1
      timed loom "$op" "$b" "$e" "$r" -- \
        "${RT[@]}" env "${loom_env[@]}" "$LOOM" run -np "$NP" --bind-to "$BIND" -- "$LOOM" perf "$(loom_op "$op")" -b "$b" -e "$e" \
        -f "$FACTOR" -w 5 -n "$ITERS" "${LOOM_AS_ANCHOR[@]}" "${LOOM_REG[@]}" "${LOOM_CALLS[@]}" "${LOOM_REWRITE[@]}" >> "$OUT/loom.$op.r$r.txt" 2>&1
    done
    if [[ $op == allreduce && $lo -le 8 ]]; then
      # The latency row: 8 B with 10000 warm-up and 10000 timed iterations.
      # The sweep's 20 iterations of its first size also time one-off costs
      # (they made both sides look 4x slower at 8 B than at 64 B), and with
      # fewer warm-up than timed iterations loom's non-blocking calls, all in
      # flight at once, first-touch fresh heap for the extra operations'
      # completion states (1000 warm-up: 1.5 us out of place, 0.75 in place,
      # which reuses them; 10000: 0.74 and 0.76).
      timed mpi allreduce_lat 8 8 "$r" -- \
        "${RT[@]}" mpirun "${mpi_args[@]}" "$OUT/anchors/$MPI_BIN" -b 8 -e 8 -w 10000 -n 10000 -B 0 \
        -o allreduce > "$OUT/mpi.allreduce_lat.r$r.txt" 2>&1
      timed loom allreduce_lat 8 8 "$r" -- \
        "${RT[@]}" env "${loom_env[@]}" "$LOOM" run -np "$NP" --bind-to "$BIND" -- "$LOOM" perf all_reduce -b 8 -e 8 \
        -w 10000 -n 10000 "${LOOM_AS_ANCHOR[@]}" > "$OUT/loom.allreduce_lat.r$r.txt" 2>&1
      # And as the anchor calls it: blocking calls back to back.
      timed loom allreduce_lat_b2b 8 8 "$r" -- \
        "${RT[@]}" env "${loom_env[@]}" "$LOOM" run -np "$NP" --bind-to "$BIND" -- "$LOOM" perf all_reduce -b 8 -e 8 \
        -w 10000 -n 10000 "${LOOM_AS_ANCHOR[@]}" --back-to-back 1 "${LOOM_REWRITE[@]}" > "$OUT/loom.allreduce_lat_b2b.r$r.txt" 2>&1
    fi
    if [[ $GLOO == 1 && $op == allreduce ]]; then
      # Every Gloo all-reduce algorithm: the report takes the best per size.
      : > "$OUT/gloo.$op.r$r.txt"
      for sweep in "${SWEEPS[@]}"; do
        read -r b e <<<"$sweep"
        timed gloo "$op" "$b" "$e" "$r" -- \
          env BIN="$OUT/anchors/gloo_coll_perf" "${RT[@]}" "$ANCHORS/run_gloo.sh" "$NP" \
          -o "$GLOO_ALGOS" -b "$b" -e "$e" -f "$FACTOR" -n "$ITERS" >> "$OUT/gloo.$op.r$r.txt" 2>&1 || true
      done
    fi
  done
done
python3 "$here/compare_report.py" "$OUT" | tee "$OUT/report.txt"
python3 "$here/plot.py" "$OUT" --title "$TRANSPORT, $NP ranks$([[ ${#LOOM_REG[@]} -gt 0 ]] && echo ', loom -R 1')$([[ $BIND == core ]] && echo ', bound')$([[ ${#LOOM_CALLS[@]} -gt 0 ]] && echo ', loom blocking')$([[ ${#LOOM_REWRITE[@]} -gt 0 ]] && echo ', inputs rewritten')$( ((MPI_HEAP)) && echo ', MPI on the heap')" >/dev/null ||
  echo "compare.sh: no plot (perf/plot.py failed)" >&2
echo "raw tables, report.csv and plot.svg (busbw vs size) in $OUT"
