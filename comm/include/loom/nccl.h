/* loom's NCCL-compatible C ABI: the NCCL 2.18 subset that trainers use, with
 * NCCL's names, enum values and struct layouts, implemented by libloom_nccl.so.
 *
 * Contract, in short:
 * - C99 and C++; needs no CUDA header. cudaStream_t is declared here unless
 *   cuda_runtime.h came first (see below).
 * - Host buffers: every operation completes before the call returns and the
 *   stream argument is not used. CUDA device buffers (a build with CUDA):
 *   the call returns once the operation is enqueued on the stream (NULL is
 *   the legacy default stream) and it completes in stream order. Inside
 *   ncclGroupStart/ncclGroupEnd, operations are collected and ncclGroupEnd
 *   issues them together; it returns when the host operations have completed
 *   and the device ones are enqueued. ncclCommAbort releases every stream
 *   waiting on the communicator.
 * - Every call returns an ncclResult_t; on failure ncclGetLastError() (per
 *   thread) says what went wrong and with which argument, and the same text is
 *   logged at NCCL_DEBUG=WARN. No C++ exception ever leaves these functions.
 * - Threading as in NCCL: a communicator may be used from any thread, but the
 *   caller orders the calls; groups are per thread.
 *
 * Differences from NVIDIA's library, all deliberate:
 * - ncclGetUniqueId: the process that calls it hosts the rendezvous (as
 *   loom::UniqueId::Create, which asks that it also create rank 0). Under
 *   `loom run` (LOOM_ROOT set) the first call in each process instead returns
 *   the id loom::Communicator::CreateFromEnv uses, identical on every rank and
 *   hosted by rank 0's process, so no broadcast is needed. That holds only if
 *   every process's first call is for the same communicator (normally the
 *   world); later calls return fresh ids, to be shipped as with NCCL.
 * - ncclCommInitRankConfig honours `blocking` but always creates the
 *   communicator before returning (ncclSuccess, never ncclInProgress);
 *   cgaClusterSize, minCTAs, maxCTAs, netName and splitShare are accepted and
 *   ignored (GPU kernel and transport choices are made by loom's own knobs).
 * - ncclGetVersion reports the NCCL API level this header describes (2.18),
 *   because trainers gate features on it; loom's own version is loom::Version().
 */
#ifndef LOOM_NCCL_H_
#define LOOM_NCCL_H_

#include <limits.h>
#include <stddef.h>

/* The NCCL API level implemented here. */
#define NCCL_MAJOR 2
#define NCCL_MINOR 18
#define NCCL_PATCH 0
#define NCCL_SUFFIX "loom"

/* Codes before 2.9 were X*1000+Y*100+Z; NCCL kept that rule for old versions. */
#define NCCL_VERSION(X, Y, Z) \
  (((X) <= 2 && (Y) <= 8) ? (X)*1000 + (Y)*100 + (Z) : (X)*10000 + (Y)*100 + (Z))
#define NCCL_VERSION_CODE NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)

/* cudaStream_t without CUDA: the same type CUDA declares, so a stream from
 * cuda_runtime.h passes through unchanged. If cuda_runtime.h (or
 * driver_types.h) was included first we use its typedef. If it is included
 * after this header, the typedef repeats, which C11 and C++ accept; in strict
 * C99 include cuda_runtime.h before this header. */
#if !defined(CUDART_VERSION) && !defined(__DRIVER_TYPES_H__)
typedef struct CUstream_st* cudaStream_t;
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque communicator handle; NULL is never a valid communicator. */
typedef struct ncclComm* ncclComm_t;

#define NCCL_UNIQUE_ID_BYTES 128
/* Rendezvous ticket: plain bytes, copy it to the other ranks by any means. */
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6, /* also a peer that timed out, or an aborted communicator */
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
/* Marks a ncclConfig_t made by NCCL_CONFIG_INITIALIZER. */
#define NCCL_API_MAGIC 0xcafebeef

/* Communicator options. Always start from NCCL_CONFIG_INITIALIZER: `size`,
 * `magic` and `version` tell the library which fields the caller knows. */
typedef struct ncclConfig_v21700 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking; /* 0, 1, or NCCL_CONFIG_UNDEF_INT (= 1) */
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                                     \
  {                                                                                 \
    sizeof(ncclConfig_t), NCCL_API_MAGIC, NCCL_VERSION_CODE, NCCL_CONFIG_UNDEF_INT, \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,        \
        NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT                                \
  }

/* The dummy enum fixes sizeof(ncclRedOp_t), as in NCCL, so ncclMaxRedOp keeps
 * the enum the size of an int. */
typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclNumTypes = 10
} ncclDataType_t;

/* --- library and communicators --- */

/* *version = NCCL_VERSION_CODE of the API level (see above). */
ncclResult_t ncclGetVersion(int* version);

/* A fresh id whose rendezvous this process hosts, or, on the first call under
 * `loom run`, the launcher's id (see the differences above). */
ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId);

/* Collective over nranks callers sharing commId. Blocks until every rank has
 * joined and all connections are up, or until the timeout (LOOM_TIMEOUT_MS).
 * Inside a group the creation is deferred to ncclGroupEnd, so one thread may
 * create several ranks; such a communicator takes operations only after
 * ncclGroupEnd. On failure *comm is NULL (outside a group). */
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
/* As ncclCommInitRank; config may be NULL (defaults). */
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t* config);
/* ndev communicators of one clique in this process, created concurrently;
 * comm must hold ndev handles. devlist is ignored (host buffers). */
ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist);
/* Collective over comm: callers with the same color form *newcomm, ranked by
 * (key, old rank). NCCL_SPLIT_NOCOLOR gives *newcomm = NULL. config NULL
 * inherits comm's options. Not allowed inside a group. */
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t* config);

/* Waits for every operation this rank issued on comm (bounded by the
 * timeout), then says goodbye to the other ranks. Not collective: it does not
 * wait for the other ranks, so one thread may finalize several ranks in turn. */
ncclResult_t ncclCommFinalize(ncclComm_t comm);
/* Frees comm: finalizes it unless that was done (see ncclCommFinalize), so it
 * returns once this rank's own operations completed. Not collective: ranks
 * created together in this process (ncclCommInitAll, a group, or their
 * splits) may be destroyed one after another by one thread. NULL is accepted
 * and does nothing, as in NCCL. */
ncclResult_t ncclCommDestroy(ncclComm_t comm);
/* Fails pending operations at once, then frees comm. NULL does nothing. */
ncclResult_t ncclCommAbort(ncclComm_t comm);
/* *asyncError = the first asynchronous error (dead peer, timeout, abort), or
 * ncclSuccess; ncclInProgress while a deferred creation awaits ncclGroupEnd. */
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);

/* Static text for a result code; never NULL. */
const char* ncclGetErrorString(ncclResult_t result);
/* The message of the last failure on this thread ("" if none); comm is
 * ignored. Valid until the next failing call on this thread. */
const char* ncclGetLastError(ncclComm_t comm);

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);
/* The CUDA device current when comm was created; ncclInvalidUsage in a
 * process without a GPU (host buffers only). */
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device);

/* --- memory --- */

/* Buffer registration: a promise that [buff, buff + size) stays allocated
 * until ncclCommDeregister. Not collective. With CUDA IPC between local
 * ranks, peers then keep their mapping of a registered device buffer across
 * operations instead of mapping it in each; host buffers and staged device
 * buffers are unchanged. A buffer may be used unregistered as well. buff and
 * size must be non-zero; the handle is valid until ncclCommDeregister or the
 * end of comm. */
ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle);
/* Waits for comm's operations issued so far; then every peer closes its
 * mapping of the buffer before this returns, so it may be freed afterwards.
 * ncclInvalidArgument for a handle that comm did not give, or gave and took
 * back; an error naming the peers that did not confirm (then do not free). */
ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle);
/* size bytes of device memory on the current CUDA device (cudaMalloc's
 * memory; *ptr = NULL for size 0); ncclUnhandledCudaError without a GPU.
 * Free it with ncclMemFree (NULL is accepted). */
ncclResult_t ncclMemAlloc(void** ptr, size_t size);
ncclResult_t ncclMemFree(void* ptr);

/* --- custom reduction operators --- */

/* Where ncclRedOpCreatePreMulSum finds the scalar. */
typedef enum {
  ncclScalarDevice = 0,       /* read through the pointer when each collective runs */
  ncclScalarHostImmediate = 1 /* read once, now, from host memory */
} ncclScalarResidence_t;

/* *op = a sum in which this rank first multiplies each element of its input
 * by *scalar (of datatype). The operator belongs to comm and works only with
 * collectives of that datatype on it; each rank makes its own, with its own
 * scalar. ncclScalarDevice: device memory, read in stream order, for device
 * buffers; with host buffers loom reads host memory there when the
 * collective runs. */
ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm);
/* Frees an operator of ncclRedOpCreatePreMulSum; collectives already issued
 * with it are unaffected. ncclInvalidArgument for a built-in or unknown op. */
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);

/* --- collectives: same arguments and in-place rules as NCCL --- */

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
/* sendbuff holds nranks*recvcount elements. */
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
/* recvbuff holds nranks*sendcount elements. */
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
/* sendbuff is read on root only. */
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
/* The legacy in-place form: ncclBroadcast(buff, buff, ...). */
ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream);
/* recvbuff is written on root only (may be NULL elsewhere). */
ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);

/* Point to point. A send and its matching receive on another rank must be
 * in flight together: put exchanges inside a group. */
ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);

/* Groups nest; the outermost ncclGroupEnd issues everything collected by this
 * thread and returns when it has completed. */
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LOOM_NCCL_H_ */
