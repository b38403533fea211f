// The transport choice for each link, as a pure function of what every rank
// published at setup (its host, which transports it can use, its knobs).
// Both ends of a link evaluate the same function over the same all-gathered
// records, so they agree, or both fail with the same message naming both.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "transports/ib/verbs.h"

namespace loom {

enum class TransportKind : uint8_t { kShm, kSocket, kUcx, kIb };

// NCCL's names: "SHM", "Socket", "UCX", "IB".
const char* TransportName(TransportKind kind);

// Whether one rank can use one transport, and if not, why.
//   kAbsent:   not on this host at all (no libibverbs, zero devices, built
//              without UCX): not using it is no surprise, logged at INFO.
//   kUnusable: present but not usable (every port down, NCCL_IB_HCA matched
//              nothing, /dev/shm full): not using it is a fallback, a WARN.
//   kUsable:   `device` names what would be used ("mlx5_0:1", "data0").
struct Availability {
  enum class State : uint8_t { kAbsent, kUnusable, kUsable };
  State state = State::kAbsent;
  std::string detail;  // the reason (absent/unusable) or the device (usable)

  static Availability Usable(std::string device) { return {State::kUsable, std::move(device)}; }
  static Availability Unusable(std::string why) { return {State::kUnusable, std::move(why)}; }
  static Availability Absent(std::string why) { return {State::kAbsent, std::move(why)}; }
  bool usable() const { return state == State::kUsable; }
  bool operator==(const Availability&) const = default;
};

// The settings of one rank that govern its choice, as read from the
// environment / config file (LOOM_ before NCCL_). Raw text is kept so that
// messages quote what the user wrote.
struct TransportKnobs {
  bool shm_disable = false;  // NCCL_SHM_DISABLE
  bool ib_disable = false;   // NCCL_IB_DISABLE (also UCX's verbs lanes)
  std::string net;           // NCCL_NET: "" (auto), "IB", "Socket", "UCX", any case
  std::string require;       // LOOM_REQUIRE_TRANSPORT: "", "ib", "ucx", "socket", "shm"
  bool operator==(const TransportKnobs&) const = default;
};

// What one rank publishes about itself.
struct TransportRecord {
  std::string host_id;   // equal <=> same host and /dev/shm (topology/host.h)
  std::string hostname;  // for messages
  Availability shm, socket, ucx, ib;
  // The socket listener's "address:port" ("[v6]:port"), or with several
  // NICs their list (transports/tcp/nics.h), loopback never among them; a
  // loopback address here cannot be reached from another host.
  std::string socket_address;
  TransportKnobs knobs;
  bool operator==(const TransportRecord&) const = default;
};

// Serialises a record for the setup all-gather (line-based, any bytes in
// the strings survive). Decode names `rank` when the text is malformed.
std::string EncodeTransportRecord(const TransportRecord& record);
Result<TransportRecord> DecodeTransportRecord(std::string_view text, int rank);

// The decision for one link, from one end's point of view.
struct LinkPlan {
  TransportKind kind = TransportKind::kSocket;
  // Why, for NCCL_DEBUG=INFO: "same host", "NCCL_NET=Socket", "auto: IB
  // absent on this host (no libibverbs)".
  std::string reason;
  // Fallbacks that happened on this link, each naming the rule that fired
  // and what to set to choose knowingly; to be logged as WARN. Never set
  // when LOOM_REQUIRE_TRANSPORT is (a fallback is then an error).
  std::vector<std::string> warnings;
};

// Rules, evaluated for the link (me, peer) from each end's knobs:
//  1. Same host_id: SHM when both ends have it usable and the viewing end
//     has not set NCCL_SHM_DISABLE. Otherwise the link is a network link
//     (SHM unusable is a fallback; NCCL_SHM_DISABLE is not).
//  2. NCCL_NET set: exactly that network transport, which both ends must
//     have usable; otherwise an error naming the end and the reason (no
//     silent fallback). NCCL_NET=IB with NCCL_IB_DISABLE=1 is an error.
//  3. LOOM_REQUIRE_TRANSPORT=ib|ucx|socket: like NCCL_NET for network links
//     (and an error if NCCL_NET names another); =shm: a same-host link that
//     cannot use SHM is an error. With any value, every fallback is an error.
//  4. Otherwise (auto): IB when both ends have it usable and NCCL_IB_DISABLE
//     is unset, else Socket. UCX is never chosen automatically (over plain
//     Ethernet it adds nothing to Socket); select it with NCCL_NET=UCX.
//     Not using IB because an end has it kUnusable, or only one end has it,
//     is a fallback (WARN); IB absent on both ends is not.
//  5. A Socket link between hosts whose end listens on a loopback address
//     (NCCL_SOCKET_IFNAME=^mgmt leaving lo as the first pick) is an error
//     naming that end, at once rather than a connect timeout later.
// Both ends' views are computed; if either fails that error is returned
// (the lower rank's first), and if they choose differently the error names
// both ranks, hosts and reasons. The result is therefore the same on both
// ends. InvalidArgument for a bad rank index, InvalidUsage for contradictory
// or unknown knob values, SystemError when no transport can carry the link.
// Pure and thread-safe.
Result<LinkPlan> PlanLink(const std::vector<TransportRecord>& ranks, int me, int peer);

// PlanLink for every peer of `me` (entry `me` is SHM with reason "self" and
// unused). The first error is returned, with the link named.
Result<std::vector<LinkPlan>> PlanPeers(const std::vector<TransportRecord>& ranks, int me);

// Parses NCCL_NET / LOOM_REQUIRE_TRANSPORT values, case-insensitively:
// "IB", "Socket", "UCX" (and "SHM" when allow_shm). `what` names the knob in
// the error, which lists the accepted values.
Result<TransportKind> ParseTransportName(std::string_view text, std::string_view what,
                                         bool allow_shm);

// What a host offers of IB, from verbs discovery (`found`) and NCCL_IB_HCA
// (`hca`, NCCL's grammar): absent (no library, no device, nothing the filter
// names), unusable (ports present but down or filtered out), or usable with
// the first selected active port, which `port` receives when not null. The
// caller handles NCCL_IB_DISABLE, which skips discovery altogether. Shared
// by the runtime's setup and `loom doctor`, which runs it on each host's
// gathered ports, so the two cannot disagree. Pure.
Availability IbAvailabilityOf(const ib::Discovery& found, std::string_view hca,
                              ib::PortInfo* port = nullptr);
inline constexpr const char* kIbDisabledReason = "not probed: NCCL_IB_DISABLE=1";

// loom's IB connection (transports/ib) has not yet run on RDMA hardware.
// Until it has, IB is used only when asked for by name (NCCL_NET=IB or
// LOOM_REQUIRE_TRANSPORT=ib): otherwise usable IB counts as unusable, with a
// reason that says how to opt in, so the automatic rule falls back to
// sockets with a WARN. Other states pass through. Pure.
Availability GateUnprovenIb(Availability ib, const TransportKnobs& knobs);

}  // namespace loom
