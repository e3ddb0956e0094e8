// Internal: products with k-quant weights in their packings (tensor/packing.hpp): q2_k as
// q2_k_x16, q3_k as q3_k_x16, q4_k as q4_k_x16, q5_k as q5_k_x16, q6_k as q6_k_x16.
//
// Activations are quantized to q8_k (256-element blocks, f32 scale, sums of 16) once per
// call. Per row and 256-column block the integer sums are exact — q4_k and q5_k:
//   isum = sum over the 8 sub-blocks s of scale[s] * (sum of value * activation byte),
//          a value being the nibble (q4_k) or the nibble + 16 x the fifth bit (q5_k),
//   msum = sum over s of min[s] * (sum of the sub-block's activation bytes),
//   acc = fma(float(isum), d * da, acc); acc = fma(-float(msum), dmin * da, acc);
// q6_k and q3_k (offset 32, 4):
//   total = sum over the 16 groups g of scale[g] * (sum of unsigned value * activation byte)
//           - offset * sum over g of scale[g] * (sum of the group's activation bytes),
//   acc = fma(float(total), d * da, acc);
// q2_k: isum as q6_k's sum without the offset, msum over its 16 mins, then as q4_k;
// each output one sequential float sum in block order from +0. So every batch, tile,
// thread count and kernel family (the AVX-512 VNNI kernels keep one lane per row; the
// scalar one is the same arithmetic) gives the same bits: products with packed k-quant
// weights are batch invariant. They differ in the last bits from the row-major kernels,
// which order their sums otherwise.
#pragma once
#include <span>

#include "runtime/kernels/packed_panels.hpp"

namespace loom::kernels {

// The products of these packings (q2_k_x16 .. q6_k_x16): Y[t, r] = dot(W[r, :],
// X[t, :]) (+ bias[r]), rows split over the pool in whole panels; linear() finds them
// through packed_products().
std::span<const PackedProducts> packed_kquants_products() noexcept;

}  // namespace loom::kernels
