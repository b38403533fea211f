// Fingerprint contents and the comparison that names the odd ranks out.
#include "comm/fingerprint.h"

#include <cstdlib>
#include <map>

#include "base/params.h"
#include "comm/build_info.h"
#include "loom/loom.hpp"

namespace loom {

namespace {

// As parameter lookup reads a variable that has no declared parameter:
// LOOM_ before NCCL_, empty means unset.
std::string EnvValue(const char* name) {
  for (const char* prefix : {"LOOM_", "NCCL_"}) {
    const char* v = std::getenv((std::string(prefix) + name).c_str());
    if (v != nullptr && *v != '\0') return v;
  }
  return "(unset)";
}

}  // namespace

Fingerprint BuildOptions() {
  return {{"build type", LOOM_BUILD_TYPE},   {"compiler", LOOM_BUILD_COMPILER},
          {"sanitizers", LOOM_BUILD_SANITIZE}, {"hwloc", LOOM_BUILD_HWLOC},
          {"ucx", LOOM_BUILD_UCX},           {"ibverbs headers", LOOM_BUILD_IBVERBS},
          {"cuda", LOOM_BUILD_CUDA},         {"transports", "shm,tcp"}};
}

Fingerprint LocalFingerprint() {
  Fingerprint fp;
  fp.emplace_back("version", Version());
  for (auto& [k, v] : BuildOptions()) {
    // Build type and compiler may differ harmlessly; the wire format may not.
    if (k == "transports" || k == "sanitizers") fp.emplace_back(k, v);
  }
  // Settings that change the wire protocol or the transport choice, as the
  // runtime will use them (environment and config files, parsed): a rank
  // that differs would fail obscurely later (FAILURE_MODES rows 6, 13).
  fp.emplace_back("NCCL_SHM_DISABLE", params::kShmDisable.Get() ? "1" : "0");
  fp.emplace_back("NCCL_IB_DISABLE", params::kIbDisable.Get() ? "1" : "0");
  fp.emplace_back("NCCL_NET", params::kNet.Get());
  fp.emplace_back("NCCL_BUFFSIZE", std::to_string(params::kBuffsize.Get()));
  fp.emplace_back("NCCL_SOCKET_NTHREADS", std::to_string(params::kSocketNthreads.Get()));
  fp.emplace_back("NCCL_NSOCKS_PERTHREAD", std::to_string(params::kNsocksPerthread.Get()));
  fp.emplace_back("NCCL_ALGO", params::kAlgo.Get());
  // Ranks with different tables could pick different algorithms: a hang.
  fp.emplace_back("LOOM_TUNE", params::kTune.Get());
  // Staged device buffers are split into per-chunk operations of this size.
  fp.emplace_back("LOOM_CUDA_STAGING_CHUNK", std::to_string(params::kCudaStagingChunk.Get()));
  fp.emplace_back("NCCL_PROTO", EnvValue("PROTO"));
  // Small collectives go through shared-memory slots or messages: all alike.
  fp.emplace_back("LOOM_SHM_SMALL", params::kShmSmall.Get() ? "1" : "0");
  return fp;
}

std::string EncodeFingerprint(const Fingerprint& fp) {
  std::string s;
  for (auto& [k, v] : fp) s += k + "=" + v + "\n";
  return s;
}

Fingerprint DecodeFingerprint(const std::string& text) {
  Fingerprint fp;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(start, nl - start);
    size_t eq = line.find('=');
    if (eq != std::string::npos) fp.emplace_back(line.substr(0, eq), line.substr(eq + 1));
    start = nl + 1;
  }
  return fp;
}

Status CompareFingerprints(const std::vector<Fingerprint>& all,
                           const std::vector<std::string>& hosts) {
  std::map<std::string, std::map<std::string, std::vector<int>>> by_key;  // key -> value -> ranks
  for (size_t r = 0; r < all.size(); ++r) {
    for (auto& [k, v] : all[r]) by_key[k][v].push_back(static_cast<int>(r));
  }
  std::string diff;
  for (auto& [key, values] : by_key) {
    size_t holders = 0;
    for (auto& [v, ranks] : values) holders += ranks.size();
    if (values.size() == 1 && holders == all.size()) continue;
    diff += "\n  " + key + ":";
    for (auto& [v, ranks] : values) {
      diff += " '" + v + "' on rank";
      diff += ranks.size() > 1 ? "s " : " ";
      for (size_t i = 0; i < ranks.size() && i < 8; ++i) {
        diff += (i ? "," : "") + std::to_string(ranks[i]) + "(" + hosts[ranks[i]] + ")";
      }
      if (ranks.size() > 8) diff += ",... (" + std::to_string(ranks.size()) + " ranks)";
      diff += ";";
    }
    if (holders != all.size()) diff += " missing on the other ranks;";
  }
  if (diff.empty()) return Status::Ok();
  return InvalidUsage("ranks disagree on settings that must match (same loom version and the same "
                      "NCCL_/LOOM_ variables on every host):" +
                      diff);
}

}  // namespace loom
