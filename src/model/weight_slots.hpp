// Internal: the one list of weights the forward pass reads (like gemma.cpp's
// ForEachTensor). Each slot has a compiler-checked id (Slot), an internal name, where it
// lives in ModelWeights, the shape the config implies, its role, when the config needs
// it, which slots RoPE's row order applies to and what it may be tied to. Model
// validation, the weight manifest, the loader, the exporter, the pack writer and the
// demo model all walk this table instead of comparing names.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "loom/config.hpp"
#include "loom/shape.hpp"
#include "loom/weights.hpp"

namespace loom::slots {

// Every weight slot, in table order. `none` marks an unused target in a name rule.
enum class Slot : uint8_t {
  none,
  token_embd,
  position_embd,
  attn_norm,
  attn_norm_bias,
  attn_q,
  attn_k,
  attn_v,
  attn_q_bias,
  attn_k_bias,
  attn_v_bias,
  attn_out,
  attn_out_bias,
  attn_post_norm,
  ffn_norm,
  ffn_norm_bias,
  ffn_gate,
  ffn_up,
  ffn_up_bias,
  ffn_down,
  ffn_down_bias,
  ffn_post_norm,
  output_norm,
  output_norm_bias,
  output,
};

enum class Role : uint8_t {
  embedding,  // [vocab, hidden] rows looked up by token id
  matrix,     // a projection [out, in], any weight dtype
  norm,       // a norm's scale: f32 in memory (widened on load)
  bias,       // a norm's or a projection's bias: f32 in memory
};

// Norm scales and biases: 1-D, always f32 in memory.
constexpr bool is_vector(Role role) noexcept { return role == Role::norm || role == Role::bias; }

// Which heads' row order RoPE applies to (GGUF's interleaved order permutes these rows).
enum class RopeRows : uint8_t { none, query_heads, kv_heads };

struct WeightSlot {
  Slot id;
  std::string_view name;  // "token_embd" or, per layer, "attn_q" (full name "blk.N.attn_q")
  bool per_layer;
  Tensor ModelWeights::*model_member;  // when !per_layer
  Tensor LayerWeights::*layer_member;  // when per_layer
  Role role;
  Shape (*shape)(const ModelConfig&);
  bool (*needed)(const ModelConfig&);
  // Human-readable list of the config fields the shape derives from (for mismatch reports).
  std::string_view shape_fields;
  RopeRows rope_rows = RopeRows::none;
  Slot ties_to = Slot::none;  // the slot whose storage it shares when the config ties them
  // Whether a quantization recipe (`loom convert --quantize`) may quantize this matrix or
  // embedding: learned position embeddings are kept (small, and read one row per token;
  // llama.cpp's quantizer keeps them too). Norms and biases never are: see
  // recipe_may_quantize.
  bool recipe_quantizes = true;
};

// Whether a recipe may quantize the slot: a matrix or embedding that allows it (vectors
// stay f32 whatever a row says).
constexpr bool recipe_may_quantize(const WeightSlot& slot) noexcept {
  return !is_vector(slot.role) && slot.recipe_quantizes;
}

std::span<const WeightSlot> all_slots() noexcept;
const WeightSlot& slot(Slot id) noexcept;
// "blk.3.attn_q" for per-layer slots, the bare name otherwise.
std::string full_name(const WeightSlot& slot, int64_t layer);
Tensor& tensor_of(ModelWeights& weights, const WeightSlot& slot, int64_t layer);
const Tensor& tensor_of(const ModelWeights& weights, const WeightSlot& slot, int64_t layer);
// Slot by bare name ("attn_q", "output"); null when unknown.
const WeightSlot* find_slot(std::string_view name) noexcept;

// Whether `config` ties `slot` to the slot it may tie to (the output projection to the
// token embedding when tie_word_embeddings is set): the one place that decides it.
bool tied_in(const ModelConfig& config, const WeightSlot& slot) noexcept;
// Whether `weights` actually share that storage (what the loader did, or a host built).
bool shares_tied_storage(const ModelWeights& weights, const WeightSlot& slot) noexcept;
// Whether a slot tied to `slot` shares its storage (the token embedding of a tied output):
// the table is then also a product's matrix, and takes its layout (load_repack.cpp).
bool is_tied_table(const ModelWeights& weights, const WeightSlot& slot) noexcept;

// Calls fn(t, owner, layer) once for every defined matrix a product reads: each projection
// slot's tensor, except that a tied output is visited as its table (owner: the table's
// slot, e.g. token_embd), which fn may replace (a packed copy); the output then shares
// the replacement. The walk the loader's layout step and the benchmarks' repacked copies
// share, so a tied table takes its output's layout everywhere.
template <class Fn>
void for_each_product_matrix(ModelWeights& weights, Fn&& fn) {
  for (const WeightSlot& s : all_slots()) {
    if (s.role != Role::matrix) continue;
    const bool tied = shares_tied_storage(weights, s);
    const WeightSlot& owner = tied ? slot(s.ties_to) : s;
    const auto layers = s.per_layer ? static_cast<int64_t>(weights.layers.size()) : int64_t{1};
    for (int64_t layer = 0; layer < layers; ++layer) {
      Tensor& t = tensor_of(weights, owner, layer);
      if (!t.defined()) continue;
      fn(t, owner, layer);
      if (tied) tensor_of(weights, s, layer) = t;
    }
  }
}

}  // namespace loom::slots
