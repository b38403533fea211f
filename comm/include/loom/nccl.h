/* loom's NCCL-compatible C ABI: NCCL 2.28's host API, with NCCL's names,
 * enum values and struct layouts, implemented by libloom_nccl.so. Every
 * function also exists as pnccl* (NCCL's profiling names, the same code).
 * The device API (ncclDevComm*, ncclTeam*, LSA/GIN barriers) is not offered.
 *
 * Contract, in short:
 * - C99 and C++; needs no CUDA header. cudaStream_t is declared here unless
 *   cuda_runtime.h came first (see below).
 * - Host buffers: every operation completes before the call returns and the
 *   stream argument is not used. CUDA device buffers (a build with CUDA):
 *   the call returns once the operation is enqueued on the stream (NULL is
 *   the legacy default stream) and it completes in stream order. Inside
 *   ncclGroupStart/ncclGroupEnd, operations are checked and collected, and
 *   ncclGroupEnd issues them together; it returns when the host operations
 *   have completed and the device ones are enqueued. ncclCommAbort releases
 *   every stream waiting on the communicator.
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
 * - ncclConfig_t: loom reads the fields the caller's header had (its
 *   `version`), refuses the values NCCL refuses, and honours `blocking` (but
 *   always creates the communicator before returning: ncclSuccess, never
 *   ncclInProgress) and `commName` (the communicator's name in loom's logs).
 *   cgaClusterSize, minCTAs, maxCTAs, netName, splitShare, trafficClass,
 *   collnetEnable, CTAPolicy, shrinkShare, nvlsCTAs, nChannelsPerNetPeer and
 *   nvlinkCentricSched are accepted and ignored (GPU kernel and transport
 *   choices are made by loom's own knobs).
 * - ncclFloat8e4m3/ncclFloat8e5m2 move as bytes in the collectives that do
 *   not reduce; a reduction of them is ncclInvalidArgument.
 * - ncclCommInitRankScalable uses the first of its ids (all must be valid).
 * - ncclCommShrink builds the new communicator through the parent's
 *   point-to-point path among the kept ranks, so the parent must still work
 *   between them (after a failed peer it has a sticky error: make a fresh
 *   communicator instead).
 * - ncclGroupSimulateEnd estimates with loom's cost model as if all ranks
 *   shared one host (see there).
 * - ncclCommWindowRegister is ncclCommRegister (no symmetric kernels).
 * - ncclGetVersion reports the NCCL API level this header describes (2.28.9),
 *   because trainers gate features on it; loom's own version is loom::Version().
 */
#ifndef LOOM_NCCL_H_
#define LOOM_NCCL_H_

#include <limits.h>
#include <stddef.h>

/* The NCCL API level implemented here. */
#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
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

/* NCCL marks ncclResetDebugInit deprecated; so does this header. */
#if defined(__GNUC__) || defined(__clang__)
#define LOOM_NCCL_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#define LOOM_NCCL_DEPRECATED(msg)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque communicator handle; NULL (NCCL_COMM_NULL) is never a valid one. */
typedef struct ncclComm* ncclComm_t;
/* Opaque handle of ncclCommWindowRegister. */
typedef struct ncclWindow_vidmem* ncclWindow_t;
#define NCCL_COMM_NULL NULL

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
#define NCCL_UNDEF_FLOAT -1.0f
/* Marks a ncclConfig_t made by NCCL_CONFIG_INITIALIZER. */
#define NCCL_API_MAGIC 0xcafebeef

/* ncclCommWindowRegister flags. */
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

/* ncclConfig_t.CTAPolicy values (accepted and ignored). */
#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02

/* ncclCommShrink flags. */
#define NCCL_SHRINK_DEFAULT 0x00 /* shrink the parent communicator */
#define NCCL_SHRINK_ABORT 0x01   /* first end the parent's pending operations */

/* ncclCommRevoke flags. */
#define NCCL_REVOKE_DEFAULT 0x00 /* the only value: reserved for later use */

/* Communicator options. Always start from NCCL_CONFIG_INITIALIZER: `size`,
 * `magic` and `version` tell the library which fields the caller knows, so
 * a program built with an older header works unchanged. Which fields loom
 * honours: see the top of this file. */
typedef struct ncclConfig_v22800 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking; /* 0, 1, or NCCL_CONFIG_UNDEF_INT (= 1) */
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;     /* since 2.25 */
  const char* commName; /* since 2.25: the name in loom's logs */
  int collnetEnable;    /* since 2.27 */
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer; /* since 2.28 */
  int nvlinkCentricSched;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                                                    \
  {                                                                                                \
    sizeof(ncclConfig_t), NCCL_API_MAGIC, NCCL_VERSION_CODE, NCCL_CONFIG_UNDEF_INT,                \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,                       \
        NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,                       \
        NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,                       \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT \
  }

/* What ncclGroupSimulateEnd fills in. Start from NCCL_SIM_INFO_INITIALIZER. */
typedef struct ncclSimInfo_v22200 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  float estimatedTime; /* microseconds; NCCL_UNDEF_FLOAT until estimated */
} ncclSimInfo_t;

#define NCCL_SIM_INFO_MAGIC 0x74685283
#define NCCL_SIM_INFO_INITIALIZER \
  { sizeof(ncclSimInfo_t), NCCL_SIM_INFO_MAGIC, NCCL_VERSION_CODE, NCCL_UNDEF_FLOAT }

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
  ncclFloat8e4m3 = 10, /* moved as bytes; no reductions (see the top) */
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

/* --- library and communicators --- */

/* *version = NCCL_VERSION_CODE of the API level (see above). */
ncclResult_t ncclGetVersion(int* version);
ncclResult_t pncclGetVersion(int* version);

/* A fresh id whose rendezvous this process hosts, or, on the first call under
 * `loom run`, the launcher's id (see the differences above). */
ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId);
ncclResult_t pncclGetUniqueId(ncclUniqueId* uniqueId);

/* Collective over nranks callers sharing commId. Blocks until every rank has
 * joined and all connections are up, or until the timeout (LOOM_TIMEOUT_MS).
 * Inside a group the creation is deferred to ncclGroupEnd, so one thread may
 * create several ranks; such a communicator takes operations only after
 * ncclGroupEnd. On failure *comm is NULL (outside a group). */
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
/* As ncclCommInitRank; config may be NULL (defaults). */
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t* config);
ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                     ncclConfig_t* config);
/* As ncclCommInitRankConfig with nId ids (1..nranks), the same ids in the
 * same order on every rank. NCCL spreads the rendezvous over them; loom
 * rendezvouses at the first, which must therefore come from ncclGetUniqueId
 * in rank 0's process (as NCCL's scheme has it), and checks that every id is
 * one that ncclGetUniqueId made. */
ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                      ncclUniqueId* commIds, ncclConfig_t* config);
ncclResult_t pncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                       ncclUniqueId* commIds, ncclConfig_t* config);
/* ndev communicators of one clique in this process, created concurrently;
 * comm must hold ndev handles. devlist is ignored (host buffers). */
ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist);
ncclResult_t pncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist);
/* Collective over comm: callers with the same color form *newcomm, ranked by
 * (key, old rank). NCCL_SPLIT_NOCOLOR gives *newcomm = NULL. config NULL
 * inherits comm's options. Not allowed inside a group. */
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t* config);
ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                            ncclConfig_t* config);
/* Collective over the ranks of comm that are not in excludeRanksList (1 or
 * more distinct ranks of comm; the list is not modified): *newcomm holds
 * them in their old order. The excluded ranks must not call it (a caller in
 * the list gets ncclInvalidArgument). config NULL inherits comm's options.
 * shrinkFlags: NCCL_SHRINK_DEFAULT, or NCCL_SHRINK_ABORT, which in NCCL
 * first ends comm's pending operations; with host buffers none is pending
 * once a call returned, and device operations already on streams are left
 * to finish. comm stays usable. Not allowed inside a group. */
ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                            ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags);
ncclResult_t pncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                             ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags);

/* Waits for every operation this rank issued on comm (bounded by the
 * timeout), then says goodbye to the other ranks. Not collective: it does not
 * wait for the other ranks, so one thread may finalize several ranks in turn.
 * After ncclCommRevoke: ncclInvalidArgument, as NCCL. */
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t pncclCommFinalize(ncclComm_t comm);
/* Frees comm: finalizes it unless that was done (see ncclCommFinalize), so it
 * returns once this rank's own operations completed. Not collective: ranks
 * created together in this process (ncclCommInitAll, a group, or their
 * splits) may be destroyed one after another by one thread. NULL is accepted
 * and does nothing, as in NCCL. */
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t pncclCommDestroy(ncclComm_t comm);
/* Fails pending operations at once, then frees comm. NULL does nothing. */
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t pncclCommAbort(ncclComm_t comm);
/* Marks comm revoked: every later operation on it (collective, send/recv)
 * is ncclInvalidUsage, and ncclCommFinalize is ncclInvalidArgument, while
 * ncclCommSplit, ncclCommShrink, ncclCommDestroy and ncclCommAbort still
 * work. Host operations have completed when a call returns, so nothing is
 * in flight to stop; device operations already on streams finish or fail as
 * they would. Not collective. revokeFlags must be NCCL_REVOKE_DEFAULT. NULL
 * does nothing (as NCCL); revoking twice, or after ncclCommFinalize, is
 * ncclInvalidArgument. */
ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags);
ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags);
/* *asyncError = the first asynchronous error (dead peer, timeout, abort), or
 * ncclSuccess; ncclInProgress while a deferred creation awaits ncclGroupEnd. */
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);
ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);

/* Static text for a result code; never NULL. */
const char* ncclGetErrorString(ncclResult_t result);
const char* pncclGetErrorString(ncclResult_t result);
/* The message of the last failure on this thread ("" if none); comm is
 * ignored. Valid until the next failing call on this thread. */
const char* ncclGetLastError(ncclComm_t comm);
const char* pncclGetLastError(ncclComm_t comm);
/* Re-reads NCCL_DEBUG, NCCL_DEBUG_SUBSYS and NCCL_DEBUG_FILE (and their
 * LOOM_ twins) now; NCCL re-reads them at its next call, the same unless the
 * environment changes in between. */
LOOM_NCCL_DEPRECATED("ncclResetDebugInit is not supported as part of the NCCL API")
void ncclResetDebugInit(void);
LOOM_NCCL_DEPRECATED("pncclResetDebugInit is not supported as part of the NCCL API")
void pncclResetDebugInit(void);

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t pncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);
ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank);
/* The CUDA device current when comm was created; ncclInvalidUsage in a
 * process without a GPU (host buffers only). */
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device);
ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device);

/* --- memory --- */

/* Buffer registration: a promise that [buff, buff + size) stays allocated
 * until ncclCommDeregister. Not collective. With CUDA IPC between local
 * ranks, peers then keep their mapping of a registered device buffer across
 * operations instead of mapping it in each; host buffers and staged device
 * buffers are unchanged. A buffer may be used unregistered as well. buff and
 * size must be non-zero; the handle is valid until ncclCommDeregister or the
 * end of comm. */
ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle);
ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle);
/* Waits for comm's operations issued so far; then every peer closes its
 * mapping of the buffer before this returns, so it may be freed afterwards.
 * ncclInvalidArgument for a handle that comm did not give, or gave and took
 * back; an error naming the peers that did not confirm (then do not free). */
ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle);
ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* handle);
/* A window: in NCCL a collective registration for symmetric kernels; in loom
 * exactly ncclCommRegister (not collective, no alignment asked), so *win is
 * a non-NULL handle that ncclCommWindowDeregister takes back (and
 * ncclCommDeregister does not). winFlags: NCCL_WIN_DEFAULT or
 * NCCL_WIN_COLL_SYMMETRIC (accepted; loom has no symmetric kernels). */
ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                    int winFlags);
ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                     int winFlags);
ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);
ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);
/* size bytes of device memory on the current CUDA device (cudaMalloc's
 * memory; *ptr = NULL for size 0); ncclUnhandledCudaError without a GPU.
 * Free it with ncclMemFree (NULL is accepted). */
ncclResult_t ncclMemAlloc(void** ptr, size_t size);
ncclResult_t pncclMemAlloc(void** ptr, size_t size);
ncclResult_t ncclMemFree(void* ptr);
ncclResult_t pncclMemFree(void* ptr);

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
ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                       ncclScalarResidence_t residence, ncclComm_t comm);
/* Frees an operator of ncclRedOpCreatePreMulSum; collectives already issued
 * with it are unaffected. ncclInvalidArgument for a built-in or unknown op. */
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);
ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);

/* --- collectives: same arguments and in-place rules as NCCL --- */

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                            ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                            cudaStream_t stream);
/* sendbuff holds nranks*recvcount elements. */
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                cudaStream_t stream);
/* recvbuff holds nranks*sendcount elements. */
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                            ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
/* sendbuff is read on root only. */
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                            ncclDataType_t datatype, int root, ncclComm_t comm,
                            cudaStream_t stream);
/* The legacy in-place form: ncclBroadcast(buff, buff, ...). */
ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream);
ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root,
                        ncclComm_t comm, cudaStream_t stream);
/* recvbuff is written on root only (may be NULL elsewhere). */
ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                         ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                         cudaStream_t stream);
/* count elements from sendbuff + j*count to rank j, and from rank i into
 * recvbuff + i*count; both buffers hold nranks*count elements. loom also
 * takes sendbuff == recvbuff (in place), which NCCL does not promise. */
ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
/* count elements from every rank's sendbuff land at root's recvbuff +
 * i*count (nranks*count elements, significant on root only; may be NULL
 * elsewhere). In place when root's sendbuff == recvbuff + root*count. */
ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclGather(const void* sendbuff, void* recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
/* root's sendbuff + i*count (nranks*count elements, significant on root
 * only; may be NULL elsewhere) goes to rank i's recvbuff (count elements).
 * In place when root's recvbuff == sendbuff + root*count. */
ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);

/* Point to point. A send and its matching receive on another rank must be
 * in flight together: put exchanges inside a group. */
ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream);

/* Groups nest; the outermost ncclGroupEnd issues everything collected by this
 * thread and returns when it has completed. */
ncclResult_t ncclGroupStart(void);
ncclResult_t pncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t pncclGroupEnd(void);
/* Ends the group like ncclGroupEnd, but the collected operations are not
 * run: they are dropped (deferred communicator creations still complete, as
 * in NCCL). simInfo->estimatedTime = loom's cost-model estimate in
 * microseconds of the group's operations run one after another, for ranks
 * that all share one host (the communicator's own model is not reachable
 * from here); NCCL reports its estimate of the last collective it planned.
 * Unchanged when the group has no operation. simInfo must come from
 * NCCL_SIM_INFO_INITIALIZER (ncclInvalidArgument otherwise); NULL makes it
 * ncclGroupEnd, as in NCCL. An inner (nested) call only closes its level. */
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo);
ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t* simInfo);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LOOM_NCCL_H_ */
