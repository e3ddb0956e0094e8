// Internal: products with f32, f16 and bf16 weights in their packings (tensor/packing.hpp:
// f32_x64, f16_x64, bf16_x64: panels of 64 rows, column by column).
//
// A broadcast GEMM: for each column k, one vector load gives column k of 16 rows, widened
// to f32, and one FMA per token multiplies it by that token's x[k] broadcast. Every output
// is one sequential sum over k, from k = 0: acc = fma(w[r, k], x[t, k], acc), starting
// from +0. No tile, token count, thread count or ISA level changes that order (the scalar
// family is the same std::fma chain), so these products are batch invariant like every
// other. They differ in the last bits from the row-major kernels, which sum each output
// in 16 lanes and add the lanes at the end.
//
// Why a packing: the row-major kernels' dot-product tile spends loads and horizontal sums
// the broadcast form does not need; in cache the broadcast tile of 64 rows x 6 tokens
// runs at 94-97% of one core's FMA peak where the row-major 4 x 6 tile runs at 72-90%
// (docs/runtime.md, "Plain-dtype panels"). AVX2 has its own tiles over the same panels.
#pragma once
#include <span>

#include "runtime/kernels/packed_panels.hpp"

namespace loom::kernels {

// Whether the broadcast kernels run natively (AVX-512, or AVX2 with FMA and F16C: loom's
// avx2 level): the runtime prefers these packings only then; at the scalar level a packed
// weight still works through the scalar family, which computes the same bits slowly.
inline bool packed_plain_native() noexcept { return active_isa() >= Isa::avx2; }

// The products of f32_x64, f16_x64 and bf16_x64: Y[t, r] = dot(W[r, :], X[t, :])
// (+ bias[r]), panels split over the pool; linear() finds them through packed_products().
std::span<const PackedProducts> packed_plain_products() noexcept;

}  // namespace loom::kernels
