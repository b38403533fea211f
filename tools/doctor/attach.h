// `loom doctor --attach`: asks each rank of a running job for its status
// (last started and completed operation per communicator) over the status
// port, then names the ranks that are missing, stopped, behind, or that
// called a different collective than the others.
//
// Status protocol (loom-status/1; the runtime side is described in
// docs/DOCTOR.md, "What the runtime must expose"). Framing as net.h: a
// 4-byte big-endian length, then JSON.
//   doctor -> rank  {"type": "status", "version": 1}
//   rank -> doctor  {"format": "loom-status", "version": 1, "rank": 3, "size": 8,
//                    "host": "node2", "pid": 1234,
//                    "comms": [{"id": "9f2c...", "rank": 3, "size": 8,
//                               "started":   {"seq": 41, "op": "AllReduce", "count": 1048576,
//                                             "dtype": "float32", "redop": "sum", "root": -1,
//                                             "peer": -1, "age_ms": 1532},
//                               "completed": {... same members, seq 40 ...},
//                               "async_error": ""}]}
// "seq" counts the operations issued on that communicator from 1; seq 0 with
// op "" means none yet. A rank answers from a thread that never takes part
// in a collective, so a rank blocked in one still answers; one that does
// not answer is stopped (SIGSTOP, a debugger) or stuck in the kernel.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "topology/json.h"
#include "tools/doctor/report.h"

namespace loom::doctor {

// One operation as a rank reports it.
struct OpRecord {
  int64_t seq = 0;  // 0: none yet
  std::string op;   // "AllReduce", "Send", ...
  int64_t count = 0;
  std::string dtype, redop;
  int root = -1, peer = -1;
  int64_t age_ms = 0;  // since it started / completed
  // Whether two ranks' records of one seq describe the same call (op,
  // count, dtype, redop, root; peer differs legitimately between ranks).
  bool SameCall(const OpRecord& o) const {
    return op == o.op && count == o.count && dtype == o.dtype && redop == o.redop && root == o.root;
  }
};

struct CommStatus {
  std::string id;  // communicator id, equal on all its ranks
  int rank = -1, size = 0;
  OpRecord started, completed;
  std::string async_error;
};

// What asking one endpoint gave.
struct RankStatus {
  std::string endpoint;        // "host:port" as given
  enum class Answer { kAnswered, kNoConnection, kNoAnswer, kBadAnswer } answer = Answer::kNoConnection;
  std::string detail;          // connect error / timeout text / parse error
  int rank = -1, size = 0;     // when answered
  std::string host;
  int pid = 0;
  std::vector<CommStatus> comms;
};

// Parses a loom-status/1 reply into `out` (answer kAnswered). InvalidArgument
// naming the member on anything else.
Status ParseStatusReply(const json::Value& v, RankStatus* out);

// Asks one "host:port" (host numeric or a name) within timeout_ms for the
// connect and timeout_ms again for the reply. Never fails: the outcome is
// in RankStatus::answer. Blocks up to about 2 x timeout_ms.
RankStatus QueryStatus(const std::string& endpoint, int timeout_ms);

// Endpoints from "--attach" text: comma-separated "host:port", where
// "host:port+N" means N consecutive ports (one per local rank) from port.
// InvalidArgument naming the bad item.
Result<std::vector<std::string>> ParseEndpoints(const std::string& text);

// Judges the answers (pure). stall_ms: an operation started this long ago
// and not completed anywhere counts as stalled.
std::vector<Finding> AnalyzeAttach(const std::vector<RankStatus>& ranks, int64_t stall_ms);

}  // namespace loom::doctor
