// Parsing of `loom perf` flags (nccl-tests spelling) and the size sequence.
#include "tools/perf/options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace loom::perf {
namespace {

// One flag: its short letter, nccl-tests' long name, and whether it takes a value.
struct FlagSpec {
  char letter;
  std::string_view long_name;
  bool takes_value;
};

constexpr FlagSpec kFlags[] = {
    {'t', "nthreads", true},
    {'g', "ngpus", true},
    {'b', "minbytes", true},
    {'e', "maxbytes", true},
    {'i', "stepbytes", true},
    {'f', "stepfactor", true},
    {'n', "iters", true},
    {'m', "agg_iters", true},
    {'w', "warmup_iters", true},
    {'p', "parallel_init", true},
    {'c', "check", true},
    {'o', "op", true},
    {'d', "datatype", true},
    {'r', "root", true},
    {'z', "blocking", true},
    {'a', "average", true},
    {'J', "json", true},
    {'h', "help", false},
    {'X', "corrupt-for-test", false},
    {'F', "fixed-buffers", false},
    {'R', "local_register", true},
    {'B', "back-to-back", true},
    {'W', "warmup-per-size", true},
    {'T', "rewrite-inputs", true},
};

const FlagSpec* FindShort(char letter) {
  for (const FlagSpec& f : kFlags) {
    // 'J', 'X', 'F', 'B', 'W' and 'T' exist only as long options.
    if (f.letter == letter && letter != 'J' && letter != 'X' && letter != 'F' && letter != 'B' &&
        letter != 'W' && letter != 'T') {
      return &f;
    }
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

// Applies one flag's value to the options.
Status Apply(const FlagSpec& flag, const std::string& value, PerfOptions& o) {
  constexpr long kIntMax = std::numeric_limits<int>::max();
  const std::string_view name(&flag.letter, 1);
  switch (flag.letter) {
    case 't':
    case 'g': {
      LOOM_ASSIGN_OR_RETURN(long v, ParseInt(name, value, 1, kIntMax));
      if (v != 1) {
        return InvalidArgument("-" + std::string(name) + " " + value +
                               ": loom perf runs one rank per process; start more ranks with a "
                               "launcher (loom run -np N, mpirun, srun, torchrun)");
      }
      return Status::Ok();
    }
    case 'b': {
      LOOM_ASSIGN_OR_RETURN(o.min_bytes, ParseSize(value));
      return Status::Ok();
    }
    case 'e': {
      LOOM_ASSIGN_OR_RETURN(o.max_bytes, ParseSize(value));
      return Status::Ok();
    }
    case 'i': {
      LOOM_ASSIGN_OR_RETURN(o.step_bytes, ParseSize(value));
      return Status::Ok();
    }
    case 'f': {
      LOOM_ASSIGN_OR_RETURN(long v, ParseInt(name, value, 0, kIntMax));
      o.step_factor = static_cast<size_t>(v);
      return Status::Ok();
    }
    case 'n': {
      LOOM_ASSIGN_OR_RETURN(long v, ParseInt(name, value, 1, kIntMax));
      o.iters = static_cast<int>(v);
      return Status::Ok();
    }
    case 'm': {
      LOOM_ASSIGN_OR_RETURN(long v, ParseInt(name, value, 1, kIntMax));
      o.agg_iters = static_cast<int>(v);
      return Status::Ok();
    }
    case 'w': {
      LOOM_ASSIGN_OR_RETURN(long v, ParseInt(name, value, 0, kIntMax));
      o.warmup_iters = static_cast<int>(v);
      return Status::Ok();
    }
    case 'p': {
      LOOM_ASSIGN_OR_RETURN(long v, ParseInt(name, value, 0, 1));
      o.parallel_init = static_cast<int>(v);
      return Status::Ok();
    }
    case 'c': {
      LOOM_ASSIGN_OR_RETURN(long v, ParseInt(name, value, 0, kIntMax));
      o.check = static_cast<int>(v);
      return Status::Ok();
    }
    case 'o': {
      LOOM_ASSIGN_OR_RETURN(o.ops, ParseOps(value));
      return Status::Ok();
    }
    case 'd': {
      LOOM_ASSIGN_OR_RETURN(o.types, ParseTypes(value));
      return Status::Ok();
    }
    case 'r': {
      LOOM_ASSIGN_OR_RETURN(long v, ParseInt(name, value, 0, kIntMax));
      o.root = static_cast<int>(v);
      return Status::Ok();
    }
    case 'z': {
      LOOM_ASSIGN_OR_RETURN(long v, ParseInt(name, value, 0, 1));
      o.blocking = v == 1;
      return Status::Ok();
    }
    case 'a': {
      LOOM_ASSIGN_OR_RETURN(long v, ParseInt(name, value, 0, 3));
      o.average = static_cast<int>(v);
      return Status::Ok();
    }
    case 'J':
      if (value.empty()) return InvalidArgument("--json needs a file name or '-'");
      o.json_path = value;
      return Status::Ok();
    case 'h':
      o.help = true;
      return Status::Ok();
    case 'X':
      o.corrupt_for_test = true;
      return Status::Ok();
    case 'F':
      o.fixed_buffers = true;
      return Status::Ok();
    case 'R': {
      LOOM_ASSIGN_OR_RETURN(long v, ParseInt(name, value, 0, 2));
      o.local_register = static_cast<int>(v);
      return Status::Ok();
    }
    case 'B': {
      LOOM_ASSIGN_OR_RETURN(long v, ParseInt(name, value, 0, 1));
      o.back_to_back = v == 1;
      return Status::Ok();
    }
    case 'W': {
      LOOM_ASSIGN_OR_RETURN(long v, ParseInt(name, value, 0, 1));
      o.warmup_per_size = v == 1;
      return Status::Ok();
    }
    case 'T': {
      LOOM_ASSIGN_OR_RETURN(long v, ParseInt(name, value, 0, 1));
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
  if (o.back_to_back && o.blocking) {
    return InvalidArgument("--back-to-back 1 and -z 1 exclude each other (-z adds a barrier after "
                           "every call; --back-to-back goes straight on)");
  }
  if (o.back_to_back && o.agg_iters > 1) {
    return InvalidArgument("--back-to-back 1 and -m " + std::to_string(o.agg_iters) +
                           " exclude each other (-m groups calls; --back-to-back issues each "
                           "on its own)");
  }
  if (o.rewrite_inputs && !o.back_to_back && !o.blocking) {
    return InvalidArgument("--rewrite-inputs 1 needs --back-to-back 1 or -z 1 (a call in flight "
                           "may still be reading the input it would rewrite)");
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
                                 "alltoall, sendrecv, all)");
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
  if (!have_collective) {
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
         "  collective: all_reduce, reduce_scatter, all_gather, broadcast, reduce, alltoall,\n"
         "              sendrecv, or all (nccl-tests names such as all_reduce_perf work too)\n"
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
         "\t[-p,--parallel_init <0/1>] (accepted, no effect)\n"
         "\t[-c,--check <0/1>] (default 1)\n"
         "\t[-o,--op <sum/prod/min/max/avg/mulsum/all>] (default sum)\n"
         "\t[-d,--datatype <int8/uint8/int32/uint32/int64/uint64/half/float/double/bfloat16/all>]"
         " (default float)\n"
         "\t[-r,--root <root>] (default 0)\n"
         "\t[-z,--blocking <0/1>] (default 0: issue all iterations, then wait)\n"
         "\t[-a,--average <0/1/2/3> report iteration time of rank 0/avg/min/max] (default 1)\n"
         "\t[--json <file|->] (every row as JSON; '-' = stdout, the table then goes to stderr)\n"
         "\t[--fixed-buffers] (every iteration at the buffers' start, as MPI and Gloo benchmarks\n"
         "\t                   do, instead of walking through them like nccl-tests)\n"
         "\t[-R,--local_register <0/1/2>] (1 or 2: send and recv buffers in shareable memory,\n"
         "\t                   loom::AllocShared, which ranks of one host read without copies;\n"
         "\t                   default 0)\n"
         "\t[--back-to-back <0/1>] (1: every iteration one blocking call, straight after the\n"
         "\t                   last, no barrier: as MPI and Gloo benchmarks time, and what\n"
         "\t                   nccl.h calls on host buffers are; default 0)\n"
         "\t[--warmup-per-size <0/1>] (1: the -w warm-up calls before every size and\n"
         "\t                   placement, as MPI and Gloo benchmarks do, instead of at the\n"
         "\t                   largest and smallest sizes first like nccl-tests; default 0)\n"
         "\t[--rewrite-inputs <0/1>] (1: before every call, write every cache line of its\n"
         "\t                   input back unchanged, as a training step writes the gradients\n"
         "\t                   it then reduces, so peers read freshly written memory; the\n"
         "\t                   writes are timed too; needs --back-to-back 1 or -z 1)\n"
         "\t[-h,--help]\n";
}

}  // namespace loom::perf
