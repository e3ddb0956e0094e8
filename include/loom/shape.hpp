// loom::Shape and loom::Strides — the dimensions of a tensor, row-major (the last
// dimension varies fastest), rank 0..8, int64 extents. Element counts are
// overflow-checked: shapes come from untrusted file headers.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

namespace loom {

class Shape {
 public:
  static constexpr int kMaxRank = 8;

  Shape() = default;  // rank 0: a scalar of one element
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::span<const int64_t> dims);

  int rank() const noexcept { return rank_; }
  int64_t operator[](int axis) const noexcept { return dims_[static_cast<size_t>(axis)]; }
  std::span<const int64_t> dims() const noexcept {
    return {dims_.data(), static_cast<size_t>(rank_)};
  }
  // Product of all extents; throws loom::Error(invalid_argument) on overflow.
  int64_t numel() const;
  // Extent of the last dimension (1 for a scalar) and the product of the others.
  int64_t row_length() const noexcept { return rank_ == 0 ? 1 : dims_[rank_ - 1]; }
  int64_t row_count() const;

  std::string to_string() const;  // "[4096, 11008]"
  friend bool operator==(const Shape& a, const Shape& b) noexcept;

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

// Element strides (not bytes), one per dimension.
struct Strides {
  std::array<int64_t, Shape::kMaxRank> values{};
  int rank = 0;
  int64_t operator[](int axis) const noexcept { return values[static_cast<size_t>(axis)]; }
  friend bool operator==(const Strides& a, const Strides& b) noexcept;
};

Strides contiguous_strides(const Shape& shape);

}  // namespace loom
