#include "model/joined_products.hpp"

#include "tensor/gather.hpp"

namespace loom {

Tensor joined_view(const LayerWeights& layer, const JoinedProducts& group) {
  const auto parts = members_of(layer, group);
  return stacked_rows_view(std::span<const Tensor* const>(parts.data(), group.n_members));
}

const JoinedProducts* joined_group_of(slots::Slot slot, size_t* index) noexcept {
  for (const JoinedProducts& group : kJoinedProducts) {
    for (size_t i = 0; i < group.n_members; ++i) {
      if (group.members[i] != slot) continue;
      if (index != nullptr) *index = i;
      return &group;
    }
  }
  return nullptr;
}

}  // namespace loom
