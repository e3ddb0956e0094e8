#include "model/weight_slots.hpp"

#include <algorithm>
#include <array>

namespace loom::slots {

namespace {

using C = const ModelConfig&;

Shape vec_hidden(C c) { return Shape{c.hidden_size}; }
Shape vec_q(C c) { return Shape{c.q_dim()}; }
Shape vec_kv(C c) { return Shape{c.kv_dim()}; }
Shape vec_ffn(C c) { return Shape{c.intermediate_size}; }
Shape mat_vocab_hidden(C c) { return Shape{c.vocab_size, c.hidden_size}; }
Shape mat_pos_hidden(C c) { return Shape{c.max_positions, c.hidden_size}; }
Shape mat_q_hidden(C c) { return Shape{c.q_dim(), c.hidden_size}; }
Shape mat_kv_hidden(C c) { return Shape{c.kv_dim(), c.hidden_size}; }
Shape mat_hidden_q(C c) { return Shape{c.hidden_size, c.q_dim()}; }
Shape mat_ffn_hidden(C c) { return Shape{c.intermediate_size, c.hidden_size}; }
Shape mat_hidden_ffn(C c) { return Shape{c.hidden_size, c.intermediate_size}; }

bool always(C) { return true; }
bool learned_positions(C c) { return c.position == PositionKind::learned; }
bool norm_bias(C c) { return c.norm_bias; }
bool own_ffn_norm(C c) { return !c.shared_attn_ffn_norm; }
bool own_ffn_norm_bias(C c) { return c.norm_bias && !c.shared_attn_ffn_norm; }
bool qkv_bias(C c) { return c.qkv_bias; }
bool attn_out_bias(C c) { return c.attn_out_bias; }
bool gated(C c) { return c.ffn == FfnKind::gated; }
bool ffn_bias(C c) { return c.ffn_bias; }
bool post_norms(C c) { return c.post_norms; }

constexpr auto kHidden = "hidden_size";
constexpr auto kVocabHidden = "vocab_size x hidden_size";
constexpr auto kQ = "num_attention_heads*head_dim x hidden_size";
constexpr auto kKv = "num_key_value_heads*head_dim x hidden_size";
constexpr auto kO = "hidden_size x num_attention_heads*head_dim";
constexpr auto kFfnIn = "intermediate_size x hidden_size";
constexpr auto kFfnOut = "hidden_size x intermediate_size";

using M = ModelWeights;
using L = LayerWeights;
using R = Role;
using S = Slot;

// One row per Slot, in enum order (checked below).
constexpr WeightSlot kSlots[] = {
    {.id = S::token_embd, .name = "token_embd", .per_layer = false, .model_member = &M::token_embd,
     .layer_member = nullptr, .role = R::embedding, .shape = mat_vocab_hidden, .needed = always,
     .shape_fields = kVocabHidden},
    {.id = S::position_embd, .name = "position_embd", .per_layer = false, .model_member = &M::position_embd,
     .layer_member = nullptr, .role = R::embedding, .shape = mat_pos_hidden, .needed = learned_positions,
     .shape_fields = "max_position_embeddings x hidden_size", .recipe_quantizes = false},
    {.id = S::attn_norm, .name = "attn_norm", .per_layer = true, .model_member = nullptr,
     .layer_member = &L::attn_norm, .role = R::norm, .shape = vec_hidden, .needed = always, .shape_fields = kHidden},
    {.id = S::attn_norm_bias, .name = "attn_norm_bias", .per_layer = true, .model_member = nullptr,
     .layer_member = &L::attn_norm_bias, .role = R::bias, .shape = vec_hidden, .needed = norm_bias,
     .shape_fields = kHidden},
    {.id = S::attn_q, .name = "attn_q", .per_layer = true, .model_member = nullptr, .layer_member = &L::attn_q,
     .role = R::matrix, .shape = mat_q_hidden, .needed = always, .shape_fields = kQ,
     .rope_rows = RopeRows::query_heads},
    {.id = S::attn_k, .name = "attn_k", .per_layer = true, .model_member = nullptr, .layer_member = &L::attn_k,
     .role = R::matrix, .shape = mat_kv_hidden, .needed = always, .shape_fields = kKv,
     .rope_rows = RopeRows::kv_heads},
    {.id = S::attn_v, .name = "attn_v", .per_layer = true, .model_member = nullptr, .layer_member = &L::attn_v,
     .role = R::matrix, .shape = mat_kv_hidden, .needed = always, .shape_fields = kKv},
    {.id = S::attn_q_bias, .name = "attn_q_bias", .per_layer = true, .model_member = nullptr,
     .layer_member = &L::attn_q_bias, .role = R::bias, .shape = vec_q, .needed = qkv_bias,
     .shape_fields = "num_attention_heads*head_dim", .rope_rows = RopeRows::query_heads},
    {.id = S::attn_k_bias, .name = "attn_k_bias", .per_layer = true, .model_member = nullptr,
     .layer_member = &L::attn_k_bias, .role = R::bias, .shape = vec_kv, .needed = qkv_bias,
     .shape_fields = "num_key_value_heads*head_dim", .rope_rows = RopeRows::kv_heads},
    {.id = S::attn_v_bias, .name = "attn_v_bias", .per_layer = true, .model_member = nullptr,
     .layer_member = &L::attn_v_bias, .role = R::bias, .shape = vec_kv, .needed = qkv_bias,
     .shape_fields = "num_key_value_heads*head_dim"},
    {.id = S::attn_out, .name = "attn_out", .per_layer = true, .model_member = nullptr, .layer_member = &L::attn_out,
     .role = R::matrix, .shape = mat_hidden_q, .needed = always, .shape_fields = kO},
    {.id = S::attn_out_bias, .name = "attn_out_bias", .per_layer = true, .model_member = nullptr,
     .layer_member = &L::attn_out_bias, .role = R::bias, .shape = vec_hidden, .needed = attn_out_bias,
     .shape_fields = kHidden},
    {.id = S::attn_post_norm, .name = "attn_post_norm", .per_layer = true, .model_member = nullptr,
     .layer_member = &L::attn_post_norm, .role = R::norm, .shape = vec_hidden, .needed = post_norms,
     .shape_fields = kHidden},
    {.id = S::ffn_norm, .name = "ffn_norm", .per_layer = true, .model_member = nullptr, .layer_member = &L::ffn_norm,
     .role = R::norm, .shape = vec_hidden, .needed = own_ffn_norm, .shape_fields = kHidden},
    {.id = S::ffn_norm_bias, .name = "ffn_norm_bias", .per_layer = true, .model_member = nullptr,
     .layer_member = &L::ffn_norm_bias, .role = R::bias, .shape = vec_hidden, .needed = own_ffn_norm_bias,
     .shape_fields = kHidden},
    {.id = S::ffn_gate, .name = "ffn_gate", .per_layer = true, .model_member = nullptr, .layer_member = &L::ffn_gate,
     .role = R::matrix, .shape = mat_ffn_hidden, .needed = gated, .shape_fields = kFfnIn},
    {.id = S::ffn_up, .name = "ffn_up", .per_layer = true, .model_member = nullptr, .layer_member = &L::ffn_up,
     .role = R::matrix, .shape = mat_ffn_hidden, .needed = always, .shape_fields = kFfnIn},
    {.id = S::ffn_up_bias, .name = "ffn_up_bias", .per_layer = true, .model_member = nullptr,
     .layer_member = &L::ffn_up_bias, .role = R::bias, .shape = vec_ffn, .needed = ffn_bias,
     .shape_fields = "intermediate_size"},
    {.id = S::ffn_down, .name = "ffn_down", .per_layer = true, .model_member = nullptr, .layer_member = &L::ffn_down,
     .role = R::matrix, .shape = mat_hidden_ffn, .needed = always, .shape_fields = kFfnOut},
    {.id = S::ffn_down_bias, .name = "ffn_down_bias", .per_layer = true, .model_member = nullptr,
     .layer_member = &L::ffn_down_bias, .role = R::bias, .shape = vec_hidden, .needed = ffn_bias,
     .shape_fields = kHidden},
    {.id = S::ffn_post_norm, .name = "ffn_post_norm", .per_layer = true, .model_member = nullptr,
     .layer_member = &L::ffn_post_norm, .role = R::norm, .shape = vec_hidden, .needed = post_norms,
     .shape_fields = kHidden},
    {.id = S::output_norm, .name = "output_norm", .per_layer = false, .model_member = &M::output_norm,
     .layer_member = nullptr, .role = R::norm, .shape = vec_hidden, .needed = always, .shape_fields = kHidden},
    {.id = S::output_norm_bias, .name = "output_norm_bias", .per_layer = false, .model_member = &M::output_norm_bias,
     .layer_member = nullptr, .role = R::bias, .shape = vec_hidden, .needed = norm_bias, .shape_fields = kHidden},
    {.id = S::output, .name = "output", .per_layer = false, .model_member = &M::output, .layer_member = nullptr,
     .role = R::matrix, .shape = mat_vocab_hidden, .needed = always, .shape_fields = kVocabHidden,
     .ties_to = S::token_embd},
};

// The table is checked where it is written: ids in enum order, one member pointer per
// row of the right kind, a tie target that exists.
consteval bool table_is_consistent() {
  for (size_t i = 0; i < std::size(kSlots); ++i) {
    const WeightSlot& s = kSlots[i];
    if (static_cast<size_t>(s.id) != i + 1) return false;
    if (s.per_layer != (s.layer_member != nullptr) || s.per_layer == (s.model_member != nullptr)) return false;
    if (s.name.empty() || s.shape == nullptr || s.needed == nullptr) return false;
  }
  return true;
}
static_assert(table_is_consistent(), "kSlots must list every Slot once, in enum order, with its member");
static_assert(std::size(kSlots) == static_cast<size_t>(Slot::output), "a Slot has no row in kSlots");

}  // namespace

std::span<const WeightSlot> all_slots() noexcept { return kSlots; }

const WeightSlot& slot(Slot id) noexcept { return kSlots[static_cast<size_t>(id) - 1]; }

std::string full_name(const WeightSlot& slot, int64_t layer) {
  if (!slot.per_layer) return std::string(slot.name);
  return "blk." + std::to_string(layer) + "." + std::string(slot.name);
}

Tensor& tensor_of(ModelWeights& weights, const WeightSlot& slot, int64_t layer) {
  if (!slot.per_layer) return weights.*(slot.model_member);
  return weights.layers[static_cast<size_t>(layer)].*(slot.layer_member);
}

const Tensor& tensor_of(const ModelWeights& weights, const WeightSlot& slot, int64_t layer) {
  if (!slot.per_layer) return weights.*(slot.model_member);
  return weights.layers[static_cast<size_t>(layer)].*(slot.layer_member);
}

const WeightSlot* find_slot(std::string_view name) noexcept {
  for (const auto& s : all_slots()) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

bool tied_in(const ModelConfig& config, const WeightSlot& s) noexcept {
  return s.ties_to != Slot::none && config.tie_word_embeddings;
}

bool shares_tied_storage(const ModelWeights& weights, const WeightSlot& s) noexcept {
  if (s.ties_to == Slot::none || s.per_layer) return false;
  const Tensor& t = tensor_of(weights, s, 0);
  const Tensor& to = tensor_of(weights, slot(s.ties_to), 0);
  return t.defined() && to.defined() && t.shares_storage_with(to) && t.raw_data() == to.raw_data();
}

bool is_tied_table(const ModelWeights& weights, const WeightSlot& table) noexcept {
  return std::any_of(all_slots().begin(), all_slots().end(), [&](const WeightSlot& s) {
    return s.ties_to == table.id && shares_tied_storage(weights, s);
  });
}

}  // namespace loom::slots
