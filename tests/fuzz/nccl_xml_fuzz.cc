// NCCL's topology XML (NCCL_TOPO_FILE): any bytes are refused with an error
// or parsed into a topology that loom's own format dumps and parses back.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "topology/nccl_xml.h"
#include "topology/topo_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto topo = loom::topology::ParseNcclTopoXml(text);
  if (!topo.ok()) return 0;
  const std::string dumped = loom::topology::DumpTopologyJson(*topo);
  if (!loom::topology::ParseTopologyJson(dumped).ok()) std::abort();
  return 0;
}
