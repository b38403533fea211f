// loom's topology JSON (`loom topo --file`, LOOM_TOPO_FILE): any bytes are
// refused with an error or parsed; what parses dumps and parses back the same.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "topology/topo_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto topo = loom::topology::ParseTopologyJson(text);
  if (!topo.ok()) return 0;
  const std::string dumped = loom::topology::DumpTopologyJson(*topo);
  auto again = loom::topology::ParseTopologyJson(dumped);
  if (!again.ok() || loom::topology::DumpTopologyJson(*again) != dumped) std::abort();
  return 0;
}
