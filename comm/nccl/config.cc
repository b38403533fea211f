// ncclConfig_t as NCCL reads it: the caller's `size` and `version` say which
// fields its header had, values NCCL refuses are refused, and what loom can
// honour (blocking, commName) becomes a loom::CommConfig.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include "base/log.h"
#include "comm/nccl/shim.h"


namespace {

constexpr int kUndef = NCCL_CONFIG_UNDEF_INT;
// NCCL's limit on channels (MAXCHANNELS), for nChannelsPerNetPeer.
constexpr int kNcclMaxChannels = 64;

// The config with the fields the caller's header did not have (past its
// `size`, or newer than its `version`) at their defaults, as NCCL does.
ncclConfig_t KnownFields(const ncclConfig_t& given, size_t size) {
  ncclConfig_t known = NCCL_CONFIG_INITIALIZER;
  const ncclConfig_t defaults = NCCL_CONFIG_INITIALIZER;
  std::memcpy(&known, &given, std::min(size, sizeof known));
  const unsigned v = known.version;
  if (v < NCCL_VERSION(2, 14, 0)) known.blocking = defaults.blocking;
  if (v < NCCL_VERSION(2, 17, 0)) {
    known.cgaClusterSize = defaults.cgaClusterSize;
    known.minCTAs = defaults.minCTAs;
    known.maxCTAs = defaults.maxCTAs;
    known.netName = defaults.netName;
  }
  if (v < NCCL_VERSION(2, 18, 0)) known.splitShare = defaults.splitShare;
  if (v < NCCL_VERSION(2, 25, 0)) known.trafficClass = defaults.trafficClass;
  if (v < NCCL_VERSION(2, 27, 0)) {
    known.commName = defaults.commName;
    known.collnetEnable = defaults.collnetEnable;
    known.CTAPolicy = defaults.CTAPolicy;
    known.shrinkShare = defaults.shrinkShare;
    known.nvlsCTAs = defaults.nvlsCTAs;
  }
  if (v < NCCL_VERSION(2, 28, 0)) {
    known.nChannelsPerNetPeer = defaults.nChannelsPerNetPeer;
    known.nvlinkCentricSched = defaults.nvlinkCentricSched;
  }
  return known;
}

loom::Status Refuse(const char* field, int value, const char* rule) {
  return loom::InvalidArgument(loom::StrPrintf("ncclConfig_t.%s is %d; it must be %s", field, value, rule));
}

loom::Status CheckFlag(const char* field, int value) {
  if (value == kUndef || value == 0 || value == 1) return loom::Status::Ok();
  return Refuse(field, value, "0, 1 or NCCL_CONFIG_UNDEF_INT");
}

// NCCL's refusals, field by field.
loom::Status CheckValues(const ncclConfig_t& c) {
  LOOM_TRY(CheckFlag("blocking", c.blocking));
  if (c.cgaClusterSize != kUndef && c.cgaClusterSize < 0) {
    return Refuse("cgaClusterSize", c.cgaClusterSize, "0 or more, or NCCL_CONFIG_UNDEF_INT");
  }
  if (c.minCTAs != kUndef && c.minCTAs <= 0) {
    return Refuse("minCTAs", c.minCTAs, "at least 1, or NCCL_CONFIG_UNDEF_INT");
  }
  if (c.maxCTAs != kUndef && c.maxCTAs <= 0) {
    return Refuse("maxCTAs", c.maxCTAs, "at least 1, or NCCL_CONFIG_UNDEF_INT");
  }
  if (c.minCTAs != kUndef && c.maxCTAs != kUndef && c.minCTAs > c.maxCTAs) {
    return loom::InvalidArgument(
        loom::StrPrintf("ncclConfig_t.minCTAs %d is above maxCTAs %d", c.minCTAs, c.maxCTAs));
  }
  LOOM_TRY(CheckFlag("splitShare", c.splitShare));
  LOOM_TRY(CheckFlag("collnetEnable", c.collnetEnable));
  if (c.CTAPolicy != kUndef &&
      (c.CTAPolicy < NCCL_CTA_POLICY_DEFAULT || c.CTAPolicy > NCCL_CTA_POLICY_ZERO)) {
    return Refuse("CTAPolicy", c.CTAPolicy, "an NCCL_CTA_POLICY_* value or NCCL_CONFIG_UNDEF_INT");
  }
  LOOM_TRY(CheckFlag("shrinkShare", c.shrinkShare));
  if (c.nvlsCTAs != kUndef && c.nvlsCTAs <= 0) {
    return Refuse("nvlsCTAs", c.nvlsCTAs, "at least 1, or NCCL_CONFIG_UNDEF_INT");
  }
  if (c.nChannelsPerNetPeer != kUndef &&
      (c.nChannelsPerNetPeer <= 0 || c.nChannelsPerNetPeer > kNcclMaxChannels)) {
    return Refuse("nChannelsPerNetPeer", c.nChannelsPerNetPeer,
                  "1 to 64, or NCCL_CONFIG_UNDEF_INT");
  }
  LOOM_TRY(CheckFlag("nvlinkCentricSched", c.nvlinkCentricSched));
  return loom::Status::Ok();
}

// "netName, CTAPolicy": the fields the caller set that loom does not use.
std::string IgnoredFields(const ncclConfig_t& c) {
  std::string out;
  auto note = [&out](bool set, const char* name) {
    if (!set) return;
    if (!out.empty()) out += ", ";
    out += name;
  };
  note(c.cgaClusterSize != kUndef, "cgaClusterSize");
  note(c.minCTAs != kUndef, "minCTAs");
  note(c.maxCTAs != kUndef, "maxCTAs");
  note(c.netName != nullptr, "netName (choose transports with NCCL_NET)");
  note(c.splitShare != kUndef, "splitShare");
  note(c.trafficClass != kUndef, "trafficClass");
  note(c.collnetEnable != kUndef, "collnetEnable");
  note(c.CTAPolicy != kUndef, "CTAPolicy");
  note(c.shrinkShare != kUndef, "shrinkShare");
  note(c.nvlsCTAs != kUndef, "nvlsCTAs");
  note(c.nChannelsPerNetPeer != kUndef, "nChannelsPerNetPeer");
  note(c.nvlinkCentricSched != kUndef, "nvlinkCentricSched");
  return out;
}

}  // namespace

namespace loom::nccl_shim {

loom::Result<loom::CommConfig> ParseConfig(const ncclConfig_t* config) {
  loom::CommConfig out;
  if (config == nullptr) return out;
  size_t size = 0;
  std::memcpy(&size, config, sizeof size);
  if (size < offsetof(ncclConfig_t, version)) {
    return loom::InvalidArgument(loom::StrPrintf(
        "ncclConfig_t size %zu is too small: initialise it with NCCL_CONFIG_INITIALIZER", size));
  }
  const ncclConfig_t known = KnownFields(*config, size);
  if (known.magic != NCCL_API_MAGIC) {
    return loom::InvalidArgument(
        loom::StrPrintf("ncclConfig_t magic is 0x%x, not 0x%x: initialise it with NCCL_CONFIG_INITIALIZER",
               known.magic, NCCL_API_MAGIC));
  }
  LOOM_TRY(CheckValues(known));
  if (known.blocking == 0) {
    LOOM_INFO(loom::log::kInit,
              "non-blocking communicator requested: loom completes every call before returning, "
              "so calls return ncclSuccess rather than ncclInProgress");
  }
  if (known.commName != nullptr) out.name = known.commName;
  if (const std::string ignored = IgnoredFields(known); !ignored.empty()) {
    LOOM_INFO(loom::log::kInit, "ncclConfig_t fields accepted and ignored by loom: %s",
              ignored.c_str());
  }
  return out;
}

}  // namespace loom::nccl_shim
