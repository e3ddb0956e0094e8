// loom dtype conversion kernels.
//
// Widening (f16/bf16/f8/f64 -> f32) is exact for every input, NaN payloads kept (f16
// NaNs come back quieted, as the F16C instructions do). Narrowing rounds to nearest,
// ties to even. f32 -> f16 is a "safe cast": finite values beyond the f16 range are
// clamped to +-65504 instead of becoming infinities, and counted; +-Inf stays +-Inf and
// NaN stays NaN. Every narrowing call reports NaN / Inf / clamp counts so a load report
// can say what a conversion did to the weights.
//
// Vectorized with F16C / AVX2 / AVX-512 where the CPU has them (chosen at run time,
// see loom/cpu.hpp); every path gives bit-identical results.
#pragma once

#include <cstddef>
#include <cstdint>

#include "loom/dtype.hpp"

namespace loom {

struct ConvertStats {
  uint64_t nan_count = 0;      // NaN inputs
  uint64_t inf_count = 0;      // +-Inf inputs
  uint64_t clamped_count = 0;  // finite inputs clamped to the target's largest finite value
  ConvertStats& operator+=(const ConvertStats& other) noexcept {
    nan_count += other.nan_count;
    inf_count += other.inf_count;
    clamped_count += other.clamped_count;
    return *this;
  }
};

// Scalar reference conversions of single values (also used by the kernels' tails).
float f16_to_f32_scalar(uint16_t h) noexcept;
float bf16_to_f32_scalar(uint16_t h) noexcept;
uint16_t f32_to_f16_scalar(float f) noexcept;   // round-to-nearest-even, no clamping
uint16_t f32_to_bf16_scalar(float f) noexcept;  // round-to-nearest-even, NaN quieted
float f8_e4m3_to_f32_scalar(uint8_t v) noexcept;
float f8_e5m2_to_f32_scalar(uint8_t v) noexcept;

// Array kernels over n elements; src and dst must not overlap.
void f16_to_f32(const uint16_t* src, float* dst, size_t n) noexcept;
void bf16_to_f32(const uint16_t* src, float* dst, size_t n) noexcept;
ConvertStats f32_to_f16(const float* src, uint16_t* dst, size_t n) noexcept;
ConvertStats f32_to_bf16(const float* src, uint16_t* dst, size_t n) noexcept;

// Can convert() take elements of `from` to `to`? (floating and integer dtypes, and
// dequantization of block-quantized dtypes to f32/f16/bf16).
bool can_convert(DType from, DType to) noexcept;
// Converts n elements (for quantized `from`, n is a whole number of blocks).
// Throws loom::Error(unsupported) when !can_convert(from, to).
ConvertStats convert(DType from, const void* src, DType to, void* dst, size_t n);

// Reverses the byte order of n elements of `elem_size` bytes each, in place. Files are
// little-endian; a big-endian host swaps plain-dtype tensors on load with this.
void byteswap_inplace(void* data, size_t n, size_t elem_size) noexcept;
bool host_is_little_endian() noexcept;

}  // namespace loom
