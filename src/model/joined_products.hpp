// Internal: the products of one layer that read the same input, so that where their
// matrices lie back to back in one buffer they run as one matrix (tensor/gather.hpp,
// stacked_rows_view): q, k and v read the attention's normed input, a gated FFN's gate
// and up the FFN's. One table, in weight slots (model/weight_slots.hpp), walked by the
// loader (which packs or copies owned matrices back to back and says so in the report),
// by the forward pass (which multiplies the joined matrix and splits its output) and by
// the benchmarks: docs/runtime.md, "Products of one input".
#pragma once

#include <array>
#include <span>
#include <string_view>

#include "loom/tensor.hpp"
#include "loom/weights.hpp"
#include "model/weight_slots.hpp"

namespace loom {

struct JoinedProducts {
  std::string_view what;  // the report's words: "q, k and v"
  std::array<slots::Slot, 3> members;
  size_t n_members;
};

enum class Joined : size_t { qkv = 0, gate_up = 1 };

inline constexpr std::array<JoinedProducts, 2> kJoinedProducts{{
    {"q, k and v", {slots::Slot::attn_q, slots::Slot::attn_k, slots::Slot::attn_v}, 3},
    {"gate and up", {slots::Slot::ffn_gate, slots::Slot::ffn_up, slots::Slot::none}, 2},
}};

inline const JoinedProducts& joined_products(Joined which) { return kJoinedProducts[static_cast<size_t>(which)]; }

// `group`'s tensors of `layer` (a LayerWeights, const or not), in order: the first
// group.n_members entries.
template <class Layer>
auto members_of(Layer& layer, const JoinedProducts& group) {
  std::array<decltype(&layer.attn_q), 3> out{};
  for (size_t i = 0; i < group.n_members; ++i) out[i] = &(layer.*slots::slot(group.members[i]).layer_member);
  return out;
}

// The one matrix over `group`'s matrices of `layer` where they lie back to back in one
// buffer (alike, whole panels but the last), else an undefined tensor.
Tensor joined_view(const LayerWeights& layer, const JoinedProducts& group);

// The group `slot` is a member of, with its place there in *index; null when none.
const JoinedProducts* joined_group_of(slots::Slot slot, size_t* index) noexcept;

}  // namespace loom
