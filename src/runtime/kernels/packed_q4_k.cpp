#include "runtime/kernels/packed_q4_k.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/simd.hpp"
#include "loom/convert.hpp"
#include "loom/cpu.hpp"
#include "loom/error.hpp"
#include "runtime/kernels/linear.hpp"
#include "runtime/kernels/quant_dot.hpp"
#include "tensor/packing.hpp"

namespace loom::kernels {

namespace {

constexpr int64_t kPanelRows = 16;
constexpr int64_t kBlock = 256;
// One block of a panel, packed (tensor/packing.hpp): offsets of its parts.
constexpr int64_t kGroupBytes = 2368;
constexpr int64_t kDmin = 32, kScales = 64, kMins = 192, kQuants = 320;
// A q8_k activation block: f32 d, 256 x i8 quants, 16 x i16 sums of 16.
constexpr int64_t kActBlockBytes = 292;
constexpr int64_t kActQuants = 4;

// One call's quantized activations: token t's q8_k blocks at blocks + t * row_bytes, each
// block's scale at da[t * nb + b], and its sub-block sums for the mins, as the i16 pairs
// VPDPWSSD takes: mins[(t * nb + b) * 4 + k] = sum(sub-block 2k) | sum(2k + 1) << 16.
struct Acts {
  const uint8_t* blocks;
  int64_t row_bytes;
  const float* da;
  const int32_t* mins;
  int64_t nb;
};

struct Weights {
  const uint8_t* base;
  int64_t panel_bytes;
  int64_t nb;
  int64_t rows;
};

const uint8_t* group_at(const Weights& w, int64_t panel, int64_t block) {
  return w.base + panel * w.panel_bytes + block * kGroupBytes;
}

// Byte c (0..127) of row r's nibbles in a group's quant part (tensor/packing.cpp).
constexpr int64_t quant_at(int64_t r, int64_t c) { return (c / 32) * 512 + ((c % 32) / 4) * 64 + r * 4 + c % 4; }

// ---- scalar family: the same sums, one (row, token) at a time ----

void scalar_panels(const Weights& w, const Acts& a, int64_t p0, int64_t p1, int64_t n_tokens, float* y,
                   int64_t ys) {
  for (int64_t p = p0; p < p1; ++p) {
    for (int64_t r = 0; r < kPanelRows && p * kPanelRows + r < w.rows; ++r) {
      for (int64_t t = 0; t < n_tokens; ++t) {
        float acc = 0.0f;
        for (int64_t b = 0; b < w.nb; ++b) {
          const uint8_t* g = group_at(w, p, b);
          const auto* act = reinterpret_cast<const int8_t*>(a.blocks + t * a.row_bytes + b * kActBlockBytes + kActQuants);
          int32_t isum = 0;
          for (int s = 0; s < 8; ++s) {
            int32_t dot = 0;
            for (int l = 0; l < 32; ++l) {
              const int nibble = (g[kQuants + quant_at(r, 32 * (s / 2) + l)] >> (4 * (s % 2))) & 0xF;
              dot += nibble * act[32 * s + l];
            }
            isum += static_cast<int32_t>(g[kScales + s * 16 + r]) * dot;
          }
          int32_t msum = 0;
          for (int k = 0; k < 4; ++k) {
            const int32_t pair = a.mins[(t * w.nb + b) * 4 + k];
            msum += static_cast<int32_t>(g[kMins + k * 32 + 2 * r]) * static_cast<int16_t>(pair & 0xFFFF) +
                    static_cast<int32_t>(g[kMins + k * 32 + 2 * r + 1]) * static_cast<int16_t>(pair >> 16);
          }
          uint16_t h;
          std::memcpy(&h, g + 2 * r, 2);
          const float d = f16_to_f32_scalar(h) * a.da[t * w.nb + b];
          std::memcpy(&h, g + kDmin + 2 * r, 2);
          const float dmin = f16_to_f32_scalar(h) * a.da[t * w.nb + b];
          acc = std::fma(static_cast<float>(isum), d, acc);
          acc = std::fma(-static_cast<float>(msum), dmin, acc);
        }
        y[t * ys + p * kPanelRows + r] = acc;
      }
    }
  }
}

// ---- AVX-512 VNNI: P panels x T tokens, one lane per row ----

#define PK_INLINE LOOM_TARGET_AVX512_VNNI __attribute__((always_inline)) inline

// Each panel stream prefetches this far ahead of its loads (as the q8_0 packed kernel).
constexpr int64_t kAheadBytes = 2048;

template <int P, int T>
PK_INLINE void tile(const Weights& w, int64_t p0, const Acts& a, int64_t t0, float* y, int64_t ys) {
  __m512 acc[P][T];
  _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
    _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) acc[p][t] = _mm512_setzero_ps();
  }
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < w.nb; ++b) {
    const uint8_t* g[P];
    _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) g[p] = group_at(w, p0 + p, b);
    const uint8_t* act[T];
    _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) {
      act[t] = a.blocks + (t0 + t) * a.row_bytes + b * kActBlockBytes + kActQuants;
    }
    __m512i isum[P][T];
    _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
      _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) isum[p][t] = _mm512_setzero_si512();
    }
    for (int pair = 0; pair < 4; ++pair) {
      __m512i lo[P][T], hi[P][T];
      _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
        _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) lo[p][t] = hi[p][t] = _mm512_setzero_si512();
      }
      _Pragma("GCC unroll 8") for (int j = 0; j < 8; ++j) {
        __m512i wl[P], wh[P];
        _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
          const uint8_t* at = g[p] + kQuants + pair * 512 + j * 64;
          _mm_prefetch(reinterpret_cast<const char*>(at + kAheadBytes), _MM_HINT_T0);
          const __m512i v = _mm512_loadu_si512(at);
          wl[p] = _mm512_and_si512(v, low4);
          wh[p] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
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
        const __m512i sl = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g[p] + kScales + (2 * pair) * 16)));
        const __m512i sh = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g[p] + kScales + (2 * pair + 1) * 16)));
        _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) {
          isum[p][t] = _mm512_add_epi32(isum[p][t], _mm512_add_epi32(_mm512_mullo_epi32(lo[p][t], sl),
                                                                     _mm512_mullo_epi32(hi[p][t], sh)));
        }
      }
    }
    _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
      __m512i msum[T];
      _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) msum[t] = _mm512_setzero_si512();
      _Pragma("GCC unroll 4") for (int k = 0; k < 4; ++k) {
        const __m512i mk = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g[p] + kMins + k * 32)));
        _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) {
          msum[t] = _mm512_dpwssd_epi32(msum[t], mk, _mm512_set1_epi32(a.mins[((t0 + t) * w.nb + b) * 4 + k]));
        }
      }
      const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g[p])));
      const __m512 dmw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g[p] + kDmin)));
      _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) {
        const __m512 da = _mm512_set1_ps(a.da[(t0 + t) * w.nb + b]);
        acc[p][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[p][t]), _mm512_mul_ps(dw, da), acc[p][t]);
        acc[p][t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum[t]), _mm512_mul_ps(dmw, da), acc[p][t]);
      }
    }
  }
  _Pragma("GCC unroll 8") for (int p = 0; p < P; ++p) {
    const int64_t row0 = (p0 + p) * kPanelRows;
    const int64_t valid = std::min<int64_t>(kPanelRows, w.rows - row0);
    const __mmask16 keep = static_cast<__mmask16>((1u << valid) - 1u);
    _Pragma("GCC unroll 8") for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + (t0 + t) * ys + row0, keep, acc[p][t]);
  }
}

// Panels [p0, p1) against a tile of T tokens: as many panels at a time as the registers
// hold (4 for one token, 2 for two, else 1).
template <int T>
LOOM_TARGET_AVX512_VNNI void panels_tile(const Weights& w, int64_t p0, int64_t p1, const Acts& a, int64_t t0,
                                         float* y, int64_t ys) {
  constexpr int kP = T == 1 ? 4 : T == 2 ? 2 : 1;
  int64_t p = p0;
  for (; p + kP <= p1; p += kP) tile<kP, T>(w, p, a, t0, y, ys);
  for (; p < p1; ++p) tile<1, T>(w, p, a, t0, y, ys);
}

using TileFn = void (*)(const Weights&, int64_t, int64_t, const Acts&, int64_t, float*, int64_t);
constexpr int kMaxTokens = 4;
constexpr TileFn kTiles[kMaxTokens] = {panels_tile<1>, panels_tile<2>, panels_tile<3>, panels_tile<4>};

// Panels [p0, p1), every token: blocks of panels of about 256 KiB stay in L2 while the
// token tiles (balanced widths of at most kMaxTokens) pass over them; one tile runs over
// the whole range at once.
void vnni_panels(const Weights& w, const Acts& a, int64_t p0, int64_t p1, int64_t n_tokens, float* y, int64_t ys) {
  const int64_t tiles = (n_tokens + kMaxTokens - 1) / kMaxTokens;
  const int64_t narrow = n_tokens / tiles, wide = n_tokens % tiles;
  const int64_t block = tiles == 1 ? p1 - p0 : std::max<int64_t>(1, (int64_t{256} << 10) / w.panel_bytes);
  for (int64_t b0 = p0; b0 < p1; b0 += block) {
    const int64_t b1 = std::min(p1, b0 + block);
    int64_t t0 = 0;
    for (int64_t tile_index = 0; tile_index < tiles; ++tile_index) {
      const int64_t width = narrow + (tile_index < wide ? 1 : 0);
      kTiles[width - 1](w, b0, b1, a, t0, y, ys);
      t0 += width;
    }
  }
}

// The activations of one call, quantized to q8_k (bit for bit what the row-major q4_k
// kernels consume), with each block's scale and its sub-block sums as i16 pairs.
struct ActBuffers {
  std::vector<std::byte> blocks;
  std::vector<float> da;
  std::vector<int32_t> mins;
};

Acts quantize(const float* x, int64_t x_stride, int64_t n_tokens, int64_t cols, ActBuffers& buf,
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
        std::memcpy(bsums, block + kActQuants + kBlock, sizeof bsums);
        for (int k = 0; k < 4; ++k) {
          // Sums of 32 quants in [-127, 127]: they fit an i16.
          const auto even = static_cast<uint16_t>(static_cast<int16_t>(bsums[4 * k] + bsums[4 * k + 1]));
          const auto odd = static_cast<uint16_t>(static_cast<int16_t>(bsums[4 * k + 2] + bsums[4 * k + 3]));
          mins[(t * nb + b) * 4 + k] = static_cast<int32_t>(static_cast<uint32_t>(even) | (static_cast<uint32_t>(odd) << 16));
        }
      }
    }
  };
  // A row quantizes in about a microsecond, less than waking the pool, so a decode
  // step's (one or two tokens) stay on this thread.
  if (pool == nullptr || n_tokens <= 2) {
    rows(0, n_tokens, 0);
  } else {
    pool->parallel_for(n_tokens, 1, rows);
  }
  return {blocks_base, row_bytes, da, mins, nb};
}

Weights weights_of(const Tensor& w) {
  if (w.packing() != Packing::q4_k_x16 || w.dtype() != DType::q4_k || w.shape().rank() != 2) {
    throw Error(ErrorCode::internal, "the packed q4_k kernel got " + w.describe());
  }
  const int64_t nb = w.shape()[1] / kBlock;
  return {static_cast<const uint8_t*>(w.raw_data()), nb * kGroupBytes, nb, w.shape()[0]};
}

}  // namespace

bool packed_q4_k_native() noexcept { return active_isa() >= Isa::avx512 && cpu_features().avx512_vnni; }

void linear_packed_q4_k(const Tensor& w, const Tensor* bias, const float* x, int64_t x_stride, int64_t n_tokens,
                        float* y, int64_t y_stride, ThreadPool& pool) {
  if (n_tokens <= 0) return;
  const Weights weights = weights_of(w);
  // The calling thread's buffers, named through a local reference: inside a lambda a
  // thread_local would name each worker's own instance.
  thread_local ActBuffers buffers_storage;
  ActBuffers& buffers = buffers_storage;
  const Acts acts = quantize(x, x_stride, n_tokens, w.shape()[1], buffers, &pool);
  const int64_t panels = (weights.rows + kPanelRows - 1) / kPanelRows;
  const bool native = packed_q4_k_native();
  pool.parallel_for(panels, 1, [&](int64_t p0, int64_t p1, int) {
    if (native) {
      vnni_panels(weights, acts, p0, p1, n_tokens, y, y_stride);
    } else {
      scalar_panels(weights, acts, p0, p1, n_tokens, y, y_stride);
    }
    add_bias(bias, p0 * kPanelRows, std::min(weights.rows, p1 * kPanelRows), n_tokens, y, y_stride);
  });
}

void linear_packed_q4_k_scalar(const Tensor& w, const float* x, int64_t x_stride, int64_t n_tokens, float* y,
                               int64_t y_stride) {
  const Weights weights = weights_of(w);
  ActBuffers buffers;
  const Acts acts = quantize(x, x_stride, n_tokens, w.shape()[1], buffers, nullptr);
  scalar_panels(weights, acts, 0, (weights.rows + kPanelRows - 1) / kPanelRows, n_tokens, y, y_stride);
}

}  // namespace loom::kernels
