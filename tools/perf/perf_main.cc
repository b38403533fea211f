// `loom perf <collective> [flags]`: nccl-tests compatible bandwidth test.
// Started once per rank by a launcher; rank 0 prints the table.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "loom/loom.hpp"
#include "tools/commands.h"
#include "tools/perf/bench.h"
#include "tools/perf/options.h"
#include "tools/perf/plot.h"
#include "tools/perf/report.h"
#include "tools/perf/watchdog.h"

namespace loom::perf {
namespace {

// Exit codes: 0 success, 1 a data check failed, 2 bad usage, 3 runtime error.
constexpr int kExitWrongData = 1;
constexpr int kExitUsage = 2;
constexpr int kExitError = 3;

// True when a launcher set a rank variable that Communicator::CreateFromEnv reads.
bool UnderLauncher() {
  for (const char* name :
       {"LOOM_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

Result<std::unique_ptr<Communicator>> CreateCommunicator() {
  CommConfig config;
  config.name = "loom-perf";
  if (UnderLauncher()) return Communicator::CreateFromEnv(config);
  // No launcher: a world of one, with this process as the store host.
  LOOM_ASSIGN_OR_RETURN(const UniqueId id, UniqueId::Create());
  return Communicator::Create(id, 0, 1, config);
}

// Every rank's pid and host name, in rank order (for the "# Using devices" block).
Result<std::vector<RankInfo>> GatherRankInfo(Communicator& comm) {
  struct Record {
    int32_t pid;
    char host[60];
  };
  static_assert(sizeof(Record) == 64);
  Record mine{};
  mine.pid = static_cast<int32_t>(getpid());
  if (gethostname(mine.host, sizeof(mine.host) - 1) != 0) {
    std::strncpy(mine.host, "unknown", sizeof(mine.host) - 1);
  }
  // nccl-tests shows the short host name.
  if (char* dot = std::strchr(mine.host, '.')) *dot = '\0';
  std::vector<Record> all(static_cast<size_t>(comm.size()));
  LOOM_TRY(comm.AllGather(&mine, all.data(), sizeof(Record), DataType::kUint8));
  std::vector<RankInfo> out;
  for (int r = 0; r < comm.size(); ++r) {
    const Record& rec = all[static_cast<size_t>(r)];
    out.push_back({r, rec.pid, std::string(rec.host, strnlen(rec.host, sizeof(rec.host)))});
  }
  return out;
}

// -M: what nccl-tests' memory report says for device memory, for host memory.
std::string MemoryReport(size_t buffer_bytes) {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return "# Memory: 2 buffers of " + std::to_string(buffer_bytes) +
         " bytes (send, receive) per rank; rank 0's peak resident set " +
         std::to_string(usage.ru_maxrss / 1024) + " MiB\n";
}

// The whole run on this rank; *rows collects every row (used by rank 0).
Status Run(Communicator& comm, const PerfOptions& options, Watchdog& watchdog, FILE* table,
           std::vector<Row>* rows) {
  const bool printer = comm.rank() == 0;
  LOOM_ASSIGN_OR_RETURN(const std::vector<RankInfo> ranks, GatherRankInfo(comm));
  if (printer) {
    std::fputs(FormatRunHeader(options, ranks).c_str(), table);
    if (options.agg_iters > 1) {
      std::fprintf(table, "# -m %d: each timed iteration issues %d calls in one group\n#\n",
                   options.agg_iters, options.agg_iters);
    }
    std::fflush(table);
  }
  const size_t buffer_bytes = Bench::BufferBytes(options);
  const bool shared = options.local_register > 0;
  LOOM_ASSIGN_OR_RETURN(HostBuffer send, HostBuffer::Allocate(buffer_bytes, shared));
  LOOM_ASSIGN_OR_RETURN(HostBuffer recv, HostBuffer::Allocate(buffer_bytes, shared));
  Bench bench(comm, options, send, recv, watchdog);
  for (const Collective c : options.collectives) {
    if (printer) {
      std::fputs(FormatTableHeader(c, options.report_cputime, options.report_timestamps).c_str(),
                 table);
      // As nccl-tests, under the table header, without "#".
      if (const auto skip = SkipReason(c, comm.size())) std::fprintf(table, "%s\n", skip->c_str());
    }
    LOOM_TRY(bench.Run(c, [&](const Row& row) {
      rows->push_back(row);
      if (printer) {
        std::fputs(FormatRow(row, options.report_cputime).c_str(), table);
        std::fflush(table);
      }
    }));
  }
  if (printer && options.memory_report) std::fputs(MemoryReport(buffer_bytes).c_str(), table);
  return Status::Ok();
}

// Writes text to `path` ("-" = stdout); `what` names the flag in errors.
Status WriteOutput(const std::string& what, const std::string& path, const std::string& text) {
  if (path == "-") {
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
    return Status::Ok();
  }
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return SystemError("loom perf: cannot write " + what + " " + path, errno);
  const bool written = std::fputs(text.c_str(), f) >= 0;
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) return SystemError("loom perf: writing " + what + " " + path, errno);
  return Status::Ok();
}

// `loom perf --plot FILE.svg --from A.json ...`: no communicator, no run.
int PlotSavedRuns(const PerfOptions& options) {
  std::vector<PlotRun> runs;
  for (const std::string& path : options.plot_from) {
    auto run = ReadPlotRun(path);
    if (!run.ok()) {
      std::fprintf(stderr, "loom perf: %s\n", run.status().message().c_str());
      return kExitUsage;
    }
    runs.push_back(std::move(run).value());
  }
  const Status written = WriteOutput("--plot", options.plot_path, RenderPlot(runs));
  if (!written.ok()) {
    std::fprintf(stderr, "%s\n", written.ToString().c_str());
    return kExitError;
  }
  return 0;
}

}  // namespace
}  // namespace loom::perf

namespace loom::tools {

// Entry point of `loom perf`; argv[0] is "perf" (the subcommand), flags follow.
int PerfMain(int argc, char** argv) {
  using namespace loom::perf;
  auto parsed = ParseOptions(argc, argv, 1);
  if (!parsed.ok()) {
    std::fprintf(stderr, "loom perf: %s (loom perf --help lists the flags)\n",
                 parsed.status().message().c_str());
    return kExitUsage;
  }
  const PerfOptions& options = parsed.value();
  if (options.help) {
    std::fputs(Usage().c_str(), stdout);
    return 0;
  }
  if (!options.plot_from.empty()) return PlotSavedRuns(options);
  // With --json - stdout carries only the JSON; the table moves to stderr.
  FILE* table = options.json_path == "-" ? stderr : stdout;

  auto comm = CreateCommunicator();
  if (!comm.ok()) {
    std::fprintf(stderr, "loom perf: cannot create the communicator: %s\n",
                 comm.status().ToString().c_str());
    return kExitError;
  }
  std::vector<Row> rows;
  Communicator* raw = comm->get();
  Watchdog watchdog(std::chrono::seconds(options.timeout_s), [raw] { raw->Abort(); });
  const Status run = Run(**comm, options, watchdog, table, &rows);
  if (!run.ok()) {
    if (watchdog.Expired()) {
      // nccl-tests' words, then what the aborted operation reported.
      std::fprintf(stderr,
                   "loom perf: rank %d on %s: Test timeout (%ds): an operation took "
                   "longer than -T; the communicator was aborted (%s)\n",
                   (*comm)->rank(), (*comm)->host().c_str(), options.timeout_s,
                   run.ToString().c_str());
    } else {
      std::fprintf(stderr, "loom perf: rank %d: %s\n", (*comm)->rank(), run.ToString().c_str());
    }
    (*comm)->Abort();
    return kExitError;
  }
  const int nranks = (*comm)->size();
  const Summary summary = Summarize(rows, nranks);
  if ((*comm)->rank() == 0) {
    std::fputs(FormatSummary(summary).c_str(), table);
    std::fflush(table);
    if (!options.json_path.empty()) {
      const Status written =
          WriteOutput("--json", options.json_path, FormatJson(options, nranks, rows, summary));
      if (!written.ok()) {
        std::fprintf(stderr, "%s\n", written.ToString().c_str());
        return kExitError;
      }
    }
    if (!options.plot_path.empty()) {
      const Status written =
          WriteOutput("--plot", options.plot_path, RenderPlot({PlotRunFromRows("", nranks, rows)}));
      if (!written.ok()) {
        std::fprintf(stderr, "%s\n", written.ToString().c_str());
        return kExitError;
      }
    }
  }
  // No rank exits before rank 0 has written everything: `loom run` (like
  // mpirun) stops the job when the first rank exits non-zero, and rank 0,
  // still writing its last row and the summary, lost them (seen once in 300
  // runs of tests/process perf_detects_corruption next to another job).
  if (const Status done = (*comm)->Barrier(); !done.ok()) {
    std::fprintf(stderr, "loom perf: rank %d: final barrier: %s\n", (*comm)->rank(),
                 done.ToString().c_str());
    return kExitError;
  }
  const Status finalized = (*comm)->Finalize();
  if (!finalized.ok()) {
    std::fprintf(stderr, "loom perf: rank %d: finalize: %s\n", (*comm)->rank(),
                 finalized.ToString().c_str());
    return kExitError;
  }
  // Every rank saw the same all-reduced #wrong, so every rank exits alike.
  return summary.out_of_bounds > 0 ? kExitWrongData : 0;
}

}  // namespace loom::tools
