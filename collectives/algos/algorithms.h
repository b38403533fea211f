// Collective algorithms, written only against the Engine/Transfer interface.
//
// Each algorithm turns one collective into a list of Transfers (sends,
// receives, receives that reduce) whose gates chain the steps, posts them
// all at once and lets the engine pipeline them: a block starts moving on to
// the next rank while it is still arriving from the previous one.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "base/status.h"
#include "transports/engine.h"

namespace loom {

// Every way a host collective can run; collectives/select/selector.h picks
// one per call. kSlots: the small-collective slots of a one-host
// communicator (FitsSmallSlots below). kHierarchical: all-reduce across
// hosts of equal rank counts (hierarchical.h).
enum class Algo {
  kAuto, kRing, kTree, kRecursiveDoubling, kPairwise, kDissemination, kDirect,
  kHierarchical, kSlots,
};
const char* AlgoName(Algo algo);

struct CollArgs {
  OpKind kind = OpKind::kAllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  // elements: per rank for AllReduce/Broadcast/Reduce; per block otherwise
  DataType type = DataType::kFloat32;
  RedOp op = RedOp::kSum;
  // A pre-multiplied sum (op is kSum). The dispatcher rewrites it, and kAvg,
  // into a plain sum before an algorithm runs (RewriteForSum below).
  bool premul = false;
  PreMulScalar scalar;
  int root = 0;  // Broadcast/Reduce root; Send/Recv peer
  // The buffers are device memory, read and written only by device work
  // (comm/device_ipc.h); the host algorithms never see such arguments.
  bool device = false;
  // Send/Recv only: the buffer is device memory that the network reads or
  // writes in place (GPUDirect RDMA, transports/ib/gdr.h); its Transfer is
  // marked device, and the CPU never touches it.
  bool gdr = false;
};

// Grow-only scratch memory owned by a communicator, pre-faulted when it grows
// so that no collective pays first-touch page faults twice.
class Scratch {
 public:
  void* Get(size_t bytes);

 private:
  std::vector<char> buf_;
};

// Small collectives on one-host communicators (Engine::small_collectives),
// Algo::kSlots: every rank publishes its whole input in a slot of shared
// memory and reads everyone else's, then reduces or copies locally in rank
// order (all ranks get identical bits). Fits when each rank's input is at
// most kSmallSlotBytes: AllReduce, Reduce, Broadcast, AllGather (per rank),
// ReduceScatter (the whole input), Barrier. `bytes` counts as the cost
// model does (one block for ReduceScatter and AllGather).
bool FitsSmallSlots(OpKind kind, size_t bytes, int nranks);

struct HierGroups;  // hierarchical.h

// What an algorithm runs on: this rank's engine (engine.size() ranks), its
// scratch memory, and its host groups for Hierarchical (null when hosts
// differ in rank counts).
struct AlgoContext {
  Engine& engine;
  int rank;
  Scratch& scratch;
  const HierGroups* hier = nullptr;
};

// Runs `args` with `algo` (never kAuto). The caller validated the arguments
// and rewrote kAvg and PreMulSum into kSum (an InternalError otherwise):
// no algorithm divides or scales.
Status RunAlgorithm(const AlgoContext& ctx, Algo algo, const CollArgs& args, Deadline deadline);

// The one place kAvg and PreMulSum become a plain sum. Before: a PreMulSum's
// input scaled by its scalar (into the output when this rank's output is
// the whole result, else into `scratch`), and the op set to kSum. After
// (Finish): kAvg's division of this rank's result by the rank count.
class SumRewrite {
 public:
  // Reads the PreMulSum's scalar (host memory) now. `scratch` holds the
  // scaled input when it needs a place of its own: not the scratch the
  // algorithm is given.
  SumRewrite(const CollArgs& args, int rank, int nranks, Scratch& scratch);
  const CollArgs& args() const { return summed_; }
  void Finish() const;

 private:
  CollArgs summed_;
  bool divide_ = false;
  void* result_ = nullptr;
  size_t result_count_ = 0;
  int nranks_ = 1;
};

// Two building blocks of the single-copy algorithms (here and in
// comm/device_ipc.cc), which move only small records through the engine:
// ExchangeWithAll sends the `bytes` at `mine` to every other rank and
// receives rank p's into all + p * bytes (this rank's slot is not touched);
// SyncWith sends an empty message to and receives one from each rank in
// `peers` but this one ("my part is done"); SyncWithAll does so with every
// other rank. On a one-host communicator ExchangeWithAll (records of up to
// kSmallSlotBytes) and SyncWithAll go through the small-collective slots.
Status ExchangeWithAll(Engine& engine, int rank, const CollArgs& args, const void* mine,
                       void* all, size_t bytes, Deadline deadline);
Status SyncWith(Engine& engine, int rank, const CollArgs& args, const std::vector<int>& peers,
                Deadline deadline);
Status SyncWithAll(Engine& engine, int rank, const CollArgs& args, Deadline deadline);

// Direct reductions read each peer's part in pieces of this many bytes, a
// read each, and reduce every piece while it is in cache; the cost model
// pays a read's fixed cost per piece.
inline constexpr size_t kPeerReduceChunkBytes = 256 << 10;

// Ranks of one host whose buffers are all in shareable memory (AllocShared)
// can run the Direct algorithms over them: plain loads from the mapped
// peers, nothing through the FIFOs. That wins at 32 MiB and up whatever the
// inputs; below, inputs rewritten before each call (as a trainer's are) come
// line by line from the other core's cache and Direct loses to the ring.
// Whether every rank's
// buffers are shareable is known only after an exchange, which every rank
// must make, shareable buffers or not. SharedDirectWorthAsking says where
// it is paid: two ranks, kSharedDirectMinBytes and up. With 4 ranks on 2
// cores the all-to-all exchange cost 8 % and with 8 ranks 40 % at 1-4 MiB,
// so larger communicators never ask. The answer depends only on values every rank
// shares. RunDirectIfAllShared then exchanges the buffers' places; if every
// rank's are shareable it runs Direct over them and sets *ran, otherwise it
// sets *ran = false and the caller runs the algorithm it chose. Every rank
// reaches the same verdict. Needs single-copy reads (one host).
inline constexpr size_t kSharedDirectMinBytes = size_t{32} << 20;
bool SharedDirectWorthAsking(OpKind kind, size_t bytes, int nranks);
Status RunDirectIfAllShared(Engine& engine, int rank, const CollArgs& args, Scratch& scratch,
                            Deadline deadline, bool* ran);

}  // namespace loom
