// The AVX-512 VNNI family of quantized dot-product kernels (vpdpbusd / vpdpwssd).
// Every function carries LOOM_TARGET_AVX512_VNNI, so this file builds for any -march; the
// dispatcher (quant_dot.cpp) only calls it on CPUs with AVX-512 F/BW/VL/DQ and VNNI.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/simd.hpp"
#include "runtime/kernels/quant_dot_kernels.hpp"

namespace loom::quant::kernels {

namespace avx512_family {
#define QD_TARGET LOOM_TARGET_AVX512_VNNI
#define QD_VNNI 1
#include "runtime/kernels/quant_dot_x86.inl"
#undef QD_VNNI
#undef QD_TARGET

// ---- 512-bit kernels for the hottest types (q8_0, q4_0, q4_k, q6_k) ----
//
// One zmm covers 64 elements: two q8_0 / q4_0 blocks, or a q4_k group pair / half a q6_k
// chunk, so unpacking, multiplying and scaling cost half as many instructions as the
// 256-bit versions above (which still handle the other types and odd tails).

#define QZ_INLINE LOOM_TARGET_AVX512_VNNI __attribute__((always_inline)) inline

// Per-i16-lane shift counts: `low` for the low 256 bits, `high` for the high 256 bits.
QZ_INLINE __m512i half_counts(int low, int high) {
  const auto rep = [](int v) {
    return static_cast<long long>(0x0001000100010001ull * static_cast<uint64_t>(v));
  };
  return _mm512_set_epi64(rep(high), rep(high), rep(high), rep(high), rep(low), rep(low), rep(low),
                          rep(low));
}

// i16 lane indices [g x8, g+1 x8, g+2 x8, g+3 x8], for vpermw of a 16 x i16 scale vector.
QZ_INLINE __m512i quarter_index(int g) {
  const auto rep = [](int v) {
    return static_cast<long long>(0x0001000100010001ull * static_cast<uint64_t>(v));
  };
  return _mm512_set_epi64(rep(g + 3), rep(g + 3), rep(g + 2), rep(g + 2), rep(g + 1), rep(g + 1),
                          rep(g), rep(g));
}

// i16 lane indices [g x16, g+1 x16].
QZ_INLINE __m512i half_index(int g) { return half_counts(g, g + 1); }

QZ_INLINE __m512i load512(const uint8_t* p) { return _mm512_loadu_si512(p); }

QZ_INLINE __m512i broadcast256(const uint8_t* p) { return _mm512_broadcast_i64x4(load256(p)); }

// The f16 scales of two weight blocks `stride` bytes apart, as f32 in lanes 0 and 1.
QZ_INLINE __m128 weight_scale_pair(const uint8_t* wb, size_t stride) {
  uint16_t h0;
  uint16_t h1;
  std::memcpy(&h0, wb, 2);
  std::memcpy(&h1, wb + stride, 2);
  return _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(h0 | (h1 << 16))));
}

// [dw0*da0 x8 | dw1*da1 x8]: the weight scale pair times two consecutive precomputed
// activation scales, spread over the 16 i32 lanes of the two blocks' products.
QZ_INLINE __m512 pair_scales(__m128 dw, const float* da) {
  const __m128 a = _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(da)));
  const long long ones = 0x0000000100000001ll;  // i32 lanes 8-15 take element 1
  return _mm512_permutexvar_ps(_mm512_set_epi64(ones, ones, ones, ones, 0, 0, 0, 0),
                               _mm512_zextps128_ps512(_mm_mul_ps(dw, a)));
}

struct Q8_0Z {
  template <int Nt>
  struct Tile {
    LOOM_TARGET_AVX512_VNNI static void run(const uint8_t* w, const ActTile& acts,
                                            int64_t blocks, float* out) {
      __m512 acc[Nt];
      __m256 tail[Nt];
      for (int t = 0; t < Nt; ++t) {
        acc[t] = _mm512_setzero_ps();
        tail[t] = _mm256_setzero_ps();
      }
      int64_t b = 0;
      for (; b + 1 < blocks; b += 2) {
        const uint8_t* wb = w + static_cast<size_t>(b) * 34;
        const size_t at = static_cast<size_t>(b) * kActQ8_0;
        prefetch_ahead(wb, 68);
        const __m512i q =
            _mm512_inserti64x4(_mm512_castsi256_si512(load256(wb + 2)), load256(wb + 36), 1);
        // sum(w a) = sum(|w| * (w < 0 ? -a : a)); |-128| reads as 128 unsigned.
        const __mmask64 negative = _mm512_movepi8_mask(q);
        const __m128 dw = weight_scale_pair(wb, 34);
        const __m512i magnitude = _mm512_abs_epi8(q);
        for (int t = 0; t < Nt; ++t) {
          const uint8_t* ab = acts.rows[t] + at;
          const __m512i a = _mm512_inserti64x4(_mm512_castsi256_si512(load256(ab + 2)),
                                               load256(ab + 2 + kActQ8_0), 1);
          const __m512i signed_a = _mm512_mask_sub_epi8(a, negative, _mm512_setzero_si512(), a);
          const __m512i prod = _mm512_dpbusd_epi32(_mm512_setzero_si512(), magnitude, signed_a);
          const __m512 scale = pair_scales(dw, acts.scales[t] + b);
          acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(prod), scale, acc[t]);
        }
      }
      if (b < blocks) {
        const auto at = static_cast<size_t>(b);
        legacy_block<WQ8_0, Nt>(w + at * 34, acts, at, tail);
      }
      for (int t = 0; t < Nt; ++t) out[t] = simd::hsum512(acc[t]) + hsum(tail[t]);
    }
  };
};

struct Q4_0Z {
  template <int Nt>
  struct Tile {
    LOOM_TARGET_AVX512_VNNI static void run(const uint8_t* w, const ActTile& acts,
                                            int64_t blocks, float* out) {
      __m512 acc[Nt];
      __m256 tail[Nt];
      for (int t = 0; t < Nt; ++t) {
        acc[t] = _mm512_setzero_ps();
        tail[t] = _mm256_setzero_ps();
      }
      // shift 0 for the low nibbles (128-bit lanes 0, 2), 4 for the high ones (1, 3)
      const long long four = 0x0004000400040004ll;
      const __m512i counts = _mm512_set_epi64(four, four, 0, 0, four, four, 0, 0);
      const __m512i low_mask = _mm512_set1_epi8(0x0F);
      const __m512i eight = _mm512_set1_epi8(8);
      int64_t b = 0;
      for (; b + 1 < blocks; b += 2) {
        const uint8_t* wb = w + static_cast<size_t>(b) * 18;
        const size_t at = static_cast<size_t>(b) * kActQ8_0;
        prefetch_ahead(wb, 36);
        // [block b: lo nibbles, hi nibbles | block b+1: lo, hi] = 64 values in 0..15
        const __m512i raw =
            _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_broadcastsi128_si256(load128(wb + 2))),
                               _mm256_broadcastsi128_si256(load128(wb + 20)), 1);
        const __m512i q = _mm512_and_si512(_mm512_srlv_epi16(raw, counts), low_mask);
        const __m128 dw = weight_scale_pair(wb, 18);
        for (int t = 0; t < Nt; ++t) {
          const uint8_t* ab = acts.rows[t] + at;
          const __m512i a = _mm512_inserti64x4(_mm512_castsi256_si512(load256(ab + 2)),
                                               load256(ab + 2 + kActQ8_0), 1);
          // sum((q - 8) a) = sum(q a) - sum(8 a)
          const __m512i prod =
              _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), q, a),
                               _mm512_dpbusd_epi32(_mm512_setzero_si512(), eight, a));
          const __m512 scale = pair_scales(dw, acts.scales[t] + b);
          acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(prod), scale, acc[t]);
        }
      }
      if (b < blocks) {
        const auto at = static_cast<size_t>(b);
        legacy_block<WQ4_0, Nt>(w + at * 18, acts, at, tail);
      }
      for (int t = 0; t < Nt; ++t) out[t] = simd::hsum512(acc[t]) + hsum(tail[t]);
    }
  };
};

// q4_0 four blocks (128 elements) per step. The nibbles of four blocks fill one zmm
// (16 quant bytes each); its low nibbles are elements 0-15 of each block and its high
// nibbles elements 16-31, so the activations are rearranged once per dot_rows call to
// match (prepare_q4_0_x4), and the -8 offset becomes an integer bias the products start
// from: per group of 4 blocks, 64 bytes of low-half quants, 64 of high-half quants, and
// 16 i32 lanes holding -8 * sum(a) of block i in lane 4i (other lanes zero).
constexpr size_t kQ4Group = 192;

size_t prepared_q4_0_x4_bytes(int64_t blocks) { return static_cast<size_t>(blocks / 4) * kQ4Group; }

void prepare_q4_0_x4(const uint8_t* row, const float*, int64_t blocks, uint8_t* out) {
  for (int64_t g = 0; g < blocks / 4; ++g, out += kQ4Group) {
    int32_t bias[16] = {};
    for (int i = 0; i < 4; ++i) {
      const uint8_t* qs = row + static_cast<size_t>(4 * g + i) * kActQ8_0 + 2;
      std::memcpy(out + 16 * i, qs, 16);
      std::memcpy(out + 64 + 16 * i, qs + 16, 16);
      int sum = 0;
      for (int j = 0; j < 32; ++j) sum += static_cast<int8_t>(qs[j]);
      bias[4 * i] = -8 * sum;
    }
    std::memcpy(out + 128, bias, sizeof bias);
  }
}

struct Q4_0X4 {
  template <int Nt>
  struct Tile {
    LOOM_TARGET_AVX512_VNNI static void run(const uint8_t* w, const ActTile& acts,
                                            int64_t blocks, float* out) {
      __m512 acc[Nt];
      __m256 tail[Nt];
      for (int t = 0; t < Nt; ++t) {
        acc[t] = _mm512_setzero_ps();
        tail[t] = _mm256_setzero_ps();
      }
      const __m512i low_mask = _mm512_set1_epi8(0x0F);
      // f32 lanes 4i..4i+3 take the scale of block i
      const __m512i spread = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
      const int64_t groups = blocks / 4;
      for (int64_t g = 0; g < groups; ++g) {
        const uint8_t* wb = w + static_cast<size_t>(g) * 4 * 18;
        prefetch_ahead(wb, 72);
        __m512i q = _mm512_castsi128_si512(load128(wb + 2));
        q = _mm512_inserti32x4(q, load128(wb + 20), 1);
        q = _mm512_inserti32x4(q, load128(wb + 38), 2);
        q = _mm512_inserti32x4(q, load128(wb + 56), 3);
        const __m512i lo = _mm512_and_si512(q, low_mask);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), low_mask);
        uint16_t h[4];
        for (int i = 0; i < 4; ++i) std::memcpy(&h[i], wb + 18 * i, 2);
        const __m128 dw = _mm_cvtph_ps(_mm_set_epi16(0, 0, 0, 0, static_cast<short>(h[3]),
                                                     static_cast<short>(h[2]),
                                                     static_cast<short>(h[1]),
                                                     static_cast<short>(h[0])));
        for (int t = 0; t < Nt; ++t) {
          const uint8_t* p = acts.prepared[t] + static_cast<size_t>(g) * kQ4Group;
          __m512i prod = _mm512_dpbusd_epi32(load512(p + 128), lo, load512(p));
          prod = _mm512_dpbusd_epi32(prod, hi, load512(p + 64));
          const __m128 s = _mm_mul_ps(dw, _mm_loadu_ps(acts.scales[t] + 4 * g));
          const __m512 scale = _mm512_permutexvar_ps(spread, _mm512_zextps128_ps512(s));
          acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(prod), scale, acc[t]);
        }
      }
      for (int64_t b = 4 * groups; b < blocks; ++b) {
        const auto at = static_cast<size_t>(b);
        legacy_block<WQ4_0, Nt>(w + at * 18, acts, at, tail);
      }
      for (int t = 0; t < Nt; ++t) out[t] = simd::hsum512(acc[t]) + hsum(tail[t]);
    }
  };
};

// q4_k's 12 scale bytes -> 16 x u16: the 8 group scales (lanes 0-7), then the 8 mins
// (lanes 8-15), all in vector registers. Reads 16 bytes at `p` (the 4 after the scales
// are quants of the same block).
QZ_INLINE __m512i k4_scales_mins(const uint8_t* p) {
  const __m128i raw = load128(p);  // u32 lanes: s0, s1, s2, (quants)
  // Low bits: s0 & 0x3F, s2 & 0x0F, s1 & 0x3F, (s2 >> 4) & 0x0F.
  const __m128i x = _mm_srlv_epi32(_mm_shuffle_epi32(raw, _MM_SHUFFLE(2, 1, 2, 0)),
                                   _mm_set_epi32(4, 0, 0, 0));
  const __m128i low = _mm_and_si128(
      x, _mm_set_epi32(0x0F0F0F0F, 0x3F3F3F3F, 0x0F0F0F0F, 0x3F3F3F3F));
  // High bits of groups 4-7: the top two bits of s0 (scales) and s1 (mins), moved to 4-5.
  const __m128i y = _mm_shuffle_epi32(raw, _MM_SHUFFLE(1, 1, 0, 0));
  const __m128i high = _mm_slli_epi32(
      _mm_and_si128(_mm_srli_epi32(y, 6), _mm_set_epi32(0x03030303, 0, 0x03030303, 0)), 4);
  return _mm512_cvtepu8_epi16(_mm256_zextsi128_si256(_mm_or_si128(low, high)));
}

struct Q4KZ {
  template <int Nt>
  struct Tile {
    LOOM_TARGET_AVX512_VNNI static void run(const uint8_t* w, const ActTile& acts,
                                            int64_t blocks, float* out) {
      __m512 acc[Nt];
      __m256 acc_min[Nt];
      for (int t = 0; t < Nt; ++t) {
        acc[t] = _mm512_setzero_ps();
        acc_min[t] = _mm256_setzero_ps();
      }
      const __m512i counts = half_counts(0, 4);
      const __m512i low_mask = _mm512_set1_epi8(0x0F);
      const __m512i min_index = _mm512_zextsi256_si512(_mm256_setr_epi16(
          8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15));
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* wb = w + static_cast<size_t>(b) * 144;
        const size_t at = static_cast<size_t>(b) * kActQ8K;
        prefetch_ahead(wb, 144);
        const float d = f16(wb);
        const float dmin = f16(wb + 2);
        const __m512i sc16 = k4_scales_mins(wb + 4);
        __m512i sum_a[Nt];
        __m512i sum_b[Nt];
        for (int t = 0; t < Nt; ++t) sum_a[t] = sum_b[t] = _mm512_setzero_si512();
        for (int p = 0; p < 4; ++p) {
          // [low nibbles: group 2p | high nibbles: group 2p+1] = elements 64p .. 64p+63
          const __m512i q = _mm512_and_si512(
              _mm512_srlv_epi16(broadcast256(wb + 16 + 32 * static_cast<size_t>(p)), counts),
              low_mask);
          const __m512i s = _mm512_permutexvar_epi16(half_index(2 * p), sc16);
          for (int t = 0; t < Nt; ++t) {
            const __m512i a = load512(acts.rows[t] + at + kActQ8KQs + 64 * static_cast<size_t>(p));
            __m512i& sum = (p % 2 == 0) ? sum_a[t] : sum_b[t];
            sum = _mm512_dpwssd_epi32(sum, _mm512_maddubs_epi16(q, a), s);
          }
        }
        // [m0, m0, m1, m1, ..., m7, m7]: one min per 16-element bsum
        const __m256i mins = _mm512_castsi512_si256(_mm512_permutexvar_epi16(min_index, sc16));
        for (int t = 0; t < Nt; ++t) {
          const uint8_t* ab = acts.rows[t] + at;
          const float da = f32_at(ab);
          const __m256i msum = _mm256_madd_epi16(load256(ab + kActQ8KBsums), mins);
          acc[t] =
              _mm512_fmadd_ps(_mm512_set1_ps(d * da),
                              _mm512_cvtepi32_ps(_mm512_add_epi32(sum_a[t], sum_b[t])), acc[t]);
          acc_min[t] =
              _mm256_fnmadd_ps(_mm256_set1_ps(dmin * da), _mm256_cvtepi32_ps(msum), acc_min[t]);
        }
      }
      for (int t = 0; t < Nt; ++t) out[t] = simd::hsum512(acc[t]) + hsum(acc_min[t]);
    }
  };
};

struct Q6KZ {
  template <int Nt>
  struct Tile {
    LOOM_TARGET_AVX512_VNNI static void run(const uint8_t* w, const ActTile& acts,
                                            int64_t blocks, float* out) {
      __m512 acc[Nt];
      for (int t = 0; t < Nt; ++t) acc[t] = _mm512_setzero_ps();
      const __m512i low_mask = _mm512_set1_epi8(0x0F);
      const __m512i high_mask = _mm512_set1_epi8(0x30);
      const __m512i up = half_counts(4, 2);    // bits 0-1 / 2-3 of qh -> bits 4-5
      const __m512i down = half_counts(0, 2);  // bits 4-5 / 6-7 of qh -> bits 4-5
      constexpr int kOrMasked = 0xF8;          // ternary logic: A | (B & C)
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* wb = w + static_cast<size_t>(b) * 210;
        const size_t at = static_cast<size_t>(b) * kActQ8K;
        prefetch_ahead(wb, 210);
        const float d = f16(wb + 208);
        const __m256i scales = _mm256_cvtepi8_epi16(load128(wb + 192));
        const __m512i scales_z = _mm512_zextsi256_si512(scales);
        __m512i sum_a[Nt];
        __m512i sum_b[Nt];
        for (int t = 0; t < Nt; ++t) sum_a[t] = sum_b[t] = _mm512_setzero_si512();
        for (int half = 0; half < 2; ++half) {
          const __m512i l = load512(wb + 64 * static_cast<size_t>(half));
          const __m512i h = broadcast256(wb + 128 + 32 * static_cast<size_t>(half));
          // elements 0-63 of this half: low nibbles of ql[0..63] + qh bits 0-1 / 2-3
          const __m512i q0 = _mm512_ternarylogic_epi32(
              _mm512_and_si512(l, low_mask), _mm512_sllv_epi16(h, up), high_mask, kOrMasked);
          // elements 64-127: high nibbles + qh bits 4-5 / 6-7
          const __m512i q1 =
              _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(l, 4), low_mask),
                                        _mm512_srlv_epi16(h, down), high_mask, kOrMasked);
          const __m512i s0 = _mm512_permutexvar_epi16(quarter_index(8 * half), scales_z);
          const __m512i s1 = _mm512_permutexvar_epi16(quarter_index(8 * half + 4), scales_z);
          for (int t = 0; t < Nt; ++t) {
            const uint8_t* qa = acts.rows[t] + at + kActQ8KQs + 128 * static_cast<size_t>(half);
            sum_a[t] = _mm512_dpwssd_epi32(sum_a[t], _mm512_maddubs_epi16(q0, load512(qa)), s0);
            sum_b[t] =
                _mm512_dpwssd_epi32(sum_b[t], _mm512_maddubs_epi16(q1, load512(qa + 64)), s1);
          }
        }
        for (int t = 0; t < Nt; ++t) {
          const uint8_t* ab = acts.rows[t] + at;
          // levels are biased by 32: subtract 32 * sum_g(sc_g * bsum_g)
          const __m256i bias =
              _mm256_slli_epi32(_mm256_madd_epi16(scales, load256(ab + kActQ8KBsums)), 5);
          const __m512i sum =
              _mm512_sub_epi32(_mm512_add_epi32(sum_a[t], sum_b[t]), _mm512_zextsi256_si512(bias));
          acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(d * f32_at(ab)), _mm512_cvtepi32_ps(sum), acc[t]);
        }
      }
      for (int t = 0; t < Nt; ++t) out[t] = simd::hsum512(acc[t]);
    }
  };
};

#undef QZ_INLINE

KernelSet make_set() {
  KernelSet set;
  register_tiles<Q8_0Z::Tile>(set, DType::q8_0);
  register_tiles<Q4_0X4::Tile>(set, DType::q4_0);
  set.prepare[static_cast<size_t>(DType::q4_0)] = {prepared_q4_0_x4_bytes, prepare_q4_0_x4};
  register_tiles<Legacy<WQ4_1>::Tile>(set, DType::q4_1);
  register_tiles<Legacy<WQ5_0>::Tile>(set, DType::q5_0);
  register_tiles<Legacy<WQ5_1>::Tile>(set, DType::q5_1);
  register_tiles<Q2K::Tile>(set, DType::q2_k);
  register_tiles<Q3K::Tile>(set, DType::q3_k);
  register_tiles<Q4KZ::Tile>(set, DType::q4_k);
  register_tiles<KWithMin<true>::Tile>(set, DType::q5_k);
  register_tiles<Q6KZ::Tile>(set, DType::q6_k);
  set.quantize_q8_0 = quantize_act_q8_0;
  set.quantize_q8_k = quantize_act_q8_k;
  return set;
}
}  // namespace avx512_family

const KernelSet& avx512_vnni_kernels() noexcept {
  static const KernelSet set = avx512_family::make_set();
  return set;
}

}  // namespace loom::quant::kernels
