// Internal: ggml block-quantized formats (dequantization; quantization and dot-product
// kernels live beside it).
#pragma once

#include <cstddef>

#include "loom/dtype.hpp"

namespace loom::quant {

// True when dequantize() handles `dtype`.
bool can_dequantize(DType dtype) noexcept;
// Dequantizes n elements (a whole number of blocks) of `dtype` at src into dst.
// Returns false when the dtype is not handled.
bool dequantize(DType dtype, const void* src, float* dst, size_t n);

}  // namespace loom::quant
