#include "model/config_fields.hpp"

#include <string>

#include "loom/error.hpp"

namespace loom::config_fields {

namespace {

using K = arch::ConfigKeys;
using Spec = arch::ArchitectureSpec;
using C = ModelConfig;

[[noreturn]] void missing(std::string_view field) {
  throw Error(ErrorCode::format, "config field '" + std::string(field) + "' is missing");
}

void kv_heads_from_heads(const Spec&, C& c) { c.n_kv_heads = c.n_heads; }

void ffn_from_hidden(const Spec& spec, C& c) {
  if (spec.intermediate_multiple <= 0) missing("intermediate_size");
  if (__builtin_mul_overflow(spec.intermediate_multiple, c.hidden_size, &c.intermediate_size)) {
    throw Error(ErrorCode::format, "config field 'hidden_size' (" + std::to_string(c.hidden_size) + ") is out of range");
  }
}

void positions_from_family(const Spec& spec, C& c) {
  if (spec.default_max_positions <= 0) missing("max_position_embeddings");
  c.max_positions = spec.default_max_positions;
}

void head_dim_from_hidden(const Spec&, C& c) {
  if (c.n_heads <= 0) throw Error(ErrorCode::format, "config field 'num_attention_heads' must be positive");
  if (c.hidden_size % c.n_heads != 0) {
    throw Error(ErrorCode::format, "config field 'hidden_size' (" + std::to_string(c.hidden_size) +
                                       ") is not a multiple of num_attention_heads (" + std::to_string(c.n_heads) +
                                       ") and head_dim is not given");
  }
  c.head_dim = c.hidden_size / c.n_heads;
}

void rope_dims_from_head_dim(const Spec&, C& c) { c.rope_dims = c.head_dim; }

bool rms(const C& c) { return c.norm == NormKind::rms_norm; }
bool head_dim_differs(const C& c) { return c.head_dim * c.n_heads != c.hidden_size; }
bool rope(const C& c) { return c.position == PositionKind::rope; }
bool sliding(const C& c) { return c.sliding_window > 0; }
bool attn_capped(const C& c) { return c.attn_logit_softcap > 0; }
bool final_capped(const C& c) { return c.final_logit_softcap > 0; }
bool always(const C&) { return true; }
bool never(const C&) { return false; }

// In the order config.json is written. The GGUF keys are llama.cpp's.
constexpr Field kFields[] = {
    {.name = "vocab_size", .integer = &C::vocab_size, .hf_keys = &K::vocab_size, .gguf_keys = {"vocab_size"},
     .hf_required = true},
    {.name = "hidden_size", .integer = &C::hidden_size, .hf_keys = &K::hidden_size,
     .gguf_keys = {"embedding_length"}, .hf_required = true, .gguf_required = true},
    {.name = "intermediate_size", .integer = &C::intermediate_size, .hf_keys = &K::intermediate_size,
     .gguf_keys = {"feed_forward_length"}, .derive = ffn_from_hidden},
    {.name = "num_hidden_layers", .integer = &C::n_layers, .hf_keys = &K::n_layers, .gguf_keys = {"block_count"},
     .hf_required = true, .gguf_required = true},
    {.name = "num_attention_heads", .integer = &C::n_heads, .hf_keys = &K::n_heads,
     .gguf_keys = {"attention.head_count"}, .hf_required = true, .gguf_required = true},
    {.name = "num_key_value_heads", .integer = &C::n_kv_heads, .hf_keys = &K::n_kv_heads,
     .gguf_keys = {"attention.head_count_kv"}, .derive = kv_heads_from_heads, .hf_write = rms, .gguf_write = always},
    {.name = "head_dim", .integer = &C::head_dim, .hf_keys = &K::head_dim, .gguf_keys = {"attention.key_length"},
     .derive = head_dim_from_hidden, .hf_write = head_dim_differs, .gguf_write = head_dim_differs},
    {.name = "max_position_embeddings", .integer = &C::max_positions, .hf_keys = &K::max_positions,
     .gguf_keys = {"context_length"}, .gguf_required = true, .derive = positions_from_family},
    {.name = "rms_norm_eps", .number = &C::norm_eps, .hf_keys = &K::norm_eps,
     .gguf_keys = {"attention.layer_norm_rms_epsilon", "attention.layer_norm_epsilon"}, .gguf_key_by_norm = true,
     .default_value = 1e-5},
    {.name = "rope_theta", .number = &C::rope_theta, .hf_keys = &K::rope_theta, .gguf_keys = {"rope.freq_base"},
     .default_value = 10000.0, .hf_write = rope, .gguf_write = rope},
    // config.json states the rotated share (partial_rotary_factor, rotary_pct), which
    // config_parse turns into dimensions; GGUF states the dimensions.
    {.name = "rope_dims", .integer = &C::rope_dims, .gguf_keys = {"rope.dimension_count"},
     .derive = rope_dims_from_head_dim, .hf_write = never, .gguf_write = rope},
    // config.json's window depends on the family (use_sliding_window, Gemma 2's default):
    // config_parse and the exporter handle it there.
    {.name = "sliding_window", .integer = &C::sliding_window, .gguf_keys = {"attention.sliding_window"},
     .hf_write = never, .gguf_write = sliding},
    {.name = "attn_logit_softcapping", .number = &C::attn_logit_softcap, .hf_keys = &K::attn_logit_softcap,
     .gguf_keys = {"attn_logit_softcapping"}, .hf_write = attn_capped, .gguf_write = attn_capped},
    {.name = "final_logit_softcapping", .number = &C::final_logit_softcap, .hf_keys = &K::final_logit_softcap,
     .gguf_keys = {"final_logit_softcapping"}, .hf_write = final_capped, .gguf_write = final_capped},
};

consteval bool one_member_each() {
  for (const auto& f : kFields) {
    if ((f.integer == nullptr) == (f.number == nullptr)) return false;
    if (f.hf_required && f.hf_keys == nullptr) return false;
  }
  return std::size(kFields) <= 32;  // read_all's bookkeeping
}
static_assert(one_member_each(), "each config field has exactly one ModelConfig member");

}  // namespace

std::span<const Field> all() noexcept { return kFields; }

}  // namespace loom::config_fields
