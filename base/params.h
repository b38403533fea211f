// Every tunable parameter, declared once with type, default and doc.
//
// A parameter named X is read from LOOM_X first, then (when it has an NCCL
// twin) from NCCL_X, then from the config files (see params.cc), else its
// default. Values are read on each Get(): parameters are consulted at
// communicator creation, never on a collective's hot path.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace loom {

enum class ParamType { kInt, kBool, kString };

class Param {
 public:
  constexpr Param(const char* name, ParamType type, const char* default_value, bool nccl_twin,
                  const char* doc)
      : name_(name), type_(type), default_(default_value), nccl_twin_(nccl_twin), doc_(doc) {}

  const char* name() const { return name_; }  // without prefix, e.g. "SOCKET_IFNAME"
  ParamType type() const { return type_; }
  const char* default_value() const { return default_; }
  bool nccl_twin() const { return nccl_twin_; }
  const char* doc() const { return doc_; }

  // The raw text and where it came from: "env LOOM_X", "env NCCL_X",
  // "file <path>" or "default". An empty value anywhere counts as unset.
  // Thread-safe; reads the environment each call, the config files once.
  struct Raw {
    std::string value;
    std::string source;
  };
  Raw Lookup() const;

 private:
  const char* name_;
  ParamType type_;
  const char* default_;
  bool nccl_twin_;
  const char* doc_;
};

class IntParam : public Param {
 public:
  constexpr IntParam(const char* name, const char* def, bool nccl, const char* doc)
      : Param(name, ParamType::kInt, def, nccl, doc) {}
  // An unparsable value logs a WARN naming the variable and yields the default.
  int64_t Get() const;
};

class BoolParam : public Param {
 public:
  constexpr BoolParam(const char* name, const char* def, bool nccl, const char* doc)
      : Param(name, ParamType::kBool, def, nccl, doc) {}
  // "true", "yes", "on" (any case) and nonzero integers are true; "false",
  // "no", "off" and 0 are false; anything else logs a WARN and yields the default.
  bool Get() const;
};

class StringParam : public Param {
 public:
  constexpr StringParam(const char* name, const char* def, bool nccl, const char* doc)
      : Param(name, ParamType::kString, def, nccl, doc) {}
  std::string Get() const;
};

namespace params {
extern const IntParam kTimeoutMs;
extern const StringParam kSocketIfname;
extern const StringParam kSocketFamily;
extern const IntParam kSocketNthreads;
extern const IntParam kNsocksPerthread;
extern const BoolParam kShmDisable;
extern const BoolParam kShmSingleCopy;
extern const StringParam kShmReadPrice;
extern const StringParam kShmStream;
extern const BoolParam kShmSmall;
extern const BoolParam kP2pDisable;
extern const StringParam kP2pLevel;
extern const IntParam kCudaStagingChunk;
extern const IntParam kCudaIpcCopyBytes;
extern const StringParam kNet;
extern const BoolParam kIbDisable;
extern const StringParam kNetGdrLevel;  // GPUDirect RDMA (transports/ib/gdr.h)
extern const IntParam kNetGdrRead;
extern const BoolParam kDmabufEnable;
extern const StringParam kRequireTransport;
extern const StringParam kIbHca;
extern const IntParam kIbGidIndex;
extern const IntParam kIbTimeout;
extern const IntParam kIbRetryCnt;
extern const IntParam kBuffsize;
extern const StringParam kAlgo;
extern const StringParam kTune;
extern const StringParam kTopoFile;
extern const StringParam kTopoDumpFile;
extern const IntParam kSpinUs;
extern const IntParam kStatusPort;
extern const StringParam kDebug;
extern const StringParam kDebugSubsys;
extern const StringParam kDebugFile;

// Every declared parameter, in declaration order (for `loom info --params`).
const std::vector<const Param*>& All();

// Forgets the cached config files so the next lookup reads them again.
// For tests that write a config file or change LOOM_CONF_FILE/HOME.
void ReloadConfigFilesForTest();
}  // namespace params

}  // namespace loom
