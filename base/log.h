// Logging with NCCL's habits: NCCL_DEBUG levels, NCCL_DEBUG_SUBSYS bits,
// NCCL_DEBUG_FILE (%h host, %p pid), line prefix "host:pid:tid loom LEVEL".
//
// Thread-safe. The level check is one relaxed atomic load, done before any
// formatting. LOOM_DEBUG* twins are read first, then NCCL_DEBUG*.
#pragma once

#include <cstdint>

namespace loom::log {

// Same numbering as NCCL's ncclDebugLogLevel.
enum class Level : int { kNone = 0, kVersion = 1, kWarn = 2, kInfo = 3, kAbort = 4, kTrace = 5 };

// Same bits as NCCL's ncclDebugLogSubSys.
enum Subsys : uint64_t {
  kInit = 0x1,
  kColl = 0x2,
  kP2P = 0x4,
  kShm = 0x8,
  kNet = 0x10,
  kGraph = 0x20,
  kTuning = 0x40,
  kEnv = 0x80,
  kAlloc = 0x100,
  kCall = 0x200,
  kProxy = 0x400,
  kNvls = 0x800,
  kBootstrap = 0x1000,
  kReg = 0x2000,
  kProfile = 0x4000,
  kRas = 0x8000,
  kAll = ~0ull,
};

namespace internal {
extern int g_level;            // effective level; -1 before the first read of the env
extern uint64_t g_subsys_mask;  // effective NCCL_DEBUG_SUBSYS mask
void InitFromEnv();
}  // namespace internal

inline bool Enabled(Level level, uint64_t subsys) {
  int cur = __atomic_load_n(&internal::g_level, __ATOMIC_RELAXED);
  if (cur < 0) {
    internal::InitFromEnv();
    cur = __atomic_load_n(&internal::g_level, __ATOMIC_RELAXED);
  }
  if (static_cast<int>(level) > cur) return false;
  // WARN and VERSION are never filtered by subsystem, as in NCCL.
  if (level <= Level::kWarn) return true;
  return (__atomic_load_n(&internal::g_subsys_mask, __ATOMIC_RELAXED) & subsys) != 0;
}

void Write(Level level, uint64_t subsys, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));

// Re-reads the environment (tests change NCCL_DEBUG between cases).
void ReloadFromEnv();

}  // namespace loom::log

#define LOOM_LOG(level, subsys, ...)                                               \
  do {                                                                             \
    if (::loom::log::Enabled(level, subsys))                                       \
      ::loom::log::Write(level, subsys, __FILE__, __LINE__, __VA_ARGS__);          \
  } while (0)
#define LOOM_WARN(subsys, ...) LOOM_LOG(::loom::log::Level::kWarn, subsys, __VA_ARGS__)
#define LOOM_INFO(subsys, ...) LOOM_LOG(::loom::log::Level::kInfo, subsys, __VA_ARGS__)
#define LOOM_TRACE(subsys, ...) LOOM_LOG(::loom::log::Level::kTrace, subsys, __VA_ARGS__)
