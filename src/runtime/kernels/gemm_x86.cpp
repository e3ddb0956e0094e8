// AVX-512 f32 GEMM for prefill. The register tile is 14 weight rows x 32 tokens (28
// accumulators): per k it loads two vectors of 16 transposed activations and
// broadcasts one weight per row. Weights are read straight from their row-major
// storage (widened per 14-row panel when f16/bf16), so nothing large is repacked.
// Each output sums over k in order, whatever the thread split: results do not depend
// on the number of threads.
#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "common/simd.hpp"
#include "loom/convert.hpp"
#include "loom/cpu.hpp"
#include "runtime/kernels/gemm_kernels.hpp"

namespace loom::kernels {

namespace {

constexpr int kMr = 14;        // weight rows per register tile
constexpr int64_t kNt = 32;    // tokens per register tile (two zmm)

template <int MR>
LOOM_TARGET_AVX512 void tile(const float* w, int64_t w_stride, const float* xt, int64_t xt_stride,
                             int64_t cols, float* out /* [MR][kNt] */) {
  __m512 acc0[MR], acc1[MR];
  for (int i = 0; i < MR; ++i) {
    acc0[i] = _mm512_setzero_ps();
    acc1[i] = _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < cols; ++k) {
    const __m512 x0 = _mm512_load_ps(xt + k * xt_stride);
    const __m512 x1 = _mm512_load_ps(xt + k * xt_stride + 16);
    for (int i = 0; i < MR; ++i) {
      const __m512 wb = _mm512_set1_ps(w[i * w_stride + k]);
      acc0[i] = _mm512_fmadd_ps(wb, x0, acc0[i]);
      acc1[i] = _mm512_fmadd_ps(wb, x1, acc1[i]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    _mm512_store_ps(out + i * kNt, acc0[i]);
    _mm512_store_ps(out + i * kNt + 16, acc1[i]);
  }
}

using TileFn = void (*)(const float*, int64_t, const float*, int64_t, int64_t, float*);

template <int... I>
constexpr std::array<TileFn, sizeof...(I)> make_tiles(std::integer_sequence<int, I...>) {
  return {&tile<I + 1>...};
}
constexpr auto kTiles = make_tiles(std::make_integer_sequence<int, kMr>{});

float* aligned64(std::vector<float>& v, size_t n) {
  v.resize(n + 16);
  return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(v.data()) + 63) & ~uintptr_t{63});
}

}  // namespace

void pack_activations(const float* x, int64_t x_stride, int64_t n_tokens, int64_t cols,
                      PackedActivations& out) {
  out.n_tokens = n_tokens;
  out.cols = cols;
  out.padded_tokens = (n_tokens + kNt - 1) / kNt * kNt;
  out.data.assign(static_cast<size_t>(cols * out.padded_tokens + 16), 0.0f);
  float* dst = aligned64(out.data, static_cast<size_t>(cols * out.padded_tokens));
  // Blocked transpose: 32 tokens x 64 columns at a time stays in L1.
  constexpr int64_t kBlock = 64;
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kNt) {
    const int64_t nt = std::min(kNt, n_tokens - t0);
    for (int64_t c0 = 0; c0 < cols; c0 += kBlock) {
      const int64_t nc = std::min(kBlock, cols - c0);
      for (int64_t t = 0; t < nt; ++t) {
        const float* src = x + (t0 + t) * x_stride + c0;
        for (int64_t c = 0; c < nc; ++c) dst[(c0 + c) * out.padded_tokens + t0 + t] = src[c];
      }
    }
  }
}

bool gemm_avx512_supports(DType dtype) noexcept {
  return active_isa() == Isa::avx512 &&
         (dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16);
}

void gemm_avx512(const Tensor& w, int64_t r0, int64_t r1, const PackedActivations& x, float* y,
                 int64_t y_stride) {
  const int64_t cols = w.shape()[1];
  const float* xt = reinterpret_cast<const float*>(
      (reinterpret_cast<uintptr_t>(x.data.data()) + 63) & ~uintptr_t{63});
  thread_local std::vector<float> panel_storage, out_storage;
  float* out = aligned64(out_storage, static_cast<size_t>(kMr * kNt));
  const bool widen = w.dtype() != DType::f32;
  float* panel = widen ? aligned64(panel_storage, static_cast<size_t>(kMr * cols)) : nullptr;
  const auto* base = static_cast<const std::byte*>(w.raw_data());
  const int64_t row_bytes = dtype_bytes(w.dtype(), cols, cols);
  for (int64_t r = r0; r < r1; r += kMr) {
    const int64_t mr = std::min<int64_t>(kMr, r1 - r);
    const float* rows = reinterpret_cast<const float*>(base + r * row_bytes);
    if (widen) {
      convert(w.dtype(), base + r * row_bytes, DType::f32, panel, static_cast<size_t>(mr * cols));
      rows = panel;
    }
    for (int64_t t0 = 0; t0 < x.n_tokens; t0 += kNt) {
      kTiles[static_cast<size_t>(mr - 1)](rows, cols, xt + t0, x.padded_tokens, cols, out);
      const int64_t nt = std::min(kNt, x.n_tokens - t0);
      for (int64_t t = 0; t < nt; ++t) {
        float* yrow = y + (t0 + t) * y_stride + r;
        for (int64_t i = 0; i < mr; ++i) yrow[i] = out[i * kNt + t];
      }
    }
  }
}

// ---- bf16 weights x bf16 activations (AVX512-BF16): 32 multiply-adds per instruction ----

namespace {

template <int MR>
LOOM_TARGET_AVX512_BF16 void tile_bf16(const uint16_t* w, int64_t w_stride, const uint16_t* xp,
                                       int64_t xp_stride, int64_t pairs, float* out /* [MR][kNt] */) {
  __m512 acc0[MR], acc1[MR];
  for (int i = 0; i < MR; ++i) {
    acc0[i] = _mm512_setzero_ps();
    acc1[i] = _mm512_setzero_ps();
  }
  for (int64_t kp = 0; kp < pairs; ++kp) {
    // 16 tokens x (column 2kp, 2kp+1) each, for two groups of 16 tokens.
    const __m512bh x0 = (__m512bh)_mm512_load_si512(xp + kp * xp_stride * 2);
    const __m512bh x1 = (__m512bh)_mm512_load_si512(xp + kp * xp_stride * 2 + 32);
    for (int i = 0; i < MR; ++i) {
      uint32_t pair;
      __builtin_memcpy(&pair, w + i * w_stride + 2 * kp, sizeof pair);
      const __m512bh wb = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
      acc0[i] = _mm512_dpbf16_ps(acc0[i], wb, x0);
      acc1[i] = _mm512_dpbf16_ps(acc1[i], wb, x1);
    }
  }
  for (int i = 0; i < MR; ++i) {
    _mm512_store_ps(out + i * kNt, acc0[i]);
    _mm512_store_ps(out + i * kNt + 16, acc1[i]);
  }
}

using TileBf16Fn = void (*)(const uint16_t*, int64_t, const uint16_t*, int64_t, int64_t, float*);

template <int... I>
constexpr std::array<TileBf16Fn, sizeof...(I)> make_bf16_tiles(std::integer_sequence<int, I...>) {
  return {&tile_bf16<I + 1>...};
}
constexpr auto kBf16Tiles = make_bf16_tiles(std::make_integer_sequence<int, kMr>{});

}  // namespace

void pack_activations_bf16(const float* x, int64_t x_stride, int64_t n_tokens, int64_t cols,
                           PackedActivationsBf16& out) {
  out.n_tokens = n_tokens;
  out.cols = cols;
  out.padded_tokens = (n_tokens + kNt - 1) / kNt * kNt;
  const int64_t pairs = cols / 2;
  out.data.assign(static_cast<size_t>(pairs * out.padded_tokens * 2 + 32), 0);
  uint16_t* dst = reinterpret_cast<uint16_t*>((reinterpret_cast<uintptr_t>(out.data.data()) + 63) & ~uintptr_t{63});
  std::vector<uint16_t> row(static_cast<size_t>(cols));
  for (int64_t t = 0; t < n_tokens; ++t) {
    f32_to_bf16(x + t * x_stride, row.data(), static_cast<size_t>(cols));
    for (int64_t kp = 0; kp < pairs; ++kp) {
      uint16_t* slot = dst + (kp * out.padded_tokens + t) * 2;
      slot[0] = row[static_cast<size_t>(2 * kp)];
      slot[1] = row[static_cast<size_t>(2 * kp + 1)];
    }
  }
}

bool gemm_bf16_dot_supported(int64_t cols) noexcept {
  return active_isa() == Isa::avx512 && cpu_features().avx512_bf16 && cols % 2 == 0;
}

void gemm_bf16_dot(const Tensor& w, int64_t r0, int64_t r1, const PackedActivationsBf16& x, float* y,
                   int64_t y_stride) {
  const int64_t cols = w.shape()[1];
  const auto* xp = reinterpret_cast<const uint16_t*>(
      (reinterpret_cast<uintptr_t>(x.data.data()) + 63) & ~uintptr_t{63});
  thread_local std::vector<float> out_storage;
  float* out = aligned64(out_storage, static_cast<size_t>(kMr * kNt));
  const auto* base = w.data<uint16_t>();
  for (int64_t r = r0; r < r1; r += kMr) {
    const int64_t mr = std::min<int64_t>(kMr, r1 - r);
    for (int64_t t0 = 0; t0 < x.n_tokens; t0 += kNt) {
      kBf16Tiles[static_cast<size_t>(mr - 1)](base + r * cols, cols, xp + t0 * 2, x.padded_tokens, cols / 2, out);
      const int64_t nt = std::min(kNt, x.n_tokens - t0);
      for (int64_t t = 0; t < nt; ++t) {
        float* yrow = y + (t0 + t) * y_stride + r;
        for (int64_t i = 0; i < mr; ++i) yrow[i] = out[i * kNt + t];
      }
    }
  }
}

}  // namespace loom::kernels
