/* Compile-time check that loom/nccl.h is strict C99 and keeps NCCL's ABI:
 * enum values, struct sizes and offsets. Built twice: plain, and with
 * LOOM_TEST_CUDA_FIRST, which declares cudaStream_t the way cuda_runtime.h
 * does before including the header. Running it only prints "ok". */
#ifdef LOOM_TEST_CUDA_FIRST
typedef struct CUstream_st* cudaStream_t;
#define CUDART_VERSION 12000
#endif

/* nccl.h comes first, to prove it includes what it needs. */
/* clang-format off */
#include "loom/nccl.h"

#include <stddef.h>
#include <stdio.h>
/* clang-format on */

/* C99 has no static_assert: a negative array size fails the build. */
#define ABI_CHECK(name, cond) typedef char abi_check_##name[(cond) ? 1 : -1]

ABI_CHECK(unique_id_bytes, sizeof(ncclUniqueId) == 128);
ABI_CHECK(result_in_progress, ncclInProgress == 7 && ncclNumResults == 8);
ABI_CHECK(result_remote, ncclRemoteError == 6 && ncclInvalidArgument == 4);
ABI_CHECK(type_aliases, ncclChar == ncclInt8 && ncclInt == ncclInt32 && ncclHalf == ncclFloat16 &&
                            ncclFloat == ncclFloat32 && ncclDouble == ncclFloat64);
ABI_CHECK(type_values, ncclUint8 == 1 && ncclUint32 == 3 && ncclInt64 == 4 && ncclUint64 == 5 &&
                           ncclFloat32 == 7 && ncclBfloat16 == 9 && ncclNumTypes == 10);
ABI_CHECK(op_values, ncclSum == 0 && ncclProd == 1 && ncclMax == 2 && ncclMin == 3 &&
                         ncclAvg == 4 && ncclNumOps == 5);
ABI_CHECK(op_size, sizeof(ncclRedOp_t) == sizeof(int));
ABI_CHECK(version_code, NCCL_VERSION_CODE == 21800 && NCCL_VERSION(2, 8, 4) == 2804);
ABI_CHECK(config_blocking, offsetof(ncclConfig_t, blocking) == sizeof(size_t) + 2 * sizeof(int));
ABI_CHECK(config_net_name, offsetof(ncclConfig_t, netName) == sizeof(size_t) + 6 * sizeof(int));
ABI_CHECK(config_last, offsetof(ncclConfig_t, splitShare) ==
                           offsetof(ncclConfig_t, netName) + sizeof(const char*));
ABI_CHECK(split_nocolor, NCCL_SPLIT_NOCOLOR == -1);

/* Never called: checks that every prototype accepts the arguments NCCL
 * programs pass, including a NULL stream. */
static ncclResult_t uses_every_prototype(void) {
  ncclComm_t comm = NULL, sub = NULL, all[2];
  ncclUniqueId id;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  ncclResult_t async_error;
  cudaStream_t stream = NULL;
  int v = 0;
  float buf[4] = {0};
  void* handle = NULL;
  void* mem = NULL;
  ncclRedOp_t premul = ncclSum;
  ncclScalarResidence_t residence = ncclScalarHostImmediate;
  ncclGetVersion(&v);
  ncclGetUniqueId(&id);
  ncclCommInitRank(&comm, 1, id, 0);
  ncclCommInitRankConfig(&comm, 1, id, 0, &config);
  ncclCommInitAll(all, 2, NULL);
  ncclCommSplit(comm, 0, 0, &sub, NULL);
  ncclCommCount(comm, &v);
  ncclCommUserRank(comm, &v);
  ncclCommCuDevice(comm, &v);
  ncclCommGetAsyncError(comm, &async_error);
  ncclCommRegister(comm, buf, sizeof buf, &handle);
  ncclCommDeregister(comm, handle);
  ncclMemAlloc(&mem, 64);
  ncclMemFree(mem);
  ncclRedOpCreatePreMulSum(&premul, buf, ncclFloat, residence, comm);
  ncclRedOpCreatePreMulSum(&premul, buf, ncclFloat, ncclScalarDevice, comm);
  ncclGroupStart();
  ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, comm, stream);
  ncclReduceScatter(buf, buf, 1, ncclFloat, ncclMax, comm, stream);
  ncclAllGather(buf, buf, 1, ncclFloat, comm, NULL);
  ncclBroadcast(buf, buf, 4, ncclFloat, 0, comm, stream);
  ncclBcast(buf, 4, ncclFloat, 0, comm, stream);
  ncclReduce(buf, buf, 4, ncclFloat, ncclMin, 0, comm, stream);
  ncclSend(buf, 4, ncclFloat, 0, comm, stream);
  ncclRecv(buf, 4, ncclFloat, 0, comm, stream);
  ncclGroupEnd();
  ncclAllReduce(buf, buf, 4, ncclFloat, premul, comm, stream);
  ncclRedOpDestroy(premul, comm);
  ncclCommFinalize(comm);
  ncclCommAbort(sub);
  printf("%s %s\n", ncclGetErrorString(async_error), ncclGetLastError(comm));
  return ncclCommDestroy(comm);
}

int main(void) {
  /* Referenced so the compiler checks it without the program calling it. */
  ncclResult_t (*unused)(void) = uses_every_prototype;
  (void)unused;
  printf("ok\n");
  return 0;
}
