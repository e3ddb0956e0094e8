// Internal: per-ISA products of plain weight dtypes (f32, f16, bf16) with f32
// activations. Each matvec computes y[i] = dot(W row i, x) for i < n_rows, rows
// `row_stride` elements apart. Each gemm computes y[t * y_stride + i] = dot(W row i,
// x + t * x_stride) for t < n_tokens, i < n_rows.
//
// Batch invariance: on one ISA, gemm and matvec sum every (row, token) output in the
// same order (matvec_x86.cpp, linear.cpp for the scalar level), so a token's outputs are
// bit-identical whatever the other tokens of the batch, its position in it, or n_tokens.
#pragma once

#include <cstdint>

namespace loom::kernels {

void matvec_f32_scalar(const float* w, int64_t row_stride, const float* x, float* y, int64_t n_rows, int64_t cols);
void matvec_f16_scalar(const uint16_t* w, int64_t row_stride, const float* x, float* y, int64_t n_rows, int64_t cols);
void matvec_bf16_scalar(const uint16_t* w, int64_t row_stride, const float* x, float* y, int64_t n_rows, int64_t cols);

void matvec_f32_avx2(const float* w, int64_t row_stride, const float* x, float* y, int64_t n_rows, int64_t cols);
void matvec_f16_avx2(const uint16_t* w, int64_t row_stride, const float* x, float* y, int64_t n_rows, int64_t cols);
void matvec_bf16_avx2(const uint16_t* w, int64_t row_stride, const float* x, float* y, int64_t n_rows, int64_t cols);

void matvec_f32_avx512(const float* w, int64_t row_stride, const float* x, float* y, int64_t n_rows, int64_t cols);
void matvec_f16_avx512(const uint16_t* w, int64_t row_stride, const float* x, float* y, int64_t n_rows, int64_t cols);
void matvec_bf16_avx512(const uint16_t* w, int64_t row_stride, const float* x, float* y, int64_t n_rows, int64_t cols);

void gemm_f32_scalar(const float* w, int64_t row_stride, const float* x, int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride, int64_t n_rows, int64_t cols);
void gemm_f16_scalar(const uint16_t* w, int64_t row_stride, const float* x, int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride, int64_t n_rows, int64_t cols);
void gemm_bf16_scalar(const uint16_t* w, int64_t row_stride, const float* x, int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride, int64_t n_rows, int64_t cols);

void gemm_f32_avx2(const float* w, int64_t row_stride, const float* x, int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride, int64_t n_rows, int64_t cols);
void gemm_f16_avx2(const uint16_t* w, int64_t row_stride, const float* x, int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride, int64_t n_rows, int64_t cols);
void gemm_bf16_avx2(const uint16_t* w, int64_t row_stride, const float* x, int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride, int64_t n_rows, int64_t cols);

void gemm_f32_avx512(const float* w, int64_t row_stride, const float* x, int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride, int64_t n_rows, int64_t cols);
void gemm_f16_avx512(const uint16_t* w, int64_t row_stride, const float* x, int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride, int64_t n_rows, int64_t cols);
void gemm_bf16_avx512(const uint16_t* w, int64_t row_stride, const float* x, int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride, int64_t n_rows, int64_t cols);

}  // namespace loom::kernels
