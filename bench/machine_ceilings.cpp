#include "machine_ceilings.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "common/simd.hpp"
#include "loom/cpu.hpp"
#include "loom/tensor.hpp"
#include "loom/thread_pool.hpp"

namespace loom::bench {

namespace {

// ---- read kernels: S streams (the thread's range cut into S consecutive parts read in
// lockstep, as a matvec reads S rows side by side), one 64-byte line per stream per step,
// optionally prefetched 1 KiB ahead. They return a sum so the reads cannot be dropped. ----

constexpr size_t kLineFloats = 16;
constexpr size_t kPrefetchFloats = 256;

template <int S, bool Prefetch>
LOOM_TARGET_AVX512 float sum_streams_avx512(const float* p, size_t n) {
  const size_t per = n / S / kLineFloats * kLineFloats;
  __m512 acc[S];
  for (int s = 0; s < S; ++s) acc[s] = _mm512_setzero_ps();
  for (size_t i = 0; i < per; i += kLineFloats) {
    for (int s = 0; s < S; ++s) {
      const float* q = p + static_cast<size_t>(s) * per + i;
      if constexpr (Prefetch) __builtin_prefetch(q + kPrefetchFloats, 0, 0);
      acc[s] = _mm512_add_ps(acc[s], _mm512_load_ps(q));
    }
  }
  for (int s = 1; s < S; ++s) acc[0] = _mm512_add_ps(acc[0], acc[s]);
  return simd::hsum512(acc[0]);
}

template <int S, bool Prefetch>
LOOM_TARGET_AVX2 float sum_streams_avx2(const float* p, size_t n) {
  const size_t per = n / S / kLineFloats * kLineFloats;
  __m256 acc[S][2];
  for (int s = 0; s < S; ++s) acc[s][0] = acc[s][1] = _mm256_setzero_ps();
  for (size_t i = 0; i < per; i += kLineFloats) {
    for (int s = 0; s < S; ++s) {
      const float* q = p + static_cast<size_t>(s) * per + i;
      if constexpr (Prefetch) __builtin_prefetch(q + kPrefetchFloats, 0, 0);
      acc[s][0] = _mm256_add_ps(acc[s][0], _mm256_load_ps(q));
      acc[s][1] = _mm256_add_ps(acc[s][1], _mm256_load_ps(q + 8));
    }
  }
  __m256 t = _mm256_setzero_ps();
  for (int s = 0; s < S; ++s) t = _mm256_add_ps(t, _mm256_add_ps(acc[s][0], acc[s][1]));
  return simd::hsum256(t);
}

float sum_scalar(const float* p, size_t n) {
  float s = 0;
  for (size_t i = 0; i < n; ++i) s += p[i];
  return s;
}

using SumKernel = float (*)(const float*, size_t);
struct ReadPattern {
  const char* name;
  SumKernel avx512;
  SumKernel avx2;
};
constexpr ReadPattern kPatterns[] = {
    {"1 stream", sum_streams_avx512<1, false>, sum_streams_avx2<1, false>},
    {"1 stream prefetch", sum_streams_avx512<1, true>, sum_streams_avx2<1, true>},
    {"4 streams", sum_streams_avx512<4, false>, sum_streams_avx2<4, false>},
    {"4 streams prefetch", sum_streams_avx512<4, true>, sum_streams_avx2<4, true>},
    {"8 streams", sum_streams_avx512<8, false>, sum_streams_avx2<8, false>},
    {"8 streams prefetch", sum_streams_avx512<8, true>, sum_streams_avx2<8, true>},
};

SumKernel kernel_for(const ReadPattern& p) {
  switch (active_isa()) {
    case Isa::avx512: return p.avx512;
    case Isa::avx2: return p.avx2;
    case Isa::scalar: break;
  }
  return sum_scalar;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Best GB/s of `reps` whole passes over n floats at `data`, the range split across the
// pool in pieces of whole 4 KiB pages.
double best_pass_gbs(const float* data, size_t n, SumKernel kernel, ThreadPool& pool, int reps) {
  std::vector<float> sink(static_cast<size_t>(pool.size()));
  double best = 0.0;
  for (int rep = 0; rep < reps; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(static_cast<int64_t>(n), 1024, [&](int64_t b, int64_t e, int t) {
      sink[static_cast<size_t>(t)] += kernel(data + b, static_cast<size_t>(e - b));
    });
    best = std::max(best, static_cast<double>(n * sizeof(float)) / seconds_since(t0) / 1e9);
  }
  volatile float keep = sink[0];
  (void)keep;
  return best;
}

// A 1 GiB temporary file, written, mapped read-only and unlinked: the page-cache pages a
// zero-copy load reads its weights from. Null when the temp directory cannot hold it.
struct MappedProbeFile {
  void* base = MAP_FAILED;
  size_t bytes = 0;
  explicit MappedProbeFile(size_t n) : bytes(n) {
    std::error_code ec;
    std::string path = (std::filesystem::temp_directory_path(ec) / "loom-bandwidth-XXXXXX").string();
    const int fd = ::mkstemp(path.data());
    if (fd < 0) return;
    ::unlink(path.c_str());
    std::vector<char> chunk(size_t{1} << 20, 1);
    bool ok = true;
    for (size_t done = 0; ok && done < n; done += chunk.size()) {
      ok = ::write(fd, chunk.data(), chunk.size()) == static_cast<ssize_t>(chunk.size());
    }
    if (ok) base = ::mmap(nullptr, n, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    ::close(fd);
  }
  ~MappedProbeFile() {
    if (base != MAP_FAILED) ::munmap(base, bytes);
  }
  const float* data() const { return base == MAP_FAILED ? nullptr : static_cast<const float*>(base); }
};

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

// 12 chains of int8 x int8 sums into int32 lanes; the operands change every iteration
// (a register rotation) so nothing is hoisted out of the loop.
constexpr int kDotChains = 12;

LOOM_TARGET_AVX512_VNNI int64_t dot_loop_vnni(int64_t iterations) {
  __m512i acc[kDotChains];
  for (int i = 0; i < kDotChains; ++i) acc[i] = _mm512_set1_epi32(i);
  __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
  for (int64_t it = 0; it < iterations; ++it) {
    for (int i = 0; i < kDotChains; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], u, s);
    u = _mm512_add_epi8(u, s);
  }
  for (int i = 1; i < kDotChains; ++i) acc[0] = _mm512_add_epi32(acc[0], acc[i]);
  return _mm512_reduce_add_epi32(acc[0]);
}

// AVX2 has no VPDPBUSD: every int8 product of loom's AVX2 kernels is made by a
// VPMADDUBSW (32 products, adjacent pairs summed into 16 bits), so its rate is the peak.
// Each chain feeds its own sums back as the signed operand: with one operand shared by
// every chain (as the VNNI loop may, its chains differing in the accumulator VPDPBUSD
// reads) the compiler made one VPMADDUBSW serve all twelve chains, and the probe timed
// twelve adds: 200 GOP/s where the CPU (Zen 1, 2 threads) makes about 160, and on a CPU
// with more adders further off still. 8 chains stay in registers: with 12, GCC spilled
// some and the rate fell from 1.37 to 1.0-1.1 G VPMADDUBSW a second and thread on Zen 1,
// whose ymm multiplies take 2 cycles each, so 8 chains cover the 5-cycle latency.
constexpr int kDotChainsAvx2 = 8;

LOOM_TARGET_AVX2 int64_t dot_loop_avx2(int64_t iterations) {
  __m256i acc[kDotChainsAvx2];
  for (int i = 0; i < kDotChainsAvx2; ++i) acc[i] = _mm256_set1_epi16(static_cast<int16_t>(i));
  __m256i u = _mm256_set1_epi8(3);
  const __m256i s = _mm256_set1_epi8(-2);
  for (int64_t it = 0; it < iterations; ++it) {
    for (int i = 0; i < kDotChainsAvx2; ++i) acc[i] = _mm256_add_epi16(acc[i], _mm256_maddubs_epi16(u, acc[i]));
    u = _mm256_add_epi8(u, s);
  }
  for (int i = 1; i < kDotChainsAvx2; ++i) acc[0] = _mm256_add_epi16(acc[0], acc[i]);
  alignas(32) int16_t out[16];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), acc[0]);
  return out[0];
}

}  // namespace

namespace {

// The probe's memory, made once per process (a benchmark probes again after each of its
// rows, and faulting in 3 GiB costs seconds): a 2 GiB owned buffer allocated like
// converted weights (Storage asks for huge pages on large buffers), every page touched
// before timing, and a 1 GiB mapped file (null where the temp directory cannot hold it).
const float* owned_probe_buffer(size_t& n) {
  n = (size_t{2} << 30) / sizeof(float);
  static const auto storage = [] {
    const size_t bytes = size_t{2} << 30;
    auto s = Storage::allocate(bytes);
    std::memset(s->mutable_data(), 0, bytes);
    return s;
  }();
  return reinterpret_cast<const float*>(storage->data());
}
const float* mapped_probe_buffer(size_t& n) {
  static const MappedProbeFile mapped(size_t{1} << 30);
  n = mapped.bytes / sizeof(float);
  return mapped.data();
}

}  // namespace

BandwidthProbe probe_read_bandwidth(int threads) {
  ThreadPool pool(threads);
  BandwidthProbe probe;
  auto run_all = [&](const char* memory, const float* data, size_t n) {
    for (const auto& pattern : kPatterns) {
      const double gbs = best_pass_gbs(data, n, kernel_for(pattern), pool, 3);
      probe.variants.push_back({std::string(memory) + " " + pattern.name, gbs});
      if (gbs > probe.best_gbs) {
        probe.best_gbs = gbs;
        probe.best = probe.variants.back().name;
      }
    }
  };
  size_t n = 0;
  const float* owned = owned_probe_buffer(n);
  run_all("owned", owned, n);
  if (const float* mapped = mapped_probe_buffer(n)) run_all("mapped", mapped, n);
  return probe;
}

double measure_read_variant_gbs(int threads, const std::string& variant, int passes, size_t window_bytes) {
  ThreadPool pool(threads);
  for (const char* memory : {"owned", "mapped"}) {
    for (const auto& pattern : kPatterns) {
      if (variant != std::string(memory) + " " + pattern.name) continue;
      size_t n = 0;
      const float* data = memory == std::string("owned") ? owned_probe_buffer(n) : mapped_probe_buffer(n);
      if (data == nullptr) return 0.0;
      // A window: whole 4 KiB pages of floats (best_pass_gbs splits by 1024), and as many
      // passes as read 512 MiB.
      constexpr size_t kPage = 1024;
      if (window_bytes > 0 && window_bytes / sizeof(float) < n) {
        n = std::max(kPage, window_bytes / sizeof(float) / kPage * kPage);
        const size_t enough = (size_t{512} << 20) / sizeof(float);
        passes = std::max<int>(passes, static_cast<int>((enough + n - 1) / n));
      }
      // Untimed passes first, until one is no more than 10% faster than the one before
      // (at most 8): in loom_tokens_per_second the first probe of the mapped file after a
      // two-thread row read 4-6 GB/s for several passes (the same call repeated right
      // after: 48-80), which made the "paired" share read 334-923%.
      double previous = 0.0;
      for (int warm = 0; warm < 8; ++warm) {
        const double gbs = best_pass_gbs(data, n, kernel_for(pattern), pool, 1);
        if (warm > 0 && gbs <= previous * 1.1) break;
        previous = gbs;
      }
      return best_pass_gbs(data, n, kernel_for(pattern), pool, passes);
    }
  }
  return 0.0;
}

double measure_read_bandwidth_gbs(int threads) { return probe_read_bandwidth(threads).best_gbs; }

std::string best_variant_over(const BandwidthProbe& probe, const std::string& memory) {
  std::string best;
  double best_gbs = 0.0;
  for (const auto& v : probe.variants) {
    if (v.name.starts_with(memory + " ") && v.gbs > best_gbs) {
      best_gbs = v.gbs;
      best = v.name;
    }
  }
  return best;
}

namespace {

// The best of three runs of `loop(iterations)` on every thread of a pool, as giga
// operations per second (ops_per_thread each); the loops' results are kept so the work
// cannot be dropped.
template <typename Loop>
double best_rate(int threads, double ops_per_thread, Loop loop) {
  ThreadPool pool(threads);
  std::vector<double> sink(static_cast<size_t>(threads));
  double best = 0.0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(threads, 1, [&](int64_t, int64_t, int t) { sink[static_cast<size_t>(t)] += static_cast<double>(loop()); });
    best = std::max(best, ops_per_thread * threads / seconds_since(t0) / 1e9);
  }
  volatile double keep = sink[0];
  (void)keep;
  return best;
}

}  // namespace

double measure_fma_peak_gflops(int threads) {
  const bool wide = active_isa() == Isa::avx512;
  const int64_t iterations = 20'000'000;
  const double flops_per_thread = static_cast<double>(iterations) * (wide ? 16 * 16 : 12 * 8) * 2.0;
  return best_rate(threads, flops_per_thread,
                   [&] { return wide ? fma_loop_avx512(iterations) : fma_loop_avx2(iterations); });
}

double measure_int8_dot_peak_gops(int threads) {
  const bool vnni = active_isa() == Isa::avx512 && cpu_features().avx512_vnni;
  if (active_isa() == Isa::scalar) return 0.0;
  const int64_t iterations = 10'000'000;
  // Per chain and iteration: 64 (VNNI, 512-bit) or 32 (AVX2) int8 products, each a
  // multiply and an add.
  const double ops_per_thread =
      static_cast<double>(iterations) * (vnni ? kDotChains * 64 : kDotChainsAvx2 * 32) * 2.0;
  return best_rate(threads, ops_per_thread, [&] { return vnni ? dot_loop_vnni(iterations) : dot_loop_avx2(iterations); });
}

SchedulingGaps measure_scheduling_gaps(int threads, double seconds) {
  using Clock = std::chrono::steady_clock;
  constexpr auto kGap = std::chrono::microseconds(10);
  struct Interval {
    Clock::time_point begin, end;
  };
  std::vector<std::vector<Interval>> gaps(static_cast<size_t>(threads));
  for (auto& g : gaps) g.reserve(static_cast<size_t>(seconds * 20000) + 64);
  const auto span = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  ThreadPool pool(threads);
  std::vector<Clock::time_point> started(static_cast<size_t>(threads)), ended(static_cast<size_t>(threads));
  pool.parallel_for(threads, 1, [&](int64_t, int64_t, int t) {
    auto& mine = gaps[static_cast<size_t>(t)];
    const auto start = Clock::now();
    auto previous = start;
    for (;;) {
      const auto now = Clock::now();
      if (now - previous > kGap && mine.size() < mine.capacity()) mine.push_back({previous, now});
      previous = now;
      if (now - start >= span) break;
    }
    started[static_cast<size_t>(t)] = start;
    ended[static_cast<size_t>(t)] = previous;
  });
  // Each thread's own share, then the union of every thread's gaps over the time all ran.
  const auto first = *std::max_element(started.begin(), started.end());
  const auto last = *std::min_element(ended.begin(), ended.end());
  const double common = std::chrono::duration<double>(last - first).count();
  SchedulingGaps out;
  std::vector<Interval> all;
  for (size_t t = 0; t < gaps.size(); ++t) {
    double lost = 0.0;
    for (const Interval& g : gaps[t]) {
      lost += std::chrono::duration<double>(g.end - g.begin).count();
      const Interval clipped{std::max(g.begin, first), std::min(g.end, last)};
      if (clipped.begin < clipped.end) all.push_back(clipped);
    }
    const double ran = std::chrono::duration<double>(ended[t] - started[t]).count();
    out.per_thread += lost / ran / threads;
    out.gaps_per_second += static_cast<double>(gaps[t].size()) / ran / threads;
  }
  std::sort(all.begin(), all.end(), [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  double any = 0.0;
  for (size_t i = 0; i < all.size();) {
    auto begin = all[i].begin, end = all[i].end;
    for (++i; i < all.size() && all[i].begin <= end; ++i) end = std::max(end, all[i].end);
    any += std::chrono::duration<double>(end - begin).count();
  }
  out.any_thread = common > 0.0 ? any / common : 0.0;
  return out;
}

void print_scheduling_gaps(int threads) {
  const SchedulingGaps g = measure_scheduling_gaps(threads);
  std::printf("machine: %d thread(s): scheduling gaps (steps over 10 us) %.1f%% of a thread's time, %.0f a second; "
              "some thread in a gap %.1f%% of the time (what a pass of short parallel sections loses)\n",
              threads, 100.0 * g.per_thread, g.gaps_per_second, 100.0 * g.any_thread);
}

}  // namespace loom::bench
