// The q8_0_x16 and q4_0_x16 packings (tensor/packing.hpp) and their products
// (runtime/kernels/packed_blocks32.hpp): byte-exact round trips, the guards on packed
// tensors, agreement with the row-major kernels, one set of bits whatever the kernel
// family, batch, thread count or bias.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "loom/cpu.hpp"
#include "loom/error.hpp"
#include "loom/tensor.hpp"
#include "loom/thread_pool.hpp"
#include "runtime/kernels/linear.hpp"
#include "runtime/kernels/packed_blocks32.hpp"
#include "runtime/kernels/packed_panels.hpp"
#include "support/test_support.hpp"
#include "tensor/packing.hpp"
#include "tensor/quant/quant.hpp"

namespace {

using loom::DType;
using loom::Packing;
using loom::Tensor;

Tensor random_blocks(DType dtype, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (auto& f : v) f = dist(rng);
  Tensor t = Tensor::empty(loom::Shape{rows, cols}, dtype);
  loom::quant::quantize(dtype, v.data(), t.mutable_raw_data(), v.size());
  return t;
}
Tensor random_q8_0(int64_t rows, int64_t cols, std::mt19937& rng) { return random_blocks(DType::q8_0, rows, cols, rng); }

// The two packings of 32-element blocks, with the dtype each packs.
struct Case {
  DType dtype;
  Packing packing;
  int64_t block_bytes;
};
constexpr Case kCases[] = {{DType::q8_0, Packing::q8_0_x16, 34}, {DType::q4_0, Packing::q4_0_x16, 18}};

std::vector<float> random_x(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& f : x) f = dist(rng);
  return x;
}

bool same_bits(const float* a, const float* b, int64_t n) { return std::memcmp(a, b, static_cast<size_t>(n) * 4) == 0; }

using loom::test::IsaScope;

}  // namespace

TEST_CASE("packing: q8_0_x16 and q4_0_x16 pack and unpack byte for byte, rows padded to whole panels") {
  std::mt19937 rng(7);
  for (const Case& c : kCases) {
    for (const int64_t rows : {1, 15, 16, 17, 33, 64}) {
      for (const int64_t cols : {32, 96, 256}) {
        INFO(loom::packing_name(c.packing) << ": " << rows << " x " << cols);
        const Tensor w = random_blocks(c.dtype, rows, cols, rng);
        REQUIRE(loom::can_pack(w, c.packing));
        const Tensor p = loom::pack(w, c.packing);
        CHECK(p.layout() == loom::Layout::repacked);
        CHECK(p.packing() == c.packing);
        CHECK(p.shape() == w.shape());
        CHECK(p.nbytes() == (rows + 15) / 16 * 16 * (cols / 32) * c.block_bytes);
        CHECK(p.describe() == std::string(loom::dtype_name(c.dtype)) + w.shape().to_string() + " repacked(" +
                                  std::string(loom::packing_name(c.packing)) + ") cpu");
        const Tensor back = loom::unpack(p);
        CHECK(back.layout() == loom::Layout::row_major);
        REQUIRE(back.nbytes() == w.nbytes());
        CHECK(std::memcmp(back.raw_data(), w.raw_data(), static_cast<size_t>(w.nbytes())) == 0);
        const Tensor copied = p.copy();
        CHECK(copied.packing() == c.packing);
        CHECK(std::memcmp(copied.raw_data(), p.raw_data(), static_cast<size_t>(p.nbytes())) == 0);
        // Packed on a pool: the same bytes.
        loom::ThreadPool pool(2);
        const Tensor p2 = loom::pack(w, c.packing, &pool);
        CHECK(std::memcmp(p2.raw_data(), p.raw_data(), static_cast<size_t>(p.nbytes())) == 0);
      }
    }
  }
}

TEST_CASE("packing: what cannot be packed is refused, and a packed tensor is not viewed as rows") {
  std::mt19937 rng(8);
  const Tensor w = random_q8_0(20, 64, rng);
  CHECK_FALSE(loom::can_pack(w, Packing::none));
  CHECK_FALSE(loom::can_pack(Tensor::zeros(loom::Shape{16, 64}, DType::f32), Packing::q8_0_x16));
  CHECK_FALSE(loom::can_pack(Tensor::zeros(loom::Shape{64}, DType::q8_0), Packing::q8_0_x16));
  CHECK_THROWS_AS(loom::pack(Tensor::zeros(loom::Shape{16, 64}, DType::f16), Packing::q8_0_x16), loom::Error);
  const Tensor p = loom::pack(w, Packing::q8_0_x16);
  CHECK_THROWS_WITH(p.slice(0, 0, 4), Catch::Contains("repacked tensor (q8_0_x16)"));
  CHECK_THROWS_AS(p.reshape(loom::Shape{40, 32}), loom::Error);
  CHECK_THROWS_AS(p.with_layout(loom::Layout::row_major), loom::Error);
  // The storage must hold the padded panels: 20 rows take 32 rows of bytes.
  auto small = loom::Storage::allocate(static_cast<size_t>(w.nbytes()));
  CHECK_THROWS_WITH(Tensor::packed(small, 0, w.shape(), DType::q8_0, Packing::q8_0_x16), Catch::Contains("exceeds"));
  CHECK_THROWS_AS(Tensor::packed(p.storage(), 0, w.shape(), DType::q4_0, Packing::q8_0_x16), loom::Error);
  // An unpacked tensor comes back as it is.
  CHECK(loom::unpack(w).raw_data() == w.raw_data());
}

TEST_CASE("packed q8_0 and q4_0: products match the row-major kernels and keep one set of bits") {
  std::mt19937 rng(9);
  loom::ThreadPool one(1), two(2);
  for (const Case& c : kCases) {
    for (const int64_t rows : {1, 13, 16, 40, 75}) {
      for (const int64_t cols : {32, 160, 1024}) {
        const Tensor w = random_blocks(c.dtype, rows, cols, rng);
        const Tensor p = loom::pack(w, c.packing);
        std::vector<float> bias = random_x(rows, rng);
        Tensor bias_t = Tensor::empty(loom::Shape{rows}, DType::f32);
        std::memcpy(bias_t.mutable_raw_data(), bias.data(), bias.size() * 4);
        for (const int64_t n : {1, 2, 3, 5, 8, 13}) {
          INFO(loom::packing_name(c.packing) << ": " << rows << " x " << cols << ", " << n << " tokens");
          const std::vector<float> x = random_x(n * cols, rng);
          std::vector<float> row_major(static_cast<size_t>(n * rows)), packed(row_major.size());
          loom::kernels::linear(w, nullptr, x.data(), cols, n, row_major.data(), rows, two);
          loom::kernels::linear(p, nullptr, x.data(), cols, n, packed.data(), rows, two);
          // The same exact per-block integers, summed in another order: f32 rounding apart.
          for (size_t i = 0; i < packed.size(); ++i) {
            REQUIRE(std::fabs(packed[i] - row_major[i]) <= 1e-5f * (1.0f + std::fabs(row_major[i])) * std::sqrt(cols / 32.0f));
          }
          // The scalar family: the same bits.
          std::vector<float> scalar(packed.size());
          loom::kernels::linear_packed_blocks32_scalar(p, x.data(), cols, n, scalar.data(), rows);
          CHECK(same_bits(scalar.data(), packed.data(), n * rows));
          {
            // Capped to scalar, the packed product runs the scalar family end to end
            // (the activations quantized by the scalar quantizer too): the same bits as
            // the scalar kernel on those activations.
            IsaScope cap(loom::Isa::scalar);
            std::vector<float> capped(packed.size()), capped_scalar(packed.size());
            loom::kernels::linear(p, nullptr, x.data(), cols, n, capped.data(), rows, two);
            loom::kernels::linear_packed_blocks32_scalar(p, x.data(), cols, n, capped_scalar.data(), rows);
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
              CHECK(biased[static_cast<size_t>(t * rows + r)] == packed[static_cast<size_t>(t * rows + r)] + bias[static_cast<size_t>(r)]);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("packed q8_0 and q4_0: the kernels ask for the packing only where the VNNI kernel runs") {
  const bool vnni = loom::best_supported_isa() >= loom::Isa::avx512 && loom::cpu_features().avx512_vnni;
  CHECK(loom::kernels::preferred_packing(DType::q8_0) == (vnni ? Packing::q8_0_x16 : Packing::none));
  CHECK(loom::kernels::preferred_packing(DType::q4_0) == (vnni ? Packing::q4_0_x16 : Packing::none));
  CHECK(loom::kernels::preferred_packing(DType::f16) == Packing::none);
  CHECK(loom::kernels::preferred_packing(DType::q5_k) == Packing::none);
  CHECK(loom::kernels::preferred_packing(DType::q4_1) == Packing::none);
  IsaScope cap(loom::Isa::avx2);
  CHECK(loom::kernels::preferred_packing(DType::q8_0) == Packing::none);
  CHECK(loom::kernels::preferred_packing(DType::q4_0) == Packing::none);
  CHECK_FALSE(loom::kernels::packed_vnni_native());
}
