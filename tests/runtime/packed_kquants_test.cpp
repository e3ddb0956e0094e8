// The q4_k_x16 and q6_k_x16 packings (tensor/packing.hpp) and their products
// (runtime/kernels/packed_kquants.*): exact byte round trips on any bytes, agreement with
// the row-major kernels, and one set of bits across kernel families, thread counts and
// batch compositions.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "loom/convert.hpp"
#include "loom/cpu.hpp"
#include "loom/error.hpp"
#include "loom/tensor.hpp"
#include "loom/thread_pool.hpp"
#include "runtime/kernels/linear.hpp"
#include "runtime/kernels/packed_kquants.hpp"
#include "runtime/kernels/packed_panels.hpp"
#include "support/test_support.hpp"
#include "tensor/packing.hpp"
#include "tensor/quant/quant.hpp"

namespace {

using loom::DType;
using loom::Packing;
using loom::Tensor;
using loom::test::IsaScope;

Tensor random_blocks(DType dtype, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (auto& f : v) f = dist(rng);
  Tensor t = Tensor::empty(loom::Shape{rows, cols}, dtype);
  loom::quant::quantize(dtype, v.data(), t.mutable_raw_data(), v.size());
  return t;
}

// The k-quant packings, with the dtype each packs and its packed bytes per row and block.
struct Case {
  DType dtype;
  Packing packing;
  int64_t block_bytes;
};
constexpr Case kCases[] = {{DType::q4_k, Packing::q4_k_x16, 148}, {DType::q6_k, Packing::q6_k_x16, 210}};

std::vector<float> random_x(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& f : x) f = dist(rng);
  return x;
}

bool same_bits(const float* a, const float* b, int64_t n) { return std::memcmp(a, b, static_cast<size_t>(n) * 4) == 0; }

}  // namespace

TEST_CASE("packing: q4_k_x16 and q6_k_x16 pack and unpack any bytes exactly, rows padded to whole panels") {
  std::mt19937 rng(21);
  std::uniform_int_distribution<int> byte(0, 255);
  loom::ThreadPool pool(2);
  for (const Case& c : kCases) {
    for (const int64_t rows : {1, 15, 16, 17, 40}) {
      for (const int64_t cols : {256, 768}) {
        INFO(loom::packing_name(c.packing) << ": " << rows << " x " << cols);
        // Random bytes exercise every bit of q4_k's 12 scale bytes (the quantizer may not).
        Tensor w = Tensor::empty(loom::Shape{rows, cols}, c.dtype);
        auto* bytes = static_cast<uint8_t*>(w.mutable_raw_data());
        for (int64_t i = 0; i < w.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(byte(rng));
        REQUIRE(loom::can_pack(w, c.packing));
        const Tensor p = loom::pack(w, c.packing, &pool);
        CHECK(p.packing() == c.packing);
        CHECK(p.layout() == loom::Layout::repacked);
        const int64_t panels = (rows + 15) / 16;
        CHECK(p.nbytes() == panels * (cols / 256) * 16 * c.block_bytes);
        CHECK(loom::packed_nbytes(c.packing, w.shape()) == p.nbytes());
        const Tensor back = loom::unpack(p, &pool);
        REQUIRE(back.nbytes() == w.nbytes());
        CHECK(std::memcmp(back.raw_data(), w.raw_data(), static_cast<size_t>(w.nbytes())) == 0);
        CHECK(std::memcmp(loom::unpack(p).raw_data(), w.raw_data(), static_cast<size_t>(w.nbytes())) == 0);
      }
    }
  }
  CHECK_FALSE(loom::can_pack(Tensor::zeros(loom::Shape{16, 128}, DType::q8_0), Packing::q4_k_x16));
  CHECK_THROWS_AS(loom::pack(Tensor::zeros(loom::Shape{16, 256}, DType::q8_0), Packing::q4_k_x16), loom::Error);
  CHECK(loom::packing_from_name("q4_k_x16") == Packing::q4_k_x16);
  CHECK(loom::packing_from_name("q6_k_x16") == Packing::q6_k_x16);
}

TEST_CASE("packed q4_k and q6_k: products match the row-major kernels and keep one set of bits") {
  std::mt19937 rng(23);
  loom::ThreadPool one(1), two(2);
  for (const Case& c : kCases) {
    for (const int64_t rows : {1, 13, 16, 40, 75}) {
      for (const int64_t cols : {256, 1024}) {
        const Tensor w = random_blocks(c.dtype, rows, cols, rng);
        const Tensor p = loom::pack(w, c.packing);
        std::vector<float> wf(static_cast<size_t>(rows * cols));
        loom::convert(c.dtype, w.raw_data(), DType::f32, wf.data(), wf.size());
        std::vector<float> bias = random_x(rows, rng);
        Tensor bias_t = Tensor::empty(loom::Shape{rows}, DType::f32);
        std::memcpy(bias_t.mutable_raw_data(), bias.data(), bias.size() * 4);
        for (const int64_t n : {1, 2, 3, 5, 8, 13}) {
          INFO(loom::packing_name(c.packing) << ": " << rows << " x " << cols << ", " << n << " tokens");
          const std::vector<float> x = random_x(n * cols, rng);
          std::vector<float> row_major(static_cast<size_t>(n * rows)), packed(row_major.size());
          loom::kernels::linear(w, nullptr, x.data(), cols, n, row_major.data(), rows, two);
          loom::kernels::linear(p, nullptr, x.data(), cols, n, packed.data(), rows, two);
          // The same q8_k activations and exact sub-block integers, summed in another
          // order: within f32 rounding of the magnitudes summed.
          for (int64_t t = 0; t < n; ++t) {
            for (int64_t r = 0; r < rows; ++r) {
              double magnitude = 0.0;
              for (int64_t k = 0; k < cols; ++k) {
                magnitude += std::fabs(static_cast<double>(wf[static_cast<size_t>(r * cols + k)]) *
                                       x[static_cast<size_t>(t * cols + k)]);
              }
              const size_t i = static_cast<size_t>(t * rows + r);
              REQUIRE(std::fabs(packed[i] - row_major[i]) <= 2e-5 * magnitude + 1e-6);
            }
          }
          // The scalar family: the same bits.
          std::vector<float> scalar(packed.size());
          loom::kernels::linear_packed_kquants_scalar(p, x.data(), cols, n, scalar.data(), rows);
          CHECK(same_bits(scalar.data(), packed.data(), n * rows));
          {
            IsaScope cap(loom::Isa::scalar);
            std::vector<float> capped(packed.size()), capped_scalar(packed.size());
            loom::kernels::linear(p, nullptr, x.data(), cols, n, capped.data(), rows, two);
            loom::kernels::linear_packed_kquants_scalar(p, x.data(), cols, n, capped_scalar.data(), rows);
            CHECK(same_bits(capped.data(), capped_scalar.data(), n * rows));
          }
          // One thread: the same bits.
          std::vector<float> single(packed.size());
          loom::kernels::linear(p, nullptr, x.data(), cols, n, single.data(), rows, one);
          CHECK(same_bits(single.data(), packed.data(), n * rows));
          // Batch invariance: each token alone gives its row of the batch.
          for (int64_t t = 0; t < n; ++t) {
            std::vector<float> alone(static_cast<size_t>(rows));
            loom::kernels::linear(p, nullptr, x.data() + t * cols, cols, 1, alone.data(), rows, two);
            CHECK(same_bits(alone.data(), packed.data() + t * rows, rows));
          }
          // With a bias: the sums plus the bias, each output once.
          std::vector<float> biased(packed.size());
          loom::kernels::linear(p, &bias_t, x.data(), cols, n, biased.data(), rows, two);
          for (int64_t t = 0; t < n; ++t) {
            for (int64_t r = 0; r < rows; ++r) {
              CHECK(biased[static_cast<size_t>(t * rows + r)] ==
                    packed[static_cast<size_t>(t * rows + r)] + bias[static_cast<size_t>(r)]);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("packed q4_k and q6_k: a NaN activation block gives NaN outputs, not garbage") {
  std::mt19937 rng(29);
  loom::ThreadPool two(2);
  for (const Case& c : kCases) {
    INFO(loom::packing_name(c.packing));
    const Tensor p = loom::pack(random_blocks(c.dtype, 20, 512, rng), c.packing);
    std::vector<float> x = random_x(2 * 512, rng);
    x[512 + 300] = std::nanf("");  // token 1, second block
    std::vector<float> y(40);
    loom::kernels::linear(p, nullptr, x.data(), 512, 2, y.data(), 20, two);
    for (int r = 0; r < 20; ++r) {
      CHECK(std::isfinite(y[static_cast<size_t>(r)]));
      CHECK(std::isnan(y[static_cast<size_t>(20 + r)]));
    }
  }
}

TEST_CASE("packed q4_k and q6_k: the kernels ask for the packing only where the VNNI kernel runs") {
  const bool vnni = loom::best_supported_isa() >= loom::Isa::avx512 && loom::cpu_features().avx512_vnni;
  CHECK(loom::kernels::preferred_packing(DType::q4_k) == (vnni ? Packing::q4_k_x16 : Packing::none));
  CHECK(loom::kernels::preferred_packing(DType::q6_k) == (vnni ? Packing::q6_k_x16 : Packing::none));
  CHECK(loom::kernels::preferred_packing(DType::q5_k) == Packing::none);
  IsaScope cap(loom::Isa::avx2);
  CHECK(loom::kernels::preferred_packing(DType::q4_k) == Packing::none);
  CHECK(loom::kernels::preferred_packing(DType::q6_k) == Packing::none);
  CHECK_FALSE(loom::kernels::packed_vnni_native());
}
