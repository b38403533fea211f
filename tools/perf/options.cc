// Parsing of `loom perf` flags (nccl-tests spelling) and the size sequence.
#include "tools/perf/options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace loom::perf {
namespace {

// Every flag: nccl-tests' (short letter and long name) and loom's own
// (long only, short = 0).
enum class Flag {
  kThreads,
  kGpus,
  kMinBytes,
  kMaxBytes,
  kStepBytes,
  kStepFactor,
  kIters,
  kAggIters,
  kWarmupIters,
  kRunCycles,
  kParallelInit,
  kCheck,
  kOp,
  kDataType,
  kRoot,
  kBlocking,
  kStreamNull,
  kTimeout,
  kCudaGraph,
  kReportCputime,
  kReportTimestamps,
  kOutputFile,
  kAverage,
  kLocalRegister,
  kCtaPolicy,
  kDeviceImpl,
  kDeviceCtaCount,
  kMemory,
  kUnalign,
  kPerIterTiming,
  kPerIterSkip,
  kHelp,
  // loom's own
  kJson,
  kPlot,
  kFrom,
  kCorruptForTest,
  kFixedBuffers,
  kBackToBack,
  kWarmupPerSize,
  kRewriteInputs,
};

struct FlagSpec {
  Flag id;
  char short_name;  // 0: long form only
  std::string_view long_name;
  bool takes_value;
};

constexpr FlagSpec kFlags[] = {
    {Flag::kThreads, 't', "nthreads", true},
    {Flag::kGpus, 'g', "ngpus", true},
    {Flag::kMinBytes, 'b', "minbytes", true},
    {Flag::kMaxBytes, 'e', "maxbytes", true},
    {Flag::kStepBytes, 'i', "stepbytes", true},
    {Flag::kStepFactor, 'f', "stepfactor", true},
    {Flag::kIters, 'n', "iters", true},
    {Flag::kAggIters, 'm', "agg_iters", true},
    {Flag::kWarmupIters, 'w', "warmup_iters", true},
    {Flag::kRunCycles, 'N', "run_cycles", true},
    {Flag::kParallelInit, 'p', "parallel_init", true},
    {Flag::kCheck, 'c', "check", true},
    {Flag::kOp, 'o', "op", true},
    {Flag::kDataType, 'd', "datatype", true},
    {Flag::kRoot, 'r', "root", true},
    {Flag::kBlocking, 'z', "blocking", true},
    {Flag::kStreamNull, 'y', "stream_null", true},
    {Flag::kTimeout, 'T', "timeout", true},
    {Flag::kCudaGraph, 'G', "cudagraph", true},
    {Flag::kReportCputime, 'C', "report_cputime", true},
    {Flag::kReportTimestamps, 'S', "report_timestamps", true},
    {Flag::kOutputFile, 'J', "output_file", true},
    {Flag::kAverage, 'a', "average", true},
    {Flag::kLocalRegister, 'R', "local_register", true},
    {Flag::kCtaPolicy, 'x', "cta_policy", true},
    {Flag::kDeviceImpl, 'D', "device_implementation", true},
    {Flag::kDeviceCtaCount, 'V', "device_cta_count", true},
    {Flag::kMemory, 'M', "memory", true},
    {Flag::kUnalign, 'u', "unalign", true},
    {Flag::kPerIterTiming, 'I', "per_iter_timing", true},
    {Flag::kPerIterSkip, 'K', "per_iter_skip", true},
    {Flag::kHelp, 'h', "help", false},
    {Flag::kJson, 0, "json", true},
    {Flag::kPlot, 0, "plot", true},
    {Flag::kFrom, 0, "from", true},
    {Flag::kCorruptForTest, 0, "corrupt-for-test", false},
    {Flag::kFixedBuffers, 0, "fixed-buffers", false},
    {Flag::kBackToBack, 0, "back-to-back", true},
    {Flag::kWarmupPerSize, 0, "warmup-per-size", true},
    {Flag::kRewriteInputs, 0, "rewrite-inputs", true},
};

const FlagSpec* FindShort(char letter) {
  for (const FlagSpec& f : kFlags) {
    if (f.short_name != 0 && f.short_name == letter) return &f;
  }
  return nullptr;
}

const FlagSpec* FindLong(std::string_view name) {
  for (const FlagSpec& f : kFlags) {
    if (f.long_name == name) return &f;
  }
  return nullptr;
}

// strtol(…, 0)-style integer (decimal, 0x hex), the whole word, in [lo, hi].
Result<long> ParseInt(std::string_view flag, const std::string& text, long lo, long hi) {
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 0);
  if (text.empty() || *end != '\0' || errno == ERANGE) {
    return InvalidArgument("-" + std::string(flag) + ": '" + text + "' is not an integer");
  }
  if (v < lo || v > hi) {
    return InvalidArgument("-" + std::string(flag) + ": " + text + " is outside [" +
                           std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return v;
}

Result<std::vector<PerfOp>> ParseOps(const std::string& text) {
  if (text == "all") {
    // nccl-tests' order for -o all.
    return std::vector<PerfOp>{RedOp::kSum, RedOp::kProd, RedOp::kMax,
                               RedOp::kMin, RedOp::kAvg,  PerfOp::MulSum()};
  }
  if (text == "mulsum") return std::vector<PerfOp>{PerfOp::MulSum()};
  for (int i = 0; i < kNumRedOps; ++i) {
    if (Name(static_cast<RedOp>(i)) == text) return std::vector<PerfOp>{static_cast<RedOp>(i)};
  }
  return InvalidArgument("-o: unknown operator '" + text +
                         "' (sum, prod, min, max, avg, mulsum, all)");
}

Result<std::vector<DataType>> ParseTypes(const std::string& text) {
  std::vector<DataType> all;
  for (int i = 0; i < kNumDataTypes; ++i) {
    const auto t = static_cast<DataType>(i);
    if (Name(t) == text) return std::vector<DataType>{t};
    all.push_back(t);
  }
  if (text == "all") return all;
  return InvalidArgument("-d: unknown datatype '" + text +
                         "' (int8, uint8, int32, uint32, int64, uint64, half, float, double, "
                         "bfloat16, all)");
}

// The spelling of a flag in messages: "-b" or "--json".
std::string Spelling(const FlagSpec& flag) {
  return flag.short_name != 0 ? std::string("-") + flag.short_name
                              : "--" + std::string(flag.long_name);
}

// Applies one flag's value to the options.
Status Apply(const FlagSpec& flag, const std::string& value, PerfOptions& o) {
  constexpr long kIntMax = std::numeric_limits<int>::max();
  const std::string name = Spelling(flag).substr(1);  // ParseInt adds the '-'
  auto as_int = [&](long lo, long hi) { return ParseInt(name, value, lo, hi); };
  // A device-only flag: the value must be valid; a note says it changes nothing.
  // A flag given twice keeps one note, its last.
  auto note_if = [&](bool applies, const std::string& why) {
    const std::string prefix = Spelling(flag) + " ";
    std::erase_if(o.notes, [&](const std::string& n) { return n.starts_with(prefix); });
    if (applies) o.notes.push_back(prefix + value + ": " + why);
  };
  switch (flag.id) {
    case Flag::kThreads:
    case Flag::kGpus: {
      LOOM_ASSIGN_OR_RETURN(long v, as_int(1, kIntMax));
      if (v != 1) {
        return InvalidArgument(Spelling(flag) + " " + value +
                               ": loom perf runs one rank per process; start more ranks with a "
                               "launcher (loom run -np N, mpirun, srun, torchrun)");
      }
      return Status::Ok();
    }
    case Flag::kMinBytes: {
      LOOM_ASSIGN_OR_RETURN(o.min_bytes, ParseSize(value));
      return Status::Ok();
    }
    case Flag::kMaxBytes: {
      LOOM_ASSIGN_OR_RETURN(o.max_bytes, ParseSize(value));
      return Status::Ok();
    }
    case Flag::kStepBytes: {
      LOOM_ASSIGN_OR_RETURN(o.step_bytes, ParseSize(value));
      return Status::Ok();
    }
    case Flag::kStepFactor: {
      LOOM_ASSIGN_OR_RETURN(long v, as_int(0, kIntMax));
      o.step_factor = static_cast<size_t>(v);
      return Status::Ok();
    }
    case Flag::kIters: {
      LOOM_ASSIGN_OR_RETURN(long v, as_int(1, kIntMax));
      o.iters = static_cast<int>(v);
      return Status::Ok();
    }
    case Flag::kAggIters: {
      LOOM_ASSIGN_OR_RETURN(long v, as_int(1, kIntMax));
      o.agg_iters = static_cast<int>(v);
      return Status::Ok();
    }
    case Flag::kWarmupIters: {
      LOOM_ASSIGN_OR_RETURN(long v, as_int(0, kIntMax));
      o.warmup_iters = static_cast<int>(v);
      return Status::Ok();
    }
    case Flag::kRunCycles: {
      LOOM_ASSIGN_OR_RETURN(long v, as_int(0, kIntMax));
      o.run_cycles = static_cast<int>(v);
      return Status::Ok();
    }
    case Flag::kParallelInit: {
      LOOM_ASSIGN_OR_RETURN(long v, as_int(0, 1));
      o.parallel_init = static_cast<int>(v);
      return Status::Ok();
    }
    case Flag::kCheck: {
      LOOM_ASSIGN_OR_RETURN(long v, as_int(0, kIntMax));
      o.check = static_cast<int>(v);
      return Status::Ok();
    }
    case Flag::kOp: {
      LOOM_ASSIGN_OR_RETURN(o.ops, ParseOps(value));
      return Status::Ok();
    }
    case Flag::kDataType: {
      LOOM_ASSIGN_OR_RETURN(o.types, ParseTypes(value));
      return Status::Ok();
    }
    case Flag::kRoot: {
      LOOM_ASSIGN_OR_RETURN(long v, as_int(-1, kIntMax));
      o.root = static_cast<int>(v);
      return Status::Ok();
    }
    case Flag::kBlocking: {
      LOOM_ASSIGN_OR_RETURN(long v, as_int(0, 3));
      o.blocking = static_cast<int>(v);
      return Status::Ok();
    }
    case Flag::kTimeout: {
      LOOM_ASSIGN_OR_RETURN(long v, as_int(0, kIntMax));
      o.timeout_s = static_cast<int>(v);
      return Status::Ok();
    }
    case Flag::kCudaGraph: {
      LOOM_ASSIGN_OR_RETURN(long v, as_int(0, kIntMax));
      o.cudagraph = static_cast<int>(v);
      // loom perf measures host buffers only: there is no stream to capture.
      note_if(v > 0, "CUDA graphs do not apply to host buffers; every call is issued directly");
      return Status::Ok();
    }
    case Flag::kReportCputime: {
      LOOM_ASSIGN_OR_RETURN(long v, as_int(0, 1));
      o.report_cputime = v == 1;
      return Status::Ok();
    }
    case Flag::kReportTimestamps: {
      LOOM_ASSIGN_OR_RETURN(long v, as_int(0, 1));
      o.report_timestamps = v == 1;
      return Status::Ok();
    }
    case Flag::kAverage: {
      LOOM_ASSIGN_OR_RETURN(long v, as_int(0, 3));
      o.average = static_cast<int>(v);
      return Status::Ok();
    }
    case Flag::kLocalRegister: {
      LOOM_ASSIGN_OR_RETURN(long v, as_int(0, 2));
      o.local_register = static_cast<int>(v);
      return Status::Ok();
    }
    case Flag::kMemory: {
      LOOM_ASSIGN_OR_RETURN(long v, as_int(0, 1));
      o.memory_report = v == 1;
      return Status::Ok();
    }
    case Flag::kUnalign: {
      // nccl-tests pads its buffers by 8 bytes per element of misalignment.
      LOOM_ASSIGN_OR_RETURN(long v, as_int(0, 1 << 20));
      o.unalign = static_cast<int>(v);
      return Status::Ok();
    }
    case Flag::kStreamNull: {
      LOOM_ASSIGN_OR_RETURN(long v, as_int(0, 1));
      note_if(v != 0, "no CUDA stream is used with host buffers");
      return Status::Ok();
    }
    case Flag::kCtaPolicy: {
      LOOM_ASSIGN_OR_RETURN(long v, as_int(0, 2));
      (void)v;
      note_if(true, "CTA policies apply to NCCL's GPU kernels; host collectives have none");
      return Status::Ok();
    }
    case Flag::kDeviceImpl: {
      LOOM_ASSIGN_OR_RETURN(long v, as_int(0, kIntMax));
      note_if(v != 0,
              "device-side implementations need GPU buffers; loom's host "
              "implementation runs");
      return Status::Ok();
    }
    case Flag::kDeviceCtaCount: {
      LOOM_ASSIGN_OR_RETURN(long v, as_int(1, 128));
      (void)v;
      note_if(true, "CTA counts apply to -D device implementations only");
      return Status::Ok();
    }
    case Flag::kPerIterTiming: {
      LOOM_ASSIGN_OR_RETURN(long v, as_int(0, 1));
      note_if(v != 0,
              "per-iteration timing (i_min/i_max/i_p99/i_cv% columns) is not "
              "implemented; the loop is timed as a whole");
      return Status::Ok();
    }
    case Flag::kPerIterSkip: {
      LOOM_ASSIGN_OR_RETURN(long v, as_int(0, kIntMax));
      note_if(v != 0, "applies to -I per-iteration timing, which is not implemented");
      return Status::Ok();
    }
    case Flag::kOutputFile:
      if (value.empty()) return InvalidArgument("-J needs a file name");
      o.json_path = value;
      note_if(true,
              "written as loom perf's --json (see docs/PERF_TOOL.md), "
              "not in nccl-tests' JSON schema");
      return Status::Ok();
    case Flag::kJson:
      if (value.empty()) return InvalidArgument("--json needs a file name or '-'");
      o.json_path = value;
      return Status::Ok();
    case Flag::kPlot:
      if (value.empty()) return InvalidArgument("--plot needs a file name");
      o.plot_path = value;
      return Status::Ok();
    case Flag::kFrom:
      if (value.empty()) return InvalidArgument("--from needs a --json file");
      o.plot_from.push_back(value);
      return Status::Ok();
    case Flag::kHelp:
      o.help = true;
      return Status::Ok();
    case Flag::kCorruptForTest:
      o.corrupt_for_test = true;
      return Status::Ok();
    case Flag::kFixedBuffers:
      o.fixed_buffers = true;
      return Status::Ok();
    case Flag::kBackToBack: {
      LOOM_ASSIGN_OR_RETURN(long v, as_int(0, 1));
      o.back_to_back = v == 1;
      return Status::Ok();
    }
    case Flag::kWarmupPerSize: {
      LOOM_ASSIGN_OR_RETURN(long v, as_int(0, 1));
      o.warmup_per_size = v == 1;
      return Status::Ok();
    }
    case Flag::kRewriteInputs: {
      LOOM_ASSIGN_OR_RETURN(long v, as_int(0, 1));
      o.rewrite_inputs = v == 1;
      return Status::Ok();
    }
  }
  return InternalError("unhandled flag");
}

// Cross-flag rules that nccl-tests either checks or would loop forever on.
Status Validate(const PerfOptions& o) {
  if (o.min_bytes > o.max_bytes) {
    return InvalidArgument("invalid sizes for 'minbytes' and 'maxbytes': " +
                           std::to_string(o.min_bytes) + " > " + std::to_string(o.max_bytes));
  }
  if (o.step_factor > 1 && o.min_bytes == 0 && o.max_bytes > 0) {
    return InvalidArgument("-f " + std::to_string(o.step_factor) +
                           " with -b 0 never grows; give -b >= 1");
  }
  if (o.step_factor <= 1 && o.step_bytes == 0 && o.min_bytes < o.max_bytes) {
    return InvalidArgument("-i 0 without -f > 1 never grows; give -i >= 1 or -f >= 2");
  }
  if (o.back_to_back && o.blocking != 0) {
    return InvalidArgument("--back-to-back 1 and -z " + std::to_string(o.blocking) +
                           " exclude each other (-z sets its own waits and barriers; "
                           "--back-to-back goes straight on)");
  }
  if (o.back_to_back && o.agg_iters > 1) {
    return InvalidArgument("--back-to-back 1 and -m " + std::to_string(o.agg_iters) +
                           " exclude each other (-m groups calls; --back-to-back issues each "
                           "on its own)");
  }
  if (o.rewrite_inputs && !o.back_to_back && o.blocking == 0) {
    return InvalidArgument(
        "--rewrite-inputs 1 needs --back-to-back 1 or -z 1 (a call in flight "
        "may still be reading the input it would rewrite)");
  }
  if (!o.plot_from.empty() && !o.collectives.empty()) {
    return InvalidArgument("--from plots saved --json runs: give no collective with it");
  }
  if (!o.plot_from.empty() && o.plot_path.empty()) {
    return InvalidArgument("--from needs --plot FILE.svg to say where the picture goes");
  }
  return Status::Ok();
}

}  // namespace

Result<size_t> ParseSize(std::string_view text) {
  const std::string s(text);
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end == s.c_str() || errno == ERANGE || !std::isfinite(v) || v < 0) {
    return InvalidArgument("invalid size '" + s + "' (bytes, optionally with K, M or G)");
  }
  double units = 1;
  std::string_view rest(end);
  if (!rest.empty()) {
    switch (rest.front()) {
      case 'K':
      case 'k':
        units = 1024.0;
        break;
      case 'M':
      case 'm':
        units = 1024.0 * 1024;
        break;
      case 'G':
      case 'g':
        units = 1024.0 * 1024 * 1024;
        break;
      default:
        return InvalidArgument("invalid size '" + s + "': unknown suffix '" + std::string(rest) +
                               "' (K, M or G)");
    }
    rest.remove_prefix(1);
    if (!rest.empty()) {
      return InvalidArgument("invalid size '" + s + "': junk after the suffix");
    }
  }
  const double bytes = v * units;
  if (bytes >= 0x1p63) return InvalidArgument("invalid size '" + s + "': too large");
  return static_cast<size_t>(bytes);
}

Result<PerfOptions> ParseOptions(int argc, const char* const* argv, int first) {
  PerfOptions o;
  bool have_collective = false;
  for (int i = first; i < argc; ++i) {
    const std::string_view word(argv[i]);
    const FlagSpec* flag = nullptr;
    std::optional<std::string> glued;  // value written in the same word
    if (word.starts_with("--") && word.size() > 2) {
      std::string_view body = word.substr(2);
      if (const size_t eq = body.find('='); eq != std::string_view::npos) {
        glued = std::string(body.substr(eq + 1));
        body = body.substr(0, eq);
      }
      flag = FindLong(body);
    } else if (word.size() >= 2 && word[0] == '-' && word[1] != '-') {
      flag = FindShort(word[1]);
      if (word.size() > 2) {
        std::string_view v = word.substr(2);
        if (v.starts_with('=')) v.remove_prefix(1);
        glued = std::string(v);
      }
    } else if (!word.starts_with('-') && !have_collective) {
      if (word == "all") {
        for (int c = 0; c < kNumCollectives; ++c) {
          o.collectives.push_back(static_cast<Collective>(c));
        }
      } else {
        const auto c = ParseCollective(word);
        if (!c) {
          return InvalidArgument("unknown collective '" + std::string(word) +
                                 "' (all_reduce, reduce_scatter, all_gather, broadcast, reduce, "
                                 "alltoall, sendrecv, gather, scatter, hypercube, all)");
        }
        o.collectives.push_back(*c);
      }
      have_collective = true;
      continue;
    }
    if (flag == nullptr) {
      return InvalidArgument("unknown argument '" + std::string(word) + "' (see --help)");
    }
    std::string value;
    if (flag->takes_value) {
      if (glued) {
        value = *glued;
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return InvalidArgument("'" + std::string(word) + "' needs a value");
      }
    } else if (glued) {
      return InvalidArgument("'" + std::string(word) + "' takes no value");
    }
    LOOM_TRY(Apply(*flag, value, o));
  }
  if (o.help) return o;
  if (!have_collective && o.plot_from.empty()) {
    return InvalidArgument("missing collective: loom perf <all_reduce|...|all> [flags]");
  }
  LOOM_TRY(Validate(o));
  return o;
}

std::vector<size_t> SizeSequence(const PerfOptions& o) {
  std::vector<size_t> sizes;
  for (size_t size = o.min_bytes; size <= o.max_bytes;) {
    sizes.push_back(size);
    const size_t next = o.step_factor > 1 ? size * o.step_factor : size + o.step_bytes;
    // Stops on overflow and on steps that would not move (Validate rejects
    // those, but a sequence must end whatever it is given).
    if (next <= size) break;
    size = next;
  }
  return sizes;
}

std::string Usage() {
  return "USAGE: loom perf <collective> [flags]\n"
         "       loom perf --plot FILE.svg --from A.json [--from B.json ...]\n"
         "  collective: all_reduce, reduce_scatter, all_gather, broadcast, reduce, alltoall,\n"
         "              sendrecv, gather, scatter, hypercube, or all (nccl-tests names such as\n"
         "              all_reduce_perf work too)\n"
         "  Start one process per rank with a launcher (loom run -np N -- loom perf ...,\n"
         "  mpirun, srun, torchrun); without one it runs a single rank.\n"
         "\t[-t,--nthreads <num threads>] (only 1)\n"
         "\t[-g,--ngpus <gpus per thread>] (only 1)\n"
         "\t[-b,--minbytes <min size in bytes>] (K/M/G suffixes, default 32M)\n"
         "\t[-e,--maxbytes <max size in bytes>] (default 32M)\n"
         "\t[-i,--stepbytes <increment size>] (default 1M)\n"
         "\t[-f,--stepfactor <increment factor>] (default 1: use -i)\n"
         "\t[-n,--iters <iteration count>] (default 20)\n"
         "\t[-m,--agg_iters <aggregated iteration count>] (default 1)\n"
         "\t[-w,--warmup_iters <warmup iteration count>] (default 5)\n"
         "\t[-N,--run_cycles <cycle count>] (run and print the sweep N times; 0 = until\n"
         "\t                   stopped; default 1)\n"
         "\t[-p,--parallel_init <0/1>] (accepted, no effect)\n"
         "\t[-c,--check <check iteration count>] (default 1; 0: no check)\n"
         "\t[-o,--op <sum/prod/min/max/avg/mulsum/all>] (default sum)\n"
         "\t[-d,--datatype <int8/uint8/int32/uint32/int64/uint64/half/float/double/bfloat16/all>]"
         " (default float)\n"
         "\t[-r,--root <root>] (default 0; -1: every rank in turn)\n"
         "\t[-z,--blocking <0/1/2/3>] (0: issue all iterations, then wait; 1: wait and\n"
         "\t                   barrier after each call; 2: wait after each call; 3: wait\n"
         "\t                   after each iteration and barrier, timing the calls only)\n"
         "\t[-y,--stream_null <0/1>] (accepted; no streams with host buffers)\n"
         "\t[-T,--timeout <seconds>] (abort when one operation takes longer; default 0: off)\n"
         "\t[-G,--cudagraph <num graph launches>] (accepted; CUDA graphs do not apply to host\n"
         "\t                   buffers)\n"
         "\t[-C,--report_cputime <0/1>] (1: the time column is the time the calls took to\n"
         "\t                   issue on this rank's thread, before waiting; default 0)\n"
         "\t[-S,--report_timestamps <0/1>] (1: a timestamp at the end of each row)\n"
         "\t[-J,--output_file <file>] (the --json output)\n"
         "\t[-a,--average <0/1/2/3> report iteration time of rank 0/avg/min/max] (default 1)\n"
         "\t[-R,--local_register <0/1/2>] (1 or 2: send and recv buffers in shareable memory,\n"
         "\t                   loom::AllocShared, which ranks of one host read without copies;\n"
         "\t                   default 0)\n"
         "\t[-x,--cta_policy <0/1/2>] (accepted; no CTAs on host buffers)\n"
         "\t[-D,--device_implementation <n>] (accepted; loom's host implementation runs)\n"
         "\t[-V,--device_cta_count <n>] (accepted; no CTAs on host buffers)\n"
         "\t[-M,--memory <0/1>] (1: buffer memory and peak resident set after the run)\n"
         "\t[-u,--unalign <elements>] (buffers start this many elements past alignment)\n"
         "\t[-I,--per_iter_timing <0/1>] (accepted; not implemented)\n"
         "\t[-K,--per_iter_skip <count>] (accepted; not implemented)\n"
         "\t[--json <file|->] (every row as JSON; '-' = stdout, the table then goes to stderr)\n"
         "\t[--plot <file.svg>] (bus bandwidth and time against size as an SVG picture)\n"
         "\t[--from <file.json>] (repeatable, with --plot and no collective: draw saved\n"
         "\t                   --json runs in one picture, one line per collective per run)\n"
         "\t[--fixed-buffers] (every iteration at the buffers' start, as MPI and Gloo benchmarks\n"
         "\t                   do, instead of walking through them like nccl-tests)\n"
         "\t[--back-to-back <0/1>] (1: every iteration one blocking call, straight after the\n"
         "\t                   last, no barrier: as MPI and Gloo benchmarks time, and what\n"
         "\t                   nccl.h calls on host buffers are; default 0)\n"
         "\t[--warmup-per-size <0/1>] (1: the -w warm-up calls before every size and\n"
         "\t                   placement, as MPI and Gloo benchmarks do, instead of at the\n"
         "\t                   largest and smallest sizes first like nccl-tests; default 0)\n"
         "\t[--rewrite-inputs <0/1>] (1: before every call, write every cache line of its\n"
         "\t                   input back unchanged, as a training step writes the gradients\n"
         "\t                   it then reduces, so peers read freshly written memory; the\n"
         "\t                   writes are timed too; needs --back-to-back 1 or -z 1..3)\n"
         "\t[-h,--help]\n";
}

}  // namespace loom::perf
