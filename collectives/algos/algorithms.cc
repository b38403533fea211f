// Ring, binomial tree, recursive doubling, pairwise and dissemination
// schedules turned into gated Transfer lists. Pure rank math lives in
// collectives/patterns; this file only decides which bytes go where.
#include "collectives/algos/algorithms.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <numeric>
#include <type_traits>

#include "collectives/algos/hierarchical.h"
#include "collectives/patterns/recursive_doubling.h"
#include "collectives/patterns/ring.h"
#include "collectives/patterns/tree.h"
#include "collectives/reduce/reduce.h"
#include "transports/copy.h"
#include "transports/peer_memory.h"
#include "transports/streaming.h"

namespace loom {

const char* AlgoName(Algo algo) {
  switch (algo) {
    case Algo::kAuto: return "Auto";
    case Algo::kRing: return "Ring";
    case Algo::kTree: return "Tree";
    case Algo::kRecursiveDoubling: return "RecursiveDoubling";
    case Algo::kPairwise: return "Pairwise";
    case Algo::kDissemination: return "Dissemination";
    case Algo::kDirect: return "Direct";
    case Algo::kHierarchical: return "Hierarchical";
    case Algo::kSlots: return "Slots";
  }
  return "?";
}

void* Scratch::Get(size_t bytes) {
  if (buf_.size() < bytes) {
    buf_.clear();
    buf_.shrink_to_fit();
    buf_.resize(bytes);  // value-initialisation touches every page once, here
  }
  return buf_.data();
}

namespace {

using patterns::BlockRange;
using patterns::Range;

const char* At(const void* base, size_t elem_offset, size_t esize) {
  return static_cast<const char*>(base) + elem_offset * esize;
}
char* At(void* base, size_t elem_offset, size_t esize) {
  return static_cast<char*>(base) + elem_offset * esize;
}

// Builds a transfer list; each step may gate on an earlier one. Up to
// kInline transfers live in the Plan itself (small collectives allocate
// nothing); larger schedules reserve a vector once. Either way addresses
// stay stable, as gates need.
class Plan {
 public:
  Plan(const CollArgs& args, size_t max_transfers) : args_(args), capacity_(max_transfers) {
    if (max_transfers <= kInline) {
      data_ = reinterpret_cast<Transfer*>(inline_);
    } else {
      heap_.reserve(max_transfers);
      data_ = heap_.data();
    }
  }
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  Transfer* Send(int peer, const void* src, size_t bytes, const Transfer* gate = nullptr) {
    Transfer& t = Add(Transfer::Dir::kSend, peer, bytes, gate);
    t.src = src;
    return &t;
  }
  Transfer* Recv(int peer, void* dst, size_t bytes, const Transfer* gate = nullptr) {
    Transfer& t = Add(Transfer::Dir::kRecv, peer, bytes, gate);
    t.dst = dst;
    return &t;
  }
  // dst = with (op) incoming
  Transfer* RecvReduce(int peer, void* dst, const void* with, size_t bytes,
                       const Transfer* gate = nullptr) {
    Transfer* t = Recv(peer, dst, bytes, gate);
    t->reduce_with = with;
    t->reduce = &ReduceInto;
    t->op = args_.op;
    return t;
  }
  Status Run(Engine& engine, Deadline deadline) {
    return engine.Run({data_, size_}, deadline);
  }
  size_t size() const { return size_; }
  Transfer* first() { return data_; }
  // Marks a receive whose destination nothing in this operation reads again.
  static Transfer* Final(Transfer* t) {
    t->nontemporal = true;
    return t;
  }

 private:
  static constexpr size_t kInline = 8;
  static_assert(std::is_trivially_destructible_v<Transfer>);

  Transfer& Add(Transfer::Dir dir, int peer, size_t bytes, const Transfer* gate) {
    if (size_ == capacity_) {  // a schedule larger than its own bound: a bug in this file
      std::fprintf(stderr, "loom: internal error: a %s plan outgrew its %zu transfers\n",
                   OpKindName(args_.kind), capacity_);
      std::abort();
    }
    Transfer* t = heap_.capacity() > 0 ? &heap_.emplace_back() : new (data_ + size_) Transfer();
    ++size_;
    t->dir = dir;
    t->peer = peer;
    t->kind = args_.kind;
    t->bytes = bytes;
    t->type = args_.type;
    t->gate = gate;
    return *t;
  }
  const CollArgs& args_;
  size_t capacity_;
  size_t size_ = 0;
  Transfer* data_ = nullptr;
  alignas(Transfer) unsigned char inline_[kInline * sizeof(Transfer)];
  std::vector<Transfer> heap_;
};

void CopyIfDistinct(void* dst, const void* src, size_t bytes) {
  if (dst == src || bytes == 0) return;
  const auto* d = static_cast<const char*>(dst);
  const auto* s = static_cast<const char*>(src);
  if (d + bytes <= s || s + bytes <= d) {
    CopyBytes(dst, src, bytes);
  } else {
    std::memmove(dst, src, bytes);
  }
}

// Ring all-reduce = ring reduce-scatter into recv, then ring all-gather of
// the reduced blocks. Every block is reduced once, in ring order, and then
// copied: all ranks end bit-identical. Needs no scratch: partial sums land in
// recv's blocks, which the all-gather overwrites with final values only after
// they have left this rank (element-wise causality through the ring).
//
// Over shared memory a buffer larger than kShmRingPiece runs as consecutive
// pieces of that size, each a whole ring all-reduce, all in one plan: a block
// is then forwarded while it is still in this core's cache from its
// reduction, instead of being read back from memory after the whole
// reduce-scatter. Over a network the link, not memory, is
// the limit, and fewer, larger messages are cheaper.
constexpr size_t kShmRingPiece = size_t{2} << 20;

Status RingAllReduce(Engine& e, int r, const CollArgs& a, Deadline deadline) {
  const int n = e.size();
  const size_t es = SizeOf(a.type);
  const size_t align = 64 / es;
  // Elements per piece: a multiple of n cache lines, so that every block of
  // every piece but the last starts on a cache line.
  const size_t unit = align * static_cast<size_t>(n);
  size_t per_piece = a.count;
  if (e.all_shm()) per_piece = std::min(a.count, std::max(unit, kShmRingPiece / es / unit * unit));
  const size_t pieces = per_piece == 0 ? 1 : (a.count + per_piece - 1) / per_piece;
  Plan plan(a, 4 * static_cast<size_t>(n) * pieces);
  const int next = patterns::RingNext(r, n), prev = patterns::RingPrev(r, n);
  for (size_t p = 0; p < pieces; ++p) {
    const size_t base = p * per_piece;
    const size_t count = std::min(per_piece, a.count - base);
    auto block = [&](int b) {
      Range br = BlockRange(count, n, ((b % n) + n) % n, align);
      br.offset += base;
      return br;
    };
    const Transfer* prev_recv = nullptr;
    for (int s = 0; s < n - 1; ++s) {
      Range sb = block(patterns::RingReduceScatterSendBlock(r, n, s));
      Range rb = block(patterns::RingReduceScatterRecvBlock(r, n, s));
      const void* src = s == 0 ? At(a.send, sb.offset, es) : At(a.recv, sb.offset, es);
      plan.Send(next, src, sb.count * es, prev_recv);
      prev_recv = plan.RecvReduce(prev, At(a.recv, rb.offset, es), At(a.send, rb.offset, es),
                                  rb.count * es);
    }
    for (int s = 0; s < n - 1; ++s) {
      Range sb = block(patterns::RingAllGatherSendBlock(r, n, s));
      Range rb = block(patterns::RingAllGatherRecvBlock(r, n, s));
      plan.Send(next, At(a.recv, sb.offset, es), sb.count * es, prev_recv);
      Transfer* recv = plan.Recv(prev, At(a.recv, rb.offset, es), rb.count * es);
      prev_recv = s == n - 2 ? Plan::Final(recv) : recv;  // the last block is not forwarded
    }
  }
  return plan.Run(e, deadline);
}

// Recursive doubling: log2(n) full-buffer exchanges (non-powers of two fold
// the extra ranks in first and send them the result last). The running
// result lives in recv: the first reduction moves it there from send, after
// that each round reduces recv in place while sending it, its receive gated
// (also) on its own send so only bytes already handed over are overwritten.
// No scratch and no final copy, in place or not.
Status RecursiveDoublingAllReduce(Engine& e, int r, const CollArgs& a, Deadline deadline) {
  const int n = e.size();
  const size_t bytes = a.count * SizeOf(a.type);
  const auto p = patterns::MakeRecursiveDoublingPlan(r, n);
  if (p.role == patterns::RecursiveDoublingPlan::kFoldedOut) {
    Plan plan(a, 2);
    plan.Send(p.fold_peer, a.send, bytes);
    plan.Recv(p.fold_peer, a.recv, bytes);
    return plan.Run(e, deadline);
  }
  Plan plan(a, 2 * p.partners.size() + 2);
  const void* cur = a.send;  // holds this rank's running result
  const Transfer* gate = nullptr;
  if (p.fold_peer >= 0) {
    gate = plan.RecvReduce(p.fold_peer, a.recv, cur, bytes);
    cur = a.recv;
  }
  Transfer* last_recv = nullptr;
  for (int partner : p.partners) {
    const Transfer* send = plan.Send(partner, cur, bytes, gate);
    Transfer* recv = plan.RecvReduce(partner, a.recv, cur, bytes, gate);
    if (cur == a.recv) recv->also = send;  // in place: overwrite only what has left
    gate = recv;
    last_recv = recv;
    cur = a.recv;
  }
  // Final unless a folded-out rank still needs the result sent from recv.
  if (last_recv != nullptr && p.fold_peer < 0) Plan::Final(last_recv);
  if (p.fold_peer >= 0) plan.Send(p.fold_peer, a.recv, bytes, gate);
  return plan.Run(e, deadline);
}

// Binomial-tree reduce into `out` at root (scratch elsewhere); children are
// reduced in a fixed order, so the result does not depend on timing.
Status TreeReduce(Engine& e, int r, const CollArgs& a, void* out, Scratch& scratch,
                  Deadline deadline) {
  const int n = e.size();
  const size_t bytes = a.count * SizeOf(a.type);
  const auto children = patterns::BinomialChildren(r, n, a.root);
  const int parent = patterns::BinomialParent(r, n, a.root);
  Plan plan(a, children.size() + 1);
  const void* cur = a.send;
  const Transfer* gate = nullptr;
  void* work = r == a.root ? out : scratch.Get(bytes);
  for (int c : children) {
    gate = plan.RecvReduce(c, work, cur, bytes, gate);
    cur = work;
  }
  if (parent >= 0) plan.Send(parent, cur, bytes, gate);
  LOOM_TRY(plan.Run(e, deadline));
  if (r == a.root) CopyIfDistinct(out, cur, bytes);
  return Status::Ok();
}

// Broadcast down a binomial tree (small) or a chain (large, pipelined).
Status TreeOrChainBroadcast(Engine& e, int r, const CollArgs& a, bool chain, Deadline deadline) {
  const int n = e.size();
  const size_t bytes = a.count * SizeOf(a.type);
  Plan plan(a, n + 1);
  const Transfer* gate = nullptr;
  const void* src = a.send;
  if (r != a.root) {
    int from = chain ? patterns::ChainPrev(r, n, a.root) : patterns::BinomialParent(r, n, a.root);
    gate = plan.Recv(from, a.recv, bytes);
    src = a.recv;
  }
  if (chain) {
    int to = patterns::ChainNext(r, n, a.root);
    if (to >= 0) plan.Send(to, src, bytes, gate);
  } else {
    // Farthest subtree first: it has the longest way to go.
    auto kids = patterns::BinomialChildren(r, n, a.root);
    for (auto it = kids.rbegin(); it != kids.rend(); ++it) plan.Send(*it, src, bytes, gate);
  }
  if (r == a.root && a.recv != a.send && bytes > 0) {
    // Out of place, the root's copy rides on its first send (see
    // RingAllGather), or is made here when it sends nothing.
    if (plan.size() > 0) {
      plan.first()->copy_to = a.recv;
      plan.first()->copy_nontemporal = bytes >= StreamingMinBytes();
    } else {
      CopyIfDistinct(a.recv, a.send, bytes);
    }
  }
  return plan.Run(e, deadline);
}

// Ring reduce-scatter: partial blocks travel through scratch (each block its
// own slot, so no slot is rewritten while still being sent); the last step
// lands in recv.
Status RingReduceScatter(Engine& e, int r, const CollArgs& a, Scratch& scratch,
                         Deadline deadline) {
  const int n = e.size();
  const size_t bb = a.count * SizeOf(a.type);  // bytes per block
  const char* send = static_cast<const char*>(a.send);
  char* work = static_cast<char*>(scratch.Get(bb * n));
  Plan plan(a, 2 * n);
  const int next = patterns::RingNext(r, n), prev = patterns::RingPrev(r, n);
  const Transfer* prev_recv = nullptr;
  for (int s = 0; s < n - 1; ++s) {
    int sb = patterns::RingReduceScatterSendBlock(r, n, s);
    int rb = patterns::RingReduceScatterRecvBlock(r, n, s);
    const void* src = s == 0 ? send + sb * bb : work + sb * bb;
    plan.Send(next, src, bb, prev_recv);
    void* dst = s == n - 2 ? a.recv : work + rb * bb;
    Transfer* recv = plan.RecvReduce(prev, dst, send + rb * bb, bb);
    prev_recv = s == n - 2 ? Plan::Final(recv) : recv;
  }
  return plan.Run(e, deadline);
}

Status RingAllGather(Engine& e, int r, const CollArgs& a, Deadline deadline) {
  const int n = e.size();
  const size_t bb = a.count * SizeOf(a.type);
  char* recv = static_cast<char*>(a.recv);
  Plan plan(a, 2 * n);
  const int next = patterns::RingNext(r, n), prev = patterns::RingPrev(r, n);
  const Transfer* prev_recv = nullptr;
  // Out of place, the own block (sent first) leaves from the send buffer and
  // the engine copies it into place as it goes, while it is still in cache.
  // It streams once the whole output reaches StreamingMinBytes, not the block
  // alone: an output that large leaves the cache anyway, and a cached copy
  // of it would evict what the other blocks need.
  const bool copy_own = a.send != recv + r * bb && bb > 0;
  if (n == 1) CopyIfDistinct(recv, a.send, bb);
  for (int s = 0; s < n - 1; ++s) {
    if (s == 0 && copy_own) {
      Transfer* own = plan.Send(next, a.send, bb);
      own->copy_to = recv + r * bb;
      own->copy_nontemporal = bb * static_cast<size_t>(n) >= StreamingMinBytes();
    } else {
      plan.Send(next, recv + patterns::RingAllGatherSendBlock(r, n, s) * bb, bb, prev_recv);
    }
    Transfer* in = plan.Recv(prev, recv + patterns::RingAllGatherRecvBlock(r, n, s) * bb, bb);
    prev_recv = s == n - 2 ? Plan::Final(in) : in;  // the last block is not forwarded
  }
  return plan.Run(e, deadline);
}

// All-to-all: every pair exchanges directly; rank r sends to r+i while
// receiving from r-i, all posted at once. In place, the outgoing blocks are
// first copied aside so no block is overwritten before it left.
Status PairwiseAllToAll(Engine& e, int r, const CollArgs& a, Scratch& scratch, Deadline deadline) {
  const int n = e.size();
  const size_t bb = a.count * SizeOf(a.type);
  const char* send = static_cast<const char*>(a.send);
  char* recv = static_cast<char*>(a.recv);
  if (bb == 0) return Status::Ok();
  if (send == recv) {
    char* copy = static_cast<char*>(scratch.Get(bb * n));
    CopyBytes(copy, send, bb * n);
    send = copy;
  }
  CopyBytes(recv + r * bb, send + r * bb, bb);
  Plan plan(a, 2 * n);
  for (int i = 1; i < n; ++i) {
    int to = (r + i) % n, from = (r - i + n) % n;
    plan.Send(to, send + to * bb, bb);
    plan.Recv(from, recv + from * bb, bb);
  }
  return plan.Run(e, deadline);
}

// Dissemination barrier: ceil(log2 n) rounds of empty messages.
Status DisseminationBarrier(Engine& e, int r, const CollArgs& a, Deadline deadline) {
  const int n = e.size();
  size_t rounds = 0;
  for (int d = 1; d < n; d <<= 1) ++rounds;
  Plan plan(a, 2 * rounds);
  const Transfer* gate = nullptr;
  for (int d = 1; d < n; d <<= 1) {
    plan.Send((r + d) % n, nullptr, 0, gate);
    gate = plan.Recv((r - d + n) % n, nullptr, 0, gate);
  }
  return plan.Run(e, deadline);
}

Status SendRecv(Engine& e, const CollArgs& a, Deadline deadline) {
  Plan plan(a, 1);
  const size_t bytes = a.count * SizeOf(a.type);
  if (a.send != nullptr) {
    plan.Send(a.root, a.send, bytes);
  } else {
    plan.Recv(a.root, a.recv, bytes);
  }
  return plan.Run(e, deadline);
}

// ---- Single-copy algorithms for ranks of one host ----------------------
// Peers' buffers are read directly: with plain loads through a mapping
// when they are in shareable memory (loom::AllocShared), else with a
// cross-memory read (PeerMemory::ReadPeer). The FIFOs carry only where the
// buffers are and empty "done" messages.

struct PeerBuffers {
  uint64_t send;
  uint64_t recv;
  SharedRef send_ref;
  SharedRef recv_ref;
};

// Every rank tells every peer where its buffers (of send_bytes and
// recv_bytes) are.
Status ExchangeAddresses(Engine& e, int r, const CollArgs& a, size_t send_bytes,
                         size_t recv_bytes, std::vector<PeerBuffers>* out, Deadline deadline) {
  out->assign(e.size(), PeerBuffers{});
  (*out)[r] = PeerBuffers{reinterpret_cast<uint64_t>(a.send), reinterpret_cast<uint64_t>(a.recv),
                          FindShared(a.send, send_bytes), FindShared(a.recv, recv_bytes)};
  return ExchangeWithAll(e, r, a, &(*out)[r], out->data(), sizeof(PeerBuffers), deadline);
}

// dst = `bytes` at `remote` in peer p's memory.
Status CopyFromPeer(Engine& e, int p, void* dst, uint64_t remote, const SharedRef& where,
                    size_t bytes) {
  PeerMemory* m = e.connection(p)->peer_memory();
  if (m == nullptr) return InvalidUsage(e.connection(p)->Describe() + " cannot read peer memory");
  if (const void* view = m->PeerView(remote, bytes, where)) {
    CopyBytes(dst, view, bytes);
    return Status::Ok();
  }
  return m->ReadPeer(dst, remote, bytes);
}

// out[range] = reduction over ranks (this rank's `local` first, then peers in
// rank order) of element range [off, off+count) of each rank's send buffer.
// Works in cache-sized chunks so each peer's data is reduced while hot.
Status ReduceFromPeers(Engine& e, int r, const CollArgs& a, const std::vector<PeerBuffers>& bufs,
                       size_t off, size_t count, void* out, Scratch& scratch) {
  const size_t es = SizeOf(a.type);
  const RedOp op = a.op;
  const size_t chunk = std::max<size_t>(1, kPeerReduceChunkBytes / es);
  char* tmp = static_cast<char*>(scratch.Get(chunk * es));
  for (size_t c = 0; c < count; c += chunk) {
    const size_t len = std::min(chunk, count - c);
    char* dst = At(out, c, es);
    const char* acc = At(a.send, off + c, es);
    for (int p = 0; p < e.size(); ++p) {
      if (p == r) continue;
      const uint64_t remote = bufs[p].send + (off + c) * es;
      PeerMemory* m = e.connection(p)->peer_memory();
      if (m == nullptr) return InvalidUsage(e.connection(p)->Describe() + " cannot read peer memory");
      const void* in = m->PeerView(remote, len * es, bufs[p].send_ref);
      if (in == nullptr) {
        LOOM_TRY(m->ReadPeer(tmp, remote, len * es));
        in = tmp;
      }
      ReduceInto(dst, acc, in, len, a.type, op);
      acc = dst;
    }
  }
  return Status::Ok();
}

// The bytes of the send and recv buffers of a Direct operation.
std::pair<size_t, size_t> DirectBufferBytes(const CollArgs& a, int n) {
  const size_t b = a.count * SizeOf(a.type);
  switch (a.kind) {
    case OpKind::kReduceScatter: return {n * b, b};
    case OpKind::kAllGather: return {b, n * b};
    default: return {b, b};
  }
}

Status ExchangeAddresses(Engine& e, int r, const CollArgs& a, std::vector<PeerBuffers>* out,
                         Deadline deadline) {
  auto [send_bytes, recv_bytes] = DirectBufferBytes(a, e.size());
  return ExchangeAddresses(e, r, a, send_bytes, recv_bytes, out, deadline);
}

// The Direct algorithms below take the exchanged addresses (bufs).
Status DirectAllReduce(Engine& e, int r, const CollArgs& a, const std::vector<PeerBuffers>& bufs,
                       Scratch& scratch, Deadline deadline) {
  const int n = e.size();
  const size_t es = SizeOf(a.type);
  // 1. Reduce my block from everyone's send buffer (into my recv).
  const Range mine = BlockRange(a.count, n, r, 64 / es);
  LOOM_TRY(ReduceFromPeers(e, r, a, bufs, mine.offset, mine.count, At(a.recv, mine.offset, es), scratch));
  // 2. Once every block is final, copy the others' blocks from their recv.
  LOOM_TRY(SyncWithAll(e, r, a, deadline));
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    const Range b = BlockRange(a.count, n, p, 64 / es);
    LOOM_TRY(CopyFromPeer(e, p, At(a.recv, b.offset, es), bufs[p].recv + b.offset * es,
                          bufs[p].recv_ref, b.count * es));
  }
  // 3. Nobody returns (and lets its buffers change) while others still read.
  return SyncWithAll(e, r, a, deadline);
}

Status DirectReduceScatter(Engine& e, int r, const CollArgs& a,
                           const std::vector<PeerBuffers>& bufs, Scratch& scratch,
                           Deadline deadline) {
  LOOM_TRY(ReduceFromPeers(e, r, a, bufs, static_cast<size_t>(r) * a.count, a.count, a.recv, scratch));
  return SyncWithAll(e, r, a, deadline);
}

Status DirectAllGather(Engine& e, int r, const CollArgs& a, const std::vector<PeerBuffers>& bufs,
                       Deadline deadline) {
  const int n = e.size();
  const size_t bb = a.count * SizeOf(a.type);
  char* recv = static_cast<char*>(a.recv);
  CopyIfDistinct(recv + r * bb, a.send, bb);
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    LOOM_TRY(CopyFromPeer(e, p, recv + p * bb, bufs[p].send, bufs[p].send_ref, bb));
  }
  return SyncWithAll(e, r, a, deadline);
}

// The root publishes where its buffer is; everyone else reads it; nobody
// returns (and the root's buffer may change) before every reader is done.
Status DirectBroadcast(Engine& e, int r, const CollArgs& a, Deadline deadline) {
  const size_t bytes = a.count * SizeOf(a.type);
  PeerBuffers mine{};
  if (r == a.root) {
    CopyIfDistinct(a.recv, a.send, bytes);
    mine = PeerBuffers{reinterpret_cast<uint64_t>(a.send), 0, FindShared(a.send, bytes), {}};
  }
  std::vector<PeerBuffers> all(e.size());
  LOOM_TRY(ExchangeWithAll(e, r, a, &mine, all.data(), sizeof(PeerBuffers), deadline));
  if (r != a.root) {
    const PeerBuffers& root = all[a.root];
    LOOM_TRY(CopyFromPeer(e, a.root, a.recv, root.send, root.send_ref, bytes));
  }
  return SyncWithAll(e, r, a, deadline);
}

// The Direct algorithm of a.kind (all-reduce, reduce-scatter, all-gather).
Status RunDirectWith(Engine& e, int r, const CollArgs& a, const std::vector<PeerBuffers>& bufs,
                     Scratch& scratch, Deadline deadline) {
  switch (a.kind) {
    case OpKind::kAllReduce: return DirectAllReduce(e, r, a, bufs, scratch, deadline);
    case OpKind::kReduceScatter: return DirectReduceScatter(e, r, a, bufs, scratch, deadline);
    default: return DirectAllGather(e, r, a, bufs, deadline);
  }
}

Status RunDirect(Engine& e, int r, const CollArgs& a, Scratch& scratch, Deadline deadline) {
  std::vector<PeerBuffers> bufs;
  LOOM_TRY(ExchangeAddresses(e, r, a, &bufs, deadline));
  return RunDirectWith(e, r, a, bufs, scratch, deadline);
}

}  // namespace

namespace {
// The steps of larger collectives through the small-collective slots.
constexpr uint8_t kStepExchange = 1;
constexpr uint8_t kStepSync = 2;
}  // namespace

Status ExchangeWithAll(Engine& e, int r, const CollArgs& a, const void* mine, void* all,
                       size_t bytes, Deadline deadline) {
  const int n = e.size();
  if (e.small_collectives() && bytes <= kSmallSlotBytes) {
    // One slot write and one poll per peer instead of a message each way.
    LOOM_ASSIGN_OR_RETURN(auto in, e.SmallExchange(a.kind, mine, bytes, deadline, kStepExchange));
    for (int p = 0; p < n; ++p) {
      if (p != r && bytes > 0) std::memcpy(static_cast<char*>(all) + p * bytes, in[p], bytes);
    }
    return Status::Ok();
  }
  Plan plan(a, 2 * n);
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    plan.Send(p, mine, bytes);
    plan.Recv(p, static_cast<char*>(all) + p * bytes, bytes);
  }
  return plan.Run(e, deadline);
}

Status SyncWith(Engine& e, int r, const CollArgs& a, const std::vector<int>& peers,
                Deadline deadline) {
  Plan plan(a, 2 * peers.size());
  for (int p : peers) {
    if (p == r) continue;
    plan.Send(p, nullptr, 0);
    plan.Recv(p, nullptr, 0);
  }
  return plan.Run(e, deadline);
}

Status SyncWithAll(Engine& e, int r, const CollArgs& a, Deadline deadline) {
  if (e.small_collectives()) {
    return e.SmallExchange(a.kind, nullptr, 0, deadline, kStepSync).status();
  }
  std::vector<int> all(e.size());
  std::iota(all.begin(), all.end(), 0);
  return SyncWith(e, r, a, all, deadline);
}

bool FitsSmallSlots(OpKind kind, size_t bytes, int nranks) {
  switch (kind) {
    case OpKind::kAllReduce:
    case OpKind::kReduce:
    case OpKind::kBroadcast:
    case OpKind::kAllGather:
      return bytes <= kSmallSlotBytes;
    case OpKind::kReduceScatter:
      return bytes * static_cast<size_t>(nranks) <= kSmallSlotBytes;
    case OpKind::kBarrier:
      return true;
    default:
      return false;
  }
}

namespace {
// dst = in[0] (op) in[1] (op) ... in[n-1], each read at `offset`: the same
// order on every rank, so every rank gets the same bits.
void ReduceInRankOrder(void* dst, std::span<const char* const> in, size_t offset, size_t count,
                       DataType type, RedOp op) {
  const size_t bytes = count * SizeOf(type);
  if (in.size() == 1) {
    std::memcpy(dst, in[0] + offset, bytes);
    return;
  }
  ReduceInto(dst, in[0] + offset, in[1] + offset, count, type, op);
  for (size_t p = 2; p < in.size(); ++p) ReduceInto(dst, dst, in[p] + offset, count, type, op);
}

Status SmallCollective(Engine& e, int r, const CollArgs& a, Deadline deadline) {
  const int n = e.size();
  const size_t bytes = a.count * SizeOf(a.type);
  switch (a.kind) {
    case OpKind::kBarrier:
      return e.SmallExchange(a.kind, nullptr, 0, deadline).status();
    case OpKind::kBroadcast: {
      LOOM_ASSIGN_OR_RETURN(auto in,
                            e.SmallExchange(a.kind, r == a.root ? a.send : nullptr, bytes, deadline));
      if (bytes > 0) CopyIfDistinct(a.recv, in[a.root], bytes);
      return Status::Ok();
    }
    case OpKind::kAllReduce:
    case OpKind::kReduce: {
      LOOM_ASSIGN_OR_RETURN(auto in, e.SmallExchange(a.kind, a.send, bytes, deadline));
      if (a.kind == OpKind::kReduce && r != a.root) return Status::Ok();
      if (bytes == 0) return Status::Ok();
      ReduceInRankOrder(a.recv, in, 0, a.count, a.type, a.op);
      return Status::Ok();
    }
    case OpKind::kAllGather: {
      LOOM_ASSIGN_OR_RETURN(auto in, e.SmallExchange(a.kind, a.send, bytes, deadline));
      for (int p = 0; p < n && bytes > 0; ++p) {
        std::memcpy(static_cast<char*>(a.recv) + static_cast<size_t>(p) * bytes, in[p], bytes);
      }
      return Status::Ok();
    }
    case OpKind::kReduceScatter: {
      const size_t total = bytes * static_cast<size_t>(n);
      LOOM_ASSIGN_OR_RETURN(auto in, e.SmallExchange(a.kind, a.send, total, deadline));
      if (bytes == 0) return Status::Ok();
      ReduceInRankOrder(a.recv, in, static_cast<size_t>(r) * bytes, a.count, a.type, a.op);
      return Status::Ok();
    }
    default:
      return InternalError(std::string(OpKindName(a.kind)) + " has no small-collective form");
  }
}

}  // namespace

bool SharedDirectWorthAsking(OpKind kind, size_t bytes, int nranks) {
  return nranks == 2 && bytes >= kSharedDirectMinBytes &&
         (kind == OpKind::kAllReduce || kind == OpKind::kReduceScatter ||
          kind == OpKind::kAllGather);
}

Status RunDirectIfAllShared(Engine& e, int r, const CollArgs& a, Scratch& scratch,
                            Deadline deadline, bool* ran) {
  *ran = false;
  if (e.size() == 1) return Status::Ok();
  std::vector<PeerBuffers> bufs;
  LOOM_TRY(ExchangeAddresses(e, r, a, &bufs, deadline));
  for (const PeerBuffers& b : bufs) {
    if (!b.send_ref.valid() || !b.recv_ref.valid()) return Status::Ok();
  }
  *ran = true;
  return RunDirectWith(e, r, a, bufs, scratch, deadline);
}

Status RunAlgorithm(const AlgoContext& ctx, Algo algo, const CollArgs& a, Deadline deadline) {
  Engine& engine = ctx.engine;
  const int rank = ctx.rank;
  const int n = engine.size();
  if (a.op == RedOp::kAvg || a.premul) {
    return InternalError(std::string(OpKindName(a.kind)) +
                         ": kAvg and PreMulSum reach an algorithm only as a sum (SumRewrite)");
  }
  const auto lacks = [&] {
    return InternalError(std::string(OpKindName(a.kind)) + " has no " + AlgoName(algo) +
                         " algorithm");
  };
  // One rank: every collective is a copy.
  if (n == 1 && a.kind != OpKind::kSendRecv) {
    if (a.kind != OpKind::kBarrier) CopyIfDistinct(a.recv, a.send, a.count * SizeOf(a.type));
    return Status::Ok();
  }
  if (algo == Algo::kSlots) {
    if (!engine.small_collectives()) return lacks();
    return SmallCollective(engine, rank, a, deadline);
  }
  switch (a.kind) {
    case OpKind::kAllReduce:
      switch (algo) {
        case Algo::kRing: return RingAllReduce(engine, rank, a, deadline);
        case Algo::kRecursiveDoubling: return RecursiveDoublingAllReduce(engine, rank, a, deadline);
        case Algo::kDirect: return RunDirect(engine, rank, a, ctx.scratch, deadline);
        case Algo::kHierarchical:
          if (ctx.hier == nullptr) return lacks();
          return HierarchicalAllReduce(engine, *ctx.hier, a, deadline);
        case Algo::kTree: {
          CollArgs to_root = a;
          to_root.root = 0;
          LOOM_TRY(TreeReduce(engine, rank, to_root, a.recv, ctx.scratch, deadline));
          CollArgs down = to_root;
          down.send = a.recv;
          return TreeOrChainBroadcast(engine, rank, down, /*chain=*/false, deadline);
        }
        default: return lacks();
      }
    case OpKind::kReduceScatter:
      if (algo == Algo::kDirect) return RunDirect(engine, rank, a, ctx.scratch, deadline);
      if (algo == Algo::kRing) return RingReduceScatter(engine, rank, a, ctx.scratch, deadline);
      return lacks();
    case OpKind::kAllGather:
      if (algo == Algo::kDirect) return RunDirect(engine, rank, a, ctx.scratch, deadline);
      if (algo == Algo::kRing) return RingAllGather(engine, rank, a, deadline);
      return lacks();
    case OpKind::kBroadcast:
      if (algo == Algo::kDirect) return DirectBroadcast(engine, rank, a, deadline);
      if (algo == Algo::kRing || algo == Algo::kTree) {
        return TreeOrChainBroadcast(engine, rank, a, /*chain=*/algo == Algo::kRing, deadline);
      }
      return lacks();
    case OpKind::kReduce:
      if (algo == Algo::kTree) return TreeReduce(engine, rank, a, a.recv, ctx.scratch, deadline);
      return lacks();
    case OpKind::kAllToAll:
      if (algo == Algo::kPairwise) return PairwiseAllToAll(engine, rank, a, ctx.scratch, deadline);
      return lacks();
    case OpKind::kBarrier:
      if (algo == Algo::kDissemination) return DisseminationBarrier(engine, rank, a, deadline);
      return lacks();
    case OpKind::kSendRecv:
      return SendRecv(engine, a, deadline);
    case OpKind::kInternal:
      break;
  }
  return lacks();
}

SumRewrite::SumRewrite(const CollArgs& a, int rank, int nranks, Scratch& scratch)
    : summed_(a), nranks_(nranks) {
  // The whole result lands in this rank's output: AllReduce, a Reduce's
  // root; ReduceScatter's output is one block of the summed input.
  const bool whole_result = a.kind == OpKind::kAllReduce || (a.kind == OpKind::kReduce && rank == a.root);
  const bool has_result = whole_result || a.kind == OpKind::kReduceScatter;
  if (a.op == RedOp::kAvg) {
    summed_.op = RedOp::kSum;
    divide_ = has_result && a.count > 0;
    result_ = a.recv;
    result_count_ = a.count;
  }
  if (a.premul) {
    summed_.premul = false;
    const size_t elems = a.kind == OpKind::kReduceScatter ? a.count * nranks : a.count;
    const void* scalar =
        a.scalar.where == PreMulScalar::Where::kValue ? a.scalar.value : a.scalar.pointer;
    if (elems == 0) return;
    if (whole_result) {
      // Scaled straight into the output, then summed in place there: no
      // scratch, and the in-place algorithms, which read one buffer less.
      PreMulInto(a.recv, a.send, elems, a.type, scalar);
      summed_.send = a.recv;
    } else {
      void* scaled = scratch.Get(elems * SizeOf(a.type));
      PreMulInto(scaled, a.send, elems, a.type, scalar);
      summed_.send = scaled;
    }
  }
}

void SumRewrite::Finish() const {
  if (divide_) ScaleForAvg(result_, result_count_, summed_.type, nranks_);
}

}  // namespace loom
