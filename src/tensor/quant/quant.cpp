#include "tensor/quant/quant.hpp"

namespace loom::quant {

// Block-quantized dequantization is added with the quantization work; until then no
// quantized dtype converts, and callers report Error(unsupported).
bool can_dequantize(DType) noexcept { return false; }
bool dequantize(DType, const void*, float*, size_t) { return false; }

}  // namespace loom::quant
