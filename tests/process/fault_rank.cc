// A rank program for process-level fault tests, started by `loom run`:
//   fault_rank init                      create, barrier, finalize
//   fault_rank kill VICTIM ITER          all-reduce in a loop; VICTIM SIGKILLs itself at ITER
//   fault_rank split                     create, split into one sub-communicator, all-reduce
//                                        on it, finalize both
// Survivors print "rank R: <status>" and exit 3 when an operation fails;
// they ignore SIGTERM so the launcher's clean-up does not hide the error.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "loom/loom.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: fault_rank init | kill VICTIM ITER | split\n");
    return 2;
  }
  std::signal(SIGTERM, SIG_IGN);
  auto comm = loom::Communicator::CreateFromEnv();
  if (!comm.ok()) {
    std::fprintf(stderr, "create failed: %s\n", comm.status().ToString().c_str());
    return 3;
  }
  loom::Communicator& c = *comm.value();
  const std::string mode = argv[1];
  if (mode == "init") {
    loom::Status s = c.Barrier();
    if (s.ok()) s = c.Finalize();
    if (!s.ok()) std::fprintf(stderr, "rank %d: %s\n", c.rank(), s.ToString().c_str());
    return s.ok() ? 0 : 3;
  }
  if (mode == "split") {
    auto sub = c.Split(0, c.rank());
    loom::Status s = sub.status();
    int v = c.rank(), sum = 0;
    if (s.ok()) s = sub.value()->AllReduce(&v, &sum, 1, loom::DataType::kInt32, loom::RedOp::kSum);
    if (s.ok() && sum != c.size() * (c.size() - 1) / 2) s = loom::InternalError("wrong sum");
    if (s.ok()) s = sub.value()->Finalize();
    if (s.ok()) s = c.Finalize();
    if (!s.ok()) std::fprintf(stderr, "rank %d: %s\n", c.rank(), s.ToString().c_str());
    return s.ok() ? 0 : 3;
  }
  if (mode == "kill" && argc == 4) {
    const int victim = std::atoi(argv[2]);
    const int at = std::atoi(argv[3]);
    std::vector<float> buf(1 << 18, 1.0f);
    for (int i = 0;; ++i) {
      if (c.rank() == victim && i == at) std::raise(SIGKILL);
      loom::Status s =
          c.AllReduce(buf.data(), buf.data(), buf.size(), loom::DataType::kFloat32, loom::RedOp::kMax);
      if (!s.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", c.rank(), s.ToString().c_str());
        return 3;
      }
    }
  }
  std::fprintf(stderr, "fault_rank: bad arguments\n");
  return 2;
}
