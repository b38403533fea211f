// Credits, ring accounting and completion errors for IbConnection (flow.h).
#include "transports/ib/flow.h"

#include <cstdio>

#if __has_include(<infiniband/verbs.h>)
#include <infiniband/verbs.h>
#define LOOM_CHECK_VERBS_VALUES 1
#endif

namespace loom::ib {

namespace {

// ibv_wc_status values, spelled here so this builds without the header.
constexpr int kLocProtErr = 4, kWrFlushErr = 5, kLocAccessErr = 8, kRemInvReqErr = 9,
              kRemAccessErr = 10, kRemOpErr = 11, kRetryExcErr = 12, kRnrRetryExcErr = 13;
#ifdef LOOM_CHECK_VERBS_VALUES
static_assert(kLocProtErr == IBV_WC_LOC_PROT_ERR && kWrFlushErr == IBV_WC_WR_FLUSH_ERR &&
              kLocAccessErr == IBV_WC_LOC_ACCESS_ERR && kRemInvReqErr == IBV_WC_REM_INV_REQ_ERR &&
              kRemAccessErr == IBV_WC_REM_ACCESS_ERR && kRemOpErr == IBV_WC_REM_OP_ERR &&
              kRetryExcErr == IBV_WC_RETRY_EXC_ERR && kRnrRetryExcErr == IBV_WC_RNR_RETRY_EXC_ERR);
#endif

}  // namespace

Status SendCredits::Return(uint32_t n, const std::string& peer_desc) {
  if (n > slots_ - free_) {
    return InternalError(peer_desc + " returned " + std::to_string(n) + " IB ring credits, but only " +
                         std::to_string(slots_ - free_) + " were out");
  }
  free_ += n;
  return Status::Ok();
}

Status RecvRing::Arrive(uint32_t bytes, uint32_t imm, const std::string& peer_desc) {
  if (pending_.size() >= slots_) {
    return InternalError(peer_desc + " wrote into a full IB ring (" + std::to_string(slots_) +
                         " slots unconsumed): flow control broken");
  }
  pending_.push_back(Arrival{static_cast<uint32_t>(arrived_++ % slots_), bytes, imm, 0});
  return Status::Ok();
}

void RecvRing::Free() {
  pending_.pop_front();
  ++owed_;
}

uint32_t RecvRing::TakeCredits() {
  const uint32_t n = owed_ < 255 ? owed_ : 255;
  owed_ -= n;
  return n;
}

Status MapCompletionError(int status, const char* status_text, uint32_t vendor_err, bool write,
                          const std::string& peer_desc) {
  const std::string what = std::string(write ? "RDMA write to " : "incoming write from ") +
                           peer_desc + " failed: " + (status_text ? status_text : "?") +
                           " (status " + std::to_string(status) + ", vendor error 0x" + [&] {
                             char buf[16];
                             std::snprintf(buf, sizeof buf, "%x", vendor_err);
                             return std::string(buf);
                           }() + ")";
  switch (status) {
    case kRetryExcErr:
    case kRnrRetryExcErr:
      return RemoteError(what + ": the peer did not answer (process gone, link down or fabric "
                                "unreachable); check the link, NCCL_IB_TIMEOUT and NCCL_IB_RETRY_CNT");
    case kWrFlushErr:
      return RemoteError(what + ": the queue pair was already in error (an earlier failure on "
                                "this link)");
    case kRemInvReqErr:
    case kRemAccessErr:
    case kRemOpErr:
    case kLocProtErr:
    case kLocAccessErr:
      return InternalError(what + ": memory keys or ring offsets disagree (a loom bug; report it "
                                  "with NCCL_DEBUG=INFO output)");
    default:
      return SystemError(what);
  }
}

}  // namespace loom::ib
