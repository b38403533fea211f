// Tests of `loom perf --plot`: series from rows and from --json text, log
// ticks, and that the SVG is well-formed XML with one line per series and
// panel, a point per size, a legend entry per series and labelled ticks.
#include "tools/perf/plot.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace loom::perf {
namespace {

Row MakeRow(Collective c, size_t bytes, double busbw, double time_us) {
  Row row;
  row.collective = c;
  row.bytes = bytes;
  row.count = bytes / 4;
  row.redop = "none";
  row.out_of_place = {time_us, busbw, busbw, 0, 0};
  row.in_place = {time_us * 2, busbw / 2, busbw / 2, 0, 0};
  return row;
}

// Occurrences of `needle` in `hay`.
size_t Count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

// Checks that every element is closed in order and attributes are quoted:
// a small XML well-formedness check (no DTD, no CDATA in what we write).
::testing::AssertionResult WellFormed(const std::string& xml) {
  std::vector<std::string> open;
  size_t i = 0;
  if (!xml.starts_with("<?xml")) return ::testing::AssertionFailure() << "no XML declaration";
  i = xml.find("?>") + 2;
  while ((i = xml.find('<', i)) != std::string::npos) {
    const size_t end = xml.find('>', i);
    if (end == std::string::npos) return ::testing::AssertionFailure() << "unclosed tag at " << i;
    std::string tag = xml.substr(i + 1, end - i - 1);
    // Text between tags must not hold a raw '<' or '&' that is not an entity.
    if (tag.find('<') != std::string::npos) {
      return ::testing::AssertionFailure() << "'<' inside a tag at " << i;
    }
    if (Count(tag, "\"") % 2 != 0) return ::testing::AssertionFailure() << "odd quotes: " << tag;
    if (tag.starts_with("/")) {
      const std::string name = tag.substr(1);
      if (open.empty() || open.back() != name) {
        return ::testing::AssertionFailure()
               << "</" << name << "> closes " << (open.empty() ? "nothing" : open.back());
      }
      open.pop_back();
    } else if (!tag.ends_with("/")) {
      open.push_back(tag.substr(0, tag.find_first_of(" \n")));
    }
    i = end + 1;
  }
  if (!open.empty()) return ::testing::AssertionFailure() << "<" << open.back() << "> not closed";
  return ::testing::AssertionSuccess();
}

TEST(PerfPlot, LogTicks) {
  EXPECT_EQ(LogTicks(1, 1000, 10, 8), (std::vector<double>{1, 10, 100, 1000}));
  EXPECT_EQ(LogTicks(0.1, 50, 10, 8), (std::vector<double>{0.1, 1, 10}));
  // 8 B .. 1 MiB is 18 powers of two: every second one keeps 9 of them.
  const std::vector<double> x = LogTicks(8, 1 << 20, 2, 10);
  ASSERT_EQ(x.size(), 9u);
  EXPECT_EQ(x.front(), 8);
  EXPECT_EQ(x[1], 32);
  EXPECT_EQ(x.back(), 1 << 19);
  EXPECT_EQ(LogTicks(4, 4, 2, 5), std::vector<double>{4});
  EXPECT_TRUE(LogTicks(5, 7, 2, 5).empty());
}

TEST(PerfPlot, BytesLabels) {
  EXPECT_EQ(FormatBytesLabel(8), "8");
  EXPECT_EQ(FormatBytesLabel(512), "512");
  EXPECT_EQ(FormatBytesLabel(1024), "1K");
  EXPECT_EQ(FormatBytesLabel(1536), "1.5K");
  EXPECT_EQ(FormatBytesLabel(64 << 20), "64M");
  EXPECT_EQ(FormatBytesLabel(2.0 * (1 << 30)), "2G");
}

TEST(PerfPlot, SeriesPerCollectiveAndRun) {
  std::vector<Row> rows;
  for (const size_t bytes : {0, 8, 64, 512}) {
    rows.push_back(MakeRow(Collective::kAllReduce, bytes, bytes / 100.0, 10 + bytes));
    rows.push_back(MakeRow(Collective::kGather, bytes, bytes / 200.0, 20 + bytes));
  }
  // -N 2: a size measured twice is averaged.
  rows.push_back(MakeRow(Collective::kGather, 64, 64 / 200.0, 40 + 64));
  const std::vector<PlotSeries> one = BuildSeries({PlotRunFromRows("", 2, rows)});
  ASSERT_EQ(one.size(), 2u);
  EXPECT_EQ(one[0].label, "all_reduce");
  EXPECT_EQ(one[1].label, "gather");
  ASSERT_EQ(one[0].points.size(), 3u);  // 0 bytes has no place on a log axis
  EXPECT_EQ(one[0].points[0].bytes, 8);
  EXPECT_DOUBLE_EQ(one[0].points[2].busbw_gbps, 5.12);  // out-of-place values
  EXPECT_DOUBLE_EQ(one[1].points[1].time_us, (84.0 + 104.0) / 2);

  const std::vector<PlotSeries> two =
      BuildSeries({PlotRunFromRows("shm", 2, rows), PlotRunFromRows("tcp", 2, rows)});
  ASSERT_EQ(two.size(), 4u);
  EXPECT_EQ(two[0].label, "shm all_reduce");
  EXPECT_EQ(two[3].label, "tcp gather");

  // Several types of one collective: the variant tells the lines apart.
  Row half = MakeRow(Collective::kAllReduce, 8, 1, 1);
  half.type = DataType::kFloat16;
  half.redop = "sum";
  Row flt = half;
  flt.type = DataType::kFloat32;
  const std::vector<PlotSeries> types = BuildSeries({PlotRunFromRows("", 2, {half, flt})});
  ASSERT_EQ(types.size(), 2u);
  EXPECT_EQ(types[0].label, "all_reduce half sum");
  EXPECT_EQ(types[1].label, "all_reduce float sum");
}

TEST(PerfPlot, ReadsWhatJsonWrites) {
  std::vector<Row> rows;
  for (const size_t bytes : {8, 1024, 1 << 20}) {
    Row r = MakeRow(Collective::kScatter, bytes, bytes / 1e5, 3 + bytes / 1e3);
    r.root = 1;
    rows.push_back(r);
  }
  PerfOptions o;
  const std::string json = FormatJson(o, 3, rows, Summarize(rows, 3));
  auto run = ParsePlotRun(json, "saved");
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(run->label, "saved");
  EXPECT_EQ(run->nranks, 3);
  ASSERT_EQ(run->samples.size(), 6u);
  EXPECT_EQ(run->samples[0].collective, "scatter");
  EXPECT_EQ(run->samples[0].variant, "float root 1");
  EXPECT_FALSE(run->samples[0].in_place);
  EXPECT_TRUE(run->samples[1].in_place);
  const std::vector<PlotSeries> series = BuildSeries({run.value()});
  ASSERT_EQ(series.size(), 1u);
  EXPECT_EQ(series[0].label, "saved scatter");
  ASSERT_EQ(series[0].points.size(), 3u);
  EXPECT_NEAR(series[0].points[2].busbw_gbps, (1 << 20) / 1e5, 1e-6);

  EXPECT_FALSE(ParsePlotRun("{", "bad").ok());
  auto no_rows = ParsePlotRun("{\"nranks\": 2}", "x.json");
  ASSERT_FALSE(no_rows.ok());
  EXPECT_NE(no_rows.status().message().find("x.json"), std::string::npos);
  EXPECT_FALSE(ParsePlotRun("{\"rows\": [{\"size\": 8}]}", "x").ok());
  EXPECT_FALSE(ReadPlotRun("/nonexistent/run.json").ok());
}

TEST(PerfPlot, SvgIsWellFormedWithALinePerSeriesAndPanel) {
  std::vector<Row> rows;
  for (size_t bytes = 8; bytes <= (1 << 20); bytes *= 4) {
    rows.push_back(MakeRow(Collective::kAllReduce, bytes, bytes / 1e5, 5 + bytes / 1e3));
    rows.push_back(MakeRow(Collective::kHyperCube, bytes, bytes / 2e5, 7 + bytes / 1e3));
  }
  // A label that needs escaping.
  const std::string svg = RenderPlot({PlotRunFromRows("a<b&c", 2, rows)});
  EXPECT_TRUE(WellFormed(svg));
  EXPECT_TRUE(svg.ends_with("</svg>\n"));
  // 2 series x 2 panels, each point once per panel.
  EXPECT_EQ(Count(svg, "<polyline"), 4u);
  EXPECT_EQ(Count(svg, "<circle"), 2u * 2u * 9u);  // 9 sizes: 8 B .. 512 KiB by 4
  const size_t first = svg.find("<polyline");
  const size_t quote = svg.find("points=\"", first) + 8;
  const std::string points = svg.substr(quote, svg.find('"', quote) - quote);
  EXPECT_EQ(Count(points, ","), 9u);
  EXPECT_EQ(Count(svg, "class=\"legend\""), 2u);
  EXPECT_NE(svg.find("a&lt;b&amp;c all_reduce"), std::string::npos);
  EXPECT_NE(svg.find("a&lt;b&amp;c hypercube"), std::string::npos);
  // Size ticks on powers of two, time ticks on decades, a title with the ranks.
  for (const char* label :
       {">8<", ">32<", ">2K<", ">512K<", "(GB/s)", ">time (us)", ", 2 ranks<"}) {
    EXPECT_NE(svg.find(label), std::string::npos) << label;
  }
  for (const char* label : {">1<", ">10<", ">100<", ">1000<"}) {
    EXPECT_NE(svg.find(label), std::string::npos) << label;
  }
  // Self-contained: nothing fetched, nothing run.
  for (const char* outside : {"<script", "href", "url(", "@import", "<image"}) {
    EXPECT_EQ(svg.find(outside), std::string::npos) << outside;
  }
  EXPECT_LT(svg.size(), 30u * 1024u);
}

TEST(PerfPlot, EmptyPlotStillDrawsAxes) {
  const std::string svg = RenderPlot({});
  EXPECT_TRUE(WellFormed(svg));
  EXPECT_EQ(Count(svg, "<polyline"), 0u);
  EXPECT_NE(svg.find("message size (bytes)"), std::string::npos);
}

}  // namespace
}  // namespace loom::perf
