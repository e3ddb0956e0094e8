// Internal: per-ISA matrix-vector kernels for plain weight dtypes. Each computes
// y[i] = dot(W row i, x) for i < n_rows, rows `row_stride` elements apart.
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

}  // namespace loom::kernels
