// printf into a std::string: the one formatter for messages and reports.
#pragma once

#include <string>

namespace loom {

// The whole result, however long.
std::string StrPrintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace loom
