// AVX2/F16C and AVX-512 conversion kernels. Each function carries its own target
// attribute so the file builds for any -march; the dispatcher in convert.cpp only calls
// a family the CPU supports. Results are bit-identical to the scalar reference.
#include "common/simd.hpp"
#include "tensor/convert_kernels.hpp"

namespace loom::kernels {


namespace {
constexpr int kF16MaxAsF32 = 0x477FE000;  // 65504.0f
constexpr int kBf16RoundsToInf = 0x7F7F8000;
constexpr int kBf16Max = 0x7F7F;
}  // namespace

// ---- AVX2 + F16C, 8 lanes ----

LOOM_TARGET_AVX2 void f16_to_f32_avx2(const uint16_t* src, float* dst, size_t n) noexcept {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  f16_to_f32_scalar_n(src + i, dst + i, n - i);
}

LOOM_TARGET_AVX2 void bf16_to_f32_avx2(const uint16_t* src, float* dst, size_t n) noexcept {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(w));
  }
  bf16_to_f32_scalar_n(src + i, dst + i, n - i);
}

LOOM_TARGET_AVX2 ConvertStats f32_to_f16_avx2(const float* src, uint16_t* dst, size_t n) noexcept {
  ConvertStats stats;
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i inf = _mm256_set1_epi32(0x7F800000);
  const __m256i max_f16 = _mm256_set1_epi32(kF16MaxAsF32);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(src + i);
    const __m256i bits = _mm256_castps_si256(x);
    const __m256i abs = _mm256_and_si256(bits, abs_mask);
    const __m256i is_nan = _mm256_cmpgt_epi32(abs, inf);
    const __m256i is_inf = _mm256_cmpeq_epi32(abs, inf);
    const __m256i too_big =
        _mm256_andnot_si256(_mm256_or_si256(is_nan, is_inf), _mm256_cmpgt_epi32(abs, max_f16));
    const __m256i sign = _mm256_andnot_si256(abs_mask, bits);
    const __m256 clamped = _mm256_castsi256_ps(_mm256_or_si256(sign, max_f16));
    const __m256 y = _mm256_blendv_ps(x, clamped, _mm256_castsi256_ps(too_big));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    stats.nan_count += static_cast<uint64_t>(__builtin_popcount(
        static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(is_nan)))));
    stats.inf_count += static_cast<uint64_t>(__builtin_popcount(
        static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(is_inf)))));
    stats.clamped_count += static_cast<uint64_t>(__builtin_popcount(
        static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(too_big)))));
  }
  stats += f32_to_f16_scalar_n(src + i, dst + i, n - i);
  return stats;
}

LOOM_TARGET_AVX2 ConvertStats f32_to_bf16_avx2(const float* src, uint16_t* dst, size_t n) noexcept {
  ConvertStats stats;
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i inf = _mm256_set1_epi32(0x7F800000);
  const __m256i rounds_to_inf = _mm256_set1_epi32(kBf16RoundsToInf - 1);
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i bias = _mm256_set1_epi32(0x7FFF);
  const __m256i quiet = _mm256_set1_epi32(0x40);
  const __m256i max_bf16 = _mm256_set1_epi32(kBf16Max);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i abs = _mm256_and_si256(bits, abs_mask);
    const __m256i is_nan = _mm256_cmpgt_epi32(abs, inf);
    const __m256i is_inf = _mm256_cmpeq_epi32(abs, inf);
    const __m256i too_big = _mm256_andnot_si256(_mm256_or_si256(is_nan, is_inf),
                                                _mm256_cmpgt_epi32(abs, rounds_to_inf));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), one);
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(bias, lsb)), 16);
    const __m256i nan_r = _mm256_or_si256(_mm256_srli_epi32(bits, 16), quiet);
    const __m256i big_r = _mm256_or_si256(_mm256_srli_epi32(_mm256_andnot_si256(abs_mask, bits), 16),
                                          max_bf16);
    r = _mm256_blendv_epi8(r, nan_r, is_nan);
    r = _mm256_blendv_epi8(r, big_r, too_big);
    // Pack the low halves of 8 x u32 into 8 x u16 (values fit, so no saturation issue).
    const __m128i lo = _mm256_castsi256_si128(r);
    const __m128i hi = _mm256_extracti128_si256(r, 1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm_packus_epi32(lo, hi));
    stats.nan_count += static_cast<uint64_t>(__builtin_popcount(
        static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(is_nan)))));
    stats.inf_count += static_cast<uint64_t>(__builtin_popcount(
        static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(is_inf)))));
    stats.clamped_count += static_cast<uint64_t>(__builtin_popcount(
        static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(too_big)))));
  }
  stats += f32_to_bf16_scalar_n(src + i, dst + i, n - i);
  return stats;
}

// ---- AVX-512, 16 lanes ----

LOOM_TARGET_AVX512 void f16_to_f32_avx512(const uint16_t* src, float* dst, size_t n) noexcept {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 16));
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(a));
    _mm512_storeu_ps(dst + i + 16, _mm512_cvtph_ps(b));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((n - i >= 16) ? 0xFFFF : ((1u << (n - i)) - 1));
    const __m256i a = _mm256_maskz_loadu_epi16(m, src + i);
    _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(a));
    i += 16;
    if (i < n) f16_to_f32_scalar_n(src + i, dst + i, n - i);
  }
}

LOOM_TARGET_AVX512 void bf16_to_f32_avx512(const uint16_t* src, float* dst, size_t n) noexcept {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
    _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(w));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m256i h = _mm256_maskz_loadu_epi16(m, src + i);
    const __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
    _mm512_mask_storeu_ps(dst + i, m, _mm512_castsi512_ps(w));
  }
}

LOOM_TARGET_AVX512 ConvertStats f32_to_f16_avx512(const float* src, uint16_t* dst, size_t n) noexcept {
  ConvertStats stats;
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512i inf = _mm512_set1_epi32(0x7F800000);
  const __m512i max_f16 = _mm512_set1_epi32(kF16MaxAsF32);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m =
        static_cast<__mmask16>((n - i >= 16) ? 0xFFFF : ((1u << (n - i)) - 1));
    const __m512i bits = _mm512_maskz_loadu_epi32(m, src + i);
    const __m512i abs = _mm512_and_si512(bits, abs_mask);
    const __mmask16 is_nan = _mm512_mask_cmpgt_epi32_mask(m, abs, inf);
    const __mmask16 is_inf = _mm512_mask_cmpeq_epi32_mask(m, abs, inf);
    const __mmask16 too_big =
        _mm512_mask_cmpgt_epi32_mask(static_cast<__mmask16>(m & ~(is_nan | is_inf)), abs, max_f16);
    const __m512i sign = _mm512_andnot_si512(abs_mask, bits);
    const __m512i y = _mm512_mask_mov_epi32(bits, too_big, _mm512_or_si512(sign, max_f16));
    const __m256i h =
        _mm512_cvtps_ph(_mm512_castsi512_ps(y), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_mask_storeu_epi16(dst + i, m, h);
    stats.nan_count += static_cast<uint64_t>(__builtin_popcount(is_nan));
    stats.inf_count += static_cast<uint64_t>(__builtin_popcount(is_inf));
    stats.clamped_count += static_cast<uint64_t>(__builtin_popcount(too_big));
  }
  return stats;
}

LOOM_TARGET_AVX512 ConvertStats f32_to_bf16_avx512(const float* src, uint16_t* dst, size_t n) noexcept {
  ConvertStats stats;
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512i inf = _mm512_set1_epi32(0x7F800000);
  const __m512i rounds_to_inf = _mm512_set1_epi32(kBf16RoundsToInf - 1);
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i bias = _mm512_set1_epi32(0x7FFF);
  const __m512i quiet = _mm512_set1_epi32(0x40);
  const __m512i max_bf16 = _mm512_set1_epi32(kBf16Max);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m =
        static_cast<__mmask16>((n - i >= 16) ? 0xFFFF : ((1u << (n - i)) - 1));
    const __m512i bits = _mm512_maskz_loadu_epi32(m, src + i);
    const __m512i abs = _mm512_and_si512(bits, abs_mask);
    const __mmask16 is_nan = _mm512_mask_cmpgt_epi32_mask(m, abs, inf);
    const __mmask16 is_inf = _mm512_mask_cmpeq_epi32_mask(m, abs, inf);
    const __mmask16 too_big = _mm512_mask_cmpgt_epi32_mask(
        static_cast<__mmask16>(m & ~(is_nan | is_inf)), abs, rounds_to_inf);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), one);
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(bias, lsb)), 16);
    r = _mm512_mask_mov_epi32(r, is_nan, _mm512_or_si512(_mm512_srli_epi32(bits, 16), quiet));
    r = _mm512_mask_mov_epi32(
        r, too_big,
        _mm512_or_si512(_mm512_srli_epi32(_mm512_andnot_si512(abs_mask, bits), 16), max_bf16));
    _mm256_mask_storeu_epi16(dst + i, m, _mm512_cvtepi32_epi16(r));
    stats.nan_count += static_cast<uint64_t>(__builtin_popcount(is_nan));
    stats.inf_count += static_cast<uint64_t>(__builtin_popcount(is_inf));
    stats.clamped_count += static_cast<uint64_t>(__builtin_popcount(too_big));
  }
  return stats;
}

}  // namespace loom::kernels
