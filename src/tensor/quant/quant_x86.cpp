// Vector forms of the quantizers' hot loops, each writing the scalar code's bytes:
// q8_0's quantizer for AVX-512 and AVX2 (quant_legacy.cpp), and the k-quants' scale
// searches for AVX-512, a candidate a lane (quant_k.cpp: fit_scale_and_min's sweep,
// fit_symmetric_scale's sums). No fused multiply-adds: the scalar codecs evaluate every
// multiply and add apart, and GCC contracts intrinsics' mul + add too.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

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

// q8_0: the products x * id are the scalar loop's (one multiply each); rounding them
// half away from zero (std::round) is the truncation, plus one step away from zero where
// the exact remainder |v - trunc(v)| is at least a half (adding 0.5 and truncating would
// round 0.49999997 up). A loom convert to q8_0 spent 42% of its samples in the scalar
// loop's round.
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

// nearest_int(iscale * centred) clamped to [low, high], lane by lane, as a float: ggml's
// magic-number rounding (add 1.5 * 2^23, keep the low mantissa bits).
LOOM_TARGET_AVX512 __attribute__((always_inline)) inline __m512 clamped_levels(__m512 iscale, float centred,
                                                                               __m512i low, __m512i high) {
  const __m512 shifted = _mm512_add_ps(_mm512_mul_ps(iscale, _mm512_set1_ps(centred)), _mm512_set1_ps(12582912.0f));
  const __m512i l = _mm512_sub_epi32(_mm512_and_si512(_mm512_castps_si512(shifted), _mm512_set1_epi32(0x007FFFFF)),
                                     _mm512_set1_epi32(0x00400000));
  return _mm512_cvtepi32_ps(_mm512_min_epi32(_mm512_max_epi32(l, low), high));
}

// Part of the candidate sweep of fit_scale_and_min (quant_k.cpp), a candidate a lane:
// lane k of a vector is step `from` + 16 v + k and computes what the scalar loop computes
// for that step with the current min, the same float operations in the same order (none
// fused): its inverse scale, its levels (nearest_int's magic-number rounding, clamped),
// the weighted sums, the least-squares scale and min, the error. The scalar loop moves
// its min to a step's whenever that step beats the best error, and the steps after it
// start from the new min; so this returns the first step from `from` on that beats
// `best_error` (with its scale, min and error), and the caller sweeps again past it.
LOOM_TARGET_AVX512 SweepStep sweep_scale_and_min_avx512(const SweepInputs& in, int from, float min, float best_error) {
  const float range = in.max - min;
  const __m512i zero = _mm512_setzero_si512(), top = _mm512_set1_epi32(in.nmax);
  __m512 levels[kSweepMaxItems];  // the sums' levels, kept for the error (in.n <= 32)
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int first = from; first <= in.nstep; first += 16) {
    const __m512 step = _mm512_cvtepi32_ps(_mm512_add_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(first)));
    const __m512 iscale = _mm512_div_ps(
        _mm512_add_ps(_mm512_add_ps(_mm512_set1_ps(in.rmin), _mm512_mul_ps(_mm512_set1_ps(in.rdelta), step)),
                      _mm512_set1_ps(static_cast<float>(in.nmax))),
        _mm512_set1_ps(range));
    __m512 sum_l = _mm512_setzero_ps(), sum_l2 = _mm512_setzero_ps(), sum_xl = _mm512_setzero_ps();
    for (int i = 0; i < in.n; ++i) {
      const __m512 fl = levels[i] = clamped_levels(iscale, in.x[i] - min, zero, top);
      const __m512 wl = _mm512_mul_ps(_mm512_set1_ps(in.w[i]), fl);
      sum_l = _mm512_add_ps(sum_l, wl);
      sum_l2 = _mm512_add_ps(sum_l2, _mm512_mul_ps(wl, fl));
      sum_xl = _mm512_add_ps(sum_xl, _mm512_mul_ps(wl, _mm512_set1_ps(in.x[i])));
    }
    const __m512 sw = _mm512_set1_ps(in.sum_w), sx = _mm512_set1_ps(in.sum_x);
    const __m512 det = _mm512_sub_ps(_mm512_mul_ps(sw, sum_l2), _mm512_mul_ps(sum_l, sum_l));
    __m512 this_scale = _mm512_div_ps(_mm512_sub_ps(_mm512_mul_ps(sw, sum_xl), _mm512_mul_ps(sx, sum_l)), det);
    __m512 this_min = _mm512_div_ps(_mm512_sub_ps(_mm512_mul_ps(sum_l2, sx), _mm512_mul_ps(sum_l, sum_xl)), det);
    const __mmask16 positive = _mm512_cmp_ps_mask(this_min, _mm512_setzero_ps(), _CMP_GT_OQ);
    this_min = _mm512_mask_mov_ps(this_min, positive, _mm512_setzero_ps());
    this_scale = _mm512_mask_div_ps(this_scale, positive, sum_xl, sum_l2);
    __m512 error = _mm512_setzero_ps();
    for (int i = 0; i < in.n; ++i) {
      const __m512 fl = levels[i];
      __m512 diff = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(this_scale, fl), this_min), _mm512_set1_ps(in.x[i]));
      diff = in.use_mad ? _mm512_andnot_ps(sign, diff) : _mm512_mul_ps(diff, diff);
      error = _mm512_add_ps(error, _mm512_mul_ps(_mm512_set1_ps(in.w[i]), diff));
    }
    // The steps that beat best_error, det > 0 first (the scalar loop skips the others).
    const __mmask16 fit = _mm512_cmp_ps_mask(det, _mm512_setzero_ps(), _CMP_GT_OQ);
    const auto better =
        static_cast<uint32_t>(_mm512_mask_cmp_ps_mask(fit, error, _mm512_set1_ps(best_error), _CMP_LT_OQ));
    const int lanes = std::min(16, in.nstep + 1 - first);
    const uint32_t in_range = lanes == 16 ? 0xFFFFu : (1u << lanes) - 1u;
    if ((better & in_range) != 0) {
      const int k = __builtin_ctz(better & in_range);
      alignas(64) float e[16], sc[16], mn[16];
      _mm512_store_ps(e, error);
      _mm512_store_ps(sc, this_scale);
      _mm512_store_ps(mn, this_min);
      return {first + k, sc[k], mn[k], e[k]};
    }
  }
  return {-1, 0.0f, 0.0f, 0.0f};
}

// The 18 candidate sums of fit_symmetric_scale (quant_k.cpp), a candidate a lane: lane
// k is step kSymmetricSteps[k] (-9..-1, 1..9) and computes what levels_for computes for
// it, the same float operations in the same order (none fused). The scalar scan that
// picks among them (whose best moves with each pick) stays with the caller.
LOOM_TARGET_AVX512 void symmetric_sums_avx512(int n, int nmax, const float* x, float max, float* sumlx, float* suml2) {
  const __m512i low = _mm512_set1_epi32(-nmax), high = _mm512_set1_epi32(nmax - 1);
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int v = 0; v < 2; ++v) {
    alignas(64) float steps[16] = {};
    for (int k = 0; k < 16 && 16 * v + k < kSymmetricCandidates; ++k) {
      steps[k] = static_cast<float>(kSymmetricSteps[16 * v + k]);
    }
    // -(nmax + 0.1 step) / max
    const __m512 iscale = _mm512_div_ps(
        _mm512_xor_ps(_mm512_add_ps(_mm512_set1_ps(static_cast<float>(nmax)),
                                    _mm512_mul_ps(_mm512_set1_ps(0.1f), _mm512_load_ps(steps))),
                      sign),
        _mm512_set1_ps(max));
    __m512 lx = _mm512_setzero_ps(), l2 = _mm512_setzero_ps();
    for (int i = 0; i < n; ++i) {
      const __m512 xi = _mm512_set1_ps(x[i]);
      const __m512 fl = clamped_levels(iscale, x[i], low, high);
      const __m512 w = _mm512_set1_ps(x[i] * x[i]);
      lx = _mm512_add_ps(lx, _mm512_mul_ps(_mm512_mul_ps(w, xi), fl));
      l2 = _mm512_add_ps(l2, _mm512_mul_ps(_mm512_mul_ps(w, fl), fl));
    }
    alignas(64) float a[16], c[16];
    _mm512_store_ps(a, lx);
    _mm512_store_ps(c, l2);
    for (int k = 0; k < 16 && 16 * v + k < kSymmetricCandidates; ++k) {
      sumlx[16 * v + k] = a[k];
      suml2[16 * v + k] = c[k];
    }
  }
}

}  // namespace loom::quant::codec
