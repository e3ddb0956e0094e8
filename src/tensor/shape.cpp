#include "loom/shape.hpp"

#include <algorithm>

#include "common/checked.hpp"
#include "loom/error.hpp"

namespace loom {

Shape::Shape(std::initializer_list<int64_t> dims)
    : Shape(std::span<const int64_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const int64_t> dims) {
  if (dims.size() > static_cast<size_t>(kMaxRank)) {
    throw Error(ErrorCode::invalid_argument,
                "rank " + std::to_string(dims.size()) + " exceeds the maximum of 8");
  }
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0) {
      throw Error(ErrorCode::invalid_argument,
                  "negative extent " + std::to_string(dims[i]) + " in dimension " +
                      std::to_string(i));
    }
    dims_[i] = dims[i];
  }
  rank_ = static_cast<int>(dims.size());
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n = checked_mul(n, dims_[static_cast<size_t>(i)]);
  return n;
}

int64_t Shape::row_count() const {
  int64_t n = 1;
  for (int i = 0; i + 1 < rank_; ++i) n = checked_mul(n, dims_[static_cast<size_t>(i)]);
  return n;
}

std::string Shape::to_string() const {
  std::string out = "[";
  for (int i = 0; i < rank_; ++i) {
    if (i) out += ", ";
    out += std::to_string(dims_[static_cast<size_t>(i)]);
  }
  return out + "]";
}

bool operator==(const Shape& a, const Shape& b) noexcept {
  return a.rank_ == b.rank_ && std::equal(a.dims_.begin(), a.dims_.begin() + a.rank_,
                                          b.dims_.begin());
}

bool operator==(const Strides& a, const Strides& b) noexcept {
  return a.rank == b.rank &&
         std::equal(a.values.begin(), a.values.begin() + a.rank, b.values.begin());
}

Strides contiguous_strides(const Shape& shape) {
  Strides s;
  s.rank = shape.rank();
  int64_t step = 1;
  for (int i = shape.rank() - 1; i >= 0; --i) {
    s.values[static_cast<size_t>(i)] = step;
    step = checked_mul(step, std::max<int64_t>(shape[i], 1));
  }
  return s;
}

}  // namespace loom
