// Loading UCX at run time (ucx_api.h): dlopen of libucp and libucs, the
// symbol table, and the fatal-signal handlers libucs installs put back.
#include "transports/ucx/ucx_api.h"

#include <dlfcn.h>
#include <signal.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <string_view>

namespace loom {

namespace {

template <typename F>
bool Sym(void* handle, const char* name, F* out, std::string* error) {
  *out = reinterpret_cast<F>(dlsym(handle, name));
  if (*out == nullptr && error->empty()) *error = std::string(name) + " missing";
  return *out != nullptr;
}

// What the user can do about a UCX that does not load: it was selected
// explicitly, so every way out is worth naming.
std::string Remedy(const char* library) {
  return std::string(": install UCX (Debian/Ubuntu: libucx0) or add the directory holding ") +
         library +
         " to LD_LIBRARY_PATH, or choose another transport than UCX (NCCL_NET=Socket or IB)";
}

// Loading libucs installs UCX's handlers for SIGSEGV, SIGBUS, SIGILL and
// SIGFPE in the user's program, so any crash of it would print UCX's
// backtrace. Unless the user asked for them (UCX_HANDLE_ERRORS set), the
// default action comes back wherever the handler is libucs's own.
void DropUcxSignalHandlers() {
  if (std::getenv("UCX_HANDLE_ERRORS") != nullptr) return;
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE}) {
    struct sigaction now {};
    if (sigaction(sig, nullptr, &now) != 0) continue;
    const void* handler = (now.sa_flags & SA_SIGINFO) != 0
                              ? reinterpret_cast<const void*>(now.sa_sigaction)
                              : reinterpret_cast<const void*>(now.sa_handler);
    if (now.sa_handler == SIG_DFL || now.sa_handler == SIG_IGN) continue;
    Dl_info info{};
    if (dladdr(handler, &info) == 0 || info.dli_fname == nullptr) continue;
    if (std::string_view(info.dli_fname).find("libucs") == std::string_view::npos) continue;
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, nullptr);
  }
}

void Load(const char* library, UcxApi* api) {
  std::string& err = api->error;
  void* ucp = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (ucp == nullptr) {
    const char* e = dlerror();
    err = "cannot dlopen " + std::string(library) + " (" + (e ? e : "no reason given") + ")" +
          Remedy(library);
    return;
  }
  DropUcxSignalHandlers();  // libucs came in with libucp, if this is UCX at all
  Sym(ucp, "ucp_config_read", &api->config_read, &err);
  Sym(ucp, "ucp_config_modify", &api->config_modify, &err);
  Sym(ucp, "ucp_config_release", &api->config_release, &err);
  Sym(ucp, "ucp_init_version", &api->init_version, &err);
  Sym(ucp, "ucp_cleanup", &api->cleanup, &err);
  Sym(ucp, "ucp_get_version_string", &api->get_version_string, &err);
  Sym(ucp, "ucp_worker_create", &api->worker_create, &err);
  Sym(ucp, "ucp_worker_destroy", &api->worker_destroy, &err);
  Sym(ucp, "ucp_worker_get_efd", &api->worker_get_efd, &err);
  Sym(ucp, "ucp_worker_arm", &api->worker_arm, &err);
  Sym(ucp, "ucp_worker_progress", &api->worker_progress, &err);
  Sym(ucp, "ucp_worker_get_address", &api->worker_get_address, &err);
  Sym(ucp, "ucp_worker_release_address", &api->worker_release_address, &err);
  Sym(ucp, "ucp_ep_create", &api->ep_create, &err);
  Sym(ucp, "ucp_ep_flush_nbx", &api->ep_flush_nbx, &err);
  Sym(ucp, "ucp_ep_close_nbx", &api->ep_close_nbx, &err);
  Sym(ucp, "ucp_tag_send_nbx", &api->tag_send_nbx, &err);
  Sym(ucp, "ucp_tag_recv_nbx", &api->tag_recv_nbx, &err);
  Sym(ucp, "ucp_request_check_status", &api->request_check_status, &err);
  Sym(ucp, "ucp_request_cancel", &api->request_cancel, &err);
  Sym(ucp, "ucp_request_free", &api->request_free, &err);
  if (!err.empty()) {
    err = std::string(library) + " is unusable: " + err + " (loom is built against UCX " +
          std::to_string(UCP_API_MAJOR) + "." + std::to_string(UCP_API_MINOR) + ")" +
          Remedy(library);
    return;
  }
  // A libucp that loaded brought its libucs: this finds that one by soname.
  constexpr const char* kUcs = "libucs.so.0";
  void* ucs = dlopen(kUcs, RTLD_NOW | RTLD_LOCAL);
  if (ucs == nullptr) {
    const char* e = dlerror();
    err = "cannot dlopen " + std::string(kUcs) + " (" + (e ? e : "no reason given") + ")" +
          Remedy(kUcs);
    return;
  }
  if (!Sym(ucs, "ucs_status_string", &api->status_string, &err)) {
    err = std::string(kUcs) + " is unusable: " + err + Remedy(kUcs);
  }
}

}  // namespace

const UcxApi& LoadUcxApi(const char* library) {
  static std::mutex mu;
  static std::map<std::string, UcxApi> loaded;  // never unloaded: UCX keeps global state
  std::lock_guard<std::mutex> lock(mu);
  auto [it, inserted] = loaded.try_emplace(library);
  if (inserted) Load(library, &it->second);
  return it->second;
}

}  // namespace loom
