#include "machine_ceilings.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "common/simd.hpp"
#include "loom/cpu.hpp"
#include "loom/tensor.hpp"
#include "loom/thread_pool.hpp"

namespace loom::bench {

namespace {

LOOM_TARGET_AVX512 float sum_avx512(const float* p, size_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(),
         a3 = _mm512_setzero_ps();
  for (size_t i = 0; i + 64 <= n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
  }
  return simd::hsum512(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

// One stream prefetched 2 KiB ahead: the access pattern of the decode kernels, which
// can beat the plain loop on this kind of CPU. The ceiling is the better of the two, so
// kernels are never measured against a pessimistic bound.
LOOM_TARGET_AVX512 float sum_prefetch_avx512(const float* p, size_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(),
         a3 = _mm512_setzero_ps();
  for (size_t i = 0; i + 64 <= n; i += 64) {
    for (size_t line = 0; line < 64; line += 16) __builtin_prefetch(p + i + line + 512, 0, 3);
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
  }
  return simd::hsum512(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

LOOM_TARGET_AVX2 float sum_avx2(const float* p, size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(),
         a3 = _mm256_setzero_ps();
  for (size_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  alignas(32) float out[8];
  _mm256_store_ps(out, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  float s = 0;
  for (float v : out) s += v;
  return s;
}

float sum_any(const float* p, size_t n) {
  switch (active_isa()) {
    case Isa::avx512: return sum_avx512(p, n);
    case Isa::avx2: return sum_avx2(p, n);
    case Isa::scalar: break;
  }
  float s = 0;
  for (size_t i = 0; i < n; ++i) s += p[i];
  return s;
}

// 16 independent accumulator chains hide the FMA latency (4 cycles x 2 ports).
LOOM_TARGET_AVX512 double fma_loop_avx512(int64_t iterations) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m512 m = _mm512_set1_ps(0.999999f);
  const __m512 a = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it) {
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_fmadd_ps(acc[i], m, a);
  }
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
  return simd::hsum512(s);
}

LOOM_TARGET_AVX2 double fma_loop_avx2(int64_t iterations) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m256 m = _mm256_set1_ps(0.999999f);
  const __m256 a = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it) {
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], m, a);
  }
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  alignas(32) float out[8];
  _mm256_store_ps(out, s);
  return out[0];
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

double measure_read_bandwidth_gbs(int threads) {
  const size_t n = (size_t{2} << 30) / sizeof(float);
  // Allocated like converted weights (Storage asks for huge pages on large buffers), so
  // the ceiling and the kernels see the same kind of memory.
  const auto storage = Storage::allocate(n * sizeof(float));
  auto* data = reinterpret_cast<float*>(storage->mutable_data());
  std::memset(data, 0, n * sizeof(float));  // fault every page in before timing
  ThreadPool pool(threads);
  std::vector<float> sink(static_cast<size_t>(threads));
  double best = 0.0;
  const bool can_prefetch = active_isa() == Isa::avx512;
  for (int rep = 0; rep < 10; ++rep) {
    const bool prefetched = can_prefetch && rep % 2 == 1;
    const auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(static_cast<int64_t>(n), 1 << 16, [&](int64_t b, int64_t e, int t) {
      const size_t len = static_cast<size_t>(e - b);
      sink[static_cast<size_t>(t)] += prefetched ? sum_prefetch_avx512(data + b, len) : sum_any(data + b, len);
    });
    best = std::max(best, static_cast<double>(n * sizeof(float)) / seconds_since(t0) / 1e9);
  }
  volatile float keep = sink[0];
  (void)keep;
  return best;
}

double measure_fma_peak_gflops(int threads) {
  const bool wide = active_isa() == Isa::avx512;
  const int64_t iterations = 20'000'000;
  const double flops_per_thread =
      static_cast<double>(iterations) * (wide ? 16 * 16 : 12 * 8) * 2.0;
  ThreadPool pool(threads);
  std::vector<double> sink(static_cast<size_t>(threads));
  double best = 0.0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(threads, 1, [&](int64_t, int64_t, int t) {
      sink[static_cast<size_t>(t)] += wide ? fma_loop_avx512(iterations) : fma_loop_avx2(iterations);
    });
    best = std::max(best, flops_per_thread * threads / seconds_since(t0) / 1e9);
  }
  volatile double keep = sink[0];
  (void)keep;
  return best;
}

}  // namespace loom::bench
