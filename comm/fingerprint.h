// Fingerprint: what every rank must agree on before any transport is set
// up (version, build options, transports, key settings). Ranks exchange it
// first; a difference is named with ranks, hosts and values.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace loom {

using Fingerprint = std::vector<std::pair<std::string, std::string>>;

Fingerprint LocalFingerprint();
// How this library was built: (name, value) pairs, for fingerprints and `loom info`.
Fingerprint BuildOptions();
std::string EncodeFingerprint(const Fingerprint& fp);
Fingerprint DecodeFingerprint(const std::string& text);

// OK when all equal; else InvalidUsage listing, per differing key, which
// ranks (and hosts) hold which value.
Status CompareFingerprints(const std::vector<Fingerprint>& all, const std::vector<std::string>& hosts);

}  // namespace loom
