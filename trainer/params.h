// The model's parameters: the global tensor list, how tensor parallelism and
// pipeline stages slice it, and the flat local buffer every rank keeps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace loom::train {

// Model hyper-parameters. vocab and channels must divide by the TP degree,
// heads too (whole heads per TP rank).
struct ModelConfig {
  int vocab = 128;    // V, character level
  int channels = 64;  // C
  int heads = 4;      // NH
  int layers = 4;     // L
  int seq = 32;       // T (maximum sequence length)
};

// Per-layer tensors in forward order (the order they sit in the buffer).
enum class LayerTensor : int {
  kLn1w, kLn1b, kQkvw, kQkvb, kAttProjw, kAttProjb,
  kLn2w, kLn2b, kFcw, kFcb, kFcProjw, kFcProjb,
};
inline constexpr int kTensorsPerLayer = 12;

// How a tensor is split across TP ranks. kRows splits each of `row_blocks`
// blocks of rows (3 for QKV: q, k and v each keep whole heads); kCols splits
// columns (the input side of row-parallel layers).
enum class Shard { kNone, kRows, kCols };

struct TensorSpec {
  std::string name;  // "wte", "h3.qkvw", ...
  int rows = 0;      // global shape (rows, cols); vectors have rows == 1
  int cols = 0;
  Shard shard = Shard::kNone;
  int row_blocks = 1;
  float init_std = 0.0f;   // normal(0, init_std); 0 means constant init_value
  float init_value = 0.0f;
  bool decay = false;      // AdamW weight decay applies (matrices only)
};

// The global tensors, in canonical order: wte, wpe, L x 12 layer tensors,
// lnfw, lnfb. Global id = index in this list.
int GlobalTensorCount(const ModelConfig& cfg);
TensorSpec GlobalTensor(const ModelConfig& cfg, int id);
int LayerTensorId(int layer, LayerTensor t);
inline constexpr int kWteId = 0;
inline constexpr int kWpeId = 1;
size_t GlobalParamCount(const ModelConfig& cfg);

// What one rank holds: a TP slice of the tensors of its pipeline stage.
struct ShardPlan {
  int tp_rank = 0;
  int tp_size = 1;
  int layer_begin = 0;  // [layer_begin, layer_end) of the model's layers
  int layer_end = 0;
  bool first_stage = true;  // holds wte (embedding) and wpe
  bool last_stage = true;   // holds lnf and wte (the tied LM head)
};

// One tensor slice inside the local flat buffer.
struct Slot {
  int global_id = 0;
  size_t offset = 0;  // in the local buffer
  size_t count = 0;   // local elements
  int local_rows = 0;
  int local_cols = 0;
};

// The local flat buffer: slots in canonical order, padded at the end to a
// multiple of `pad_multiple` (so DP buckets split evenly for ZeRO).
// Immutable after construction; safe to share between threads.
class ParamLayout {
 public:
  ParamLayout(const ModelConfig& cfg, const ShardPlan& plan, size_t pad_multiple = 1);

  const ModelConfig& config() const { return cfg_; }
  const ShardPlan& plan() const { return plan_; }
  const std::vector<Slot>& slots() const { return slots_; }
  size_t size() const { return padded_; }  // buffer length including padding
  // The slot of a global tensor, or null when this rank does not hold it.
  const Slot* Find(int global_id) const;
  // Element index inside the global tensor of local element i of the slot.
  size_t GlobalElement(const Slot& slot, size_t i) const;
  // Fills params (size()) from the seed: element (tensor id, global element)
  // gets the same value whatever the layout. Padding is zero.
  void Init(float* params, uint64_t seed) const;
  // 1 where weight decay applies, per local element.
  std::vector<uint8_t> DecayMask() const;

 private:
  ModelConfig cfg_;
  ShardPlan plan_;
  std::vector<Slot> slots_;
  std::vector<int> slot_of_;  // global id -> index in slots_, or -1
  size_t padded_ = 0;
};

}  // namespace loom::train
