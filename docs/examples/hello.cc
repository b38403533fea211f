// Smallest useful loom program: every rank contributes rank+1, all-reduce sums.
// Build against an installed loom (see docs/QUICKSTART.md), then:
//   loom run -np 4 -- ./hello
#include <loom/loom.hpp>

#include <chrono>
#include <cstdio>
#include <vector>

int main() {
  // Rank, size and rendezvous come from the launcher (loom run, torchrun, mpirun...).
  auto created = loom::Communicator::CreateFromEnv();
  if (!created.ok()) {
    std::fprintf(stderr, "create: %s\n", created.status().ToString().c_str());
    return 1;
  }
  loom::Communicator& comm = **created;
  const int rank = comm.rank(), n = comm.size();

  // Blocking all-reduce, in place.
  std::vector<float> x(1000, static_cast<float>(rank + 1));
  loom::Status s = comm.AllReduce(x.data(), x.data(), x.size(), loom::DataType::kFloat32,
                                  loom::RedOp::kSum);
  if (!s.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
    return 1;
  }

  // Non-blocking broadcast from rank 0, waited for with a deadline.
  std::vector<int> step(1, rank == 0 ? 42 : -1);
  loom::Work w = comm.BroadcastAsync(step.data(), step.data(), 1, loom::DataType::kInt32, 0);
  s = w.Wait(loom::Deadline::After(std::chrono::seconds(30)));
  if (!s.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
    return 1;
  }

  std::printf("rank %d of %d: x[0] = %g (expected %g), step = %d\n", rank, n, x[0],
              n * (n + 1) / 2.0, step[0]);
  // Waits for this rank's operations, then says goodbye (the destructor would do it too).
  s = comm.Finalize();
  return s.ok() ? 0 : 1;
}
