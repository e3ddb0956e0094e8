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
#include <span>

#include "runtime/kernels/packed_panels.hpp"

namespace loom::kernels {

// The products of these packings (q8_0_x16, q4_0_x16, q4_1_x16, q5_0_x16, q5_1_x16,
// gq8_G_x16, gq4_G_x16): Y[t, r] = dot(W[r, :], X[t, :]) (+ bias[r]), rows split over
// the pool in whole panels; linear() finds them through packed_products().
std::span<const PackedProducts> packed_blocks32_products() noexcept;

}  // namespace loom::kernels
