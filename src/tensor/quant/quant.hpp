// Internal: ggml's block-quantized formats — dequantization of every block type in the
// DType table, and quantization from f32 into the types loom writes. The block layouts
// are in blocks.hpp; the dot-product kernels that compute on blocks without
// dequantizing them belong to the runtime (src/runtime/kernels/quant_dot.hpp declares
// them): this layer declares only what it defines.
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

namespace loom {
class ThreadPool;
}

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
// As quantize(), from f32 or any dtype loom::convert() widens to f32 (f16, bf16, f64,
// f8...), through a bounded f32 buffer; on `pool`'s threads when given, in chunks of
// whole blocks (the same bytes at any thread count: each block is quantized from its own
// values). A non-finite value is reported by its index in src.
void quantize_from(DType from, const void* src, DType to, void* dst, size_t n, ThreadPool* pool = nullptr);

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

}  // namespace loom::quant
