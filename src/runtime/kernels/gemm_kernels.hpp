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

// The portable product (Eigen), over fixed blocks of kEigenGemmRows rows so results do
// not depend on the thread split; f16/bf16 rows are widened per block.
constexpr int64_t kEigenGemmRows = 128;
void gemm_eigen_rows(const Tensor& w, int64_t r0, int64_t r1, const float* x, int64_t x_stride,
                     int64_t n_tokens, float* y, int64_t y_stride);

// True when an AVX-512 GEMM is available for this dtype on this CPU.
bool gemm_avx512_supports(DType dtype) noexcept;
void gemm_avx512(const Tensor& w, int64_t r0, int64_t r1, const PackedActivations& x, float* y,
                 int64_t y_stride);

}  // namespace loom::kernels
