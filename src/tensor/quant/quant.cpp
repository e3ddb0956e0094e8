#include "tensor/quant/quant.hpp"

#include <string>

#include "loom/error.hpp"

namespace loom::quant {

// Block-quantized formats arrive with the quantization work; until then no quantized
// dtype converts or multiplies, and callers report Error(unsupported).
bool can_dequantize(DType) noexcept { return false; }
bool dequantize(DType, const void*, float*, size_t) { return false; }

bool has_kernels(DType) noexcept { return false; }

DType activation_dtype(DType weight) {
  throw Error(ErrorCode::unsupported,
              "no kernels for quantized dtype " + std::string(dtype_name(weight)));
}
void quantize_activations(DType act, const float*, void*, int64_t) { activation_dtype(act); }
void dot_rows(DType weight, const void*, size_t, int64_t, int64_t, const void*, size_t, int64_t,
              float*, int64_t) {
  activation_dtype(weight);
}

}  // namespace loom::quant
