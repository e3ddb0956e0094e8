#include "model/architectures.hpp"

#include <charconv>

namespace loom::arch {

namespace {

using R = NameRule;

// ---- Llama family (Llama 2/3/3.1/3.2, TinyLlama, SmolLM, Mistral, Qwen2) ----
// Hugging Face LlamaForCausalLM names, after the "model." prefix.
constexpr R kLlamaHf[] = {
    {"embed_tokens.weight", {"token_embd"}},
    {"layers.{N}.input_layernorm.weight", {"attn_norm"}},
    {"layers.{N}.self_attn.q_proj.weight", {"attn_q"}},
    {"layers.{N}.self_attn.k_proj.weight", {"attn_k"}},
    {"layers.{N}.self_attn.v_proj.weight", {"attn_v"}},
    {"layers.{N}.self_attn.q_proj.bias", {"attn_q_bias"}},
    {"layers.{N}.self_attn.k_proj.bias", {"attn_k_bias"}},
    {"layers.{N}.self_attn.v_proj.bias", {"attn_v_bias"}},
    {"layers.{N}.self_attn.o_proj.weight", {"attn_out"}},
    {"layers.{N}.post_attention_layernorm.weight", {"ffn_norm"}},
    {"layers.{N}.mlp.gate_proj.weight", {"ffn_gate"}},
    {"layers.{N}.mlp.up_proj.weight", {"ffn_up"}},
    {"layers.{N}.mlp.down_proj.weight", {"ffn_down"}},
    {"norm.weight", {"output_norm"}},
    {"lm_head.weight", {"output"}},
};

// GGUF names as llama.cpp writes them (shared by every family below).
constexpr R kGgufCommon[] = {
    {"token_embd.weight", {"token_embd"}},
    {"position_embd.weight", {"position_embd"}},
    {"blk.{N}.attn_norm.weight", {"attn_norm"}},
    {"blk.{N}.attn_norm.bias", {"attn_norm_bias"}},
    {"blk.{N}.attn_q.weight", {"attn_q"}},
    {"blk.{N}.attn_k.weight", {"attn_k"}},
    {"blk.{N}.attn_v.weight", {"attn_v"}},
    {"blk.{N}.attn_q.bias", {"attn_q_bias"}},
    {"blk.{N}.attn_k.bias", {"attn_k_bias"}},
    {"blk.{N}.attn_v.bias", {"attn_v_bias"}},
    {"blk.{N}.attn_qkv.weight", {"attn_q", "attn_k", "attn_v"}},
    {"blk.{N}.attn_qkv.bias", {"attn_q_bias", "attn_k_bias", "attn_v_bias"}},
    {"blk.{N}.attn_output.weight", {"attn_out"}},
    {"blk.{N}.attn_output.bias", {"attn_out_bias"}},
    {"blk.{N}.ffn_norm.weight", {"ffn_norm"}},
    {"blk.{N}.ffn_norm.bias", {"ffn_norm_bias"}},
    {"blk.{N}.ffn_gate.weight", {"ffn_gate"}},
    {"blk.{N}.ffn_up.weight", {"ffn_up"}},
    {"blk.{N}.ffn_up.bias", {"ffn_up_bias"}},
    {"blk.{N}.ffn_down.weight", {"ffn_down"}},
    {"blk.{N}.ffn_down.bias", {"ffn_down_bias"}},
    {"output_norm.weight", {"output_norm"}},
    {"output_norm.bias", {"output_norm_bias"}},
    {"output.weight", {"output"}},
};

// GPT-2 in GGUF as llama.cpp writes it: q|k|v fused in attn_qkv (listed first, so the
// exporter writes it fused too).
constexpr R kGpt2Gguf[] = {
    {"token_embd.weight", {"token_embd"}},
    {"position_embd.weight", {"position_embd"}},
    {"blk.{N}.attn_norm.weight", {"attn_norm"}},
    {"blk.{N}.attn_norm.bias", {"attn_norm_bias"}},
    {"blk.{N}.attn_qkv.weight", {"attn_q", "attn_k", "attn_v"}},
    {"blk.{N}.attn_qkv.bias", {"attn_q_bias", "attn_k_bias", "attn_v_bias"}},
    {"blk.{N}.attn_output.weight", {"attn_out"}},
    {"blk.{N}.attn_output.bias", {"attn_out_bias"}},
    {"blk.{N}.ffn_norm.weight", {"ffn_norm"}},
    {"blk.{N}.ffn_norm.bias", {"ffn_norm_bias"}},
    {"blk.{N}.ffn_up.weight", {"ffn_up"}},
    {"blk.{N}.ffn_up.bias", {"ffn_up_bias"}},
    {"blk.{N}.ffn_down.weight", {"ffn_down"}},
    {"blk.{N}.ffn_down.bias", {"ffn_down_bias"}},
    {"output_norm.weight", {"output_norm"}},
    {"output_norm.bias", {"output_norm_bias"}},
    {"output.weight", {"output"}},
};

// Phi-3 in GGUF keeps gate|up fused in ffn_up (256 wide for ffn 128).
constexpr R kPhi3Gguf[] = {
    {"token_embd.weight", {"token_embd"}},
    {"blk.{N}.attn_norm.weight", {"attn_norm"}},
    {"blk.{N}.attn_qkv.weight", {"attn_q", "attn_k", "attn_v"}},
    {"blk.{N}.attn_q.weight", {"attn_q"}},
    {"blk.{N}.attn_k.weight", {"attn_k"}},
    {"blk.{N}.attn_v.weight", {"attn_v"}},
    {"blk.{N}.attn_output.weight", {"attn_out"}},
    {"blk.{N}.ffn_norm.weight", {"ffn_norm"}},
    {"blk.{N}.ffn_up.weight", {"ffn_gate", "ffn_up"}},
    {"blk.{N}.ffn_down.weight", {"ffn_down"}},
    {"output_norm.weight", {"output_norm"}},
    {"output.weight", {"output"}},
};

constexpr R kPhi3Hf[] = {
    {"embed_tokens.weight", {"token_embd"}},
    {"layers.{N}.input_layernorm.weight", {"attn_norm"}},
    {"layers.{N}.self_attn.qkv_proj.weight", {"attn_q", "attn_k", "attn_v"}},
    {"layers.{N}.self_attn.o_proj.weight", {"attn_out"}},
    {"layers.{N}.post_attention_layernorm.weight", {"ffn_norm"}},
    {"layers.{N}.mlp.gate_up_proj.weight", {"ffn_gate", "ffn_up"}},
    {"layers.{N}.mlp.down_proj.weight", {"ffn_down"}},
    {"norm.weight", {"output_norm"}},
    {"lm_head.weight", {"output"}},
};

// GPT-2: Conv1D weights are stored [in, out] and c_attn fuses q|k|v.
constexpr R kGpt2Hf[] = {
    {"wte.weight", {"token_embd"}},
    {"wpe.weight", {"position_embd"}},
    {"h.{N}.ln_1.weight", {"attn_norm"}},
    {"h.{N}.ln_1.bias", {"attn_norm_bias"}},
    {"h.{N}.attn.c_attn.weight", {"attn_q", "attn_k", "attn_v"}, true},
    {"h.{N}.attn.c_attn.bias", {"attn_q_bias", "attn_k_bias", "attn_v_bias"}},
    {"h.{N}.attn.c_proj.weight", {"attn_out"}, true},
    {"h.{N}.attn.c_proj.bias", {"attn_out_bias"}},
    {"h.{N}.ln_2.weight", {"ffn_norm"}},
    {"h.{N}.ln_2.bias", {"ffn_norm_bias"}},
    {"h.{N}.mlp.c_fc.weight", {"ffn_up"}, true},
    {"h.{N}.mlp.c_fc.bias", {"ffn_up_bias"}},
    {"h.{N}.mlp.c_proj.weight", {"ffn_down"}, true},
    {"h.{N}.mlp.c_proj.bias", {"ffn_down_bias"}},
    {"ln_f.weight", {"output_norm"}},
    {"ln_f.bias", {"output_norm_bias"}},
    {"lm_head.weight", {"output"}},
};

// llama2.c checkpoints, named by their reader (format/llama2c.cpp) with the names of
// Meta's and llama2.c's model.py. q/k rows are in Meta's interleaved-RoPE order.
constexpr R kLlama2c[] = {
    {"tok_embeddings.weight", {"token_embd"}},
    {"layers.{N}.attention_norm.weight", {"attn_norm"}},
    {"layers.{N}.attention.wq.weight", {"attn_q"}},
    {"layers.{N}.attention.wk.weight", {"attn_k"}},
    {"layers.{N}.attention.wv.weight", {"attn_v"}},
    {"layers.{N}.attention.wo.weight", {"attn_out"}},
    {"layers.{N}.ffn_norm.weight", {"ffn_norm"}},
    {"layers.{N}.feed_forward.w1.weight", {"ffn_gate"}},
    {"layers.{N}.feed_forward.w2.weight", {"ffn_down"}},
    {"layers.{N}.feed_forward.w3.weight", {"ffn_up"}},
    {"norm.weight", {"output_norm"}},
    {"output.weight", {"output"}},
};

// Buffers that some checkpoints carry but that are not weights.
// (llama2.c's legacy files carry RoPE tables, which loom computes from rope_theta.)
constexpr std::string_view kLlamaIgnored[] = {"layers.{N}.self_attn.rotary_emb.inv_freq", "freq_cis_real",
                                              "freq_cis_imag"};
constexpr std::string_view kGpt2Ignored[] = {"h.{N}.attn.bias", "h.{N}.attn.masked_bias"};

constexpr ConfigKeys kGpt2Keys{
    {"vocab_size"},
    {"n_embd", "hidden_size"},
    {"n_inner", "intermediate_size"},
    {"n_layer", "num_hidden_layers"},
    {"n_head", "num_attention_heads"},
    {"n_head_kv", "num_key_value_heads"},
    {"n_positions", "n_ctx", "max_position_embeddings"},
    {"layer_norm_epsilon", "layer_norm_eps"},
};

using N = NormKind;
using F = FfnKind;
using P = PositionKind;

// name, hf classes, hf model types, gguf names, norm, ffn, position, qkv bias, out bias,
// ffn bias, norm bias, default tied, intermediate multiple, sliding window honoured,
// gguf rope interleaved, hf keys, prefixes, hf names, gguf names, ignored, llama2.c names
const ArchitectureSpec kArchitectures[] = {
    {"llama", {"LlamaForCausalLM"}, {"llama"}, {"llama"}, N::rms_norm, F::swiglu, P::rope,
     false, false, false, false, false, 0, false, true, {}, {"model."}, kLlamaHf, kGgufCommon,
     kLlamaIgnored, kLlama2c},
    {"mistral", {"MistralForCausalLM"}, {"mistral"}, {}, N::rms_norm, F::swiglu, P::rope, false,
     false, false, false, false, 0, true, true, {}, {"model."}, kLlamaHf, kGgufCommon,
     kLlamaIgnored, {}},
    {"qwen2", {"Qwen2ForCausalLM"}, {"qwen2"}, {"qwen2"}, N::rms_norm, F::swiglu, P::rope, true,
     false, false, false, false, 0, true, false, {}, {"model."}, kLlamaHf, kGgufCommon,
     kLlamaIgnored, {}},
    {"phi3", {"Phi3ForCausalLM"}, {"phi3"}, {"phi3"}, N::rms_norm, F::swiglu, P::rope, false,
     false, false, false, false, 0, true, false, {}, {"model."}, kPhi3Hf, kPhi3Gguf,
     kLlamaIgnored, {}},
    {"gpt2", {"GPT2LMHeadModel", "GPT2Model"}, {"gpt2"}, {"gpt2"}, N::layer_norm, F::gelu_mlp,
     P::learned, true, true, true, true, true, 4, false, false, kGpt2Keys, {"transformer."},
     kGpt2Hf, kGpt2Gguf, kGpt2Ignored, {}},
};

bool contains(std::span<const std::string_view> list, std::string_view s) {
  for (auto v : list) {
    if (!v.empty() && v == s) return true;
  }
  return false;
}

}  // namespace

std::span<const ArchitectureSpec> all_architectures() noexcept { return kArchitectures; }

const ArchitectureSpec* find_by_name(std::string_view name) noexcept {
  for (const auto& a : kArchitectures) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

const ArchitectureSpec* find_by_hf(std::string_view hf_class, std::string_view model_type) noexcept {
  for (const auto& a : kArchitectures) {
    if (contains(a.hf_classes, hf_class)) return &a;
  }
  for (const auto& a : kArchitectures) {
    if (contains(a.hf_model_types, model_type)) return &a;
  }
  return nullptr;
}

const ArchitectureSpec* find_by_gguf(std::string_view gguf_arch) noexcept {
  for (const auto& a : kArchitectures) {
    if (contains(a.gguf_names, gguf_arch)) return &a;
  }
  return nullptr;
}

std::span<const NameRule> names_for(const ArchitectureSpec& spec, FormatKind format) noexcept {
  switch (format) {
    case FormatKind::gguf: return spec.gguf_names_map;
    case FormatKind::llama2c: return spec.llama2c_names;
    case FormatKind::safetensors:
    case FormatKind::torch:
    case FormatKind::npy:
    case FormatKind::pack: return spec.hf_names;
  }
  return spec.hf_names;
}

bool match_pattern(std::string_view pattern, std::string_view name, int64_t& layer) noexcept {
  const size_t at = pattern.find("{N}");
  if (at == std::string_view::npos) {
    layer = -1;
    return pattern == name;
  }
  const std::string_view before = pattern.substr(0, at);
  const std::string_view after = pattern.substr(at + 3);
  if (name.size() <= before.size() + after.size()) return false;
  if (name.substr(0, before.size()) != before) return false;
  if (name.substr(name.size() - after.size()) != after) return false;
  const std::string_view digits = name.substr(before.size(), name.size() - before.size() - after.size());
  if (digits.empty() || digits.size() > 6) return false;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
  }
  int64_t value = 0;
  std::from_chars(digits.data(), digits.data() + digits.size(), value);
  layer = value;
  return true;
}

}  // namespace loom::arch
