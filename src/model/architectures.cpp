#include "model/architectures.hpp"

#include <charconv>
#include <cmath>
#include <vector>

#include "loom/error.hpp"

namespace loom::arch {

namespace {

using R = NameRule;
using S = Slot;
using X = Transform;
constexpr std::array<Slot, 3> kQkv{S::attn_q, S::attn_k, S::attn_v};
constexpr std::array<Slot, 3> kQkvBias{S::attn_q_bias, S::attn_k_bias, S::attn_v_bias};

// ---- Llama family (Llama 2/3/3.1/3.2, TinyLlama, SmolLM, Mistral, Qwen2) ----
// Hugging Face LlamaForCausalLM names, after the "model." prefix.
constexpr R kLlamaHf[] = {
    {"embed_tokens.weight", {S::token_embd}},
    {"layers.{N}.input_layernorm.weight", {S::attn_norm}},
    {"layers.{N}.self_attn.q_proj.weight", {S::attn_q}},
    {"layers.{N}.self_attn.k_proj.weight", {S::attn_k}},
    {"layers.{N}.self_attn.v_proj.weight", {S::attn_v}},
    {"layers.{N}.self_attn.q_proj.bias", {S::attn_q_bias}},
    {"layers.{N}.self_attn.k_proj.bias", {S::attn_k_bias}},
    {"layers.{N}.self_attn.v_proj.bias", {S::attn_v_bias}},
    {"layers.{N}.self_attn.o_proj.weight", {S::attn_out}},
    {"layers.{N}.post_attention_layernorm.weight", {S::ffn_norm}},
    {"layers.{N}.mlp.gate_proj.weight", {S::ffn_gate}},
    {"layers.{N}.mlp.up_proj.weight", {S::ffn_up}},
    {"layers.{N}.mlp.down_proj.weight", {S::ffn_down}},
    {"norm.weight", {S::output_norm}},
    {.pattern = "lm_head.weight", .slots = {S::output}, .at_root = true},
};

// GGUF names as llama.cpp writes them (shared by most families below).
constexpr R kGgufCommon[] = {
    {"token_embd.weight", {S::token_embd}},
    {"position_embd.weight", {S::position_embd}},
    {"blk.{N}.attn_norm.weight", {S::attn_norm}},
    {"blk.{N}.attn_norm.bias", {S::attn_norm_bias}},
    {"blk.{N}.attn_q.weight", {S::attn_q}},
    {"blk.{N}.attn_k.weight", {S::attn_k}},
    {"blk.{N}.attn_v.weight", {S::attn_v}},
    {"blk.{N}.attn_q.bias", {S::attn_q_bias}},
    {"blk.{N}.attn_k.bias", {S::attn_k_bias}},
    {"blk.{N}.attn_v.bias", {S::attn_v_bias}},
    {"blk.{N}.attn_qkv.weight", kQkv},
    {"blk.{N}.attn_qkv.bias", kQkvBias},
    {"blk.{N}.attn_output.weight", {S::attn_out}},
    {"blk.{N}.attn_output.bias", {S::attn_out_bias}},
    {"blk.{N}.ffn_norm.weight", {S::ffn_norm}},
    {"blk.{N}.ffn_norm.bias", {S::ffn_norm_bias}},
    {"blk.{N}.ffn_gate.weight", {S::ffn_gate}},
    {"blk.{N}.ffn_up.weight", {S::ffn_up}},
    {"blk.{N}.ffn_up.bias", {S::ffn_up_bias}},
    {"blk.{N}.ffn_down.weight", {S::ffn_down}},
    {"blk.{N}.ffn_down.bias", {S::ffn_down_bias}},
    {"output_norm.weight", {S::output_norm}},
    {"output_norm.bias", {S::output_norm_bias}},
    {"output.weight", {S::output}},
};

// GPT-2 and GPT-NeoX in GGUF as llama.cpp writes them: q|k|v fused in attn_qkv (listed
// first, so the exporter writes it fused too).
constexpr R kFusedQkvGguf[] = {
    {"token_embd.weight", {S::token_embd}},
    {"position_embd.weight", {S::position_embd}},
    {"blk.{N}.attn_norm.weight", {S::attn_norm}},
    {"blk.{N}.attn_norm.bias", {S::attn_norm_bias}},
    {"blk.{N}.attn_qkv.weight", kQkv},
    {"blk.{N}.attn_qkv.bias", kQkvBias},
    {"blk.{N}.attn_output.weight", {S::attn_out}},
    {"blk.{N}.attn_output.bias", {S::attn_out_bias}},
    {"blk.{N}.ffn_norm.weight", {S::ffn_norm}},
    {"blk.{N}.ffn_norm.bias", {S::ffn_norm_bias}},
    {"blk.{N}.ffn_up.weight", {S::ffn_up}},
    {"blk.{N}.ffn_up.bias", {S::ffn_up_bias}},
    {"blk.{N}.ffn_down.weight", {S::ffn_down}},
    {"blk.{N}.ffn_down.bias", {S::ffn_down_bias}},
    {"output_norm.weight", {S::output_norm}},
    {"output_norm.bias", {S::output_norm_bias}},
    {"output.weight", {S::output}},
};

// Phi-3 in GGUF keeps gate|up fused in ffn_up (256 wide for ffn 128).
constexpr R kPhi3Gguf[] = {
    {"token_embd.weight", {S::token_embd}},
    {"blk.{N}.attn_norm.weight", {S::attn_norm}},
    {"blk.{N}.attn_qkv.weight", kQkv},
    {"blk.{N}.attn_q.weight", {S::attn_q}},
    {"blk.{N}.attn_k.weight", {S::attn_k}},
    {"blk.{N}.attn_v.weight", {S::attn_v}},
    {"blk.{N}.attn_output.weight", {S::attn_out}},
    {"blk.{N}.ffn_norm.weight", {S::ffn_norm}},
    {"blk.{N}.ffn_up.weight", {S::ffn_gate, S::ffn_up}},
    {"blk.{N}.ffn_down.weight", {S::ffn_down}},
    {"output_norm.weight", {S::output_norm}},
    {"output.weight", {S::output}},
};

constexpr R kPhi3Hf[] = {
    {"embed_tokens.weight", {S::token_embd}},
    {"layers.{N}.input_layernorm.weight", {S::attn_norm}},
    {"layers.{N}.self_attn.qkv_proj.weight", kQkv},
    {"layers.{N}.self_attn.o_proj.weight", {S::attn_out}},
    {"layers.{N}.post_attention_layernorm.weight", {S::ffn_norm}},
    {"layers.{N}.mlp.gate_up_proj.weight", {S::ffn_gate, S::ffn_up}},
    {"layers.{N}.mlp.down_proj.weight", {S::ffn_down}},
    {"norm.weight", {S::output_norm}},
    {.pattern = "lm_head.weight", .slots = {S::output}, .at_root = true},
};

// GPT-2: Conv1D weights are stored [in, out] and c_attn fuses q|k|v.
constexpr R kGpt2Hf[] = {
    {"wte.weight", {S::token_embd}},
    {"wpe.weight", {S::position_embd}},
    {"h.{N}.ln_1.weight", {S::attn_norm}},
    {"h.{N}.ln_1.bias", {S::attn_norm_bias}},
    {.pattern = "h.{N}.attn.c_attn.weight", .slots = kQkv, .transform = X::transpose},
    {"h.{N}.attn.c_attn.bias", kQkvBias},
    {.pattern = "h.{N}.attn.c_proj.weight", .slots = {S::attn_out}, .transform = X::transpose},
    {"h.{N}.attn.c_proj.bias", {S::attn_out_bias}},
    {"h.{N}.ln_2.weight", {S::ffn_norm}},
    {"h.{N}.ln_2.bias", {S::ffn_norm_bias}},
    {.pattern = "h.{N}.mlp.c_fc.weight", .slots = {S::ffn_up}, .transform = X::transpose},
    {"h.{N}.mlp.c_fc.bias", {S::ffn_up_bias}},
    {.pattern = "h.{N}.mlp.c_proj.weight", .slots = {S::ffn_down}, .transform = X::transpose},
    {"h.{N}.mlp.c_proj.bias", {S::ffn_down_bias}},
    {"ln_f.weight", {S::output_norm}},
    {"ln_f.bias", {S::output_norm_bias}},
    {.pattern = "lm_head.weight", .slots = {S::output}, .at_root = true},
};

// ---- Falcon (FalconForCausalLM), after the "transformer." prefix ----
bool one_norm(const ModelConfig& c) { return c.shared_attn_ffn_norm; }
bool two_norms(const ModelConfig& c) { return !c.shared_attn_ffn_norm; }

// query_key_value holds, per KV group, its query heads then its key and value head:
// one group for multi-query Falcon-7B, n_kv groups for the 40B-style layout, and one
// group per head for the original (neither) layout.
constexpr R kFalconHf[] = {
    {"word_embeddings.weight", {S::token_embd}},
    {.pattern = "h.{N}.input_layernorm.weight", .slots = {S::attn_norm}, .when = one_norm},
    {.pattern = "h.{N}.input_layernorm.bias", .slots = {S::attn_norm_bias}, .when = one_norm},
    {.pattern = "h.{N}.ln_attn.weight", .slots = {S::attn_norm}, .when = two_norms},
    {.pattern = "h.{N}.ln_attn.bias", .slots = {S::attn_norm_bias}, .when = two_norms},
    {.pattern = "h.{N}.ln_mlp.weight", .slots = {S::ffn_norm}, .when = two_norms},
    {.pattern = "h.{N}.ln_mlp.bias", .slots = {S::ffn_norm_bias}, .when = two_norms},
    {.pattern = "h.{N}.self_attention.query_key_value.weight", .slots = kQkv, .split = Split::per_kv_group},
    {.pattern = "h.{N}.self_attention.query_key_value.bias", .slots = kQkvBias, .split = Split::per_kv_group},
    {"h.{N}.self_attention.dense.weight", {S::attn_out}},
    {"h.{N}.self_attention.dense.bias", {S::attn_out_bias}},
    {"h.{N}.mlp.dense_h_to_4h.weight", {S::ffn_up}},
    {"h.{N}.mlp.dense_h_to_4h.bias", {S::ffn_up_bias}},
    {"h.{N}.mlp.dense_4h_to_h.weight", {S::ffn_down}},
    {"h.{N}.mlp.dense_4h_to_h.bias", {S::ffn_down_bias}},
    {"ln_f.weight", {S::output_norm}},
    {"ln_f.bias", {S::output_norm_bias}},
    {.pattern = "lm_head.weight", .slots = {S::output}, .at_root = true},
};

// llama.cpp's converter reorders query_key_value to [all q | all k | all v]. In the
// 40B-style layout attn_norm is ln_mlp (the FFN's) and attn_norm_2 is ln_attn.
constexpr R kFalconGguf[] = {
    {"token_embd.weight", {S::token_embd}},
    {.pattern = "blk.{N}.attn_norm.weight", .slots = {S::attn_norm}, .when = one_norm},
    {.pattern = "blk.{N}.attn_norm.bias", .slots = {S::attn_norm_bias}, .when = one_norm},
    {.pattern = "blk.{N}.attn_norm_2.weight", .slots = {S::attn_norm}, .when = two_norms},
    {.pattern = "blk.{N}.attn_norm_2.bias", .slots = {S::attn_norm_bias}, .when = two_norms},
    {.pattern = "blk.{N}.attn_norm.weight", .slots = {S::ffn_norm}, .when = two_norms},
    {.pattern = "blk.{N}.attn_norm.bias", .slots = {S::ffn_norm_bias}, .when = two_norms},
    {"blk.{N}.attn_qkv.weight", kQkv},
    {"blk.{N}.attn_qkv.bias", kQkvBias},
    {"blk.{N}.attn_output.weight", {S::attn_out}},
    {"blk.{N}.attn_output.bias", {S::attn_out_bias}},
    {"blk.{N}.ffn_up.weight", {S::ffn_up}},
    {"blk.{N}.ffn_up.bias", {S::ffn_up_bias}},
    {"blk.{N}.ffn_down.weight", {S::ffn_down}},
    {"blk.{N}.ffn_down.bias", {S::ffn_down_bias}},
    {"output_norm.weight", {S::output_norm}},
    {"output_norm.bias", {S::output_norm_bias}},
    {"output.weight", {S::output}},
};

// ---- GPT-NeoX / Pythia (GPTNeoXForCausalLM), after the "gpt_neox." prefix ----
constexpr R kGptNeoxHf[] = {
    {"embed_in.weight", {S::token_embd}},
    {"layers.{N}.input_layernorm.weight", {S::attn_norm}},
    {"layers.{N}.input_layernorm.bias", {S::attn_norm_bias}},
    {.pattern = "layers.{N}.attention.query_key_value.weight", .slots = kQkv, .split = Split::per_head},
    {.pattern = "layers.{N}.attention.query_key_value.bias", .slots = kQkvBias, .split = Split::per_head},
    {"layers.{N}.attention.dense.weight", {S::attn_out}},
    {"layers.{N}.attention.dense.bias", {S::attn_out_bias}},
    {"layers.{N}.post_attention_layernorm.weight", {S::ffn_norm}},
    {"layers.{N}.post_attention_layernorm.bias", {S::ffn_norm_bias}},
    {"layers.{N}.mlp.dense_h_to_4h.weight", {S::ffn_up}},
    {"layers.{N}.mlp.dense_h_to_4h.bias", {S::ffn_up_bias}},
    {"layers.{N}.mlp.dense_4h_to_h.weight", {S::ffn_down}},
    {"layers.{N}.mlp.dense_4h_to_h.bias", {S::ffn_down_bias}},
    {"final_layer_norm.weight", {S::output_norm}},
    {"final_layer_norm.bias", {S::output_norm_bias}},
    {.pattern = "embed_out.weight", .slots = {S::output}, .at_root = true},
};

// ---- Gemma and Gemma 2, after the "model." prefix: norms are stored as w, scaling
// by 1 + w; GGUF stores 1 + w (llama.cpp's converter adds the one). ----
constexpr R kGemmaHf[] = {
    {"embed_tokens.weight", {S::token_embd}},
    {.pattern = "layers.{N}.input_layernorm.weight", .slots = {S::attn_norm}, .transform = X::add_one},
    {"layers.{N}.self_attn.q_proj.weight", {S::attn_q}},
    {"layers.{N}.self_attn.k_proj.weight", {S::attn_k}},
    {"layers.{N}.self_attn.v_proj.weight", {S::attn_v}},
    {"layers.{N}.self_attn.o_proj.weight", {S::attn_out}},
    {.pattern = "layers.{N}.post_attention_layernorm.weight", .slots = {S::ffn_norm}, .transform = X::add_one},
    {"layers.{N}.mlp.gate_proj.weight", {S::ffn_gate}},
    {"layers.{N}.mlp.up_proj.weight", {S::ffn_up}},
    {"layers.{N}.mlp.down_proj.weight", {S::ffn_down}},
    {.pattern = "norm.weight", .slots = {S::output_norm}, .transform = X::add_one},
    {.pattern = "lm_head.weight", .slots = {S::output}, .at_root = true},
};

// Gemma 2's post_attention_layernorm normalises the attention output; the FFN's input
// norm is pre_feedforward_layernorm.
constexpr R kGemma2Hf[] = {
    {"embed_tokens.weight", {S::token_embd}},
    {.pattern = "layers.{N}.input_layernorm.weight", .slots = {S::attn_norm}, .transform = X::add_one},
    {"layers.{N}.self_attn.q_proj.weight", {S::attn_q}},
    {"layers.{N}.self_attn.k_proj.weight", {S::attn_k}},
    {"layers.{N}.self_attn.v_proj.weight", {S::attn_v}},
    {"layers.{N}.self_attn.o_proj.weight", {S::attn_out}},
    {.pattern = "layers.{N}.post_attention_layernorm.weight", .slots = {S::attn_post_norm}, .transform = X::add_one},
    {.pattern = "layers.{N}.pre_feedforward_layernorm.weight", .slots = {S::ffn_norm}, .transform = X::add_one},
    {"layers.{N}.mlp.gate_proj.weight", {S::ffn_gate}},
    {"layers.{N}.mlp.up_proj.weight", {S::ffn_up}},
    {"layers.{N}.mlp.down_proj.weight", {S::ffn_down}},
    {.pattern = "layers.{N}.post_feedforward_layernorm.weight", .slots = {S::ffn_post_norm}, .transform = X::add_one},
    {.pattern = "norm.weight", .slots = {S::output_norm}, .transform = X::add_one},
    {.pattern = "lm_head.weight", .slots = {S::output}, .at_root = true},
};

constexpr R kGemma2Gguf[] = {
    {"token_embd.weight", {S::token_embd}},
    {"blk.{N}.attn_norm.weight", {S::attn_norm}},
    {"blk.{N}.attn_q.weight", {S::attn_q}},
    {"blk.{N}.attn_k.weight", {S::attn_k}},
    {"blk.{N}.attn_v.weight", {S::attn_v}},
    {"blk.{N}.attn_output.weight", {S::attn_out}},
    {"blk.{N}.post_attention_norm.weight", {S::attn_post_norm}},
    {"blk.{N}.ffn_norm.weight", {S::ffn_norm}},
    {"blk.{N}.ffn_gate.weight", {S::ffn_gate}},
    {"blk.{N}.ffn_up.weight", {S::ffn_up}},
    {"blk.{N}.ffn_down.weight", {S::ffn_down}},
    {"blk.{N}.post_ffw_norm.weight", {S::ffn_post_norm}},
    {"output_norm.weight", {S::output_norm}},
    {"output.weight", {S::output}},
};

// llama2.c checkpoints, named by their reader (format/llama2c.cpp) with the names of
// Meta's and llama2.c's model.py. q/k rows are in Meta's interleaved-RoPE order.
constexpr R kLlama2c[] = {
    {"tok_embeddings.weight", {S::token_embd}},
    {"layers.{N}.attention_norm.weight", {S::attn_norm}},
    {"layers.{N}.attention.wq.weight", {S::attn_q}},
    {"layers.{N}.attention.wk.weight", {S::attn_k}},
    {"layers.{N}.attention.wv.weight", {S::attn_v}},
    {"layers.{N}.attention.wo.weight", {S::attn_out}},
    {"layers.{N}.ffn_norm.weight", {S::ffn_norm}},
    {"layers.{N}.feed_forward.w1.weight", {S::ffn_gate}},
    {"layers.{N}.feed_forward.w2.weight", {S::ffn_down}},
    {"layers.{N}.feed_forward.w3.weight", {S::ffn_up}},
    {"norm.weight", {S::output_norm}},
    {"output.weight", {S::output}},
};

// Buffers that some checkpoints carry but that are not weights.
// (llama2.c's legacy files carry RoPE tables, which loom computes from rope_theta.)
constexpr std::string_view kLlamaIgnored[] = {"layers.{N}.self_attn.rotary_emb.inv_freq", "freq_cis_real",
                                              "freq_cis_imag"};
constexpr std::string_view kGpt2Ignored[] = {"h.{N}.attn.bias", "h.{N}.attn.masked_bias"};
constexpr std::string_view kFalconIgnored[] = {"h.{N}.self_attention.rotary_emb.inv_freq"};
constexpr std::string_view kGptNeoxIgnored[] = {"layers.{N}.attention.bias", "layers.{N}.attention.masked_bias",
                                                "layers.{N}.attention.rotary_emb.inv_freq"};

constexpr ConfigKeys kGpt2Keys{
    .vocab_size = {"vocab_size"},
    .hidden_size = {"n_embd", "hidden_size"},
    .intermediate_size = {"n_inner", "intermediate_size"},
    .n_layers = {"n_layer", "num_hidden_layers"},
    .n_heads = {"n_head", "num_attention_heads"},
    .n_kv_heads = {"n_head_kv", "num_key_value_heads"},
    .max_positions = {"n_positions", "n_ctx", "max_position_embeddings"},
    .norm_eps = {"layer_norm_epsilon", "layer_norm_eps"},
    .activation = {"activation_function"},
};

constexpr ConfigKeys kFalconKeys{
    .intermediate_size = {"ffn_hidden_size"},
    .n_layers = {"num_hidden_layers", "n_layer"},
    .n_heads = {"num_attention_heads", "n_head"},
    .n_kv_heads = {"num_kv_heads", "n_head_kv"},
    .norm_eps = {"layer_norm_epsilon"},
    .activation = {"activation"},
    .parallel_residual = {"parallel_attn"},
};

constexpr ConfigKeys kGptNeoxKeys{
    .norm_eps = {"layer_norm_eps"},
    .rope_theta = {"rotary_emb_base", "rope_theta"},
    .partial_rotary = {"rotary_pct", "partial_rotary_factor"},
    .activation = {"hidden_act"},
    .parallel_residual = {"use_parallel_residual"},
};

// transformers' Gemma reads hidden_activation and, when it is absent, uses the tanh
// GELU whatever hidden_act says (old Gemma configs say "gelu" there).
constexpr ConfigKeys kGemmaKeys{.activation = {"hidden_activation"}};

// Falcon: multi_query means one KV head (no num_kv_heads key then), the 40B-style
// layout has a norm each for attention and MLP, `bias` covers every linear layer.
void falcon_hf(const ConfigReader& cfg, ModelConfig& c) {
  const bool new_decoder = cfg.boolean("new_decoder_architecture").value_or(false);
  // transformers: num_kv_heads counts only in the 40B-style layout; otherwise one KV head
  // (multi_query, the default) or one per head.
  if (!new_decoder) c.n_kv_heads = cfg.boolean("multi_query").value_or(true) ? 1 : c.n_heads;
  c.shared_attn_ffn_norm = !new_decoder;
  if (new_decoder) c.parallel_residual = true;  // the 40B-style block is always parallel
  if (!c.parallel_residual && c.shared_attn_ffn_norm) {
    // Sequential Falcon (parallel_attn: false) has its own post_attention_layernorm.
    cfg.fail("config field 'parallel_attn' is false; loom supports Falcon's parallel blocks only");
  }
  if (cfg.boolean("alibi").value_or(false)) cfg.fail("config field 'alibi' is true; ALiBi Falcon is not supported");
  if (cfg.boolean("apply_residual_connection_post_layernorm").value_or(false)) {
    cfg.fail("config field 'apply_residual_connection_post_layernorm' is true; not supported");
  }
  const bool bias = cfg.boolean("bias").value_or(false);
  c.qkv_bias = c.attn_out_bias = c.ffn_bias = bias;
}

void falcon_hf_write(const ModelConfig& c, JsonWriter& w) {
  const bool new_decoder = !c.shared_attn_ffn_norm;
  w.field("new_decoder_architecture", new_decoder);
  if (new_decoder) {
    w.field("num_kv_heads", c.n_kv_heads);
  } else {
    w.field("multi_query", c.n_kv_heads == 1);
  }
  w.field("bias", c.qkv_bias);
}

// Falcon in GGUF: the 40B-style layout is told by its second norm tensor.
void falcon_gguf(const ConfigReader& cfg, ModelConfig& c) {
  c.shared_attn_ffn_norm = !cfg.has_tensor("blk.0.attn_norm_2.weight");
  c.qkv_bias = cfg.has_tensor("blk.0.attn_qkv.bias");
  c.attn_out_bias = cfg.has_tensor("blk.0.attn_output.bias");
  c.ffn_bias = cfg.has_tensor("blk.0.ffn_up.bias");
}

void gptneox_gguf(const ConfigReader& cfg, ModelConfig& c) {
  c.parallel_residual = cfg.boolean("use_parallel_residual").value_or(true);
}

// Gemma 2: query_pre_attn_scalar, and a window (4096 unless given) on its even layers.
void gemma2_hf(const ConfigReader& cfg, ModelConfig& c) {
  c.query_pre_attn_scalar = cfg.number("query_pre_attn_scalar").value_or(static_cast<double>(c.head_dim));
  c.sliding_window = cfg.integer("sliding_window").value_or(4096);
}

// GGUF has no key for the query scale: llama.cpp (c392e50) derives it from the model
// size, hidden/heads for the 27B shape (46 layers) and head_dim otherwise.
void gemma2_gguf(const ConfigReader&, ModelConfig& c) {
  c.query_pre_attn_scalar = c.n_layers == 46 ? static_cast<double>(c.hidden_size / c.n_heads)
                                             : static_cast<double>(c.head_dim);
}

using N = NormKind;
using F = FfnKind;
using A = Activation;
using P = PositionKind;

const ArchitectureSpec kArchitectures[] = {
    {.name = "llama", .hf_classes = {"LlamaForCausalLM"}, .hf_model_types = {"llama"}, .gguf_names = {"llama"},
     .gguf_rope_interleaved = true, .hf_bias_keys = true, .prefixes = {"model."}, .hf_names = kLlamaHf, .gguf_names_map = kGgufCommon,
     .ignored = kLlamaIgnored, .llama2c_names = kLlama2c},
    {.name = "mistral", .hf_classes = {"MistralForCausalLM"}, .hf_model_types = {"mistral"},
     .honours_sliding_window = true, .gguf_rope_interleaved = true, .hf_bias_keys = true, .prefixes = {"model."},
     .hf_names = kLlamaHf,
     .gguf_names_map = kGgufCommon, .ignored = kLlamaIgnored},
    {.name = "qwen2", .hf_classes = {"Qwen2ForCausalLM"}, .hf_model_types = {"qwen2"}, .gguf_names = {"qwen2"},
     .qkv_bias = true, .honours_sliding_window = true, .prefixes = {"model."}, .hf_names = kLlamaHf,
     .gguf_names_map = kGgufCommon, .ignored = kLlamaIgnored},
    {.name = "phi3", .hf_classes = {"Phi3ForCausalLM"}, .hf_model_types = {"phi3"}, .gguf_names = {"phi3"},
     .honours_sliding_window = true, .prefixes = {"model."}, .hf_names = kPhi3Hf, .gguf_names_map = kPhi3Gguf,
     .ignored = kLlamaIgnored},
    {.name = "gpt2", .hf_classes = {"GPT2LMHeadModel", "GPT2Model"}, .hf_model_types = {"gpt2"},
     .gguf_names = {"gpt2"}, .norm = N::layer_norm, .ffn = F::plain, .activation = A::gelu_tanh,
     .position = P::learned, .qkv_bias = true, .attn_out_bias = true, .ffn_bias = true, .norm_bias = true,
     .default_tied = true, .intermediate_multiple = 4, .hf_keys = kGpt2Keys, .prefixes = {"transformer."},
     .hf_names = kGpt2Hf, .gguf_names_map = kFusedQkvGguf, .ignored = kGpt2Ignored},
    {.name = "falcon", .hf_classes = {"FalconForCausalLM", "RWForCausalLM"}, .hf_model_types = {"falcon", "RefinedWeb", "RefinedWebModel"},
     .gguf_names = {"falcon"}, .norm = N::layer_norm, .ffn = F::plain, .activation = A::gelu_erf,
     .norm_bias = true, .parallel_residual = true, .default_tied = true, .intermediate_multiple = 4,
     .default_max_positions = 2048,  // FalconConfig's default; falcon-7b's config.json has no such key
     .hf_keys = kFalconKeys, .hf_config = falcon_hf, .gguf_config = falcon_gguf,
     .hf_config_write = falcon_hf_write, .prefixes = {"transformer."},
     .hf_names = kFalconHf, .gguf_names_map = kFalconGguf, .ignored = kFalconIgnored},
    {.name = "gptneox", .hf_classes = {"GPTNeoXForCausalLM"}, .hf_model_types = {"gpt_neox"},
     .gguf_names = {"gptneox"}, .norm = N::layer_norm, .ffn = F::plain, .activation = A::gelu_erf,
     .qkv_bias = true, .attn_out_bias = true, .ffn_bias = true, .norm_bias = true, .parallel_residual = true,
     .hf_keys = kGptNeoxKeys, .gguf_config = gptneox_gguf, .prefixes = {"gpt_neox."}, .hf_names = kGptNeoxHf,
     .gguf_names_map = kFusedQkvGguf, .ignored = kGptNeoxIgnored},
    {.name = "gemma", .hf_classes = {"GemmaForCausalLM"}, .hf_model_types = {"gemma"}, .gguf_names = {"gemma"},
     .activation = A::gelu_tanh, .embedding_scale = EmbeddingScale::sqrt_hidden, .default_tied = true,
     .hf_keys = kGemmaKeys, .prefixes = {"model."}, .hf_names = kGemmaHf, .gguf_names_map = kGgufCommon,
     .ignored = kLlamaIgnored},
    {.name = "gemma2", .hf_classes = {"Gemma2ForCausalLM"}, .hf_model_types = {"gemma2"}, .gguf_names = {"gemma2"},
     .activation = A::gelu_tanh, .post_norms = true, .embedding_scale = EmbeddingScale::sqrt_hidden,
     .sliding_window_period = 2, .default_tied = true, .hf_keys = kGemmaKeys, .hf_config = gemma2_hf,
     .gguf_config = gemma2_gguf, .prefixes = {"model."}, .hf_names = kGemma2Hf, .gguf_names_map = kGemma2Gguf,
     .ignored = kLlamaIgnored},
};

// Static checks of every row, at compile time where the rows are constexpr.
consteval bool rules_are_consistent(std::span<const NameRule> rules) {
  for (const auto& r : rules) {
    const size_t n = slot_count(r);
    if (n == 0 || r.pattern.empty()) return false;
    for (size_t i = n; i < r.slots.size(); ++i) {
      if (r.slots[i] != Slot::none) return false;  // targets are packed at the front
    }
    if (r.split != Split::concat && n != 3) return false;  // per-head splits are q|k|v
    if (r.split != Split::concat && r.transform == Transform::transpose) return false;
  }
  return true;
}
static_assert(rules_are_consistent(kLlamaHf) && rules_are_consistent(kGgufCommon) &&
              rules_are_consistent(kFusedQkvGguf) && rules_are_consistent(kPhi3Gguf) &&
              rules_are_consistent(kPhi3Hf) && rules_are_consistent(kGpt2Hf) && rules_are_consistent(kFalconHf) &&
              rules_are_consistent(kFalconGguf) && rules_are_consistent(kGptNeoxHf) &&
              rules_are_consistent(kGemmaHf) && rules_are_consistent(kGemma2Hf) &&
              rules_are_consistent(kGemma2Gguf) && rules_are_consistent(kLlama2c),
              "a name rule has no slot, unpacked slots, or a split that is not q|k|v");

constexpr ActivationName kActivationNames[] = {
    {"silu", A::silu},
    {"swish", A::silu},
    {"gelu_pytorch_tanh", A::gelu_tanh},
    {"gelu_new", A::gelu_tanh},
    {"gelu_fast", A::gelu_tanh},
    {"gelu", A::gelu_erf},
    {"gelu_python", A::gelu_erf},
};

// loom packs name tensors by the slots' own full names ("token_embd", "blk.3.attn_q"):
// one identity rule per slot, generated from the slot table.
std::span<const NameRule> pack_names() {
  struct Rules {
    std::vector<std::string> patterns;
    std::vector<NameRule> rules;
  };
  static const Rules kRules = [] {
    Rules r;
    const auto all = slots::all_slots();
    r.patterns.reserve(all.size());
    for (const auto& s : all) r.patterns.push_back((s.per_layer ? "blk.{N}." : "") + std::string(s.name));
    for (size_t i = 0; i < all.size(); ++i) r.rules.push_back(NameRule{r.patterns[i], {all[i].id}});
    return r;
  }();
  return kRules.rules;
}

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

std::string supported_names() {
  std::string out;
  for (const auto& a : kArchitectures) out += (out.empty() ? "" : ", ") + std::string(a.name);
  return out;
}

std::string supported_gguf_names() {
  std::string out;
  for (const auto& a : kArchitectures) {
    for (auto g : a.gguf_names) {
      if (!g.empty()) out += (out.empty() ? "" : ", ") + std::string(g);
    }
  }
  return out;
}

std::span<const NameRule> names_for(const ArchitectureSpec& spec, FormatKind format) {
  switch (format) {
    case FormatKind::gguf: return spec.gguf_names_map;
    case FormatKind::llama2c: return spec.llama2c_names;
    case FormatKind::pack: return pack_names();
    case FormatKind::safetensors:
    case FormatKind::torch:
    case FormatKind::npy: return spec.hf_names;
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

std::span<const ActivationName> activation_names() noexcept { return kActivationNames; }

Activation activation_from_name(std::string_view name, const std::string& file) {
  for (const auto& a : kActivationNames) {
    if (a.name == name) return a.activation;
  }
  std::string known;
  for (const auto& a : kActivationNames) known += (known.empty() ? "" : ", ") + std::string(a.name);
  throw Error(ErrorCode::unsupported, "activation '" + std::string(name) + "' is not supported (known: " + known + ")",
              {.file = file});
}

std::string_view activation_name(Activation activation) noexcept {
  switch (activation) {
    case Activation::silu: return "silu";
    case Activation::gelu_tanh: return "gelu_new";
    case Activation::gelu_erf: return "gelu";
  }
  return "silu";
}

RowRuns row_runs(const NameRule& rule, size_t index, const ModelConfig& c) {
  const auto rows_of = [&](size_t i) { return slots::slot(rule.slots[i]).shape(c)[0]; };
  RowRuns r;
  switch (rule.split) {
    case Split::concat: {
      for (size_t i = 0; i < index; ++i) r.first_row += rows_of(i);
      r.run_rows = rows_of(index);
      r.stride = r.run_rows;
      r.runs = 1;
      return r;
    }
    case Split::per_head:
    case Split::per_kv_group: {
      const int64_t groups = rule.split == Split::per_head ? c.n_heads : c.n_kv_heads;
      if (rule.split == Split::per_head && c.n_kv_heads != c.n_heads) {
        throw Error(ErrorCode::shape_mismatch, "a per-head q|k|v tensor needs as many KV heads as heads (" +
                                                   std::to_string(c.n_kv_heads) + " vs " + std::to_string(c.n_heads) + ")");
      }
      const int64_t q_per_group = c.n_heads / groups;
      const int64_t hd = c.head_dim;
      r.stride = (q_per_group + 2) * hd;
      r.runs = groups;
      r.first_row = index == 0 ? 0 : (q_per_group + static_cast<int64_t>(index) - 1) * hd;
      r.run_rows = index == 0 ? q_per_group * hd : hd;
      return r;
    }
  }
  return r;
}

}  // namespace loom::arch
