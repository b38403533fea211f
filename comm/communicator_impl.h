// Communicator::Impl: the state behind the public Communicator — bootstrap
// client, transports, engine, and the worker thread that executes issued
// operations in order.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "comm/bootstrap/store_client.h"
#include "comm/device_ipc.h"
#include "comm/device_net.h"
#include "comm/device_path.h"
#include "comm/dispatch.h"
#include "comm/op_queue.h"
#include "comm/status_port.h"
#include "loom/loom.hpp"
#include "transports/engine.h"
#include "transports/shm/context.h"
#include "transports/tcp/context.h"

namespace loom {

class Communicator::Impl {
 public:
  // One issued operation (a single collective, or a group's batch): its
  // completion state, which holds what it runs.
  using Op = OpQueue::Op;

  Impl() = default;
  ~Impl();

  // Bootstrap and transport setup (setup.cc).
  static Result<std::unique_ptr<Impl>> Create(const std::string& store_host, uint16_t store_port,
                                              uint64_t secret, int rank, int size,
                                              const CommConfig& config);

  // Every public operation enters here: validated, then recorded by an open
  // group, or run (blocking forms: on the calling thread when the queue is
  // idle, else queued and waited for), or queued (non-blocking forms).
  // The stream forms of device buffers are staged on `stream` and queued,
  // returning once enqueued (device_path.h).
  Work Issue(CollArgs args);
  Status IssueBlocking(const CollArgs& args);
  Status IssueOnStream(const CollArgs& args, GpuStream stream);
  // A group's batch at GroupEnd (group.cc): host items run as a blocking
  // call; items placed on the device are first staged on their streams.
  Status RunBlocking(std::span<const CollArgs> items);
  Work SubmitGroup(std::vector<CollArgs> items, const std::vector<Placement>& where);
  Status Drain(Deadline deadline);      // waits until every issued op completed
  Status Finalize();
  // Communicator::RegisterBuffer / DeregisterBuffer.
  Result<uint64_t> RegisterBuffer(const void* buf, size_t bytes);
  Status DeregisterBuffer(uint64_t handle);
  void Abort(const Status& why);
  Status AsyncError() const;
  Result<std::unique_ptr<Communicator>> Split(int color, int key, const CommConfig& config);

  int rank = 0;
  int size = 1;
  std::string host;
  int cuda_device = -1;  // current at creation; -1 without device ops
  CommConfig config;
  std::chrono::milliseconds timeout{0};

 private:
  friend class Communicator;
  struct Setup;  // Create's named steps (setup.cc)
  Deadline OpDeadline() const;
  Deadline OpDeadline(std::chrono::steady_clock::time_point now) const;
  // Records an operation's failure as the communicator's error (the first
  // one wins), aborts, and tells the other ranks; returns the error the
  // operation reports: `s` itself, unless `s` came from a peer (RemoteError),
  // then the recorded error, which names the cause where a peer's own
  // failure explains `s`.
  Status Fail(const Status& s);
  // Lets the streams waiting on this communicator go on, now or, while an
  // operation on device buffers executes, as soon as it returns.
  void ReleaseStreams();

  uint64_t status_handle_ = 0;  // RegisterStatusSource; 0 = not registered
  std::unique_ptr<bootstrap::StoreClient> store_;
  std::unique_ptr<ShmContext> shm_;
  std::unique_ptr<TcpContext> tcp_;
  // Validates and runs operations (dispatch.h). Before engine_, so
  // destroyed after it: its scratch memory may hold transfers that a failed
  // op abandoned and a transport (UCX) still touches until the engine closes.
  Dispatcher dispatch_;
  DevicePath device_;  // before engine_ too: abandoned transfers may use its pinned blocks
  DeviceIpc ipc_;      // device buffers read in place through CUDA IPC (when enabled)
  DeviceNet net_;      // data-moving collectives between hosts over GPUDirect RDMA (when enabled)
  std::unique_ptr<Engine> engine_;
  uint64_t secret_ = 0;
  std::string bind_address_;  // local address of the chosen interface (for Split's stores)
  int split_count_ = 0;

  std::atomic<bool> abort_{false};
  std::atomic<bool> device_running_{false};     // RunFront executes a device-buffer op
  std::atomic<bool> release_requested_{false};  // ReleaseStreams ran (sticky, as ReleaseAll)
  mutable std::mutex err_mu_;
  Status async_error_;

  // The operation queue (op_queue.h), from the end of setup; it runs each
  // queued op with RunQueued.
  std::unique_ptr<OpQueue> queue_;
  void RunQueued(Work::State& op);
  Work Submit(std::vector<CollArgs> items, std::shared_ptr<StagedOp> staged = nullptr);
};

}  // namespace loom
