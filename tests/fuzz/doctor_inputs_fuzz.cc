// What `loom doctor` reads from outside: hostfiles (`--hosts`), a rank's
// status reply (JSON from its LOOM_STATUS_PORT) and the endpoint list of
// `--attach`. The first byte picks the decoder; the rest is the text.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tools/doctor/attach.h"
#include "tools/doctor/gather.h"
#include "topology/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 3) {
    case 0: (void)loom::doctor::ParseHostfile(text); break;
    case 1: {
      auto v = loom::json::Parse(text);
      if (!v.ok()) break;
      loom::doctor::RankStatus status;
      (void)loom::doctor::ParseStatusReply(*v, &status);
      break;
    }
    case 2: (void)loom::doctor::ParseEndpoints(std::string(text)); break;
  }
  return 0;
}
