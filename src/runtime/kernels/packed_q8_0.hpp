// Internal: products with q8_0 weights in the q8_0_x16 packing (tensor/packing.hpp).
//
// Every output is one sequential sum over the 32-column blocks of its row, in block
// order: acc = fma(float(block integer dot), dw * da, acc), starting from +0 — the same
// bits whatever the batch, the tile, the thread count or the kernel family (the AVX-512
// VNNI kernel keeps one lane per row; the scalar one is the same arithmetic), so
// products with packed weights are batch invariant like every other. They differ in the
// last bits from the row-major q8_0 kernels, which sum even and odd blocks apart.
#pragma once
#include <cstdint>

#include "loom/tensor.hpp"
#include "loom/thread_pool.hpp"

namespace loom::kernels {

// Y[t, r] = dot(W[r, :], X[t, :]) (+ bias[r]) for a q8_0_x16 weight W; the activations
// are quantized to q8_0 once per call. Rows are split over the pool in whole panels.
void linear_packed_q8_0(const Tensor& w, const Tensor* bias, const float* x, int64_t x_stride, int64_t n_tokens,
                        float* y, int64_t y_stride, ThreadPool& pool);

// For tests: the same product on the scalar family, whatever the CPU.
void linear_packed_q8_0_scalar(const Tensor& w, const float* x, int64_t x_stride, int64_t n_tokens, float* y,
                               int64_t y_stride);

// Whether this CPU (at the current ISA cap) runs the packed kernel natively: the
// loader packs q8_0 weights only then (the scalar family computes the same numbers,
// slower than the row-major scalar kernel).
bool packed_q8_0_native() noexcept;

}  // namespace loom::kernels
