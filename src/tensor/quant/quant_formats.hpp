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
// The candidate sweep of fit_scale_and_min (quant_k.cpp): what does not change over
// it, and an AVX-512 part of it that runs a candidate a lane (quant_x86.cpp): the first
// step from `from` on that beats best_error with the current min (step -1: none).
struct SweepInputs {
  int n;
  int nmax;
  const float* x;
  const float* w;
  float max;
  float sum_w, sum_x;  // sum of w, sum of w * x, as the scalar loop adds them
  float rmin, rdelta;
  int nstep;  // steps 0..nstep
  bool use_mad;
};
struct SweepStep {
  int step;
  float scale, min, error;
};
inline constexpr int kSweepMaxItems = 32;  // values the vector sweep takes (the k-quants' groups: 16 or 32)
SweepStep sweep_scale_and_min_avx512(const SweepInputs& in, int from, float min, float best_error);

// fit_symmetric_scale's candidate steps (quant_k.cpp), in its order, and an AVX-512
// form of their sums (levels_for's sumlx and suml2 for each), a candidate a lane.
inline constexpr int kSymmetricCandidates = 18;
inline constexpr int kSymmetricSteps[kSymmetricCandidates] = {-9, -8, -7, -6, -5, -4, -3, -2, -1,
                                                              1,  2,  3,  4,  5,  6,  7,  8,  9};
void symmetric_sums_avx512(int n, int nmax, const float* x, float max, float* sumlx, float* suml2);

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
