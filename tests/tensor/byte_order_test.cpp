// The byte-order suspicion check (src/tensor/byte_order.hpp) on weight-like values,
// their byte-swapped images, zeros, noise, and the sampling plan.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <vector>

#include "loom/convert.hpp"
#include "tensor/byte_order.hpp"

namespace {

std::vector<float> weights(size_t n, float mean, float std, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(mean, std);
  std::vector<float> out(n);
  for (auto& f : out) f = dist(rng);
  return out;
}

template <typename T>
std::vector<std::byte> bytes_of(const std::vector<T>& v) {
  std::vector<std::byte> out(v.size() * sizeof(T));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::vector<std::byte> swapped(std::vector<std::byte> b, size_t element) {
  loom::byteswap_inplace(b.data(), b.size() / element, element);
  return b;
}

std::vector<uint16_t> to_f16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  loom::f32_to_f16(v.data(), out.data(), v.size());
  return out;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  loom::f32_to_bf16(v.data(), out.data(), v.size());
  return out;
}

}  // namespace

TEST_CASE("byte order: weight-like values pass, their byte-swapped images are flagged") {
  using loom::DType;
  for (const auto& [mean, std] : {std::pair<float, float>{0.0f, 0.02f}, {0.0f, 0.5f}, {1.0f, 0.1f}, {0.0f, 3.0f}}) {
    INFO("normal(" << mean << ", " << std << ")");
    const auto w = weights(1024, mean, std, 5);
    struct Case {
      DType dtype;
      std::vector<std::byte> bytes;
      size_t element;
    };
    std::vector<double> w64(w.begin(), w.end());
    for (const Case& c : {Case{DType::f32, bytes_of(w), 4}, Case{DType::f16, bytes_of(to_f16(w)), 2},
                          Case{DType::bf16, bytes_of(to_bf16(w)), 2}, Case{DType::f64, bytes_of(w64), 8}}) {
      INFO(loom::dtype_name(c.dtype));
      const auto ok = loom::check_byte_order(c.bytes, c.dtype);
      CHECK(ok.values > 1000);
      CHECK(ok.implausible * 100 < ok.values);  // under 1% (f16 subnormals of tiny weights)
      CHECK_FALSE(ok.suspicious);
      const auto bad = loom::check_byte_order(swapped(c.bytes, c.element), c.dtype);
      CHECK(bad.values == ok.values);
      CHECK(bad.implausible_swapped == ok.implausible);
      CHECK(bad.implausible * 5 > bad.values);  // over 20%
      CHECK(bad.suspicious);
      CHECK_FALSE(bad.band.empty());
    }
  }
}

TEST_CASE("byte order: zeros, too few values, noise and other dtypes give no verdict") {
  using loom::DType;
  const std::vector<std::byte> zeros(4096, std::byte{0});
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    const auto c = loom::check_byte_order(zeros, d);
    CHECK(c.values == 0);
    CHECK_FALSE(c.suspicious);
  }
  // Negative zeros are zeros too.
  CHECK(loom::check_byte_order(bytes_of(std::vector<float>(256, -0.0f)), DType::f32).values == 0);

  // A handful of swapped values among zeros: below the minimum, no verdict.
  auto sparse = weights(1024, 0.0f, 0.02f, 9);
  for (size_t i = 0; i < sparse.size(); ++i) {
    if (i % 128 != 0) sparse[i] = 0.0f;
  }
  const auto few = loom::check_byte_order(swapped(bytes_of(sparse), 4), DType::f32);
  CHECK(few.values == 8);
  CHECK_FALSE(few.suspicious);

  // Uniform random bits are implausible either way round: not a byte-order problem.
  std::mt19937 rng(3);
  std::vector<uint32_t> noise(1024);
  for (auto& u : noise) u = static_cast<uint32_t>(rng());
  const auto n = loom::check_byte_order(bytes_of(noise), DType::f32);
  CHECK(n.implausible > n.values / 2);
  CHECK(n.implausible_swapped > n.values / 2);
  CHECK_FALSE(n.suspicious);
  // All NaN (0xff bytes) reads the same swapped.
  CHECK_FALSE(loom::check_byte_order(std::vector<std::byte>(4096, std::byte{0xff}), DType::f32).suspicious);

  // Integer and quantized dtypes are not checked.
  CHECK_FALSE(loom::byte_order_checked(DType::i32));
  CHECK_FALSE(loom::byte_order_checked(DType::q8_0));
  CHECK(loom::byte_order_checked(DType::bf16));
  const auto ints = loom::check_byte_order(swapped(bytes_of(weights(1024, 0, 1, 1)), 4), DType::i32);
  CHECK(ints.values == 0);
  CHECK_FALSE(ints.suspicious);
  // A trailing partial value is ignored.
  auto odd = swapped(bytes_of(weights(64, 0.0f, 0.02f, 2)), 4);
  odd.push_back(std::byte{0x7f});
  CHECK(loom::check_byte_order(odd, DType::f32).values == 64);
}

TEST_CASE("byte order: the sample is a bounded set of whole-value runs spread over the tensor") {
  CHECK(loom::byte_order_sample_runs(0, 4).empty());
  CHECK(loom::byte_order_sample_runs(3, 4).empty());
  CHECK(loom::byte_order_sample_runs(100, 0).empty());
  auto runs = loom::byte_order_sample_runs(4 * 1000 + 3, 4);  // small: all of it, whole values
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].offset == 0);
  CHECK(runs[0].size == 4000);
  for (const uint64_t elements : {uint64_t{1025}, uint64_t{4096}, uint64_t{1} << 40}) {
    INFO(elements);
    runs = loom::byte_order_sample_runs(elements * 2, 2);
    REQUIRE(runs.size() == loom::kByteOrderSampleRuns);
    uint64_t total = 0;
    for (size_t i = 0; i < runs.size(); ++i) {
      CHECK(runs[i].offset % 2 == 0);
      CHECK(runs[i].offset + runs[i].size <= elements * 2);
      if (i > 0) CHECK(runs[i].offset >= runs[i - 1].offset + runs[i - 1].size);
      total += runs[i].size;
    }
    CHECK(total == loom::kByteOrderSampleValues * 2);
    CHECK(runs[0].offset == 0);
    // The last run reaches the final stretch of the tensor.
    CHECK(runs.back().offset + runs.back().size + 2 * 3 >= elements * 2);
  }
}
