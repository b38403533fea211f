// The declared parameters and their lookup: LOOM_X, then NCCL_X, then the
// config files (NCCL's NAME=value format), then the default.
#include "base/params.h"

#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>

#include "base/log.h"

namespace loom {

namespace {

// One NAME=value line of a config file.
struct ConfigEntry {
  std::string value;
  size_t file_rank;  // position of its file in the search order; lower wins
  std::string file;
};
using ConfigMap = std::unordered_map<std::string, ConfigEntry>;  // key: "LOOM_X" or "NCCL_X"

// The cached config files: loaded on first use, dropped by the test hook.
// Loading must never log: the log module reads DEBUG* through Lookup() while
// holding its own lock.
std::mutex g_config_mu;
std::shared_ptr<const ConfigMap> g_config;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

const char* GetEnv(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  return (v != nullptr && *v != '\0') ? v : nullptr;  // set-but-empty counts as unset
}

// Home directory: $HOME, else the password database (NCCL uses the latter).
std::string HomeDir() {
  if (const char* home = GetEnv("HOME")) return home;
  struct passwd* pw = getpwuid(getuid());
  return (pw != nullptr && pw->pw_dir != nullptr) ? pw->pw_dir : "";
}

// Search order, first wins: the file named by LOOM_CONF_FILE / NCCL_CONF_FILE,
// or else the user's ~/.loom_env and ~/.nccl.conf; then the system files.
std::vector<std::string> ConfigFilePaths() {
  std::vector<std::string> paths;
  if (const char* f = GetEnv("LOOM_CONF_FILE")) {
    paths.emplace_back(f);
  } else if (const char* g = GetEnv("NCCL_CONF_FILE")) {
    paths.emplace_back(g);
  } else if (std::string home = HomeDir(); !home.empty()) {
    paths.push_back(home + "/.loom_env");
    paths.push_back(home + "/.nccl.conf");
  }
  paths.emplace_back("/etc/loom.conf");
  paths.emplace_back("/etc/nccl.conf");
  return paths;
}

// Adds the NAME=value lines of one file; a missing or unreadable file is
// skipped silently, as NCCL does. Blank lines and '#' comments are skipped;
// a name already present (from an earlier file or line) is kept.
void ParseConfigFile(const std::string& path, size_t rank, ConfigMap* out) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::string_view l = Trim(line);
    if (l.empty() || l.front() == '#') continue;
    size_t eq = l.find('=');
    if (eq == std::string_view::npos) continue;
    std::string name(Trim(l.substr(0, eq)));
    std::string value(Trim(l.substr(eq + 1)));
    if (name.empty() || value.empty()) continue;  // an empty value does not hide a later file
    out->try_emplace(std::move(name), ConfigEntry{std::move(value), rank, path});
  }
}

std::shared_ptr<const ConfigMap> Config() {
  std::lock_guard<std::mutex> lock(g_config_mu);
  if (!g_config) {
    auto map = std::make_shared<ConfigMap>();
    std::vector<std::string> paths = ConfigFilePaths();
    for (size_t i = 0; i < paths.size(); ++i) ParseConfigFile(paths[i], i, map.get());
    g_config = std::move(map);
  }
  return g_config;
}

// NCCL's integer syntax: strtoll with base 0 (so 0x10 is hex, 010 is octal),
// nothing but the number.
bool ParseInt(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 0);
  if (errno != 0 || end == s.c_str() || *end != '\0') return false;
  *out = v;
  return true;
}

bool ParseBool(const std::string& s, bool* out) {
  std::string lower;
  for (char c : s) lower += (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  if (lower == "true" || lower == "yes" || lower == "on") {
    *out = true;
    return true;
  }
  if (lower == "false" || lower == "no" || lower == "off") {
    *out = false;
    return true;
  }
  // NCCL's flags are integers: any nonzero number means true.
  int64_t v = 0;
  if (!ParseInt(s, &v)) return false;
  *out = v != 0;
  return true;
}

}  // namespace

Param::Raw Param::Lookup() const {
  const std::string loom_name = std::string("LOOM_") + name_;
  const std::string nccl_name = std::string("NCCL_") + name_;
  if (const char* v = GetEnv(loom_name)) return {v, "env " + loom_name};
  if (nccl_twin_) {
    if (const char* v = GetEnv(nccl_name)) return {v, "env " + nccl_name};
  }
  std::shared_ptr<const ConfigMap> config = Config();
  const ConfigEntry* best = nullptr;
  if (auto it = config->find(loom_name); it != config->end()) best = &it->second;
  if (nccl_twin_) {
    auto it = config->find(nccl_name);
    // In one file LOOM_X beats NCCL_X; across files the earlier file wins.
    if (it != config->end() && (best == nullptr || it->second.file_rank < best->file_rank)) {
      best = &it->second;
    }
  }
  if (best != nullptr) return {best->value, "file " + best->file};
  return {default_, "default"};
}

Status Param::Check() const {
  if (type_ == ParamType::kString) return Status::Ok();
  const Raw raw = Lookup();
  if (raw.source == "default") return Status::Ok();
  // The variable as the user wrote it: "NCCL_BUFFSIZE", or the name in a file.
  const std::string var = raw.source.rfind("env ", 0) == 0
                              ? raw.source.substr(4)
                              : std::string(nccl_twin_ ? "NCCL_" : "LOOM_") + name_ + " (" +
                                    raw.source + ")";
  const std::string said = var + "=" + raw.value;
  if (type_ == ParamType::kBool) {
    bool b = false;
    if (ParseBool(raw.value, &b)) return Status::Ok();
    return InvalidArgument(said + " is not a boolean: accepted 1/0, true/false, yes/no, on/off");
  }
  const std::string accepted = "accepted " + std::to_string(min_) + " to " +
                               std::to_string(max_) + " (default " + default_ + ")";
  int64_t v = 0;
  if (!ParseInt(raw.value, &v)) return InvalidArgument(said + " is not an integer: " + accepted);
  if (v < min_ || v > max_) return InvalidArgument(said + " is out of range: " + accepted);
  return Status::Ok();
}

int64_t IntParam::Get() const {
  Raw raw = Lookup();
  int64_t v = 0;
  if (ParseInt(raw.value, &v) && v >= min() && v <= max()) return v;
  LOOM_WARN(log::kEnv, "%s from %s is '%s', not an integer from %lld to %lld; using the default %s",
            name(), raw.source.c_str(), raw.value.c_str(), static_cast<long long>(min()),
            static_cast<long long>(max()), default_value());
  return ParseInt(default_value(), &v) ? v : 0;
}

bool BoolParam::Get() const {
  Raw raw = Lookup();
  bool v = false;
  if (ParseBool(raw.value, &v)) return v;
  LOOM_WARN(log::kEnv,
            "%s from %s is '%s', not a boolean (1/0, true/false, yes/no, on/off); using the "
            "default %s",
            name(), raw.source.c_str(), raw.value.c_str(), default_value());
  return ParseBool(default_value(), &v) && v;
}

std::string StringParam::Get() const {
  return Lookup().value;
}

namespace params {

// clang-format off
const IntParam kTimeoutMs("TIMEOUT_MS", "300000", false,
    "Milliseconds any blocking step (bootstrap, connect, collective) may wait; 0 = never time out",
    0, int64_t{365} * 24 * 3600 * 1000);
const StringParam kSocketIfname("SOCKET_IFNAME", "", true,
    "Interfaces for TCP: prefix list, ^ to exclude, = for exact names (NCCL grammar)");
const StringParam kSocketFamily("SOCKET_FAMILY", "", true,
    "Address family for TCP: AF_INET or AF_INET6; empty = either");
const IntParam kSocketNthreads("SOCKET_NTHREADS", "1", true,
    "With NSOCKS_PERTHREAD: TCP sockets per peer and direction = product (driven from one thread)",
    1, 16);
const IntParam kNsocksPerthread("NSOCKS_PERTHREAD", "1", true,
    "With SOCKET_NTHREADS: TCP sockets per peer and direction = product; messages striped over them",
    1, 64);
const BoolParam kShmDisable("SHM_DISABLE", "0", true,
    "Do not use the shared-memory transport between ranks on one host");
const BoolParam kP2pDisable("P2P_DISABLE", "0", true,
    "Do not read peers' GPU memory directly (CUDA IPC); device buffers are staged through host memory");
const StringParam kP2pLevel("P2P_LEVEL", "", true,
    "Farthest GPU-to-GPU path for CUDA IPC: LOC, NVL, PIX, PXB, PHB or SYS (or 0-5); empty = PXB");
const IntParam kCudaStagingChunk("CUDA_STAGING_CHUNK", "1048576", false,
    "Bytes per pipelined chunk when device buffers of an all-reduce, broadcast or reduce are staged through host memory; 0 = whole buffers",
    0, int64_t{1} << 30);
const IntParam kCudaIpcCopyBytes("CUDA_IPC_COPY_BYTES", "4194304", false,
    "Through CUDA IPC, a collective whose shared bytes fit is copied into a device buffer peers mapped once, instead of peers mapping its unregistered buffers; 0 = always map",
    0, int64_t{1} << 30);
const StringParam kNet("NET", "", true,
    "Network transport for links between hosts: IB, Socket or UCX; when set, no fallback");
const BoolParam kIbDisable("IB_DISABLE", "0", true,
    "Do not use InfiniBand/RoCE verbs, natively or through UCX");
const StringParam kRequireTransport("REQUIRE_TRANSPORT", "", false,
    "Strict mode: ib, ucx, socket or shm must be used where it applies; any fallback is an error");
const StringParam kIbHca("IB_HCA", "", true,
    "HCAs (and :ports) to use, NCCL grammar: mlx5_0:1,mlx5_1 ; ^ excludes ; = exact");
const IntParam kIbGidIndex("IB_GID_INDEX", "-1", true,
    "RoCE GID table index to use; -1 = automatic (RoCEv2 IPv4 on the socket subnet first)",
    -1, 255);
const IntParam kIbTimeout("IB_TIMEOUT", "20", true,
    "IB queue pair ACK timeout exponent, 1..31: 4.096 us x 2^value per retry", 1, 31);
const StringParam kNetGdrLevel("NET_GDR_LEVEL", "", true,
    "Farthest GPU-to-NIC path for GPUDirect RDMA: LOC, NVL, PIX, PXB, PHB or SYS (or 0-5); empty = PXB");
const IntParam kNetGdrRead("NET_GDR_READ", "-1", true,
    "GPUDirect RDMA for sends too (the NIC reads GPU memory): 1 on, 0 staged through host memory; -1 = on",
    -1, 1);
const BoolParam kDmabufEnable("DMABUF_ENABLE", "1", true,
    "Register GPU memory for GPUDirect RDMA as a Linux dma-buf (ibv_reg_dmabuf_mr) when the driver offers it");
const IntParam kIbRetryCnt("IB_RETRY_CNT", "7", true,
    "IB queue pair transport retries before a write fails, 0..7", 0, 7);
const BoolParam kShmSingleCopy("SHM_SINGLE_COPY", "1", false,
    "Ranks on one host may read each other's buffers directly (process_vm_readv) for large "
    "collectives; 0 = always through the shared-memory FIFOs");
const StringParam kShmReadPrice("SHM_READ_PRICE", "", false,
    "GBS[,US]: price single-copy reads at GBS GB/s plus US us per read (default 20) in the cost "
    "model instead of timing them at setup; empty = time them");
const StringParam kShmStream("SHM_STREAM", "", false,
    "Senders write messages of 4 KiB and more into the shared-memory FIFOs with streaming "
    "(non-temporal) stores: 1 = always, 0 = never, empty = start as setup's timing of a ring "
    "step through the FIFOs each way finds faster, then keep the way each collective and size "
    "was faster in its own timed calls");
const BoolParam kShmSmall("SHM_SMALL", "1", false,
    "One-host communicators run collectives of at most 1 KiB per rank through a slot per rank "
    "in shared memory instead of messages; 0 = always messages");
// 1 MiB, not NCCL's 4 MiB: a FIFO that stays in the receiving core's L2
// moves large collectives faster than one that spills to memory.
const IntParam kBuffsize("BUFFSIZE", "1048576", true,
    "Bytes of each per-peer, per-direction shared-memory FIFO", 4096, int64_t{1} << 30);
const StringParam kAlgo("ALGO", "", true,
    "Force or exclude algorithms, NCCL_ALGO grammar (e.g. Ring, ^Tree, allreduce:ring)");
const StringParam kTune("TUNE", "", false,
    "Algorithm per collective and size range, over the cost model; NCCL_ALGO still excludes "
    "(e.g. allreduce:0-64K=rd,64K-inf=ring;allgather:*=ring)");
const StringParam kTopoFile("TOPO_FILE", "", true,
    "Load the host topology from this file instead of probing (loom JSON or NCCL XML)");
const StringParam kTopoDumpFile("TOPO_DUMP_FILE", "", false,
    "Write the host topology, as detected or loaded, to this file (loom JSON)");
const IntParam kStatusPort("STATUS_PORT", "0", false,
    "Serve per-communicator progress for `loom doctor --attach` on TCP port value + local rank; "
    "0 = off", 0, 65535);
const IntParam kSpinUs("SPIN_US", "50", false,
    "Microseconds to poll for progress before sleeping", 0, 1000000);
const StringParam kDebug("DEBUG", "", true,
    "Log level: VERSION, WARN, INFO, ABORT or TRACE; unset = no output");
const StringParam kDebugSubsys("DEBUG_SUBSYS", "INIT,BOOTSTRAP,ENV", true,
    "Subsystems logged at INFO/TRACE, comma-separated; a leading ^ excludes them");
const StringParam kDebugFile("DEBUG_FILE", "", true,
    "Write the log to this file instead of stderr; %h = host name, %p = pid");
// clang-format on

const std::vector<const Param*>& All() {
  static const std::vector<const Param*> all = {
      &kTimeoutMs,  &kSocketIfname,  &kSocketFamily,     &kSocketNthreads,   &kNsocksPerthread,
      &kShmDisable, &kShmSingleCopy, &kShmReadPrice,     &kShmStream,        &kShmSmall,
      &kP2pDisable, &kP2pLevel,      &kCudaStagingChunk, &kCudaIpcCopyBytes, &kNet,
      &kIbDisable,  &kNetGdrLevel,   &kNetGdrRead,       &kDmabufEnable,     &kRequireTransport,
      &kIbHca,      &kIbGidIndex,    &kIbTimeout,        &kIbRetryCnt,       &kBuffsize,
      &kAlgo,       &kTune,          &kTopoFile,         &kTopoDumpFile,     &kStatusPort,
      &kSpinUs,     &kDebug,         &kDebugSubsys,      &kDebugFile,
  };
  return all;
}

Status CheckAll() {
  std::string bad;
  for (const Param* p : All()) {
    if (Status s = p->Check(); !s.ok()) bad += (bad.empty() ? "" : "; ") + s.message();
  }
  return bad.empty() ? Status::Ok() : InvalidArgument(bad);
}

void ReloadConfigFilesForTest() {
  std::lock_guard<std::mutex> lock(g_config_mu);
  g_config.reset();
}

}  // namespace params

}  // namespace loom
