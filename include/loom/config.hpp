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
// swiglu: down(silu(gate(x)) * up(x)); gelu_mlp: down(gelu_tanh(up(x) + b) + b).
enum class FfnKind : uint8_t { swiglu, gelu_mlp };
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
  std::string architecture;  // key of the architecture table: llama, mistral, qwen2, gpt2, phi3
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
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;
  std::string torch_dtype;  // as declared by the source ("float32", "bfloat16", ...)

  int64_t q_dim() const noexcept { return n_heads * head_dim; }
  int64_t kv_dim() const noexcept { return n_kv_heads * head_dim; }
  // Throws loom::Error(invalid_argument) naming the first field that is missing,
  // out of range or inconsistent with the others.
  void validate() const;
};

}  // namespace loom
