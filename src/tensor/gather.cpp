#include "tensor/gather.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "loom/error.hpp"
#include "tensor/packing.hpp"

namespace loom {

void gather_into_one_buffer(std::span<Tensor* const> tensors, uint64_t align) {
  const uint64_t kAlign = std::max<uint64_t>(align, 1);
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

Tensor stacked_rows_view(std::span<const Tensor* const> parts) {
  if (parts.empty()) return {};
  const Tensor& first = *parts.front();
  int64_t rows = 0;
  uint64_t next = first.byte_offset();
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor& t = *parts[i];
    if (!t.defined() || t.shape().rank() != 2 || !t.is_contiguous() || t.storage() != first.storage() ||
        t.dtype() != first.dtype() || t.layout() != first.layout() || t.packing() != first.packing() ||
        t.shape()[1] != first.shape()[1] || t.byte_offset() != next) {
      return {};
    }
    const int64_t panel_rows = packing_info(t.packing()).panel_rows;
    if (i + 1 < parts.size() && t.shape()[0] % panel_rows != 0) return {};
    rows += t.shape()[0];
    next += static_cast<uint64_t>(t.nbytes());
  }
  const Shape shape{rows, first.shape()[1]};
  Tensor whole = first.packing() != Packing::none
                     ? Tensor::packed(first.storage(), first.byte_offset(), shape, first.dtype(), first.packing())
                     : Tensor(first.storage(), first.byte_offset(), shape, first.dtype(), first.layout());
  return static_cast<uint64_t>(whole.nbytes()) == next - first.byte_offset() ? whole : Tensor{};
}

}  // namespace loom
