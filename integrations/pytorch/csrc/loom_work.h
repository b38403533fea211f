// LoomWork: torch's Work (and its Future) for one operation issued to loom,
// completed from loom's own completion callback (loom::Work::OnComplete).
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <ATen/core/ivalue.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "loom/loom.hpp"

namespace loom_torch {

class Completer;

// One torch operation: zero or more loom operations, then an optional step
// that moves results into the caller's tensors (non-contiguous outputs,
// tensor lists). Completes once, on the thread that claims it first: a
// Completer thread, or a caller inside wait() that saw loom finish.
class LoomWork : public c10d::Work {
 public:
  LoomWork(int rank, c10d::OpType type, const char* profiling_title,
           std::vector<at::Tensor> outputs);

  // Runs after every loom operation succeeded, before the Work completes.
  void SetFinishStep(std::function<void()> step) { finish_step_ = std::move(step); }
  // Tensors that must live until the loom operations end (staging buffers,
  // contiguous copies of inputs).
  void KeepAlive(at::Tensor t) { keep_alive_.push_back(std::move(t)); }
  // Hands over the issued loom operations and arms completion; call once,
  // after SetFinishStep/KeepAlive. `self` is this Work.
  static void Start(const c10::intrusive_ptr<LoomWork>& self, std::vector<loom::Work> ops,
                    Completer* completer);
  // Completes at once: an operation that already ran (a group) or failed.
  static void StartDone(const c10::intrusive_ptr<LoomWork>& self, const loom::Status& status);

  bool wait(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::vector<at::Tensor> result() override { return outputs_; }

  // Moves results, completes the torch Work and its Future; once only.
  void Finalize();

 private:
  void OneDone(const loom::Status& s, Completer* completer);

  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keep_alive_;
  std::function<void()> finish_step_;
  std::vector<loom::Work> ops_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  // Loom operations not yet reported complete; 1 until Start or StartDone
  // (a batched send/recv waits for endCoalescing).
  std::atomic<int> pending_{1};
  std::atomic<bool> claimed_{false};
  // Threads inside wait(): while there are any, the last loom completion
  // wakes them (cheap, they usually run the op themselves) instead of a
  // Completer thread, and one of them finalizes.
  std::atomic<int> waiters_{0};
  std::mutex done_mu_;
  std::condition_variable done_cv_;
  std::mutex error_mu_;
  loom::Status first_error_;
};

// Threads that complete torch Works after loom reported their operations
// done. Not loom's executor: torch Future callbacks (DDP comm hooks, user
// code) may wait on other operations of the same group, which loom's own
// thread could never run while it is inside a callback. Two threads, as
// Gloo has, so that one callback waiting on another op's Future does not
// stop that op's completion.
class Completer {
 public:
  explicit Completer(int threads = 2);
  ~Completer();  // completes what is queued, then joins
  void Push(c10::intrusive_ptr<LoomWork> work);

 private:
  void Loop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<LoomWork>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

// A loom Status as the exception torch raises (RuntimeError in Python).
std::exception_ptr ToException(const loom::Status& s);

}  // namespace loom_torch
