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
#include "support/packed_products.hpp"
#include "support/test_support.hpp"
#include "tensor/packing.hpp"
#include "tensor/quant/quant.hpp"

namespace t = loom::test;

namespace {

using loom::DType;
using loom::Packing;
using loom::Tensor;

Tensor random_q8_0(int64_t rows, int64_t cols, std::mt19937& rng) { return t::random_quantized(DType::q8_0, rows, cols, rng); }

// The two packings of 32-element blocks, with the dtype each packs.
struct Case {
  DType dtype;
  Packing packing;
  int64_t block_bytes;
};
constexpr Case kCases[] = {{DType::q8_0, Packing::q8_0_x16, 34}, {DType::q4_0, Packing::q4_0_x16, 18}};


using loom::test::IsaScope;

}  // namespace

TEST_CASE("packing: q8_0_x16 and q4_0_x16 pack and unpack byte for byte, rows padded to whole panels") {
  std::mt19937 rng(7);
  for (const Case& c : kCases) {
    for (const int64_t rows : {1, 15, 16, 17, 33, 64}) {
      for (const int64_t cols : {32, 96, 256}) {
        INFO(loom::packing_name(c.packing) << ": " << rows << " x " << cols);
        const Tensor w = t::random_quantized(c.dtype, rows, cols, rng);
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
  for (const Case& c : kCases) {
    for (const int64_t rows : {1, 13, 16, 40, 75}) {
      for (const int64_t cols : {32, 160, 1024}) {
        const Tensor w = t::random_quantized(c.dtype, rows, cols, rng);
        t::check_packed_products(w, loom::pack(w, c.packing), loom::kernels::linear_packed_blocks32_scalar, rng);
      }
    }
  }
}

TEST_CASE("packed q8_0 and q4_0: the kernels ask for the packing only where the VNNI kernel runs") {
  const bool vnni = loom::best_supported_isa() >= loom::Isa::avx512 && loom::cpu_features().avx512_vnni;
  CHECK(loom::kernels::preferred_packing(DType::q8_0) == (vnni ? Packing::q8_0_x16 : Packing::none));
  CHECK(loom::kernels::preferred_packing(DType::q4_0) == (vnni ? Packing::q4_0_x16 : Packing::none));
  CHECK(loom::kernels::preferred_packing(DType::f16) == Packing::none);
  CHECK(loom::kernels::preferred_packing(DType::q5_0) == Packing::none);
  CHECK(loom::kernels::preferred_packing(DType::q4_1) == Packing::none);
  IsaScope cap(loom::Isa::avx2);
  CHECK(loom::kernels::preferred_packing(DType::q8_0) == Packing::none);
  CHECK(loom::kernels::preferred_packing(DType::q4_0) == Packing::none);
  CHECK_FALSE(loom::kernels::packed_vnni_native());
}
