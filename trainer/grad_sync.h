// Data-parallel gradient synchronisation over the flat gradient buffer:
// all-reduce (AVG) or ZeRO-1 reduce-scatter per bucket, launched either at
// the end of backward or as soon as a bucket's last gradient is written.
#pragma once

#include <vector>

#include "trainer/groups.h"
#include "trainer/params.h"

namespace loom::train {

enum class SyncMode {
  kPlain,     // one all-reduce of the whole buffer after backward
  kBucketed,  // one operation per bucket, all issued after backward
  kOverlap,   // one per bucket, issued during backward when the bucket is complete
};

struct SyncOptions {
  SyncMode mode = SyncMode::kOverlap;
  bool zero = false;            // ZeRO-1: reduce-scatter, own-shard update, all-gather
  size_t bucket_floats = 16384;
  bool drop_avg_scale = false;  // mutation for the test suite: SUM instead of AVG
};

// Owns the bucket plan and, under ZeRO, this rank's gradient shard. The
// layout's buffer length must be a multiple of the DP size (pad_multiple).
// Not thread-safe; gradients handed to it must stay untouched until Finish.
class GradSync {
 public:
  GradSync(const ParamLayout& layout, Group* dp, const SyncOptions& options);

  // A contiguous range of the local flat buffer.
  struct Range {
    size_t offset = 0;
    size_t count = 0;
  };

  // Before the last micro-step's backward: from now on TensorReady counts.
  void Arm();
  // The gradient of global tensor `id` in grads is final; in overlap mode
  // this may issue the buckets it completes.
  void TensorReady(int id, float* grads);
  // Issues what is left and waits for all of it. Afterwards, without ZeRO,
  // grads holds the DP mean; with ZeRO, shard_grads() holds this rank's
  // shard of it (grads is then scratch).
  Status Finish(float* grads);
  // ZeRO: the buffer ranges this rank owns, in bucket order; shard_grads()
  // is their concatenation. Without ZeRO: one range, the whole buffer.
  const std::vector<Range>& owned() const { return owned_; }
  float* shard_grads() { return shard_.data(); }
  // ZeRO: after the owned ranges of params were updated, all-gathers every
  // bucket so all DP ranks hold the new parameters. No-op without ZeRO.
  Status GatherParams(float* params);
  int buckets() const { return static_cast<int>(buckets_.size()); }

 private:
  struct Bucket {
    Range range;
    int pending = 0;  // tensors not yet final
    bool issued = false;
    size_t shard_offset = 0;  // in shard_ (ZeRO)
    Work work;
  };
  void Issue(Bucket& b, float* grads);

  Group* dp_;
  SyncOptions opt_;
  std::vector<Bucket> buckets_;
  std::vector<std::vector<int>> buckets_of_;  // global id -> buckets it overlaps
  std::vector<Range> owned_;
  std::vector<float> shard_;
  bool armed_ = false;
};

}  // namespace loom::train
