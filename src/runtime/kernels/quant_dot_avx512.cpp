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

// ---- 512-bit kernels where they pay: q2_k, q3_k, q4_0, q4_k, q5_k, q6_k and q8_0 ----
//
// Elsewhere the 256-bit VNNI kernels above were as fast or faster (measured on Sapphire
// Rapids: 512-bit integer multiplies issue on one port, 256-bit ones on two), so the
// other types use them. On Zen 5 (full-width 512-bit units) the 512-bit q2_k, q3_k, q4_k
// and q5_k kernels below pay. q8_0's 512-bit kernel (below) also runs four rows at once; on
// Zen 5 it took prefill of the small q8_0 model from 752 to 1264-1320 tokens/s and
// decode from 272-277 to 375-398 (loom bench, 2 threads, alternating).

#define QZ_INLINE LOOM_TARGET_AVX512_VNNI __attribute__((always_inline)) inline

// Four copies of the i16 value v in one 64-bit lane.
constexpr long long i16x4(int v) {
  return static_cast<long long>(0x0001000100010001ull * static_cast<uint64_t>(v));
}

// Per-i16-lane shift counts: `low` for the low 256 bits, `high` for the high 256 bits.
QZ_INLINE __m512i half_counts(int low, int high) {
  return _mm512_set_epi64(i16x4(high), i16x4(high), i16x4(high), i16x4(high), i16x4(low),
                          i16x4(low), i16x4(low), i16x4(low));
}

// i16 lane indices [g x8, g+1 x8, g+2 x8, g+3 x8], for vpermw of a 16 x i16 scale vector.
QZ_INLINE __m512i quarter_index(int g) {
  return _mm512_set_epi64(i16x4(g + 3), i16x4(g + 3), i16x4(g + 2), i16x4(g + 2), i16x4(g + 1),
                          i16x4(g + 1), i16x4(g), i16x4(g));
}

QZ_INLINE __m512i load512(const uint8_t* p) { return _mm512_loadu_si512(p); }

QZ_INLINE __m512i broadcast256(const uint8_t* p) { return _mm512_broadcast_i64x4(load256(p)); }

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

// R rows (row_stride apart) against Nt activation rows, out[r * out_row_stride + t]: each
// (row, activation) pair the same operations in the same order whatever R, so a group of
// rows gives each row's own bits.
template <int R, int Nt>
QZ_INLINE void q4_0_x4(const uint8_t* w, size_t row_stride, const ActTile& acts, int64_t blocks, float* out,
                       int64_t out_row_stride) {
  __m512 acc[R][Nt];
  __m256 tail[R][Nt];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < Nt; ++t) {
      acc[r][t] = _mm512_setzero_ps();
      tail[r][t] = _mm256_setzero_ps();
    }
  }
  const __m512i low_mask = _mm512_set1_epi8(0x0F);
  // f32 lanes 4i..4i+3 take the scale of block i
  const __m512i spread = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  const int64_t groups = blocks / 4;
  for (int64_t g = 0; g < groups; ++g) {
    for (int r = 0; r < R; ++r) {
      const uint8_t* wb = w + static_cast<size_t>(r) * row_stride + static_cast<size_t>(g) * 4 * 18;
      prefetch_ahead(wb, 72);
      __m512i q = _mm512_castsi128_si512(load128(wb + 2));
      q = _mm512_inserti32x4(q, load128(wb + 20), 1);
      q = _mm512_inserti32x4(q, load128(wb + 38), 2);
      q = _mm512_inserti32x4(q, load128(wb + 56), 3);
      const __m512i lo = _mm512_and_si512(q, low_mask);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), low_mask);
      uint16_t h[4];
      for (int i = 0; i < 4; ++i) std::memcpy(&h[i], wb + 18 * i, 2);
      const __m128 dw = _mm_cvtph_ps(_mm_set_epi16(0, 0, 0, 0, static_cast<short>(h[3]), static_cast<short>(h[2]),
                                                   static_cast<short>(h[1]), static_cast<short>(h[0])));
      for (int t = 0; t < Nt; ++t) {
        const uint8_t* p = acts.prepared[t] + static_cast<size_t>(g) * kQ4Group;
        __m512i prod = _mm512_dpbusd_epi32(load512(p + 128), lo, load512(p));
        prod = _mm512_dpbusd_epi32(prod, hi, load512(p + 64));
        const __m128 s = _mm_mul_ps(dw, _mm_loadu_ps(acts.scales[t] + 4 * g));
        const __m512 scale = _mm512_permutexvar_ps(spread, _mm512_zextps128_ps512(s));
        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(prod), scale, acc[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int64_t b = 4 * groups; b < blocks; ++b) {
      const auto at = static_cast<size_t>(b);
      legacy_block<WQ4_0, Nt>(w + static_cast<size_t>(r) * row_stride + at * 18, acts, at, tail[r]);
    }
    for (int t = 0; t < Nt; ++t) out[r * out_row_stride + t] = simd::hsum512(acc[r][t]) + hsum(tail[r][t]);
  }
}

// q4_0: one row against a tile, or (decode) kRowGroup distant rows against one token, four
// weight streams a thread (see RowTiles).
struct Q4_0X4 {
  template <int Nt>
  struct Tile {
    LOOM_TARGET_AVX512_VNNI static void run(const uint8_t* w, const ActTile& acts, int64_t blocks,
                                            float* out) {
      q4_0_x4<1, Nt>(w, 0, acts, blocks, out, 0);
    }
  };
  LOOM_TARGET_AVX512_VNNI static void decode_group(const uint8_t* w, size_t row_stride, const ActTile& acts,
                                                   int64_t blocks, float* out) {
    q4_0_x4<kRowGroup, 1>(w, row_stride, acts, blocks, out, kMaxTile);
  }
};

// q6_k: one block of one weight row against Nt activation rows.
struct Q6KZ {
  static constexpr size_t kBytes = 210;
  struct Constants {
    // Spelled out so that the members' initializers compile for AVX-512 where the build's
    // own target (-march=native on an AVX2 machine) lacks it.
    QZ_INLINE Constants() {}
    __m512i low_mask = _mm512_set1_epi8(0x0F);
    __m512i high_mask = _mm512_set1_epi8(0x30);
    __m512i up = half_counts(4, 2);    // bits 0-1 / 2-3 of qh -> bits 4-5
    __m512i down = half_counts(0, 2);  // bits 4-5 / 6-7 of qh -> bits 4-5
  };
  template <int Nt>
  QZ_INLINE static void add_block(const uint8_t* wb, const ActTile& acts, int64_t b, const Constants& k,
                                  __m512* acc) {
    constexpr int kOrMasked = 0xF8;  // ternary logic: A | (B & C)
    const size_t at = static_cast<size_t>(b) * kActQ8K;
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
          _mm512_and_si512(l, k.low_mask), _mm512_sllv_epi16(h, k.up), k.high_mask, kOrMasked);
      // elements 64-127: high nibbles + qh bits 4-5 / 6-7
      const __m512i q1 =
          _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(l, 4), k.low_mask),
                                    _mm512_srlv_epi16(h, k.down), k.high_mask, kOrMasked);
      const __m512i s0 = _mm512_permutexvar_epi16(quarter_index(8 * half), scales_z);
      const __m512i s1 = _mm512_permutexvar_epi16(quarter_index(8 * half + 4), scales_z);
      for (int t = 0; t < Nt; ++t) {
        const uint8_t* qa = acts.rows[t] + at + kActQ8KQs + 128 * static_cast<size_t>(half);
        sum_a[t] = _mm512_dpwssd_epi32(sum_a[t], _mm512_maddubs_epi16(q0, load512(qa)), s0);
        sum_b[t] = _mm512_dpwssd_epi32(sum_b[t], _mm512_maddubs_epi16(q1, load512(qa + 64)), s1);
      }
    }
    for (int t = 0; t < Nt; ++t) {
      const uint8_t* ab = acts.rows[t] + at;
      // levels are biased by 32: subtract 32 * sum_g(sc_g * bsum_g)
      const __m256i bias = _mm256_slli_epi32(_mm256_madd_epi16(scales, load256(ab + kActQ8KBsums)), 5);
      const __m512i sum = _mm512_sub_epi32(_mm512_add_epi32(sum_a[t], sum_b[t]), _mm512_zextsi256_si512(bias));
      acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(d * f32_at(ab)), _mm512_cvtepi32_ps(sum), acc[t]);
    }
  }
};

// acc + d da sum - dmin da (mins . bsums) for one weight block against the q8_k
// activation block at `ab` (da its scale): the k-quants with a min (q2_k, q4_k, q5_k).
// The mins term has 8 lanes, zero-extended into the accumulator: its upper lanes add
// exact zeros.
QZ_INLINE __m512 add_block_with_mins(__m512 acc, __m512 d, __m512 dmin, __m512i sum, __m256i mins,
                                     const uint8_t* ab) {
  const __m512 da = _mm512_set1_ps(f32_at(ab));
  const __m256i msum = _mm256_madd_epi16(load256(ab + kActQ8KBsums), mins);
  acc = _mm512_fmadd_ps(_mm512_mul_ps(d, da), _mm512_cvtepi32_ps(sum), acc);
  return _mm512_fnmadd_ps(_mm512_mul_ps(dmin, da), _mm512_cvtepi32_ps(_mm512_zextsi256_si512(msum)), acc);
}

// q2_k and q3_k: per 128 elements (a chunk), 32 quant bytes hold four 2-bit planes (plane
// j: elements 32j..32j+31 of the chunk); q3_k adds bit 4c + j of hmask[l] as the third
// bit of element l of plane j. A zmm takes two planes: the quant bytes (and the hmask)
// broadcast to both halves and shifted per i16 lane (the shifts move no other bit onto
// the ones a byte keeps after the masks), so the activations of the two planes are 64
// contiguous bytes and each (row, activation) block is four vpmaddubsw + vpdpwssd steps
// where the 256-bit kernels take eight. q2_k: 4-bit scales and mins, the mins term
// zero-extended into the accumulator as in the 512-bit q4_k kernel. q3_k: signed 6-bit
// scales (the 256-bit kernel's unpack_scales) and levels biased by 4: the 256-bit
// kernel's bias (4 x sum_g scale_g x bsum_g) is subtracted, zero-extended.
//
// loom_batched_decode (small shape, 2 threads, two alternating rounds on Zen 5) against
// the 256-bit kernels: q2_k decode 449-478 against 373-422 tokens/s, B = 8 675-854
// against 673-737, prefill 1254-1306 against 1063-1108; q3_k (the vector scale unpacking
// in both) decode 535 against 349-353, B = 8 844-954 against 645-681, prefill 1405-1619
// against 918-1052. In cache (one thread): q2_k 60-63 against 44-46 Gelem/s, q3_k 52.7
// against 30.5. Written as RowTiles' block step: one block of one row against Nt
// activation rows.
template <bool kQ3>
struct KPlanesZ {
  static constexpr size_t kBytes = kQ3 ? 110 : 84;
  static constexpr size_t kQs = kQ3 ? 32 : 16;
  struct Constants {
    // Spelled out so that the members' initializers compile for AVX-512 where the build's
    // own target (-march=native on an AVX2 machine) lacks it.
    QZ_INLINE Constants() {}
    __m512i three = _mm512_set1_epi8(3);
    __m512i four = _mm512_set1_epi8(4);
    __m128i low_mask = _mm_set1_epi8(0x0F);
  };

  template <int Nt>
  QZ_INLINE static void add_block(const uint8_t* wb, const ActTile& acts, int64_t b, const Constants& k,
                                  __m512* acc) {
    const size_t at = static_cast<size_t>(b) * kActQ8K;
    __m256i scales;  // i16
    [[maybe_unused]] __m256i mins;
    [[maybe_unused]] __m512i hmask;
    if constexpr (kQ3) {
      scales = Q3K::unpack_scales(wb + 96);
      hmask = broadcast256(wb);
    } else {
      const __m128i packed = load128(wb);
      scales = _mm256_cvtepu8_epi16(_mm_and_si128(packed, k.low_mask));
      mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), k.low_mask));
    }
    const __m512i scales_z = _mm512_zextsi256_si512(scales);
    __m512i sum[Nt];
    for (int t = 0; t < Nt; ++t) sum[t] = _mm512_setzero_si512();
    for (int chunk = 0; chunk < 2; ++chunk) {
      const __m512i raw = broadcast256(wb + kQs + 32 * static_cast<size_t>(chunk));
      for (int pair = 0; pair < 2; ++pair) {
        const int j = 2 * pair;  // planes j and j + 1
        __m512i q = _mm512_and_si512(_mm512_srlv_epi16(raw, half_counts(2 * j, 2 * j + 2)), k.three);
        if constexpr (kQ3) {
          // bit 4 * chunk + plane of each hmask byte onto bit 2
          const int hb = 4 * chunk + j;
          const __m512i high = hb >= 2 ? _mm512_srlv_epi16(hmask, half_counts(hb - 2, hb - 1))
                                       : _mm512_sllv_epi16(hmask, half_counts(2 - hb, 1 - hb));
          q = _mm512_ternarylogic_epi32(q, high, k.four, 0xF8);  // q | (high & 4)
        }
        const __m512i s = _mm512_permutexvar_epi16(quarter_index(2 * (4 * chunk + j)), scales_z);
        for (int t = 0; t < Nt; ++t) {
          const uint8_t* qa =
              acts.rows[t] + at + kActQ8KQs + 128 * static_cast<size_t>(chunk) + 32 * static_cast<size_t>(j);
          sum[t] = _mm512_dpwssd_epi32(sum[t], _mm512_maddubs_epi16(q, load512(qa)), s);
        }
      }
    }
    if constexpr (kQ3) {
      const float d = f16(wb + 108);
      for (int t = 0; t < Nt; ++t) {
        const uint8_t* ab = acts.rows[t] + at;
        const __m256i bias = _mm256_slli_epi32(_mm256_madd_epi16(scales, load256(ab + kActQ8KBsums)), 2);
        const __m512i total = _mm512_sub_epi32(sum[t], _mm512_zextsi256_si512(bias));
        acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(d * f32_at(ab)), _mm512_cvtepi32_ps(total), acc[t]);
      }
    } else {
      const __m512 d = _mm512_set1_ps(f16(wb + 80));
      const __m512 dmin = _mm512_set1_ps(f16(wb + 82));
      for (int t = 0; t < Nt; ++t) acc[t] = add_block_with_mins(acc[t], d, dmin, sum[t], mins, acts.rows[t] + at);
    }
  }
};

// q8_0 with two blocks per zmm, kRowGroup rows (or one) against a tile of activations.
//
// The bits are those of the 256-bit Legacy<WQ8_0> kernel: its per-row even / odd block
// accumulators are this kernel's lanes 0-7 / 8-15, each block's eight i32 lane sums are
// the same exact integers, each is converted and added with the same FMA of the same
// rounded dw * da product, and hsum512 adds lane i to lane i + 8 (even + odd) before the
// 256-bit tree Legacy ends with. A trailing odd block goes to lanes 0-7 (the even set);
// its lanes 8-15 add exact zeros, which change no accumulator (never -0: it starts at
// +0, and a round-to-nearest sum is -0 only when both addends are).
//
// The signed x signed block dot is one VPDPBUSD: activations are stored as a + 128
// (unsigned) by the preparation, and the accumulator starts at -128 * (sum of the four
// weights of each lane), computed once per weight block for all the tile's activations,
// where the 256-bit kernel spends a sign instruction per (block, activation).
constexpr size_t kQ8Pair = 128;  // prepared: 64 bytes of a + 128, then 16 f32 of da

size_t prepared_q8_0_pairs_bytes(int64_t blocks) { return static_cast<size_t>((blocks + 1) / 2) * kQ8Pair; }

void prepare_q8_0_pairs(const uint8_t* row, const float* scales, int64_t blocks, uint8_t* out) {
  for (int64_t p = 0; p < (blocks + 1) / 2; ++p, out += kQ8Pair) {
    for (int64_t h = 0; h < 2; ++h) {
      const int64_t b = 2 * p + h;
      uint8_t* quants = out + 32 * h;
      float* da = reinterpret_cast<float*>(out + 64) + 8 * h;
      if (b >= blocks) {  // padding: a = 0, da = 0
        std::memset(quants, 128, 32);
        std::fill(da, da + 8, 0.0f);
        continue;
      }
      const uint8_t* qs = row + static_cast<size_t>(b) * kActQ8_0 + 2;
      for (int j = 0; j < 32; ++j) quants[j] = static_cast<uint8_t>(static_cast<int8_t>(qs[j]) + 128);
      std::fill(da, da + 8, scales[b]);
    }
  }
}

template <int R, int Nt>
QZ_INLINE void q8_0_pairs(const uint8_t* w, size_t row_stride, const ActTile& acts, int64_t blocks,
                          float* out, int64_t out_row_stride) {
  __m512 acc[R][Nt];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < Nt; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  const __m512i k128 = _mm512_set1_epi8(static_cast<char>(0x80));
  const int64_t pairs = (blocks + 1) / 2;
  for (int64_t p = 0; p < pairs; ++p) {
    const bool whole = 2 * p + 1 < blocks;
    __m512i a[Nt];
    __m512 da[Nt];
    for (int t = 0; t < Nt; ++t) {
      const uint8_t* ap = acts.prepared[t] + static_cast<size_t>(p) * kQ8Pair;
      a[t] = load512(ap);
      da[t] = _mm512_loadu_ps(reinterpret_cast<const float*>(ap + 64));
      asm("" : "+v"(a[t]), "+v"(da[t]));  // keep them in registers for every row
    }
    for (int r = 0; r < R; ++r) {
      const uint8_t* wb = w + static_cast<size_t>(r) * row_stride + static_cast<size_t>(2 * p) * 34;
      prefetch_ahead(wb, 68);
      __m512i q = _mm512_castsi256_si512(load256(wb + 2));
      __m256 dw_hi = _mm256_setzero_ps();
      if (whole) {
        q = _mm512_inserti64x4(q, load256(wb + 36), 1);
        dw_hi = _mm256_set1_ps(f16(wb + 34));
      }
      const __m512 dw = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(f16(wb))), dw_hi, 1);
      const __m512i bias = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), k128, q));
      for (int t = 0; t < Nt; ++t) {
        const __m512i prod = _mm512_dpbusd_epi32(bias, a[t], q);
        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(prod), _mm512_mul_ps(dw, da[t]), acc[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < Nt; ++t) out[r * out_row_stride + t] = simd::hsum512(acc[r][t]);
  }
}

struct Q8_0Pairs {
  template <int Nt>
  struct Tile {
    LOOM_TARGET_AVX512_VNNI static void run(const uint8_t* w, const ActTile& acts, int64_t blocks, float* out) {
      q8_0_pairs<1, Nt>(w, 0, acts, blocks, out, 0);
    }
  };
  template <int Nt>
  struct Group {
    LOOM_TARGET_AVX512_VNNI static void run(const uint8_t* w, size_t row_stride, const ActTile& acts,
                                            int64_t blocks, float* out) {
      q8_0_pairs<kRowGroup, Nt>(w, row_stride, acts, blocks, out, kMaxTile);
    }
  };
};

// q4_k and q5_k with 512-bit products, one row against a tile of activations.
//
// A block's 128 quant bytes are two zmm loads; zmm h (bytes 64h..64h+63) holds groups
// 4h and 4h+2 in its low nibbles and 4h+1 and 4h+3 in its high nibbles (a 32-byte pair
// keeps group 2p low and 2p+1 high). The activations are rearranged once per dot_rows
// call into that order (prepare_k4_z), so each (row, activation) block is four
// vpmaddubsw + vpdpwssd steps, the group scales spread over the i16 lanes by vpermw, where
// the 256-bit kernel takes eight. q5_k's fifth bit (bit g of qh[l] for element l of
// group g) comes from the 32 qh bytes broadcast to both halves, shifted per i16 lane so
// the bit of each half's group lands on bit 4 (the i16 shifts carry no other bit of a
// byte onto another byte's bit 4). The mins term is the 256-bit kernel's (bsums x
// mins), zero-extended into the same accumulator: its upper lanes add exact zeros.
//
// Measured on Zen 5 (loom_batched_decode --dtype q4_k, small shape, 2 threads, three
// alternating rounds): decode 312-352 tokens/s where the 256-bit kernel gave 302-315, and
// 667-877 at B = 8 against 579-608; q5_k 292-415 against 240-345, and 603-800 at B = 8
// against 421-626. Four distant rows at once (as q8_0 runs) were faster in cache but
// slower streaming from memory then (q4_k: 286-303 tokens/s); on the Zen 5 machines of
// 2026-12-05 four rows a thread decode q4_k and q6_k faster and q5_k slower (RowTiles).
// The six-bit scales and mins unpack in vector registers (eleven instructions, where the
// scalar unpacking and its moves into vectors took about twenty): in cache 58.8 against
// 48-50 Gelem/s for q4_k, and loom bench on the small q4_k GGUF (2 threads, three
// alternating rounds) decode 403-521 against 346-457 tokens/s, prefill 1121-1574 against
// 987-1339.
constexpr size_t kK4Prepared = 256;  // per block: the 256 activation quants, kernel order

size_t prepared_k4_z_bytes(int64_t blocks) { return static_cast<size_t>(blocks) * kK4Prepared; }

void prepare_k4_z(const uint8_t* row, const float*, int64_t blocks, uint8_t* out) {
  // Source group of each 32-byte slot of a prepared block.
  static constexpr int kSlotGroup[8] = {0, 2, 1, 3, 4, 6, 5, 7};
  for (int64_t b = 0; b < blocks; ++b, out += kK4Prepared) {
    const uint8_t* qs = row + static_cast<size_t>(b) * kActQ8K + kActQ8KQs;
    for (int slot = 0; slot < 8; ++slot) std::memcpy(out + 32 * slot, qs + 32 * kSlotGroup[slot], 32);
  }
}

// One q4_k / q5_k block of one weight row, unpacked for the products: scales and mins
// as vpermw spreads them, the quants as nibble planes (q5_k's fifth bit added).
template <bool kFifthBit>
struct K4Block {
  static constexpr size_t kBytes = kFifthBit ? 176 : 144;
  __m512 d, dmin;
  __m256i mins;  // [m0, m0, m1, m1, ..., m7, m7] as i16: one min per pair of 16-element bsums
  __m512i lo[2], hi[2], s_lo[2], s_hi[2];

  // The loop-invariant vectors the unpacking uses, built once per product.
  struct Constants {
    // Spelled out so that the members' initializers compile for AVX-512 where the build's
    // own target (-march=native on an AVX2 machine) lacks it.
    QZ_INLINE Constants() {}
    __m512i low_mask = _mm512_set1_epi8(0x0F);
    // vpermw indices: i16 lanes 0-15 take scale a, lanes 16-31 scale b
    __m512i lo_index[2] = {half_counts(0, 2), half_counts(4, 6)};
    __m512i hi_index[2] = {half_counts(1, 3), half_counts(5, 7)};
  };

  QZ_INLINE K4Block(const uint8_t* wb, const Constants& k) {
    constexpr size_t kQs = kFifthBit ? 48 : 16;  // q5_k: qh[32] at 16
    d = _mm512_set1_ps(f16(wb));
    dmin = _mm512_set1_ps(f16(wb + 2));
    // The 8 six-bit scales and mins (unpack_k4_scales' values) in vector registers:
    // bytes 0-7 the scales, 8-15 the mins.
    const __m128i packed = load128(wb + 4);  // 12 bytes used; the quants follow
    const __m128i low_bits = _mm_and_si128(
        _mm_srlv_epi32(_mm_shuffle_epi32(packed, _MM_SHUFFLE(2, 1, 2, 0)), _mm_set_epi32(4, 0, 0, 0)),  // s0 s2 s1 s2>>4
        _mm_set_epi32(0x0F0F0F0F, 0x3F3F3F3F, 0x0F0F0F0F, 0x3F3F3F3F));
    const __m128i high_bits = _mm_and_si128(_mm_srli_epi32(_mm_shuffle_epi32(packed, _MM_SHUFFLE(1, 1, 0, 0)), 2),
                                            _mm_set_epi32(0x30303030, 0, 0x30303030, 0));
    const __m128i sm = _mm_or_si128(low_bits, high_bits);  // [sc 0-3, sc 4-7, m 0-3, m 4-7]
    const __m512i sc = _mm512_zextsi128_si512(_mm_cvtepu8_epi16(sm));
    mins = _mm256_cvtepu8_epi16(
        _mm_shuffle_epi8(sm, _mm_set_epi8(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8)));
    for (int h = 0; h < 2; ++h) {
      const __m512i raw = load512(wb + kQs + 64 * static_cast<size_t>(h));
      lo[h] = _mm512_and_si512(raw, k.low_mask);
      hi[h] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), k.low_mask);
      s_lo[h] = _mm512_permutexvar_epi16(k.lo_index[h], sc);
      s_hi[h] = _mm512_permutexvar_epi16(k.hi_index[h], sc);
    }
    if constexpr (kFifthBit) {
      // Groups (low half, high half): lo[0] 0 / 2, hi[0] 1 / 3, lo[1] 4 / 6, hi[1] 5 / 7.
      const __m512i bit4 = _mm512_set1_epi8(0x10);
      constexpr int kOrMasked = 0xF8;  // ternary logic: A | (B & C)
      const __m512i qh = broadcast256(wb + 16);
      lo[0] = _mm512_ternarylogic_epi32(lo[0], _mm512_sllv_epi16(qh, half_counts(4, 2)), bit4, kOrMasked);
      hi[0] = _mm512_ternarylogic_epi32(hi[0], _mm512_sllv_epi16(qh, half_counts(3, 1)), bit4, kOrMasked);
      lo[1] = _mm512_ternarylogic_epi32(lo[1], _mm512_srlv_epi16(qh, half_counts(0, 2)), bit4, kOrMasked);
      hi[1] = _mm512_ternarylogic_epi32(hi[1], _mm512_srlv_epi16(qh, half_counts(1, 3)), bit4, kOrMasked);
    }
  }

  // acc plus this block against one activation block: `qa` its prepared quants
  // (prepare_k4_z), `ab` its q8_k block.
  QZ_INLINE __m512 add_to(__m512 acc, const uint8_t* qa, const uint8_t* ab) const {
    __m512i sum = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_maddubs_epi16(lo[0], load512(qa)), s_lo[0]);
    sum = _mm512_dpwssd_epi32(sum, _mm512_maddubs_epi16(hi[0], load512(qa + 64)), s_hi[0]);
    sum = _mm512_dpwssd_epi32(sum, _mm512_maddubs_epi16(lo[1], load512(qa + 128)), s_lo[1]);
    sum = _mm512_dpwssd_epi32(sum, _mm512_maddubs_epi16(hi[1], load512(qa + 192)), s_hi[1]);
    return add_block_with_mins(acc, d, dmin, sum, mins, ab);
  }
};

// q4_k / q5_k: one block of one weight row against Nt activation rows.
template <bool kFifthBit>
struct K4Rows {
  static constexpr size_t kBytes = K4Block<kFifthBit>::kBytes;
  using Constants = typename K4Block<kFifthBit>::Constants;
  template <int Nt>
  QZ_INLINE static void add_block(const uint8_t* wb, const ActTile& acts, int64_t b, const Constants& k,
                                  __m512* acc) {
    const K4Block<kFifthBit> block(wb, k);
    for (int t = 0; t < Nt; ++t) {
      acc[t] = block.add_to(acc[t], acts.prepared[t] + static_cast<size_t>(b) * kK4Prepared,
                            acts.rows[t] + static_cast<size_t>(b) * kActQ8K);
    }
  }
};

// The tiles of a kernel K that works a block of one row at a time (K::kBytes a block,
// K::Constants built once, K::add_block<Nt>(wb, acts, b, constants, acc) adding block b
// of the row at wb against Nt activation rows into acc[0..Nt)): one row against a tile,
// and kRowGroup distant rows (row_stride apart) for one token, interleaved a block at a
// time, so decode reads kRowGroup weight streams a thread where one row reads one. Each
// row's sums are the one-row tile's, in the same order, so the bits are too. Wider tiles
// have no group (register_group_decode): side by side their accumulators would not fit
// the registers, so dot_rows runs their rows one at a time. Decode on Zen 5,
// `loom_ab_builds --repack off` (row-major weights), four rows against one: q4_k small
// 1.09-1.43x, 1B 1.24-1.30x, q6_k 1.04-1.29x, q2_k 1.18x; q5_k 0.84-0.91x and q3_k
// 0.87-0.91x, so they register no group (docs/quantization.md).
template <class K>
struct RowTiles {
  template <int Nt>
  struct Tile {
    LOOM_TARGET_AVX512_VNNI static void run(const uint8_t* w, const ActTile& acts, int64_t blocks, float* out) {
      const typename K::Constants k;
      __m512 acc[Nt];
      for (int t = 0; t < Nt; ++t) acc[t] = _mm512_setzero_ps();
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* wb = w + static_cast<size_t>(b) * K::kBytes;
        prefetch_ahead(wb, K::kBytes);
        K::template add_block<Nt>(wb, acts, b, k, acc);
      }
      for (int t = 0; t < Nt; ++t) out[t] = simd::hsum512(acc[t]);
    }
  };
  LOOM_TARGET_AVX512_VNNI static void decode_group(const uint8_t* w, size_t row_stride, const ActTile& acts,
                                                   int64_t blocks, float* out) {
    const typename K::Constants k;
    __m512 acc[kRowGroup];
    for (int r = 0; r < kRowGroup; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
      for (int r = 0; r < kRowGroup; ++r) {
        const uint8_t* wb = w + r * row_stride + static_cast<size_t>(b) * K::kBytes;
        prefetch_ahead(wb, K::kBytes);
        K::template add_block<1>(wb, acts, b, k, &acc[r]);
      }
    }
    for (int r = 0; r < kRowGroup; ++r) out[r * kMaxTile] = simd::hsum512(acc[r]);
  }
};

#undef QZ_INLINE

KernelSet make_set() {
  KernelSet set;
  register_shared_kernels(set);
  register_tiles<Q8_0Pairs::Tile>(set, DType::q8_0);
  register_group_tiles<Q8_0Pairs::Group>(set, DType::q8_0);
  set.prepare[static_cast<size_t>(DType::q8_0)] = {prepared_q8_0_pairs_bytes, prepare_q8_0_pairs};
  register_tiles<Q4_0X4::Tile>(set, DType::q4_0);
  register_group_decode(set, DType::q4_0, Q4_0X4::decode_group);
  set.prepare[static_cast<size_t>(DType::q4_0)] = {prepared_q4_0_x4_bytes, prepare_q4_0_x4};
  register_tiles<RowTiles<Q6KZ>::Tile>(set, DType::q6_k);
  register_group_decode(set, DType::q6_k, RowTiles<Q6KZ>::decode_group);
  register_tiles<RowTiles<KPlanesZ<false>>::Tile>(set, DType::q2_k);
  register_group_decode(set, DType::q2_k, RowTiles<KPlanesZ<false>>::decode_group);
  // q3_k keeps one row a stream: four measured 0.90x in decode (RowTiles).
  register_tiles<RowTiles<KPlanesZ<true>>::Tile>(set, DType::q3_k);
  register_tiles<RowTiles<K4Rows<false>>::Tile>(set, DType::q4_k);
  register_group_decode(set, DType::q4_k, RowTiles<K4Rows<false>>::decode_group);
  set.prepare[static_cast<size_t>(DType::q4_k)] = {prepared_k4_z_bytes, prepare_k4_z};
  // q5_k keeps one row a stream: four measured 0.84-0.91x in decode (RowTiles).
  register_tiles<RowTiles<K4Rows<true>>::Tile>(set, DType::q5_k);
  set.prepare[static_cast<size_t>(DType::q5_k)] = {prepared_k4_z_bytes, prepare_k4_z};
  return set;
}
}  // namespace avx512_family

const KernelSet& avx512_vnni_kernels() noexcept {
  static const KernelSet set = avx512_family::make_set();
  return set;
}

}  // namespace loom::quant::kernels
