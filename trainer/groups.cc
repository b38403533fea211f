// Group: counted, timed wrappers over loom communicators; MakeGrid: splits.
#include "trainer/groups.h"

#include <chrono>
#include <cstring>

namespace loom::train {

namespace {
// Adds the lifetime of the object to the clock.
class Timed {
 public:
  explicit Timed(CommClock* clock) : clock_(clock), start_(std::chrono::steady_clock::now()) {}
  ~Timed() {
    clock_->seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  Timed(const Timed&) = delete;
  Timed& operator=(const Timed&) = delete;

 private:
  CommClock* clock_;
  std::chrono::steady_clock::time_point start_;
};
}  // namespace

Group::Group(std::string name, std::unique_ptr<Communicator> comm, CommClock* clock)
    : name_(std::move(name)), comm_(std::move(comm)), clock_(clock) {}

Status Group::AllReduce(float* buf, size_t n, RedOp op) {
  if (!comm_) return Status::Ok();
  Timed t(clock_);
  ++ops_;
  bytes_.allreduce += n * sizeof(float);
  return comm_->AllReduce(buf, buf, n, DataType::kFloat32, op).WithContext(name_ + " all-reduce");
}

Work Group::AllReduceAsync(float* buf, size_t n, RedOp op) {
  if (!comm_) return Work();
  ++ops_;
  bytes_.allreduce += n * sizeof(float);
  return comm_->AllReduceAsync(buf, buf, n, DataType::kFloat32, op);
}

Work Group::ReduceScatterAsync(const float* send, float* recv, size_t recvcount, RedOp op) {
  if (!comm_) {
    std::memcpy(recv, send, recvcount * sizeof(float));
    return Work();
  }
  ++ops_;
  bytes_.reducescatter += static_cast<size_t>(size()) * recvcount * sizeof(float);
  return comm_->ReduceScatterAsync(send, recv, recvcount, DataType::kFloat32, op);
}

Work Group::AllGatherAsync(float* buf, size_t count) {
  if (!comm_) return Work();
  ++ops_;
  bytes_.allgather += count * sizeof(float);
  return comm_->AllGatherAsync(buf + static_cast<size_t>(rank()) * count, buf, count,
                               DataType::kFloat32);
}

Status Group::Wait(const Work& work) {
  if (!comm_) return Status::Ok();
  Timed t(clock_);
  return work.Wait().WithContext(name_);
}

Status Group::Exchange(const float* send_a, size_t n_send_a, int peer_send_a, float* recv_a,
                       size_t n_recv_a, int peer_recv_a, const float* send_b, size_t n_send_b,
                       int peer_send_b, float* recv_b, size_t n_recv_b, int peer_recv_b) {
  if (peer_send_a < 0 && peer_recv_a < 0 && peer_send_b < 0 && peer_recv_b < 0) {
    return Status::Ok();
  }
  Timed t(clock_);
  ++ops_;
  if (peer_send_a >= 0) bytes_.send += n_send_a * sizeof(float);
  if (peer_send_b >= 0) bytes_.send += n_send_b * sizeof(float);
  LOOM_TRY(GroupStart());
  // Inside a group the blocking forms only record the operation.
  Status st;
  if (peer_send_a >= 0 && st.ok()) st = comm_->Send(send_a, n_send_a, DataType::kFloat32, peer_send_a);
  if (peer_recv_a >= 0 && st.ok()) st = comm_->Recv(recv_a, n_recv_a, DataType::kFloat32, peer_recv_a);
  if (peer_send_b >= 0 && st.ok()) st = comm_->Send(send_b, n_send_b, DataType::kFloat32, peer_send_b);
  if (peer_recv_b >= 0 && st.ok()) st = comm_->Recv(recv_b, n_recv_b, DataType::kFloat32, peer_recv_b);
  const Status end = GroupEnd();
  LOOM_TRY(st.WithContext(name_ + " send/recv"));
  return end.WithContext(name_ + " send/recv");
}

Result<std::unique_ptr<Grid>> MakeGrid(std::unique_ptr<Communicator> world, const GridShape& shape) {
  auto g = std::make_unique<Grid>();
  g->shape = shape;
  const int size = world ? world->size() : 1;
  if (size != shape.world()) {
    return InvalidArgument("dp*tp*pp = " + std::to_string(shape.world()) + " but " +
                           std::to_string(size) + " ranks are running");
  }
  g->rank = world ? world->rank() : 0;
  g->tp_rank = g->rank % shape.tp;
  g->dp_rank = (g->rank / shape.tp) % shape.dp;
  g->pp_rank = g->rank / (shape.tp * shape.dp);
  // Splits run only for dimensions larger than one: all ranks agree on the
  // shape, so they skip the same calls.
  auto split = [&](const char* name, int dim, int color, int key) -> Result<std::unique_ptr<Group>> {
    if (dim == 1) return std::make_unique<Group>(name, nullptr, &g->clock);
    LOOM_ASSIGN_OR_RETURN(auto comm, world->Split(color, key, CommConfig{.name = name}));
    return std::make_unique<Group>(name, std::move(comm), &g->clock);
  };
  const int tp = g->tp_rank, dp = g->dp_rank, pp = g->pp_rank;
  LOOM_ASSIGN_OR_RETURN(g->tp, split("tp", shape.tp, dp + shape.dp * pp, tp));
  LOOM_ASSIGN_OR_RETURN(g->dp, split("dp", shape.dp, tp + shape.tp * pp, dp));
  LOOM_ASSIGN_OR_RETURN(g->pp, split("pp", shape.pp, tp + shape.tp * dp, pp));
  if (shape.pp > 1) {
    const bool end_stage = pp == 0 || pp == shape.pp - 1;
    LOOM_ASSIGN_OR_RETURN(auto tie, world->Split(end_stage ? tp + shape.tp * dp : kSplitNoColor, pp,
                                                 CommConfig{.name = "tie"}));
    if (tie) g->tie = std::make_unique<Group>("tie", std::move(tie), &g->clock);
  }
  g->world = std::make_unique<Group>("world", std::move(world), &g->clock);
  return g;
}

}  // namespace loom::train
