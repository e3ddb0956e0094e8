#include "runtime/kernels/packed_blocks32.hpp"

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
constexpr int64_t kBlock = 32;
constexpr int64_t kActBlockBytes = 34;  // q8_0 activation block: f16 d, 32 x i8
constexpr int32_t kByteBias = 128;      // the byte formats store q + 128 (Bytes, below)

// The packings of 32-element runs of quants under f16 scales (tensor/packing.hpp): per
// panel and group (one scale a row: one 32-column block for q8_0, q4_0, q4_1, q5_0, q5_1,
// G columns for loom's gq8_G and gq4_G) the 16 rows' scales, the mins (q4_1, q5_1) or zero
// points (gq4), then kRuns runs of kVectors 64-byte quant vectors, then the fifth-bit
// masks (q5_0, q5_1). Weights are stored unsigned (q + kBias), so each run's dot starts
// at -kBias * (sum of its activation quants), and VPDPBUSD takes them as its unsigned
// operand; gq4's nibbles are q, its zero point z per row (value q - z), so its dots start
// at -z * (sum of the activation quants), per lane; q4_1 / q5_1 add m * da * (that sum)
// after each block's scaled dot.
// What a format has unless it says otherwise: one run per scale, no zero points, mins or
// fifth bits.
template <class L, Packing kPacking, DType kDtype>
struct FormatBase {
  using Layout = L;
  static constexpr Packing packing = kPacking;
  static constexpr DType dtype = kDtype;
  static constexpr int kRuns = 1;
  static constexpr int64_t kZeros = -1, kMins = -1, kMasks = -1;  // offsets in a group; -1: none
};
// Runs of bytes q + kByteBias: vector j holds columns 4j..4j+3, one byte each.
template <class L, Packing kPacking, DType kDtype>
struct Bytes : FormatBase<L, kPacking, kDtype> {
  static constexpr int kVectors = 8;
  static constexpr bool kNibbles = false;
  static constexpr int32_t kBias = kByteBias;
  // Multi-token tiles prefetch into L2 (prefetch_step): loom_batched_decode --dtype q8_0
  // --repack auto, 3 rounds alternating with L1 (Zen 4, 2 threads), B = 8 decode
  // 878/830/701 against 744/710/734 tokens/s, the products alone 285/288/244 against
  // 238/267/219 GFLOP/s. Nibble formats measured slower so (q4_0 B = 8: 919/931/1075
  // against 999/1199/1128).
  static constexpr PrefetchHint kTileHint = _MM_HINT_T1;
};
// Runs of nibble bytes: vector j holds columns 4j..4j+3 (low nibbles) and 16+4j.. (high).
template <class L, Packing kPacking, DType kDtype>
struct Nibbles : FormatBase<L, kPacking, kDtype> {
  static constexpr int kVectors = 4;
  static constexpr bool kNibbles = true;
  static constexpr int32_t kBias = 0;
  static constexpr PrefetchHint kTileHint = _MM_HINT_T0;
};

using Q8_0Format = Bytes<packed_layout::Q8_0, Packing::q8_0_x16, DType::q8_0>;
struct Q4_0Format : Nibbles<packed_layout::Q4_0, Packing::q4_0_x16, DType::q4_0> {
  static constexpr int32_t kBias = 8;
};
struct Q4_1Format : Nibbles<packed_layout::Q4_1, Packing::q4_1_x16, DType::q4_1> {  // value d * q + m
  static constexpr int64_t kMins = packed_layout::Q4_1::mins;
};
struct Q5_0Format : Nibbles<packed_layout::Q5_0, Packing::q5_0_x16, DType::q5_0> {
  static constexpr int32_t kBias = 16;
  static constexpr int64_t kMasks = packed_layout::Q5_0::masks;
};
struct Q5_1Format : Nibbles<packed_layout::Q5_1, Packing::q5_1_x16, DType::q5_1> {
  static constexpr int64_t kMins = packed_layout::Q5_1::mins, kMasks = packed_layout::Q5_1::masks;
};
template <int64_t G, Packing kPacking, DType kDtype>
struct Gq8Format : Bytes<packed_layout::Gq8<G>, kPacking, kDtype> {
  static constexpr int kRuns = static_cast<int>(G / 32);
};
template <int64_t G, Packing kPacking, DType kDtype>
struct Gq4Format : Nibbles<packed_layout::Gq4<G>, kPacking, kDtype> {  // dots start at -z * sum(a)
  static constexpr int kRuns = static_cast<int>(G / 32);
  static constexpr int64_t kZeros = packed_layout::Gq4<G>::zeros;
};
using Gq8_32Format = Gq8Format<32, Packing::gq8_32_x16, DType::gq8_32>;
using Gq8_64Format = Gq8Format<64, Packing::gq8_64_x16, DType::gq8_64>;
using Gq8_128Format = Gq8Format<128, Packing::gq8_128_x16, DType::gq8_128>;
using Gq4_32Format = Gq4Format<32, Packing::gq4_32_x16, DType::gq4_32>;
using Gq4_64Format = Gq4Format<64, Packing::gq4_64_x16, DType::gq4_64>;
using Gq4_128Format = Gq4Format<128, Packing::gq4_128_x16, DType::gq4_128>;

// Bytes of one group of a panel, and of one run's vectors.
template <class F>
constexpr int64_t kGroup = F::Layout::group;
template <class F>
constexpr int64_t kRunBytes = F::kVectors * 64;
template <class F>
constexpr bool layout_adds_up =
    kGroup<F> == F::Layout::quants + F::kRuns * kRunBytes<F> + (F::kMasks >= 0 ? 64 : 0) &&
    (F::kMasks < 0 || F::kMasks == F::Layout::quants + kRunBytes<F>);
static_assert(layout_adds_up<Q8_0Format> && layout_adds_up<Q4_0Format> && layout_adds_up<Q4_1Format> &&
              layout_adds_up<Q5_0Format> && layout_adds_up<Q5_1Format> && layout_adds_up<Gq8_32Format> &&
              layout_adds_up<Gq8_64Format> && layout_adds_up<Gq8_128Format> && layout_adds_up<Gq4_32Format> &&
              layout_adds_up<Gq4_64Format> && layout_adds_up<Gq4_128Format>);

// The stored (unsigned) weight of row r, column k of run s of group g.
template <class F>
int32_t weight_at(const uint8_t* g, int s, int64_t r, int64_t k) {
  const uint8_t* q = g + F::Layout::quants + s * kRunBytes<F>;
  if constexpr (F::kNibbles) {
    const uint8_t byte = q[packed_layout::lane_byte(r, k % 16)];
    int32_t v = k < 16 ? (byte & 0xF) : (byte >> 4);
    if constexpr (F::kMasks >= 0) {
      const uint8_t* mask = g + F::Layout::mask_at(k % 16 / 4, k >= 16);
      const int64_t bit = packed_layout::lane_bit(r, k % 4);
      v |= ((mask[bit / 8] >> (bit % 8)) & 1) << 4;
    }
    return v;
  } else {
    return q[packed_layout::lane_byte(r, k)];
  }
}

// What row r's run dots start at, times -(sum of the run's activation quants): the
// zero point (gq4) or the storage offset.
template <class F>
int32_t offset_at(const uint8_t* g, int64_t r) {
  if constexpr (F::kZeros < 0) {
    return F::kBias;
  } else {
    return g[F::kZeros + r] & 0xF;
  }
}

// One call's quantized activations: token t's q8_0 blocks at blocks + t * row_bytes, its
// block scales widened at da + t * nb, and the sum of each block's quants at sums + t * nb
// (exact integers: the dot corrections and the mins' terms; the row-major q4_1 / q5_1
// kernels use the same exact sums where ggml uses q8_1's f16-rounded one).
struct Acts {
  const uint8_t* blocks;
  int64_t row_bytes;
  const float* da;
  const int32_t* sums;
  const int32_t* starts;  // -F::kBias * sums, where the dots start; gq4's -sums (quantize_acts)
  int64_t nb;

  const uint8_t* quants_of(int64_t t, int64_t b) const { return blocks + t * row_bytes + b * kActBlockBytes + 2; }
};

struct Weights {
  const uint8_t* base;
  int64_t panel_bytes;
  int64_t groups;  // per row (nb / kRuns)
  int64_t rows;
};

const uint8_t* panel_at(const Weights& w, int64_t panel) { return w.base + panel * w.panel_bytes; }

// ---- scalar family: the same sums, one (row, token) at a time ----

template <class F>
void scalar_panels(const Weights& w, const Acts& a, int64_t p0, int64_t p1, int64_t n_tokens, float* y,
                   int64_t ys) {
  for (int64_t p = p0; p < p1; ++p) {
    for (int64_t r = 0; r < kPanelRows && p * kPanelRows + r < w.rows; ++r) {
      for (int64_t t = 0; t < n_tokens; ++t) {
        float acc = 0.0f;
        for (int64_t gi = 0; gi < w.groups; ++gi) {
          const uint8_t* g = panel_at(w, p) + gi * kGroup<F>;
          uint16_t h;
          std::memcpy(&h, g + F::Layout::scales + 2 * r, 2);
          const float dw = f16_to_f32_scalar(h);
          for (int s = 0; s < F::kRuns; ++s) {
            const int64_t b = gi * F::kRuns + s;
            const int32_t sum = a.sums[t * a.nb + b];
            int32_t dot = -offset_at<F>(g, r) * sum;
            for (int64_t k = 0; k < kBlock; ++k) {
              dot += weight_at<F>(g, s, r, k) * static_cast<int32_t>(static_cast<int8_t>(a.quants_of(t, b)[k]));
            }
            acc = std::fma(static_cast<float>(dot), dw * a.da[t * a.nb + b], acc);
            if constexpr (F::kMins >= 0) {
              std::memcpy(&h, g + F::kMins + 2 * r, 2);
              acc = std::fma(static_cast<float>(sum), f16_to_f32_scalar(h) * a.da[t * a.nb + b], acc);
            }
          }
        }
        y[t * ys + p * kPanelRows + r] = acc;
      }
    }
  }
}

// ---- AVX-512 VNNI: P panels x T tokens, one lane per row ----

#define PQ_INLINE LOOM_TARGET_AVX512_VNNI __attribute__((always_inline)) inline

// The most tokens a block's integer dots take at once (2 panels x 8: 16 registers).
constexpr int kRegisterTokens = 8;

// Where a tile of P panels x T tokens keeps its float accumulators: wide tiles (2 panels
// x 7 or more tokens) in L1 (AccTile::mem, [panel][token] rows of 16), read and written
// once a block, so the registers hold the block's integer dots; narrower ones in
// registers (AccTile::regs). Stored and loaded unchanged: the same bits either way.
template <int P, int T>
struct AccTile {
  static constexpr bool kInMemory = 2 * P * T > 24;
  static constexpr int kP = kInMemory ? 1 : P, kT = kInMemory ? 1 : T;  // regs[p % kP][t % kT]
  __m512 regs[kP][kT];
  alignas(64) float mem[kInMemory ? P * T * 16 : 16];

  PQ_INLINE __m512 get(int p, int t) const {
    return kInMemory ? _mm512_load_ps(mem + (p * T + t) * 16) : regs[p % kP][t % kT];
  }
  PQ_INLINE void set(int p, int t, __m512 v) {
    if constexpr (kInMemory) {
      _mm512_store_ps(mem + (p * T + t) * 16, v);
    } else {
      regs[p % kP][t % kT] = v;
    }
  }
};

// Whether a tile's dots start from Acts::starts, broadcast from memory (a load), rather
// than from the sum: a load, a shift and two vector instructions a token beside the
// VPDPBUSDs. From memory except in the nibble formats' tiles whose accumulators are in
// L1 (7 to 12 tokens), where it measured slower. `loom_ab_builds --repack auto --prompt
// 16 --steps 24 --rounds 6-8 --layouts 4 --threads 2` against computed starts (Zen 5,
// 2026-12-06), b/a geometric mean / median: q8_0 (--prompt 32 --steps 16,
// docs/quantization.md) B = 8 decode 1.020 / 1.034, prefill 1.078 / 1.086; --batch 8
// prefill (128-token passes, tiles of 6) small q4_0 1.254 / 1.236, 1B q4_0 1.219 /
// 1.238, small q5_0 1.155 / 1.118, their decode 1.00-1.02; --batch 16 decode (tiles of
// 6) small q4_0 1.090 / 1.069, q5_0 1.093 / 1.034. With the 8-token tile from memory
// too, --batch 8 decode read small q4_0 0.984 / 1.008 and 0.955 / 0.948, 1B q4_0 0.948 /
// 0.971, small q5_0 0.979 / 0.960 and 0.909 / 1.015.
template <class F, int P, int T>
constexpr bool kStartsFromMemory =
    F::kBias != 0 && !(F::kNibbles && AccTile<P, T>::kInMemory);

// Quant vector j of a run of kVectors that starts half a line in (address = 32 mod 64),
// from the two aligned lines it straddles: the first line's upper half and the second's
// lower half (VALIGNQ). The run's last vector reads only the lower half of its second
// line, so nothing past the run is read; its first line's lower half is the bytes before
// the run, inside the group (the scales, or the run before: every format's quants start
// 32 bytes in or more).
template <int kVectors>
PQ_INLINE __m512i straddling_vector(const uint8_t* at, int j) {
  const __m512i first = _mm512_load_si512(at - 32);
  const auto* next = reinterpret_cast<const __m256i*>(at + 32);
  const __m512i second = j + 1 < kVectors ? _mm512_load_si512(next) : _mm512_castsi256_si512(_mm256_load_si256(next));
  return _mm512_alignr_epi64(second, first, 4);
}

// Block b (run s of group gi) of P panels against tokens [kFrom, kFrom + TS) of a
// T-token tile starting at t0: the integer dots, then the scales into the tile's float
// accumulators. The weight lines are requested ahead as for a tile of kPrefetchT tokens
// (prefetch_step), or not at all (0: a wide tile's second half, whose lines its first
// half brought in). With kStraddling every panel's run starts half a line in, and its
// vectors are put together from aligned lines (straddling_vector).
template <class F, int P, int T, int TS, int kFrom, int kPrefetchT, bool kStraddling = false>
PQ_INLINE void block_tokens(const uint8_t* const (&panel)[P], const uint8_t* const (&act)[T], const Acts& a,
                            int64_t t0, int64_t gi, int s, AccTile<P, T>& acc) {
  const int64_t b = gi * F::kRuns + s;
  __m512i dot[P][TS];
  [[maybe_unused]] __m512i zero[P];
  if constexpr (F::kZeros >= 0) {
    _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
      const __m128i z = _mm_loadu_si128(reinterpret_cast<const __m128i*>(panel[p] + gi * kGroup<F> + F::kZeros));
      zero[p] = _mm512_and_si512(_mm512_cvtepu8_epi32(z), _mm512_set1_epi32(0xF));
    }
  }
  _Pragma("GCC unroll 8") for (int t = 0; t < TS; ++t) {
    _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
      if constexpr (F::kZeros >= 0) {
        // -sum from memory too: small gq4_32 pack --batch 8 prefill 1.199 / 1.174, --batch
        // 16 decode 1.062 / 1.074, prefill 1.191 / 1.198 (kStartsFromMemory's tool); a
        // VPDPWSSD of z against -sum in place of the VPMULLD read 0.96x in decode.
        dot[p][t] = _mm512_mullo_epi32(zero[p], _mm512_set1_epi32(a.starts[(t0 + kFrom + t) * a.nb + b]));
      } else if constexpr (kStartsFromMemory<F, P, T>) {
        dot[p][t] = _mm512_set1_epi32(a.starts[(t0 + kFrom + t) * a.nb + b]);
      } else if constexpr (F::kBias != 0) {
        dot[p][t] = _mm512_set1_epi32(-F::kBias * a.sums[(t0 + kFrom + t) * a.nb + b]);
      } else {
        dot[p][t] = _mm512_setzero_si512();
      }
    }
  }
  _Pragma("GCC unroll 8") for (int j = 0; j < F::kVectors; ++j) {
    __m512i wv[P], wh[P];
    _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
      const uint8_t* at = panel[p] + gi * kGroup<F> + F::Layout::quants + s * kRunBytes<F> + j * 64;
      if constexpr (kPrefetchT > 0) {
        prefetch_step<kPrefetchT, kGroup<F>, F::kRuns * F::kVectors, F::kTileHint, F::Layout::quants>(
            panel[p] + gi * kGroup<F>, at, s * F::kVectors + j);
      }
      if constexpr (kStraddling) {
        wv[p] = straddling_vector<F::kVectors>(at, j);
      } else {
        wv[p] = _mm512_loadu_si512(at);
      }
      if constexpr (F::kNibbles) {
        const __m512i low4 = _mm512_set1_epi8(0x0F);
        wh[p] = _mm512_and_si512(_mm512_srli_epi16(wv[p], 4), low4);
        wv[p] = _mm512_and_si512(wv[p], low4);
      }
      if constexpr (F::kMasks >= 0) {  // the fifth bits: +16 where set
        const __m512i sixteen = _mm512_set1_epi8(0x10);
        uint64_t ml, mh;
        std::memcpy(&ml, panel[p] + gi * kGroup<F> + F::Layout::mask_at(j, false), 8);
        std::memcpy(&mh, panel[p] + gi * kGroup<F> + F::Layout::mask_at(j, true), 8);
        wv[p] = _mm512_mask_add_epi8(wv[p], _cvtu64_mask64(ml), wv[p], sixteen);
        wh[p] = _mm512_mask_add_epi8(wh[p], _cvtu64_mask64(mh), wh[p], sixteen);
      }
    }
    _Pragma("GCC unroll 8") for (int t = 0; t < TS; ++t) {
      int32_t four;
      std::memcpy(&four, act[kFrom + t] + b * kActBlockBytes + 4 * j, 4);
      const __m512i av = _mm512_set1_epi32(four);
      _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) dot[p][t] = _mm512_dpbusd_epi32(dot[p][t], wv[p], av);
      if constexpr (F::kNibbles) {
        std::memcpy(&four, act[kFrom + t] + b * kActBlockBytes + 16 + 4 * j, 4);
        const __m512i ah = _mm512_set1_epi32(four);
        _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) dot[p][t] = _mm512_dpbusd_epi32(dot[p][t], wh[p], ah);
      }
    }
  }
  _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
    const __m512 dw = _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel[p] + gi * kGroup<F> + F::Layout::scales)));
    [[maybe_unused]] __m512 mw;
    if constexpr (F::kMins >= 0) {
      mw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel[p] + gi * kGroup<F> + F::kMins)));
    }
    _Pragma("GCC unroll 8") for (int t = 0; t < TS; ++t) {
      const int tt = kFrom + t;  // the token's place in the tile
      const __m512 da = _mm512_set1_ps(a.da[(t0 + tt) * a.nb + b]);
      __m512 v = acc.get(p, tt);
      v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[p][t]), _mm512_mul_ps(dw, da), v);
      if constexpr (F::kMins >= 0) {
        const auto sum = static_cast<float>(a.sums[(t0 + tt) * a.nb + b]);
        v = _mm512_fmadd_ps(_mm512_set1_ps(sum), _mm512_mul_ps(mw, da), v);
      }
      acc.set(p, tt, v);
    }
  }
}

// The widest tile that joins straddling vectors (run_straddles, below).
constexpr int kStraddleTokens = 4;

// Whether run s of group gi starts half a line in on every one of the P panels: the runs
// of every other group of q8_0 and gq8_32 (544 bytes: 8.5 lines), gq8_64 (1056) and
// gq8_128 (2080) do, where a plain load of each vector would touch two lines. Tiles of
// up to kStraddleTokens tokens of the byte formats then build their vectors from aligned
// lines (straddling_vector): `loom_ab_builds --repack auto --prompt 64 --rounds 16
// --layouts 8` against plain loads, decode b/a (geometric mean of the layouts), Zen 5:
// --batch 1 1B q8_0 1.10, 1.10, 1.15, 1.08 (2 threads), 1.16 (1 thread), 1B gq8_128 pack
// 1.15; small q8_0, whose weights partly stay in L3, 0.93-1.12 over seven runs (about
// 1.01 on average). Tiles of 2 to 4 tokens too, against decode alone (12 rounds): 1B
// q8_0 --batch 4 1.11, --batch 2 1.07; small q8_0 1.10 and 1.01. Wider tiles, which also
// run prefill, lose there: up to 8 tokens, 1B q8_0 --batch 8 decode 1.07x but prefill
// 0.80x; every tile, small q8_0 --batch 8 decode 0.965x, prefill 0.88x, --batch 16 0.95x,
// 0.84x. Nor the nibble formats, whose q4_0 (288-byte groups) and q5_0 (352) straddle
// too but spend more arithmetic per line: decode small q4_0 0.96x, q5_0 0.95x, 1B q4_0
// 1.06x and 1.02x.
template <class F, int P>
PQ_INLINE bool run_straddles(const uint8_t* const (&panel)[P], int64_t gi, int s) {
  static_assert(F::Layout::quants >= 32);
  bool all = true;
  _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
    const uint8_t* run = panel[p] + gi * kGroup<F> + F::Layout::quants + s * kRunBytes<F>;
    all = all && (reinterpret_cast<uintptr_t>(run) & 63) == 32;
  }
  return all;
}

template <class F, int P, int T>
PQ_INLINE void dot_tile(const Weights& w, int64_t p0, int64_t ps, const Acts& a, int64_t t0, float* y, int64_t ys) {
  // Past kRegisterTokens a block runs as two halves of the tokens one after the other,
  // the second reading the weight lines the first brought into L1 (see Tiles32); the
  // accumulators are then in L1 (AccTile), so a batch of 8 is one token tile.
  AccTile<P, T> acc;
  _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
    _Pragma("GCC unroll 16") for (int t = 0; t < T; ++t) acc.set(p, t, _mm512_setzero_ps());
  }
  const uint8_t* panel[P];
  _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) panel[p] = panel_at(w, p0 + p * ps);
  const uint8_t* act[T];
  _Pragma("GCC unroll 16") for (int t = 0; t < T; ++t) act[t] = a.quants_of(t0 + t, 0);
  // The scales (and zero points) are loaded where they are used, once per run: held
  // across the run's dot products they would take registers the tile needs (q8_0's
  // 2 x 6 tile ran 10% slower so).
  constexpr int kFirst = T > kRegisterTokens ? (T + 1) / 2 : T, kSecond = T - kFirst;
  for (int64_t gi = 0; gi < w.groups; ++gi) {
    for (int s = 0; s < F::kRuns; ++s) {
      if constexpr (T <= kStraddleTokens && !F::kNibbles) {
        if (run_straddles<F, P>(panel, gi, s)) {
          block_tokens<F, P, T, kFirst, 0, T, true>(panel, act, a, t0, gi, s, acc);
          continue;  // tiles of at most kStraddleTokens have no second half
        }
      }
      block_tokens<F, P, T, kFirst, 0, T>(panel, act, a, t0, gi, s, acc);
      if constexpr (kSecond > 0) {
        block_tokens<F, P, T, kSecond, kFirst, 0>(panel, act, a, t0, gi, s, acc);
      }
    }
  }
  _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
    const int64_t row0 = (p0 + p * ps) * kPanelRows;
    const int64_t valid = std::min<int64_t>(kPanelRows, w.rows - row0);
    const __mmask16 keep = static_cast<__mmask16>((1u << valid) - 1u);
    _Pragma("GCC unroll 16") for (int t = 0; t < T; ++t) {
      _mm512_mask_storeu_ps(y + (t0 + t) * ys + row0, keep, acc.get(p, t));
    }
  }
}

// F's tiles (vnni_panels, packed_panels.hpp): 2 panels x 1..12 tokens. Decode (1 token)
// reads two panels side by side, two weight streams per thread. On the Zen 4 machines of
// 2026-12-03 (memory at 34-37 GB/s) one stream decoded faster than four; on the Zen 5
// ones of 2026-12-04 (90 GB/s) two streams beat one, `loom_ab_builds --batch 1 --repack
// auto` decode b/a: small q8_0 1.07-1.08x (2 threads), 1.04-1.05x (1 thread), 1B q8_0
// 1.07x, q4_0 pack 1.075x; four streams were no better than two (1.02x, 0.98x)
// (docs/quantization.md).
template <class F>
struct Tiles32 {
  // A product of 7 or 8 tokens runs as one tile (its accumulators in L1, dot_tile),
  // which reads each L2 block of panels once instead of twice; longer ones keep tiles of
  // at most 6. Against tiles of at most 6, the small shape's matrices from memory, 2
  // threads, alternating in one process (Zen 4, 2026-12-03): B = 8 q8_0 1.17, 1.25 and
  // 1.21x, q4_0 1.04 and 1.08, q4_1 1.09, q5_0 1.07, q5_1 1.20, gq8_32 1.26, gq4_32 1.02,
  // gq4_128 1.07; B = 7 q8_0 1.27, q4_0 1.17. Tiles of 8 for more tokens: B = 9 (a
  // speculative round's 8 drafts + 1) q4_0 0.92 and 0.93x as 8 + 1 (the nibble formats'
  // full first tile) against 6 + 3; B = 10, 12 and 16 0.98-1.03; prefill (128 tokens)
  // q8_0 1.045, q4_0 1.07, but q5_1 1.00, q4_1 0.98, gq8_32 and gq4_32 0.97, and measured
  // again q8_0 1.00 and 1.00, q4_0 0.98 and 0.98. On Zen 5 (2026-12-04) the byte formats
  // (q8_0, gq8) take tiles of 8 up to 16 tokens (16 = 8 + 8, not 6 + 5 + 5):
  // `loom_ab_builds --batch 16 --repack auto`, decode small q8_0 1.027 / 1.022x, 1B q8_0
  // 1.015 / 1.011x (an A/A run reads 0.98-1.00); the nibble formats keep 6, whose 9
  // tokens would go as 8 + 1 (above).
  // Since 2026-12-05 a product of 9 to 12 tokens (a speculative round's 8 drafts + 1, a
  // batch of up to 12) is one tile too, each block taken as two halves of the tokens
  // (dot_tile): the weights come from memory once, their lines still in L1 for the
  // second half, where two tiles read each L2 block from memory with half the tokens and
  // again from L2 with the memory idle. The small shape's matrices from memory, 2
  // threads, alternating in one process (a scratch timing, Zen 5): q8_0 B = 9 1.21-1.25x,
  // 10 1.19-1.23x, 11 1.13x, 12 1.04-1.21x; q4_0 B = 9, 10 1.03-1.04x, 12 1.07x. Past
  // 12 the halves' 7 or 8 tokens' activation rows crowd the general registers: B = 13
  // 1.01x, 14 0.96x, 15 0.91x, 16 0.79-0.89x, so 13 to 16 tokens keep two tiles.
  static constexpr int kMaxTokens = 12;
  static constexpr int max_tokens(int64_t n_tokens) {
    if (n_tokens <= kMaxTokens) return kMaxTokens;
    return n_tokens > (F::kNibbles ? 8 : 16) ? 6 : kRegisterTokens;
  }
  // Two tokens read four panels side by side (four weight streams a thread), the other
  // tiles two: `loom_ab_builds --repack auto --batch 2 --prompt 32 --rounds 8 --layouts
  // 4 --threads 2` against two (Zen 5, 2026-12-05), decode b/a (geometric mean / median):
  // small q8_0 1.090 / 1.110, 1.064 / 1.069, 1.046 / 1.048; 1B q8_0 1.084 / 1.070; small
  // q4_0 1.025 / 1.039. Three tokens on four panels read 0.991 / 0.980 (small q8_0), and
  // q4_k's two-token tile on four panels 0.89-0.92x (packed_kquants.cpp keeps two).
  static constexpr int panels_for(int t) { return t == 2 ? 4 : 2; }
  // Two tiles as 6 + the rest (for_each_panel_tile) for the nibble formats: products of
  // the small shape's matrices from memory, 2 threads, alternating with balanced tiles in
  // one process (Zen 4, 2026-12-03), B = 8: q4_0 1.01-1.09x (five runs), q4_1 1.06-1.09x,
  // gq4_32 1.05x, gq4_64 1.08x, q5_0 and q5_1 1.00x (no loss); q4_0 B = 7 and 9 1.03x,
  // B = 10 1.09x. q8_0 was slower so (0.94x, 0.98x), as were the k-quants (q2_k 0.91x;
  // q6_k, q3_k 1.00x): they keep balanced tiles.
  static constexpr bool kWideFirst = F::kNibbles;
  template <int P, int T>
  PQ_INLINE static void tile(const Weights& w, int64_t p0, int64_t ps, const Acts& a, int64_t t0, float* y, int64_t ys) {
    dot_tile<F, P, T>(w, p0, ps, a, t0, y, ys);
  }
};

// ---- AVX2: P panels x T tokens, each panel as two halves of 8 rows ----
//
// Without VPDPBUSD a 32-byte half of a quant vector (4 columns of 8 rows) meets four
// broadcast activation bytes in VPMADDUBSW (unsigned weight bytes times signed
// activation bytes, adjacent pairs summed into 16 bits), and VPMADDWD against ones adds
// the pairs into one 32-bit lane a row. The nibble formats' pairs fit 16 bits with room
// to spare: |pair| <= 2 * 15 * 127 = 3810, so a run's 8 VPMADDUBSW (4 vectors, low and
// high nibbles) add up in 16 bits (<= 30480) and widen once; with fifth bits (q5_0,
// q5_1, weights up to 31) they widen after every 2 vectors (<= 31496). The byte formats
// (q8_0, gq8: q + 128 up to 255) would overflow a pair, so their bytes go as two nibbles
// against the same activations, each nibble's 8 products summed in 16 bits, the high
// sums widened by VPMADDWD against 16s (q + 128 = 16 hi + lo; the dot starts at -128 Σa
// as in the VNNI tiles). The dots are the same exact integers as VNNI's and the scalar
// family's, scaled into the accumulators in the same order: the same bits.
// Decode takes both halves of its panels in one pass; a wider tile takes the panels'
// rows 0-7 over the whole row, then rows 8-15, so its accumulators (P x T vectors) stay
// in registers: the second pass reads the panel from L1 or L2, where the first pass
// brought it (a q4_0 panel of 1024 columns is 9 KiB), and only the first pass
// prefetches (Avx2Tiles32::kBothHalvesTokens).

#define PA_INLINE LOOM_TARGET_AVX2 __attribute__((always_inline)) inline

// Vectors of a run whose products add up in 16 bits before widening (above).
template <class F>
constexpr int kVectorsIn16Bits = F::kMasks >= 0 ? 2 : F::kVectors;
static_assert(Q4_0Format::kVectors % kVectorsIn16Bits<Q4_0Format> == 0 &&
              Q5_0Format::kVectors % kVectorsIn16Bits<Q5_0Format> == 0);

// Run s of group gi of the P panels' half h (rows 8h..8h+7) against the T tokens from
// t0, into the tile's accumulators; kPrefetch: request the group's lines ahead
// (prefetch_step, as the VNNI tiles do).
template <class F, int P, int T, int h, bool kPrefetch>
PA_INLINE void half_run_avx2(const uint8_t* const (&panel)[P], const uint8_t* const (&act)[T], const Acts& a,
                             int64_t t0, int64_t gi, int s, __m256 (&acc)[P][T]) {
  constexpr int kIn16 = kVectorsIn16Bits<F>;
  const int64_t b = gi * F::kRuns + s;
  const __m256i low4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  __m256i dot[P][T], sum16[P][T];
  [[maybe_unused]] __m256i sum16_high[P][T];  // the byte formats' high nibbles
  _Pragma("GCC unroll 8") for (int j = 0; j < F::kVectors; ++j) {
    __m256i lo[P], hi[P];
    _Pragma("GCC unroll 4") for (int p = 0; p < P; ++p) {
      const uint8_t* group = panel[p] + gi * kGroup<F>;
      const uint8_t* at = group + F::Layout::quants + s * kRunBytes<F> + j * 64;
      if constexpr (kPrefetch) {
        prefetch_step<T, kGroup<F>, F::kRuns * F::kVectors, F::kTileHint, F::Layout::quants, kAvx2Blocks32Decode>(
            group, at, s * F::kVectors + j);
      }
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at + 32 * h));
      lo[p] = _mm256_and_si256(v, low4);
      hi[p] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
      if constexpr (F::kMasks >= 0) {  // the fifth bits: +16 where set (the nibbles' bit 4 is clear)
        uint32_t ml, mh;
        std::memcpy(&ml, group + F::Layout::mask_at(j, false) + 4 * h, 4);
        std::memcpy(&mh, group + F::Layout::mask_at(j, true) + 4 * h, 4);
        lo[p] = _mm256_or_si256(lo[p], fifth_bits_avx2(ml));
        hi[p] = _mm256_or_si256(hi[p], fifth_bits_avx2(mh));
      }
    }
    if constexpr (!F::kNibbles) {  // a byte's two nibbles against the same activations
      _Pragma("GCC unroll 4") for (int t = 0; t < T; ++t) {
        int32_t four;
        std::memcpy(&four, act[t] + b * kActBlockBytes + 4 * j, 4);
        const __m256i av = _mm256_set1_epi32(four);
        _Pragma("GCC unroll 4") for (int p = 0; p < P; ++p) {
          const __m256i low = _mm256_maddubs_epi16(lo[p], av), high = _mm256_maddubs_epi16(hi[p], av);
          sum16[p][t] = j == 0 ? low : _mm256_add_epi16(sum16[p][t], low);
          sum16_high[p][t] = j == 0 ? high : _mm256_add_epi16(sum16_high[p][t], high);
          in_order(sum16[p][t]);
          in_order(sum16_high[p][t]);
          if (j == F::kVectors - 1) {
            dot[p][t] = _mm256_add_epi32(_mm256_madd_epi16(sum16[p][t], ones),
                                         _mm256_madd_epi16(sum16_high[p][t], _mm256_set1_epi16(16)));
          }
        }
      }
      continue;
    }
    _Pragma("GCC unroll 4") for (int t = 0; t < T; ++t) {
      int32_t four;
      std::memcpy(&four, act[t] + b * kActBlockBytes + 4 * j, 4);
      const __m256i al = _mm256_set1_epi32(four);
      std::memcpy(&four, act[t] + b * kActBlockBytes + 16 + 4 * j, 4);
      const __m256i ah = _mm256_set1_epi32(four);
      _Pragma("GCC unroll 4") for (int p = 0; p < P; ++p) {
        const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(lo[p], al), _mm256_maddubs_epi16(hi[p], ah));
        sum16[p][t] = j % kIn16 == 0 ? pairs : _mm256_add_epi16(sum16[p][t], pairs);
        in_order(sum16[p][t]);
        if (j % kIn16 == kIn16 - 1) {
          const __m256i wide = _mm256_madd_epi16(sum16[p][t], ones);
          dot[p][t] = j == kIn16 - 1 ? wide : _mm256_add_epi32(dot[p][t], wide);
        }
      }
    }
  }
  _Pragma("GCC unroll 4") for (int p = 0; p < P; ++p) {
    const uint8_t* group = panel[p] + gi * kGroup<F>;
    const __m256 dw = _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(group + F::Layout::scales + 16 * h)));
    [[maybe_unused]] __m256 mw;
    if constexpr (F::kMins >= 0) {
      mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(group + F::kMins + 16 * h)));
    }
    [[maybe_unused]] __m256i zero;
    if constexpr (F::kZeros >= 0) {
      const __m128i z = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(group + F::kZeros + 8 * h));
      zero = _mm256_and_si256(_mm256_cvtepu8_epi32(z), _mm256_set1_epi32(0xF));
    }
    _Pragma("GCC unroll 4") for (int t = 0; t < T; ++t) {
      const int64_t at = (t0 + t) * a.nb + b;
      __m256i d = dot[p][t];
      if constexpr (F::kZeros >= 0) {
        d = _mm256_add_epi32(d, _mm256_mullo_epi32(zero, _mm256_set1_epi32(a.starts[at])));
      } else if constexpr (F::kBias != 0) {
        d = _mm256_add_epi32(d, _mm256_set1_epi32(a.starts[at]));
      }
      const __m256 da = _mm256_set1_ps(a.da[at]);
      acc[p][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_mul_ps(dw, da), acc[p][t]);
      if constexpr (F::kMins >= 0) {
        acc[p][t] = _mm256_fmadd_ps(_mm256_set1_ps(static_cast<float>(a.sums[at])), _mm256_mul_ps(mw, da), acc[p][t]);
      }
    }
  }
}

// Halves kH0 .. kH0 + kHalves - 1 of the P panels p0, p0 + ps, ... over the whole row
// against T tokens, stored.
template <class F, int P, int T, int kH0, int kHalves>
PA_INLINE void halves_tile_avx2(const Weights& w, const uint8_t* const (&panel)[P], const uint8_t* const (&act)[T],
                                const Acts& a, int64_t p0, int64_t ps, int64_t t0, float* y, int64_t ys) {
  __m256 acc[kHalves][P][T];
  _Pragma("GCC unroll 2") for (int h = 0; h < kHalves; ++h) {
    _Pragma("GCC unroll 4") for (int p = 0; p < P; ++p) {
      _Pragma("GCC unroll 4") for (int t = 0; t < T; ++t) acc[h][p][t] = _mm256_setzero_ps();
    }
  }
  for (int64_t gi = 0; gi < w.groups; ++gi) {
    for (int s = 0; s < F::kRuns; ++s) {
      half_run_avx2<F, P, T, kH0, kH0 == 0>(panel, act, a, t0, gi, s, acc[0]);
      if constexpr (kHalves == 2) half_run_avx2<F, P, T, kH0 + 1, false>(panel, act, a, t0, gi, s, acc[1]);
    }
  }
  _Pragma("GCC unroll 2") for (int h = 0; h < kHalves; ++h) {
    _Pragma("GCC unroll 4") for (int p = 0; p < P; ++p) {
      const int64_t row0 = (p0 + p * ps) * kPanelRows + 8 * (kH0 + h);
      _Pragma("GCC unroll 4") for (int t = 0; t < T; ++t) {
        store_half_panel_avx2(y + (t0 + t) * ys + row0, acc[h][p][t], row0, w.rows);
      }
    }
  }
}

// F's AVX2 tiles (avx2_panels, packed_panels.hpp): up to 4 tokens on one panel, decode
// on two panels side by side (two weight streams a thread, as the VNNI tiles).
template <class F>
struct Avx2Tiles32 {
  static constexpr int kMaxTokens = 4;
  static constexpr int max_tokens(int64_t) { return kMaxTokens; }
  static constexpr int panels_for(int t) { return t == 1 ? 2 : 1; }
  static constexpr bool kWideFirst = false;
  // Decode (1 token) takes both halves of its panels in one pass, so the memory stream
  // never waits for a second pass over lines already in cache; wider tiles take them
  // one after the other, which keeps their accumulators in registers. `loom_ab_builds
  // --repack auto --layouts 4 --threads 2` (AVX2-only EPYC, 2026-12-06), decode b/a
  // against two passes at --batch 1: small q4_0 1.25x, q8_0 1.23x (q4_k 1.32x, whose
  // tiles are in packed_kquants.cpp); one pass for 2 tokens too read 0.96x (q4_0,
  // --batch 2); one panel a thread in decode instead of two 0.99x; tiles of 3 tokens for
  // the byte formats instead of 4 1.00x (q8_0, --batch 8).
  static constexpr int kBothHalvesTokens = 1;
  template <int P, int T>
  PA_INLINE static void tile(const Weights& w, int64_t p0, int64_t ps, const Acts& a, int64_t t0, float* y,
                             int64_t ys) {
    const uint8_t* panel[P];
    _Pragma("GCC unroll 4") for (int p = 0; p < P; ++p) panel[p] = panel_at(w, p0 + p * ps);
    const uint8_t* act[T];
    _Pragma("GCC unroll 4") for (int t = 0; t < T; ++t) act[t] = a.quants_of(t0 + t, 0);
    if constexpr (T <= kBothHalvesTokens) {
      halves_tile_avx2<F, P, T, 0, 2>(w, panel, act, a, p0, ps, t0, y, ys);
    } else {
      halves_tile_avx2<F, P, T, 0, 1>(w, panel, act, a, p0, ps, t0, y, ys);
      halves_tile_avx2<F, P, T, 1, 1>(w, panel, act, a, p0, ps, t0, y, ys);
    }
  }
};

// Each of `nb` q8_0 blocks' (34 bytes apart) scale widened to f32 and the sum of its 32
// signed quants (from byte 2): as unsigned bytes (q ^ 0x80 = q + 128) through VPSADBW
// against zero, minus 32 * 128. Exact integers and exact widenings, so any family's
// values are the same. One loop with an inline F16C widening: the scales widened apart,
// one out-of-line call a block, made this the half of a 256-row product's quantizing.
LOOM_TARGET_AVX2 void block_scales_sums_avx2(const uint8_t* blocks, int64_t nb, float* da, int32_t* sums) {
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* block = blocks + b * kActBlockBytes;
    uint16_t h;
    std::memcpy(&h, block, 2);
    da[b] = _cvtsh_ss(h);
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2));
    const __m256i s = _mm256_sad_epu8(_mm256_xor_si256(q, flip), _mm256_setzero_si256());
    const __m128i pair = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    sums[b] = static_cast<int32_t>(_mm_cvtsi128_si64(pair) + _mm_extract_epi64(pair, 1)) - 32 * 128;
  }
}

void block_scales_sums_scalar(const uint8_t* blocks, int64_t nb, float* da, int32_t* sums) {
  for (int64_t b = 0; b < nb; ++b) {
    uint16_t h;
    std::memcpy(&h, blocks + b * kActBlockBytes, 2);
    da[b] = f16_to_f32_scalar(h);
    int32_t sum = 0;
    for (int64_t k = 0; k < kBlock; ++k) sum += static_cast<int8_t>(blocks[b * kActBlockBytes + 2 + k]);
    sums[b] = sum;
  }
}

// The activations of one call, quantized (q8_0 blocks, bit for bit what the row-major
// kernels consume) with each block's scale widened and the sum of its quants.
struct ActBuffers {
  std::vector<std::byte> blocks;
  std::vector<float> da;
  std::vector<int32_t> sums;
  std::vector<int32_t> starts;
};

// Acts::starts holds -kScale * sum: the format's storage offset (F::kBias), where its dots
// start, or 1 for gq4, whose tiles multiply -sum by each lane's zero point; the mins
// formats (0) get none.
template <int32_t kScale>
Acts quantize_acts(const float* x, int64_t x_stride, int64_t n_tokens, int64_t cols, ActBuffers& buf, ThreadPool* pool) {
  const int64_t nb = cols / kBlock;
  const auto row_bytes = static_cast<int64_t>(quant::activation_row_bytes(DType::q8_0, cols));
  buf.blocks.resize(static_cast<size_t>(row_bytes * n_tokens));
  buf.da.resize(static_cast<size_t>(nb * n_tokens));
  buf.sums.resize(static_cast<size_t>(nb * n_tokens));
  if constexpr (kScale != 0) buf.starts.resize(static_cast<size_t>(nb * n_tokens));
  auto* blocks_base = reinterpret_cast<uint8_t*>(buf.blocks.data());
  float* da = buf.da.data();
  int32_t* sums = buf.sums.data();
  int32_t* starts = kScale != 0 ? buf.starts.data() : nullptr;
  const bool avx2 = active_isa() >= Isa::avx2;
  auto rows = [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      uint8_t* blocks = blocks_base + t * row_bytes;
      quant::quantize_activations(DType::q8_0, x + t * x_stride, blocks, cols);
      if (avx2) {
        block_scales_sums_avx2(blocks, nb, da + t * nb, sums + t * nb);
      } else {
        block_scales_sums_scalar(blocks, nb, da + t * nb, sums + t * nb);
      }
      if constexpr (kScale != 0) {
        for (int64_t b = 0; b < nb; ++b) starts[t * nb + b] = -kScale * sums[t * nb + b];
      }
    }
  };
  quantize_token_rows(pool, n_tokens, rows);
  return {blocks_base, row_bytes, da, sums, starts, nb};
}

template <class F>
Weights weights_of(const Tensor& w) {
  check_packed_weight(w, F::packing, F::dtype);
  const int64_t groups = w.shape()[1] / (kBlock * F::kRuns);
  return {static_cast<const uint8_t*>(w.raw_data()), groups * kGroup<F>, groups, w.shape()[0]};
}

// This file's parts of the packed products (run_packed, packed_panels.hpp).
struct Kernel {
  using Buffers = ActBuffers;
  static constexpr int64_t kPanelGrain = 2;
  template <class F>
  static constexpr auto quantize = &quantize_acts<F::kZeros >= 0 ? 1 : F::kBias>;
  template <class F>
  static constexpr auto weights = &weights_of<F>;
  template <class F>
  using Tiles = Tiles32<F>;
  template <class F>
  using Avx2Tiles = Avx2Tiles32<F>;
  template <class F>
  static constexpr auto scalar = &scalar_panels<F>;
};

constexpr PackedProducts kProducts[] = {
    products_of<Kernel, Q8_0Format>(),    products_of<Kernel, Q4_0Format>(),    products_of<Kernel, Q4_1Format>(),
    products_of<Kernel, Q5_0Format>(),    products_of<Kernel, Q5_1Format>(),    products_of<Kernel, Gq8_32Format>(),
    products_of<Kernel, Gq8_64Format>(),  products_of<Kernel, Gq8_128Format>(), products_of<Kernel, Gq4_32Format>(),
    products_of<Kernel, Gq4_64Format>(),  products_of<Kernel, Gq4_128Format>()};

}  // namespace

std::span<const PackedProducts> packed_blocks32_products() noexcept { return kProducts; }

}  // namespace loom::kernels
