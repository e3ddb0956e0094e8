// AVX512-BF16 prefill product for bf16 weights and bf16-rounded activations (the opt-in
// of gemm_kernels.hpp). The register tile is 14 weight rows x 32 tokens (28
// accumulators): per pair of columns it loads two vectors of 16 tokens' activation pairs
// and broadcasts one weight pair per row. Each output sums over k in order, whatever the
// thread split, but not in the order of the one-token matvec: not batch-invariant.
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

float* aligned64(std::vector<float>& v, size_t n) {
  v.resize(n + 16);
  return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(v.data()) + 63) & ~uintptr_t{63});
}

// ---- bf16 weights x bf16 activations (AVX512-BF16): 32 multiply-adds per instruction ----

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
