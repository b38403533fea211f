// Tests of `loom perf` flag parsing and the size sequence.
#include "tools/perf/options.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <vector>

namespace loom::perf {
namespace {

// Parses a command line given as words (argv[0] is the subcommand "perf").
Result<PerfOptions> Parse(std::initializer_list<const char*> words) {
  std::vector<const char*> argv{"perf"};
  argv.insert(argv.end(), words);
  return ParseOptions(static_cast<int>(argv.size()), argv.data(), 1);
}

// The message of a failed parse ("" if it did not fail).
std::string Error(std::initializer_list<const char*> words) {
  auto r = Parse(words);
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  return r.status().message();
}

TEST(PerfOptions, DefaultsAreNcclTests) {
  auto r = Parse({"all_reduce"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const PerfOptions& o = r.value();
  EXPECT_EQ(o.collectives, std::vector<Collective>{Collective::kAllReduce});
  EXPECT_EQ(o.min_bytes, 32u << 20);
  EXPECT_EQ(o.max_bytes, 32u << 20);
  EXPECT_EQ(o.step_bytes, 1u << 20);
  EXPECT_EQ(o.step_factor, 1u);
  EXPECT_EQ(o.iters, 20);
  EXPECT_EQ(o.warmup_iters, 5);
  EXPECT_FALSE(o.warmup_per_size);
  EXPECT_EQ(o.agg_iters, 1);
  EXPECT_EQ(o.check, 1);
  EXPECT_EQ(o.ops, std::vector<PerfOp>{RedOp::kSum});
  EXPECT_EQ(o.types, std::vector<DataType>{DataType::kFloat32});
  EXPECT_EQ(o.root, 0);
  EXPECT_FALSE(o.blocking);
  EXPECT_EQ(o.average, 1);
  EXPECT_TRUE(o.json_path.empty());
  EXPECT_FALSE(o.fixed_buffers);
  EXPECT_FALSE(o.corrupt_for_test);
  EXPECT_EQ(o.local_register, 0);
}

TEST(PerfOptions, EveryShortFlag) {
  auto r = Parse({"-b", "8", "-e", "128M", "-f", "2",   "-i", "4K",       "-n", "7", "-w",    "0",
                  "-m", "3", "-c", "0",    "-o", "max", "-d", "bfloat16", "-r", "2", "-z",    "1",
                  "-a", "3", "-p", "1",    "-t", "1",   "-g", "1",        "-R", "1", "reduce"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const PerfOptions& o = r.value();
  EXPECT_EQ(o.collectives, std::vector<Collective>{Collective::kReduce});
  EXPECT_EQ(o.min_bytes, 8u);
  EXPECT_EQ(o.max_bytes, 128u << 20);
  EXPECT_EQ(o.step_factor, 2u);
  EXPECT_EQ(o.step_bytes, 4096u);
  EXPECT_EQ(o.iters, 7);
  EXPECT_EQ(o.warmup_iters, 0);
  EXPECT_EQ(o.agg_iters, 3);
  EXPECT_EQ(o.check, 0);
  EXPECT_EQ(o.ops, std::vector<PerfOp>{RedOp::kMax});
  EXPECT_EQ(o.types, std::vector<DataType>{DataType::kBfloat16});
  EXPECT_EQ(o.root, 2);
  EXPECT_TRUE(o.blocking);
  EXPECT_EQ(o.average, 3);
  EXPECT_EQ(o.parallel_init, 1);
  EXPECT_EQ(o.local_register, 1);
}

TEST(PerfOptions, GluedAndLongForms) {
  auto r = Parse({"all_gather_perf", "-b1K", "-e=2M", "--stepfactor=4", "--iters", "3",
                  "--datatype=half", "--op", "min", "--json", "-", "--corrupt-for-test",
                  "--fixed-buffers", "--back-to-back", "1", "--warmup-per-size=1"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->collectives, std::vector<Collective>{Collective::kAllGather});
  EXPECT_EQ(r->min_bytes, 1024u);
  EXPECT_EQ(r->max_bytes, 2u << 20);
  EXPECT_EQ(r->step_factor, 4u);
  EXPECT_EQ(r->iters, 3);
  EXPECT_EQ(r->types, std::vector<DataType>{DataType::kFloat16});
  EXPECT_EQ(r->ops, std::vector<PerfOp>{RedOp::kMin});
  EXPECT_EQ(r->json_path, "-");
  EXPECT_TRUE(r->corrupt_for_test);
  EXPECT_TRUE(r->fixed_buffers);
  EXPECT_TRUE(r->back_to_back);
  EXPECT_TRUE(r->warmup_per_size);
  EXPECT_FALSE(r->blocking);
  // Long-only: -F and -B are not flags.
  EXPECT_FALSE(Parse({"all_gather", "-F"}).ok());
  EXPECT_FALSE(Parse({"all_gather", "-B", "1"}).ok());
  EXPECT_FALSE(Parse({"all_gather", "-W", "1"}).ok());
}

TEST(PerfOptions, AllExpandsCollectivesOpsAndTypes) {
  auto r = Parse({"all", "-o", "all", "-d", "all"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->collectives.size(), static_cast<size_t>(kNumCollectives));
  EXPECT_EQ(r->collectives.front(), Collective::kAllReduce);
  EXPECT_EQ(r->collectives.back(), Collective::kHyperCube);
  // nccl-tests' order.
  EXPECT_EQ(r->ops, (std::vector<PerfOp>{RedOp::kSum, RedOp::kProd, RedOp::kMax, RedOp::kMin,
                                         RedOp::kAvg, PerfOp::MulSum()}));
  auto m = Parse({"all_reduce", "-o", "mulsum"});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->ops, std::vector<PerfOp>{PerfOp::MulSum()});
  EXPECT_EQ(Name(m->ops.front()), "mulsum");
  EXPECT_EQ(r->types.size(), static_cast<size_t>(kNumDataTypes));
}

TEST(PerfOptions, EveryTypeNameParses) {
  for (int i = 0; i < kNumDataTypes; ++i) {
    const auto t = static_cast<DataType>(i);
    const std::string name(Name(t));
    auto r = Parse({"all_reduce", "-d", name.c_str()});
    ASSERT_TRUE(r.ok()) << name;
    EXPECT_EQ(r->types, std::vector<DataType>{t});
  }
}

TEST(PerfOptions, HelpNeedsNoCollective) {
  auto r = Parse({"--help"});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->help);
  EXPECT_TRUE(Parse({"-h"})->help);
  EXPECT_NE(Usage().find("-b,--minbytes"), std::string::npos);
  EXPECT_NE(Usage().find("--json"), std::string::npos);
}

TEST(PerfOptions, RejectsBadInput) {
  EXPECT_NE(Error({}).find("missing collective"), std::string::npos);
  EXPECT_NE(Error({"all_reduce_perff"}).find("unknown collective"), std::string::npos);
  EXPECT_NE(Error({"all_reduce", "-q", "1"}).find("unknown argument '-q'"), std::string::npos);
  EXPECT_NE(Error({"all_reduce", "--bogus"}).find("unknown argument"), std::string::npos);
  EXPECT_NE(Error({"all_reduce", "-b"}).find("needs a value"), std::string::npos);
  EXPECT_NE(Error({"all_reduce", "-t", "2"}).find("launcher"), std::string::npos);
  EXPECT_NE(Error({"all_reduce", "-g", "8"}).find("launcher"), std::string::npos);
  EXPECT_NE(Error({"all_reduce", "-a", "4"}).find("outside"), std::string::npos);
  EXPECT_NE(Error({"all_reduce", "-z", "4"}).find("outside"), std::string::npos);
  EXPECT_NE(Error({"all_reduce", "-R", "3"}).find("outside"), std::string::npos);
  EXPECT_NE(Error({"all_reduce", "-n", "0"}).find("outside"), std::string::npos);
  EXPECT_NE(Error({"all_reduce", "-r", "-2"}).find("outside"), std::string::npos);
  EXPECT_NE(Error({"all_reduce", "-n", "5x"}).find("not an integer"), std::string::npos);
  EXPECT_NE(Error({"all_reduce", "-o", "premul"}).find("unknown operator"), std::string::npos);
  EXPECT_NE(Error({"all_reduce", "-d", "fp8"}).find("unknown datatype"), std::string::npos);
  EXPECT_NE(Error({"all_reduce", "-b", "2K", "-e", "1K"}).find("2048 > 1024"), std::string::npos);
  EXPECT_NE(Error({"all_reduce", "-b", "0", "-e", "1K", "-f", "2"}).find("never grows"),
            std::string::npos);
  EXPECT_NE(Error({"all_reduce", "-b", "1", "-e", "1K", "-i", "0"}).find("never grows"),
            std::string::npos);
  EXPECT_NE(Error({"all_reduce", "--help=1"}).find("takes no value"), std::string::npos);
  EXPECT_NE(Error({"all_reduce", "--json="}).find("--json"), std::string::npos);
  EXPECT_NE(Error({"all_reduce", "reduce"}).find("unknown argument 'reduce'"), std::string::npos);
  EXPECT_NE(Error({"all_reduce", "--back-to-back", "2"}).find("outside"), std::string::npos);
  EXPECT_NE(Error({"all_reduce", "--warmup-per-size", "2"}).find("outside"), std::string::npos);
  EXPECT_NE(Error({"all_reduce", "--back-to-back", "1", "-z", "1"}).find("exclude each other"),
            std::string::npos);
  EXPECT_NE(Error({"all_reduce", "--back-to-back=1", "-m", "4"}).find("exclude each other"),
            std::string::npos);
  // Rewriting an input needs the call before it finished.
  EXPECT_NE(Error({"all_reduce", "--rewrite-inputs", "1"}).find("--rewrite-inputs 1 needs"),
            std::string::npos);
  auto rewrite = Parse({"all_reduce", "--rewrite-inputs", "1", "-z", "1"});
  ASSERT_TRUE(rewrite.ok()) << rewrite.status().ToString();
  EXPECT_TRUE(rewrite->rewrite_inputs);
  EXPECT_TRUE(Parse({"all_reduce", "--rewrite-inputs=1", "--back-to-back", "1"}).ok());
}

TEST(PerfOptions, NcclTestsTimingFlags) {
  auto r = Parse({"gather", "-G", "10", "-C", "1",  "-T", "30", "-N", "3",  "-S", "1",
                  "-M",     "1",  "-u", "1",  "-z", "3",  "-r", "-1", "-c", "4"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->collectives, std::vector<Collective>{Collective::kGather});
  EXPECT_EQ(r->cudagraph, 10);
  EXPECT_TRUE(r->report_cputime);
  EXPECT_EQ(r->timeout_s, 30);
  EXPECT_EQ(r->run_cycles, 3);
  EXPECT_TRUE(r->report_timestamps);
  EXPECT_TRUE(r->memory_report);
  EXPECT_EQ(r->unalign, 1);
  EXPECT_EQ(r->blocking, 3);
  EXPECT_EQ(r->root, -1);
  EXPECT_EQ(r->check, 4);
  // -G on host buffers: accepted, and said once.
  ASSERT_EQ(r->notes.size(), 1u);
  EXPECT_NE(r->notes[0].find("-G 10: CUDA graphs do not apply to host buffers"), std::string::npos);
  auto twice = Parse({"all_reduce", "-G", "1", "--cudagraph=2"});
  ASSERT_TRUE(twice.ok());
  ASSERT_EQ(twice->notes.size(), 1u);
  EXPECT_TRUE(twice->notes[0].starts_with("-G 2:"));
  EXPECT_TRUE(Parse({"all_reduce", "-G", "0"})->notes.empty());
  // Long forms.
  auto l = Parse({"scatter", "--timeout=5", "--report_cputime", "1", "--run_cycles=0",
                  "--report_timestamps=0", "--memory", "0", "--unalign", "3"});
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->timeout_s, 5);
  EXPECT_TRUE(l->report_cputime);
  EXPECT_EQ(l->run_cycles, 0);
  EXPECT_FALSE(l->report_timestamps);
  EXPECT_EQ(l->unalign, 3);
  EXPECT_NE(Error({"all_reduce", "-C", "2"}).find("outside"), std::string::npos);
  EXPECT_NE(Error({"all_reduce", "-T", "-1"}).find("outside"), std::string::npos);
  EXPECT_NE(Error({"all_reduce", "-G", "x"}).find("not an integer"), std::string::npos);
}

TEST(PerfOptions, EveryNcclTestsFlagIsAccepted) {
  // Each short and long flag of nccl-tests' common.cu, with a valid value:
  // never "unknown argument".
  const std::vector<std::vector<const char*>> lines = {{"-t", "1"},
                                                       {"-g", "1"},
                                                       {"-b", "8"},
                                                       {"-e", "64M"},
                                                       {"-i", "8"},
                                                       {"-f", "2"},
                                                       {"-n", "2"},
                                                       {"-m", "1"},
                                                       {"-w", "1"},
                                                       {"-N", "1"},
                                                       {"-p", "0"},
                                                       {"-c", "1"},
                                                       {"-o", "sum"},
                                                       {"-d", "float"},
                                                       {"-r", "0"},
                                                       {"-z", "2"},
                                                       {"-y", "1"},
                                                       {"-T", "9"},
                                                       {"-G", "1"},
                                                       {"-C", "0"},
                                                       {"-S", "0"},
                                                       {"-J", "out.json"},
                                                       {"-a", "2"},
                                                       {"-R", "1"},
                                                       {"-x", "1"},
                                                       {"-D", "1"},
                                                       {"-V", "16"},
                                                       {"-M", "0"},
                                                       {"-u", "0"},
                                                       {"-I", "1"},
                                                       {"-K", "1"},
                                                       {"-h"},
                                                       {"--nthreads=1"},
                                                       {"--ngpus=1"},
                                                       {"--minbytes=8"},
                                                       {"--maxbytes=64M"},
                                                       {"--stepbytes=8"},
                                                       {"--stepfactor=2"},
                                                       {"--iters=2"},
                                                       {"--agg_iters=1"},
                                                       {"--warmup_iters=1"},
                                                       {"--run_cycles=1"},
                                                       {"--parallel_init=0"},
                                                       {"--check=1"},
                                                       {"--op=sum"},
                                                       {"--datatype=float"},
                                                       {"--root=0"},
                                                       {"--blocking=0"},
                                                       {"--stream_null=0"},
                                                       {"--timeout=0"},
                                                       {"--cudagraph=0"},
                                                       {"--report_cputime=0"},
                                                       {"--report_timestamps=0"},
                                                       {"--output_file=o.json"},
                                                       {"--average=1"},
                                                       {"--local_register=0"},
                                                       {"--cta_policy=0"},
                                                       {"--device_implementation=0"},
                                                       {"--device_cta_count=16"},
                                                       {"--memory=0"},
                                                       {"--unalign=0"},
                                                       {"--per_iter_timing=0"},
                                                       {"--per_iter_skip=0"},
                                                       {"--help"}};
  for (const auto& words : lines) {
    std::vector<const char*> argv{"perf", "all_reduce"};
    argv.insert(argv.end(), words.begin(), words.end());
    auto r = ParseOptions(static_cast<int>(argv.size()), argv.data(), 1);
    EXPECT_TRUE(r.ok()) << words[0] << ": " << r.status().ToString();
  }
  // Device-only flags say so in one line each.
  auto r = Parse({"all_reduce", "-y", "1", "-x", "2", "-D", "1", "-V", "8", "-I", "1", "-K", "2",
                  "-J", "run.json"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->notes.size(), 7u);
  EXPECT_EQ(r->json_path, "run.json");
  for (const std::string& note : r->notes) {
    EXPECT_EQ(note.find('\n'), std::string::npos) << note;
  }
}

TEST(PerfOptions, PlotFlags) {
  auto live = Parse({"all_reduce", "--plot", "run.svg"});
  ASSERT_TRUE(live.ok());
  EXPECT_EQ(live->plot_path, "run.svg");
  EXPECT_TRUE(live->plot_from.empty());
  // Saved runs need no collective.
  auto saved = Parse({"--plot=cmp.svg", "--from", "a.json", "--from=b.json"});
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_TRUE(saved->collectives.empty());
  EXPECT_EQ(saved->plot_from, (std::vector<std::string>{"a.json", "b.json"}));
  EXPECT_NE(Error({"--from", "a.json"}).find("--plot"), std::string::npos);
  EXPECT_NE(Error({"all_reduce", "--plot", "x.svg", "--from", "a.json"}).find("no collective"),
            std::string::npos);
  EXPECT_NE(Error({"all_reduce", "--plot="}).find("--plot"), std::string::npos);
}

TEST(PerfOptions, ParseSize) {
  EXPECT_EQ(ParseSize("0").value(), 0u);
  EXPECT_EQ(ParseSize("8").value(), 8u);
  EXPECT_EQ(ParseSize("1K").value(), 1024u);
  EXPECT_EQ(ParseSize("1k").value(), 1024u);
  EXPECT_EQ(ParseSize("3M").value(), 3u << 20);
  EXPECT_EQ(ParseSize("2G").value(), size_t{2} << 30);
  EXPECT_EQ(ParseSize("1.5K").value(), 1536u);
  EXPECT_EQ(ParseSize("0x10").value(), 16u);
  for (const char* bad : {"", "K", "-1", "1X", "1KB", "abc", "1e400", "nan", "inf", "1e30G"}) {
    EXPECT_FALSE(ParseSize(bad).ok()) << bad;
  }
}

TEST(PerfOptions, SizeSequenceFactor) {
  PerfOptions o;
  o.min_bytes = 8;
  o.max_bytes = 128;
  o.step_factor = 2;
  EXPECT_EQ(SizeSequence(o), (std::vector<size_t>{8, 16, 32, 64, 128}));
  o.max_bytes = 100;  // max need not be on the sequence
  EXPECT_EQ(SizeSequence(o), (std::vector<size_t>{8, 16, 32, 64}));
}

TEST(PerfOptions, SizeSequenceStep) {
  PerfOptions o;
  o.min_bytes = 0;
  o.max_bytes = 10;
  o.step_factor = 1;
  o.step_bytes = 4;
  EXPECT_EQ(SizeSequence(o), (std::vector<size_t>{0, 4, 8}));
  o.min_bytes = o.max_bytes = 7;
  EXPECT_EQ(SizeSequence(o), (std::vector<size_t>{7}));
  o.min_bytes = o.max_bytes = 0;
  o.step_factor = 2;  // 0 * 2 never grows, but min == max ends it
  EXPECT_EQ(SizeSequence(o), (std::vector<size_t>{0}));
}

TEST(PerfOptions, SizeSequenceEndsOnOverflow) {
  PerfOptions o;
  o.min_bytes = size_t{1} << 62;
  o.max_bytes = ~size_t{0};
  o.step_factor = 4;
  EXPECT_EQ(SizeSequence(o), (std::vector<size_t>{size_t{1} << 62}));
}

TEST(PerfOptions, DefaultSequenceIsOneSize) {
  auto r = Parse({"broadcast"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(SizeSequence(r.value()), (std::vector<size_t>{32u << 20}));
}

}  // namespace
}  // namespace loom::perf
