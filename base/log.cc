// Logging state (level, subsystem mask, output file) read from LOOM_DEBUG* /
// NCCL_DEBUG* and the config files, and the line writer behind LOOM_WARN etc.
#include "base/log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/params.h"

namespace loom::log {

namespace internal {
int g_level = -1;
// NCCL's default mask when NCCL_DEBUG_SUBSYS is unset.
uint64_t g_subsys_mask = kInit | kBootstrap | kEnv;
}  // namespace internal

namespace {

// Guards (re)initialisation and g_fd: a reload may close the file while
// another thread is about to write to it.
std::mutex g_mu;
int g_fd = STDERR_FILENO;  // owned (closed on reload) unless it is stderr

const char* LevelName(Level level) {
  switch (level) {
    case Level::kNone:
      return "NONE";
    case Level::kVersion:
      return "VERSION";
    case Level::kWarn:
      return "WARN";
    case Level::kInfo:
      return "INFO";
    case Level::kAbort:
      return "ABORT";
    case Level::kTrace:
      return "TRACE";
  }
  return "?";
}

struct SubsysName {
  const char* name;
  uint64_t bits;
};
constexpr SubsysName kSubsysNames[] = {
    {"INIT", kInit},
    {"COLL", kColl},
    {"P2P", kP2P},
    {"SHM", kShm},
    {"NET", kNet},
    {"GRAPH", kGraph},
    {"TUNING", kTuning},
    {"ENV", kEnv},
    {"ALLOC", kAlloc},
    {"CALL", kCall},
    {"PROXY", kProxy},
    {"NVLS", kNvls},
    {"BOOTSTRAP", kBootstrap},
    {"REG", kReg},
    {"PROFILE", kProfile},
    {"RAS", kRas},
    {"ALL", kAll},
};

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    auto lower = [](char c) {
      return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// NCCL_DEBUG: an unknown word means no output, as in NCCL.
Level ParseLevel(std::string_view s) {
  for (Level l : {Level::kVersion, Level::kWarn, Level::kInfo, Level::kAbort, Level::kTrace}) {
    if (EqualsIgnoreCase(s, LevelName(l))) return l;
  }
  return Level::kNone;
}

// NCCL_DEBUG_SUBSYS: comma-separated names; a leading '^' starts from ALL and
// removes the names instead. Unknown names are skipped (as NCCL does) and
// collected in *unknown so the caller can warn about them.
uint64_t ParseSubsys(std::string_view spec, std::string* unknown) {
  bool invert = !spec.empty() && spec.front() == '^';
  if (invert) spec.remove_prefix(1);
  uint64_t mask = invert ? static_cast<uint64_t>(kAll) : 0;
  while (!spec.empty()) {
    size_t comma = spec.find(',');
    std::string_view token = Trim(spec.substr(0, comma));
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    if (token.empty()) continue;
    uint64_t bits = 0;
    for (const SubsysName& n : kSubsysNames) {
      if (EqualsIgnoreCase(token, n.name)) bits = n.bits;
    }
    if (bits == 0) {
      if (!unknown->empty()) *unknown += ',';
      *unknown += token;
    } else if (invert) {
      mask &= ~bits;
    } else {
      mask |= bits;
    }
  }
  return mask;
}

// The host name as NCCL prints it: up to the first '.', with '%' and '/'
// turned into '-' so it is safe inside a file name.
const std::string& HostName() {
  static const std::string host = [] {
    char buf[256] = {};
    if (gethostname(buf, sizeof(buf) - 1) != 0) return std::string("unknown");
    std::string h(buf);
    h = h.substr(0, h.find('.'));
    for (char& c : h) {
      if (c == '%' || c == '/') c = '-';
    }
    return h;
  }();
  return host;
}

// NCCL_DEBUG_FILE: %h is the host, %p the pid, %% a percent sign; any other
// %x is kept as written.
std::string ExpandFileName(std::string_view pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    char c = pattern[++i];
    if (c == '%') {
      out += '%';
    } else if (c == 'h') {
      out += HostName();
    } else if (c == 'p') {
      out += std::to_string(getpid());
    } else {
      out += '%';
      out += c;
    }
  }
  return out;
}

// One write() per line (retried only if the kernel takes part of it), so
// lines from threads and processes sharing the file never interleave.
void WriteLine(const char* data, size_t len) {
  std::lock_guard<std::mutex> lock(g_mu);
  while (len > 0) {
    ssize_t n = write(g_fd, data, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nowhere left to report a failing log sink
    data += n;
    len -= static_cast<size_t>(n);
  }
}

// Formats "host:pid:tid loom LEVEL [file:line ]message\n" and writes it.
void FormatAndWrite(Level level, const char* file, int line, const char* fmt, va_list args) {
  char stack_buf[1024];
  std::string heap_buf;
  int prefix =
      std::snprintf(stack_buf, sizeof(stack_buf), "%s:%d:%d loom %s ", HostName().c_str(),
                    static_cast<int>(getpid()), static_cast<int>(gettid()), LevelName(level));
  if (level == Level::kTrace && file != nullptr) {
    const char* base = std::strrchr(file, '/');
    prefix += std::snprintf(stack_buf + prefix, sizeof(stack_buf) - static_cast<size_t>(prefix),
                            "%s:%d ", base != nullptr ? base + 1 : file, line);
  }
  // The prefix always fits (host and file base names are at most 255 bytes
  // each); the message may not, so measure it and move to the heap if need be.
  size_t room = sizeof(stack_buf) - static_cast<size_t>(prefix) - 1;  // keep one byte for '\n'
  va_list copy;
  va_copy(copy, args);
  int msg = std::vsnprintf(stack_buf + prefix, room + 1, fmt, copy);
  va_end(copy);
  if (msg < 0) msg = 0;
  char* buf = stack_buf;
  if (static_cast<size_t>(msg) > room) {
    heap_buf.resize(static_cast<size_t>(prefix) + static_cast<size_t>(msg) + 2);
    std::memcpy(heap_buf.data(), stack_buf, static_cast<size_t>(prefix));
    std::vsnprintf(heap_buf.data() + prefix, static_cast<size_t>(msg) + 1, fmt, args);
    buf = heap_buf.data();
  }
  size_t len = static_cast<size_t>(prefix) + static_cast<size_t>(msg);
  // A message that already ends its line does not get a second newline.
  if (len == static_cast<size_t>(prefix) || buf[len - 1] != '\n') buf[len++] = '\n';
  WriteLine(buf, len);
}

// Reads the environment and config files and publishes the new state.
// Called with g_mu held (params lookups never log, so this cannot re-enter);
// returns the warnings to log once the caller has released g_mu.
std::vector<std::string> InitLocked() {
  if (g_fd != STDERR_FILENO) {
    close(g_fd);
    g_fd = STDERR_FILENO;
  }
  std::vector<std::string> warnings;
  const Level level = ParseLevel(params::kDebug.Lookup().value);
  std::string unknown;
  const uint64_t mask = ParseSubsys(params::kDebugSubsys.Lookup().value, &unknown);
  if (!unknown.empty()) warnings.push_back("ignoring unknown debug subsystem(s) '" + unknown + "'");

  // Like NCCL, the file is only created when there is more than the version
  // line to write; an unopenable file leaves the output on stderr.
  const Param::Raw file = params::kDebugFile.Lookup();
  if (level > Level::kVersion && !file.value.empty()) {
    std::string path = ExpandFileName(file.value);
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0666);
    if (fd >= 0) {
      g_fd = fd;
    } else {
      warnings.push_back("cannot open debug file '" + path + "' (" + file.source +
                         "): " + std::strerror(errno) + "; logging to stderr");
    }
  }

  __atomic_store_n(&internal::g_subsys_mask, mask, __ATOMIC_RELAXED);
  __atomic_store_n(&internal::g_level, static_cast<int>(level), __ATOMIC_RELEASE);
  return warnings;
}

void LogWarnings(const std::vector<std::string>& warnings) {
  for (const std::string& w : warnings) LOOM_WARN(kEnv, "%s", w.c_str());
}

}  // namespace

namespace internal {

void InitFromEnv() {
  std::vector<std::string> warnings;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (__atomic_load_n(&g_level, __ATOMIC_ACQUIRE) >= 0) return;  // another thread won
    warnings = InitLocked();
  }
  LogWarnings(warnings);
}

}  // namespace internal

void Write(Level level, uint64_t subsys, const char* file, int line, const char* fmt, ...) {
  if (!Enabled(level, subsys)) return;  // also callable without the macros
  va_list args;
  va_start(args, fmt);
  FormatAndWrite(level, file, line, fmt, args);
  va_end(args);
}

void ReloadFromEnv() {
  std::vector<std::string> warnings;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    warnings = InitLocked();
  }
  LogWarnings(warnings);
}

}  // namespace loom::log
