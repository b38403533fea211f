// LoomWork and Completer (loom_work.h).
#include "integrations/pytorch/csrc/loom_work.h"

#include <ATen/core/jit_type.h>

#include <stdexcept>

namespace loom_torch {

std::exception_ptr ToException(const loom::Status& s) {
  // "Timed out" first, as Gloo's and NCCL's timeouts read, for tools that
  // look for it.
  if (s.code() == loom::Code::kTimeout) {
    return std::make_exception_ptr(std::runtime_error("loom: Timed out (" + s.ToString() + ")"));
  }
  return std::make_exception_ptr(std::runtime_error("loom: " + s.ToString()));
}

LoomWork::LoomWork(int rank, c10d::OpType type, const char* profiling_title,
                   std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type, profiling_title),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()))) {}

void LoomWork::Start(const c10::intrusive_ptr<LoomWork>& self, std::vector<loom::Work> ops,
                     Completer* completer) {
  self->ops_ = std::move(ops);
  if (self->ops_.empty()) {
    StartDone(self, loom::Status::Ok());
    return;
  }
  self->pending_.store(static_cast<int>(self->ops_.size()));
  for (const loom::Work& op : self->ops_) {
    // The callback holds the Work until loom completes the op: a caller may
    // drop its handle at once (async_op=True, never waited on).
    loom::Status s = op.OnComplete(
        [self, completer](const loom::Status& status) { self->OneDone(status, completer); });
    if (!s.ok()) self->OneDone(s, completer);
  }
}

void LoomWork::StartDone(const c10::intrusive_ptr<LoomWork>& self, const loom::Status& status) {
  if (!status.ok()) {
    std::lock_guard<std::mutex> lock(self->error_mu_);
    self->first_error_ = status;
  }
  {
    std::lock_guard<std::mutex> lock(self->done_mu_);
    self->pending_.store(0);
  }
  self->done_cv_.notify_all();
  self->Finalize();
}

void LoomWork::OneDone(const loom::Status& s, Completer* completer) {
  if (!s.ok()) {
    std::lock_guard<std::mutex> lock(error_mu_);
    if (first_error_.ok()) first_error_ = s;
  }
  if (pending_.fetch_sub(1, std::memory_order_seq_cst) != 1) return;
  // Pairs with wait()'s decrement of waiters_ and its load of pending_:
  // either a waiter sees pending_ at 0 and finalizes, or this sees no
  // waiter and hands the Work to a Completer thread.
  if (waiters_.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(done_mu_); }
    done_cv_.notify_all();
    return;
  }
  completer->Push(c10::intrusive_ptr<LoomWork>::reclaim_copy(this));
}

void LoomWork::Finalize() {
  if (claimed_.exchange(true)) return;
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(error_mu_);
    if (!first_error_.ok()) error = ToException(first_error_);
  }
  if (error == nullptr && finish_step_) {
    try {
      finish_step_();
    } catch (...) {
      error = std::current_exception();
    }
  }
  finish_step_ = nullptr;
  keep_alive_.clear();
  // The torch Work first: a Future callback may look at the Work.
  finish(error);
  if (error != nullptr) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

bool LoomWork::wait(std::chrono::milliseconds timeout) {
  const loom::Deadline deadline = timeout == kNoTimeout ? loom::Deadline::Never()
                                                        : loom::Deadline::After(timeout);
  // loom's Wait lets this thread run the queued ops itself: no hand-off to
  // loom's worker, and once they are done this thread completes the Work.
  waiters_.fetch_add(1, std::memory_order_seq_cst);
  bool all_done = true;
  for (const loom::Work& op : ops_) {
    loom::Status s = op.Wait(deadline);
    if (s.code() == loom::Code::kTimeout && !op.Test()) {
      all_done = false;
      break;
    }
  }
  if (all_done) {
    // The ops are done; their callbacks (which count pending_ down) may
    // still be running on the thread that completed them.
    std::unique_lock<std::mutex> lock(done_mu_);
    auto counted = [&] { return pending_.load() == 0; };
    if (deadline.never()) {
      done_cv_.wait(lock, counted);
    } else {
      done_cv_.wait_until(lock, deadline.at(), counted);
    }
  }
  waiters_.fetch_sub(1, std::memory_order_seq_cst);
  if (pending_.load(std::memory_order_seq_cst) == 0) Finalize();
  return c10d::Work::wait(timeout);
}

c10::intrusive_ptr<c10::ivalue::Future> LoomWork::getFuture() { return future_; }

Completer::Completer(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

Completer::~Completer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void Completer::Push(c10::intrusive_ptr<LoomWork> work) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(work));
  }
  cv_.notify_one();
}

void Completer::Loop() {
  for (;;) {
    c10::intrusive_ptr<LoomWork> work;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    work->Finalize();
  }
}

}  // namespace loom_torch
