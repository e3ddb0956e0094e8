// kernels::rms_norm and kernels::layer_norm against long-double references, for lengths
// that fill the sixteen summation lanes exactly, partly, and not at all.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "runtime/kernels/ops.hpp"

namespace {

std::vector<float> values(int64_t n, uint32_t seed, float offset) {
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t state = seed;
  for (auto& x : v) {
    state = state * 1664525u + 1013904223u;
    x = offset + static_cast<float>(static_cast<int32_t>(state >> 8) % 2001 - 1000) * 1e-3f;
  }
  return v;
}

}  // namespace

TEST_CASE("rms_norm and layer_norm match a long-double reference at every length around the lanes") {
  for (int64_t n : {1, 3, 15, 16, 17, 31, 64, 100, 1024, 1037}) {
    INFO("n " << n);
    const auto x = values(n, static_cast<uint32_t>(n) * 7u + 1u, 0.25f);
    const auto weight = values(n, 99u, 1.0f);
    const auto bias = values(n, 5u, 0.0f);
    const float eps = 1e-5f;

    long double squares = 0.0L, sum = 0.0L;
    for (float v : x) {
      squares += static_cast<long double>(v) * v;
      sum += v;
    }
    const long double mean = sum / n;
    long double var = 0.0L;
    for (float v : x) var += (v - mean) * (v - mean);
    var /= n;
    const long double rms_scale = 1.0L / std::sqrt(squares / n + eps);
    const long double ln_scale = 1.0L / std::sqrt(var + eps);

    std::vector<float> rms(static_cast<size_t>(n)), ln(static_cast<size_t>(n));
    loom::kernels::rms_norm(x.data(), weight.data(), eps, rms.data(), n);
    loom::kernels::layer_norm(x.data(), weight.data(), bias.data(), eps, ln.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const auto k = static_cast<size_t>(i);
      const auto want_rms = static_cast<double>(x[k] * rms_scale * weight[k]);
      const auto want_ln = static_cast<double>((x[k] - mean) * ln_scale * weight[k] + bias[k]);
      REQUIRE(rms[k] == Approx(want_rms).epsilon(1e-6).margin(1e-7));
      REQUIRE(ln[k] == Approx(want_ln).epsilon(1e-5).margin(1e-6));
    }

    // The order of summation is fixed: the same input gives the same bits again.
    std::vector<float> again(static_cast<size_t>(n));
    loom::kernels::rms_norm(x.data(), weight.data(), eps, again.data(), n);
    CHECK(again == rms);
  }
}
