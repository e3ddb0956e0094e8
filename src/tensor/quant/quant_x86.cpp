// AVX-512 and AVX2 forms of q8_0's quantizer (quant_legacy.cpp): the same block scale
// and the same quants, bit for bit. The products x * id are the scalar loop's (one
// multiply each, no fusing); rounding them half away from zero (std::round) is the
// truncation, plus one step away from zero where the exact remainder |v - trunc(v)| is
// at least a half (adding 0.5 and truncating would round 0.49999997 up). A loom convert
// to q8_0 spent 42% of its samples in the scalar loop's round.
#include <algorithm>

#include "common/simd.hpp"
#include "tensor/quant/blocks.hpp"
#include "tensor/quant/quant_formats.hpp"

namespace loom::quant::codec {

namespace {
constexpr int kBlock = 32;

// Block scale d and its inverse, as the scalar quantizer computes them.
struct Scale {
  float d;
  float id;
};
inline Scale scale_of(float amax) noexcept {
  const float d = amax / 127.0f;
  return {d, d != 0.0f ? 1.0f / d : 0.0f};
}
}  // namespace

LOOM_TARGET_AVX512 void quantize_q8_0_avx512(const float* src, uint8_t* dst, size_t blocks) {
  const __m512 sign = _mm512_set1_ps(-0.0f), one = _mm512_set1_ps(1.0f), half = _mm512_set1_ps(0.5f);
  for (size_t b = 0; b < blocks; ++b, src += kBlock, dst += sizeof(BlockQ8_0)) {
    const __m512 x0 = _mm512_loadu_ps(src), x1 = _mm512_loadu_ps(src + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, x0), _mm512_andnot_ps(sign, x1)));
    const Scale s = scale_of(amax);
    store_f16(dst, s.d);
    const __m512 id = _mm512_set1_ps(s.id);
    for (int h = 0; h < 2; ++h) {
      const __m512 v = _mm512_mul_ps(h == 0 ? x0 : x1, id);
      const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
      const __mmask16 up = _mm512_cmp_ps_mask(_mm512_andnot_ps(sign, _mm512_sub_ps(v, t)), half, _CMP_GE_OQ);
      const __m512 r = _mm512_mask_add_ps(t, up, t, _mm512_or_ps(_mm512_and_ps(v, sign), one));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + off::q8_0_qs + 16 * h),
                       _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(r)));
    }
  }
}

LOOM_TARGET_AVX2 void quantize_q8_0_avx2(const float* src, uint8_t* dst, size_t blocks) {
  const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f);
  for (size_t b = 0; b < blocks; ++b, src += kBlock, dst += sizeof(BlockQ8_0)) {
    __m256 x[4];
    __m256 m = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      x[k] = _mm256_loadu_ps(src + 8 * k);
      m = _mm256_max_ps(m, _mm256_andnot_ps(sign, x[k]));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const Scale s = scale_of(_mm_cvtss_f32(m4));
    store_f16(dst, s.d);
    const __m256 id = _mm256_set1_ps(s.id);
    __m256i q[4];
    for (int k = 0; k < 4; ++k) {
      const __m256 v = _mm256_mul_ps(x[k], id);
      const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
      const __m256 up = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(v, t)), half, _CMP_GE_OQ);
      const __m256 step = _mm256_and_ps(up, _mm256_or_ps(_mm256_and_ps(v, sign), one));
      q[k] = _mm256_cvttps_epi32(_mm256_add_ps(t, step));
    }
    // The packs work within 128-bit lanes; the permute puts the 32 bytes in order.
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + off::q8_0_qs),
                        _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  }
}

}  // namespace loom::quant::codec
