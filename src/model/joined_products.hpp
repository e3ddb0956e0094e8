// Internal: the products of one layer that read the same input, so that where their
// matrices lie back to back in one buffer they run as one matrix (tensor/gather.hpp,
// stacked_rows_view): q, k and v read the attention's normed input, a gated FFN's gate
// and up the FFN's. One table, walked by the loader (which puts owned copies back to
// back and says so in the report) and by the forward pass (which multiplies the joined
// matrix and splits its output): docs/runtime.md, "Products of one input".
#pragma once

#include <array>
#include <span>
#include <string_view>

#include "loom/tensor.hpp"
#include "loom/weights.hpp"

namespace loom {

struct JoinedProducts {
  std::string_view what;  // the report's words: "q, k and v"
  std::array<Tensor LayerWeights::*, 3> members;
  size_t n_members;
};

enum class Joined : size_t { qkv = 0, gate_up = 1 };

inline constexpr std::array<JoinedProducts, 2> kJoinedProducts{{
    {"q, k and v", {&LayerWeights::attn_q, &LayerWeights::attn_k, &LayerWeights::attn_v}, 3},
    {"gate and up", {&LayerWeights::ffn_gate, &LayerWeights::ffn_up, nullptr}, 2},
}};

inline const JoinedProducts& joined_products(Joined which) { return kJoinedProducts[static_cast<size_t>(which)]; }

// The one matrix over `group`'s matrices of `layer` where they lie back to back in one
// buffer (alike, whole panels but the last), else an undefined tensor.
Tensor joined_view(const LayerWeights& layer, const JoinedProducts& group);

}  // namespace loom
