// Internal: ggml block-quantized formats (dequantization; quantization and dot-product
// kernels live beside it).
#pragma once

#include <cstddef>
#include <cstdint>

#include "loom/dtype.hpp"

namespace loom::quant {

// True when dequantize() handles `dtype`.
bool can_dequantize(DType dtype) noexcept;
// Dequantizes n elements (a whole number of blocks) of `dtype` at src into dst.
// Returns false when the dtype is not handled.
bool dequantize(DType dtype, const void* src, float* dst, size_t n);

// True when dot_rows() handles weights of `dtype`.
bool has_kernels(DType dtype) noexcept;
// The activation dtype the weight type's dot product consumes.
DType activation_dtype(DType weight);
// Quantizes n floats (a whole number of the activation type's blocks) into dst.
void quantize_activations(DType act, const float* x, void* dst, int64_t n);
// out[r * out_stride + t] = dot(weight row r, activation t) for r < rows, t < n_act.
void dot_rows(DType weight, const void* w, size_t row_bytes, int64_t rows, int64_t cols,
              const void* act, size_t act_row_bytes, int64_t n_act, float* out,
              int64_t out_stride);

}  // namespace loom::quant
