// Loss and gradient comparison for the parity tests.
#include "trainer/compare.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>

namespace loom::train {

Result<std::vector<double>> ReadLosses(const std::string& path) {
  std::ifstream in(path);
  if (!in) return SystemError("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const size_t key = text.find("\"losses\"");
  const size_t open = text.find('[', key);
  const size_t close = text.find(']', open);
  if (key == std::string::npos || open == std::string::npos || close == std::string::npos) {
    return InvalidArgument(path + ": no \"losses\" array");
  }
  std::vector<double> out;
  std::stringstream list(text.substr(open + 1, close - open - 1));
  std::string item;
  while (std::getline(list, item, ',')) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (end == item.c_str()) return InvalidArgument(path + ": bad number '" + item + "'");
    out.push_back(v);
  }
  return out;
}

Status CompareLosses(const std::vector<double>& a, const std::vector<double>& b, double tol,
                     std::string* report) {
  if (a.size() != b.size() || a.empty()) {
    return InvalidArgument("step counts differ: " + std::to_string(a.size()) + " vs " +
                           std::to_string(b.size()));
  }
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(a[i] - b[i]);
    if (d > worst || std::isnan(d)) {
      worst = std::isnan(d) ? INFINITY : d;
      at = i;
    }
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, "losses: %zu steps, max |diff| %.3g at step %zu (tol %.3g)",
                a.size(), worst, at, tol);
  *report = buf;
  return worst <= tol ? Status::Ok() : InternalError(*report);
}

namespace {
struct Record {
  uint32_t tensor, element;
  float value;
};

Status ReadRecords(const std::string& path, std::vector<Record>* out) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return SystemError("cannot read " + path);
  Record r;
  while (std::fread(&r, sizeof r, 1, f) == 1) out->push_back(r);
  std::fclose(f);
  return Status::Ok();
}

uint64_t Key(const Record& r) { return (static_cast<uint64_t>(r.tensor) << 32) | r.element; }
}  // namespace

Status CompareGrads(const std::vector<std::string>& ref_files,
                    const std::vector<std::string>& cand_files, double tol, std::string* report) {
  std::vector<Record> ref, cand;
  for (const auto& p : ref_files) LOOM_TRY(ReadRecords(p, &ref));
  for (const auto& p : cand_files) LOOM_TRY(ReadRecords(p, &cand));
  if (ref.empty()) return InvalidArgument("no reference gradients");
  std::unordered_map<uint64_t, float> ref_value;
  std::map<uint32_t, double> max_abs;  // per tensor
  for (const Record& r : ref) {
    ref_value[Key(r)] = r.value;
    max_abs[r.tensor] = std::max(max_abs[r.tensor], std::fabs(static_cast<double>(r.value)));
  }
  std::unordered_map<uint64_t, bool> covered;
  double worst = 0;  // diff / max_abs
  uint32_t worst_tensor = 0;
  size_t unknown = 0;
  for (const Record& c : cand) {
    auto it = ref_value.find(Key(c));
    if (it == ref_value.end()) {
      ++unknown;
      continue;
    }
    covered[Key(c)] = true;
    const double d = std::fabs(static_cast<double>(c.value) - it->second);
    const double scale = max_abs[c.tensor] > 0 ? max_abs[c.tensor] : 1.0;
    const double rel = std::isnan(d) ? INFINITY : d / scale;
    if (rel > worst) {
      worst = rel;
      worst_tensor = c.tensor;
    }
  }
  const size_t missing = ref_value.size() - covered.size();
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "grads: %zu elements, %zu missing, %zu unknown, worst |diff|/max|ref| %.3g in "
                "tensor %u (tol %.3g)",
                ref_value.size(), missing, unknown, worst, worst_tensor, tol);
  *report = buf;
  if (missing != 0 || unknown != 0 || worst > tol) return InternalError(*report);
  return Status::Ok();
}

}  // namespace loom::train
