// loom::ModelWeights — the graph-level view of a model's weights: one named slot per
// tensor the forward pass reads, with the shape written beside it (rows = out features).
//
// Filled by the loader from the weight manifest (loom/manifest.hpp), or directly by a
// host or a test. Tensors are usually zero-copy views into mapped files; tied weights
// are the same Tensor (shared storage) in two slots. Immutable after load; readable
// from any thread.
#pragma once

#include <vector>

#include "loom/tensor.hpp"

namespace loom {

struct LayerWeights {
  Tensor attn_norm;      // [hidden]
  Tensor attn_norm_bias; // [hidden]           LayerNorm models
  Tensor attn_q;         // [n_heads*head_dim, hidden]
  Tensor attn_k;         // [n_kv_heads*head_dim, hidden]
  Tensor attn_v;         // [n_kv_heads*head_dim, hidden]
  Tensor attn_q_bias;    // [n_heads*head_dim]  optional
  Tensor attn_k_bias;    // [n_kv_heads*head_dim]
  Tensor attn_v_bias;    // [n_kv_heads*head_dim]
  Tensor attn_out;       // [hidden, n_heads*head_dim]
  Tensor attn_out_bias;  // [hidden]            optional
  Tensor attn_post_norm; // [hidden]            Gemma 2: norm of the attention output
  Tensor ffn_norm;       // [hidden]            absent when the FFN shares attn_norm (Falcon-7B)
  Tensor ffn_norm_bias;  // [hidden]
  Tensor ffn_gate;       // [ffn, hidden]       gated FFNs (SwiGLU, GeGLU) only
  Tensor ffn_up;         // [ffn, hidden]
  Tensor ffn_up_bias;    // [ffn]               optional
  Tensor ffn_down;       // [hidden, ffn]
  Tensor ffn_down_bias;  // [hidden]            optional
  Tensor ffn_post_norm;  // [hidden]            Gemma 2: norm of the FFN output
};

struct ModelWeights {
  Tensor token_embd;        // [vocab, hidden]
  Tensor position_embd;     // [max_positions, hidden]  learned positions only
  std::vector<LayerWeights> layers;
  Tensor output_norm;       // [hidden]
  Tensor output_norm_bias;  // [hidden]
  Tensor output;            // [vocab, hidden]; shares token_embd's storage when tied
  // True when q/k rows are in GGUF's interleaved-RoPE order (llama.cpp permutes them
  // on conversion): RoPE then rotates adjacent pairs instead of halves. Both orders
  // give identical attention scores, so the weights stay zero-copy.
  bool rope_interleaved = false;
};

}  // namespace loom
