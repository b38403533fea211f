/* A C99 program that uses loom only through loom/nccl.h, as an NCCL user
 * would. Run one process per rank under `loom run -np N`: rank and size come
 * from LOOM_RANK/LOOM_WORLD_SIZE, and every rank calls ncclGetUniqueId, which
 * under the launcher returns the same id everywhere. Alone (no launcher) it
 * runs as a single rank.
 *
 * Checks all-reduce (float and int32, counts 0, 1, 1031, 1<<20, in and out of
 * place), the other collectives, all-to-all, gather and scatter (alone and in
 * one group), a grouped send/recv ring, split (even/odd, and
 * NCCL_SPLIT_NOCOLOR), every error string, and the invalid-argument paths.
 * Exit status 0 means every check passed on this rank. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/nccl.h"

static int g_rank = 0;
static int g_failures = 0;

static void report(const char* file, int line, const char* what) {
  fprintf(stderr, "rank %d: %s:%d: check failed: %s\n", g_rank, file, line, what);
  ++g_failures;
}

#define CHECK(cond)                                 \
  do {                                              \
    if (!(cond)) report(__FILE__, __LINE__, #cond); \
  } while (0)

/* A failed call leaves the ranks out of step, so it ends the program. */
#define NCCL_OK(call)                                                                       \
  do {                                                                                      \
    ncclResult_t r_ = (call);                                                               \
    if (r_ != ncclSuccess) {                                                                \
      fprintf(stderr, "rank %d: %s:%d: %s -> %s (%s)\n", g_rank, __FILE__, __LINE__, #call, \
              ncclGetErrorString(r_), ncclGetLastError(NULL));                              \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)

static int env_int(const char* name, int fallback) {
  const char* v = getenv(name);
  return (v != NULL && *v != '\0') ? atoi(v) : fallback;
}

static void* xmalloc(size_t bytes) {
  void* p = malloc(bytes > 0 ? bytes : 1);
  if (p == NULL) {
    fprintf(stderr, "rank %d: out of memory (%lu bytes)\n", g_rank, (unsigned long)bytes);
    exit(1);
  }
  return p;
}

/* Element i on rank r: exact in float, so the sum is exact whatever the order. */
static float float_input(int r, size_t i) {
  return (float)((r + 1) * (int)(i % 7 + 1));
}
static int32_t int_input(int r, size_t i) {
  return (int32_t)(r * 1000003 + (int32_t)(i % 1000));
}

static void check_error_strings(void) {
  int a, b;
  for (a = 0; a < ncclNumResults; ++a) {
    const char* s = ncclGetErrorString((ncclResult_t)a);
    CHECK(s != NULL && s[0] != '\0');
    for (b = 0; b < a; ++b) CHECK(strcmp(s, ncclGetErrorString((ncclResult_t)b)) != 0);
  }
  CHECK(ncclGetErrorString((ncclResult_t)99) != NULL);
}

static void check_version(void) {
  int version = 0;
  NCCL_OK(ncclGetVersion(&version));
  CHECK(version == NCCL_VERSION_CODE);
  CHECK(version >= NCCL_VERSION(2, 28, 0));
  CHECK(ncclGetVersion(NULL) == ncclInvalidArgument);
}

/* The last error must exist and mention `word`. */
static void check_last_error(const char* word) {
  const char* msg = ncclGetLastError(NULL);
  CHECK(msg != NULL && strstr(msg, word) != NULL);
  if (msg != NULL && strstr(msg, word) == NULL) {
    fprintf(stderr, "rank %d: last error \"%s\" does not mention \"%s\"\n", g_rank, msg, word);
  }
}

/* Local argument errors: no rank talks to another, so they cannot desync. */
static void check_invalid_arguments(ncclComm_t comm, int nranks) {
  float buf[4] = {0, 0, 0, 0};
  int n = 0;
  ncclComm_t bad = NULL;
  ncclUniqueId zero_id;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  memset(&zero_id, 0, sizeof zero_id);

  CHECK(ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, NULL, NULL) == ncclInvalidArgument);
  check_last_error("comm");
  CHECK(ncclAllReduce(buf, buf, 4, (ncclDataType_t)42, ncclSum, comm, NULL) == ncclInvalidArgument);
  check_last_error("datatype");
  CHECK(ncclAllReduce(buf, buf, 4, ncclFloat, (ncclRedOp_t)17, comm, NULL) == ncclInvalidArgument);
  check_last_error("op");
  CHECK(ncclAllReduce(NULL, buf, 4, ncclFloat, ncclSum, comm, NULL) == ncclInvalidArgument);
  check_last_error("sendbuff");
  CHECK(ncclSend(buf, 4, ncclFloat, nranks, comm, NULL) == ncclInvalidArgument);
  check_last_error("peer");
  CHECK(ncclRecv(buf, 4, ncclFloat, -1, comm, NULL) == ncclInvalidArgument);
  CHECK(ncclBroadcast(buf, buf, 4, ncclFloat, nranks + 3, comm, NULL) == ncclInvalidArgument);
  check_last_error("root");
  CHECK(ncclCommCount(NULL, &n) == ncclInvalidArgument);
  CHECK(ncclCommCount(comm, NULL) == ncclInvalidArgument);
  CHECK(ncclCommUserRank(comm, NULL) == ncclInvalidArgument);
  CHECK(ncclCommGetAsyncError(comm, NULL) == ncclInvalidArgument);
  CHECK(ncclCommSplit(comm, -5, 0, &bad, NULL) == ncclInvalidArgument);
  CHECK(bad == NULL);

  /* Rejected before any rendezvous, so the zero id is never used. */
  CHECK(ncclCommInitRank(&bad, 2, zero_id, 2) == ncclInvalidArgument);
  CHECK(bad == NULL);
  CHECK(ncclCommInitRank(&bad, 0, zero_id, 0) == ncclInvalidArgument);
  CHECK(ncclCommInitRank(NULL, 1, zero_id, 0) == ncclInvalidArgument);
  config.magic = 0;
  CHECK(ncclCommInitRankConfig(&bad, 1, zero_id, 0, &config) == ncclInvalidArgument);
  check_last_error("NCCL_CONFIG_INITIALIZER");
  config.magic = NCCL_API_MAGIC;
  config.blocking = 7;
  CHECK(ncclCommInitRankConfig(&bad, 1, zero_id, 0, &config) == ncclInvalidArgument);
  check_last_error("blocking");
  CHECK(bad == NULL);

  CHECK(ncclGroupEnd() == ncclInvalidUsage);
  CHECK(ncclCommDestroy(NULL) == ncclSuccess);
  CHECK(ncclCommAbort(NULL) == ncclSuccess);
}

static void check_allreduce(ncclComm_t comm, int rank, int nranks, size_t count) {
  size_t i;
  float* fsend = (float*)xmalloc(count * sizeof(float));
  float* frecv = (float*)xmalloc(count * sizeof(float));
  int32_t* ibuf = (int32_t*)xmalloc(count * sizeof(int32_t));
  size_t fbad = 0, ibad = 0;
  const int tri = nranks * (nranks + 1) / 2;

  for (i = 0; i < count; ++i) {
    fsend[i] = float_input(rank, i);
    frecv[i] = -1.0f;
    ibuf[i] = int_input(rank, i);
  }
  NCCL_OK(ncclAllReduce(fsend, frecv, count, ncclFloat32, ncclSum, comm, NULL));
  /* In place, as trainers mostly call it. */
  NCCL_OK(ncclAllReduce(ibuf, ibuf, count, ncclInt32, ncclSum, comm, NULL));
  for (i = 0; i < count; ++i) {
    int32_t want = 0;
    int r;
    for (r = 0; r < nranks; ++r) want += int_input(r, i);
    if (frecv[i] != (float)(tri * (int)(i % 7 + 1))) ++fbad;
    if (fsend[i] != float_input(rank, i)) ++fbad; /* out of place leaves the input alone */
    if (ibuf[i] != want) ++ibad;
  }
  if (fbad != 0 || ibad != 0) {
    fprintf(stderr, "rank %d: all-reduce count %lu: %lu float and %lu int32 elements wrong\n", rank,
            (unsigned long)count, (unsigned long)fbad, (unsigned long)ibad);
    ++g_failures;
  }
  free(fsend);
  free(frecv);
  free(ibuf);
}

/* Each rank scales its input by rank + 0.5 before the sum (exact in float). */
static void check_premulsum(ncclComm_t comm, int rank, int nranks) {
  const size_t count = 100003;
  size_t i, bad = 0;
  float* f = (float*)xmalloc(count * sizeof(float));
  float scalar = (float)rank + 0.5f;
  ncclRedOp_t op;
  NCCL_OK(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32, ncclScalarHostImmediate, comm));
  for (i = 0; i < count; ++i) f[i] = float_input(rank, i);
  NCCL_OK(ncclAllReduce(f, f, count, ncclFloat32, op, comm, NULL));
  for (i = 0; i < count; ++i) {
    float want = 0.0f;
    int r;
    for (r = 0; r < nranks; ++r) want += ((float)r + 0.5f) * float_input(r, i);
    if (f[i] != want) ++bad;
  }
  NCCL_OK(ncclRedOpDestroy(op, comm));
  CHECK(ncclRedOpDestroy(op, comm) == ncclInvalidArgument);
  if (bad != 0) {
    fprintf(stderr, "rank %d: PreMulSum all-reduce: %lu elements wrong\n", rank,
            (unsigned long)bad);
    ++g_failures;
  }
  free(f);
}

static void check_other_collectives(ncclComm_t comm, int rank, int nranks) {
  const size_t count = 1031;
  const size_t total = count * (size_t)nranks;
  const int root = nranks - 1;
  size_t i, bad = 0;
  int32_t* big = (int32_t*)xmalloc(total * sizeof(int32_t));
  int32_t* small = (int32_t*)xmalloc(count * sizeof(int32_t));
  float* f = (float*)xmalloc(count * sizeof(float));

  /* reduce-scatter: block b of the sum lands on rank b */
  for (i = 0; i < total; ++i) big[i] = int_input(rank, i);
  NCCL_OK(ncclReduceScatter(big, small, count, ncclInt32, ncclSum, comm, NULL));
  for (i = 0; i < count; ++i) {
    int32_t want = 0;
    int r;
    for (r = 0; r < nranks; ++r) want += int_input(r, (size_t)rank * count + i);
    if (small[i] != want) ++bad;
  }
  CHECK(bad == 0);

  /* all-gather: rank r's block at offset r*count */
  for (i = 0; i < count; ++i) small[i] = int_input(rank, i);
  NCCL_OK(ncclAllGather(small, big, count, ncclInt32, comm, NULL));
  for (bad = 0, i = 0; i < total; ++i) {
    if (big[i] != int_input((int)(i / count), i % count)) ++bad;
  }
  CHECK(bad == 0);

  /* broadcast from the last rank */
  for (i = 0; i < count; ++i) f[i] = rank == root ? float_input(root, i) : 0.0f;
  NCCL_OK(ncclBroadcast(f, f, count, ncclFloat, root, comm, NULL));
  for (bad = 0, i = 0; i < count; ++i) {
    if (f[i] != float_input(root, i)) ++bad;
  }
  CHECK(bad == 0);

  /* reduce (max) to rank 0; recvbuff may be NULL elsewhere */
  for (i = 0; i < count; ++i) f[i] = float_input(rank, i);
  NCCL_OK(ncclReduce(f, rank == 0 ? f : NULL, count, ncclFloat, ncclMax, 0, comm, NULL));
  for (bad = 0, i = 0; i < count; ++i) {
    if (f[i] != float_input(rank == 0 ? nranks - 1 : rank, i)) ++bad;
  }
  CHECK(bad == 0);

  free(big);
  free(small);
  free(f);
}

/* The value rank `from` sends rank `to` at element i of a block. */
static int32_t block_value(int from, int to, size_t i) {
  return (int32_t)(from * 1000000 + to * 10000 + (int)(i % 10000));
}

/* All-to-all, then a gather to the last rank and a scatter from rank 0
 * (buffers of all blocks NULL off the root), then both again in one group. */
static void check_alltoall_gather_scatter(ncclComm_t comm, int rank, int nranks) {
  const size_t count = 1031;
  const size_t total = count * (size_t)nranks;
  const int groot = nranks - 1;
  size_t i, bad = 0;
  int32_t* send = (int32_t*)xmalloc(total * sizeof(int32_t));
  int32_t* recv = (int32_t*)xmalloc(total * sizeof(int32_t));
  int32_t* mine = (int32_t*)xmalloc(count * sizeof(int32_t));
  int32_t* got = (int32_t*)xmalloc(count * sizeof(int32_t));

  /* all-to-all: block j of my input goes to rank j */
  for (i = 0; i < total; ++i) {
    send[i] = block_value(rank, (int)(i / count), i % count);
    recv[i] = -1;
  }
  NCCL_OK(ncclAlltoAll(send, recv, count, ncclInt32, comm, NULL));
  for (i = 0; i < total; ++i) {
    if (recv[i] != block_value((int)(i / count), rank, i % count)) ++bad;
  }
  CHECK(bad == 0);

  /* gather to the last rank */
  for (i = 0; i < count; ++i) mine[i] = block_value(rank, groot, i);
  for (i = 0; i < total; ++i) recv[i] = -1;
  NCCL_OK(ncclGather(mine, rank == groot ? recv : NULL, count, ncclInt32, groot, comm, NULL));
  if (rank == groot) {
    for (bad = 0, i = 0; i < total; ++i) {
      if (recv[i] != block_value((int)(i / count), groot, i % count)) ++bad;
    }
    CHECK(bad == 0);
  }

  /* scatter from rank 0: block r of its buffer to rank r */
  for (i = 0; i < total; ++i) send[i] = block_value(0, (int)(i / count), i % count);
  for (i = 0; i < count; ++i) got[i] = -1;
  NCCL_OK(ncclScatter(rank == 0 ? send : NULL, got, count, ncclInt32, 0, comm, NULL));
  for (bad = 0, i = 0; i < count; ++i) {
    if (got[i] != block_value(0, rank, i)) ++bad;
  }
  CHECK(bad == 0);

  /* both in one group, in place on their roots */
  for (i = 0; i < count; ++i) {
    mine[i] = block_value(rank, 0, i);
    got[i] = -1;
  }
  if (rank == 0) {
    for (i = 0; i < count; ++i) recv[i] = mine[i];
  }
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclGather(rank == 0 ? recv : mine, rank == 0 ? recv : NULL, count, ncclInt32, 0, comm,
                     NULL));
  NCCL_OK(ncclScatter(rank == groot ? send : NULL,
                      rank == groot ? send + (size_t)groot * count : got, count, ncclInt32, groot,
                      comm, NULL));
  NCCL_OK(ncclGroupEnd());
  if (rank == 0) {
    for (bad = 0, i = 0; i < total; ++i) {
      if (recv[i] != block_value((int)(i / count), 0, i % count)) ++bad;
    }
    CHECK(bad == 0);
  }
  {
    const int32_t* mine_now = rank == groot ? send + (size_t)groot * count : got;
    for (bad = 0, i = 0; i < count; ++i) {
      if (mine_now[i] != block_value(0, rank, i)) ++bad;
    }
    CHECK(bad == 0);
  }

  free(send);
  free(recv);
  free(mine);
  free(got);
}

/* Every rank sends to the next and receives from the previous: deadlocks
 * unless the group lets both progress together. */
static void check_group_ring(ncclComm_t comm, int rank, int nranks) {
  const size_t count = 1031;
  const int next = (rank + 1) % nranks;
  const int prev = (rank + nranks - 1) % nranks;
  size_t i, bad = 0;
  int32_t* out = (int32_t*)xmalloc(count * sizeof(int32_t));
  int32_t* in = (int32_t*)xmalloc(count * sizeof(int32_t));
  for (i = 0; i < count; ++i) {
    out[i] = int_input(rank, i);
    in[i] = -1;
  }
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclSend(out, count, ncclInt32, next, comm, NULL));
  NCCL_OK(ncclRecv(in, count, ncclInt32, prev, comm, NULL));
  NCCL_OK(ncclGroupEnd());
  for (i = 0; i < count; ++i) {
    if (in[i] != int_input(prev, i)) ++bad;
  }
  CHECK(bad == 0);
  free(out);
  free(in);
}

static void check_split(ncclComm_t comm, int rank, int nranks) {
  ncclComm_t half = NULL, rest = NULL;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  ncclResult_t async_error = ncclInternalError;
  int size = 0, sub_rank = -1, want_size = 0, want_rank = 0, r;
  int32_t sum, want_sum = 0;

  /* Even and odd ranks; key reverses the order inside each half. */
  config.blocking = 0;
  NCCL_OK(ncclCommSplit(comm, rank % 2, nranks - rank, &half, &config));
  CHECK(half != NULL);
  NCCL_OK(ncclCommGetAsyncError(half, &async_error));
  CHECK(async_error == ncclSuccess);
  for (r = 0; r < nranks; ++r) {
    if (r % 2 != rank % 2) continue;
    ++want_size;
    want_sum += r;
    if (r > rank) ++want_rank;
  }
  NCCL_OK(ncclCommCount(half, &size));
  NCCL_OK(ncclCommUserRank(half, &sub_rank));
  CHECK(size == want_size);
  CHECK(sub_rank == want_rank);
  sum = rank;
  NCCL_OK(ncclAllReduce(&sum, &sum, 1, ncclInt32, ncclSum, half, NULL));
  CHECK(sum == want_sum);
  NCCL_OK(ncclCommFinalize(half));
  NCCL_OK(ncclCommDestroy(half));

  /* Rank 0 stays out. */
  NCCL_OK(ncclCommSplit(comm, rank == 0 ? NCCL_SPLIT_NOCOLOR : 1, rank, &rest, NULL));
  if (rank == 0) {
    CHECK(rest == NULL);
  } else {
    CHECK(rest != NULL);
    NCCL_OK(ncclCommCount(rest, &size));
    NCCL_OK(ncclCommUserRank(rest, &sub_rank));
    CHECK(size == nranks - 1);
    CHECK(sub_rank == rank - 1);
    NCCL_OK(ncclCommFinalize(rest));
    NCCL_OK(ncclCommDestroy(rest));
  }
}

int main(void) {
  static const size_t counts[] = {0, 1, 1031, (size_t)1 << 20};
  const int nranks = env_int("LOOM_WORLD_SIZE", 1);
  const int rank = env_int("LOOM_RANK", 0);
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  ncclResult_t async_error = ncclInternalError;
  int n = 0, me = -1;
  size_t c;

  g_rank = rank;
  if (nranks > 1 && getenv("LOOM_ROOT") == NULL) {
    fprintf(stderr, "LOOM_WORLD_SIZE=%d but no LOOM_ROOT: start this under `loom run`\n", nranks);
    return 2;
  }
  check_error_strings();
  check_version();

  NCCL_OK(ncclGetUniqueId(&id));
  NCCL_OK(ncclCommInitRank(&comm, nranks, id, rank));
  NCCL_OK(ncclCommCount(comm, &n));
  NCCL_OK(ncclCommUserRank(comm, &me));
  CHECK(n == nranks);
  CHECK(me == rank);

  check_invalid_arguments(comm, nranks);
  for (c = 0; c < sizeof counts / sizeof counts[0]; ++c) {
    check_allreduce(comm, rank, nranks, counts[c]);
  }
  check_other_collectives(comm, rank, nranks);
  check_premulsum(comm, rank, nranks);
  check_alltoall_gather_scatter(comm, rank, nranks);
  check_group_ring(comm, rank, nranks);
  check_split(comm, rank, nranks);

  NCCL_OK(ncclCommGetAsyncError(comm, &async_error));
  CHECK(async_error == ncclSuccess);
  NCCL_OK(ncclCommFinalize(comm));
  NCCL_OK(ncclCommDestroy(comm));

  if (g_failures != 0) {
    fprintf(stderr, "rank %d: %d checks failed\n", rank, g_failures);
    return 1;
  }
  printf("rank %d of %d: all checks passed\n", rank, nranks);
  return 0;
}
