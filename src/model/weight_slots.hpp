// Internal: the one list of weights the forward pass reads (like gemma.cpp's
// ForEachTensor). Each slot names an internal tensor, where it lives in ModelWeights,
// the shape the config implies, its role, and when the config needs it. Model
// validation, the weight manifest and the loader all walk this table.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "loom/config.hpp"
#include "loom/shape.hpp"
#include "loom/weights.hpp"

namespace loom::slots {

enum class Role : uint8_t {
  embedding,  // [vocab, hidden] rows looked up by token id
  matrix,     // a projection [out, in], any weight dtype
  vector,     // norm weights and biases: always f32 in memory (widened on load)
};

struct WeightSlot {
  std::string_view name;  // "token_embd" or, per layer, "attn_q" (full name "blk.N.attn_q")
  bool per_layer;
  Tensor ModelWeights::*model_member;  // when !per_layer
  Tensor LayerWeights::*layer_member;  // when per_layer
  Role role;
  Shape (*shape)(const ModelConfig&);
  bool (*needed)(const ModelConfig&);
  // Human-readable list of the config fields the shape derives from (for mismatch reports).
  std::string_view shape_fields;
};

std::span<const WeightSlot> all_slots() noexcept;
// "blk.3.attn_q" for per-layer slots, the bare name otherwise.
std::string full_name(const WeightSlot& slot, int64_t layer);
Tensor& tensor_of(ModelWeights& weights, const WeightSlot& slot, int64_t layer);
const Tensor& tensor_of(const ModelWeights& weights, const WeightSlot& slot, int64_t layer);
// Slot by bare name ("attn_q", "output"); null when unknown.
const WeightSlot* find_slot(std::string_view name) noexcept;

}  // namespace loom::slots
