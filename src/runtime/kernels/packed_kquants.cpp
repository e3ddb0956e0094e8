#include "runtime/kernels/packed_kquants.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/simd.hpp"
#include "loom/convert.hpp"
#include "loom/cpu.hpp"
#include "loom/error.hpp"
#include "runtime/kernels/linear.hpp"
#include "runtime/kernels/packed_panels.hpp"
#include "runtime/kernels/quant_dot.hpp"
#include "tensor/packing.hpp"

namespace loom::kernels {

namespace {

constexpr int64_t kPanelRows = kPackedPanelRows;
constexpr int64_t kBlock = 256;
// A q8_k activation block: f32 d, 256 x i8 quants, 16 x i16 sums of 16.
constexpr int64_t kActBlockBytes = 292;
constexpr int64_t kActQuants = 4;
constexpr int64_t kActSums = 4 + 256;

// One call's quantized activations: token t's q8_k blocks at blocks + t * row_bytes, each
// block's scale at da[t * nb + b], and its 32-element sub-block sums for q4_k's mins, as
// the i16 pairs VPDPWSSD takes: mins[(t * nb + b) * 4 + k] = sum(2k) | sum(2k + 1) << 16.
// (q6_k's, q3_k's and q2_k's scales pair with q8_k's own sums of 16, read from the blocks.)
struct Acts {
  const uint8_t* blocks;
  int64_t row_bytes;
  const float* da;
  const int32_t* mins;
  int64_t nb;

  const uint8_t* block(int64_t t, int64_t b) const { return blocks + t * row_bytes + b * kActBlockBytes; }
  int32_t sum_pair(int64_t t, int64_t b, int k) const {  // (bsums[2k], bsums[2k + 1])
    int32_t pair;
    std::memcpy(&pair, block(t, b) + kActSums + 4 * k, 4);
    return pair;
  }
};

struct Weights {
  const uint8_t* base;
  int64_t panel_bytes;
  int64_t group_bytes;
  int64_t nb;
  int64_t rows;

  const uint8_t* group(int64_t panel, int64_t block) const { return base + panel * panel_bytes + block * group_bytes; }
};

#define PK_INLINE LOOM_TARGET_AVX512_VNNI __attribute__((always_inline)) inline
#define PKA_INLINE LOOM_TARGET_AVX2 __attribute__((always_inline)) inline

// Plain loads, callable from the VNNI and the AVX2 tiles alike.
LOOM_TARGET_AVX2 __attribute__((always_inline)) inline __m128i load64(const uint8_t* p) {
  return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
}
LOOM_TARGET_AVX2 __attribute__((always_inline)) inline __m128i load128(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}
LOOM_TARGET_AVX2 __attribute__((always_inline)) inline __m256i load256(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

template <int P, int T>
PK_INLINE void store_tile(const Weights& w, int64_t p0, int64_t ps, int64_t t0, __m512 (&acc)[P][T], float* y, int64_t ys) {
  _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
    const int64_t row0 = (p0 + p * ps) * kPanelRows;
    const int64_t valid = std::min<int64_t>(kPanelRows, w.rows - row0);
    const __mmask16 keep = static_cast<__mmask16>((1u << valid) - 1u);
    _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) {
      _mm512_mask_storeu_ps(y + (t0 + t) * ys + row0, keep, acc[p][t]);
    }
  }
}

// The AVX2 tiles of the formats below (defined after them), which each format names.
template <class F>
struct Avx2NibbleK;
template <class Bits>
struct Avx2SixteenK;

// ---- q4_k_x16 and q5_k_x16 (tensor/packing.hpp): d, dmin, scales and mins as bytes,
// nibble vectors; q5_k's fifth bits as one 64-bit mask per vector and nibble half ----
//
// Per row and block the integer sums are sum over sub-blocks s of scale[s] * (sum of
// value * activation) and sum over s of min[s] * (sum of activations), and
// acc = fma(isum, d * da, acc) - msum * dmin * da. A value is its nibble (0..15), plus 16
// where q5_k's fifth bit is set: unsigned either way, as VPDPBUSD wants.
template <class Layout, Packing kPacking, DType kDtype, bool kFifthBit>
struct NibbleK {
  static constexpr Packing packing = kPacking;
  static constexpr DType dtype = kDtype;
  using L = Layout;
  using Avx2 = Avx2NibbleK<NibbleK>;
  static constexpr bool kFifthBitValues = kFifthBit;
  static constexpr int64_t kGroupBytes = L::group;
  static constexpr int64_t kDmin = L::dmin, kScales = L::scales, kMins = L::mins;
  static constexpr int64_t kQuants = L::quant_at(0, 0);  // where a group's quant vectors start
  // Tiles of up to 4 tokens take both nibble halves of a sub-block pair at once
  // (pair_sums); 5 to 8 tokens one half at a time (pair_half_sums), whose registers hold
  // 8 tokens, so a batch of 5-16 tokens takes one or two tiles where it took two to four:
  // each tile over an L2 block of panels past the first reads it again from L2. The
  // small shape's matrices from memory, 2 threads, alternating in one process with tiles
  // of at most 4 (Zen 4, 2026-12-03): q4_k B = 8 1.098, 1.087, 1.082 and 1.123x (up to
  // 581 GOP/s, 64% of the int8 peak), B = 5 1.08, 6 0.99, 7 1.22, 12 0.95, 1.05 and
  // 1.07, 16 1.01-1.03; q5_k B = 8 1.24x. Prefill (128 tokens) in tiles of 8 ran q4_k
  // at 0.96-0.98x (q5_k 1.03x), so products of more than 16 tokens keep tiles of 4.
  static constexpr int kMaxTokens = 8;
  static constexpr int max_tokens(int64_t n_tokens) { return n_tokens > 16 ? 4 : kMaxTokens; }
  static constexpr bool kWideFirst = false;  // balanced tiles (see Tiles32 in packed_blocks32.cpp)
  // Panels a tile runs side by side for T tokens: what the registers hold; decode (T = 1)
  // reads two, two weight streams per thread (see Tiles32 in packed_blocks32.cpp): q4_k
  // pack 1.06x, q5_k pack 1.06x against one (Zen 5, 2026-12-04).
  static constexpr int panels_for(int t) { return t <= 2 ? 2 : 1; }

  // Value l (0..31) of sub-block s of row r.
  static int32_t value(const uint8_t* g, int64_t r, int s, int l) {
    const int nibble = (g[L::quant_at(r, 32 * (s / 2) + l)] >> (4 * (s % 2))) & 0xF;
    if constexpr (!kFifthBit) {
      return nibble;
    } else {
      const uint8_t* mask = g + L::mask_at(s / 2, l / 4) + 8 * (s % 2);
      const int64_t bit = packed_layout::lane_bit(r, l % 4);
      return nibble | (((mask[bit / 8] >> (bit % 8)) & 1) << 4);
    }
  }

  // The scalar family's step for one (row, token, block).
  static float scalar_block(const uint8_t* g, const Acts& a, int64_t r, int64_t t, int64_t b, float acc) {
    const auto* act = reinterpret_cast<const int8_t*>(a.block(t, b) + kActQuants);
    int32_t isum = 0;
    for (int s = 0; s < 8; ++s) {
      int32_t dot = 0;
      for (int l = 0; l < 32; ++l) dot += value(g, r, s, l) * act[32 * s + l];
      isum += static_cast<int32_t>(g[kScales + s * 16 + r]) * dot;
    }
    int32_t msum = 0;
    for (int k = 0; k < 4; ++k) {
      const int32_t pair = a.mins[(t * a.nb + b) * 4 + k];
      msum += static_cast<int32_t>(g[kMins + k * 32 + 2 * r]) * static_cast<int16_t>(pair & 0xFFFF) +
              static_cast<int32_t>(g[kMins + k * 32 + 2 * r + 1]) * static_cast<int16_t>(pair >> 16);
    }
    uint16_t h;
    std::memcpy(&h, g + L::d + 2 * r, 2);
    const float d = f16_to_f32_scalar(h) * a.da[t * a.nb + b];
    std::memcpy(&h, g + kDmin + 2 * r, 2);
    const float dmin = f16_to_f32_scalar(h) * a.da[t * a.nb + b];
    acc = std::fma(static_cast<float>(isum), d, acc);
    return std::fma(-static_cast<float>(msum), dmin, acc);
  }

  // Per block: the sub-block sums times their scales into isum (pair_sums or
  // pair_half_sums), then the mins term and the two FMAs. Tiles of up to 4 tokens take
  // both nibble halves of a sub-block pair at once (lo and hi sums: 5T registers with
  // isum and acc); 5 to 8 tokens one half at a time (3T registers). The same integers
  // either way, added in another order, which no bit sees.
  template <int P, int T>
  PK_INLINE static void tile(const Weights& w, int64_t p0, int64_t ps, const Acts& a, int64_t t0, float* y, int64_t ys) {
    __m512 acc[P][T];
    _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
      _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) acc[p][t] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < w.nb; ++b) {
      const uint8_t* g[P];
      _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) g[p] = w.group(p0 + p * ps, b);
      const uint8_t* act[T];
      _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) act[t] = a.block(t0 + t, b) + kActQuants;
      __m512i isum[P][T];
      _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
        _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) isum[p][t] = _mm512_setzero_si512();
      }
      for (int pair = 0; pair < 4; ++pair) {
        if constexpr (T > 4) {
          pair_half_sums<P, T>(g, act, pair, 0, isum);
          pair_half_sums<P, T>(g, act, pair, 1, isum);
        } else {
          pair_sums<P, T>(g, act, pair, isum);
        }
      }
      _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
        __m512i mk[4];
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; ++k) mk[k] = _mm512_cvtepu8_epi16(load256(g[p] + kMins + k * 32));
        const __m512 dw = _mm512_cvtph_ps(load256(g[p] + L::d));
        const __m512 dmw = _mm512_cvtph_ps(load256(g[p] + kDmin));
        _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) {
          __m512i msum = _mm512_setzero_si512();
          _Pragma("GCC unroll 4") for (int k = 0; k < 4; ++k) {
            msum = _mm512_dpwssd_epi32(msum, mk[k], _mm512_set1_epi32(a.mins[((t0 + t) * w.nb + b) * 4 + k]));
          }
          const __m512 da = _mm512_set1_ps(a.da[(t0 + t) * w.nb + b]);
          acc[p][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[p][t]), _mm512_mul_ps(dw, da), acc[p][t]);
          acc[p][t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_mul_ps(dmw, da), acc[p][t]);
        }
      }
    }
    store_tile<P, T>(w, p0, ps, t0, acc, y, ys);
  }

  // The nibble vectors of sub-block pair `pair`, vector j, as unsigned values: the low
  // (half 0) or high (half 1) nibbles, plus 16 where q5_k's fifth bit is set.
  PK_INLINE static __m512i half_values(const uint8_t* g, int pair, int j, int half) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const __m512i v = _mm512_loadu_si512(g + L::quant_at(0, 32 * pair + 4 * j));
    __m512i u = half == 0 ? _mm512_and_si512(v, low4) : _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
    if constexpr (kFifthBit) {
      uint64_t m;
      std::memcpy(&m, g + L::mask_at(pair, j) + 8 * half, 8);
      u = _mm512_mask_add_epi8(u, _cvtu64_mask64(m), u, _mm512_set1_epi8(0x10));
    }
    return u;
  }

  // Both halves of sub-block pair `pair`: eight VPDPBUSD on the low nibbles and eight on
  // the high ones per panel and token, each half's sums times its sub-block's scales.
  template <int P, int T>
  PK_INLINE static void pair_sums(const uint8_t* const (&g)[P], const uint8_t* const (&act)[T], int pair,
                                  __m512i (&isum)[P][T]) {
    __m512i lo[P][T], hi[P][T];
    _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
      _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) lo[p][t] = hi[p][t] = _mm512_setzero_si512();
    }
    _Pragma("GCC unroll 8") for (int j = 0; j < 8; ++j) {
      __m512i wl[P], wh[P];
      _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
        prefetch_step<T, kGroupBytes, 32, _MM_HINT_T0, kQuants>(g[p], g[p] + L::quant_at(0, 32 * pair + 4 * j),
                                                                pair * 8 + j);
        wl[p] = half_values(g[p], pair, j, 0);
        wh[p] = half_values(g[p], pair, j, 1);
      }
      _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) {
        int32_t four_lo, four_hi;
        std::memcpy(&four_lo, act[t] + pair * 64 + 4 * j, 4);
        std::memcpy(&four_hi, act[t] + pair * 64 + 32 + 4 * j, 4);
        const __m512i al = _mm512_set1_epi32(four_lo);
        const __m512i ah = _mm512_set1_epi32(four_hi);
        _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
          lo[p][t] = _mm512_dpbusd_epi32(lo[p][t], wl[p], al);
          hi[p][t] = _mm512_dpbusd_epi32(hi[p][t], wh[p], ah);
        }
      }
    }
    _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
      const __m512i sl = _mm512_cvtepu8_epi32(load128(g[p] + kScales + (2 * pair) * 16));
      const __m512i sh = _mm512_cvtepu8_epi32(load128(g[p] + kScales + (2 * pair + 1) * 16));
      _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) {
        isum[p][t] = _mm512_add_epi32(isum[p][t], _mm512_add_epi32(_mm512_mullo_epi32(lo[p][t], sl),
                                                                   _mm512_mullo_epi32(hi[p][t], sh)));
      }
    }
  }

  // One half of sub-block pair `pair`: eight VPDPBUSD per panel and token, times the
  // sub-block's scales.
  template <int P, int T>
  PK_INLINE static void pair_half_sums(const uint8_t* const (&g)[P], const uint8_t* const (&act)[T], int pair,
                                       int half, __m512i (&isum)[P][T]) {
    __m512i dot[P][T];
    _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
      _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) dot[p][t] = _mm512_setzero_si512();
    }
    _Pragma("GCC unroll 8") for (int j = 0; j < 8; ++j) {
      __m512i wv[P];
      _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
        if (half == 0) {
          prefetch_step<T, kGroupBytes, 32, _MM_HINT_T0, kQuants>(g[p], g[p] + L::quant_at(0, 32 * pair + 4 * j),
                                                                  pair * 8 + j);
        }
        wv[p] = half_values(g[p], pair, j, half);
      }
      _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) {
        int32_t four;
        std::memcpy(&four, act[t] + pair * 64 + 32 * half + 4 * j, 4);
        const __m512i av = _mm512_set1_epi32(four);
        _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) dot[p][t] = _mm512_dpbusd_epi32(dot[p][t], wv[p], av);
      }
    }
    _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
      const __m512i sc = _mm512_cvtepu8_epi32(load128(g[p] + kScales + (2 * pair + half) * 16));
      _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) {
        isum[p][t] = _mm512_add_epi32(isum[p][t], _mm512_mullo_epi32(dot[p][t], sc));
      }
    }
  }
};

using Q4K = NibbleK<packed_layout::Q4K, Packing::q4_k_x16, DType::q4_k, false>;
using Q5K = NibbleK<packed_layout::Q5K, Packing::q5_k_x16, DType::q5_k, true>;

// ---- AVX2 tiles of q4_k_x16 and q5_k_x16: each panel as two halves of 8 rows ----
//
// As the 32-element formats' AVX2 tiles (packed_blocks32.cpp): a sub-block's 8 quant
// vectors meet their activations in VPMADDUBSW, 16-bit sums that fit (8 x 2 x 15 x 127
// for nibbles; q5_k's values up to 31 widen after every 4 vectors), and one VPMADDWD
// against the rows' scales (each lane's two 16-bit halves the row's 6-bit scale) widens
// them and weighs them at once. The mins' sums take a VPMADDWD each, as VPDPWSSD's do in
// the VNNI tiles; the integers and the two FMAs a block are the scalar family's, so the
// same bits. The passes over the panels' halves are Avx2KTiles'.
// What the k-quant AVX2 tiles share (Avx2NibbleK, Avx2SixteenK: `Derived`): up to 4
// tokens, balanced tiles, and the pass over the blocks. Tiles of up to
// Derived::kBothHalvesTokens take both halves of their panels in one pass, so the memory
// stream never waits for a second pass over lines already in cache; wider tiles take the
// panels' rows 0-7 over the whole row, then rows 8-15, their accumulators in registers.
// A pass holds Q = P x kHalves half panels side by side, half panel q being half kH0 +
// q % kHalves (rows 8h..8h+7) of panel q / kHalves, and Derived::block<Q, T, kH0,
// kHalves> adds one block of them into the accumulators (only the first half of each
// panel prefetches), its integer sums in `isum`, zeroed for it.
template <class Derived>
struct Avx2KTiles {
  static constexpr int kMaxTokens = 4;
  static constexpr int max_tokens(int64_t) { return kMaxTokens; }
  static constexpr bool kWideFirst = false;

  template <int P, int T>
  PKA_INLINE static void tile(const Weights& w, int64_t p0, int64_t ps, const Acts& a, int64_t t0, float* y,
                              int64_t ys) {
    if constexpr (T <= Derived::kBothHalvesTokens) {
      halves_tile<P, T, 0, 2>(w, p0, ps, a, t0, y, ys);
    } else {
      halves_tile<P, T, 0, 1>(w, p0, ps, a, t0, y, ys);
      halves_tile<P, T, 1, 1>(w, p0, ps, a, t0, y, ys);
    }
  }

  template <int P, int T, int kH0, int kHalves>
  PKA_INLINE static void halves_tile(const Weights& w, int64_t p0, int64_t ps, const Acts& a, int64_t t0, float* y,
                                     int64_t ys) {
    constexpr int Q = P * kHalves;
    __m256 acc[Q][T];
    _Pragma("GCC unroll 8") for (int q = 0; q < Q; ++q) {
      _Pragma("GCC unroll 4") for (int t = 0; t < T; ++t) acc[q][t] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < w.nb; ++b) {
      const uint8_t* g[Q];
      _Pragma("GCC unroll 8") for (int q = 0; q < Q; ++q) g[q] = w.group(p0 + q / kHalves * ps, b);
      const uint8_t* act[T];
      _Pragma("GCC unroll 4") for (int t = 0; t < T; ++t) act[t] = a.block(t0 + t, b) + kActQuants;
      __m256i isum[Q][T];
      _Pragma("GCC unroll 8") for (int q = 0; q < Q; ++q) {
        _Pragma("GCC unroll 4") for (int t = 0; t < T; ++t) isum[q][t] = _mm256_setzero_si256();
      }
      Derived::template block<Q, T, kH0, kHalves>(w, g, act, a, t0, b, isum, acc);
    }
    _Pragma("GCC unroll 8") for (int q = 0; q < Q; ++q) {
      const int64_t row0 = (p0 + q / kHalves * ps) * kPanelRows + 8 * (kH0 + q % kHalves);
      _Pragma("GCC unroll 4") for (int t = 0; t < T; ++t) {
        store_half_panel_avx2(y + (t0 + t) * ys + row0, acc[q][t], row0, w.rows);
      }
    }
  }
};

template <class F>
struct Avx2NibbleK : Avx2KTiles<Avx2NibbleK<F>> {
  using L = typename F::L;
  static constexpr int panels_for(int t) { return t == 1 ? 2 : 1; }
  // Both halves in one pass for up to 2 tokens (Avx2KTiles): `loom_ab_builds --repack
  // auto --layouts 4 --threads 2` (AVX2-only EPYC, 2026-12-06), small q4_k, decode b/a
  // against two passes at --batch 1 1.32x, at --batch 2 1.13x; one panel a thread in
  // decode instead of two 0.95x.
  static constexpr int kBothHalvesTokens = 2;
  static constexpr bool kFifthBit = F::kFifthBitValues;
  static constexpr int kIn16 = kFifthBit ? 4 : 8;  // vectors summed in 16 bits

  // Block b of the Q half panels: the sub-blocks' weighed sums, then the mins and the
  // two FMAs.
  template <int Q, int T, int kH0, int kHalves>
  PKA_INLINE static void block(const Weights& w, const uint8_t* const (&g)[Q], const uint8_t* const (&act)[T],
                               const Acts& a, int64_t t0, int64_t b, __m256i (&isum)[Q][T], __m256 (&acc)[Q][T]) {
    for (int s = 0; s < 8; ++s) sub_block<Q, T, kH0, kHalves>(g, act, s, isum);
    _Pragma("GCC unroll 8") for (int q = 0; q < Q; ++q) {
      const int h = kH0 + q % kHalves;
      const __m256 dw = _mm256_cvtph_ps(load128(g[q] + L::d + 16 * h));
      const __m256 dmw = _mm256_cvtph_ps(load128(g[q] + F::kDmin + 16 * h));
      _Pragma("GCC unroll 4") for (int t = 0; t < T; ++t) {
        __m256i msum = _mm256_setzero_si256();
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; ++k) {
          const __m256i mk = _mm256_cvtepu8_epi16(load128(g[q] + F::kMins + k * 32 + 16 * h));
          msum = _mm256_add_epi32(msum,
                                  _mm256_madd_epi16(mk, _mm256_set1_epi32(a.mins[((t0 + t) * w.nb + b) * 4 + k])));
        }
        const __m256 da = _mm256_set1_ps(a.da[(t0 + t) * w.nb + b]);
        acc[q][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[q][t]), _mm256_mul_ps(dw, da), acc[q][t]);
        acc[q][t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(dmw, da), acc[q][t]);
      }
    }
  }

  // Sub-block s (nibble half s % 2 of pair s / 2) of the Q half panels (block):
  // its 8 vectors' products, weighed by the rows' scales, into isum. The first half of
  // each panel requests its lines ahead (prefetch_step).
  template <int Q, int T, int kH0, int kHalves>
  PKA_INLINE static void sub_block(const uint8_t* const (&g)[Q], const uint8_t* const (&act)[T], int s,
                                   __m256i (&isum)[Q][T]) {
    const int pair = s / 2, half = s % 2;
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    __m256i sc[Q];
    _Pragma("GCC unroll 8") for (int q = 0; q < Q; ++q) {
      const int h = kH0 + q % kHalves;
      const __m256i s32 = _mm256_cvtepu8_epi32(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(g[q] + F::kScales + s * 16 + 8 * h)));
      sc[q] = _mm256_or_si256(s32, _mm256_slli_epi32(s32, 16));  // the scale in both 16-bit halves
    }
    __m256i sum16[Q][T];
    _Pragma("GCC unroll 8") for (int j = 0; j < 8; ++j) {
      __m256i u[Q];
      _Pragma("GCC unroll 8") for (int q = 0; q < Q; ++q) {
        const int h = kH0 + q % kHalves;
        const uint8_t* at = g[q] + L::quant_at(0, 32 * pair + 4 * j);
        if (h == 0 && half == 0) {
          prefetch_step<T, F::kGroupBytes, 32, _MM_HINT_T0, F::kQuants, kAvx2KQuantDecode>(g[q], at, pair * 8 + j);
        }
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at + 32 * h));
        u[q] = half == 0 ? _mm256_and_si256(v, low4) : _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
        if constexpr (kFifthBit) {
          uint32_t m;
          std::memcpy(&m, g[q] + L::mask_at(pair, j) + 8 * half + 4 * h, 4);
          u[q] = _mm256_or_si256(u[q], fifth_bits_avx2(m));
        }
      }
      _Pragma("GCC unroll 4") for (int t = 0; t < T; ++t) {
        int32_t four;
        std::memcpy(&four, act[t] + 32 * s + 4 * j, 4);
        const __m256i av = _mm256_set1_epi32(four);
        _Pragma("GCC unroll 8") for (int q = 0; q < Q; ++q) {
          const __m256i pairs = _mm256_maddubs_epi16(u[q], av);
          sum16[q][t] = j % kIn16 == 0 ? pairs : _mm256_add_epi16(sum16[q][t], pairs);
          if (j % kIn16 == kIn16 - 1) isum[q][t] = _mm256_add_epi32(isum[q][t], _mm256_madd_epi16(sum16[q][t], sc[q]));
        }
      }
    }
  }
};

// ---- q6_k_x16, q3_k_x16, q2_k_x16 (tensor/packing.hpp): sixteen groups of 16 columns a
// block, one scale per group and row, the values of each half in column chunks ----
//
// Value v (0..255) of a row: half h = v / 128, quarter q = v % 128 / 32, column l = v % 32,
// group 8h + 2q + l / 16. Its stored value u is unsigned (q6_k 0..63, q3_k 0..7, q2_k
// 0..3, as VPDPBUSD wants) and counts as (u - kOffset) times the group's scale (kOffset
// 32, 4, 0), less q2_k's min times dmin. Per row and block the integers are
//   isum = sum over groups g of scale[g] * (sum of u * activation),
//   csum = sum over g of c[g] * bsum[g], c the scale (q6_k, q3_k) or q2_k's min,
// bsum the activations' q8_k sums of 16, and
//   acc = fma(float(isum - kOffset * csum), d * da, acc), or for q2_k
//   acc = fma(float(isum), d * da, acc) - csum * (dmin * da).
//
// Each format says how its bytes give u: `value` one at a time, `quarter` the vector of
// columns 4j..4j+3 of quarter q of half h, sixteen rows a vector.
//
// Scales stored as int8 [group][row] (q6_k's own, q3_k's decoded), which also weigh the
// offset's correction.
template <class Layout>
struct Int8Scales {
  using L = Layout;
  static constexpr bool kMins = false;

  static int32_t scale(const uint8_t* g, int64_t r, int group) { return static_cast<int8_t>(g[L::scales + group * 16 + r]); }
  static int32_t correction(const uint8_t* g, int64_t r, int group) { return scale(g, r, group); }
  PK_INLINE static __m512i scales(const uint8_t* g, int group) {
    return _mm512_cvtepi8_epi32(load128(g + L::scales + group * 16));
  }
  // The correction weights of groups 2k and 2k + 1 side by side per row: the i16 pair of a
  // lane, for VPDPWSSD against the pair of activation sums.
  PK_INLINE static __m512i correction_pairs(const uint8_t* g, int k) {
    const __m128i even = load128(g + L::scales + (2 * k) * 16);
    const __m128i odd = load128(g + L::scales + (2 * k + 1) * 16);
    return _mm512_cvtepi8_epi16(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi8(even, odd)),
                                                        _mm_unpackhi_epi8(even, odd), 1));
  }
  // The AVX2 tiles' forms, for rows 8h8..8h8 + 7: the scale in both 16-bit halves of its
  // row's lane (VPMADDWD weighs a pair sum with it), and the correction pairs.
  PKA_INLINE static __m256i scales_avx2(const uint8_t* g, int group, int h8) {
    const __m256i s = _mm256_cvtepi8_epi32(load64(g + L::scales + group * 16 + 8 * h8));
    return _mm256_or_si256(_mm256_and_si256(s, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(s, 16));
  }
  PKA_INLINE static __m256i correction_pairs_avx2(const uint8_t* g, int k, int h8) {
    const __m128i even = load64(g + L::scales + (2 * k) * 16 + 8 * h8);
    const __m128i odd = load64(g + L::scales + (2 * k + 1) * 16 + 8 * h8);
    return _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(even, odd));
  }
};

struct Q6Bits : Int8Scales<packed_layout::Q6K> {
  static constexpr Packing packing = Packing::q6_k_x16;
  static constexpr DType dtype = DType::q6_k;
  static constexpr int32_t kOffset = 32;
  // Two streams, as the 32-element family (see Tiles32): decode 1.13x one (Zen 5,
  // 2026-12-04; on Zen 4 two streams had measured 0.66-0.81x of the row-major kernel).
  static constexpr int kDecodePanels = 2;

  // u's low four bits are nibble q / 2 of ql[64h + 32(q % 2) + l], its high two bits are
  // bits 2q, 2q + 1 of qh[32h + l].
  static int32_t value(const uint8_t* g, int64_t r, int h, int q, int l) {
    const uint8_t* chunk = g + L::chunk_at(h, l / 4) + r * 4 + l % 4;
    const int low = (chunk[64 * (q % 2)] >> (4 * (q / 2))) & 0xF;
    const int high = (chunk[128] >> (2 * q)) & 3;
    return low | (high << 4);
  }
  PK_INLINE static __m512i quarter(const uint8_t* g, int h, int j, int q) {
    const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
    const uint8_t* chunk = g + L::chunk_at(h, j);
    const __m512i low = _mm512_loadu_si512(chunk + 64 * (q % 2));
    const __m512i C = _mm512_loadu_si512(chunk + 128);
    // Bits 2q, 2q + 1 of C to bits 4, 5 (a 16-bit shift's spill from the next byte
    // lands outside them), then (x & mask) | y in one VPTERNLOG (imm 0xEA).
    const __m512i high = q < 2 ? _mm512_slli_epi16(C, 4 - 2 * q) : _mm512_srli_epi16(C, 2 * q - 4);
    const __m512i nibble = q < 2 ? low : _mm512_srli_epi16(low, 4);
    return _mm512_ternarylogic_epi32(nibble, low4, _mm512_and_si512(high, bits45), 0xEA);
  }
  // The same for rows 8h8..8h8 + 7 (the vectors' 32-byte half h8).
  PKA_INLINE static __m256i quarter_avx2(const uint8_t* g, int h, int j, int q, int h8) {
    const uint8_t* chunk = g + L::chunk_at(h, j) + 32 * h8;
    const __m256i low = load256(chunk + 64 * (q % 2));
    const __m256i C = load256(chunk + 128);
    const __m256i high = q < 2 ? _mm256_sll_epi16(C, _mm_cvtsi32_si128(4 - 2 * q))
                               : _mm256_srl_epi16(C, _mm_cvtsi32_si128(2 * q - 4));
    const __m256i nibble = q < 2 ? low : _mm256_srli_epi16(low, 4);
    return _mm256_or_si256(_mm256_and_si256(nibble, _mm256_set1_epi8(0x0F)),
                           _mm256_and_si256(high, _mm256_set1_epi8(0x30)));
  }
};

// q3_k: u's low two bits are bits 2q, 2q + 1 of qs[32h + l], its third bit is bit 4h + q
// of hmask[l]; the scales are stored decoded (value - 32, int8) as q6_k's.
struct Q3Bits : Int8Scales<packed_layout::Q3K> {
  static constexpr Packing packing = Packing::q3_k_x16;
  static constexpr DType dtype = DType::q3_k;
  static constexpr int32_t kOffset = 4;
  // Two streams: with one, q3_k's decode measured 0.63-1.06x of the row-major kernel
  // against 0.88-1.13x with two (five alternating rounds each).
  static constexpr int kDecodePanels = 2;

  static int32_t value(const uint8_t* g, int64_t r, int h, int q, int l) {
    const int low = (g[L::quant_at(r, 32 * h + l)] >> (2 * q)) & 3;
    const int high = (g[L::hmask_at(r, l)] >> (4 * h + q)) & 1;
    return low | (high << 2);
  }
  PK_INLINE static __m512i quarter(const uint8_t* g, int h, int j, int q) {
    const __m512i three = _mm512_set1_epi8(0x03), four = _mm512_set1_epi8(0x04);
    const uint8_t* qs = g + L::quant_at(0, 32 * h + 4 * j);
    const uint8_t* hm = g + L::hmask_at(0, 4 * j);
    const __m512i Q = _mm512_loadu_si512(qs);
    const __m512i H = _mm512_loadu_si512(hm);
    // Bit b = 4h + q of H to bit 2 (a 16-bit shift's spill from the next byte never
    // lands there), then (x & 3) | y in one VPTERNLOG (imm 0xEA).
    const int b = 4 * h + q;
    const __m512i high = b < 2 ? _mm512_slli_epi16(H, 2 - b) : _mm512_srl_epi16(H, _mm_cvtsi32_si128(b - 2));
    return _mm512_ternarylogic_epi32(_mm512_srli_epi16(Q, 2 * q), three, _mm512_and_si512(high, four), 0xEA);
  }
  PKA_INLINE static __m256i quarter_avx2(const uint8_t* g, int h, int j, int q, int h8) {
    const __m256i Q = load256(g + L::quant_at(0, 32 * h + 4 * j) + 32 * h8);
    const __m256i H = load256(g + L::hmask_at(0, 4 * j) + 32 * h8);
    const int b = 4 * h + q;
    const __m256i high = b < 2 ? _mm256_sll_epi16(H, _mm_cvtsi32_si128(2 - b)) : _mm256_srl_epi16(H, _mm_cvtsi32_si128(b - 2));
    return _mm256_or_si256(_mm256_and_si256(_mm256_srl_epi16(Q, _mm_cvtsi32_si128(2 * q)), _mm256_set1_epi8(0x03)),
                           _mm256_and_si256(high, _mm256_set1_epi8(0x04)));
  }
};

// q2_k: u is bits 2q, 2q + 1 of qs[32h + l]; a scale byte holds the scale (low nibble)
// and the min (high nibble), and the corrections are the mins.
struct Q2Bits {
  static constexpr Packing packing = Packing::q2_k_x16;
  static constexpr DType dtype = DType::q2_k;
  using L = packed_layout::Q2K;
  // One stream: two measured 0.985x on Zen 5 (2026-12-04), where the other k-quants gained.
  static constexpr int kDecodePanels = 1;
  static constexpr bool kMins = true;  // no kOffset: the corrections are the mins

  static int32_t value(const uint8_t* g, int64_t r, int h, int q, int l) {
    return (g[L::quant_at(r, 32 * h + l)] >> (2 * q)) & 3;
  }
  PK_INLINE static __m512i quarter(const uint8_t* g, int h, int j, int q) {
    const uint8_t* qs = g + L::quant_at(0, 32 * h + 4 * j);
    return _mm512_and_si512(_mm512_srli_epi16(_mm512_loadu_si512(qs), 2 * q), _mm512_set1_epi8(0x03));
  }
  static int32_t scale(const uint8_t* g, int64_t r, int group) { return g[L::scales + group * 16 + r] & 0xF; }
  static int32_t correction(const uint8_t* g, int64_t r, int group) { return g[L::scales + group * 16 + r] >> 4; }
  PK_INLINE static __m512i scales(const uint8_t* g, int group) {
    return _mm512_and_si512(_mm512_cvtepu8_epi32(load128(g + L::scales + group * 16)), _mm512_set1_epi32(0xF));
  }
  PK_INLINE static __m512i correction_pairs(const uint8_t* g, int k) {
    const __m128i low4 = _mm_set1_epi8(0x0F);
    const __m128i even = _mm_and_si128(_mm_srli_epi16(load128(g + L::scales + (2 * k) * 16), 4), low4);
    const __m128i odd = _mm_and_si128(_mm_srli_epi16(load128(g + L::scales + (2 * k + 1) * 16), 4), low4);
    return _mm512_cvtepu8_epi16(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi8(even, odd)),
                                                        _mm_unpackhi_epi8(even, odd), 1));
  }
  PKA_INLINE static __m256i quarter_avx2(const uint8_t* g, int h, int j, int q, int h8) {
    const __m256i Q = load256(g + L::quant_at(0, 32 * h + 4 * j) + 32 * h8);
    return _mm256_and_si256(_mm256_srl_epi16(Q, _mm_cvtsi32_si128(2 * q)), _mm256_set1_epi8(0x03));
  }
  PKA_INLINE static __m256i scales_avx2(const uint8_t* g, int group, int h8) {
    const __m256i s =
        _mm256_and_si256(_mm256_cvtepu8_epi32(load64(g + L::scales + group * 16 + 8 * h8)), _mm256_set1_epi32(0xF));
    return _mm256_or_si256(s, _mm256_slli_epi32(s, 16));
  }
  PKA_INLINE static __m256i correction_pairs_avx2(const uint8_t* g, int k, int h8) {
    const __m128i low4 = _mm_set1_epi8(0x0F);
    const __m128i even = _mm_and_si128(_mm_srli_epi16(load64(g + L::scales + (2 * k) * 16 + 8 * h8), 4), low4);
    const __m128i odd = _mm_and_si128(_mm_srli_epi16(load64(g + L::scales + (2 * k + 1) * 16 + 8 * h8), 4), low4);
    return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(even, odd));
  }
};

template <class Bits>
struct SixteenK {
  static constexpr Packing packing = Bits::packing;
  static constexpr DType dtype = Bits::dtype;
  using L = typename Bits::L;
  using Avx2 = Avx2SixteenK<Bits>;
  static constexpr int64_t kGroupBytes = L::group;
  // A tile holds isum, the group's dots and acc for each panel and token (3T registers):
  // up to 8 tokens. Tiles of 8 over tiles of at most 6, the small shape's matrices from
  // memory, 2 threads, alternating in one process (Zen 4, 2026-12-03): q6_k B = 8 1.21,
  // 1.25 and 1.20x, B = 7 1.06, 16 1.13, 128 (prefill) 1.075 and 1.14; q3_k B = 8 1.075,
  // 128 1.03; q2_k B = 8 1.06, 16 1.05, 128 1.056 and 1.085 (B = 12 is 6 + 6 either way:
  // 1.006 and 0.999). Decode (T = 1) reads Bits::kDecodePanels panels side by side (see
  // Tiles32 in packed_blocks32.cpp).
  static constexpr int kMaxTokens = 8;
  static constexpr int max_tokens(int64_t /*n_tokens*/) { return kMaxTokens; }
  static constexpr bool kWideFirst = false;  // balanced tiles: 6 + 2 measured q2_k 0.91x, q6_k / q3_k 1.00x
  static constexpr int panels_for(int t) { return t == 1 ? Bits::kDecodePanels : t <= 3 ? 2 : 1; }

  static float scalar_block(const uint8_t* g, const Acts& a, int64_t r, int64_t t, int64_t b, float acc) {
    const uint8_t* block = a.block(t, b);
    const auto* act = reinterpret_cast<const int8_t*>(block + kActQuants);
    int16_t bsums[16];
    std::memcpy(bsums, block + kActSums, sizeof bsums);
    int32_t isum = 0, csum = 0;
    for (int group = 0; group < 16; ++group) {
      const int h = group / 8, q = group % 8 / 2, half16 = group % 2;
      int32_t dot = 0;
      for (int i = 0; i < 16; ++i) {
        const int l = 16 * half16 + i;
        dot += Bits::value(g, r, h, q, l) * act[128 * h + 32 * q + l];
      }
      isum += Bits::scale(g, r, group) * dot;
      csum += Bits::correction(g, r, group) * bsums[group];
    }
    uint16_t f;
    std::memcpy(&f, g + L::d + 2 * r, 2);
    const float d = f16_to_f32_scalar(f) * a.da[t * a.nb + b];
    if constexpr (Bits::kMins) {
      std::memcpy(&f, g + L::dmin + 2 * r, 2);
      const float dmin = f16_to_f32_scalar(f) * a.da[t * a.nb + b];
      acc = std::fma(static_cast<float>(isum), d, acc);
      return std::fma(-static_cast<float>(csum), dmin, acc);
    } else {
      return std::fma(static_cast<float>(isum - Bits::kOffset * csum), d, acc);
    }
  }

  template <int P, int T>
  PK_INLINE static void tile(const Weights& w, int64_t p0, int64_t ps, const Acts& a, int64_t t0, float* y, int64_t ys) {
    __m512 acc[P][T];
    _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
      _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) acc[p][t] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < w.nb; ++b) {
      const uint8_t* g[P];
      _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) g[p] = w.group(p0 + p * ps, b);
      const uint8_t* act[T];
      _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) act[t] = a.block(t0 + t, b) + kActQuants;
      __m512i isum[P][T];
      _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
        _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) isum[p][t] = _mm512_setzero_si512();
      }
      if constexpr (T == 1) {
        // Decode: each chunk's vectors loaded once for its four quarters (the quarter
        // loop below reads them four times, from L1: decode ran 7-13% slower so).
        for (int h = 0; h < 2; ++h) {
          for (int half16 = 0; half16 < 2; ++half16) {  // l in [0, 16) or [16, 32)
            __m512i dot[4][P];
            _Pragma("GCC unroll 4") for (int q = 0; q < 4; ++q) {
              _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) dot[q][p] = _mm512_setzero_si512();
            }
            _Pragma("GCC unroll 4") for (int jj = 0; jj < 4; ++jj) {
              const int j = 4 * half16 + jj;  // columns l = 4j .. 4j + 3
              _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
                prefetch_group_step<kGroupBytes, 16>(g[p], (2 * h + half16) * 4 + jj);
              }
              _Pragma("GCC unroll 4") for (int q = 0; q < 4; ++q) {
                int32_t four;
                std::memcpy(&four, act[0] + 128 * h + 32 * q + 4 * j, 4);
                const __m512i av = _mm512_set1_epi32(four);
                _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
                  dot[q][p] = _mm512_dpbusd_epi32(dot[q][p], Bits::quarter(g[p], h, j, q), av);
                }
              }
            }
            _Pragma("GCC unroll 4") for (int q = 0; q < 4; ++q) {
              const int group = 8 * h + 2 * q + half16;
              _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
                isum[p][0] = _mm512_add_epi32(isum[p][0], _mm512_mullo_epi32(dot[q][p], Bits::scales(g[p], group)));
              }
            }
          }
        }
      } else {
        // Prefill and batches: one scale group at a time (its four column chunks' dots,
        // then times its scales), so the tile's registers go to tokens.
        for (int h = 0; h < 2; ++h) {
          _Pragma("GCC unroll 4") for (int q = 0; q < 4; ++q) {
            for (int half16 = 0; half16 < 2; ++half16) {  // l in [0, 16) or [16, 32)
              __m512i dot[P][T];
              _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
                _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) dot[p][t] = _mm512_setzero_si512();
              }
              _Pragma("GCC unroll 4") for (int jj = 0; jj < 4; ++jj) {
                const int j = 4 * half16 + jj;  // columns l = 4j .. 4j + 3
                __m512i u[P];
                _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
                  // A chunk is three vectors, each read by the four quarters: the group's
                  // 16 steps (as decode's) in the first quarter's pass, not a prefetch
                  // per vector (prefetch_step's choice for the other prefill tiles).
                  if (q == 0) prefetch_group_step<kGroupBytes, 16>(g[p], (2 * h + half16) * 4 + jj);
                  u[p] = Bits::quarter(g[p], h, j, q);
                }
                _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) {
                  int32_t four;
                  std::memcpy(&four, act[t] + 128 * h + 32 * q + 4 * j, 4);
                  const __m512i av = _mm512_set1_epi32(four);
                  _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
                    dot[p][t] = _mm512_dpbusd_epi32(dot[p][t], u[p], av);
                  }
                }
              }
              const int group = 8 * h + 2 * q + half16;
              _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
                const __m512i sc = Bits::scales(g[p], group);
                _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) {
                  isum[p][t] = _mm512_add_epi32(isum[p][t], _mm512_mullo_epi32(dot[p][t], sc));
                }
              }
            }
          }
        }
      }
      _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
        __m512i csum[T];
        _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) csum[t] = _mm512_setzero_si512();
        _Pragma("GCC unroll 8") for (int k = 0; k < 8; ++k) {
          const __m512i ck = Bits::correction_pairs(g[p], k);
          _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) {
            csum[t] = _mm512_dpwssd_epi32(csum[t], ck, _mm512_set1_epi32(a.sum_pair(t0 + t, b, k)));
          }
        }
        const __m512 dw = _mm512_cvtph_ps(load256(g[p] + L::d));
        _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) {
          const __m512 da = _mm512_set1_ps(a.da[(t0 + t) * w.nb + b]);
          if constexpr (Bits::kMins) {
            const __m512 dmw = _mm512_cvtph_ps(load256(g[p] + L::dmin));
            acc[p][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[p][t]), _mm512_mul_ps(dw, da), acc[p][t]);
            acc[p][t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(csum[t]), _mm512_mul_ps(dmw, da), acc[p][t]);
          } else {
            const __m512i offset = _mm512_mullo_epi32(csum[t], _mm512_set1_epi32(Bits::kOffset));
            const __m512i total = _mm512_sub_epi32(isum[p][t], offset);
            acc[p][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_mul_ps(dw, da), acc[p][t]);
          }
        }
      }
    }
    store_tile<P, T>(w, p0, ps, t0, acc, y, ys);
  }
};

using Q6K = SixteenK<Q6Bits>;
using Q3K = SixteenK<Q3Bits>;
using Q2K = SixteenK<Q2Bits>;

// ---- AVX2 tiles of q6_k_x16, q3_k_x16, q2_k_x16: each panel as two halves of 8 rows ----
//
// As Avx2NibbleK: a scale group's 4 vectors (16 columns) of unsigned values meet their
// activations in VPMADDUBSW; q6_k's values reach 63, so two vectors' pair sums add up in
// 16 bits (2 x 2 x 63 x 127 = 32004) and one VPMADDWD against the rows' scales (signed,
// in both halves of a row's lane) widens and weighs them. The corrections take a
// VPMADDWD a pair of groups, as VPDPWSSD's in the VNNI tiles; the integers and the FMAs
// a block are the scalar family's, so the same bits. The passes over the panels' halves
// are Avx2KTiles'.
template <class Bits>
struct Avx2SixteenK : Avx2KTiles<Avx2SixteenK<Bits>> {
  using L = typename Bits::L;
  static constexpr int64_t kGroupBytes = L::group;
  // Decode reads one panel a thread, both its halves in one pass: `loom_ab_builds
  // --repack auto --batch 1 --layouts 4 --threads 2` (AVX2-only EPYC, 2026-12-06),
  // decode b/a against two panels: small q6_k 1.22x, q3_k 1.03x, q2_k 1.02x; two panels
  // in two passes 0.91x (q6_k), one panel in two passes 1.00x.
  static constexpr int panels_for(int) { return 1; }
  static constexpr int kBothHalvesTokens = 1;

  // Block b of the Q half panels: the scale groups' weighed sums, then the corrections
  // and the FMA (two for q2_k).
  template <int Q, int T, int kH0, int kHalves>
  PKA_INLINE static void block(const Weights& w, const uint8_t* const (&g)[Q], const uint8_t* const (&act)[T],
                               const Acts& a, int64_t t0, int64_t b, __m256i (&isum)[Q][T], __m256 (&acc)[Q][T]) {
    for (int h = 0; h < 2; ++h) {
      for (int q4 = 0; q4 < 4; ++q4) {
        for (int half16 = 0; half16 < 2; ++half16) group_sums<Q, T, kH0, kHalves>(g, act, h, q4, half16, isum);
      }
    }
    _Pragma("GCC unroll 8") for (int q = 0; q < Q; ++q) {
      const int h8 = kH0 + q % kHalves;
      __m256i csum[T];
      _Pragma("GCC unroll 4") for (int t = 0; t < T; ++t) csum[t] = _mm256_setzero_si256();
      _Pragma("GCC unroll 8") for (int k = 0; k < 8; ++k) {
        const __m256i ck = Bits::correction_pairs_avx2(g[q], k, h8);
        _Pragma("GCC unroll 4") for (int t = 0; t < T; ++t) {
          csum[t] = _mm256_add_epi32(csum[t], _mm256_madd_epi16(ck, _mm256_set1_epi32(a.sum_pair(t0 + t, b, k))));
        }
      }
      const __m256 dw = _mm256_cvtph_ps(load128(g[q] + L::d + 16 * h8));
      _Pragma("GCC unroll 4") for (int t = 0; t < T; ++t) {
        const __m256 da = _mm256_set1_ps(a.da[(t0 + t) * w.nb + b]);
        if constexpr (Bits::kMins) {
          const __m256 dmw = _mm256_cvtph_ps(load128(g[q] + L::dmin + 16 * h8));
          acc[q][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[q][t]), _mm256_mul_ps(dw, da), acc[q][t]);
          acc[q][t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(csum[t]), _mm256_mul_ps(dmw, da), acc[q][t]);
        } else {
          const __m256i offset = _mm256_mullo_epi32(csum[t], _mm256_set1_epi32(Bits::kOffset));
          const __m256i total = _mm256_sub_epi32(isum[q][t], offset);
          acc[q][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), _mm256_mul_ps(dw, da), acc[q][t]);
        }
      }
    }
  }

  // Scale group 8h + 2 q4 + half16 (columns 16 half16 .. + 15 of quarter q4 of half h) of
  // the Q half panels: its 4 vectors' products, weighed by the rows' scales, into isum.
  // The first half of each panel requests the group's lines ahead in quarter 0's pass
  // (the 16 steps of prefetch_group_step, as the VNNI tiles do).
  template <int Q, int T, int kH0, int kHalves>
  PKA_INLINE static void group_sums(const uint8_t* const (&g)[Q], const uint8_t* const (&act)[T], int h, int q4,
                                    int half16, __m256i (&isum)[Q][T]) {
    const int group = 8 * h + 2 * q4 + half16;
    __m256i sc[Q];
    _Pragma("GCC unroll 8") for (int q = 0; q < Q; ++q) sc[q] = Bits::scales_avx2(g[q], group, kH0 + q % kHalves);
    __m256i sum16[Q][T];
    _Pragma("GCC unroll 4") for (int jj = 0; jj < 4; ++jj) {
      const int j = 4 * half16 + jj;  // columns 4j .. 4j + 3 of the quarter
      __m256i u[Q];
      _Pragma("GCC unroll 8") for (int q = 0; q < Q; ++q) {
        const int h8 = kH0 + q % kHalves;
        if (h8 == 0 && q4 == 0) {
          // Decode's stream as kAvx2KQuantDecode says; a tile of several tokens into L1.
          constexpr DecodePrefetch kHow = T == 1 ? kAvx2KQuantDecode : DecodePrefetch{};
          prefetch_group_step<kGroupBytes, 16, kHow>(g[q], (2 * h + half16) * 4 + jj);
        }
        u[q] = Bits::quarter_avx2(g[q], h, j, q4, h8);
      }
      _Pragma("GCC unroll 4") for (int t = 0; t < T; ++t) {
        int32_t four;
        std::memcpy(&four, act[t] + 128 * h + 32 * q4 + 4 * j, 4);
        const __m256i av = _mm256_set1_epi32(four);
        _Pragma("GCC unroll 8") for (int q = 0; q < Q; ++q) {
          const __m256i pairs = _mm256_maddubs_epi16(u[q], av);
          sum16[q][t] = jj % 2 == 0 ? pairs : _mm256_add_epi16(sum16[q][t], pairs);
          if (jj % 2 == 1) isum[q][t] = _mm256_add_epi32(isum[q][t], _mm256_madd_epi16(sum16[q][t], sc[q]));
        }
      }
    }
  }
};

// ---- the driver, per format ----

template <class F>
void scalar_panels(const Weights& w, const Acts& a, int64_t p0, int64_t p1, int64_t n_tokens, float* y,
                   int64_t ys) {
  for (int64_t p = p0; p < p1; ++p) {
    for (int64_t r = 0; r < kPanelRows && p * kPanelRows + r < w.rows; ++r) {
      for (int64_t t = 0; t < n_tokens; ++t) {
        float acc = 0.0f;
        for (int64_t b = 0; b < w.nb; ++b) acc = F::scalar_block(w.group(p, b), a, r, t, b, acc);
        y[t * ys + p * kPanelRows + r] = acc;
      }
    }
  }
}

// The activations of one call, quantized to q8_k (bit for bit what the row-major k-quant
// kernels consume), with each block's scale and the 32-element sums as i16 pairs.
struct ActBuffers {
  std::vector<std::byte> blocks;
  std::vector<float> da;
  std::vector<int32_t> mins;
};

Acts quantize_acts(const float* x, int64_t x_stride, int64_t n_tokens, int64_t cols, ActBuffers& buf,
              ThreadPool* pool) {
  const int64_t nb = cols / kBlock;
  const auto row_bytes = static_cast<int64_t>(quant::activation_row_bytes(DType::q8_k, cols));
  buf.blocks.resize(static_cast<size_t>(row_bytes * n_tokens));
  buf.da.resize(static_cast<size_t>(nb * n_tokens));
  buf.mins.resize(static_cast<size_t>(nb * n_tokens * 4));
  auto* blocks_base = reinterpret_cast<uint8_t*>(buf.blocks.data());
  float* da = buf.da.data();
  int32_t* mins = buf.mins.data();
  auto rows = [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      uint8_t* blocks = blocks_base + t * row_bytes;
      quant::quantize_activations(DType::q8_k, x + t * x_stride, blocks, cols);
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* block = blocks + b * kActBlockBytes;
        std::memcpy(&da[t * nb + b], block, 4);
        int16_t bsums[16];
        std::memcpy(bsums, block + kActSums, sizeof bsums);
        for (int k = 0; k < 4; ++k) {
          // Sums of 32 quants in [-127, 127]: they fit an i16.
          const auto even = static_cast<uint16_t>(static_cast<int16_t>(bsums[4 * k] + bsums[4 * k + 1]));
          const auto odd = static_cast<uint16_t>(static_cast<int16_t>(bsums[4 * k + 2] + bsums[4 * k + 3]));
          const uint32_t pair = static_cast<uint32_t>(even) | (static_cast<uint32_t>(odd) << 16);
          mins[(t * nb + b) * 4 + k] = static_cast<int32_t>(pair);
        }
      }
    }
  };
  quantize_token_rows(pool, n_tokens, rows);
  return {blocks_base, row_bytes, da, mins, nb};
}

template <class F>
Weights weights_of(const Tensor& w) {
  check_packed_weight(w, F::packing, F::dtype);
  const int64_t nb = w.shape()[1] / kBlock;
  return {static_cast<const uint8_t*>(w.raw_data()), nb * F::kGroupBytes, F::kGroupBytes, nb, w.shape()[0]};
}

// This file's parts of the packed products (run_packed, packed_panels.hpp).
struct Kernel {
  using Buffers = ActBuffers;
  static constexpr int64_t kPanelGrain = 1;
  template <class F>
  static constexpr auto quantize = &quantize_acts;  // q8_k for every format
  template <class F>
  static constexpr auto weights = &weights_of<F>;
  template <class F>
  using Tiles = F;  // NibbleK and SixteenK are their own tiles
  template <class F>
  using Avx2Tiles = typename F::Avx2;  // each format names its AVX2 tiles
  template <class F>
  static constexpr auto scalar = &scalar_panels<F>;
};

constexpr PackedProducts kProducts[] = {products_of<Kernel, Q4K>(), products_of<Kernel, Q5K>(),
                                        products_of<Kernel, Q6K>(), products_of<Kernel, Q3K>(),
                                        products_of<Kernel, Q2K>()};

}  // namespace

std::span<const PackedProducts> packed_kquants_products() noexcept { return kProducts; }

}  // namespace loom::kernels
