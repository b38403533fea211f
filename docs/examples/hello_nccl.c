/* The same job through the NCCL-compatible C API (C99, no CUDA needed).
 * Build against an installed loom (see docs/QUICKSTART.md), then:
 *   loom run -np 4 -- ./hello_nccl
 * Under loom run, ncclGetUniqueId returns the same id on every rank, so no
 * broadcast of the id is needed. Alone, it runs as a single rank. */
#include <loom/nccl.h>

#include <stdio.h>
#include <stdlib.h>

#define NCCL_CHECK(call)                                                        \
  do {                                                                          \
    ncclResult_t r_ = (call);                                                   \
    if (r_ != ncclSuccess) {                                                    \
      fprintf(stderr, "%s failed: %s: %s\n", #call, ncclGetErrorString(r_),     \
              ncclGetLastError(NULL));                                          \
      exit(1);                                                                  \
    }                                                                           \
  } while (0)

static int env_int(const char* name, int fallback) {
  const char* v = getenv(name);
  return (v != NULL && *v != '\0') ? atoi(v) : fallback;
}

int main(void) {
  int rank = env_int("LOOM_RANK", 0), nranks = env_int("LOOM_WORLD_SIZE", 1);
  ncclUniqueId id;
  ncclComm_t comm;
  float x[4];
  int i;

  NCCL_CHECK(ncclGetUniqueId(&id));
  NCCL_CHECK(ncclCommInitRank(&comm, nranks, id, rank));
  for (i = 0; i < 4; ++i) x[i] = (float)(rank + 1);
  /* Host pointers; the stream is ignored and the call completes before it returns. */
  NCCL_CHECK(ncclAllReduce(x, x, 4, ncclFloat, ncclSum, comm, NULL));
  printf("rank %d of %d: x[0] = %g\n", rank, nranks, x[0]);
  NCCL_CHECK(ncclCommDestroy(comm));
  return 0;
}
