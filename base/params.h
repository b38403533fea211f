// Every tunable parameter, declared once with type, default and doc.
//
// A parameter named X is read from LOOM_X first, then (when it has an NCCL
// twin) from NCCL_X, then from the config files (see params.cc), else its
// default. Values are read on each Get(): parameters are consulted at
// communicator creation, never on a collective's hot path.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace loom {

enum class ParamType { kInt, kBool, kString };

class Param {
 public:
  constexpr Param(const char* name, ParamType type, const char* default_value, bool nccl_twin,
                  const char* doc, int64_t min = std::numeric_limits<int64_t>::min(),
                  int64_t max = std::numeric_limits<int64_t>::max())
      : name_(name), type_(type), default_(default_value), nccl_twin_(nccl_twin), doc_(doc),
        min_(min), max_(max) {}

  const char* name() const { return name_; }  // without prefix, e.g. "SOCKET_IFNAME"
  ParamType type() const { return type_; }
  const char* default_value() const { return default_; }
  bool nccl_twin() const { return nccl_twin_; }
  const char* doc() const { return doc_; }
  // The accepted range of an integer parameter (inclusive).
  int64_t min() const { return min_; }
  int64_t max() const { return max_; }

  // The raw text and where it came from: "env LOOM_X", "env NCCL_X",
  // "file <path>" or "default". An empty value anywhere counts as unset.
  // Thread-safe; reads the environment each call, the config files once.
  struct Raw {
    std::string value;
    std::string source;
  };
  Raw Lookup() const;
  // The current value checked: kInvalidArgument naming the variable, its
  // value, where it came from and what is accepted when an integer or a
  // boolean is malformed or an integer is outside [min, max]. Strings are
  // checked by the grammar that parses them. Thread-safe.
  Status Check() const;

 private:
  const char* name_;
  ParamType type_;
  const char* default_;
  bool nccl_twin_;
  const char* doc_;
  int64_t min_;
  int64_t max_;
};

class IntParam : public Param {
 public:
  // Every integer parameter says which values it accepts, [min, max].
  constexpr IntParam(const char* name, const char* def, bool nccl, const char* doc, int64_t min,
                     int64_t max)
      : Param(name, ParamType::kInt, def, nccl, doc, min, max) {}
  // A value that Check() refuses logs a WARN naming the variable and yields
  // the default (a communicator refuses it at creation: params::CheckAll).
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
// Check() of every parameter: OK, or kInvalidArgument naming every bad one.
// Communicator creation calls it first, so a bad setting fails at once.
Status CheckAll();

// Forgets the cached config files so the next lookup reads them again.
// For tests that write a config file or change LOOM_CONF_FILE/HOME.
void ReloadConfigFilesForTest();
}  // namespace params

}  // namespace loom
