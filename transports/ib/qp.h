// The reliable-connected queue pair's life as pure logic: the endpoint
// record exchanged through the bootstrap (lid/gid/qpn/psn/mtu), the
// RESET -> INIT -> RTR -> RTS transitions with the attributes each needs,
// and how a message is framed into RDMA writes with immediate data. The
// verbs calls that apply these live in the connection; this part is tested
// without hardware.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace loom::ib {

// What one end of a queue pair publishes to the other.
struct Endpoint {
  uint16_t lid = 0;  // InfiniBand; 0 on RoCE
  std::array<uint8_t, 16> gid{};
  uint8_t gid_index = 0;
  uint32_t qpn = 0;  // 24 bits
  uint32_t psn = 0;  // 24 bits
  uint8_t mtu = 0;   // verbs enum ibv_mtu: 1 = 256 B ... 5 = 4096 B
  bool ethernet = false;  // RoCE: address by GID (global route), not LID
  // The receive ring the peer writes into.
  uint64_t ring_addr = 0;
  uint32_t ring_rkey = 0;
  uint32_t ring_bytes = 0;
  // GPUDirect RDMA: this end grants large receives into GPU memory, so the
  // peer's large messages wait for its answer (connection.h).
  bool grants = false;
  bool operator==(const Endpoint&) const = default;
};

// Fixed-size little-endian encoding; Decode checks the length, a magic and
// the field ranges, naming `peer_desc` in the error.
std::string EncodeEndpoint(const Endpoint& e);
Result<Endpoint> DecodeEndpoint(std::string_view bytes, const std::string& peer_desc);

enum class QpState : uint8_t { kReset, kInit, kRtr, kRts, kError };
const char* QpStateName(QpState s);

// NCCL_IB_TIMEOUT / NCCL_IB_RETRY_CNT and friends.
struct QpKnobs {
  int timeout = 20;    // local ACK timeout: 4.096 us * 2^timeout, 1..31
  int retry_cnt = 7;   // 0..7
  int rnr_retry = 7;   // 7 = retry forever on receiver-not-ready
  int port = 1;
  int sl = 0;          // NCCL_IB_SL
  int traffic_class = 0;  // NCCL_IB_TC
};

// The attributes of one ibv_modify_qp call, with its attribute mask, as
// verbs spells them (IBV_QP_* bits from <infiniband/verbs.h>).
struct QpTransition {
  QpState to = QpState::kReset;
  int attr_mask = 0;
  // INIT
  int port = 0;
  int access_flags = 0;
  // RTR
  uint8_t path_mtu = 0;
  uint32_t dest_qpn = 0, rq_psn = 0;
  uint16_t dlid = 0;
  bool global = false;  // RoCE: is_global with dgid/sgid_index
  std::array<uint8_t, 16> dgid{};
  uint8_t sgid_index = 0;
  uint8_t hop_limit = 0;
  uint8_t sl = 0, traffic_class = 0;
  uint8_t max_dest_rd_atomic = 0, min_rnr_timer = 0;
  // RTS
  uint32_t sq_psn = 0;
  uint8_t timeout = 0, retry_cnt = 0, rnr_retry = 0, max_rd_atomic = 0;
};

// The next transition from `from` toward RTS: RESET->INIT, INIT->RTR
// (needs the remote endpoint; path MTU is the smaller of both ends'),
// RTR->RTS (needs the local endpoint's psn). InvalidArgument for a knob out
// of range, a remote endpoint with qpn 0, or a state with no next step (RTS,
// ERROR: a QP in ERROR must be destroyed, not walked back). Pure.
Result<QpTransition> NextTransition(QpState from, const Endpoint& local, const Endpoint& remote,
                                    const QpKnobs& knobs);

// Message framing on the wire: the 16-byte MessageHeader travels first as
// its own send (transports/transport.h), then the payload in chunks of at
// most `slot_bytes`, each an RDMA write with immediate into the next slot of
// the peer's receive ring. The immediate value carries the message sequence
// (low 8 bits) and the chunk index (24 bits) so a receiver can check order.
struct Chunk {
  size_t offset = 0;
  size_t bytes = 0;
  uint32_t imm = 0;
};
// The payload chunks of a `bytes`-long message (none for an empty one), in
// order, every chunk but the last exactly slot_bytes.
// InvalidArgument when slot_bytes is 0 or the message needs more than
// kMaxChunks chunks (the top five chunk values are reserved below). Pure.
inline constexpr uint32_t kMaxChunks = (1u << 24) - 5;
Result<std::vector<Chunk>> FrameMessage(size_t bytes, size_t slot_bytes, uint32_t seq);
uint32_t EncodeImm(uint32_t seq, uint32_t chunk);
// Checks an arriving immediate against the expected (seq, chunk), naming
// both in the error (a reordering or a lost completion).
Status CheckImm(uint32_t imm, uint32_t seq, uint32_t chunk, const std::string& peer_desc);

// The other writes use reserved chunk values: the header of message `seq`
// (its 16 bytes in a ring slot of their own); a credit message (no bytes)
// returning `credits` (1..255) ring slots to the writer; a receiver's
// answer to a large message (connection.h): a grant of its buffer, whose
// record is in the writer's mailbox, or "through the ring" (no bytes); and
// the last write of a message into a granted buffer.
uint32_t HeaderImm(uint32_t seq);
uint32_t CreditImm(uint32_t credits);
uint32_t AnswerImm(uint32_t seq, bool grant);
uint32_t GrantedImm(uint32_t seq);
struct ImmInfo {
  enum class Kind : uint8_t { kData, kHeader, kCredit, kAnswerRing, kAnswerGrant, kGranted };
  Kind kind = Kind::kData;
  uint32_t seq = 0;      // every kind but kCredit: message sequence modulo 256
  uint32_t chunk = 0;    // kData
  uint32_t credits = 0;  // kCredit
};
ImmInfo DecodeImm(uint32_t imm);

}  // namespace loom::ib
