// GradSync: bucket plan, readiness counting, issue and wait.
#include "trainer/grad_sync.h"

#include <algorithm>

namespace loom::train {

GradSync::GradSync(const ParamLayout& layout, Group* dp, const SyncOptions& options)
    : dp_(dp), opt_(options) {
  const size_t n = layout.size();
  const size_t ranks = static_cast<size_t>(dp->size());
  size_t step = n;
  if (opt_.mode != SyncMode::kPlain) {
    step = std::max<size_t>(opt_.bucket_floats, 1);
    step = (step + ranks - 1) / ranks * ranks;  // whole elements per ZeRO shard
  }
  for (size_t start = 0; start < n; start += step) {
    Bucket b;
    b.range = {start, std::min(step, n - start)};
    buckets_.push_back(std::move(b));
  }
  buckets_of_.assign(GlobalTensorCount(layout.config()), {});
  for (const Slot& s : layout.slots()) {
    for (size_t i = 0; i < buckets_.size(); ++i) {
      const Range& r = buckets_[i].range;
      if (s.offset < r.offset + r.count && r.offset < s.offset + s.count) {
        buckets_of_[s.global_id].push_back(static_cast<int>(i));
      }
    }
  }
  size_t shard_size = 0;
  for (Bucket& b : buckets_) {
    const size_t per_rank = b.range.count / ranks;
    b.shard_offset = shard_size;
    shard_size += per_rank;
    if (opt_.zero) {
      owned_.push_back({b.range.offset + static_cast<size_t>(dp->rank()) * per_rank, per_rank});
    }
  }
  if (opt_.zero) {
    shard_.assign(shard_size, 0.0f);
  } else {
    owned_.push_back({0, n});
  }
}

void GradSync::Arm() {
  for (Bucket& b : buckets_) {
    b.pending = 0;
    b.issued = false;
    b.work = Work();
  }
  for (const auto& list : buckets_of_) {
    for (int i : list) ++buckets_[i].pending;
  }
  armed_ = true;
}

void GradSync::Issue(Bucket& b, float* grads) {
  const RedOp op = opt_.drop_avg_scale ? RedOp::kSum : RedOp::kAvg;
  float* base = grads + b.range.offset;
  if (opt_.zero) {
    const size_t per_rank = b.range.count / static_cast<size_t>(dp_->size());
    b.work = dp_->ReduceScatterAsync(base, shard_.data() + b.shard_offset, per_rank, op);
  } else {
    b.work = dp_->AllReduceAsync(base, b.range.count, op);
  }
  b.issued = true;
}

void GradSync::TensorReady(int id, float* grads) {
  if (!armed_ || opt_.mode != SyncMode::kOverlap) return;
  for (int i : buckets_of_[id]) {
    Bucket& b = buckets_[i];
    if (--b.pending == 0 && !b.issued) Issue(b, grads);
  }
}

Status GradSync::Finish(float* grads) {
  // Buckets left over go out from the end of the buffer, the order in which
  // backward completes them; every DP rank runs this same code.
  for (size_t i = buckets_.size(); i-- > 0;) {
    if (!buckets_[i].issued) Issue(buckets_[i], grads);
  }
  armed_ = false;
  Status first;
  for (Bucket& b : buckets_) {
    const Status st = dp_->Wait(b.work);
    if (first.ok() && !st.ok()) first = st;
  }
  return first;
}

Status GradSync::GatherParams(float* params) {
  if (!opt_.zero) return Status::Ok();
  std::vector<Work> works;
  for (const Bucket& b : buckets_) {
    works.push_back(dp_->AllGatherAsync(params + b.range.offset,
                                        b.range.count / static_cast<size_t>(dp_->size())));
  }
  Status first;
  for (const Work& w : works) {
    const Status st = dp_->Wait(w);
    if (first.ok() && !st.ok()) first = st;
  }
  return first;
}

}  // namespace loom::train
