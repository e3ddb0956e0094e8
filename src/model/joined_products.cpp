#include "model/joined_products.hpp"

#include "tensor/gather.hpp"

namespace loom {

Tensor joined_view(const LayerWeights& layer, const JoinedProducts& group) {
  std::array<const Tensor*, 3> parts{};
  for (size_t i = 0; i < group.n_members; ++i) parts[i] = &(layer.*group.members[i]);
  return stacked_rows_view(std::span<const Tensor* const>(parts.data(), group.n_members));
}

}  // namespace loom
