// Internal: the quantized dot-product kernels behind tensor/quant/quant.hpp's
// has_kernels / activation_dtype / quantize_activations / dot_rows (declared there, where
// their contract is written), plus the embedding-row lookup of quantized tables and the
// per-family entry points tests and benchmarks use.
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
