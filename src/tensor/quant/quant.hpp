// Internal: ggml's block-quantized formats — dequantization of every block type in the
// DType table, and quantization from f32 into the types loom writes. The block layouts
// are in blocks.hpp; the dot-product kernels that compute on blocks without
// dequantizing them live in src/runtime/kernels/quant_dot.hpp.
//
// Dequantization reproduces ggml's dequantize_row_* bit for bit (same f32 operations in
// the same order, f16 scales widened exactly). Quantization follows ggml's reference
// quantizers (quantize_row_*_ref): round-to-nearest with the same per-block scale and
// min search, so loom-written files decode like llama.cpp-written ones.
//
// All functions are pure over their arguments and may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "loom/dtype.hpp"

namespace loom::quant {

// True when dequantize() handles `dtype` (every quantized type in the DType table).
bool can_dequantize(DType dtype) noexcept;
// Dequantizes n elements (a whole number of blocks) of `dtype` at src into dst.
// Returns false when the dtype is not handled.
bool dequantize(DType dtype, const void* src, float* dst, size_t n);

// True when quantize() can write `dtype`.
bool can_quantize(DType dtype) noexcept;
// Quantizes n f32 values (a whole number of blocks) into dst. Throws
// loom::Error(unsupported) for a dtype without a quantizer, Error(invalid_argument)
// when n is not a whole number of blocks, and Error(numeric) when an input is NaN or
// infinite (a block scale cannot represent it).
void quantize(DType dtype, const float* src, void* dst, size_t n);
// As quantize(), from any dtype loom::convert() widens to f32 (f16, bf16, f64, f8...),
// through a bounded f32 buffer.
void quantize_from(DType from, const void* src, DType to, void* dst, size_t n);

// ---- loom's group-quantized types ----
// gq8_G (int8, one f16 scale per group) and gq4_G (int4, f16 scale + 4-bit zero point
// per group) for group sizes G = 32, 64, 128 along a row; layouts in blocks.hpp.
struct GroupType {
  DType dtype;
  int bits;   // 8 or 4
  int group;  // elements per group
};
// Every group type, as a table (the DType table has their block sizes).
std::span<const GroupType> group_types() noexcept;
// The group type of `bits` with group size `group`; nullopt when there is none.
std::optional<DType> group_dtype(int bits, int group) noexcept;

// ---- dot products on quantized weights ----
// Implemented by the kernels in src/runtime/kernels/ (quant_dot.cpp); that folder's
// quant_dot.hpp adds the embedding-row lookup and the per-family hooks for tests.
//
// Usage: quantize each activation row once with quantize_activations() into
// activation_dtype(weight) blocks, then let threads call dot_rows() on disjoint row
// ranges of the weight. Kernel families (scalar, AVX2, AVX-512 VNNI) are chosen per call
// from loom::active_isa() / cpu_features(); all compute the same per-block integer sums
// and differ only in the order of f32 additions across blocks (~1e-6 relative).
// Every function is single-threaded, reentrant and touches only its arguments.

// True when dot_rows() handles weights of `dtype`: q8_0, q4_0, q4_1, q5_0, q5_1, q2_k,
// q3_k, q4_k, q5_k, q6_k and the group types.
bool has_kernels(DType weight) noexcept;
// The activation dtype the weight type's dot product consumes: q8_0 for the 32-element
// types (q4_1/q5_1 included: the kernels sum the activation quants themselves) and for
// the group types (every group size is a whole number of 32-element activation blocks,
// so each group meets G/32 int8 activation blocks, each with its own scale), q8_k for
// the k-quants. Throws Error(unsupported) for a dtype without kernels.
DType activation_dtype(DType weight);
// Quantizes n floats (a whole number of `act` blocks; act is q8_0 or q8_k) into dst.
// q8_0: d = max|x| / 127, q = round-half-even(x * 127 / max|x|); q8_k: exactly ggml's
// quantize_row_q8_K (sign of the largest-magnitude element, bsums filled). Quants stay
// in [-127, 127]. A block holding NaN or Inf gets a NaN scale and zero quants, so every
// dot product it enters is NaN instead of silently wrong. Bit-identical on every kernel
// family. Throws Error(invalid_argument) for another act or a partial block.
void quantize_activations(DType act, const float* x, void* dst, int64_t n);
// out[r * out_stride + t] = dot(weight row r, activation t) for r < rows, t < n_act.
// Weight rows are row_bytes apart, each `cols` elements of dtype `weight`; activation t
// is `cols` elements of activation_dtype(weight) at act + t * act_row_bytes. n_act == 1
// is a matrix-vector product; for n_act > 1 rows go in cache-sized chunks against tiles
// of 4 activations, so each weight block is read from memory once. Throws
// Error(unsupported) for a dtype without kernels, Error(invalid_argument) for
// inconsistent sizes (cols not a whole number of blocks, strides too small).
void dot_rows(DType weight, const void* w, size_t row_bytes, int64_t rows, int64_t cols,
              const void* act, size_t act_row_bytes, int64_t n_act, float* out, int64_t out_stride);

}  // namespace loom::quant
