// Global tensor table, TP/PP slicing and counter-based initialisation.
#include "trainer/params.h"

#include <cmath>
#include <stdexcept>

#include "trainer/rng.h"

namespace loom::train {

int GlobalTensorCount(const ModelConfig& cfg) { return 2 + kTensorsPerLayer * cfg.layers + 2; }

int LayerTensorId(int layer, LayerTensor t) {
  return 2 + kTensorsPerLayer * layer + static_cast<int>(t);
}

TensorSpec GlobalTensor(const ModelConfig& cfg, int id) {
  const int C = cfg.channels;
  // GPT-2's scheme: 0.02 everywhere, residual projections scaled by depth.
  const float std_w = 0.02f;
  const float std_proj = 0.02f / std::sqrt(2.0f * cfg.layers);
  auto matrix = [](std::string name, int rows, int cols, Shard shard, float sd, int blocks = 1) {
    return TensorSpec{std::move(name), rows, cols, shard, blocks, sd, 0.0f, true};
  };
  auto vec = [](std::string name, int n, Shard shard, float value, int blocks = 1) {
    // A vector split by rows is a (n, 1) column.
    if (shard == Shard::kRows) return TensorSpec{std::move(name), n, 1, shard, blocks, 0.0f, value, false};
    return TensorSpec{std::move(name), 1, n, shard, blocks, 0.0f, value, false};
  };
  if (id == kWteId) return matrix("wte", cfg.vocab, C, Shard::kRows, std_w);
  if (id == kWpeId) return matrix("wpe", cfg.seq, C, Shard::kNone, 0.01f);
  const int last = 2 + kTensorsPerLayer * cfg.layers;
  if (id == last) return vec("lnfw", C, Shard::kNone, 1.0f);
  if (id == last + 1) return vec("lnfb", C, Shard::kNone, 0.0f);
  if (id < 0 || id > last + 1) throw std::out_of_range("tensor id");
  const int layer = (id - 2) / kTensorsPerLayer;
  const std::string p = "h" + std::to_string(layer) + ".";
  switch (static_cast<LayerTensor>((id - 2) % kTensorsPerLayer)) {
    case LayerTensor::kLn1w: return vec(p + "ln1w", C, Shard::kNone, 1.0f);
    case LayerTensor::kLn1b: return vec(p + "ln1b", C, Shard::kNone, 0.0f);
    case LayerTensor::kQkvw: return matrix(p + "qkvw", 3 * C, C, Shard::kRows, std_w, 3);
    case LayerTensor::kQkvb: return vec(p + "qkvb", 3 * C, Shard::kRows, 0.0f, 3);
    case LayerTensor::kAttProjw: return matrix(p + "attprojw", C, C, Shard::kCols, std_proj);
    case LayerTensor::kAttProjb: return vec(p + "attprojb", C, Shard::kNone, 0.0f);
    case LayerTensor::kLn2w: return vec(p + "ln2w", C, Shard::kNone, 1.0f);
    case LayerTensor::kLn2b: return vec(p + "ln2b", C, Shard::kNone, 0.0f);
    case LayerTensor::kFcw: return matrix(p + "fcw", 4 * C, C, Shard::kRows, std_w);
    case LayerTensor::kFcb: return vec(p + "fcb", 4 * C, Shard::kRows, 0.0f);
    case LayerTensor::kFcProjw: return matrix(p + "fcprojw", C, 4 * C, Shard::kCols, std_proj);
    case LayerTensor::kFcProjb: return vec(p + "fcprojb", C, Shard::kNone, 0.0f);
  }
  throw std::out_of_range("tensor id");
}

size_t GlobalParamCount(const ModelConfig& cfg) {
  size_t n = 0;
  for (int id = 0; id < GlobalTensorCount(cfg); ++id) {
    const TensorSpec s = GlobalTensor(cfg, id);
    n += static_cast<size_t>(s.rows) * s.cols;
  }
  return n;
}

ParamLayout::ParamLayout(const ModelConfig& cfg, const ShardPlan& plan, size_t pad_multiple)
    : cfg_(cfg), plan_(plan) {
  const int n = GlobalTensorCount(cfg);
  slot_of_.assign(n, -1);
  size_t offset = 0;
  for (int id = 0; id < n; ++id) {
    bool held;
    if (id == kWteId) {
      held = plan.first_stage || plan.last_stage;
    } else if (id == kWpeId) {
      held = plan.first_stage;
    } else if (id >= 2 + kTensorsPerLayer * cfg.layers) {
      held = plan.last_stage;
    } else {
      const int layer = (id - 2) / kTensorsPerLayer;
      held = layer >= plan.layer_begin && layer < plan.layer_end;
    }
    if (!held) continue;
    const TensorSpec s = GlobalTensor(cfg, id);
    Slot slot;
    slot.global_id = id;
    slot.offset = offset;
    slot.local_rows = s.shard == Shard::kRows ? s.rows / plan.tp_size : s.rows;
    slot.local_cols = s.shard == Shard::kCols ? s.cols / plan.tp_size : s.cols;
    slot.count = static_cast<size_t>(slot.local_rows) * slot.local_cols;
    offset += slot.count;
    slot_of_[id] = static_cast<int>(slots_.size());
    slots_.push_back(slot);
  }
  const size_t m = pad_multiple == 0 ? 1 : pad_multiple;
  padded_ = (offset + m - 1) / m * m;
}

const Slot* ParamLayout::Find(int global_id) const {
  if (global_id < 0 || global_id >= static_cast<int>(slot_of_.size())) return nullptr;
  const int i = slot_of_[global_id];
  return i < 0 ? nullptr : &slots_[i];
}

size_t ParamLayout::GlobalElement(const Slot& slot, size_t i) const {
  const TensorSpec s = GlobalTensor(cfg_, slot.global_id);
  const size_t lr = i / slot.local_cols;
  const size_t lc = i % slot.local_cols;
  const size_t r = static_cast<size_t>(plan_.tp_rank);
  switch (s.shard) {
    case Shard::kNone: return i;
    case Shard::kRows: {
      const size_t block_rows = s.rows / s.row_blocks;          // global rows per block
      const size_t local_block_rows = block_rows / plan_.tp_size;
      const size_t block = lr / local_block_rows;
      const size_t row = block * block_rows + r * local_block_rows + lr % local_block_rows;
      return row * s.cols + lc;
    }
    case Shard::kCols: return lr * s.cols + r * slot.local_cols + lc;
  }
  return i;
}

void ParamLayout::Init(float* params, uint64_t seed) const {
  for (size_t i = 0; i < padded_; ++i) params[i] = 0.0f;
  for (const Slot& slot : slots_) {
    const TensorSpec s = GlobalTensor(cfg_, slot.global_id);
    for (size_t i = 0; i < slot.count; ++i) {
      float v = s.init_value;
      if (s.init_std > 0) {
        v = static_cast<float>(s.init_std * NormalAt(seed, slot.global_id, GlobalElement(slot, i)));
      }
      params[slot.offset + i] = v;
    }
  }
}

std::vector<uint8_t> ParamLayout::DecayMask() const {
  std::vector<uint8_t> mask(padded_, 0);
  for (const Slot& slot : slots_) {
    if (!GlobalTensor(cfg_, slot.global_id).decay) continue;
    for (size_t i = 0; i < slot.count; ++i) mask[slot.offset + i] = 1;
  }
  return mask;
}

}  // namespace loom::train
