// Internal: dot products of block-quantized weight rows with 8-bit-quantized activations
// — the matrix-vector (decode) and matrix-matrix (prefill) kernels of the forward pass —
// and the row lookup of quantized embedding tables. Weights are never dequantized as a
// whole: each kernel reads blocks and computes on them in registers.
//
// Usage: quantize each activation row once with quantize_activations() into
// activation_dtype(weight) blocks (q8_0 for the 32-element types, q8_k for the
// k-quants, as ggml's vec_dot_type — except that q4_1/q5_1 also use q8_0, whose block
// sums the kernels compute themselves), then let threads call dot_rows() on disjoint
// row ranges of the weight.
//
// Kernel families: portable scalar, AVX2, and AVX-512 with VNNI, chosen per call from
// loom::active_isa() and cpu_features() (an AVX-512 CPU without VNNI runs the AVX2
// family). All families compute the same per-block integer sums; they differ only in
// the order of the f32 additions across blocks (results agree to ~1e-6 relative).
//
// Every function is single-threaded, reentrant and touches only its arguments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "loom/dtype.hpp"

namespace loom::quant {

// The activation type dot_rows() expects for a weight of `weight` dtype: q8_0 for
// q8_0/q4_0/q4_1/q5_0/q5_1, q8_k for q2_k..q6_k. Returns f32 for dtypes without a dot
// kernel (see has_dot_kernel).
DType activation_dtype(DType weight) noexcept;
bool has_dot_kernel(DType weight) noexcept;

// Bytes of one quantized activation row of `cols` elements (cols a multiple of the
// activation block). Throws Error(invalid_argument) otherwise.
size_t activation_row_bytes(DType act, int64_t cols);

// Quantizes n f32 values (a whole number of `act` blocks) into `act` blocks at dst.
// act is q8_0 or q8_k. q8_0: d = max|x| / 127, q = round-half-even(x * 127 / max|x|);
// q8_k: ggml's quantize_row_q8_K (d = max / -127 with the sign of the largest-magnitude
// element, bsums filled). A block holding NaN or Inf gets a NaN scale and zero quants,
// so every dot product it enters is NaN instead of silently wrong. Bit-identical on
// every kernel family. Throws Error(invalid_argument) on a bad act or n.
void quantize_activations(DType act, const float* x, void* dst, int64_t n);

// out[r * out_stride + t] = dot(row r of W, activation t) for r in [0, rows), t in
// [0, n_act). W's rows are row_bytes apart, each `cols` elements of dtype `weight`;
// activation t is `cols` elements of activation_dtype(weight) at act + t * act_row_bytes.
// n_act == 1 is a matrix-vector product; for n_act > 1 rows are processed in cache-sized
// chunks against tiles of activations so each weight block is read from memory once.
// Throws Error(unsupported) for a dtype without a kernel, Error(invalid_argument) for
// inconsistent sizes (cols not a whole number of blocks, strides too small).
void dot_rows(DType weight, const void* w, size_t row_bytes, int64_t rows, int64_t cols,
              const void* act, size_t act_row_bytes, int64_t n_act, float* out,
              int64_t out_stride);

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
