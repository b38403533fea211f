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
                           ncclFloat32 == 7 && ncclBfloat16 == 9 && ncclFloat8e4m3 == 10 &&
                           ncclFloat8e5m2 == 11 && ncclNumTypes == 12);
ABI_CHECK(op_values, ncclSum == 0 && ncclProd == 1 && ncclMax == 2 && ncclMin == 3 &&
                         ncclAvg == 4 && ncclNumOps == 5);
ABI_CHECK(op_size, sizeof(ncclRedOp_t) == sizeof(int));
ABI_CHECK(version_code, NCCL_VERSION_CODE == 22809 && NCCL_VERSION(2, 8, 4) == 2804);
ABI_CHECK(config_blocking, offsetof(ncclConfig_t, blocking) == sizeof(size_t) + 2 * sizeof(int));
ABI_CHECK(config_net_name, offsetof(ncclConfig_t, netName) == sizeof(size_t) + 6 * sizeof(int));
ABI_CHECK(config_split_share, offsetof(ncclConfig_t, splitShare) ==
                                  offsetof(ncclConfig_t, netName) + sizeof(const char*));
/* The v22800 fields, in NVIDIA's order. */
ABI_CHECK(config_comm_name, offsetof(ncclConfig_t, commName) ==
                                offsetof(ncclConfig_t, netName) + 2 * sizeof(const char*));
ABI_CHECK(config_collnet, offsetof(ncclConfig_t, collnetEnable) ==
                              offsetof(ncclConfig_t, commName) + sizeof(const char*));
ABI_CHECK(config_last, offsetof(ncclConfig_t, nvlinkCentricSched) ==
                           offsetof(ncclConfig_t, collnetEnable) + 5 * sizeof(int));
ABI_CHECK(config_size,
          sizeof(ncclConfig_t) == offsetof(ncclConfig_t, nvlinkCentricSched) + sizeof(int));
ABI_CHECK(sim_info, offsetof(ncclSimInfo_t, estimatedTime) == sizeof(size_t) + 2 * sizeof(int) &&
                        NCCL_SIM_INFO_MAGIC == 0x74685283);
ABI_CHECK(flags, NCCL_WIN_DEFAULT == 0 && NCCL_WIN_COLL_SYMMETRIC == 1 &&
                     NCCL_CTA_POLICY_ZERO == 2 && NCCL_SHRINK_ABORT == 1 &&
                     NCCL_REVOKE_DEFAULT == 0);
ABI_CHECK(split_nocolor, NCCL_SPLIT_NOCOLOR == -1);

/* Never called: checks that every prototype accepts the arguments NCCL
 * programs pass, including a NULL stream. */
static ncclResult_t uses_every_prototype(void) {
  ncclComm_t comm = NCCL_COMM_NULL, sub = NULL, all[2];
  ncclUniqueId id, ids[2];
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  ncclWindow_t win = NULL;
  int exclude[1] = {1};
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
  ncclCommInitRankScalable(&comm, 2, 0, 2, ids, &config);
  ncclCommShrink(comm, exclude, 1, &sub, NULL, NCCL_SHRINK_ABORT);
  ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT);
  ncclCommWindowRegister(comm, buf, sizeof buf, &win, NCCL_WIN_COLL_SYMMETRIC);
  ncclCommWindowDeregister(comm, win);
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
  ncclAlltoAll(buf, buf, 1, ncclFloat8e4m3, comm, stream);
  ncclGather(buf, buf, 1, ncclFloat, 0, comm, stream);
  ncclScatter(buf, buf, 1, ncclFloat, 0, comm, NULL);
  ncclGroupEnd();
  ncclGroupStart();
  ncclGroupSimulateEnd(&sim);
  /* The profiling names take the same arguments. */
  pncclGetVersion(&v);
  pncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, comm, stream);
  pncclGroupStart();
  pncclGroupSimulateEnd(&sim);
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
