// ProcessGroupLoom::OnDevice: operations on CUDA tensors through loom's
// stream forms, on torch's current stream (process_group_loom.h). Compiled
// into the extension only against a CUDA-enabled PyTorch (LOOM_TORCH_CUDA).
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include <utility>

#include "integrations/pytorch/csrc/process_group_loom.h"

namespace loom_torch {
namespace {

// An operation enqueued on a CUDA stream: complete when the stream passes
// the event recorded after it. wait() makes the caller's current stream
// wait for that event and does not block the CPU, as ProcessGroupNCCL's
// Work does; the Future is completed at once on the operation's stream, so
// its callbacks and values are ordered after the operation (torch's CUDA
// Future records the stream's events).
class DeviceWork : public c10d::Work {
 public:
  DeviceWork(int rank, c10d::OpType type, const char* title, std::vector<at::Tensor> outputs,
             const at::Device& device, const c10::cuda::CUDAStream& stream,
             loom::Communicator* comm)
      : c10d::Work(rank, type, title),
        outputs_(std::move(outputs)),
        device_(device),
        comm_(comm),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()), std::vector<c10::Device>{device})) {
    done_.record(stream);
    c10::cuda::CUDAStreamGuard on_stream(stream);
    future_->markCompleted(c10::IValue(outputs_));
  }

  bool isCompleted() override { return done_.query(); }

  bool wait(std::chrono::milliseconds /*timeout: the communicator's applies*/) override {
    // A failure after the enqueue (a dead peer, a timeout) aborts the
    // communicator, whose stream operations then end; say why here.
    const loom::Status s = comm_->AsyncError();
    TORCH_CHECK(s.ok(), "loom: ", s.ToString());
    c10::cuda::CUDAGuard guard(device_);
    done_.block(c10::cuda::getCurrentCUDAStream(device_.index()));
    return true;
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  std::vector<at::Tensor> result() override { return outputs_; }

 private:
  std::vector<at::Tensor> outputs_;
  at::Device device_;
  loom::Communicator* comm_;
  at::cuda::CUDAEvent done_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::OnDevice(c10d::OpType type, const char* title,
                                                          const std::vector<at::Tensor>& inputs,
                                                          std::vector<at::Tensor> outputs,
                                                          const Enqueue& enqueue) {
  const at::Device device = !inputs.empty() ? inputs.front().device() : outputs.front().device();
  auto each_tensor = [&](const auto& f) {
    for (const at::Tensor& t : inputs) f(t);
    for (const at::Tensor& t : outputs) f(t);
  };
  each_tensor([&](const at::Tensor& t) {
    TORCH_CHECK(t.device() == device, title, ": every tensor must be on ", device, ", got one on ",
                t.device());
  });
  c10::cuda::CUDAGuard guard(device);
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(device.index());
  if (sequenceNum_.has_value()) sequenceNum_->increment();
  {
    auto lock = LockToIssue(title);
    const loom::Status s = enqueue(stream.stream());
    TORCH_CHECK(s.ok(), title, ": ", s.ToString());
  }
  // The caching allocator must not hand these blocks out again before the
  // stream has passed the operation, whichever stream allocated them.
  each_tensor([&](const at::Tensor& t) {
    if (t.numel() > 0) c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream);
  });
  return c10::make_intrusive<DeviceWork>(getRank(), type, title, std::move(outputs), device, stream,
                                         comm_.get());
}

}  // namespace loom_torch
