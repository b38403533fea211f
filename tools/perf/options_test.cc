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
  auto r = Parse({"-b", "8",  "-e", "128M", "-f", "2",  "-i",  "4K", "-n",       "7",  "-w",
                  "0",  "-m", "3",  "-c",   "0",  "-o", "max", "-d", "bfloat16", "-r", "2",
                  "-z", "1",  "-a", "3",    "-p", "1",  "-t",  "1",  "-g",       "1",  "-R",
                  "1",  "reduce"});
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
  EXPECT_EQ(r->collectives.back(), Collective::kSendRecv);
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
  EXPECT_NE(Error({"all_reduce", "-z", "2"}).find("outside"), std::string::npos);
  EXPECT_NE(Error({"all_reduce", "-R", "3"}).find("outside"), std::string::npos);
  EXPECT_NE(Error({"all_reduce", "-n", "0"}).find("outside"), std::string::npos);
  EXPECT_NE(Error({"all_reduce", "-r", "-1"}).find("outside"), std::string::npos);
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
  EXPECT_FALSE(Parse({"all_reduce", "-T", "1", "-z", "1"}).ok());  // long only
  auto rewrite = Parse({"all_reduce", "--rewrite-inputs", "1", "-z", "1"});
  ASSERT_TRUE(rewrite.ok()) << rewrite.status().ToString();
  EXPECT_TRUE(rewrite->rewrite_inputs);
  EXPECT_TRUE(Parse({"all_reduce", "--rewrite-inputs=1", "--back-to-back", "1"}).ok());
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
