// Tests of the perf table, summary and JSON formatting (nccl-tests layout).
#include "tools/perf/report.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

namespace loom::perf {
namespace {

Row SampleRow() {
  Row row;
  row.collective = Collective::kAllReduce;
  row.bytes = 1048576;
  row.count = 262144;
  row.type = DataType::kFloat32;
  row.redop = "sum";
  row.root = -1;
  row.out_of_place = {123.456, 8.49, 12.74, 0};
  row.in_place = {9.87654, 106.2, 159.3, 3};
  return row;
}

TEST(PerfReport, TimeFormatFollowsNcclTests) {
  EXPECT_EQ(FormatTime(0), "   0.00");
  EXPECT_EQ(FormatTime(99.994), "  99.99");
  EXPECT_EQ(FormatTime(100.0), "  100.0");
  EXPECT_EQ(FormatTime(9999.94), " 9999.9");
  EXPECT_EQ(FormatTime(10000.0), "  10000");
  EXPECT_EQ(FormatTime(12345678.0), "12345678");  // wider than 7: grows, never cut
}

TEST(PerfReport, RowLayout) {
  EXPECT_EQ(FormatRow(SampleRow()),
            "     1048576        262144     float     sum      -1    123.5    8.49   12.74      0"
            "     9.88  106.20  159.30      3\n");
  Row row = SampleRow();
  row.in_place.wrong = -1;
  row.redop = "none";
  row.root = 2;
  row.type = DataType::kBfloat16;
  EXPECT_EQ(FormatRow(row),
            "     1048576        262144  bfloat16    none       2    123.5    8.49   12.74      0"
            "     9.88  106.20  159.30    N/A\n");
}

TEST(PerfReport, TableHeaderMatchesNcclTests) {
  const std::string h = FormatTableHeader(Collective::kReduceScatter);
  EXPECT_EQ(h.rfind("# Collective test starting: reduce_scatter_perf\n", 0), 0u);
  EXPECT_NE(h.find("#       size         count      type   redop    root     time   algbw   "
                   "busbw #wrong     time   algbw   busbw #wrong\n"),
            std::string::npos);
  EXPECT_NE(h.find("#        (B)    (elements)                               (us)  (GB/s)  "
                   "(GB/s)            (us)  (GB/s)  (GB/s)       \n"),
            std::string::npos);
  EXPECT_NE(h.find("out-of-place                       in-place"), std::string::npos);
}

TEST(PerfReport, RunHeaderListsOptionsAndRanks) {
  PerfOptions o;
  o.min_bytes = 8;
  o.max_bytes = 1 << 20;
  o.step_factor = 2;
  o.blocking = 1;
  const std::string h = FormatRunHeader(o, {{0, 4242, "node-a"}, {1, 4343, "node-b"}});
  EXPECT_EQ(h.rfind("# nThread 1 nGpus 1 minBytes 8 maxBytes 1048576 step: 2(factor) warmup "
                    "iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n",
                    0),
            0u);
  EXPECT_NE(h.find("# Blocking Enabled"), std::string::npos);
  EXPECT_NE(h.find("#  Rank  0 Group  0 Pid   4242 on     node-a"), std::string::npos);
  EXPECT_NE(h.find("#  Rank  1 Group  0 Pid   4343 on     node-b"), std::string::npos);
  o.step_factor = 1;
  o.blocking = 0;
  const std::string bytes = FormatRunHeader(o, {});
  EXPECT_NE(bytes.find("step: 1048576(bytes)"), std::string::npos);
  EXPECT_EQ(bytes.find("Blocking"), std::string::npos);
  EXPECT_EQ(bytes.find("Back-to-back"), std::string::npos);
  EXPECT_EQ(bytes.find("Warm-up per size"), std::string::npos);
  o.back_to_back = true;
  EXPECT_NE(FormatRunHeader(o, {}).find("# Back-to-back: every iteration one blocking call"),
            std::string::npos);
  o.warmup_per_size = true;
  EXPECT_NE(FormatRunHeader(o, {}).find("# Warm-up per size: the warm-up iterations run"),
            std::string::npos);
}

TEST(PerfReport, CpuTimeTimestampsAndNotes) {
  // -C: nccl-tests titles the time columns "cputime" and prints the CPU time there.
  const std::string h = FormatTableHeader(Collective::kGather, /*cputime=*/true);
  EXPECT_NE(h.find("   root  cputime   algbw   busbw #wrong  cputime   algbw"), std::string::npos);
  Row row = SampleRow();
  row.out_of_place.cpu_us = 4.25;
  row.in_place.cpu_us = 1234.5;
  const std::string line = FormatRow(row, /*cputime=*/true);
  EXPECT_NE(line.find("      -1     4.25    8.49   12.74      0   1234.5  106.20"),
            std::string::npos)
      << line;
  // -S: a timestamp column at the end.
  const std::string ts = FormatTableHeader(Collective::kGather, false, true);
  EXPECT_NE(ts.find("#wrong           timestamp\n"), std::string::npos) << ts;
  EXPECT_NE(ts.find("   %Y-%m-%d %H:%M:%S\n"), std::string::npos) << ts;
  row.timestamp = FormatTimestamp(0);
  EXPECT_EQ(row.timestamp.size(), 19u);
  EXPECT_TRUE(FormatRow(row).ends_with("      3  " + row.timestamp + "\n"));
  // Mode lines and one line per note.
  PerfOptions o;
  o.blocking = 3;
  o.report_cputime = true;
  o.timeout_s = 7;
  o.run_cycles = 0;
  o.notes = {"-G 4: CUDA graphs do not apply to host buffers", "-y 1: no streams"};
  const std::string run = FormatRunHeader(o, {});
  for (const char* line :
       {"# Blocking Enabled: wait for completion and barrier after each "
        "iteration; the barrier is not timed\n",
        "# Report CPU time", "# Timeout: 7 s per operation", "# Run cycles: until stopped\n",
        "\n# -G 4: CUDA graphs do not apply to host buffers\n# -y 1: no "
        "streams\n"}) {
    EXPECT_NE(run.find(line), std::string::npos) << line;
  }
}

TEST(PerfReport, SummaryCountsLikeNcclTests) {
  Row a = SampleRow();
  Row b = SampleRow();
  b.bytes = 8;
  b.out_of_place = {1, 0, 0.5, 0};
  b.in_place = {1, 0, 0.25, -1};
  Row c = SampleRow();
  c.collective = Collective::kAllGather;
  c.out_of_place.busbw = 500;
  c.in_place.busbw = 1;
  c.in_place.wrong = 0;
  const Summary s = Summarize({a, b, c}, 4);
  // One failing result (a in-place), counted once per rank.
  EXPECT_EQ(s.out_of_bounds, 4);
  EXPECT_DOUBLE_EQ(s.avg_busbw, (12.74 + 159.3 + 0.5 + 0.25 + 500 + 1) / 6);
  ASSERT_EQ(s.peaks.size(), 2u);
  EXPECT_EQ(s.peaks[0].collective, Collective::kAllReduce);
  EXPECT_DOUBLE_EQ(s.peaks[0].busbw, 159.3);
  EXPECT_TRUE(s.peaks[0].in_place);
  EXPECT_EQ(s.peaks[1].collective, Collective::kAllGather);
  EXPECT_EQ(s.peaks[1].bytes, 1048576u);
  EXPECT_FALSE(s.peaks[1].in_place);

  const std::string text = FormatSummary(s);
  EXPECT_NE(text.find("# Out of bounds values : 4 FAILED\n"), std::string::npos);
  EXPECT_NE(text.find("# Avg bus bandwidth    : 112.298 \n"), std::string::npos);
  EXPECT_NE(text.find("# Peak bus bandwidth   : 159.30 GB/s at 1048576 (all_reduce, in-place)"),
            std::string::npos);
  EXPECT_NE(text.find("# Peak bus bandwidth   : 500.00 GB/s at 1048576 (all_gather, "
                      "out-of-place)"),
            std::string::npos);
}

TEST(PerfReport, EmptySummaryIsOk) {
  const Summary s = Summarize({}, 2);
  EXPECT_EQ(s.out_of_bounds, 0);
  EXPECT_EQ(s.avg_busbw, 0);
  EXPECT_NE(FormatSummary(s).find("# Out of bounds values : 0 OK\n"), std::string::npos);
  EXPECT_EQ(FormatSummary(s).find("Peak"), std::string::npos);
}

TEST(PerfReport, JsonHasEveryMeasurement) {
  PerfOptions o;
  Row row = SampleRow();
  row.in_place.wrong = -1;
  row.in_place.algbw = std::numeric_limits<double>::infinity();
  const std::vector<Row> rows{row};
  const std::string json = FormatJson(o, 4, rows, Summarize(rows, 4));
  EXPECT_NE(json.find("\"nranks\": 4"), std::string::npos);
  EXPECT_NE(json.find("\"back_to_back\": 0, \"warmup_per_size\": 0, \"average\": 1, "
                      "\"report_cputime\": 0, \"unalign\": 0}"),
            std::string::npos);
  EXPECT_NE(json.find("{\"collective\": \"all_reduce\", \"placement\": \"out-of-place\", "
                      "\"size\": 1048576, \"count\": 262144, \"type\": \"float\", \"redop\": "
                      "\"sum\", \"root\": -1, \"time_us\": 123.456, \"algbw_gbps\": 8.49, "
                      "\"busbw_gbps\": 12.74, \"cputime_us\": 0, \"wrong\": 0}"),
            std::string::npos);
  // Unchecked is null, and so is a non-finite number (JSON has no Inf).
  EXPECT_NE(json.find("\"placement\": \"in-place\""), std::string::npos);
  EXPECT_NE(json.find("\"algbw_gbps\": null"), std::string::npos);
  EXPECT_NE(json.find("\"wrong\": null"), std::string::npos);
  EXPECT_NE(json.find("\"out_of_bounds\": 0"), std::string::npos);
  EXPECT_EQ(json.back(), '\n');
  const std::string empty = FormatJson(o, 1, {}, Summarize({}, 1));
  EXPECT_NE(empty.find("\"rows\": []"), std::string::npos);
}

}  // namespace
}  // namespace loom::perf
