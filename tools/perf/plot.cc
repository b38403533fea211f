// SVG plots of `loom perf` results (--plot, --from).
#include "tools/perf/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "topology/json.h"

namespace loom::perf {
namespace {

// Layout in SVG user units (pixels).
constexpr double kWidth = 860;
constexpr double kLeft = 70;    // left edge of both panels (y labels to its left)
constexpr double kRight = 600;  // right edge of both panels; the legend follows
constexpr double kBwTop = 50, kBwBottom = 260;
constexpr double kTimeTop = 300, kTimeBottom = 510;
constexpr double kLegendX = 620;

// Colour-blind-friendly palette (Okabe and Ito, then darker shades).
constexpr const char* kColors[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00",
                                   "#56B4E9", "#000000", "#8C564B", "#7F7F7F", "#BCBD22"};

std::string Fmt(const char* format, double v) {
  char text[64];
  std::snprintf(text, sizeof(text), format, v);
  return text;
}

// A coordinate with one decimal: enough for a screen, short in the file.
std::string Coord(double v) {
  return Fmt("%.1f", v);
}

std::string XmlEscape(std::string_view text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string Variant(const Row& row) {
  std::string v(Name(row.type));
  if (row.redop != "none") v += " " + row.redop;
  if (row.root >= 0) v += " root " + std::to_string(row.root);
  return v;
}

// A "nice" step (1, 2 or 5 times a power of ten) that splits [0, top] into
// about `parts` intervals.
double NiceStep(double top, int parts) {
  const double raw = top / parts;
  const double decade = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 5.0}) {
    if (m * decade >= raw) return m * decade;
  }
  return 10 * decade;
}

// Maps a value on a logarithmic axis [lo, hi] to [from, to].
double LogMap(double v, double lo, double hi, double from, double to) {
  return from + (std::log(v) - std::log(lo)) / (std::log(hi) - std::log(lo)) * (to - from);
}

std::string Text(double x, double y, const std::string& anchor, const std::string& text,
                 const std::string& extra = "") {
  return "<text x=\"" + Coord(x) + "\" y=\"" + Coord(y) + "\" text-anchor=\"" + anchor + "\"" +
         extra + ">" + XmlEscape(text) + "</text>\n";
}

std::string Line(double x1, double y1, double x2, double y2, const std::string& cls) {
  return "<line class=\"" + cls + "\" x1=\"" + Coord(x1) + "\" y1=\"" + Coord(y1) + "\" x2=\"" +
         Coord(x2) + "\" y2=\"" + Coord(y2) + "\"/>\n";
}

}  // namespace

PlotRun PlotRunFromRows(std::string label, int nranks, const std::vector<Row>& rows) {
  PlotRun run{std::move(label), nranks, {}};
  for (const Row& row : rows) {
    for (const bool in_place : {false, true}) {
      const Measurement& m = in_place ? row.in_place : row.out_of_place;
      run.samples.push_back({std::string(Name(row.collective)), Variant(row), in_place,
                             static_cast<double>(row.bytes), m.busbw, m.time_us});
    }
  }
  return run;
}

Result<PlotRun> ParsePlotRun(std::string_view json_text, std::string label) {
  auto parsed = json::Parse(json_text);
  if (!parsed.ok()) {
    return InvalidArgument("--from " + label +
                           ": not loom perf --json output: " + parsed.status().message());
  }
  const json::Value& doc = parsed.value();
  const json::Value* rows = doc.Find("rows");
  if (rows == nullptr || !rows->is_array()) {
    return InvalidArgument("--from " + label +
                           ": no \"rows\" array (is it loom perf --json output?)");
  }
  PlotRun run;
  run.label = std::move(label);
  if (const json::Value* n = doc.Find("nranks"); n != nullptr && n->is_number()) {
    run.nranks = static_cast<int>(n->number());
  }
  for (const json::Value& row : rows->array()) {
    const json::Value* coll = row.Find("collective");
    const json::Value* size = row.Find("size");
    const json::Value* busbw = row.Find("busbw_gbps");
    const json::Value* time = row.Find("time_us");
    if (coll == nullptr || !coll->is_string() || size == nullptr || !size->is_number() ||
        busbw == nullptr || time == nullptr) {
      return InvalidArgument("--from " + run.label +
                             ": a row lacks collective, size, busbw_gbps or time_us");
    }
    PlotSample s;
    s.collective = coll->string();
    const json::Value* type = row.Find("type");
    const json::Value* redop = row.Find("redop");
    const json::Value* root = row.Find("root");
    if (type != nullptr && type->is_string()) s.variant = type->string();
    if (redop != nullptr && redop->is_string() && redop->string() != "none") {
      s.variant += " " + redop->string();
    }
    if (root != nullptr && root->is_number() && root->number() >= 0) {
      s.variant += " root " + std::to_string(static_cast<int>(root->number()));
    }
    const json::Value* placement = row.Find("placement");
    s.in_place =
        placement != nullptr && placement->is_string() && placement->string() == "in-place";
    s.bytes = size->number();
    // A measurement written as null (not finite) is left out of the lines.
    s.busbw_gbps = busbw->is_number() ? busbw->number() : NAN;
    s.time_us = time->is_number() ? time->number() : NAN;
    run.samples.push_back(std::move(s));
  }
  return run;
}

Result<PlotRun> ReadPlotRun(const std::string& path) {
  std::ifstream in(path);
  if (!in) return InvalidArgument("--from " + path + ": cannot read the file");
  std::stringstream text;
  text << in.rdbuf();
  std::string label = path.substr(path.find_last_of('/') + 1);
  if (label.size() > 5 && label.ends_with(".json")) label.resize(label.size() - 5);
  return ParsePlotRun(text.str(), label);
}

std::vector<PlotSeries> BuildSeries(const std::vector<PlotRun>& runs) {
  std::vector<PlotSeries> out;
  for (const PlotRun& run : runs) {
    // Collectives in order of first appearance; the variants of each.
    std::vector<std::string> collectives;
    std::map<std::string, std::vector<std::string>> variants;
    for (const PlotSample& s : run.samples) {
      if (std::find(collectives.begin(), collectives.end(), s.collective) == collectives.end()) {
        collectives.push_back(s.collective);
      }
      auto& v = variants[s.collective];
      if (std::find(v.begin(), v.end(), s.variant) == v.end()) v.push_back(s.variant);
    }
    for (const std::string& coll : collectives) {
      for (const std::string& variant : variants[coll]) {
        // size -> (sum busbw, sum time, samples)
        std::map<double, std::tuple<double, double, int>> by_size;
        for (const PlotSample& s : run.samples) {
          if (s.collective != coll || s.variant != variant || s.in_place || s.bytes <= 0 ||
              !std::isfinite(s.busbw_gbps) || !std::isfinite(s.time_us)) {
            continue;
          }
          auto& [bw, us, n] = by_size[s.bytes];
          bw += s.busbw_gbps;
          us += s.time_us;
          ++n;
        }
        PlotSeries series;
        series.label = run.label.empty() ? coll : run.label + " " + coll;
        if (variants[coll].size() > 1) series.label += " " + variant;
        for (const auto& [bytes, sums] : by_size) {
          const auto& [bw, us, n] = sums;
          series.points.push_back({bytes, bw / n, us / n});
        }
        out.push_back(std::move(series));
      }
    }
  }
  return out;
}

std::vector<double> LogTicks(double lo, double hi, double base, int max_ticks) {
  // A little slack so that exact powers survive the logarithm's rounding.
  const double first = std::ceil(std::log(lo) / std::log(base) - 1e-9);
  const double last = std::floor(std::log(hi) / std::log(base) + 1e-9);
  std::vector<double> ticks;
  if (last < first) return ticks;
  const int count = static_cast<int>(last - first) + 1;
  const int stride = (count + max_ticks - 1) / max_ticks;
  for (double k = first; k <= last; k += stride) ticks.push_back(std::pow(base, k));
  return ticks;
}

std::string FormatBytesLabel(double bytes) {
  static constexpr const char* kUnits[] = {"", "K", "M", "G", "T"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  return Fmt("%g", bytes) + kUnits[unit];
}

std::string RenderSvg(const std::vector<PlotSeries>& series, const std::string& title) {
  // Axis ranges over every point of every series.
  double x_lo = INFINITY, x_hi = 0, bw_hi = 0, t_lo = INFINITY, t_hi = 0;
  for (const PlotSeries& s : series) {
    for (const PlotPoint& p : s.points) {
      x_lo = std::min(x_lo, p.bytes);
      x_hi = std::max(x_hi, p.bytes);
      bw_hi = std::max(bw_hi, p.busbw_gbps);
      if (p.time_us > 0) {
        t_lo = std::min(t_lo, p.time_us);
        t_hi = std::max(t_hi, p.time_us);
      }
    }
  }
  if (x_hi == 0) x_lo = 1, x_hi = 1024;  // nothing to draw: empty axes
  if (t_hi == 0) t_lo = 1, t_hi = 10;
  // Powers of two around the sizes; decades around the times.
  x_lo = std::exp2(std::floor(std::log2(x_lo)));
  x_hi = std::max(std::exp2(std::ceil(std::log2(x_hi))), 2 * x_lo);
  t_lo = std::pow(10.0, std::floor(std::log10(t_lo)));
  t_hi = std::max(std::pow(10.0, std::ceil(std::log10(t_hi))), 10 * t_lo);
  const double bw_step = NiceStep(bw_hi > 0 ? bw_hi : 1, 5);
  const double bw_top = std::max(1.0, std::ceil(bw_hi / bw_step - 1e-9)) * bw_step;

  auto x_of = [&](double bytes) { return LogMap(bytes, x_lo, x_hi, kLeft, kRight); };
  auto bw_y = [&](double gbps) { return kBwBottom - gbps / bw_top * (kBwBottom - kBwTop); };
  auto t_y = [&](double us) {
    return LogMap(std::max(us, t_lo), t_lo, t_hi, kTimeBottom, kTimeTop);
  };

  const double legend_bottom = kBwTop + 20.0 * static_cast<double>(series.size());
  const double height = std::max(560.0, legend_bottom + 20);
  std::string svg = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" + Coord(kWidth) +
         "\" height=\"" + Coord(height) + "\" viewBox=\"0 0 " + Coord(kWidth) + " " +
         Coord(height) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg +=
      "<style>.grid{stroke:#ddd;stroke-width:1}.axis{stroke:#333;stroke-width:1}"
      ".series{fill:none;stroke-width:2}</style>\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += Text(kWidth / 2, 22, "middle", title, " font-size=\"15\"");

  // Vertical grid and size labels, shared by both panels.
  svg += "<g id=\"x-ticks\">\n";
  for (const double x : LogTicks(x_lo, x_hi, 2, 10)) {
    svg += Line(x_of(x), kBwTop, x_of(x), kBwBottom, "grid");
    svg += Line(x_of(x), kTimeTop, x_of(x), kTimeBottom, "grid");
    svg += Text(x_of(x), kTimeBottom + 16, "middle", FormatBytesLabel(x));
  }
  svg += "</g>\n";
  svg += Text((kLeft + kRight) / 2, kTimeBottom + 36, "middle", "message size (bytes)");

  // Bus bandwidth panel: linear from 0.
  svg += "<g id=\"busbw-ticks\">\n";
  for (double v = 0; v <= bw_top + bw_step / 2; v += bw_step) {
    svg += Line(kLeft, bw_y(v), kRight, bw_y(v), "grid");
    svg += Text(kLeft - 6, bw_y(v) + 4, "end", Fmt("%g", v));
  }
  svg += "</g>\n";
  svg += Text(kLeft, kBwTop - 8, "start", "bus bandwidth (GB/s), out-of-place");
  // Time panel: logarithmic decades.
  svg += "<g id=\"time-ticks\">\n";
  for (const double t : LogTicks(t_lo, t_hi, 10, 8)) {
    svg += Line(kLeft, t_y(t), kRight, t_y(t), "grid");
    svg += Text(kLeft - 6, t_y(t) + 4, "end", Fmt("%g", t));
  }
  svg += "</g>\n";
  svg += Text(kLeft, kTimeTop - 8, "start", "time (us), out-of-place");
  for (const auto& [top, bottom] :
       {std::pair{kBwTop, kBwBottom}, std::pair{kTimeTop, kTimeBottom}}) {
    svg += "<rect class=\"axis\" fill=\"none\" x=\"" + Coord(kLeft) + "\" y=\"" + Coord(top) +
           "\" width=\"" + Coord(kRight - kLeft) + "\" height=\"" + Coord(bottom - top) + "\"/>\n";
  }

  // One polyline with markers per series and panel, then its legend entry.
  for (size_t i = 0; i < series.size(); ++i) {
    const PlotSeries& s = series[i];
    const std::string color = kColors[i % std::size(kColors)];
    // Beyond the palette, a dash tells lines of one colour apart.
    const std::string dash = i >= std::size(kColors) ? " stroke-dasharray=\"6 3\"" : "";
    svg += "<g stroke=\"" + color + "\" fill=\"" + color + "\">\n";
    svg += "<title>" + XmlEscape(s.label) + "</title>\n";
    for (const bool bw_panel : {true, false}) {
      std::string points;
      std::string markers;
      for (const PlotPoint& p : s.points) {
        const double x = x_of(p.bytes);
        const double y = bw_panel ? bw_y(p.busbw_gbps) : t_y(p.time_us);
        points += (points.empty() ? "" : " ") + Coord(x) + "," + Coord(y);
        markers += "<circle cx=\"" + Coord(x) + "\" cy=\"" + Coord(y) + "\" r=\"2.5\"/>";
      }
      svg +=
          "<polyline class=\"series\"" + dash + " points=\"" + points + "\"/>\n" + markers + "\n";
    }
    svg += "</g>\n";
    const double ly = kBwTop + 20.0 * static_cast<double>(i);
    svg += "<g class=\"legend\"><line x1=\"" + Coord(kLegendX) + "\" y1=\"" + Coord(ly) +
           "\" x2=\"" + Coord(kLegendX + 24) + "\" y2=\"" + Coord(ly) + "\" stroke=\"" + color +
           "\" stroke-width=\"2\"" + dash + "/>" + Text(kLegendX + 30, ly + 4, "start", s.label) +
           "</g>\n";
  }
  svg += "</svg>\n";
  return svg;
}

std::string RenderPlot(const std::vector<PlotRun>& runs) {
  std::set<int> ranks;
  for (const PlotRun& r : runs) {
    if (r.nranks > 0) ranks.insert(r.nranks);
  }
  std::string title = "loom perf";
  if (ranks.size() == 1) {
    title += ", " + std::to_string(*ranks.begin()) + (*ranks.begin() == 1 ? " rank" : " ranks");
  }
  return RenderSvg(BuildSeries(runs), title);
}

}  // namespace loom::perf
