// `loom doctor` command-line options, parsed without side effects so that
// every flag and error is unit-tested.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace loom::doctor {

struct DoctorOptions {
  bool help = false;
  bool json = false;
  std::string hostfile;        // --hosts
  double expect_gbps = 0;      // --expect, in Gbit/s
  int probe_port = 0;          // --probe-port; 0: rendezvous port + 1
  int timeout_ms = 2000;       // --timeout-ms
  double wait_s = 30;          // --wait
  double stream_seconds = 0.5; // --stream-seconds
  std::string attach;          // --attach endpoints
  double stall_s = 10;         // --stall-s
};

// A link rate in Gbit/s from "100gbit", "800mbit", "25G", "400M", "2.5gbps"
// or a bare number (Gbit/s), case-insensitive. InvalidArgument quoting the
// text otherwise, or when not positive.
Result<double> ParseRate(std::string_view text);

// argv[0] is "doctor". InvalidArgument naming the option on an unknown
// flag, a missing value or a value out of range.
Result<DoctorOptions> ParseDoctorArgs(int argc, char** argv);

}  // namespace loom::doctor
