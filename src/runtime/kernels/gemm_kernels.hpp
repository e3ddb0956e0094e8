// Internal: register-blocked matrix-matrix kernels for prefill.
//
// Y[t, r] = dot(X[t, :], W[r, :]) for t < n_tokens, r in [r0, r1); W row-major [rows,
// cols] in f32, f16 or bf16. The activations are transposed once per product
// (pack_activations, shared by all threads); each thread then walks its weight rows in
// small panels, widening f16/bf16 panels to f32 once, so every weight byte is read from
// memory once per product.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/tensor.hpp"

namespace loom::kernels {

// X [n_tokens, cols] transposed to [cols][padded_tokens] (tokens zero-padded to 32).
struct PackedActivations {
  std::vector<float> data;
  int64_t padded_tokens = 0;
  int64_t n_tokens = 0;
  int64_t cols = 0;
};
void pack_activations(const float* x, int64_t x_stride, int64_t n_tokens, int64_t cols,
                      PackedActivations& out);

// True when an AVX-512 GEMM is available for this dtype on this CPU.
bool gemm_avx512_supports(DType dtype) noexcept;
void gemm_avx512(const Tensor& w, int64_t r0, int64_t r1, const PackedActivations& x, float* y,
                 int64_t y_stride);

}  // namespace loom::kernels
