// Internal: the quantized dot-product kernels (has_kernels / activation_dtype /
// quantize_activations / dot_rows, on the block formats of tensor/quant/), plus the
// embedding-row lookup of quantized tables and the per-family entry points tests and
// benchmarks use.
//
// Kernel families: portable scalar, AVX2, and AVX-512 with VNNI, chosen per call from
// loom::active_isa() and cpu_features() (an AVX-512 CPU without VNNI runs the AVX2
// family). Weights are never dequantized as a whole: each kernel reads blocks and
// computes on them in registers.
//
// Every function is single-threaded, reentrant and touches only its arguments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "loom/dtype.hpp"
#include "tensor/quant/quant.hpp"

namespace loom::quant {

// ---- dot products on quantized weights ----
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

// The same products written token-major, as the linear layers want them:
// out[t * out_stride + r] (out_stride >= rows when n_act > 1).
void dot_rows_token_major(DType weight, const void* w, size_t row_bytes, int64_t rows, int64_t cols,
                          const void* act, size_t act_row_bytes, int64_t n_act, float* out,
                          int64_t out_stride);

// Bytes of one quantized activation row of `cols` elements (cols a multiple of the
// activation block). Throws Error(invalid_argument) otherwise.
size_t activation_row_bytes(DType act, int64_t cols);

// Embedding lookup: out[i * cols + c] = element c of row row_ids[i] of the `rows`-row
// quantized table at w (rows row_bytes apart), dequantized exactly as
// quant::dequantize() does. Only the requested rows are read. Throws
// Error(invalid_argument) for an id outside [0, rows) or inconsistent sizes, and
// Error(unsupported) for a dtype that cannot be dequantized.
void dequantize_rows(DType weight, const void* w, size_t row_bytes, int64_t rows,
                     const int64_t* row_ids, int64_t n, int64_t cols, float* out);

// ---- for tests and benchmarks ----

enum class DotFamily : int { scalar = 0, avx2 = 1, avx512_vnni = 2 };
std::string_view dot_family_name(DotFamily family) noexcept;
// The family dot_rows() uses now (follows loom::set_isa_cap).
DotFamily active_dot_family() noexcept;
// Every family this CPU can run, scalar first.
std::vector<DotFamily> supported_dot_families();
// dot_rows() / quantize_activations() on a given family (which the CPU must support).
void dot_rows_on(DotFamily family, DType weight, const void* w, size_t row_bytes, int64_t rows,
                 int64_t cols, const void* act, size_t act_row_bytes, int64_t n_act, float* out,
                 int64_t out_stride);
void quantize_activations_on(DotFamily family, DType act, const float* x, void* dst, int64_t n);

}  // namespace loom::quant
