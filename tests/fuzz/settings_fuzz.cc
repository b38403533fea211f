// The grammars of settings and handles that come from outside: NCCL_ALGO,
// LOOM_TUNE, NCCL_SOCKET_IFNAME and NCCL_IB_HCA (one list grammar),
// LOOM_SHM_READ_PRICE, numeric addresses, NCCL_SOCKET_FAMILY and a
// UniqueId's bytes. The first byte picks the grammar; the rest is the text.
// Every one refuses with an error or accepts; none may crash.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "collectives/select/selector.h"
#include "comm/unique_id.h"
#include "topology/cost_model.h"
#include "topology/inet_address.h"
#include "topology/socket_ifname.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 7) {
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
  }
  return 0;
}
