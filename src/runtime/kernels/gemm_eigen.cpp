// The portable prefill product, through Eigen's blocked GEMM (used where the AVX-512
// kernels of gemm_x86.cpp are not available).
// Eigen's AVX-512 code, inlined here under -march=native, trips GCC 12's false
// -Wuninitialized inside GCC's own intrinsic headers (fixed in GCC 13). The diagnostic
// state is read where the warning points (in those headers), so this comes first.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <Eigen/Core>

#include <algorithm>
#include <vector>

#include "loom/convert.hpp"
#include "runtime/kernels/gemm_kernels.hpp"

namespace loom::kernels {

namespace {

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Stride = Eigen::OuterStride<>;

// Y[:, r0:r1] = X * W[r0:r1, :]^T for a float weight block already in f32.
void gemm_block_f32(const float* w_rows, int64_t n_rows, int64_t cols, const float* x,
                    int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride) {
  Eigen::Map<const RowMajor, 0, Stride> X(x, n_tokens, cols, Stride(x_stride));
  Eigen::Map<const RowMajor> W(w_rows, n_rows, cols);
  Eigen::Map<RowMajor, 0, Stride> Y(y, n_tokens, n_rows, Stride(y_stride));
  Y.noalias() = X * W.transpose();
}

}  // namespace

// Products run over fixed blocks of rows, whatever range a thread was given, so Eigen
// sees the same shapes (and sums in the same order) for any thread count: results do not
// depend on the number of threads. Narrow-float rows are widened per block into a
// per-thread buffer, paying the conversion once per row for all tokens of the batch.
void gemm_eigen_rows(const Tensor& w, int64_t r0, int64_t r1, const float* x, int64_t x_stride,
                     int64_t n_tokens, float* y, int64_t y_stride) {
  const int64_t cols = w.shape()[1];
  thread_local std::vector<float> buffer;
  const auto* base = static_cast<const std::byte*>(w.raw_data());
  const int64_t row_bytes = dtype_bytes(w.dtype(), cols, cols);
  for (int64_t r = r0; r < r1; r += kEigenGemmRows) {
    const int64_t n = std::min(kEigenGemmRows, r1 - r);
    const float* rows = nullptr;
    if (w.dtype() == DType::f32) {
      rows = w.data<float>() + r * cols;
    } else {
      buffer.resize(static_cast<size_t>(kEigenGemmRows * cols));
      convert(w.dtype(), base + r * row_bytes, DType::f32, buffer.data(), static_cast<size_t>(n * cols));
      rows = buffer.data();
    }
    gemm_block_f32(rows, n, cols, x, x_stride, n_tokens, y + r, y_stride);
  }
}

}  // namespace loom::kernels
