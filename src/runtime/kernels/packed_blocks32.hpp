// Internal: products with weights of 32-element runs of quants under f16 scales in their
// packings (tensor/packing.hpp): q8_0, q4_0, q4_1, q5_0, q5_1 as q8_0_x16 ... q5_1_x16,
// loom's gq8_G and gq4_G (G = 32, 64, 128) as gq8_G_x16 and gq4_G_x16. Activations are
// quantized to q8_0 once per call.
//
// Every output is one sequential sum over the 32-column blocks of its row, in block
// order: acc = fma(float(block integer dot), dw * da, acc), starting from +0 (gq4's block
// integer counts q - z; q4_1 and q5_1 then add fma(float(sum of the activation quants),
// m * da, acc)) — the same
// bits whatever the batch, the tile, the thread count or the kernel family (the AVX-512
// VNNI kernel keeps one lane per row; the scalar one is the same arithmetic), so
// products with packed weights are batch invariant like every other. They differ in the
// last bits from the row-major kernels, which sum even and odd blocks apart.
#pragma once
#include <cstdint>

#include "loom/tensor.hpp"
#include "loom/thread_pool.hpp"

namespace loom::kernels {

// Whether these kernels read `packing` (q8_0_x16, q4_0_x16, q4_1_x16, q5_0_x16, q5_1_x16,
// gq8_G_x16, gq4_G_x16).
bool packed_blocks32_reads(Packing packing) noexcept;

// Y[t, r] = dot(W[r, :], X[t, :]) (+ bias[r]) for a weight W in one of those packings.
// Rows are split over the pool in whole panels.
void linear_packed_blocks32(const Tensor& w, const Tensor* bias, const float* x, int64_t x_stride, int64_t n_tokens,
                            float* y, int64_t y_stride, ThreadPool& pool);

// For tests: the same product on the scalar family, whatever the CPU.
void linear_packed_blocks32_scalar(const Tensor& w, const float* x, int64_t x_stride, int64_t n_tokens, float* y,
                                   int64_t y_stride);


}  // namespace loom::kernels
