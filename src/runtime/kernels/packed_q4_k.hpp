// Internal: products with q4_k weights in the q4_k_x16 packing (tensor/packing.hpp).
//
// Activations are quantized to q8_k (256-element blocks, f32 scale) once per call. Per
// row and 256-column block the integer sums are exact:
//   isum = sum over the 8 sub-blocks s of scale[s] * (sum of nibble * activation byte),
//   msum = sum over s of min[s] * (sum of the sub-block's activation bytes),
// and each output is one sequential float sum in block order:
//   acc = fma(float(isum), d * da, acc); acc = fma(-float(msum), dmin * da, acc),
// starting from +0. So every batch, tile, thread count and kernel family (the AVX-512
// VNNI kernel keeps one lane per row; the scalar one is the same arithmetic) gives the
// same bits: products with packed q4_k weights are batch invariant. They differ in the
// last bits from the row-major q4_k kernels, which order their sums otherwise.
#pragma once
#include <cstdint>

#include "loom/tensor.hpp"
#include "loom/thread_pool.hpp"

namespace loom::kernels {

// Y[t, r] = dot(W[r, :], X[t, :]) (+ bias[r]) for a q4_k_x16 weight W. Rows are split
// over the pool in whole panels.
void linear_packed_q4_k(const Tensor& w, const Tensor* bias, const float* x, int64_t x_stride, int64_t n_tokens,
                        float* y, int64_t y_stride, ThreadPool& pool);

// For tests: the same product on the scalar family, whatever the CPU.
void linear_packed_q4_k_scalar(const Tensor& w, const float* x, int64_t x_stride, int64_t n_tokens, float* y,
                               int64_t y_stride);

// Whether this CPU (at the current ISA cap) runs the packed kernel natively (AVX-512
// VNNI); the loader packs q4_k weights only then.
bool packed_q4_k_native() noexcept;

}  // namespace loom::kernels
