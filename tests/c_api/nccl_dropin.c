/* An NCCL program as NVIDIA's users write it: compiled against NVIDIA's own
 * nccl.h and linked with -lnccl, it knows nothing of loom. dropin_test.sh
 * runs it with loom's libnccl.so.2 first on the library path.
 *
 * One process per rank; rank and size come from whichever launcher started
 * it (Open MPI, torchrun-style or loom run variables). Rank 0 makes the
 * unique id and hands it to the others through the file named by argv[1],
 * as programs without MPI do. Host buffers throughout, so the stream is 0.
 * Exit status 0 means every check passed on this rank. */
#define _POSIX_C_SOURCE 200809L
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int g_rank = 0;
static int g_failures = 0;

#define NCCL_OK(call)                                                                        \
  do {                                                                                       \
    ncclResult_t r_ = (call);                                                                \
    if (r_ != ncclSuccess) {                                                                 \
      fprintf(stderr, "rank %d: %s:%d: %s -> %s (%s)\n", g_rank, __FILE__, __LINE__, #call, \
              ncclGetErrorString(r_), ncclGetLastError(NULL));                               \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)

static void expect(int ok, const char* what, size_t i, double got, double want) {
  if (ok) return;
  if (g_failures++ < 10) {
    fprintf(stderr, "rank %d: %s: element %lu is %g, want %g\n", g_rank, what, (unsigned long)i,
            got, want);
  }
}

static int env_int(const char* const* names, int fallback) {
  for (; *names != NULL; ++names) {
    const char* v = getenv(*names);
    if (v != NULL && *v != '\0') return atoi(v);
  }
  return fallback;
}

static void* xmalloc(size_t bytes) {
  void* p = malloc(bytes > 0 ? bytes : 1);
  if (p == NULL) {
    fprintf(stderr, "rank %d: out of memory\n", g_rank);
    exit(1);
  }
  return p;
}

static void sleep_ms(long ms) {
  struct timespec ts;
  ts.tv_sec = ms / 1000;
  ts.tv_nsec = (ms % 1000) * 1000000L;
  nanosleep(&ts, NULL);
}

/* Rank 0 writes the id to `path` (whole, then renamed into place); the other
 * ranks wait up to 60 s for it. */
static void exchange_id(const char* path, ncclUniqueId* id) {
  char tmp[4096];
  FILE* f;
  int tries;
  if (g_rank == 0) {
    NCCL_OK(ncclGetUniqueId(id));
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    f = fopen(tmp, "wb");
    if (f == NULL || fwrite(id, sizeof *id, 1, f) != 1 || fclose(f) != 0 || rename(tmp, path) != 0) {
      fprintf(stderr, "rank 0: cannot write the id to %s\n", path);
      exit(1);
    }
    return;
  }
  for (tries = 0; tries < 6000; ++tries, sleep_ms(10)) {
    f = fopen(path, "rb");
    if (f == NULL) continue;
    if (fread(id, sizeof *id, 1, f) == 1) {
      fclose(f);
      return;
    }
    fclose(f);
  }
  fprintf(stderr, "rank %d: no id in %s after 60 s\n", g_rank, path);
  exit(1);
}

/* Element i of rank r's input: small integers, exact in float whatever the order of a sum. */
static float input(int r, size_t i) { return (float)((r + 1) * (int)(i % 13 + 1)); }

static void check_collectives(ncclComm_t comm, int rank, int nranks) {
  const size_t count = 4099;
  const size_t total = count * (size_t)nranks;
  float* send = (float*)xmalloc(total * sizeof(float));
  float* recv = (float*)xmalloc(total * sizeof(float));
  float sum_of_ranks = (float)(nranks * (nranks + 1) / 2);
  size_t i;
  int r;

  for (i = 0; i < total; ++i) send[i] = input(rank, i);
  NCCL_OK(ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comm, 0));
  for (i = 0; i < count; ++i) {
    float want = sum_of_ranks * (float)(i % 13 + 1);
    expect(recv[i] == want, "ncclAllReduce sum", i, recv[i], want);
  }

  NCCL_OK(ncclBroadcast(send, recv, count, ncclFloat32, nranks - 1, comm, 0));
  for (i = 0; i < count; ++i) {
    expect(recv[i] == input(nranks - 1, i), "ncclBroadcast", i, recv[i], input(nranks - 1, i));
  }

  NCCL_OK(ncclAllGather(send, recv, count, ncclFloat32, comm, 0));
  for (r = 0; r < nranks; ++r) {
    for (i = 0; i < count; ++i) {
      float got = recv[(size_t)r * count + i];
      expect(got == input(r, i), "ncclAllGather", (size_t)r * count + i, got, input(r, i));
    }
  }

  NCCL_OK(ncclReduceScatter(send, recv, count, ncclFloat32, ncclMax, comm, 0));
  for (i = 0; i < count; ++i) {
    float want = input(nranks - 1, (size_t)rank * count + i);
    expect(recv[i] == want, "ncclReduceScatter max", i, recv[i], want);
  }

  /* Block j of rank r's send buffer goes to rank j, as block r of its receive buffer. */
  NCCL_OK(ncclAlltoAll(send, recv, count, ncclFloat32, comm, 0));
  for (r = 0; r < nranks; ++r) {
    for (i = 0; i < count; ++i) {
      float want = input(r, (size_t)rank * count + i);
      float got = recv[(size_t)r * count + i];
      expect(got == want, "ncclAlltoAll", (size_t)r * count + i, got, want);
    }
  }

  for (i = 0; i < total; ++i) recv[i] = -1.0f;
  NCCL_OK(ncclGather(send, recv, count, ncclFloat32, 0, comm, 0));
  if (rank == 0) {
    for (r = 0; r < nranks; ++r) {
      for (i = 0; i < count; ++i) {
        float got = recv[(size_t)r * count + i];
        expect(got == input(r, i), "ncclGather", (size_t)r * count + i, got, input(r, i));
      }
    }
  }

  NCCL_OK(ncclScatter(send, recv, count, ncclFloat32, nranks - 1, comm, 0));
  for (i = 0; i < count; ++i) {
    float want = input(nranks - 1, (size_t)rank * count + i);
    expect(recv[i] == want, "ncclScatter", i, recv[i], want);
  }

  /* A ring in one group: send to the next rank, receive from the previous. */
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclSend(send, count, ncclFloat32, (rank + 1) % nranks, comm, 0));
  NCCL_OK(ncclRecv(recv, count, ncclFloat32, (rank + nranks - 1) % nranks, comm, 0));
  NCCL_OK(ncclGroupEnd());
  for (i = 0; i < count; ++i) {
    float want = input((rank + nranks - 1) % nranks, i);
    expect(recv[i] == want, "grouped ncclSend/ncclRecv", i, recv[i], want);
  }
  free(send);
  free(recv);
}

int main(int argc, char** argv) {
  static const char* const rank_vars[] = {"OMPI_COMM_WORLD_RANK", "RANK", "LOOM_RANK", NULL};
  static const char* const size_vars[] = {"OMPI_COMM_WORLD_SIZE", "WORLD_SIZE", "LOOM_WORLD_SIZE",
                                          NULL};
  const int nranks = env_int(size_vars, 1);
  ncclUniqueId id;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  ncclComm_t comm = NULL, half = NULL;
  int version = 0, count = 0, me = -1;
  float x;

  g_rank = env_int(rank_vars, 0);
  if (argc != 2) {
    fprintf(stderr, "usage: %s ID_FILE\n", argv[0]);
    return 2;
  }
  NCCL_OK(ncclGetVersion(&version));
  if (version != NCCL_VERSION_CODE) {
    fprintf(stderr, "rank %d: ncclGetVersion says %d, the header %d\n", g_rank, version,
            NCCL_VERSION_CODE);
    ++g_failures;
  }
  exchange_id(argv[1], &id);
  /* The config of this header's version: every 2.28 field present. */
  config.blocking = 1;
  config.commName = "dropin";
  NCCL_OK(ncclCommInitRankConfig(&comm, nranks, id, g_rank, &config));
  NCCL_OK(ncclCommCount(comm, &count));
  NCCL_OK(ncclCommUserRank(comm, &me));
  if (count != nranks || me != g_rank) {
    fprintf(stderr, "rank %d: the communicator says rank %d of %d\n", g_rank, me, count);
    ++g_failures;
  }
  check_collectives(comm, g_rank, nranks);

  /* Even and odd ranks apart: each half sums its ranks. */
  NCCL_OK(ncclCommSplit(comm, g_rank % 2, g_rank, &half, NULL));
  x = (float)g_rank;
  NCCL_OK(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, half, 0));
  {
    float want = 0.0f;
    int r;
    for (r = g_rank % 2; r < nranks; r += 2) want += (float)r;
    expect(x == want, "ncclAllReduce on a split", 0, x, want);
  }
  NCCL_OK(ncclCommFinalize(half));
  NCCL_OK(ncclCommDestroy(half));
  NCCL_OK(ncclCommFinalize(comm));
  NCCL_OK(ncclCommDestroy(comm));
  if (g_failures != 0) return 1;
  printf("rank %d of %d: passed (ncclGetVersion %d)\n", g_rank, nranks, version);
  return 0;
}
