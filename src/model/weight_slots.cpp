#include "model/weight_slots.hpp"

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
bool qkv_bias(C c) { return c.qkv_bias; }
bool attn_out_bias(C c) { return c.attn_out_bias; }
bool swiglu(C c) { return c.ffn == FfnKind::swiglu; }
bool ffn_bias(C c) { return c.ffn_bias; }

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

const std::array<WeightSlot, 22> kSlots{{
    {"token_embd", false, &M::token_embd, nullptr, R::embedding, mat_vocab_hidden, always, kVocabHidden},
    {"position_embd", false, &M::position_embd, nullptr, R::embedding, mat_pos_hidden, learned_positions, "max_position_embeddings x hidden_size"},
    {"attn_norm", true, nullptr, &L::attn_norm, R::vector, vec_hidden, always, kHidden},
    {"attn_norm_bias", true, nullptr, &L::attn_norm_bias, R::vector, vec_hidden, norm_bias, kHidden},
    {"attn_q", true, nullptr, &L::attn_q, R::matrix, mat_q_hidden, always, kQ},
    {"attn_k", true, nullptr, &L::attn_k, R::matrix, mat_kv_hidden, always, kKv},
    {"attn_v", true, nullptr, &L::attn_v, R::matrix, mat_kv_hidden, always, kKv},
    {"attn_q_bias", true, nullptr, &L::attn_q_bias, R::vector, vec_q, qkv_bias, "num_attention_heads*head_dim"},
    {"attn_k_bias", true, nullptr, &L::attn_k_bias, R::vector, vec_kv, qkv_bias, "num_key_value_heads*head_dim"},
    {"attn_v_bias", true, nullptr, &L::attn_v_bias, R::vector, vec_kv, qkv_bias, "num_key_value_heads*head_dim"},
    {"attn_out", true, nullptr, &L::attn_out, R::matrix, mat_hidden_q, always, kO},
    {"attn_out_bias", true, nullptr, &L::attn_out_bias, R::vector, vec_hidden, attn_out_bias, kHidden},
    {"ffn_norm", true, nullptr, &L::ffn_norm, R::vector, vec_hidden, always, kHidden},
    {"ffn_norm_bias", true, nullptr, &L::ffn_norm_bias, R::vector, vec_hidden, norm_bias, kHidden},
    {"ffn_gate", true, nullptr, &L::ffn_gate, R::matrix, mat_ffn_hidden, swiglu, kFfnIn},
    {"ffn_up", true, nullptr, &L::ffn_up, R::matrix, mat_ffn_hidden, always, kFfnIn},
    {"ffn_up_bias", true, nullptr, &L::ffn_up_bias, R::vector, vec_ffn, ffn_bias, "intermediate_size"},
    {"ffn_down", true, nullptr, &L::ffn_down, R::matrix, mat_hidden_ffn, always, kFfnOut},
    {"ffn_down_bias", true, nullptr, &L::ffn_down_bias, R::vector, vec_hidden, ffn_bias, kHidden},
    {"output_norm", false, &M::output_norm, nullptr, R::vector, vec_hidden, always, kHidden},
    {"output_norm_bias", false, &M::output_norm_bias, nullptr, R::vector, vec_hidden, norm_bias, kHidden},
    {"output", false, &M::output, nullptr, R::matrix, mat_vocab_hidden, always, kVocabHidden},
}};

}  // namespace

std::span<const WeightSlot> all_slots() noexcept {
  return kSlots;
}

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

}  // namespace loom::slots
