// The AVX2 and AVX-512 attention kernels (attention.hpp): register tiles of query heads
// x groups of 8 / 16 consecutive keys for the scores (the cache keeps keys
// dimension-major, so a group is one vector per dimension and each lane sums its own
// key: no horizontal sums), a vectorized exp for the softmax, and query heads x
// head_dim lanes for the weighted sum of values. f16 cache entries are widened exactly
// (F16C) as they are loaded. Every function carries its target attribute, so the file
// builds for any -march; attend() calls the AVX2 family on CPUs with AVX2, FMA and F16C
// and the AVX-512 one (the same bits, twice the lanes) where AVX-512 is on.
//
// The order of every sum is fixed per output (see attention.hpp), so the tile shapes
// below change speed only, never a bit.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/simd.hpp"
#include "loom/error.hpp"
#include "runtime/kernels/attention.hpp"
#include "runtime/kernels/ops.hpp"
#include "runtime/kernels/vec_math_x86.hpp"

namespace loom::kernels {

namespace {

// ---- loads of 8 lanes (f32, or f16 widened); *_tail reads r < 8 and zero-fills ----

LOOM_TARGET_AVX2 inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
LOOM_TARGET_AVX2 inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

alignas(32) constexpr int32_t kMaskTable[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
// Lanes 0..r-1 set.
LOOM_TARGET_AVX2 inline __m256i tail_mask(int64_t r) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMaskTable + 8 - r));
}
LOOM_TARGET_AVX2 inline __m256 load_tail(const float* p, int64_t r) { return _mm256_maskload_ps(p, tail_mask(r)); }
LOOM_TARGET_AVX2 inline __m256 load_tail(const uint16_t* p, int64_t r) {
  alignas(16) uint16_t b[8] = {};
  std::memcpy(b, p, static_cast<size_t>(r) * sizeof(uint16_t));
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(b)));
}

LOOM_TARGET_AVX2 void exp_inplace(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, exp8(_mm256_loadu_ps(x + i)));
  if (i < n) {
    alignas(32) float b[8];
    std::fill(b, b + 8, -std::numeric_limits<float>::infinity());
    std::memcpy(b, x + i, static_cast<size_t>(n - i) * sizeof(float));
    _mm256_store_ps(b, exp8(_mm256_load_ps(b)));
    std::memcpy(x + i, b, static_cast<size_t>(n - i) * sizeof(float));
  }
}

// s[0..n) := softmax(s): the max, exp(s - max), the sum in 8 lanes (+ the zero-padded
// tail), then a multiply by 1 / sum.
LOOM_TARGET_AVX2 void softmax_row(float* s, int64_t n) {
  const int64_t full = n / 8 * 8;
  __m256 vmax = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < full; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(s + i));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  float mx = lanes[0];
  for (float v : lanes) mx = std::max(mx, v);
  for (int64_t i = full; i < n; ++i) mx = std::max(mx, s[i]);
  const __m256 m = _mm256_set1_ps(mx);
  __m256 sum = _mm256_setzero_ps();
  for (int64_t i = 0; i < full; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + i), m));
    _mm256_storeu_ps(s + i, e);
    sum = _mm256_add_ps(sum, e);
  }
  if (full < n) {
    alignas(32) float b[8];
    std::fill(b, b + 8, -std::numeric_limits<float>::infinity());
    for (int64_t i = full; i < n; ++i) b[i - full] = s[i] - mx;
    const __m256 e = exp8(_mm256_load_ps(b));
    _mm256_store_ps(b, e);
    sum = _mm256_add_ps(sum, e);  // the padding lanes are exp(-inf) = 0
    std::memcpy(s + full, b, static_cast<size_t>(n - full) * sizeof(float));
  }
  const __m256 inv = _mm256_set1_ps(1.0f / simd::hsum256(sum));
  for (int64_t i = 0; i < full; i += 8) _mm256_storeu_ps(s + i, _mm256_mul_ps(_mm256_loadu_ps(s + i), inv));
  const float inv1 = _mm256_cvtss_f32(inv);
  for (int64_t i = full; i < n; ++i) s[i] *= inv1;
}

// IN_REGISTER(v) keeps a loaded vector in a register: without it GCC folds the load into
// every FMA that uses it (a value row's vector once per query row, a query element's
// broadcast once per key group), and the loads, not the FMAs, bound the loop. Applied to
// a plain local: on an array element GCC also kept the array on the stack, a store per
// load. In cache (a scratch probe calling attend, 4 query rows over 160 f32 positions,
// the same item again and again) 1.8-2.0 us an item against 2.3-2.4 before. A macro,
// not a helper function: the asm must sit in the kernel, whose target attribute lets a
// 512-bit operand take a "v" register (clang rejects it in a helper that lacks AVX-512,
// as any function does on a build machine without it).
#define IN_REGISTER(v) asm("" : "+v"(v))

// ---- scores: NQ query heads x G groups of up to kLanes consecutive keys ----
//
// A group: n <= kLanes keys of one segment, element d of its key i at keys[d * stride +
// i], whose scores go to s[at + i]. One accumulator per (query row, group) holds a lane
// per key; for d ascending it takes q[d] (broadcast) x the group's d-th elements in one
// FMA, so each lane is the score's FMA chain over d, whatever the vector width. The
// query rows come dimension-major (qt[d * NQ + h]): one pointer reaches all of them
// (16 row pointers had GCC spilling them to vector registers).
template <typename E>
struct KeyGroup {
  const E* keys;
  int64_t n;
  int64_t at;
};

// The keys a tile of groups requests while it computes: at its step d, one line of row d
// of each group of the next tile (into L1) and of the tile kKeysAheadTiles further on
// (into L2), so the requests keep pace with the loads. Requesting the next tile's keys
// all at once at the tile's start (as before) overflowed the L1's miss buffers and left
// decode over a long context waiting on memory: the small shape's 8 layers after a
// 2048-token prompt spent 2.4-2.6 ms a token in attention on one thread, 1.1 ms so.
template <typename E>
struct KeyPrefetch {
  const KeyGroup<E>* near = nullptr;
  int n_near = 0;
  const KeyGroup<E>* far = nullptr;
  int n_far = 0;

  __attribute__((always_inline)) void step(int64_t d, int64_t stride) const {
    for (int g = 0; g < n_near; ++g) {
      _mm_prefetch(reinterpret_cast<const char*>(near[g].keys + d * stride), _MM_HINT_T0);
    }
    for (int g = 0; g < n_far; ++g) _mm_prefetch(reinterpret_cast<const char*>(far[g].keys + d * stride), _MM_HINT_T1);
  }
};
constexpr int64_t kKeysAheadTiles = 3;

// How far ahead within a run of value rows decode's weighted sums request rows into L2:
// 32 positions (8 KiB of f32 rows at head_dim 64). A run is a segment, or adjacent
// segments summed as one (wsum_range): a sequence's blocks in order make one run the
// length of its context, which the run-level request (prefetch_rows) covers only at the
// start.
constexpr int64_t kValuesAhead = 32;
// Past the end of a run (the next block elsewhere in the pool): the segment two ahead.
constexpr size_t kSegmentsAhead = 2;

// Requests the n cached value rows at p (into L1 unless kHint says otherwise). The paged
// cache keeps a head's rows of one block contiguous (16 positions: 4 KiB of f32 at
// head_dim 64) but blocks far apart, which the hardware prefetchers do not follow across;
// decode over a long context waited on memory at every block without this. At most the
// first 4 KiB (a 16-position block of f32 rows at head_dim 64): a long run's rows past
// that the weighted sums request as they go (prefetch_row_ahead).
template <typename E, auto kHint = _MM_HINT_T0>
__attribute__((always_inline)) inline void prefetch_rows(const void* p, int64_t n, int64_t hd) {
  const auto* b = static_cast<const char*>(p);
  const auto bytes = std::min<size_t>(static_cast<size_t>(n * hd) * sizeof(E), size_t{4096});
  for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(b + o, kHint);
}

// Decode's weighted sums at row i of a run of n value rows at v: the row kValuesAhead
// further on, into L2.
template <typename E>
__attribute__((always_inline)) inline void prefetch_row_ahead(const E* v, int64_t i, int64_t n, int64_t hd) {
  if (i + kValuesAhead < n) prefetch_rows<E, _MM_HINT_T1>(v + (i + kValuesAhead) * hd, 1, hd);
}

// Tiles of G groups for R query rows: R * G accumulators, enough chains to hide the FMA
// latency, beside the G key vectors and one broadcast: up to 16 of AVX-512's 32
// registers (R <= 16), up to 12 of AVX2's 16 (R <= 8).
template <bool kWide>
constexpr int groups_per_tile(int rows) {
  if (rows == 1) return 6;
  if (rows == 2) return 4;
  if (rows <= 4) return 3;
  if constexpr (kWide) return rows < 6 ? 3 : rows < 12 ? 2 : 1;
  return rows < 7 ? 2 : 1;
}

LOOM_TARGET_AVX2 inline __m256 key_lanes8(const float* p, int64_t n) {
  return n == 8 ? _mm256_loadu_ps(p) : load_tail(p, n);
}
LOOM_TARGET_AVX2 inline __m256 key_lanes8(const uint16_t* p, int64_t n) {
  return n == 8 ? load8(p) : load_tail(p, n);
}

template <int NQ, int G, bool kAhead, typename E>
LOOM_TARGET_AVX2 void scores_groups(const float* qt, int64_t hd, const KeyGroup<E>* groups, int64_t stride,
                                    float scale, float* s, int64_t sstride, const KeyPrefetch<E>& ahead) {
  __m256 acc[NQ][G];
  for (int h = 0; h < NQ; ++h) {
    for (int g = 0; g < G; ++g) acc[h][g] = _mm256_setzero_ps();
  }
  int64_t d = 0;  // hd >= 1: a do-while, as in scores_groups_512
  do {
    __m256 kv[G];
    for (int g = 0; g < G; ++g) kv[g] = key_lanes8(groups[g].keys + d * stride, groups[g].n);
    if constexpr (kAhead) ahead.step(d, stride);
    for (int h = 0; h < NQ; ++h) {
      __m256 qb = _mm256_broadcast_ss(qt + d * NQ + h);
      if constexpr (G > 1) IN_REGISTER(qb);
      for (int g = 0; g < G; ++g) acc[h][g] = _mm256_fmadd_ps(qb, kv[g], acc[h][g]);
    }
  } while (++d < hd);
  const __m256 sc = _mm256_set1_ps(scale);
  for (int h = 0; h < NQ; ++h) {
    for (int g = 0; g < G; ++g) {
      float* o = s + h * sstride + groups[g].at;
      const __m256 r = _mm256_mul_ps(acc[h][g], sc);
      if (groups[g].n == 8) {
        _mm256_storeu_ps(o, r);
      } else {
        _mm256_maskstore_ps(o, tail_mask(groups[g].n), r);
      }
    }
  }
}

// ---- weighted sum: out[h][d0 ..] += p[h][i] * v_i[d0 ..] over the segment's positions,
// NQ heads x DC chunks of 8 lanes (TAIL: one chunk of r < 8 lanes) ----

template <int NQ, int DC, bool TAIL, bool kAhead, typename E>
LOOM_TARGET_AVX2 void wsum_chunks(const float* p, int64_t pstride, const E* v, int64_t n, int64_t hd, int64_t d0,
                                  int64_t r, float* out, int64_t ostride) {
  __m256 acc[NQ][DC];
  for (int h = 0; h < NQ; ++h) {
    for (int c = 0; c < DC; ++c) {
      float* o = out + h * ostride + d0 + 8 * c;
      acc[h][c] = TAIL ? _mm256_maskload_ps(o, tail_mask(r)) : _mm256_loadu_ps(o);
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const E* vi = v + i * hd + d0;
    if constexpr (kAhead) if (d0 == 0) prefetch_row_ahead(v, i, n, hd);
    __m256 vv[DC];
    for (int c = 0; c < DC; ++c) {
      __m256 x = TAIL ? load_tail(vi, r) : load8(vi + 8 * c);
      if constexpr (NQ > 1) IN_REGISTER(x);
      vv[c] = x;
    }
    for (int h = 0; h < NQ; ++h) {
      const __m256 pb = _mm256_broadcast_ss(p + h * pstride + i);
      for (int c = 0; c < DC; ++c) acc[h][c] = _mm256_fmadd_ps(pb, vv[c], acc[h][c]);
    }
  }
  for (int h = 0; h < NQ; ++h) {
    for (int c = 0; c < DC; ++c) {
      float* o = out + h * ostride + d0 + 8 * c;
      if (TAIL) {
        _mm256_maskstore_ps(o, tail_mask(r), acc[h][c]);
      } else {
        _mm256_storeu_ps(o, acc[h][c]);
      }
    }
  }
}

template <int NQ, bool kAhead, typename E>
LOOM_TARGET_AVX2 void wsum_segment(const float* p, int64_t pstride, const E* v, int64_t n, int64_t hd, float* out,
                                   int64_t ostride) {
  // Chunks per pass: enough independent FMA chains to hide the latency, few enough that
  // NQ x DC accumulators fit the 16 registers beside the values (NQ: query rows, up to 8
  // when several tokens share the tile).
  constexpr int kDC = NQ <= 2 ? 4 : NQ <= 4 ? 2 : 1;
  const int64_t full = hd / 8 * 8;
  int64_t d0 = 0;
  for (; d0 + 8 * kDC <= full; d0 += 8 * kDC) {
    wsum_chunks<NQ, kDC, false, kAhead>(p, pstride, v, n, hd, d0, 8, out, ostride);
  }
  for (; d0 < full; d0 += 8) wsum_chunks<NQ, 1, false, kAhead>(p, pstride, v, n, hd, d0, 8, out, ostride);
  if (full < hd) wsum_chunks<NQ, 1, true, kAhead>(p, pstride, v, n, hd, full, hd - full, out, ostride);
}

// ---- AVX-512: the same sums, twice the lanes per instruction ----
//
// Scores: groups of up to 16 keys, one lane per key as in the AVX2 kernel (each lane's
// FMA chain is the same, so are its bits). Weighted sum: 16 lanes of head_dim per vector;
// every lane is its own sequential chain over the positions, so the vector width cannot
// change a bit. Both give exactly the AVX2 kernels' outputs (tested).

LOOM_TARGET_AVX512 inline __m512 key_lanes16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
LOOM_TARGET_AVX512 inline __m512 key_lanes16(const uint16_t* p, __mmask16 m) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

template <int NQ, int G, bool kAhead, typename E>
LOOM_TARGET_AVX512 void scores_groups_512(const float* qt, int64_t hd, const KeyGroup<E>* groups, int64_t stride,
                                          float scale, float* s, int64_t sstride, const KeyPrefetch<E>& ahead) {
  __m512 acc[NQ][G];
  __mmask16 m[G];
  const E* k[G];
  for (int g = 0; g < G; ++g) {
    m[g] = static_cast<__mmask16>((1u << groups[g].n) - 1);
    k[g] = groups[g].keys;
  }
  for (int h = 0; h < NQ; ++h) {
    for (int g = 0; g < G; ++g) acc[h][g] = _mm512_setzero_ps();
  }
  // hd >= 1 (attend checks it); a do-while, because with a loop that might not run GCC 12
  // kept a copy of every accumulator on the stack, stored at each step.
  int64_t d = 0;
  do {
    __m512 kv[G];
    for (int g = 0; g < G; ++g) kv[g] = key_lanes16(k[g] + d * stride, m[g]);
    if constexpr (kAhead) ahead.step(d, stride);
    for (int h = 0; h < NQ; ++h) {
      __m512 qb = _mm512_set1_ps(qt[d * NQ + h]);
      if constexpr (G > 1) IN_REGISTER(qb);
      for (int g = 0; g < G; ++g) acc[h][g] = _mm512_fmadd_ps(qb, kv[g], acc[h][g]);
    }
  } while (++d < hd);
  const __m512 sc = _mm512_set1_ps(scale);
  for (int h = 0; h < NQ; ++h) {
    for (int g = 0; g < G; ++g) acc[h][g] = _mm512_mul_ps(acc[h][g], sc);
  }
  for (int h = 0; h < NQ; ++h) {
    for (int g = 0; g < G; ++g) _mm512_mask_storeu_ps(s + h * sstride + groups[g].at, m[g], acc[h][g]);
  }
}

LOOM_TARGET_AVX512 inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
LOOM_TARGET_AVX512 inline __m512 load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
LOOM_TARGET_AVX512 inline __m512 load16_tail(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
LOOM_TARGET_AVX512 inline __m512 load16_tail(const uint16_t* p, __mmask16 m) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

template <int NQ, int DC, bool TAIL, bool kAhead, typename E>
LOOM_TARGET_AVX512 void wsum_chunks_512(const float* p, int64_t pstride, const E* v, int64_t n, int64_t hd,
                                        int64_t d0, __mmask16 m, float* out, int64_t ostride) {
  __m512 acc[NQ][DC];
  for (int h = 0; h < NQ; ++h) {
    for (int c = 0; c < DC; ++c) {
      float* o = out + h * ostride + d0 + 16 * c;
      acc[h][c] = TAIL ? _mm512_maskz_loadu_ps(m, o) : _mm512_loadu_ps(o);
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const E* vi = v + i * hd + d0;
    if constexpr (kAhead) if (d0 == 0) prefetch_row_ahead(v, i, n, hd);
    __m512 vv[DC];
    for (int c = 0; c < DC; ++c) {
      __m512 x = TAIL ? load16_tail(vi, m) : load16(vi + 16 * c);
      if constexpr (NQ > 1) IN_REGISTER(x);
      vv[c] = x;
    }
    for (int h = 0; h < NQ; ++h) {
      const __m512 pb = _mm512_set1_ps(p[h * pstride + i]);
      for (int c = 0; c < DC; ++c) acc[h][c] = _mm512_fmadd_ps(pb, vv[c], acc[h][c]);
    }
  }
  for (int h = 0; h < NQ; ++h) {
    for (int c = 0; c < DC; ++c) {
      float* o = out + h * ostride + d0 + 16 * c;
      if (TAIL) {
        _mm512_mask_storeu_ps(o, m, acc[h][c]);
      } else {
        _mm512_storeu_ps(o, acc[h][c]);
      }
    }
  }
}

template <int NQ, bool kAhead, typename E>
LOOM_TARGET_AVX512 void wsum_segment_512(const float* p, int64_t pstride, const E* v, int64_t n, int64_t hd,
                                         float* out, int64_t ostride) {
  // NQ x kDC accumulators (at most 16) beside kDC value vectors (NQ: query rows, up to
  // 8 when several tokens share the tile).
  constexpr int kDC = NQ <= 2 ? 8 / NQ : NQ <= 4 ? 4 : NQ <= 8 ? 2 : 1;
  const int64_t full = hd / 16 * 16;
  int64_t d0 = 0;
  for (; d0 + 16 * kDC <= full; d0 += 16 * kDC) {
    wsum_chunks_512<NQ, kDC, false, kAhead>(p, pstride, v, n, hd, d0, 0xFFFF, out, ostride);
  }
  for (; d0 < full; d0 += 16) wsum_chunks_512<NQ, 1, false, kAhead>(p, pstride, v, n, hd, d0, 0xFFFF, out, ostride);
  if (full < hd) {
    const auto m = static_cast<__mmask16>((1u << (hd - full)) - 1);
    wsum_chunks_512<NQ, 1, true, kAhead>(p, pstride, v, n, hd, full, m, out, ostride);
  }
}

// The same for a group's keys: hd runs of n elements, stride apart (one contiguous panel
// when the group is a whole block's row of keys).
template <typename E>
inline void prefetch_keys(const KeyGroup<E>& g, int64_t hd, int64_t stride) {
  if (g.n == stride) return prefetch_rows<E>(g.keys, g.n, hd);
  const auto bytes = static_cast<size_t>(g.n) * sizeof(E);
  for (int64_t d = 0; d < hd; ++d) {
    const auto* row = reinterpret_cast<const char*>(g.keys + d * stride);
    _mm_prefetch(row, _MM_HINT_T0);
    _mm_prefetch(row + bytes - 1, _MM_HINT_T0);
  }
}

// The weighted sums of `rows` query rows (p row r at p + r * pstride, out row r at out +
// r * hd) over positions [begin, end) of the segments, continuing each output from what
// out holds: segment by segment, as every tile and token count does, so the pieces change
// no bit.
template <int NQ, typename E, bool kWide, bool kAhead = false>
LOOM_TARGET_AVX2 void wsum_range(const float* p, int64_t pstride, std::span<const KvSegment> segments, int64_t begin,
                                 int64_t end, int64_t hd, float* out) {
  int64_t at = 0;
  for (size_t i = 0; i < segments.size() && at < end;) {
    // Segments whose value rows follow one another in memory (a sequence's consecutive
    // blocks, which the pool keeps side by side when they came in order) are summed as
    // one run: the same FMAs in the same order, without a stop (accumulators stored and
    // reloaded, requests ahead restarted) every 16 positions.
    const auto* run = static_cast<const E*>(segments[i].values);
    int64_t n = segments[i].n;
    size_t next = i + 1;
    while (next < segments.size() && static_cast<const E*>(segments[next].values) == run + n * hd) {
      n += segments[next++].n;
    }
    const int64_t lo = std::max(at, begin), hi = std::min(at + n, end);
    if (lo < hi) {
      if (next < segments.size()) prefetch_rows<E>(segments[next].values, segments[next].n, hd);
      if (kAhead && next + kSegmentsAhead - 1 < segments.size()) {
        const KvSegment& far = segments[next + kSegmentsAhead - 1];
        prefetch_rows<E, _MM_HINT_T1>(far.values, far.n, hd);
      }
      const E* values = run + (lo - at) * hd;
      if constexpr (kWide) {
        wsum_segment_512<NQ, kAhead>(p + lo, pstride, values, hi - lo, hd, out, hd);
      } else {
        wsum_segment<NQ, kAhead>(p + lo, pstride, values, hi - lo, hd, out, hd);
      }
    }
    at += n;
    i = next;
  }
}

// R query rows: T consecutive tokens x (R / T) heads sharing a KV head, row r = u * NQ + h
// reading q + u * qts + h * hd over the first n_keys[u] positions (non-decreasing in u)
// and writing out + u * ots + h * hd. Each key group and value row is loaded once for all
// R rows; every row's sums are those of the row alone (attention.hpp), so T changes no
// bit: the scores past a row's own keys are computed but never read, the weighted sums
// run over the positions every row has together, then each token's rest on its own.
template <int R, typename E, bool kWide>
LOOM_TARGET_AVX2 void attend_rows(const float* q, int64_t qts, int64_t T, std::span<const KvSegment> segments,
                                  const int64_t* n_keys, const AttentionShape& shape, float* scores, float* out,
                                  int64_t ots) {
  const int64_t hd = shape.head_dim;
  const int64_t stride = shape.key_stride;
  const int64_t nq = R / T;
  const int64_t n_max = n_keys[T - 1];
  constexpr int64_t kLanes = kWide ? 16 : 8;
  constexpr int kG = groups_per_tile<kWide>(R);
  // The query rows dimension-major (hd x R) for the scores; one token's output rows are
  // already side by side, several tokens' are gathered in R x hd and copied out at the end.
  thread_local std::vector<float> q_storage, out_storage;
  q_storage.resize(static_cast<size_t>(R * hd));
  float* rows_q = q_storage.data();
  for (int r = 0; r < R; ++r) {
    const float* qr = q + r / nq * qts + r % nq * hd;
    for (int64_t d = 0; d < hd; ++d) rows_q[d * R + r] = qr[d];
  }
  float* rows_out = out;
  if (T > 1) {
    out_storage.resize(static_cast<size_t>(R * hd));
    rows_out = out_storage.data();
  }
  // The keys in groups of kLanes consecutive positions (a segment's last group shorter).
  thread_local std::vector<KeyGroup<E>> group_storage;
  std::vector<KeyGroup<E>>& groups = group_storage;
  groups.clear();
  int64_t at = 0;
  for (const KvSegment& seg : segments) {
    const int64_t n = std::min(seg.n, n_max - at);
    const auto* keys = static_cast<const E*>(seg.keys);
    for (int64_t j = 0; j < n; j += kLanes) groups.push_back({keys + j, std::min(kLanes, n - j), at + j});
    at += seg.n;
    if (at >= n_max) break;
  }
  const auto n_groups = static_cast<int64_t>(groups.size());
  for (int64_t i = 0; i < n_groups;) {
    const int64_t tile = n_groups - i >= kG ? kG : 1;
    // Decode (one token): the next tile's keys and those kKeysAheadTiles tiles later,
    // requested as this one computes (KeyPrefetch). A prompt's runs re-read keys that
    // recent runs brought in, and take the next tile's at once, before this one: the
    // spread requests ran prefill of 2048 tokens 0.85-0.91x (`loom_ab_builds --prompt
    // 2048`, small q8_0 and f16 GGUFs).
    KeyPrefetch<E> ahead;
    if (T > 1) {
      for (int64_t j = i + tile; j < std::min(n_groups, i + tile + kG); ++j) {
        prefetch_keys<E>(groups[static_cast<size_t>(j)], hd, stride);
      }
    } else {
      if (const int64_t near0 = i + tile; near0 < n_groups) {
        ahead.near = groups.data() + near0;
        ahead.n_near = static_cast<int>(std::min<int64_t>(kG, n_groups - near0));
      }
      if (const int64_t far0 = i + tile + kKeysAheadTiles * kG; far0 < n_groups) {
        ahead.far = groups.data() + far0;
        ahead.n_far = static_cast<int>(std::min<int64_t>(kG, n_groups - far0));
      }
    }
    const KeyGroup<E>* g = groups.data() + i;
    // (The requests compiled in only where they are made: a prompt's tiles ran 10-15%
    // slower with the empty checks in their inner loop.)
    auto run = [&]<bool kAhead>() {
      if constexpr (kWide) {
        if (tile == kG) {
          scores_groups_512<R, kG, kAhead>(rows_q, hd, g, stride, shape.scale, scores, n_max, ahead);
        } else {
          scores_groups_512<R, 1, kAhead>(rows_q, hd, g, stride, shape.scale, scores, n_max, ahead);
        }
      } else {
        if (tile == kG) {
          scores_groups<R, kG, kAhead>(rows_q, hd, g, stride, shape.scale, scores, n_max, ahead);
        } else {
          scores_groups<R, 1, kAhead>(rows_q, hd, g, stride, shape.scale, scores, n_max, ahead);
        }
      }
    };
    if (T == 1) {
      run.template operator()<true>();
    } else {
      run.template operator()<false>();
    }
    i += tile;
  }
  prefetch_rows<E>(segments[0].values, segments[0].n, hd);
  for (int r = 0; r < R; ++r) {
    float* s = scores + r * n_max;
    const int64_t n = n_keys[r / nq];
    if (shape.softcap > 0) softcap(s, n, shape.softcap);
    softmax_row(s, n);
  }
  std::fill(rows_out, rows_out + R * hd, 0.0f);
  if constexpr (R > 8) {
    // Two halves: more than 8 rows' weight pointers do not fit GCC's general registers
    // (it spilled them to vector registers and reloaded them at every position). Prompts
    // only: a token has at most 4 query rows, so R > 8 means 3 or 4 tokens (no requests
    // ahead).
    constexpr int kHalf = (R + 1) / 2;
    wsum_range<kHalf, E, kWide>(scores, n_max, segments, 0, n_keys[0], hd, rows_out);
    wsum_range<R - kHalf, E, kWide>(scores + kHalf * n_max, n_max, segments, 0, n_keys[0], hd, rows_out + kHalf * hd);
  } else if (T == 1) {
    wsum_range<R, E, kWide, true>(scores, n_max, segments, 0, n_keys[0], hd, rows_out);
  } else {
    wsum_range<R, E, kWide>(scores, n_max, segments, 0, n_keys[0], hd, rows_out);
  }
  if (T == 1) return;
  for (int64_t u = 0; u < T; ++u) {
    if (n_keys[u] > n_keys[0]) {
      const float* p = scores + u * nq * n_max;
      float* o = rows_out + u * nq * hd;
      switch (nq) {
        case 1: wsum_range<1, E, kWide>(p, n_max, segments, n_keys[0], n_keys[u], hd, o); break;
        case 2: wsum_range<2, E, kWide>(p, n_max, segments, n_keys[0], n_keys[u], hd, o); break;
        case 3: wsum_range<3, E, kWide>(p, n_max, segments, n_keys[0], n_keys[u], hd, o); break;
        default: wsum_range<4, E, kWide>(p, n_max, segments, n_keys[0], n_keys[u], hd, o); break;
      }
    }
    std::memcpy(out + u * ots, rows_out + u * nq * hd, static_cast<size_t>(nq * hd) * sizeof(float));
  }
}

template <typename E, bool kWide>
void attend_typed(const float* q, int64_t n_queries, std::span<const KvSegment> segments, int64_t n_keys,
                  const AttentionShape& shape, float* scores, float* out) {
  switch (n_queries) {
    case 1: return attend_rows<1, E, kWide>(q, 0, 1, segments, &n_keys, shape, scores, out, 0);
    case 2: return attend_rows<2, E, kWide>(q, 0, 1, segments, &n_keys, shape, scores, out, 0);
    case 3: return attend_rows<3, E, kWide>(q, 0, 1, segments, &n_keys, shape, scores, out, 0);
    default: return attend_rows<4, E, kWide>(q, 0, 1, segments, &n_keys, shape, scores, out, 0);
  }
}

// T tokens x n_queries heads, in parts of as many tokens as the level's tile takes rows
// (16 on AVX-512, 8 on AVX2: 4 x 4 or 2 x 4, ...). A part reads the segments from
// position 0 up to its own last token (attend_rows stops there), so a part of one token
// is attend() for it.
template <typename E, bool kWide>
void attend_tokens_typed(const float* q, int64_t qts, int64_t T, int64_t n_queries,
                         std::span<const KvSegment> segments, const int64_t* n_keys, const AttentionShape& shape,
                         float* scores, float* out, int64_t ots) {
  constexpr int64_t kMaxRows = kWide ? 16 : 8;
  const int64_t part = std::max<int64_t>(1, kMaxRows / n_queries);
  for (int64_t u = 0; u < T; u += part) {
    const int64_t n = std::min(part, T - u);
    const float* qu = q + u * qts;
    float* ou = out + u * ots;
    const int64_t* ku = n_keys + u;
    switch (n * n_queries) {
      case 1: attend_rows<1, E, kWide>(qu, qts, n, segments, ku, shape, scores, ou, ots); continue;
      case 2: attend_rows<2, E, kWide>(qu, qts, n, segments, ku, shape, scores, ou, ots); continue;
      case 3: attend_rows<3, E, kWide>(qu, qts, n, segments, ku, shape, scores, ou, ots); continue;
      case 4: attend_rows<4, E, kWide>(qu, qts, n, segments, ku, shape, scores, ou, ots); continue;
      case 6: attend_rows<6, E, kWide>(qu, qts, n, segments, ku, shape, scores, ou, ots); continue;
      case 8: attend_rows<8, E, kWide>(qu, qts, n, segments, ku, shape, scores, ou, ots); continue;
      default: break;
    }
    if constexpr (kWide) {
      switch (n * n_queries) {
        case 9: attend_rows<9, E, true>(qu, qts, n, segments, ku, shape, scores, ou, ots); continue;
        case 12: attend_rows<12, E, true>(qu, qts, n, segments, ku, shape, scores, ou, ots); continue;
        case 16: attend_rows<16, E, true>(qu, qts, n, segments, ku, shape, scores, ou, ots); continue;
        default: break;
      }
    }
    throw Error(ErrorCode::internal, "attend_tokens: " + std::to_string(n) + " tokens x " +
                                         std::to_string(n_queries) + " heads");
  }
}

}  // namespace

void attend_avx2(const float* q, int64_t n_queries, std::span<const KvSegment> segments, int64_t n_keys,
                 const AttentionShape& shape, float* scores, float* out) {
  if (shape.f16) return attend_typed<uint16_t, false>(q, n_queries, segments, n_keys, shape, scores, out);
  attend_typed<float, false>(q, n_queries, segments, n_keys, shape, scores, out);
}

void attend_avx512(const float* q, int64_t n_queries, std::span<const KvSegment> segments, int64_t n_keys,
                   const AttentionShape& shape, float* scores, float* out) {
  if (shape.f16) return attend_typed<uint16_t, true>(q, n_queries, segments, n_keys, shape, scores, out);
  attend_typed<float, true>(q, n_queries, segments, n_keys, shape, scores, out);
}

void attend_tokens_avx2(const float* q, int64_t q_token_stride, int64_t n_tokens, int64_t n_queries,
                        std::span<const KvSegment> segments, const int64_t* n_keys, const AttentionShape& shape,
                        float* scores, float* out, int64_t out_token_stride) {
  auto typed = shape.f16 ? attend_tokens_typed<uint16_t, false> : attend_tokens_typed<float, false>;
  typed(q, q_token_stride, n_tokens, n_queries, segments, n_keys, shape, scores, out, out_token_stride);
}

void attend_tokens_avx512(const float* q, int64_t q_token_stride, int64_t n_tokens, int64_t n_queries,
                          std::span<const KvSegment> segments, const int64_t* n_keys, const AttentionShape& shape,
                          float* scores, float* out, int64_t out_token_stride) {
  auto typed = shape.f16 ? attend_tokens_typed<uint16_t, true> : attend_tokens_typed<float, true>;
  typed(q, q_token_stride, n_tokens, n_queries, segments, n_keys, shape, scores, out, out_token_stride);
}

void exp_avx2(float* x, int64_t n) { exp_inplace(x, n); }

#undef IN_REGISTER

}  // namespace loom::kernels
