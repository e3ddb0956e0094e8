// Test helper: two models hold the same weights, compared as rows (packed tensors are
// unpacked first), byte for byte, every matrix and embedding, naming the first that
// differs. Header-only: it reports through Catch's assertions.
#pragma once

#include <catch2/catch.hpp>

#include <cstring>

#include "loom/model.hpp"
#include "model/weight_slots.hpp"
#include "tensor/packing.hpp"

namespace loom::test {

inline void check_same_rows(const Model& a, const Model& b) {
  for (const auto& slot : slots::all_slots()) {
    if (slots::is_vector(slot.role) || !slot.needed(a.config())) continue;
    for (int64_t l = 0; l < (slot.per_layer ? a.config().n_layers : 1); ++l) {
      const Tensor x = unpack(slots::tensor_of(a.weights(), slot, l));
      const Tensor y = unpack(slots::tensor_of(b.weights(), slot, l));
      INFO(slots::full_name(slot, l));
      REQUIRE(x.dtype() == y.dtype());
      REQUIRE(x.nbytes() == y.nbytes());
      CHECK(std::memcmp(x.raw_data(), y.raw_data(), static_cast<size_t>(x.nbytes())) == 0);
    }
  }
}

}  // namespace loom::test
