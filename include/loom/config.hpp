// loom::ModelConfig — the hyper-parameters of a transformer, whatever file they came
// from (Hugging Face config.json or GGUF metadata; see loom/model_loader.hpp).
//
// The forward pass is assembled from the small choices recorded here (norm kind, FFN
// kind, position encoding, which projections carry biases, sliding window), so a new
// model family is a new table entry that fills these fields, not a new code path.
// A plain value type.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace loom {

enum class NormKind : uint8_t { rms_norm, layer_norm };
// gated: down(act(gate(x)) * up(x)) (SwiGLU with silu, GeGLU with a GELU);
// plain: down(act(up(x) + b) + b). swiglu and gelu_mlp are the older names.
enum class FfnKind : uint8_t { gated = 0, plain = 1, swiglu = gated, gelu_mlp = plain };
// The FFN's activation, each the function its Hugging Face name really names.
enum class Activation : uint8_t {
  silu,       // x * sigmoid(x)                         "silu", "swish"
  gelu_tanh,  // 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3)))  "gelu_new", "gelu_pytorch_tanh"
  gelu_erf,   // 0.5x(1 + erf(x / sqrt(2)))              "gelu" (PyTorch's exact GELU)
};
enum class PositionKind : uint8_t { rope, learned };
enum class RopeScalingKind : uint8_t { none, linear, llama3, longrope };

struct RopeScaling {
  RopeScalingKind kind = RopeScalingKind::none;
  double factor = 1.0;                // linear, llama3
  double low_freq_factor = 1.0;       // llama3
  double high_freq_factor = 4.0;      // llama3
  int64_t original_max_positions = 0; // llama3, longrope
  std::vector<double> short_factor;   // longrope: per-frequency divisors, rotary_dims/2 each
  std::vector<double> long_factor;
};

struct ModelConfig {
  std::string architecture;  // key of the architecture table (loom's `loom info --architectures`)
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_positions = 0;  // context length the model was trained for
  double norm_eps = 1e-5;
  NormKind norm = NormKind::rms_norm;
  FfnKind ffn = FfnKind::swiglu;
  Activation activation = Activation::silu;
  PositionKind position = PositionKind::rope;
  double rope_theta = 10000.0;
  int64_t rope_dims = 0;  // rotated dimensions per head (== head_dim unless partial rotary)
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;       // biases on the q, k, v projections
  bool attn_out_bias = false;  // bias on the attention output projection
  bool ffn_bias = false;       // biases on the FFN projections
  bool norm_bias = false;      // LayerNorm has a bias
  int64_t sliding_window = 0;  // 0: full causal attention; W: query i sees keys i-W+1..i
  // Which layers the window applies to: layer l slides when l % period == 0 (1: every
  // layer; Gemma 2: 2, its even layers slide and the odd ones attend globally).
  int64_t sliding_window_period = 1;

  // Forward-pass variants beyond the Llama block (the architecture table sets them):
  // attention and FFN both read the layer input and are added to it together,
  // x + attn(n1(x)) + ffn(n2(x)) (GPT-NeoX, Falcon), instead of one after the other.
  bool parallel_residual = false;
  // The FFN reads the attention's norm output (Falcon-7B's one input_layernorm): there
  // is no ffn_norm. Only with parallel_residual.
  bool shared_attn_ffn_norm = false;
  // Norms on the attention and FFN outputs before they join the residual (Gemma 2's
  // post_attention_layernorm and post_feedforward_layernorm).
  bool post_norms = false;
  double embedding_scale = 1.0;      // token embeddings are multiplied by it (Gemma: sqrt(hidden))
  double query_pre_attn_scalar = 0;  // attention scale 1/sqrt(this); 0: 1/sqrt(head_dim)
  double attn_logit_softcap = 0;     // scores -> cap * tanh(scores / cap); 0: none
  double final_logit_softcap = 0;    // logits -> cap * tanh(logits / cap); 0: none
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;
  std::string torch_dtype;  // as declared by the source ("float32", "bfloat16", ...)

  int64_t q_dim() const noexcept { return n_heads * head_dim; }
  int64_t kv_dim() const noexcept { return n_kv_heads * head_dim; }
  // Whether layer `layer` attends through the sliding window.
  bool layer_slides(int64_t layer) const noexcept {
    return sliding_window > 0 && (sliding_window_period <= 1 || layer % sliding_window_period == 0);
  }
  // Throws loom::Error(invalid_argument) naming the first field that is missing,
  // out of range or inconsistent with the others.
  void validate() const;
};

}  // namespace loom
