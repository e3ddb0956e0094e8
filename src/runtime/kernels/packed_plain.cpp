// The broadcast products of f32_x64, f16_x64 and bf16_x64 weights (packed_plain.hpp):
// an AVX-512 and an AVX2 tile family and the scalar family, the same fma chain per output.
#include "runtime/kernels/packed_plain.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>
#include <vector>

#include "common/simd.hpp"
#include "loom/convert.hpp"
#include "runtime/kernels/packed_panels.hpp"
#include "tensor/packing.hpp"

namespace loom::kernels {

namespace {

using Plain = packed_layout::Plain;
constexpr int64_t kPanelRows = Plain::rows;  // 64
constexpr int kVectors = 4;                  // 16-lane vectors per column of a panel
template <class E>
constexpr int64_t kColumnBytes = kPanelRows * static_cast<int64_t>(sizeof(typename E::T));

// Prefetches every line of the panel column kBytes past `column` into L1 (or, with
// _MM_HINT_T1, L2); a prefetch never faults, so the last columns' may point past the panel.
template <class E, int64_t kBytes, PrefetchHint kHint = _MM_HINT_T0>
[[gnu::always_inline]] inline void prefetch_column(const typename E::T* column) {
  const char* ahead = reinterpret_cast<const char*>(column) + kBytes;
  _Pragma("GCC unroll 4") for (int64_t line = 0; line < kColumnBytes<E>; line += 64) {
    _mm_prefetch(ahead + line, kHint);
  }
}

// The store mask of vector c (16 lanes) of a panel column with `valid` rows.
inline __mmask16 valid_lanes(int64_t valid, int c) {
  const int64_t lanes = std::clamp<int64_t>(valid - 16 * c, 0, 16);
  return static_cast<__mmask16>((uint32_t{1} << lanes) - 1);
}
static_assert(kVectors * 16 == kPanelRows);
// The widest token tile: on AVX-512 4 x 6 accumulators, 4 weight vectors and a broadcast
// (29 of the 32 zmm; a tile of 7 would leave no register for the broadcast); on AVX2 2 x 6,
// 2 weights and a broadcast (15 of 16 ymm).
constexpr int kMaxTokens = 6;
// Two token tiles (7 to 12 tokens: batched decode), or three (13 to 18, f16 and bf16),
// over a panel of more than kWholePanelBytes (f16 from 4096 columns, f32 from 2048: the
// 1B shape's down projection) take it a run of kRunBytes of columns at a time
// (native_panels), the first tile pulling kPullBytes ahead into L1, the others
// prefetching the next run into L2 (docs/runtime.md, "Plain-dtype panels").
constexpr int64_t kWholePanelBytes = 512 * 1024;
constexpr int64_t kRunBytes = 32 * 1024;
// Prefill (four tiles or more: 19 tokens and up) over such a panel goes by runs of
// kPrefillRunBytes: a run (512 f32 columns, 1024 f16) stays in L2 while every tile
// passes over it, where a whole 1 MiB panel, which each tile read again, did not (Zen 5's
// L2 is 1 MiB). `loom_linear_bench --benchmark_filter='BM_prefill/0/4096/4096/[12]/(64|
// 128)/1/'` (f32 4096 x 4096, 1 MiB panels; Zen 5, 2026-12-07), the two alternating
// twice, GFLOP/s whole panels / runs of 128 KiB: 2 threads 128 tokens 342, 340 / 390, 389,
// 64 tokens 323, 320 / 382, 376; 1 thread 128 tokens 184, 173 / 192, 197, 64 tokens 180,
// 167 / 186, 190. Runs of 16 KiB read 0.93-0.95x of whole panels, 32 KiB 1.00-1.08x,
// 64 KiB 1.03-1.16x, 256 KiB as 128. The 1B shape's down projection (2048 x 8192, the same
// filter with 2048/8192 and dtypes [01]), whole panels / runs alternating twice: f32 2
// threads 128 tokens 327, 312 / 386, 413, 64 tokens 311, 314 / 358, 411; f16 2 threads
// 369, 365 / 396, 419 and 360, 357 / 394, 415 (86-90% of the probe); 1 thread f32
// 1.05-1.21x, f16 1.07-1.08x. In the model the wide panels are one product of several:
// `loom_ab_builds --repack auto --batch 1 --prompt 256 --steps 2 --rounds 8 --layouts 4
// --threads 2`, prefill b/a 1B f16 (the down projection's 1 MiB panels) 1.010, small f32
// (704 KiB) 1.018.
constexpr int64_t kPrefillRunBytes = 128 * 1024;
constexpr int64_t kPrefillRunTiles = 4;
constexpr int64_t kPullBytes = 8 * 1024;
// The first tile over a panel in a product of 4 to 18 tokens (native_panels; streams()
// stops at 3) reads the one weight stream from memory, where only the tiles after it, if
// any, prefetch for it (the next panel, a line a column); with 2-byte elements it also
// prefetches its own columns kOwnAheadBytes ahead into L2 (docs/runtime.md, "Four to
// eighteen tokens"). f32 measured no gain and does not.
constexpr int64_t kOwnAheadBytes = 16 * 1024;

// Each dtype's element: its packing, a scalar widening, a 16-lane (AVX-512) and an 8-lane
// (AVX2) one.
struct F32 {
  using T = float;
  static constexpr Packing packing = Packing::f32_x64;
  static constexpr DType dtype = DType::f32;
  static constexpr bool own_prefetch = false;  // see kOwnAheadBytes
  static float scalar(T v) noexcept { return v; }
  LOOM_TARGET_AVX512 static __m512 load(const T* p) noexcept { return _mm512_loadu_ps(p); }
  LOOM_TARGET_AVX2 static __m256 load8(const T* p) noexcept { return _mm256_loadu_ps(p); }
};
struct F16 {
  using T = uint16_t;
  static constexpr Packing packing = Packing::f16_x64;
  static constexpr DType dtype = DType::f16;
  static constexpr bool own_prefetch = true;
  static float scalar(T v) noexcept { return f16_to_f32_scalar(v); }
  LOOM_TARGET_AVX512 static __m512 load(const T* p) noexcept {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  LOOM_TARGET_AVX2 static __m256 load8(const T* p) noexcept {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
};
struct Bf16 {
  using T = uint16_t;
  static constexpr Packing packing = Packing::bf16_x64;
  static constexpr DType dtype = DType::bf16;
  static constexpr bool own_prefetch = true;
  static float scalar(T v) noexcept { return bf16_to_f32_scalar(v); }
  LOOM_TARGET_AVX512 static __m512 load(const T* p) noexcept {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
  LOOM_TARGET_AVX2 static __m256 load8(const T* p) noexcept {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
};

// A packed weight's panels: panel p's element (r, k) at data[p * stride + 64k + r].
template <class E>
struct Panels {
  const typename E::T* data;
  int64_t rows;
  int64_t cols;
  int64_t stride;  // elements per panel
  int64_t panels;
  int64_t valid_rows(int64_t p) const noexcept { return std::min(kPanelRows, rows - p * kPanelRows); }
};

template <class E>
Panels<E> panels_of(const Tensor& w) {
  check_packed_weight(w, E::packing, E::dtype);
  const int64_t rows = w.shape()[0], cols = w.shape()[1];
  return {static_cast<const typename E::T*>(w.raw_data()), rows, cols, cols * kPanelRows,
          (rows + kPanelRows - 1) / kPanelRows};
}

// Lines to prefetch into L2 while a tile runs, one each `every` columns (a power of two)
// from `begin` until `end` (see native_panels: the next panel, or the next run of a wide
// panel's columns); none when begin is null. Or, for the first tile over a run of a wide
// panel's columns, each column kPullBytes ahead. (The first tile of a batched decode's
// product prefetches its own columns: tile's kOwn.)
struct Ahead {
  const char* begin = nullptr;
  const char* end = nullptr;
  int64_t every = 1;
  bool pull = false;  // prefetch every line of the column kPullBytes ahead into L1
};

// AVX-512: one panel (or a run of its columns, see native_panels) against T tokens,
// y[t * ys + r] for its `valid` rows; with `resume` the sums so far are read back from y
// (stored exactly, so each output is still one fma chain over k). The four weight
// vectors of a column are loaded (and widened) once for the T tokens, each x[t, k]
// broadcast once for the four. Up to 3 tokens come here only for a share's last panel,
// after streams() (below) took the others several at a time; T = 1 runs four independent
// FMA chains, no software prefetch (one sequential stream, which the hardware prefetchers
// follow). With kOwn every column kOwnAheadBytes ahead is prefetched into L2 (a compile-
// time choice, so prefill's tiles keep their loop as it was).
template <class E, int T, bool kOwn = false>
LOOM_TARGET_AVX512 void tile(const typename E::T* panel, int64_t cols, const float* x, int64_t xs, float* y,
                             int64_t ys, int64_t valid, Ahead ahead, bool resume) {
  __m512 acc[kVectors][T];
  _Pragma("GCC unroll 8") for (int c = 0; c < kVectors; ++c) {
    const __mmask16 mask = valid_lanes(valid, c);
    _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) {
      acc[c][t] = resume ? _mm512_maskz_loadu_ps(mask, y + t * ys + 16 * c) : _mm512_setzero_ps();
    }
  }
  const char* next = ahead.begin;
  for (int64_t k = 0; k < cols; ++k) {
    if ((k & (ahead.every - 1)) == 0 && next < ahead.end) {
      _mm_prefetch(next, _MM_HINT_T1);
      next += 64;
    }
    const typename E::T* column = panel + k * kPanelRows;
    if (ahead.pull) prefetch_column<E, kPullBytes>(column);
    if constexpr (kOwn) prefetch_column<E, kOwnAheadBytes, _MM_HINT_T1>(column);
    __m512 w[kVectors];
    _Pragma("GCC unroll 8") for (int c = 0; c < kVectors; ++c) w[c] = E::load(column + 16 * c);
    _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) {
      const __m512 xb = _mm512_set1_ps(x[t * xs + k]);
      _Pragma("GCC unroll 8") for (int c = 0; c < kVectors; ++c) acc[c][t] = _mm512_fmadd_ps(w[c], xb, acc[c][t]);
    }
  }
  _Pragma("GCC unroll 8") for (int c = 0; c < kVectors; ++c) {
    const __mmask16 mask = valid_lanes(valid, c);
    _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + t * ys + 16 * c, mask, acc[c][t]);
  }
}

// What one AVX2 pass over a panel prefetches into L2 while it runs (tile_avx2): lines
// [begin, end), at each column k with (k & every_mask) == 0 (the tile's kShareLines of
// them); nothing when begin is null.
struct PassShare {
  const char* begin = nullptr;
  const char* end = nullptr;
  int64_t every_mask = 0;
};

// Pass i of `passes` over a panel of `cols` columns: its share of the `bytes` from `next`
// (the next panel; none without one), pass i + 1's starting where it ends. With `spread`
// the share is spread over all the pass's columns (`lines` a column, every 2^j columns),
// else taken from the pass's start (what `lines` a column reach by its end). `lines` is
// the tile's kShareLines (the caller passes the same constant to both). Spread, the
// requests do not come in one burst (which, we take it, held up the pass's own loads),
// and a share larger than a line a column is all requested: `loom_ab_builds --repack
// auto --prompt 64 --steps 32 --rounds 4 --layouts 4 --threads 2` (Zen 1 EPYC,
// 2026-12-07), decode b/a against from the start: small f32 --batch 8 1.13x, --batch 2
// (two lines a column) 1.07x; f16 --batch 4 1.06x, --batch 8 1.05x; bf16 --batch 8
// 1.03x; prefill 0.99-1.01x.
inline PassShare pass_share(const char* next, int64_t bytes, int64_t i, int64_t passes, int64_t cols, int64_t lines,
                            bool spread) {
  if (!next) return {};
  PassShare share{next + bytes * i / passes, next + bytes * (i + 1) / passes};
  const int64_t steps = (share.end - share.begin + 64 * lines - 1) / (64 * lines);  // columns that prefetch
  int64_t every = 1;
  while (spread && steps > 0 && every * 2 * steps <= cols) every *= 2;
  share.every_mask = every - 1;
  return share;
}

// How far ahead the first pass of an AVX2 tile pulls each column (tile_avx2).
constexpr int64_t kAvx2PullBytes = 2048;
// AVX2 decode of f16/bf16 panels pulls each column 4 KiB ahead (32 columns): the hardware
// prefetchers alone left one panel stream a thread at about half the rate widening
// allows. `loom_ab_builds --repack auto --batch 1 --prompt 64 --steps 32 --rounds 4
// --layouts 4 --threads 2` (Zen 1 EPYC, 2026-12-06), decode b/a against none: small f16
// 1.27 / 1.28x (geometric mean / median of the rounds), bf16 1.20 / 1.20x; 2 and 8 KiB
// read the same as 4 (1.03 / 1.01x, 1.00 / 1.00x). f32 (256-byte columns) read 0.91x at
// 2 KiB, 0.95-1.00x at 4, 0.89-0.91x at 8 and 16 (all into L1, _MM_HINT_T0); with the
// non-temporal hint (kDecodeStreamHint, which f16 and bf16 take too) it pulls 512 bytes
// (two columns) ahead: kAvx2F32DecodePullBytes.
constexpr int64_t kAvx2DecodePullBytes = 4096;
// f32's decode pull, non-temporal: `loom_ab_builds --repack auto --batch 1 --prompt 32
// --steps 32 --rounds 8 --layouts 4 --threads 2` (Zen 1 EPYC, 2026-12-07), small f32
// decode b/a against no pull 1.147x and 1.109x; against 512 bytes: 256 0.988x, 768
// 0.994x, 512 with _MM_HINT_T0 0.927x; 1 KiB against none 1.028x and 1.024x. f16 and
// bf16 keep 4 KiB (512 bytes read 0.936x / 0.945x against it, 1 KiB 0.973x / 1.001x).
constexpr int64_t kAvx2F32DecodePullBytes = 512;

// AVX2 (16 registers of 8 lanes): V vectors, rows [row0, row0 + 8V) of a panel, against T
// tokens (avx2_panel picks V). The same fma chain per output as the AVX-512 tile. With
// kPullAhead (the first pass over a panel: kAvx2PullBytes) each column that many bytes
// ahead is prefetched whole, so the later passes, which each read part of every column,
// find it in L1/L2: without, f32 at 8 tokens ran at half the rate (its 256-byte columns
// read a quarter at a time from L3). Decode pulls its columns ahead too
// (kAvx2DecodePullBytes, kAvx2F32DecodePullBytes), with kPullHint kDecodeStreamHint
// (non-temporal). The last columns' prefetches point past the panel (a prefetch never
// faults).
// With kWiden it also stores each column's widened rows to `widened` (8V floats a column,
// contiguous), kStride is the elements between columns (a panel's, or 8V for such a copy
// read back as f32), and kOwnLine prefetches the line of each column the tile reads 2 KiB
// ahead (avx2_quarter). `share` (the pass's share of the next panel: pass_share, from
// avx2_panel and avx2_quarter_panels) is prefetched into L2 while the tile runs.
template <class E, int V, int T, int64_t kPullAhead = 0, bool kWiden = false, int64_t kStride = kPanelRows,
          bool kOwnLine = false, int kShareLines = 1, PrefetchHint kPullHint = _MM_HINT_T0>
LOOM_TARGET_AVX2 void tile_avx2(const typename E::T* panel, int64_t row0, int64_t cols, const float* x, int64_t xs,
                                float* y, int64_t ys, int64_t valid, float* widened = nullptr,
                                PassShare share = {}) {
  __m256 acc[V][T];
  _Pragma("GCC unroll 8") for (int c = 0; c < V; ++c) {
    _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) acc[c][t] = _mm256_setzero_ps();
  }
  for (int64_t k = 0; k < cols; ++k) {
    if ((k & share.every_mask) == 0) {
      _Pragma("GCC unroll 4") for (int line = 0; line < kShareLines; ++line) {
        if (share.begin < share.end) {
          _mm_prefetch(share.begin, _MM_HINT_T1);
          share.begin += 64;
        }
      }
    }
    if constexpr (kPullAhead > 0) prefetch_column<E, kPullAhead, kPullHint>(panel + k * kPanelRows);
    const typename E::T* column = panel + k * kStride + row0;
    if constexpr (kOwnLine) _mm_prefetch(reinterpret_cast<const char*>(column) + 2048, _MM_HINT_T0);
    __m256 w[V];
    _Pragma("GCC unroll 8") for (int c = 0; c < V; ++c) w[c] = E::load8(column + 8 * c);
    if constexpr (kWiden) {
      _Pragma("GCC unroll 8") for (int c = 0; c < V; ++c) _mm256_storeu_ps(widened + k * 8 * V + 8 * c, w[c]);
    }
    _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) {
      const __m256 xb = _mm256_broadcast_ss(x + t * xs + k);
      _Pragma("GCC unroll 8") for (int c = 0; c < V; ++c) acc[c][t] = _mm256_fmadd_ps(w[c], xb, acc[c][t]);
    }
  }
  _Pragma("GCC unroll 8") for (int c = 0; c < V; ++c) {
    const int64_t lanes = std::clamp<int64_t>(valid - row0 - 8 * c, 0, 8);
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(lanes)),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) {
      float* out = y + t * ys + row0 + 8 * c;
      if (lanes == 8) {
        _mm256_storeu_ps(out, acc[c][t]);
      } else {
        _mm256_maskstore_ps(out, mask, acc[c][t]);
      }
    }
  }
}

// AVX-512 products of 1 to 3 tokens (decode, small batches, speculative rounds) over N
// distant panels at once (panel i of each N-th of a range): N weight streams, each
// column prefetched 1 KiB ahead into L1 (every line of it; 256 bytes and 2 KiB measured
// slower; non-temporal, as AVX2 decode takes it, on Zen 5 `loom_ab_builds --repack auto
// --batch 1 --prompt 32 --steps 32 --rounds 8 --layouts 4 --threads 2`, decode b/a, 1 KiB
// ahead f16 0.969x, f32 1.006x, 512 bytes 0.891x / 0.882x), N x 4 x U FMA chains (U
// tokens). One panel stream left a thread short of the bus (docs/runtime.md, "Plain-dtype
// panels"), with one token or several. Each output is still one fma chain over k from
// +0, so the bits are tile<E, U>'s.
template <class E, int N, int U>
LOOM_TARGET_AVX512 void streams(const typename E::T* const* panels, int64_t cols, const float* x, int64_t xs,
                                float* const* y, int64_t ys, const int64_t* valid) {
  static_assert(N * kVectors * U <= 24, "accumulators, 4 weight vectors and U broadcasts in 32 zmm");
  __m512 acc[N][U][kVectors];
  _Pragma("GCC unroll 8") for (int j = 0; j < N; ++j) {
    _Pragma("GCC unroll 8") for (int u = 0; u < U; ++u) {
      _Pragma("GCC unroll 8") for (int c = 0; c < kVectors; ++c) acc[j][u][c] = _mm512_setzero_ps();
    }
  }
  for (int64_t k = 0; k < cols; ++k) {
    __m512 xb[U];
    _Pragma("GCC unroll 8") for (int u = 0; u < U; ++u) xb[u] = _mm512_set1_ps(x[u * xs + k]);
    _Pragma("GCC unroll 8") for (int j = 0; j < N; ++j) {
      const typename E::T* column = panels[j] + k * kPanelRows;
      prefetch_column<E, 1024>(column);
      _Pragma("GCC unroll 8") for (int c = 0; c < kVectors; ++c) {
        const __m512 wv = E::load(column + 16 * c);
        _Pragma("GCC unroll 8") for (int u = 0; u < U; ++u) acc[j][u][c] = _mm512_fmadd_ps(wv, xb[u], acc[j][u][c]);
      }
    }
  }
  _Pragma("GCC unroll 8") for (int j = 0; j < N; ++j) {
    _Pragma("GCC unroll 8") for (int u = 0; u < U; ++u) {
      _Pragma("GCC unroll 8") for (int c = 0; c < kVectors; ++c) {
        _mm512_mask_storeu_ps(y[j] + u * ys + 16 * c, valid_lanes(valid[j], c), acc[j][u][c]);
      }
    }
  }
}

// How many panels streams() takes at once for a product of T tokens (as many as the
// accumulators allow: N x 4 x U <= 24), and the grain of run()'s split. Measured with a
// scratch probe (a 128 MiB f16 product from memory, 2 threads, in turn with one panel at a
// time, 2026-12-05): at 2 and 3 tokens one stream read 25-32 GB/s, two 41-45, three
// 46-59; decode's four read 50-68. From 4 tokens on, two or three streams (the tokens in
// groups, a run of columns at a time, the later groups from L1) measured 0.82-1.31x one
// panel at a time in the probe and 0.93x on the 1B f16 model at 4 tokens: not taken;
// there f16 and bf16 tiles prefetch their own stream instead (kOwnAheadBytes).
// Decode's share of the panels is a multiple of four; 2 and 3 tokens' shares are any
// number of panels, and a share's last panels, fewer than N but at least two, go as that
// many streams.
struct StreamPlan {
  int streams = 0;  // N; 0: the product runs as token tiles (native_panels)
  int grain = 1;
};
constexpr std::array<StreamPlan, 4> kStreamPlans{
    StreamPlan{},  // no tokens
    {4, 4},        // 1 token (decode): 4 panels x 1
    {3, 1},        // 2 tokens: 3 panels x 2
    {2, 1},        // 3 tokens: 2 panels x 3
};

using StreamFn = void (*)(const void* const*, int64_t, const float*, int64_t, float* const*, int64_t, const int64_t*);

template <class E, int N, int U>
void streams_erased(const void* const* panels, int64_t cols, const float* x, int64_t xs, float* const* y, int64_t ys,
                    const int64_t* valid) {
  streams<E, N, U>(reinterpret_cast<const typename E::T* const*>(panels), cols, x, xs, y, ys, valid);
}

// The (N, U) pairs streams() is built for: every plan's N, and the fewer that end a share.
struct StreamShape {
  int n;
  int u;
};
constexpr std::array<StreamShape, 6> kStreamShapes{{{4, 1}, {3, 1}, {2, 1}, {3, 2}, {2, 2}, {2, 3}}};

// The index of (n, u) in kStreamShapes, or -1.
constexpr int stream_shape_index(int n, int64_t u) {
  for (size_t i = 0; i < kStreamShapes.size(); ++i) {
    if (kStreamShapes[i].n == n && kStreamShapes[i].u == u) return static_cast<int>(i);
  }
  return -1;
}
// Every plan reaches only shapes that are built (streamed_panels calls what stream_fn
// returns).
constexpr bool every_plan_has_its_streams() {
  for (size_t t = 1; t < kStreamPlans.size(); ++t) {
    for (int n = kStreamPlans[t].streams; n >= 2; --n) {
      if (stream_shape_index(n, static_cast<int64_t>(t)) < 0) return false;
    }
  }
  return true;
}
static_assert(every_plan_has_its_streams());

template <class E, size_t... I>
constexpr std::array<StreamFn, sizeof...(I)> stream_fns_of(std::index_sequence<I...>) {
  return {&streams_erased<E, kStreamShapes[I].n, kStreamShapes[I].u>...};
}

// The streams() instance for n panels and u tokens (a shape every_plan_has_its_streams
// vouches for).
template <class E>
StreamFn stream_fn(int n, int64_t u) {
  static constexpr auto kFns = stream_fns_of<E>(std::make_index_sequence<kStreamShapes.size()>{});
  return kFns[static_cast<size_t>(stream_shape_index(n, u))];
}

using TileFn = void (*)(const void*, int64_t, const float*, int64_t, float*, int64_t, int64_t, Ahead, bool);

template <class E, int T, bool kOwn>
void tile_erased(const void* panel, int64_t cols, const float* x, int64_t xs, float* y, int64_t ys, int64_t valid,
                 Ahead ahead, bool resume) {
  tile<E, T, kOwn>(static_cast<const typename E::T*>(panel), cols, x, xs, y, ys, valid, ahead, resume);
}

template <class E, bool kOwn, int... I>
constexpr std::array<TileFn, sizeof...(I)> tiles_of(std::integer_sequence<int, I...>) {
  return {&tile_erased<E, I + 1, kOwn>...};
}

// AVX2: a token tile of one width over a whole panel: decode the whole column at once
// (eight FMA chains, pulling the columns ahead non-temporally), two tokens as two halves
// of 32 rows (eight chains), three to six tokens as four quarters of 16 rows (2T
// accumulators). Only the first of those passes reads memory, so each prefetches its
// share of `ahead` (the next panel, native_panels) into L2, spread over its columns
// (pass_share), and the bus works while the later passes compute from cache:
// `loom_ab_builds --repack auto --prompt 64 --steps 32 --rounds 4 --layouts 4 --threads
// 2` (Zen 1 EPYC, 2026-12-06), decode b/a against none: --batch 4 small f32 1.67x, f16
// 1.18x; --batch 2 f32 1.13x, bf16 1.24x. The tile shapes were measured on the Zen 4
// kind with LOOM_ISA=avx2 (docs/runtime.md, "Plain-dtype panels"). Always the whole panel
// from +0 (the runs that resume are AVX-512's).
template <class E, int T>
void avx2_panel(const void* panel, int64_t cols, const float* x, int64_t xs, float* y, int64_t ys, int64_t valid,
                Ahead ahead, bool /*resume*/) {
  const auto* p = static_cast<const typename E::T*>(panel);
  if constexpr (T == 1) {
    // The pull: kAvx2DecodePullBytes, kAvx2F32DecodePullBytes; its hint kDecodeStreamHint.
    constexpr int64_t kPull = sizeof(typename E::T) == 2 ? kAvx2DecodePullBytes : kAvx2F32DecodePullBytes;
    tile_avx2<E, 8, 1, kPull, false, kPanelRows, false, 1, kDecodeStreamHint>(p, 0, cols, x, xs, y, ys, valid);
  } else {
    // Eight FMA chains at two tokens (half the panel at a time), 2T from three tokens on.
    constexpr int kV = T == 2 ? 4 : 2;
    const int64_t passes = (std::min(valid, kPanelRows) + 8 * kV - 1) / (8 * kV);
    // Lines a column for a whole panel's share (f32 at two tokens: two; else one).
    constexpr int kLines = std::max<int>(1, static_cast<int>(kColumnBytes<E> / 64 / (kPanelRows / (8 * kV))));
    const int64_t bytes = ahead.end - ahead.begin;
    const auto share = [&](int64_t i) { return pass_share(ahead.begin, bytes, i, passes, cols, kLines, true); };
    tile_avx2<E, kV, T, kAvx2PullBytes, false, kPanelRows, false, kLines>(p, 0, cols, x, xs, y, ys, valid, nullptr,
                                                                          share(0));
    for (int64_t i = 1; i < passes; ++i) {
      tile_avx2<E, kV, T, 0, false, kPanelRows, false, kLines>(p, 8 * kV * i, cols, x, xs, y, ys, valid, nullptr,
                                                               share(i));
    }
  }
}

template <class E, int... I>
constexpr std::array<TileFn, sizeof...(I)> avx2_tiles_of(std::integer_sequence<int, I...>) {
  return {&avx2_panel<E, I + 1>...};
}

// The width of tile i of `tiles` balanced tiles over n_tokens (the first ones one wider).
constexpr int64_t balanced_width(int64_t n_tokens, int64_t tiles, int64_t i) {
  return n_tokens / tiles + (i < n_tokens % tiles ? 1 : 0);
}

// AVX2, a product of two token tiles or more (batched decode, prefill): each quarter of
// 16 rows of a panel meets every tile before the next quarter. With 2-byte elements the
// first tile widens the quarter's weights once into a thread's f32 copy (64 bytes a
// column) that the other tiles read back, instead of each tile widening them again: on
// Zen 1 a VCVTPH2PS costs about 3 cycles of the pipes the FMAs use, against a tile's 2T
// FMAs a pair of vectors. f32's later tiles read the quarter from the panel, where the
// first tile has just brought it into L1/L2 (tile by tile, a later tile met the panel
// again after the first had read all of it: from L3 once it outgrew L2). `loom_ab_builds
// --repack auto --batch 8 --prompt 64 --steps 32 --layouts 4 --threads 2` (Zen 1 EPYC,
// 2026-12-06), b/a geometric mean / median of the rounds: small f16 prefill 1.305 /
// 1.276x, decode 1.061 / 1.069x; bf16 (whose widening is a shift) 1.186 / 1.187x, 1.038
// / 1.044x; f32 prefill 1.018 / 1.016x, decode 1.120 / 1.129x. The quarter order alone
// (f16 widened by every tile) read prefill 0.773x, decode 0.929x, and f32 through a copy
// decode 0.832x: the copy pays where it saves the widening. The copy holds the exact
// widened values and each output keeps its one fma chain over k from +0: the same bits.
// The quarter order is taken only where a quarter stays in L2 (kMaxQuarterBytes of f32:
// up to 4096 columns).
// Only a panel's first pass reads memory, so every pass over panel p prefetches its share
// of panel p + 1 into L2 (spread over its columns in batched decode, one line a column
// from its start in prefill: pass_share), and the bus works while the later passes
// compute from cache; the first pass still pulls its columns 2 KiB ahead into L1 (from L2
// now, or memory for a thread's first panel). Against without, `loom_ab_builds --repack
// auto --batch 8 --prompt 64 --steps 32 --rounds 4 --layouts 4 --threads 2` (Zen 1 EPYC,
// 2026-12-06) b/a decode: small f32 1.29x with the pull on a thread's first panel only,
// 1.08x more with it on every panel; f16 1.07x, bf16 1.10x; prefill 0.98-1.02x. Pulling
// 4 KiB ahead instead of 2 read 1.00-1.04x.
constexpr int64_t kQuarterRows = 16;
constexpr int64_t kMostSpreadTiles = 3;
constexpr int64_t kMaxQuarterBytes = 256 * 1024;

using QuarterFn = void (*)(const void*, int64_t, int64_t, const float*, int64_t, float*, int64_t, int64_t, float*,
                           PassShare);
using WidenedFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, int64_t, PassShare);

// Rows [row0, row0 + 16) of a panel against T tokens; kWiden: their widened values to
// `widened` too; kPull: pulling the panel's columns ahead (the first tile over a panel's
// first quarter, as avx2_panel's first pass), else prefetching the quarter's own line of
// each column ahead: the quarter is one line in every 256-byte f32 column (128 f16) of a
// panel in L2, a walk the hardware prefetchers did not keep ahead of (f32 --batch 8
// decode 0.82x without it).
template <class E, int T, bool kPull, bool kWiden>
void avx2_quarter(const void* panel, int64_t row0, int64_t cols, const float* x, int64_t xs, float* y, int64_t ys,
                  int64_t valid, float* widened, PassShare share) {
  tile_avx2<E, 2, T, kPull ? kAvx2PullBytes : 0, kWiden, kPanelRows, !kPull>(
      static_cast<const typename E::T*>(panel), row0, cols, x, xs, y, ys, valid, widened, share);
}

// A widened quarter (16 f32 rows a column) against T tokens.
template <int T>
void avx2_widened_quarter(const float* widened, int64_t cols, const float* x, int64_t xs, float* y, int64_t ys,
                          int64_t valid, PassShare share) {
  tile_avx2<F32, 2, T, false, false, kQuarterRows>(widened, 0, cols, x, xs, y, ys, valid, nullptr, share);
}

template <class E, bool kPull, bool kWiden, int... I>
constexpr std::array<QuarterFn, sizeof...(I)> quarter_fns_of(std::integer_sequence<int, I...>) {
  return {&avx2_quarter<E, I + 1, kPull, kWiden>...};
}
template <int... I>
constexpr std::array<WidenedFn, sizeof...(I)> widened_fns_of(std::integer_sequence<int, I...>) {
  return {&avx2_widened_quarter<I + 1>...};
}

// Panels [p0, p1) against n_tokens (two tiles or more) quarter by quarter (above).
template <class E>
void avx2_quarter_panels(const Panels<E>& w, int64_t p0, int64_t p1, const float* x, int64_t xs, int64_t n_tokens,
                         float* y, int64_t ys) {
  constexpr bool kWiden = sizeof(typename E::T) == 2;
  using Tokens = std::make_integer_sequence<int, kMaxTokens>;
  static constexpr auto kPullFirst = quarter_fns_of<E, true, kWiden>(Tokens{});
  static constexpr auto kFirst = quarter_fns_of<E, false, kWiden>(Tokens{});
  static constexpr auto kLater = quarter_fns_of<E, false, false>(Tokens{});
  static constexpr auto kWidened = widened_fns_of(Tokens{});
  thread_local std::vector<float> widened;
  if constexpr (kWiden) widened.resize(std::max(widened.size(), static_cast<size_t>(kQuarterRows * w.cols)));
  const int64_t tiles = (n_tokens + kMaxTokens - 1) / kMaxTokens;
  const int64_t panel_bytes = w.cols * kColumnBytes<E>;
  // Batched decode's few tiles spread each pass's share over its columns; prefill's many
  // (more than kMostSpreadTiles) keep one line a column from a pass's start: spread, a
  // 64-token prompt read 0.98x.
  const bool spread = tiles <= kMostSpreadTiles;
  for (int64_t p = p0; p < p1; ++p) {
    const typename E::T* panel = w.data + p * w.stride;
    const int64_t valid = w.valid_rows(p);
    const int64_t passes = (valid + kQuarterRows - 1) / kQuarterRows * tiles;
    const char* next = p + 1 < p1 ? reinterpret_cast<const char*>(panel + w.stride) : nullptr;
    int64_t pass = 0;
    for (int64_t row0 = 0; row0 < valid; row0 += kQuarterRows) {
      int64_t t0 = 0;
      for (int64_t i = 0; i < tiles; ++i, ++pass) {
        const int64_t width = balanced_width(n_tokens, tiles, i);
        const auto at = static_cast<size_t>(width - 1);
        float* out = y + t0 * ys + p * kPanelRows;
        const PassShare share = pass_share(next, panel_bytes, pass, passes, w.cols, 1, spread);
        if (i == 0) {
          const auto& first = row0 == 0 ? kPullFirst : kFirst;
          first[at](panel, row0, w.cols, x + t0 * xs, xs, out, ys, valid, widened.data(), share);
        } else if constexpr (kWiden) {
          kWidened[at](widened.data(), w.cols, x + t0 * xs, xs, out + row0, ys, valid - row0, share);
        } else {
          kLater[at](panel, row0, w.cols, x + t0 * xs, xs, out, ys, valid, nullptr, share);
        }
        t0 += width;
      }
    }
  }
}

// How a product of n_tokens goes through streams() on this machine (AVX-512, 1 to 3
// tokens; streams == 0: it does not).
StreamPlan stream_plan(int64_t n_tokens) noexcept {
  if (n_tokens < 1 || n_tokens >= static_cast<int64_t>(kStreamPlans.size()) || active_isa() < Isa::avx512) return {};
  return kStreamPlans[static_cast<size_t>(n_tokens)];
}

// Panels [p0, p1) through streams(), N at once (panel i of each N-th); the last panels,
// fewer than N but at least two, as that many streams. Returns the first panel left (at
// most one), which the token tiles take.
template <class E>
int64_t streamed_panels(const Panels<E>& w, int64_t p0, int64_t p1, const float* x, int64_t xs, int64_t n_tokens,
                        float* y, int64_t ys) {
  for (int n = stream_plan(n_tokens).streams; n >= 2 && p1 - p0 >= 2;
       n = static_cast<int>(std::min<int64_t>(n - 1, p1 - p0))) {
    const StreamFn fn = stream_fn<E>(n, n_tokens);
    const int64_t part = (p1 - p0) / n;
    for (int64_t i = 0; i < part; ++i) {
      const void* panels[4];
      float* outs[4];
      int64_t valid[4];
      for (int j = 0; j < n; ++j) {
        const int64_t p = p0 + i + j * part;
        panels[j] = w.data + p * w.stride;
        outs[j] = y + p * kPanelRows;
        valid[j] = w.valid_rows(p);
      }
      fn(panels, w.cols, x, xs, outs, ys, valid);
    }
    p0 += n * part;
  }
  return p0;
}

// Panels [p0, p1) against every token: each panel meets the token tiles (balanced widths
// of at most kMaxTokens) one after another, the first reading it from memory, the others
// from L2 (a panel of 1024 f16 columns is 128 KiB). On AVX-512 the tiles after the first
// prefetch the next panel into L2, a share each, at most one line a column (so with few
// tiles part of the share is left to the hardware prefetchers; prefetching all of it, in
// every tile, measured no faster: docs/runtime.md); the AVX2 tiles pull each panel's
// columns ahead themselves (tile_avx2), and one AVX2 tile of 2 to 6 tokens, which passes
// over the panel in halves or quarters, gets the whole next panel as `ahead`, a share
// for each pass (avx2_panel; two tiles or more take avx2_quarter_panels). Two (f16,
// bf16: or three) AVX-512 tiles over a panel of more than kWholePanelBytes meet it a run
// of columns at a time instead, the tiles after the first prefetching the next run, and
// so do prefill's four or more, by longer runs (kPrefillRunBytes). The first of one to
// three tiles over a whole panel (4 to 18 tokens) prefetches its own columns ahead too
// (f16 and bf16: kOwnAheadBytes). On AVX-512 products of up to 3 tokens take the range
// several panels at a time (streamed_panels), a last one alone.
template <class E>
void native_panels(const Panels<E>& w, int64_t p0, int64_t p1, const float* x, int64_t xs, int64_t n_tokens,
                   float* y, int64_t ys) {
  static constexpr auto kAvx512 = tiles_of<E, false>(std::make_integer_sequence<int, kMaxTokens>{});
  // (f32, which does not prefetch its own columns, gets the same instances twice.)
  static constexpr auto kAvx512Own = tiles_of<E, E::own_prefetch>(std::make_integer_sequence<int, kMaxTokens>{});
  static constexpr auto kAvx2 = avx2_tiles_of<E>(std::make_integer_sequence<int, kMaxTokens>{});
  const bool avx512 = active_isa() >= Isa::avx512;
  const auto& kTiles = avx512 ? kAvx512 : kAvx2;
  if (stream_plan(n_tokens).streams > 0) p0 = streamed_panels(w, p0, p1, x, xs, n_tokens, y, ys);
  const int64_t tiles = (n_tokens + kMaxTokens - 1) / kMaxTokens;
  if (!avx512 && tiles >= 2 && kQuarterRows * w.cols * static_cast<int64_t>(sizeof(float)) <= kMaxQuarterBytes) {
    avx2_quarter_panels(w, p0, p1, x, xs, n_tokens, y, ys);
    return;
  }
  // Two or three tiles over a panel wider than kWholePanelBytes: by runs of columns, each
  // tile resuming its sums from y, so the later ones read the run from L1 (a whole 1 MiB
  // panel did not stay in L2 for them), the first prefetching ahead of itself, the others
  // the next run, a share each (which keeps the memory busy while they work from L1).
  // Prefill's many tiles (kPrefillRunTiles or more) take longer runs (kPrefillRunBytes).
  const int64_t panel_bytes = w.stride * static_cast<int64_t>(sizeof(typename E::T));
  // Three tiles by runs for the 2-byte elements only: f32's runs are half as many
  // columns, and its decode at 16 tokens measured no gain so (docs/runtime.md).
  constexpr int64_t kMostRunTiles = sizeof(typename E::T) == 2 ? 3 : 2;
  const bool wide = avx512 && panel_bytes > kWholePanelBytes;
  const bool prefill_runs = wide && tiles >= kPrefillRunTiles;
  const bool by_runs = prefill_runs || (wide && tiles >= 2 && tiles <= kMostRunTiles);
  const int64_t run_bytes = prefill_runs ? kPrefillRunBytes : kRunBytes;
  const int64_t run_cols = by_runs ? run_bytes / kColumnBytes<E> : w.cols;
  // The tiles after the first prefetch what comes next into L2, a share each, one line
  // every `every` columns (the largest power of two with every * lines <= cols): over
  // whole panels the next panel; by runs the next run (the next columns, or the next
  // panel's first), past the kPullBytes the first tile's pull has already asked for.
  // Nothing past the thread's range.
  const int64_t skip = by_runs ? kPullBytes : 0;
  const int64_t region = by_runs ? run_bytes - kPullBytes : panel_bytes;
  const int64_t share = tiles > 1 ? (region + tiles - 2) / (tiles - 1) : 0;
  int64_t every = 1;
  while (share > 0 && every * 2 * ((share + 63) / 64) <= run_cols) every *= 2;
  const char* range_end = reinterpret_cast<const char*>(w.data + p1 * w.stride);
  // The first tile over a whole panel, where at most two tiles follow it (4 to 18 tokens:
  // batched decode), prefetches its own columns ahead (kOwnAheadBytes); prefill's many
  // tiles keep the next-panel prefetch alone.
  const bool first_own = E::own_prefetch && avx512 && !by_runs && tiles <= 3 && n_tokens >= 4;
  for (int64_t p = p0; p < p1; ++p) {
    const typename E::T* panel = w.data + p * w.stride;
    for (int64_t k0 = 0; k0 < w.cols; k0 += run_cols) {
      const int64_t cols = std::min(run_cols, w.cols - k0);
      const char* after = reinterpret_cast<const char*>(panel + (k0 + cols) * kPanelRows);
      const char* next = after + skip;
      int64_t t0 = 0;
      for (int64_t i = 0; i < tiles; ++i) {
        const int64_t width = balanced_width(n_tokens, tiles, i);
        Ahead ahead;
        if (i > 0 && after < range_end) {
          ahead.begin = next + (i - 1) * share;
          ahead.end = std::min(next + region, ahead.begin + share);
          ahead.every = every;
        }
        ahead.pull = by_runs && i == 0;
        if (!avx512 && tiles == 1 && after < range_end) {  // the next panel (avx2_panel)
          ahead.begin = after;
          ahead.end = after + panel_bytes;
        }
        const auto& tiles_here = first_own && i == 0 ? kAvx512Own : kTiles;
        tiles_here[static_cast<size_t>(width - 1)](panel + k0 * kPanelRows, cols, x + t0 * xs + k0, xs,
                                                   y + t0 * ys + p * kPanelRows, ys, w.valid_rows(p), ahead, k0 > 0);
        t0 += width;
      }
    }
  }
}

// The scalar family: each output the same fma chain over k from +0.
template <class E>
void scalar_panels(const Panels<E>& w, int64_t p0, int64_t p1, const float* x, int64_t xs, int64_t n_tokens,
                   float* y, int64_t ys) {
  for (int64_t p = p0; p < p1; ++p) {
    const typename E::T* panel = w.data + p * w.stride;
    for (int64_t r = 0; r < w.valid_rows(p); ++r) {
      for (int64_t t = 0; t < n_tokens; ++t) {
        const float* xt = x + t * xs;
        float acc = 0.0f;
        for (int64_t k = 0; k < w.cols; ++k) acc = std::fma(E::scalar(panel[Plain::at(r, k)]), xt[k], acc);
        y[t * ys + p * kPanelRows + r] = acc;
      }
    }
  }
}

template <class E>
void run(const Tensor& w, const Tensor* bias, const float* x, int64_t x_stride, int64_t n_tokens, float* y,
         int64_t y_stride, ThreadPool& pool) {
  if (n_tokens <= 0) return;
  const Panels<E> panels = panels_of<E>(w);
  const bool native = packed_plain_native();
  // AVX-512 decode splits the panels in groups of four, so a thread's share feeds
  // streams<E, 4, 1> (when decode took chunks of one or two panels from a counter, a
  // 1024-row matrix at two threads never reached it); 2 and 3 tokens split by single
  // panels (streamed_panels ends a share with fewer streams). The AVX2 and scalar levels
  // read one panel at a time and split by single panels: in groups of four a 256-row
  // matrix went to one thread of two (small shape, LOOM_ISA=avx2, two threads,
  // loom_ab_builds: grain one over four, f32 1.026x and 1.028x, f16 1.038x and 1.077x).
  // On AVX-512, groups only where every thread gets one measured the same as groups
  // everywhere (f16 1.028x / 0.999x, f32 0.985x / 0.963x), so that stays simple.
  const int64_t grain = native ? stream_plan(n_tokens).grain : 1;
  split_rows(pool, panels.panels, grain, n_tokens, [&](int64_t p0, int64_t p1) {
    if (native) {
      native_panels(panels, p0, p1, x, x_stride, n_tokens, y, y_stride);
    } else {
      scalar_panels(panels, p0, p1, x, x_stride, n_tokens, y, y_stride);
    }
    add_bias(bias, p0 * kPanelRows, std::min(panels.rows, p1 * kPanelRows), n_tokens, y, y_stride);
  });
}

template <class E>
void run_scalar(const Tensor& w, const float* x, int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride) {
  const Panels<E> panels = panels_of<E>(w);
  scalar_panels(panels, 0, panels.panels, x, x_stride, n_tokens, y, y_stride);
}

template <class E>
constexpr PackedProducts plain_products() {
  return {E::packing, run<E>, run_scalar<E>, packed_plain_native};
}

constexpr std::array<PackedProducts, 3> kProducts{plain_products<F32>(), plain_products<F16>(),
                                                  plain_products<Bf16>()};

}  // namespace

std::span<const PackedProducts> packed_plain_products() noexcept { return kProducts; }

}  // namespace loom::kernels
