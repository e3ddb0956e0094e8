#include "tensor/gather.hpp"

#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "loom/error.hpp"

namespace loom {

void gather_into_one_buffer(std::span<Tensor* const> tensors) {
  constexpr uint64_t kAlign = 64;
  // One copy per distinct (bytes, size): a tied tensor listed twice stays shared.
  std::map<std::pair<const void*, int64_t>, uint64_t> offsets;
  uint64_t total = 0;
  for (const Tensor* t : tensors) {
    if (t == nullptr || !t->defined()) continue;
    if (!t->is_contiguous()) {
      throw Error(ErrorCode::internal, "cannot gather a non-contiguous tensor: " + t->describe());
    }
    const auto key = std::make_pair(t->raw_data(), t->nbytes());
    if (offsets.count(key) != 0) continue;
    offsets.emplace(key, total);
    total += (static_cast<uint64_t>(t->nbytes()) + kAlign - 1) / kAlign * kAlign;
  }
  if (offsets.empty()) return;
  auto storage = Storage::allocate(static_cast<size_t>(total), Device::cpu);
  auto* base = static_cast<std::byte*>(storage->mutable_data());
  for (const auto& [key, offset] : offsets) {
    std::memcpy(base + offset, key.first, static_cast<size_t>(key.second));
  }
  for (Tensor* t : tensors) {
    if (t == nullptr || !t->defined()) continue;
    const uint64_t offset = offsets.at(std::make_pair(t->raw_data(), t->nbytes()));
    *t = t->packing() != Packing::none
             ? Tensor::packed(storage, offset, t->shape(), t->dtype(), t->packing())
             : Tensor(storage, offset, t->shape(), t->dtype(), t->layout());
  }
}

}  // namespace loom
