// The grammars of settings and handles that come from outside: NCCL_ALGO,
// LOOM_TUNE, NCCL_SOCKET_IFNAME and NCCL_IB_HCA (one list grammar),
// LOOM_SHM_READ_PRICE, numeric addresses, NCCL_SOCKET_FAMILY, a
// UniqueId's bytes, and the wait reports other ranks leave in the store
// (decoded, then followed as a timed-out rank follows them). The first byte
// picks the grammar; the rest is the text. Every one refuses with an error
// or accepts; none may crash.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "collectives/select/selector.h"
#include "comm/unique_id.h"
#include "comm/wait_diagnosis.h"
#include "topology/cost_model.h"
#include "topology/inet_address.h"
#include "topology/socket_ifname.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 8) {
    case 0: {
      auto filter = loom::AlgoFilter::Parse(text);
      if (filter.ok()) (void)filter->Allows(loom::OpKind::kAllReduce, loom::Algo::kRing);
      break;
    }
    case 1: {
      auto tune = loom::TuneTable::Parse(text);
      if (tune.ok()) (void)tune->Lookup(loom::OpKind::kAllGather, 4096);
      break;
    }
    case 2: {
      const auto filter = loom::SocketIfnameFilter::Parse(text);
      (void)filter.Matches("eth0", 1);
      (void)filter.Describe();
      break;
    }
    case 3: (void)loom::topology::ParsePeerReadPrice(text); break;
    case 4: (void)loom::ParseIpAddress(text); break;  // never a name lookup
    case 5: (void)loom::ParseSocketFamily(text); break;
    case 6: {
      loom::UniqueId id{};
      std::memcpy(id.bytes.data(), text.data(), std::min(text.size(), id.bytes.size()));
      (void)loom::internal::ParseUniqueId(id);
      break;
    }
    case 7: {
      // Four ranks' reports, split at each "|"; rank 0 follows them.
      constexpr int kRanks = 4;
      loom::WaitLookup lookup;
      std::string_view rest = text;
      for (int r = 0; r < kRanks; ++r) {
        const size_t cut = std::min(rest.find('|'), rest.size());
        auto report = loom::DecodeWaitReport(rest.substr(0, cut));
        if (report) {
          // What decodes encodes back to the same bytes' meaning.
          auto again = loom::DecodeWaitReport(loom::EncodeWaitReport(*report));
          if (!again || loom::EncodeWaitReport(*again) != loom::EncodeWaitReport(*report)) {
            __builtin_trap();
          }
        }
        lookup.reports.push_back(std::move(report));
        rest.remove_prefix(std::min(cut + 1, rest.size()));
      }
      const std::vector<std::string> hosts{"h0", "h0", "h1", "h1"};
      const loom::WaitReport mine = lookup.reports[0].value_or(loom::WaitReport{});
      (void)loom::FollowWaits(0, mine, lookup, hosts, 0, std::chrono::milliseconds(500));
      break;
    }
  }
  return 0;
}
