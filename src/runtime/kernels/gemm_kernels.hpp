// Internal: the opt-in bf16 x bf16 prefill product (AVX512-BF16), used by linear() only
// when its caller asks for bf16_activations. It is NOT batch-invariant: it rounds the
// activations to bf16 and sums each output in its own order, unlike the matvec a
// one-token product runs (the default products are: matvec_kernels.hpp).
//
// Y[t, r] = dot(X[t, :], W[r, :]) for t < n_tokens, r in [r0, r1); W row-major bf16.
// The activations are rounded and transposed once per product (pack_activations_bf16,
// shared by all threads); the register tile is 14 weight rows x 32 tokens.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/tensor.hpp"

namespace loom::kernels {

// X [n_tokens, cols] rounded to bf16 (nearest even) and laid out for VDPBF16PS:
// [cols/2][padded_tokens][2] (pairs of consecutive columns per token; cols even).
struct PackedActivationsBf16 {
  std::vector<uint16_t> data;
  int64_t padded_tokens = 0;
  int64_t n_tokens = 0;
  int64_t cols = 0;
};
void pack_activations_bf16(const float* x, int64_t x_stride, int64_t n_tokens, int64_t cols,
                           PackedActivationsBf16& out);
// True when bf16 weights of `cols` columns can use the AVX512-BF16 dot-product GEMM.
bool gemm_bf16_dot_supported(int64_t cols) noexcept;
// Y = X W^T with bf16 weights and bf16-rounded activations, f32 accumulation.
void gemm_bf16_dot(const Tensor& w, int64_t r0, int64_t r1, const PackedActivationsBf16& x, float* y,
                   int64_t y_stride);

}  // namespace loom::kernels
