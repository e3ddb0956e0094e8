#include "model/rope_order.hpp"

#include <cstring>

#include "loom/error.hpp"

namespace loom::rope_order {

namespace {

Tensor permute(const Tensor& t, int64_t n_heads, int64_t head_dim, bool to_interleaved) {
  const int64_t rows = t.shape()[0];
  if (rows != n_heads * head_dim || head_dim % 2 != 0) {
    throw Error(ErrorCode::internal, "cannot reorder " + t.shape().to_string() + " as " +
                                         std::to_string(n_heads) + " heads of " + std::to_string(head_dim));
  }
  const int64_t cols = t.shape().rank() == 1 ? 1 : t.numel() / rows;
  const int64_t row_bytes = dtype_bytes(t.dtype(), cols, t.shape().rank() == 1 ? 1 : cols);
  Tensor out = Tensor::empty(t.shape(), t.dtype());
  const auto* src = static_cast<const std::byte*>(t.raw_data());
  auto* dst = static_cast<std::byte*>(out.mutable_raw_data());
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t j = 0; j < head_dim; ++j) {
      // Interleaved row 2i (2i+1) holds half-order row i (i + half).
      const int64_t interleaved = h * head_dim + j;
      const int64_t halfrow = h * head_dim + (j % 2 == 0 ? j / 2 : j / 2 + half);
      const int64_t from = to_interleaved ? halfrow : interleaved;
      const int64_t to = to_interleaved ? interleaved : halfrow;
      std::memcpy(dst + to * row_bytes, src + from * row_bytes, static_cast<size_t>(row_bytes));
    }
  }
  return out;
}

}  // namespace

Tensor half_to_interleaved(const Tensor& t, int64_t n_heads, int64_t head_dim) {
  return permute(t, n_heads, head_dim, true);
}

Tensor interleaved_to_half(const Tensor& t, int64_t n_heads, int64_t head_dim) {
  return permute(t, n_heads, head_dim, false);
}

}  // namespace loom::rope_order
