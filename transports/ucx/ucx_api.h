// The UCP and UCS entry points the UCX transport calls, looked up with dlsym
// in a dlopen'ed libucp (loom never links UCX: a program that does not
// select it neither needs UCX installed nor loads it). Private to
// transports/ucx; <ucp/api/ucp.h> supplies the types and constants only.
#pragma once

#include <ucp/api/ucp.h>

#include <string>

namespace loom {

// Each pointer has the type of the function the header declares, so a
// signature change in UCX fails the build instead of corrupting a call.
struct UcxApi {
  // Configuration and context. ucp_init is static inline in the header
  // (it passes the header's API version): Init below does what it does.
  decltype(&ucp_config_read) config_read = nullptr;
  decltype(&ucp_config_modify) config_modify = nullptr;
  decltype(&ucp_config_release) config_release = nullptr;
  decltype(&ucp_init_version) init_version = nullptr;
  decltype(&ucp_cleanup) cleanup = nullptr;
  decltype(&ucp_get_version_string) get_version_string = nullptr;
  // The worker.
  decltype(&ucp_worker_create) worker_create = nullptr;
  decltype(&ucp_worker_destroy) worker_destroy = nullptr;
  decltype(&ucp_worker_get_efd) worker_get_efd = nullptr;
  decltype(&ucp_worker_arm) worker_arm = nullptr;
  decltype(&ucp_worker_progress) worker_progress = nullptr;
  decltype(&ucp_worker_get_address) worker_get_address = nullptr;
  decltype(&ucp_worker_release_address) worker_release_address = nullptr;
  // Endpoints and requests.
  decltype(&ucp_ep_create) ep_create = nullptr;
  decltype(&ucp_ep_flush_nbx) ep_flush_nbx = nullptr;
  decltype(&ucp_ep_close_nbx) ep_close_nbx = nullptr;
  decltype(&ucp_tag_send_nbx) tag_send_nbx = nullptr;
  decltype(&ucp_tag_recv_nbx) tag_recv_nbx = nullptr;
  decltype(&ucp_request_check_status) request_check_status = nullptr;
  decltype(&ucp_request_cancel) request_cancel = nullptr;
  decltype(&ucp_request_free) request_free = nullptr;
  // libucs.
  decltype(&ucs_status_string) status_string = nullptr;
  // Why loading failed: the library, dlerror()'s text and what to do. Empty
  // when every symbol resolved.
  std::string error;

  ucs_status_t Init(const ucp_params_t* params, const ucp_config_t* config,
                    ucp_context_h* context) const {
    return init_version(UCP_API_MAJOR, UCP_API_MINOR, params, config, context);
  }
};

// Loads `library` (libucp) and libucs once per name, when first asked: only
// selecting UCX calls this. Kept for the process, never unloaded (UCX keeps
// global state and hooks the allocator). Unless UCX_HANDLE_ERRORS is set,
// the fatal-signal handlers libucs installs as it loads are put back to the
// default, so the program's crashes stay its own. Never null; a failure is
// in error. Thread-safe.
const UcxApi& LoadUcxApi(const char* library = "libucp.so.0");

}  // namespace loom
