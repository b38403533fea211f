// Queue-pair transitions, endpoint encoding and message framing (qp.h).
#include "transports/ib/qp.h"

#include <algorithm>
#include <cstring>

#if __has_include(<infiniband/verbs.h>)
#include <infiniband/verbs.h>
#define LOOM_CHECK_VERBS_VALUES 1
#endif

namespace loom::ib {

namespace {

// verbs' values, spelled here so this logic builds without the header;
// checked against it where it exists.
constexpr int kQpState = 1 << 0, kQpAccessFlags = 1 << 3, kQpPkeyIndex = 1 << 4,
              kQpPort = 1 << 5, kQpAv = 1 << 7, kQpPathMtu = 1 << 8, kQpTimeout = 1 << 9,
              kQpRetryCnt = 1 << 10, kQpRnrRetry = 1 << 11, kQpRqPsn = 1 << 12,
              kQpMaxQpRdAtomic = 1 << 13, kQpMinRnrTimer = 1 << 15, kQpSqPsn = 1 << 16,
              kQpMaxDestRdAtomic = 1 << 17, kQpDestQpn = 1 << 20;
constexpr int kAccessLocalWrite = 1, kAccessRemoteWrite = 2;
#ifdef LOOM_CHECK_VERBS_VALUES
static_assert(kQpState == IBV_QP_STATE && kQpAccessFlags == IBV_QP_ACCESS_FLAGS &&
              kQpPkeyIndex == IBV_QP_PKEY_INDEX && kQpPort == IBV_QP_PORT && kQpAv == IBV_QP_AV &&
              kQpPathMtu == IBV_QP_PATH_MTU && kQpTimeout == IBV_QP_TIMEOUT &&
              kQpRetryCnt == IBV_QP_RETRY_CNT && kQpRnrRetry == IBV_QP_RNR_RETRY &&
              kQpRqPsn == IBV_QP_RQ_PSN && kQpMaxQpRdAtomic == IBV_QP_MAX_QP_RD_ATOMIC &&
              kQpMinRnrTimer == IBV_QP_MIN_RNR_TIMER && kQpSqPsn == IBV_QP_SQ_PSN &&
              kQpMaxDestRdAtomic == IBV_QP_MAX_DEST_RD_ATOMIC && kQpDestQpn == IBV_QP_DEST_QPN);
static_assert(kAccessLocalWrite == IBV_ACCESS_LOCAL_WRITE &&
              kAccessRemoteWrite == IBV_ACCESS_REMOTE_WRITE);
static_assert(IBV_MTU_256 == 1 && IBV_MTU_4096 == 5);
#endif

constexpr uint32_t kEndpointMagic = 0x6c6f6962;  // "loib"
constexpr size_t kEndpointBytes = 4 + 2 + 16 + 1 + 4 + 4 + 1 + 1 + 8 + 4 + 4 + 1;
constexpr uint32_t k24 = (1u << 24) - 1;

class Out {
 public:
  template <typename T>
  void Put(T v) {
    for (size_t i = 0; i < sizeof(T); ++i) s_ += static_cast<char>((static_cast<uint64_t>(v) >> (8 * i)) & 0xff);
  }
  void Bytes(const uint8_t* p, size_t n) { s_.append(reinterpret_cast<const char*>(p), n); }
  std::string s_;
};

class In {
 public:
  explicit In(std::string_view s) : s_(s) {}
  template <typename T>
  T Get() {
    uint64_t v = 0;
    for (size_t i = 0; i < sizeof(T); ++i) v |= uint64_t{static_cast<uint8_t>(s_[pos_ + i])} << (8 * i);
    pos_ += sizeof(T);
    return static_cast<T>(v);
  }
  void Bytes(uint8_t* p, size_t n) {
    std::memcpy(p, s_.data() + pos_, n);
    pos_ += n;
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

const char* QpStateName(QpState s) {
  switch (s) {
    case QpState::kReset: return "RESET";
    case QpState::kInit: return "INIT";
    case QpState::kRtr: return "RTR";
    case QpState::kRts: return "RTS";
    case QpState::kError: return "ERROR";
  }
  return "?";
}

std::string EncodeEndpoint(const Endpoint& e) {
  Out o;
  o.Put(kEndpointMagic);
  o.Put(e.lid);
  o.Bytes(e.gid.data(), e.gid.size());
  o.Put(e.gid_index);
  o.Put(e.qpn);
  o.Put(e.psn);
  o.Put(e.mtu);
  o.Put(static_cast<uint8_t>(e.ethernet ? 1 : 0));
  o.Put(e.ring_addr);
  o.Put(e.ring_rkey);
  o.Put(e.ring_bytes);
  o.Put(static_cast<uint8_t>(e.grants ? 1 : 0));
  return o.s_;
}

Result<Endpoint> DecodeEndpoint(std::string_view bytes, const std::string& peer_desc) {
  auto bad = [&](const std::string& what) {
    return InternalError("IB endpoint from " + peer_desc + " is malformed: " + what);
  };
  if (bytes.size() != kEndpointBytes) {
    return bad(std::to_string(bytes.size()) + " bytes, expected " + std::to_string(kEndpointBytes));
  }
  In in(bytes);
  if (in.Get<uint32_t>() != kEndpointMagic) return bad("bad magic (another loom version?)");
  Endpoint e;
  e.lid = in.Get<uint16_t>();
  in.Bytes(e.gid.data(), e.gid.size());
  e.gid_index = in.Get<uint8_t>();
  e.qpn = in.Get<uint32_t>();
  e.psn = in.Get<uint32_t>();
  e.mtu = in.Get<uint8_t>();
  const uint8_t eth = in.Get<uint8_t>();
  e.ring_addr = in.Get<uint64_t>();
  e.ring_rkey = in.Get<uint32_t>();
  e.ring_bytes = in.Get<uint32_t>();
  const uint8_t grants = in.Get<uint8_t>();
  if (eth > 1) return bad("link layer flag " + std::to_string(eth));
  if (grants > 1) return bad("grant flag " + std::to_string(grants));
  e.grants = grants == 1;
  e.ethernet = eth == 1;
  if (e.qpn == 0 || e.qpn > k24) return bad("queue pair number " + std::to_string(e.qpn));
  if (e.psn > k24) return bad("packet sequence number " + std::to_string(e.psn));
  if (e.mtu < 1 || e.mtu > 5) return bad("MTU code " + std::to_string(e.mtu));
  return e;
}

Result<QpTransition> NextTransition(QpState from, const Endpoint& local, const Endpoint& remote,
                                    const QpKnobs& k) {
  if (k.timeout < 1 || k.timeout > 31) {
    return InvalidArgument("NCCL_IB_TIMEOUT=" + std::to_string(k.timeout) + " is outside 1..31");
  }
  if (k.retry_cnt < 0 || k.retry_cnt > 7) {
    return InvalidArgument("NCCL_IB_RETRY_CNT=" + std::to_string(k.retry_cnt) +
                           " is outside 0..7");
  }
  if (k.rnr_retry < 0 || k.rnr_retry > 7 || k.port < 1 || k.port > 255 || k.sl < 0 ||
      k.sl > 15 || k.traffic_class < 0 || k.traffic_class > 255) {
    return InvalidArgument("IB queue pair settings out of range (port, SL 0..15, TC 0..255)");
  }
  QpTransition t;
  switch (from) {
    case QpState::kReset:
      t.to = QpState::kInit;
      t.attr_mask = kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags;
      t.port = k.port;
      t.access_flags = kAccessLocalWrite | kAccessRemoteWrite;
      return t;
    case QpState::kInit:
      if (remote.qpn == 0) return InvalidArgument("INIT -> RTR needs the remote endpoint");
      if (remote.ethernet != local.ethernet) {
        return InvalidArgument("INIT -> RTR: one end is RoCE and the other InfiniBand");
      }
      t.to = QpState::kRtr;
      t.attr_mask = kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic |
                    kQpMinRnrTimer;
      t.path_mtu = std::min(local.mtu, remote.mtu);
      t.dest_qpn = remote.qpn;
      t.rq_psn = remote.psn;
      t.dlid = remote.lid;
      t.global = remote.ethernet;
      if (t.global) {
        t.dgid = remote.gid;
        t.sgid_index = local.gid_index;
        t.hop_limit = 255;
        t.traffic_class = static_cast<uint8_t>(k.traffic_class);
      }
      t.sl = static_cast<uint8_t>(k.sl);
      t.max_dest_rd_atomic = 1;
      t.min_rnr_timer = 12;
      return t;
    case QpState::kRtr:
      t.to = QpState::kRts;
      t.attr_mask = kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic;
      t.sq_psn = local.psn;
      t.timeout = static_cast<uint8_t>(k.timeout);
      t.retry_cnt = static_cast<uint8_t>(k.retry_cnt);
      t.rnr_retry = static_cast<uint8_t>(k.rnr_retry);
      t.max_rd_atomic = 1;
      return t;
    case QpState::kRts:
    case QpState::kError:
      break;
  }
  return InvalidArgument(std::string("queue pair in ") + QpStateName(from) +
                         " has no next transition");
}

uint32_t EncodeImm(uint32_t seq, uint32_t chunk) { return ((seq & 0xff) << 24) | (chunk & k24); }

Status CheckImm(uint32_t imm, uint32_t seq, uint32_t chunk, const std::string& peer_desc) {
  const uint32_t want = EncodeImm(seq, chunk);
  if (imm == want) return Status::Ok();
  return InternalError("IB write from " + peer_desc + " out of order: got message " +
                       std::to_string(imm >> 24) + " chunk " + std::to_string(imm & k24) +
                       ", expected message " + std::to_string(seq & 0xff) + " chunk " +
                       std::to_string(chunk & k24) + " (sequence numbers modulo 256)");
}

namespace {
constexpr uint32_t kHeaderChunk = k24, kCreditChunk = k24 - 1, kGrantedChunk = k24 - 2,
                   kAnswerRingChunk = k24 - 3, kAnswerGrantChunk = k24 - 4;
static_assert(kAnswerGrantChunk == kMaxChunks, "data chunks stay below the reserved values");
}  // namespace

uint32_t HeaderImm(uint32_t seq) { return EncodeImm(seq, kHeaderChunk); }
uint32_t CreditImm(uint32_t credits) { return EncodeImm(credits, kCreditChunk); }
uint32_t AnswerImm(uint32_t seq, bool grant) {
  return EncodeImm(seq, grant ? kAnswerGrantChunk : kAnswerRingChunk);
}
uint32_t GrantedImm(uint32_t seq) {
  return EncodeImm(seq, kGrantedChunk);
}

ImmInfo DecodeImm(uint32_t imm) {
  ImmInfo info;
  const uint32_t chunk = imm & k24, top = imm >> 24;
  info.seq = top;
  switch (chunk) {
    case kHeaderChunk:
      info.kind = ImmInfo::Kind::kHeader;
      break;
    case kCreditChunk:
      info.kind = ImmInfo::Kind::kCredit;
      info.credits = top;
      info.seq = 0;
      break;
    case kGrantedChunk:
      info.kind = ImmInfo::Kind::kGranted;
      break;
    case kAnswerRingChunk:
      info.kind = ImmInfo::Kind::kAnswerRing;
      break;
    case kAnswerGrantChunk:
      info.kind = ImmInfo::Kind::kAnswerGrant;
      break;
    default:
      info.chunk = chunk;
      break;
  }
  return info;
}

Result<std::vector<Chunk>> FrameMessage(size_t bytes, size_t slot_bytes, uint32_t seq) {
  if (slot_bytes == 0) return InvalidArgument("IB slot size 0");
  const size_t n = (bytes + slot_bytes - 1) / slot_bytes;
  if (n > kMaxChunks) {
    return InvalidArgument("a " + std::to_string(bytes) + "-byte message needs " +
                           std::to_string(n) + " IB chunks of " + std::to_string(slot_bytes) +
                           " bytes; at most " + std::to_string(kMaxChunks));
  }
  std::vector<Chunk> chunks(n);
  for (size_t i = 0; i < n; ++i) {
    chunks[i].offset = i * slot_bytes;
    chunks[i].bytes = std::min(slot_bytes, bytes - i * slot_bytes);
    chunks[i].imm = EncodeImm(seq, static_cast<uint32_t>(i));
  }
  return chunks;
}

}  // namespace loom::ib
