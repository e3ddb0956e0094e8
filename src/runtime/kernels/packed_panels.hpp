// Internal: what the packed-weight kernels (packed_blocks32.*, packed_kquants.*) share:
// panels of 16 rows split over the pool, blocks of panels kept in L2 while balanced
// token tiles pass over them, the bias, and whether their VNNI kernels run on this CPU;
// and, with the plain-dtype panels (packed_plain.*), the hint of the AVX2 decode stream.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "common/simd.hpp"
#include "loom/cpu.hpp"
#include "loom/error.hpp"
#include "loom/tensor.hpp"
#include "loom/thread_pool.hpp"
#include "runtime/kernels/linear.hpp"

namespace loom::kernels {

// Rows interleaved in one panel, in every packing (tensor/packing.hpp).
inline constexpr int64_t kPackedPanelRows = 16;

// Whether this CPU (at the current ISA cap) runs the packed kernels' VNNI tiles (AVX-512
// VNNI). The runtime prefers a packing only where its products run natively
// (preferred_packing, packed_native below): here, or on AVX2 through the AVX2 tiles;
// elsewhere a packed weight still works through the scalar family, which computes the
// same numbers slowly.
inline bool packed_vnni_native() noexcept { return active_isa() >= Isa::avx512 && cpu_features().avx512_vnni; }

// How far ahead of its loads each panel stream prefetches, in every packed kernel: 4 KiB.
// In a 32000 x 1024 packed product from memory, one thread, 4 tokens (Zen 4, 35 GB/s
// memory): 1593 us without, 1016 with 2 KiB, 940 with 4 KiB. With two decode streams
// per thread on the Zen 5 machines (memory at 77-96 GB/s) 2 KiB left too few lines in
// flight: `loom_ab_builds --batch 1 --repack auto`, decode 4 KiB / 2 KiB (geometric mean
// of 4 layouts / median of 8 rounds): small q4_k pack 1.102 / 1.098x, q6_k pack 1.093 /
// 1.090x, q8_0 GGUF 1.039 / 1.035x and 1.016 / 1.004x, 1B q4_k GGUF 1.038 / 1.029x; 6 KiB
// and 8 KiB measured no better than 4 (q4_k) and worse (q8_0) in a scratch timing of
// the small shape's products. Tiles of several tokens, the same at --batch 8: small q8_0
// 1.008 / 1.014x, q4_k pack 1.023 / 1.022x, 1B q8_0 1.016 / 1.027x (prefill 1.02-1.03x).
inline constexpr int64_t kPackedAheadBytes = 4096;

// Software prefetch of a panel's stream in decode: a group (one block of one panel) of
// kBytes is walked in kSteps steps, and step k prefetches the lines of its share of the
// bytes kPackedAheadBytes past the group, [k * kPer, (k + 1) * kPer) with kPer = kBytes /
// kSteps rounded up (a fixed count of lines, so no branch). A panel's groups are
// contiguous, so the steps of every group together prefetch every line of the panel's
// stream: scales, zero points and masks too, not only the quant vectors the steps load.
// Prefetching ahead of each loaded vector instead skipped, per group, the lines at the
// distance of its header and masks (a q6_k group's 288 header bytes, q4_k's 320 of 2368,
// q5_k's masks too), which the hardware prefetchers did not make up for: decode from
// memory, four rounds alternating, new over old, q5_k +20-51%, q4_k +5-28%, q6_k +1-16%,
// q8_0 +12-40% (docs/quantization.md).
// kHow says how far ahead of the group and where to (below: DecodePrefetch).
// PrefetchHint is the hint's own type: GCC's headers make _MM_HINT_T0 an enumerator of
// `_mm_hint`, clang's a plain int macro, and a template parameter must name one of them.
using PrefetchHint = decltype(_MM_HINT_T0);
struct DecodePrefetch {
  int64_t ahead = kPackedAheadBytes;
  PrefetchHint hint = _MM_HINT_T0;  // into L1
};

// How the AVX2 decode tiles (one token) prefetch the weight stream they read once: with
// the non-temporal hint, so (our reading: this VM has no PMU to show it) the stream takes
// less of the caches from the activations and the next products' inputs; the 32-element
// formats 1 KiB ahead instead of 4. `loom_ab_builds --repack auto --batch 1 --prompt 32
// --steps 32 --rounds 8 --layouts 4 --threads 2` (Zen 1 EPYC, 2026-12-07), decode b/a
// (geometric mean of the layouts) against _MM_HINT_T0 4 KiB ahead: small q4_k 1.086,
// 1.033x; q8_0 1.049, 1.022x, q4_0 1.039, 1.060x, q4_1 1.058x, q5_0 1.010, 1.012, 1.014x
// (and 0.934x in a run whose prefill, which this leaves alone, read 0.867x); with
// `--rounds 6 --layouts 2` 1B q4_k 1.027x, 1B q8_0 1.015, 1.033x, small q6_k 1.012x. The
// k-quants 1 KiB ahead read q4_k 1.018x, q6_k 0.895x against 4 KiB, and the 32-element
// formats 2 KiB ahead 0.93-0.97x, 512 bytes q8_0 0.954x, q4_0 1.024x against 1 KiB. The
// f16 / bf16 panels take the hint too (kDecodeStreamHint, packed_plain.cpp), and f32's
// decode pull gained most (kAvx2F32DecodePullBytes). The VNNI tiles keep
// DecodePrefetch{}: on Zen 5 (2026-12-07, the same command) the non-temporal hint read
// q8_0 0.997x, q4_0 1.008x, q4_k 1.002x, q6_k 1.051x 4 KiB ahead and 1.007, 0.995,
// 1.002, 0.980x 1 KiB ahead: no change beyond the noise. (The AVX-512 f32 / f16 streams
// likewise keep _MM_HINT_T0, packed_plain.cpp.)
inline constexpr PrefetchHint kDecodeStreamHint = _MM_HINT_NTA;
inline constexpr DecodePrefetch kAvx2KQuantDecode{kPackedAheadBytes, kDecodeStreamHint};
inline constexpr DecodePrefetch kAvx2Blocks32Decode{1024, kDecodeStreamHint};

template <int64_t kBytes, int kSteps, DecodePrefetch kHow = DecodePrefetch{}>
inline void prefetch_group_step(const uint8_t* group, int k) {
  constexpr int64_t kPer = (kBytes + kSteps - 1) / kSteps;
  constexpr int kLines = static_cast<int>((kPer + 63) / 64) + 1;
  // A local constant: at -O0 GCC's _mm_prefetch is a macro whose __builtin_prefetch does
  // not take a template parameter object's member as a constant.
  constexpr PrefetchHint kHint = kHow.hint;
  const uint8_t* at = group + kHow.ahead + k * kPer;
  for (int i = 0; i < kLines; ++i) _mm_prefetch(reinterpret_cast<const char*>(at + 64 * i), kHint);
}

// The prefetch of step k of a tile of T tokens that loads the vector at `vector` of
// `group` (whose quant vectors start kHead bytes in): decode (T = 1) the group's whole
// stream (prefetch_group_step); a tile of several tokens the line kPackedAheadBytes past
// the vector (spreading the group's shares there, with a loop of varying count, ran
// q4_k / q6_k prefill tiles 17-45% slower in L2, and after the first token tile of an L2
// block the prefetches only cost), and a tile of kEveryLineTokens or more (a batch's
// decode pass of up to 16 tokens; prefill tiles are at most 6 wide) also, at the group's
// first step, the lines of its header and its last line, which the vectors' prefetches
// miss (q8_0's 544-byte group is 8.5 lines; docs/quantization.md).
// kTileHint is where a multi-token tile's prefetch puts the line: the formats of one byte
// a weight (q8_0, gq8) ask for L2 (_MM_HINT_T1), which frees the L1 miss buffers for the
// loads and leaves more lines in flight from memory; the 4- to 6-bit formats, with more
// arithmetic per byte, keep L1 (see the call sites for the measurements).
// kDecode is decode's (prefetch_group_step's kHow).
inline constexpr int kEveryLineTokens = 7;
template <int T, int64_t kBytes, int kSteps, PrefetchHint kTileHint = _MM_HINT_T0, int64_t kHead = 0,
          DecodePrefetch kDecode = DecodePrefetch{}>
inline void prefetch_step(const uint8_t* group, const uint8_t* vector, int k) {
  if constexpr (T == 1) {
    prefetch_group_step<kBytes, kSteps, kDecode>(group, k);
  } else {
    _mm_prefetch(reinterpret_cast<const char*>(vector + kPackedAheadBytes), kTileHint);
    if (T >= kEveryLineTokens && k == 0) {
      const char* ahead = reinterpret_cast<const char*>(group + kPackedAheadBytes);
      for (int64_t i = 0; i < kHead; i += 64) _mm_prefetch(ahead + i, kTileHint);
      _mm_prefetch(ahead + kBytes - 1, kTileHint);
    }
  }
}

// Calls tile(b0, b1, t0, width) so that every panel of [p0, p1) meets every token: blocks
// of panels of about 256 KiB (a multiple of `block_multiple` panels) stay in L2 while the
// token tiles, balanced widths of at most `max_tokens`, pass over them; a single tile
// runs over the whole range at once. With `wide_first`, tokens that take exactly two
// tiles go as a full tile and the rest instead (8 = 6 + 2, not 4 + 4): the first tile of
// a block reads it from memory, which takes about as long for 6 tokens as for 4, and
// the second, from L2, then has less to do (see Tiles32 for where that pays).
template <class Tile>
void for_each_panel_tile(int64_t p0, int64_t p1, int64_t n_tokens, int max_tokens, int64_t panel_bytes,
                         int64_t block_multiple, bool wide_first, Tile&& tile) {
  const int64_t tiles = (n_tokens + max_tokens - 1) / max_tokens;
  auto width_of = [&](int64_t tile_index) -> int64_t {
    if (wide_first && tiles == 2) return tile_index == 0 ? max_tokens : n_tokens - max_tokens;
    return n_tokens / tiles + (tile_index < n_tokens % tiles ? 1 : 0);
  };
  const int64_t block = tiles == 1 ? p1 - p0
                                   : std::max<int64_t>(block_multiple, (int64_t{256} << 10) / panel_bytes /
                                                                           block_multiple * block_multiple);
  for (int64_t b0 = p0; b0 < p1; b0 += block) {
    const int64_t b1 = std::min(p1, b0 + block);
    int64_t t0 = 0;
    for (int64_t tile_index = 0; tile_index < tiles; ++tile_index) {
      const int64_t width = width_of(tile_index);
      tile(b0, b1, t0, width);
      t0 += width;
    }
  }
}

// A VNNI kernel's tiles, `Tiles`: kMaxTokens (the widest token tile), max_tokens(n) (the
// widest a product of n tokens uses, at most kMaxTokens), panels_for(T) (the
// panels a tile of T tokens runs side by side: what the registers hold, and for decode,
// T = 1, how many weight streams a thread reads at once) and
// tile<P, T>(weights, p0, ps, acts, t0, y, y_stride), the P panels p0, p0 + ps, ... against
// T tokens from t0.
// Panels [p0, p1) against a tile of T tokens, panels_for(T) at a time, then one at a time.
// A tile's P panels are P streams (a panel's bytes are contiguous); they come from the P
// equal parts of the range, panel i of each (tile<P, T>(w, p0 + i, part, ...)): distant
// streams, as the plain-dtype kernels take their rows (runtime.md).
template <class Tiles, int T, class Weights, class Acts>
LOOM_TARGET_AVX512_VNNI void panels_tile(const Weights& w, int64_t p0, int64_t p1, const Acts& a, int64_t t0,
                                         float* y, int64_t ys) {
  constexpr int kP = Tiles::panels_for(T);
  const int64_t part = (p1 - p0) / kP;
  for (int64_t i = 0; i < part; ++i) Tiles::template tile<kP, T>(w, p0 + i, part, a, t0, y, ys);
  for (int64_t p = p0 + part * kP; p < p1; ++p) Tiles::template tile<1, T>(w, p, 1, a, t0, y, ys);
}

// panels_tile for T = 1..Tiles::kMaxTokens, indexed by T - 1.
template <class Tiles, class Weights, class Acts, int... kWidth>
constexpr auto panels_tiles(std::integer_sequence<int, kWidth...>) {
  return std::array{&panels_tile<Tiles, kWidth + 1, Weights, Acts>...};
}

// Panels [p0, p1) of `w` (whose panels are w.panel_bytes apart), every token, in L2 blocks
// of a multiple of `block_multiple` panels and balanced token tiles (for_each_panel_tile).
template <class Tiles, class Weights, class Acts>
void vnni_panels(const Weights& w, const Acts& a, int64_t p0, int64_t p1, int64_t n_tokens, float* y, int64_t ys,
                 int64_t block_multiple) {
  static constexpr auto kTiles =
      panels_tiles<Tiles, Weights, Acts>(std::make_integer_sequence<int, Tiles::kMaxTokens>{});
  for_each_panel_tile(p0, p1, n_tokens, Tiles::max_tokens(n_tokens), w.panel_bytes, block_multiple, Tiles::kWideFirst,
                      [&](int64_t b0, int64_t b1, int64_t t0, int64_t width) {
                        kTiles[static_cast<size_t>(width - 1)](w, b0, b1, a, t0, y, ys);
                      });
}

// The same for a kernel file's AVX2 tiles (K::Avx2Tiles, where VNNI is missing): the
// functions above with the AVX2 target instead of VNNI's, which a target attribute
// cannot take as a parameter.
template <class Tiles, int T, class Weights, class Acts>
LOOM_TARGET_AVX2 void panels_tile_avx2(const Weights& w, int64_t p0, int64_t p1, const Acts& a, int64_t t0, float* y,
                                       int64_t ys) {
  constexpr int kP = Tiles::panels_for(T);
  const int64_t part = (p1 - p0) / kP;
  for (int64_t i = 0; i < part; ++i) Tiles::template tile<kP, T>(w, p0 + i, part, a, t0, y, ys);
  for (int64_t p = p0 + part * kP; p < p1; ++p) Tiles::template tile<1, T>(w, p, 1, a, t0, y, ys);
}

template <class Tiles, class Weights, class Acts, int... kWidth>
constexpr auto panels_tiles_avx2(std::integer_sequence<int, kWidth...>) {
  return std::array{&panels_tile_avx2<Tiles, kWidth + 1, Weights, Acts>...};
}

template <class Tiles, class Weights, class Acts>
void avx2_panels(const Weights& w, const Acts& a, int64_t p0, int64_t p1, int64_t n_tokens, float* y, int64_t ys,
                 int64_t block_multiple) {
  static constexpr auto kTiles =
      panels_tiles_avx2<Tiles, Weights, Acts>(std::make_integer_sequence<int, Tiles::kMaxTokens>{});
  for_each_panel_tile(p0, p1, n_tokens, Tiles::max_tokens(n_tokens), w.panel_bytes, block_multiple, Tiles::kWideFirst,
                      [&](int64_t b0, int64_t b1, int64_t t0, int64_t width) {
                        kTiles[static_cast<size_t>(width - 1)](w, b0, b1, a, t0, y, ys);
                      });
}

// An AVX2 tile's 8 outputs of one token for rows row0..row0 + 7 of a `rows`-row weight
// (the panel's half that holds them), stored at out[0..]: those that exist.
LOOM_TARGET_AVX2 __attribute__((always_inline)) inline void store_half_panel_avx2(float* out, __m256 v, int64_t row0,
                                                                                 int64_t rows) {
  const int64_t valid = rows - row0;
  if (valid >= 8) {
    _mm256_storeu_ps(out, v);
  } else if (valid > 0) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    _mm256_maskstore_ps(out, _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(valid)), lane), v);
  }
}

// Pins a running sum where it stands, so the compiler adds a tile's products in the
// order written. Integer adds reassociate freely, and GCC 12 did so in the 32-column
// tiles (packed_blocks32.cpp): it turned each 16-bit running sum into a tree over a
// run's products, which holds them all at once, so the 4-token tiles stored and
// reloaded them through the stack (objdump: q8_0 98 spill stores to 128 VPMADDUBSW,
// q4_0 27 to 64; none with the pin). The pin costs no instruction, and the order does
// not change the exact integers. The k-quant tiles' sums stayed in order without it
// (pinned, q4_k and q6_k measured 0.98-0.99x), so they go without.
LOOM_TARGET_AVX2 __attribute__((always_inline)) inline void in_order(__m256i& running_sum) {
  __asm__("" : "+x"(running_sum));
}

// The 32 bits of a fifth-bit mask (tensor/packing.hpp) that belong to a half vector's
// 32 bytes (lane_bit: bit i for byte i), as bytes of 0x10 where set: each byte takes its
// bit's mask byte (VPSHUFB within each 128-bit lane, which both hold the 4 bytes), keeps
// its bit and compares.
LOOM_TARGET_AVX2 __attribute__((always_inline)) inline __m256i fifth_bits_avx2(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int32_t>(bits)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
}

// Whether the packed products run natively at the current ISA cap: the VNNI tiles, or
// the AVX2 tiles every packing also has.
inline bool packed_native() noexcept { return packed_vnni_native() || active_isa() >= Isa::avx2; }

// One packing's products in a packed-kernel file: the full one (the native kernel where
// it runs, the scalar family elsewhere), the scalar family's alone (the tests'
// reference), and whether the native kernel runs on this CPU at the current ISA cap (the
// runtime prefers the packing only then: preferred_packing). Each file keeps a table of
// them, one entry per packing it reads.
struct PackedProducts {
  Packing packing;
  void (*run)(const Tensor& w, const Tensor* bias, const float* x, int64_t x_stride, int64_t n_tokens, float* y,
              int64_t y_stride, ThreadPool& pool);
  void (*run_scalar)(const Tensor& w, const float* x, int64_t x_stride, int64_t n_tokens, float* y,
                     int64_t y_stride);
  bool (*native)() noexcept;
};

// The entry of `packing` in `table`, or nullptr.
inline const PackedProducts* find_products(std::span<const PackedProducts> table, Packing packing) noexcept {
  for (const PackedProducts& e : table) {
    if (e.packing == packing) return &e;
  }
  return nullptr;
}

// A packed kernel's guard: `w` holds `packing` of `dtype`, rank 2 (else an internal error
// naming the kernel and the tensor).
inline void check_packed_weight(const Tensor& w, Packing packing, DType dtype) {
  if (w.packing() != packing || w.dtype() != dtype || w.shape().rank() != 2) {
    throw Error(ErrorCode::internal,
                "the packed " + std::string(packing_name(packing)) + " kernel got " + w.describe());
  }
}

// Splits the panels of a `rows`-row weight over the pool in multiples of `grain` panels
// (split_rows, linear.hpp: one contiguous share per thread); each call runs range(p0, p1)
// on its panels and adds the bias to their rows.
template <class Range>
void over_panels(ThreadPool& pool, int64_t rows, int64_t grain, const Tensor* bias, int64_t n_tokens, float* y,
                 int64_t y_stride, Range&& range) {
  const int64_t panels = (rows + kPackedPanelRows - 1) / kPackedPanelRows;
  split_rows(pool, panels, grain, n_tokens, [&](int64_t p0, int64_t p1) {
    range(p0, p1);
    add_bias(bias, p0 * kPackedPanelRows, std::min(rows, p1 * kPackedPanelRows), n_tokens, y, y_stride);
  });
}

// The products of a packed-kernel file K for one format F, from K's parts:
//   K::Buffers                the storage of one call's quantized activations;
//   K::quantize<F>(x, x_stride, n_tokens, cols, buffers, pool or nullptr) -> activations;
//   K::weights<F>(w)          the weight's panels (checks w's packing, dtype and rank);
//   K::Tiles<F>               F's VNNI tiles (vnni_panels);
//   K::Avx2Tiles<F>           F's AVX2 tiles (avx2_panels), which run where VNNI does not;
//   K::scalar<F>              (weights, activations, p0, p1, n_tokens, y, y_stride): the
//                             panels [p0, p1) on the scalar family;
//   K::kPanelGrain            panels per unit of the split over the pool and of the L2 blocks.
template <class K, class F>
void run_packed(const Tensor& w, const Tensor* bias, const float* x, int64_t x_stride, int64_t n_tokens, float* y,
                int64_t y_stride, ThreadPool& pool) {
  if (n_tokens <= 0) return;
  const auto weights = K::template weights<F>(w);
  // The calling thread's buffers, named through a local reference: inside a lambda a
  // thread_local would name each worker's own instance.
  thread_local typename K::Buffers buffers_storage;
  typename K::Buffers& buffers = buffers_storage;
  const auto acts = K::template quantize<F>(x, x_stride, n_tokens, w.shape()[1], buffers, &pool);
  const bool vnni = packed_vnni_native();
  const bool avx2 = !vnni && packed_native();
  over_panels(pool, weights.rows, K::kPanelGrain, bias, n_tokens, y, y_stride, [&](int64_t p0, int64_t p1) {
    if (vnni) {
      vnni_panels<typename K::template Tiles<F>>(weights, acts, p0, p1, n_tokens, y, y_stride, K::kPanelGrain);
    } else if (avx2) {
      avx2_panels<typename K::template Avx2Tiles<F>>(weights, acts, p0, p1, n_tokens, y, y_stride, K::kPanelGrain);
    } else {
      K::template scalar<F>(weights, acts, p0, p1, n_tokens, y, y_stride);
    }
  });
}

template <class K, class F>
void run_packed_scalar(const Tensor& w, const float* x, int64_t x_stride, int64_t n_tokens, float* y,
                       int64_t y_stride) {
  const auto weights = K::template weights<F>(w);
  typename K::Buffers buffers;
  const auto acts = K::template quantize<F>(x, x_stride, n_tokens, w.shape()[1], buffers, nullptr);
  K::template scalar<F>(weights, acts, 0, (weights.rows + kPackedPanelRows - 1) / kPackedPanelRows, n_tokens, y,
                        y_stride);
}

// A format's table entry.
template <class K, class F>
constexpr PackedProducts products_of() {
  return {F::packing, run_packed<K, F>, run_packed_scalar<K, F>, packed_native};
}

}  // namespace loom::kernels
