// Deterministic tiny transformer models for tests, and a naive reference forward pass
// (plain loops, double precision, no KV cache: the whole sequence is recomputed).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "loom/config.hpp"
#include "loom/model.hpp"
#include "loom/weights.hpp"

namespace loom::test {

// A small Llama-shaped config: hidden 64, 2 layers, 4 heads / 2 kv heads, head_dim 16,
// ffn 96, vocab 128, RMSNorm, SwiGLU, RoPE.
ModelConfig tiny_llama_config();
// The tiny shape as GPT-2 builds it: LayerNorm with biases, a plain tanh-GELU FFN 4x
// wide, learned positions (max_positions), biases everywhere, MHA, tied output.
ModelConfig tiny_gpt2_config(int64_t max_positions = 64);

// tiny_llama_config() widened to hidden 512, ffn 1536, 8 / 4 heads of 64 and 4 layers:
// about 25 MB of f16 matrices, enough for a test to tell a file's matrices from its header
// and norms in the pages a process holds.
ModelConfig mid_llama_config();

// Random weights for `config` (normal(0, std) matrices, 1 + normal(0, 0.1) norms,
// normal(0, 0.05) biases), matrices stored as `matrix_dtype`. Deterministic in `seed`.
ModelWeights random_weights(const ModelConfig& config, uint32_t seed, DType matrix_dtype = DType::f32,
                            float std = 0.08f);

std::shared_ptr<const Model> make_model(const ModelConfig& config, ModelWeights weights);

// Logits for every position of `tokens` ([n][vocab]), computed naively in double from
// the HF-convention weights (rope_interleaved must be false).
std::vector<std::vector<double>> reference_logits(const ModelConfig& config,
                                                  const ModelWeights& weights,
                                                  std::span<const int32_t> tokens);

// Final-norm hidden states for every position ([n][hidden]).
std::vector<std::vector<double>> reference_hidden(const ModelConfig& config,
                                                  const ModelWeights& weights,
                                                  std::span<const int32_t> tokens);

// GGUF-style (interleaved RoPE) q/k row order: rows of each head reordered so that
// rotate-half pairs (i, i + d/2) become adjacent pairs (2i, 2i + 1).
Tensor permute_rows_for_interleaved_rope(const Tensor& weight, int64_t n_heads, int64_t head_dim);

double max_abs_diff(std::span<const float> a, const std::vector<double>& b);

}  // namespace loom::test
