// kernels::attend (runtime/kernels/attention.hpp): against a double-precision reference
// on odd shapes (head_dim not a multiple of 8, 1..3 keys, several segments, f16 cache,
// softcap), for every ISA level this CPU runs; bit-identical results for a query head
// whether it runs alone or in a tile of 4 and however its positions are cut into
// segments, whether or not the segments' value rows follow one another in memory; the
// AVX2 exp against libm. Also the AVX2 element-wise silu_mul, which shares
// that exp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "loom/convert.hpp"
#include "loom/cpu.hpp"
#include "runtime/kernels/attention.hpp"
#include "runtime/kernels/ops.hpp"

namespace {

using loom::kernels::AttentionShape;
using loom::kernels::KvSegment;

struct IsaScope {
  explicit IsaScope(loom::Isa isa) { loom::set_isa_cap(isa); }
  ~IsaScope() { loom::set_isa_cap(loom::Isa::avx512); }
};

// Every level this CPU runs.
std::vector<loom::Isa> levels() { return loom::supported_isas(); }

std::vector<float> gaussian(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// A cache of n positions of hd (f32 values, and the same rounded to f16 when asked). The
// kernel reads the keys dimension-major (element d of key i at d * n + i: the shape's
// key_stride is n) and the values as rows; `keys` keeps them as rows for the reference.
struct Cache {
  std::vector<float> keys, values;     // what the kernel should see, as f32 rows
  std::vector<float> keys_t;           // the same keys dimension-major
  std::vector<uint16_t> keys16_t, values16;
  Cache(int64_t n, int64_t hd, bool f16, uint32_t seed)
      : keys(gaussian(static_cast<size_t>(n * hd), seed)), values(gaussian(static_cast<size_t>(n * hd), seed + 1)) {
    if (f16) {
      std::vector<uint16_t> keys16(keys.size());
      values16.resize(values.size());
      loom::f32_to_f16(keys.data(), keys16.data(), keys.size());
      loom::f32_to_f16(values.data(), values16.data(), values.size());
      loom::f16_to_f32(keys16.data(), keys.data(), keys.size());
      loom::f16_to_f32(values16.data(), values.data(), values.size());
      keys16_t.resize(keys.size());
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t d = 0; d < hd; ++d) keys16_t[static_cast<size_t>(d * n + i)] = keys16[static_cast<size_t>(i * hd + d)];
      }
    }
    keys_t.resize(keys.size());
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t d = 0; d < hd; ++d) keys_t[static_cast<size_t>(d * n + i)] = keys[static_cast<size_t>(i * hd + d)];
    }
  }
  // Positions [begin, end) as one segment.
  KvSegment segment(int64_t begin, int64_t end, int64_t hd, bool f16) const {
    if (f16) return {keys16_t.data() + begin, values16.data() + begin * hd, end - begin};
    return {keys_t.data() + begin, values.data() + begin * hd, end - begin};
  }
};

std::vector<double> reference(const float* q, const Cache& c, int64_t n, const AttentionShape& s) {
  const int64_t hd = s.head_dim;
  std::vector<double> score(static_cast<size_t>(n));
  double mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    double d = 0;
    for (int64_t k = 0; k < hd; ++k) d += static_cast<double>(q[k]) * c.keys[static_cast<size_t>(i * hd + k)];
    d *= s.scale;
    if (s.softcap > 0) d = s.softcap * std::tanh(d / s.softcap);
    score[static_cast<size_t>(i)] = d;
    mx = std::max(mx, d);
  }
  double sum = 0;
  for (auto& x : score) sum += (x = std::exp(x - mx));
  std::vector<double> out(static_cast<size_t>(hd), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < hd; ++k) {
      out[static_cast<size_t>(k)] += score[static_cast<size_t>(i)] / sum * c.values[static_cast<size_t>(i * hd + k)];
    }
  }
  return out;
}

// Splits [0, n) into segments of the given lengths (cycled), as the paged cache does.
std::vector<KvSegment> cut(const Cache& c, int64_t n, int64_t hd, bool f16, std::vector<int64_t> lengths) {
  std::vector<KvSegment> out;
  size_t k = 0;
  for (int64_t at = 0; at < n;) {
    const int64_t end = std::min(n, at + lengths[k++ % lengths.size()]);
    out.push_back(c.segment(at, end, hd, f16));
    at = end;
  }
  return out;
}

// The same segments with each one's value rows copied into a buffer of its own, a row
// of padding apart, so that no segment's rows follow the previous one's in memory (the
// kernels sum a run of segments whose rows do as one: this keeps the other path).
struct ScatteredValues {
  std::vector<std::vector<float>> rows32;
  std::vector<std::vector<uint16_t>> rows16;
  std::vector<KvSegment> segments;
  ScatteredValues(const std::vector<KvSegment>& from, int64_t hd, bool f16) {
    for (const KvSegment& seg : from) {
      const auto n = static_cast<size_t>((seg.n + 1) * hd);  // one row of padding first
      KvSegment copy = seg;
      if (f16) {
        rows16.emplace_back(n, uint16_t{0x7E00});  // NaN padding: read by mistake, it shows
        std::memcpy(rows16.back().data() + hd, seg.values, static_cast<size_t>(seg.n * hd) * sizeof(uint16_t));
        copy.values = rows16.back().data() + hd;
      } else {
        rows32.emplace_back(n, std::numeric_limits<float>::quiet_NaN());
        std::memcpy(rows32.back().data() + hd, seg.values, static_cast<size_t>(seg.n * hd) * sizeof(float));
        copy.values = rows32.back().data() + hd;
      }
      segments.push_back(copy);
    }
  }
};

}  // namespace

TEST_CASE("attend: matches a double-precision reference on odd shapes, every ISA level, f32 and f16 caches") {
  for (const auto isa : levels()) {
    IsaScope scope(isa);
    for (const bool f16 : {false, true}) {
      for (const int64_t hd : {1, 3, 7, 8, 9, 24, 64, 65, 100}) {
        for (const int64_t n : {1, 2, 3, 4, 17, 130}) {
          for (const float cap : {0.0f, 5.0f}) {
            INFO("isa " << loom::isa_name(isa) << " f16 " << f16 << " head_dim " << hd << " keys " << n << " softcap " << cap);
            const AttentionShape shape{.head_dim = hd, .scale = 1.0f / std::sqrt(static_cast<float>(hd)), .softcap = cap, .f16 = f16, .key_stride = n};
            const Cache cache(n, hd, f16, static_cast<uint32_t>(hd * 1000 + n));
            const auto q = gaussian(static_cast<size_t>(4 * hd), static_cast<uint32_t>(hd + n), 2.0f);
            const auto segments = cut(cache, n, hd, f16, {5, 16, 1});
            std::vector<float> scores(static_cast<size_t>(4 * n)), out(static_cast<size_t>(4 * hd), NAN);
            loom::kernels::attend(q.data(), 4, segments, n, shape, scores.data(), out.data());
            for (int64_t h = 0; h < 4; ++h) {
              const auto want = reference(q.data() + h * hd, cache, n, shape);
              for (int64_t k = 0; k < hd; ++k) {
                REQUIRE(std::abs(out[static_cast<size_t>(h * hd + k)] - want[static_cast<size_t>(k)]) <=
                        2e-5 * (1.0 + std::abs(want[static_cast<size_t>(k)])));
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("attend: a head's output is the same bits alone, in a tile of 2..4, and however its positions are segmented") {
  for (const auto isa : levels()) {
    IsaScope scope(isa);
    for (const bool f16 : {false, true}) {
      for (const int64_t hd : {9, 64}) {
        const int64_t n = 75;
        INFO("isa " << loom::isa_name(isa) << " f16 " << f16 << " head_dim " << hd);
        const AttentionShape shape{.head_dim = hd, .scale = 0.125f, .f16 = f16, .key_stride = n};
        const Cache cache(n, hd, f16, 7);
        const auto q = gaussian(static_cast<size_t>(4 * hd), 11, 2.0f);
        std::vector<float> scores(static_cast<size_t>(4 * n));
        // Head h alone, in one segment.
        std::vector<float> alone(static_cast<size_t>(4 * hd));
        const auto whole = cut(cache, n, hd, f16, {n});
        for (int64_t h = 0; h < 4; ++h) {
          loom::kernels::attend(q.data() + h * hd, 1, whole, n, shape, scores.data(), alone.data() + h * hd);
        }
        for (int64_t tile = 2; tile <= 4; ++tile) {
          for (const auto& lengths : std::vector<std::vector<int64_t>>{{n}, {16}, {1, 2, 3}, {74, 1}}) {
            std::vector<float> out(static_cast<size_t>(tile * hd));
            loom::kernels::attend(q.data(), tile, cut(cache, n, hd, f16, lengths), n, shape, scores.data(), out.data());
            CHECK(std::memcmp(out.data(), alone.data(), out.size() * sizeof(float)) == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("attend: segments whose value rows follow one another give the bits of segments apart") {
  for (const auto isa : levels()) {
    IsaScope scope(isa);
    for (const bool f16 : {false, true}) {
      for (const int64_t hd : {9, 64}) {
        const int64_t n = 75;
        const AttentionShape shape{.head_dim = hd, .scale = 0.125f, .f16 = f16, .key_stride = n};
        const Cache cache(n, hd, f16, 23);
        const auto q = gaussian(static_cast<size_t>(4 * 5 * hd), 29, 2.0f);
        std::vector<float> scores(static_cast<size_t>(16 * n));
        for (const auto& lengths : std::vector<std::vector<int64_t>>{{16}, {1, 2, 3}, {5, 16, 1}}) {
          const auto adjacent = cut(cache, n, hd, f16, lengths);  // value rows in one run
          const ScatteredValues apart(adjacent, hd, f16);
          for (int64_t nq = 1; nq <= 4; ++nq) {
            INFO("isa " << loom::isa_name(isa) << " f16 " << f16 << " head_dim " << hd << " heads " << nq
                        << " segments of " << lengths[0] << "...");
            std::vector<float> one(static_cast<size_t>(nq * hd)), two(one.size(), -1.0f);
            loom::kernels::attend(q.data(), nq, adjacent, n, shape, scores.data(), one.data());
            loom::kernels::attend(q.data(), nq, apart.segments, n, shape, scores.data(), two.data());
            REQUIRE(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
            // Several tokens (a prompt's run): the same.
            const int64_t tokens = 3, qts = 5 * hd;
            const int64_t n_keys[tokens] = {n - 30, n - 12, n};
            std::vector<float> many(static_cast<size_t>(tokens * qts), -1.0f), many_apart(many);
            loom::kernels::attend_tokens(q.data(), qts, tokens, nq, adjacent, n_keys, shape, scores.data(), many.data(),
                                         qts);
            loom::kernels::attend_tokens(q.data(), qts, tokens, nq, apart.segments, n_keys, shape, scores.data(),
                                         many_apart.data(), qts);
            REQUIRE(std::memcmp(many.data(), many_apart.data(), many.size() * sizeof(float)) == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("attend_tokens: each of 1..4 consecutive tokens gets the bits of attend() alone, every ISA level") {
  for (const auto isa : levels()) {
    IsaScope scope(isa);
    for (const bool f16 : {false, true}) {
      for (const int64_t hd : {9, 64, 65}) {
        for (const int64_t first_keys : {1, 2, 15, 16, 17, 40}) {
          for (const int64_t tokens : {1, 2, 3, 4}) {
            for (const int64_t nq : {1, 2, 3, 4}) {
              INFO("isa " << loom::isa_name(isa) << " f16 " << f16 << " head_dim " << hd << " first token's keys "
                          << first_keys << " tokens " << tokens << " heads " << nq);
              const int64_t n = first_keys + tokens - 1;
              const AttentionShape shape{.head_dim = hd, .scale = 0.2f, .softcap = hd == 9 ? 4.0f : 0.0f, .f16 = f16,
                                         .key_stride = n};
              const Cache cache(n, hd, f16, static_cast<uint32_t>(hd + 5 * n + nq));
              // Token u's heads at q + u * 5 * hd (a gap between tokens, as a pass's rows have).
              const int64_t qts = 5 * hd;
              const auto q = gaussian(static_cast<size_t>(tokens * qts), static_cast<uint32_t>(n * 3 + hd), 2.0f);
              std::vector<int64_t> n_keys(static_cast<size_t>(tokens));
              for (int64_t u = 0; u < tokens; ++u) n_keys[static_cast<size_t>(u)] = first_keys + u;
              std::vector<float> scores(static_cast<size_t>(tokens * nq * n));
              std::vector<float> together(static_cast<size_t>(tokens * qts), -1.0f), alone(together);
              loom::kernels::attend_tokens(q.data(), qts, tokens, nq, cut(cache, n, hd, f16, {16, 3, 1, 5}),
                                           n_keys.data(), shape, scores.data(), together.data(), qts);
              for (int64_t u = 0; u < tokens; ++u) {
                const int64_t k = n_keys[static_cast<size_t>(u)];
                loom::kernels::attend(q.data() + u * qts, nq, cut(cache, k, hd, f16, {k}), k, shape, scores.data(),
                                      alone.data() + u * qts);
              }
              // The rows between tokens' heads are not written.
              REQUIRE(std::memcmp(together.data(), alone.data(), together.size() * sizeof(float)) == 0);
            }
          }
        }
      }
    }
  }
  const float q[4] = {};
  const AttentionShape shape{.head_dim = 1, .key_stride = 2};
  float scores[16], out[8];
  const int64_t decreasing[2] = {2, 1}, five[5] = {1, 2, 3, 4, 5};
  CHECK_THROWS(loom::kernels::attend_tokens(q, 1, 2, 1, {}, decreasing, shape, scores, out, 1));
  CHECK_THROWS(loom::kernels::attend_tokens(q, 1, 5, 1, {}, five, shape, scores, out, 1));
}

TEST_CASE("attend: the AVX-512 kernels give the AVX2 kernels' bits") {
  const auto isas = levels();
  if (std::find(isas.begin(), isas.end(), loom::Isa::avx512) == isas.end()) {
    WARN("skipped: this CPU has no AVX-512");
    return;
  }
  for (const bool f16 : {false, true}) {
    for (const int64_t hd : {1, 7, 8, 9, 16, 24, 64, 65, 80, 100, 128, 256}) {
      for (const int64_t n : {1, 2, 3, 5, 6, 7, 13, 40, 131}) {
        for (const int64_t nq : {1, 2, 3, 4}) {
          for (const float cap : {0.0f, 5.0f}) {
            INFO("f16 " << f16 << " head_dim " << hd << " keys " << n << " heads " << nq << " softcap " << cap);
            const AttentionShape shape{.head_dim = hd, .scale = 0.3f, .softcap = cap, .f16 = f16, .key_stride = n};
            const Cache cache(n, hd, f16, static_cast<uint32_t>(hd * 7 + n));
            const auto q = gaussian(static_cast<size_t>(nq * hd), static_cast<uint32_t>(hd + 3 * n), 2.0f);
            const auto segments = cut(cache, n, hd, f16, {16, 3, 1, 5});
            std::vector<float> scores(static_cast<size_t>(nq * n));
            std::vector<float> wide(static_cast<size_t>(nq * hd)), narrow(wide.size());
            loom::kernels::attend_avx512(q.data(), nq, segments, n, shape, scores.data(), wide.data());
            loom::kernels::attend_avx2(q.data(), nq, segments, n, shape, scores.data(), narrow.data());
            REQUIRE(std::memcmp(wide.data(), narrow.data(), wide.size() * sizeof(float)) == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("attend: bad tile sizes and a missing key stride are refused") {
  const float q[4] = {};
  const AttentionShape shape{.head_dim = 4, .key_stride = 1};
  float scores[8], out[20];
  CHECK_THROWS(loom::kernels::attend(q, 5, {}, 1, shape, scores, out));
  CHECK_THROWS(loom::kernels::attend(q, 1, {}, 0, shape, scores, out));
  CHECK_THROWS(loom::kernels::attend(q, 1, {}, 1, AttentionShape{.head_dim = 4}, scores, out));  // no key stride
}

TEST_CASE("exp_avx2: within 2 ulp of libm from -87 to 88, zero below -87.3 and for -inf") {
  if (loom::best_supported_isa() == loom::Isa::scalar) {
    WARN("skipped: this CPU has no AVX2");
    return;
  }
  std::vector<float> x;
  for (float v = -87.0f; v <= 88.0f; v += 0.01373f) x.push_back(v);
  for (float v : {0.0f, -0.0f, 1e-8f, -1e-8f, 0.5f, -0.5f, 1.0f, -1.0f}) x.push_back(v);
  std::vector<float> y = x;
  loom::kernels::exp_avx2(y.data(), static_cast<int64_t>(y.size()));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    worst = std::max(worst, std::abs(y[i] - want) / want);
  }
  CHECK(worst <= 2.5e-7);  // 2 ulp of a float is 2.4e-7 relative at worst
  std::vector<float> low = {-87.31f, -90.0f, -1000.0f, -std::numeric_limits<float>::infinity(), 0.0f};
  loom::kernels::exp_avx2(low.data(), static_cast<int64_t>(low.size()));
  CHECK(low[0] == 0.0f);
  CHECK(low[1] == 0.0f);
  CHECK(low[2] == 0.0f);
  CHECK(low[3] == 0.0f);
  CHECK(low[4] == 1.0f);
}

TEST_CASE("silu_mul: the AVX2 kernel within 4 ulp of libm, the same bits for an element wherever it falls") {
  if (loom::best_supported_isa() == loom::Isa::scalar) {
    WARN("skipped: this CPU has no AVX2");
    return;
  }
  const auto g = gaussian(203, 5, 4.0f);
  const auto u = gaussian(203, 6, 1.0f);
  std::vector<float> got = g;
  loom::kernels::silu_mul_avx2(got.data(), u.data(), static_cast<int64_t>(got.size()));
  for (size_t i = 0; i < g.size(); ++i) {
    const double want = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
    REQUIRE(std::abs(got[i] - want) <= 5e-7 * std::abs(want) + 1e-30);
  }
  // Every window [start, start + n) gives each element the bits it had in the whole array.
  for (const size_t start : {size_t{0}, size_t{1}, size_t{5}, size_t{11}}) {
    for (const size_t n : {size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{100}}) {
      std::vector<float> part(g.begin() + static_cast<std::ptrdiff_t>(start),
                              g.begin() + static_cast<std::ptrdiff_t>(start + n));
      loom::kernels::silu_mul_avx2(part.data(), u.data() + start, static_cast<int64_t>(n));
      CHECK(std::memcmp(part.data(), got.data() + start, n * sizeof(float)) == 0);
    }
  }
  // Far tails: silu(-100) is -0 or a tiny negative, silu(100) * u is 100 * u.
  std::vector<float> ends = {-100.0f, 100.0f, 0.0f};
  const std::vector<float> ones = {1.0f, 2.0f, 3.0f};
  loom::kernels::silu_mul_avx2(ends.data(), ones.data(), 3);
  CHECK(std::abs(ends[0]) < 1e-30f);
  CHECK(ends[1] == 200.0f);
  CHECK(ends[2] == 0.0f);
}
