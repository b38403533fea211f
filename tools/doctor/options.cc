// Parsing of `loom doctor` options.
#include "tools/doctor/options.h"

#include <cctype>
#include <cstdlib>
#include <string>

namespace loom::doctor {

namespace {

Result<double> ParseNumber(const std::string& opt, const char* text, double lo, double hi) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(v >= lo && v <= hi)) {
    return InvalidArgument(opt + " needs a number in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                           "], not '" + text + "'");
  }
  return v;
}

}  // namespace

Result<double> ParseRate(std::string_view text) {
  const std::string s(text);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  std::string unit;
  for (const char* p = end; p != nullptr && *p != '\0'; ++p) unit += static_cast<char>(std::tolower(*p));
  double scale = 0;
  if (unit.empty() || unit == "g" || unit == "gbit" || unit == "gbps" || unit == "gb/s" || unit == "gbit/s") scale = 1;
  else if (unit == "m" || unit == "mbit" || unit == "mbps" || unit == "mb/s" || unit == "mbit/s") scale = 1e-3;
  else if (unit == "t" || unit == "tbit" || unit == "tbps") scale = 1e3;
  if (end == s.c_str() || scale == 0 || !(v > 0)) {
    return InvalidArgument("--expect: '" + s + "' is not a rate (examples: 100gbit, 800mbit, 25G)");
  }
  return v * scale;
}

Result<DoctorOptions> ParseDoctorArgs(int argc, char** argv) {
  DoctorOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
    auto need = [&]() -> Result<const char*> {
      if (value == nullptr) return InvalidArgument(a + " needs a value");
      ++i;
      return value;
    };
    if (a == "--help" || a == "-h") {
      o.help = true;
    } else if (a == "--json") {
      o.json = true;
    } else if (a == "--hosts") {
      LOOM_ASSIGN_OR_RETURN(const char* v, need());
      o.hostfile = v;
    } else if (a == "--expect") {
      LOOM_ASSIGN_OR_RETURN(const char* v, need());
      LOOM_ASSIGN_OR_RETURN(o.expect_gbps, ParseRate(v));
    } else if (a == "--probe-port") {
      LOOM_ASSIGN_OR_RETURN(const char* v, need());
      LOOM_ASSIGN_OR_RETURN(double p, ParseNumber(a, v, 1, 65535));
      o.probe_port = static_cast<int>(p);
    } else if (a == "--timeout-ms") {
      LOOM_ASSIGN_OR_RETURN(const char* v, need());
      LOOM_ASSIGN_OR_RETURN(double t, ParseNumber(a, v, 10, 600000));
      o.timeout_ms = static_cast<int>(t);
    } else if (a == "--wait") {
      LOOM_ASSIGN_OR_RETURN(const char* v, need());
      LOOM_ASSIGN_OR_RETURN(o.wait_s, ParseNumber(a, v, 0.1, 3600));
    } else if (a == "--stream-seconds") {
      LOOM_ASSIGN_OR_RETURN(const char* v, need());
      LOOM_ASSIGN_OR_RETURN(o.stream_seconds, ParseNumber(a, v, 0, 60));
    } else if (a == "--attach") {
      LOOM_ASSIGN_OR_RETURN(const char* v, need());
      o.attach = v;
    } else if (a == "--stall-s") {
      LOOM_ASSIGN_OR_RETURN(const char* v, need());
      LOOM_ASSIGN_OR_RETURN(o.stall_s, ParseNumber(a, v, 0, 86400));
    } else {
      return InvalidArgument("unknown option '" + a + "'");
    }
  }
  return o;
}

}  // namespace loom::doctor
