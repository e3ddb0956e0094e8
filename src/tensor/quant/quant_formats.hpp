// Internal: the per-type block codecs behind quant.hpp's table. Each function works on
// `blocks` whole blocks; quantizers expect finite inputs (quant.cpp checks).
#pragma once

#include <cstddef>
#include <cstdint>

namespace loom::quant::codec {

using DequantizeFn = void (*)(const uint8_t* src, float* dst, size_t blocks);
using QuantizeFn = void (*)(const float* src, uint8_t* dst, size_t blocks);

// 32-element types (quant_legacy.cpp)
void dequantize_q8_0(const uint8_t* src, float* dst, size_t blocks);
void dequantize_q4_0(const uint8_t* src, float* dst, size_t blocks);
void dequantize_q4_1(const uint8_t* src, float* dst, size_t blocks);
void dequantize_q5_0(const uint8_t* src, float* dst, size_t blocks);
void dequantize_q5_1(const uint8_t* src, float* dst, size_t blocks);
void dequantize_q8_1(const uint8_t* src, float* dst, size_t blocks);
void quantize_q8_0(const float* src, uint8_t* dst, size_t blocks);
void quantize_q4_0(const float* src, uint8_t* dst, size_t blocks);
void quantize_q4_1(const float* src, uint8_t* dst, size_t blocks);
void quantize_q5_0(const float* src, uint8_t* dst, size_t blocks);
void quantize_q5_1(const float* src, uint8_t* dst, size_t blocks);
void quantize_q8_1(const float* src, uint8_t* dst, size_t blocks);
// q8_0's quantizer for AVX-512 and AVX2 (quant_x86.cpp; the same bytes), which
// quantize_q8_0 hands its blocks to where the active ISA level has them.
void quantize_q8_0_avx512(const float* src, uint8_t* dst, size_t blocks);
void quantize_q8_0_avx2(const float* src, uint8_t* dst, size_t blocks);

// k-quants, 256-element super-blocks (quant_k.cpp)
void dequantize_q2_k(const uint8_t* src, float* dst, size_t blocks);
void dequantize_q3_k(const uint8_t* src, float* dst, size_t blocks);
void dequantize_q4_k(const uint8_t* src, float* dst, size_t blocks);
void dequantize_q5_k(const uint8_t* src, float* dst, size_t blocks);
void dequantize_q6_k(const uint8_t* src, float* dst, size_t blocks);
void dequantize_q8_k(const uint8_t* src, float* dst, size_t blocks);
void quantize_q2_k(const float* src, uint8_t* dst, size_t blocks);
void quantize_q3_k(const float* src, uint8_t* dst, size_t blocks);
void quantize_q4_k(const float* src, uint8_t* dst, size_t blocks);
void quantize_q5_k(const float* src, uint8_t* dst, size_t blocks);
void quantize_q6_k(const float* src, uint8_t* dst, size_t blocks);
void quantize_q8_k(const float* src, uint8_t* dst, size_t blocks);

// loom's group types (quant_group.cpp), Group = 32, 64 or 128
template <int Group>
void dequantize_gq8(const uint8_t* src, float* dst, size_t blocks);
template <int Group>
void quantize_gq8(const float* src, uint8_t* dst, size_t blocks);
template <int Group>
void dequantize_gq4(const uint8_t* src, float* dst, size_t blocks);
template <int Group>
void quantize_gq4(const float* src, uint8_t* dst, size_t blocks);

// Round to nearest, ties to even, for |x| < 2^22: adding 1.5 * 2^23 leaves the
// rounded integer in the low mantissa bits (the trick ggml's nearest_int uses, so
// results match its quantizers exactly).
inline int nearest_int(float x) noexcept {
  const float shifted = x + 12582912.0f;
  uint32_t bits;
  __builtin_memcpy(&bits, &shifted, sizeof bits);
  return static_cast<int>(bits & 0x007FFFFFu) - 0x00400000;
}

}  // namespace loom::quant::codec
