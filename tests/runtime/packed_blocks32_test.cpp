// The packings of 32-element runs (q8_0_x16, q4_0_x16, q4_1_x16, q5_0_x16, q5_1_x16,
// gq8_G_x16, gq4_G_x16) (tensor/packing.hpp) and their products
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

// The packings of 32-element runs, with the dtype each packs, its block's columns and
// its packed bytes per row and block (the rows' own).
struct Case {
  DType dtype;
  Packing packing;
  int64_t block_cols;
  int64_t block_bytes;
};
constexpr Case kCases[] = {
    {DType::q8_0, Packing::q8_0_x16, 32, 34},       {DType::q4_0, Packing::q4_0_x16, 32, 18},
    {DType::q4_1, Packing::q4_1_x16, 32, 20},       {DType::q5_0, Packing::q5_0_x16, 32, 22},
    {DType::q5_1, Packing::q5_1_x16, 32, 24},
    {DType::gq8_32, Packing::gq8_32_x16, 32, 34},   {DType::gq8_64, Packing::gq8_64_x16, 64, 66},
    {DType::gq8_128, Packing::gq8_128_x16, 128, 130}, {DType::gq4_32, Packing::gq4_32_x16, 32, 20},
    {DType::gq4_64, Packing::gq4_64_x16, 64, 36},   {DType::gq4_128, Packing::gq4_128_x16, 128, 68},
};

// Column counts for a case: one block, a few, and 1024.
std::vector<int64_t> cols_for(const Case& c) { return {c.block_cols, 5 * c.block_cols, 1024}; }


using loom::test::IsaScope;

}  // namespace

TEST_CASE("packing: 32-element-run packings pack and unpack byte for byte, rows padded to whole panels") {
  std::mt19937 rng(7);
  for (const Case& c : kCases) {
    for (const int64_t rows : {1, 15, 16, 17, 33, 64}) {
      for (const int64_t cols : cols_for(c)) {
        INFO(loom::packing_name(c.packing) << ": " << rows << " x " << cols);
        const Tensor w = t::random_quantized(c.dtype, rows, cols, rng);
        REQUIRE(loom::can_pack(w, c.packing));
        const Tensor p = loom::pack(w, c.packing);
        CHECK(p.layout() == loom::Layout::repacked);
        CHECK(p.packing() == c.packing);
        CHECK(p.shape() == w.shape());
        CHECK(p.nbytes() == (rows + 15) / 16 * 16 * (cols / c.block_cols) * c.block_bytes);
        CHECK(p.describe() == std::string(loom::dtype_name(c.dtype)) + w.shape().to_string() + " repacked(" +
                                  std::string(loom::packing_name(c.packing)) + ") cpu");
        const Tensor back = loom::unpack(p);
        CHECK(back.layout() == loom::Layout::row_major);
        REQUIRE(back.nbytes() == w.nbytes());
        CHECK(std::memcmp(back.raw_data(), w.raw_data(), static_cast<size_t>(w.nbytes())) == 0);
        t::check_unpack_rows(w, p);
        const Tensor copied = p.copy();
        CHECK(copied.packing() == c.packing);
        CHECK(std::memcmp(copied.raw_data(), p.raw_data(), static_cast<size_t>(p.nbytes())) == 0);
        // Packed on a pool: the same bytes.
        loom::ThreadPool pool(2);
        const Tensor p2 = loom::pack(w, c.packing, &pool);
        CHECK(std::memcmp(p2.raw_data(), p.raw_data(), static_cast<size_t>(p.nbytes())) == 0);
        // Any bytes come back, also those the kernels ignore (gq4's reserved byte and the
        // zero point's high nibble).
        Tensor any = Tensor::empty(w.shape(), c.dtype);
        auto* bytes = static_cast<uint8_t*>(any.mutable_raw_data());
        for (int64_t i = 0; i < any.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(rng());
        const Tensor any_back = loom::unpack(loom::pack(any, c.packing));
        CHECK(std::memcmp(any_back.raw_data(), any.raw_data(), static_cast<size_t>(any.nbytes())) == 0);
      }
    }
  }
  for (const Case& c : kCases) CHECK(loom::packing_from_name(loom::packing_name(c.packing)) == c.packing);
  CHECK_FALSE(loom::can_pack(Tensor::zeros(loom::Shape{16, 128}, DType::gq8_64), Packing::gq4_64_x16));
  CHECK_FALSE(loom::can_pack(Tensor::zeros(loom::Shape{16, 64}, DType::gq8_64), Packing::gq8_128_x16));
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

TEST_CASE("packed q8_0, q4_0, q4_1, q5_0, q5_1, gq8 and gq4: products match the row-major kernels and keep one set of bits") {
  std::mt19937 rng(9);
  for (const Case& c : kCases) {
    for (const int64_t rows : {1, 13, 16, 40, 75, 150, 260}) {
      for (const int64_t cols : cols_for(c)) {
        const Tensor w = t::random_quantized(c.dtype, rows, cols, rng);
        t::check_packed_products(w, loom::pack(w, c.packing), rng);
      }
    }
  }
}

TEST_CASE("packed 32-element runs: products of 1 to 4 tokens keep their bits whether the runs start on a line or half a line in") {
  std::mt19937 rng(11);
  for (const Case& c : kCases) {
    for (const int64_t cols : {c.block_cols * 5, int64_t{1024}}) {
      t::check_small_tiles_at_offsets(loom::pack(t::random_quantized(c.dtype, 75, cols, rng), c.packing), rng);
    }
  }
}

TEST_CASE("packed 32-element runs: the kernels ask for the packing where the VNNI or the AVX2 kernel runs") {
  const bool native = loom::active_isa() >= loom::Isa::avx2;
  for (const Case& c : kCases) {
    INFO(loom::packing_name(c.packing));
    CHECK(loom::kernels::preferred_packing(c.dtype) == (native ? c.packing : Packing::none));
  }
  {
    IsaScope cap(loom::Isa::avx2);
    const bool has_avx2 = loom::active_isa() == loom::Isa::avx2;
    for (const Case& c : kCases) {
      INFO(loom::packing_name(c.packing) << " at AVX2");
      CHECK(loom::kernels::preferred_packing(c.dtype) == (has_avx2 ? c.packing : Packing::none));
    }
    CHECK_FALSE(loom::kernels::packed_vnni_native());
  }
  IsaScope cap(loom::Isa::scalar);
  for (const Case& c : kCases) CHECK(loom::kernels::preferred_packing(c.dtype) == Packing::none);
}
