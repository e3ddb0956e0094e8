// The k-quant packings (q2_k_x16, q3_k_x16, q4_k_x16, q5_k_x16, q6_k_x16) (tensor/packing.hpp) and their products
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
using loom::test::IsaScope;


// The k-quant packings, with the dtype each packs and its packed bytes per row and block.
struct Case {
  DType dtype;
  Packing packing;
  int64_t block_bytes;
};
constexpr Case kCases[] = {
    {DType::q4_k, Packing::q4_k_x16, 148}, {DType::q5_k, Packing::q5_k_x16, 180}, {DType::q6_k, Packing::q6_k_x16, 210},
    {DType::q3_k, Packing::q3_k_x16, 114}, {DType::q2_k, Packing::q2_k_x16, 84}};


}  // namespace

TEST_CASE("packing: the k-quant packings (q2_k_x16 .. q6_k_x16) pack and unpack any bytes exactly, rows padded to whole panels") {
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
        t::check_unpack_rows(w, p);
      }
    }
  }
  CHECK_FALSE(loom::can_pack(Tensor::zeros(loom::Shape{16, 128}, DType::q8_0), Packing::q4_k_x16));
  CHECK_THROWS_AS(loom::pack(Tensor::zeros(loom::Shape{16, 256}, DType::q8_0), Packing::q4_k_x16), loom::Error);
  CHECK(loom::packing_from_name("q4_k_x16") == Packing::q4_k_x16);
  CHECK(loom::packing_from_name("q6_k_x16") == Packing::q6_k_x16);
  CHECK(loom::packing_from_name("q5_k_x16") == Packing::q5_k_x16);
  CHECK(loom::packing_from_name("q3_k_x16") == Packing::q3_k_x16);
  CHECK(loom::packing_from_name("q2_k_x16") == Packing::q2_k_x16);
}

TEST_CASE("packed k-quants (q2_k .. q6_k): products match the row-major kernels and keep one set of bits") {
  std::mt19937 rng(23);
  for (const Case& c : kCases) {
    for (const int64_t rows : {1, 13, 16, 40, 75, 150, 260}) {
      for (const int64_t cols : {256, 1024}) {
        const Tensor w = t::random_quantized(c.dtype, rows, cols, rng);
        t::check_packed_products(w, loom::pack(w, c.packing), rng);
      }
    }
  }
}

TEST_CASE("packed k-quants (q2_k .. q6_k): products of 1 to 4 tokens keep their bits whether the groups start on a line or half a line in") {
  std::mt19937 rng(23);
  for (const Case& c : kCases) {
    for (const int64_t cols : {256, 768, 1024}) {
      t::check_small_tiles_at_offsets(loom::pack(t::random_quantized(c.dtype, 75, cols, rng), c.packing), rng);
    }
  }
}

TEST_CASE("packed k-quants (q2_k .. q6_k): a NaN activation block gives NaN outputs, not garbage") {
  std::mt19937 rng(29);
  loom::ThreadPool two(2);
  for (const Case& c : kCases) {
    INFO(loom::packing_name(c.packing));
    const Tensor p = loom::pack(t::random_quantized(c.dtype, 20, 512, rng), c.packing);
    std::vector<float> x = t::normal_floats(2 * 512, rng);
    x[512 + 300] = std::nanf("");  // token 1, second block
    std::vector<float> y(40);
    loom::kernels::linear(p, nullptr, x.data(), 512, 2, y.data(), 20, two);
    for (int r = 0; r < 20; ++r) {
      CHECK(std::isfinite(y[static_cast<size_t>(r)]));
      CHECK(std::isnan(y[static_cast<size_t>(20 + r)]));
    }
  }
}

TEST_CASE("packed k-quants: the kernels ask for the packing where the VNNI or the AVX2 kernel runs") {
  const DType types[] = {DType::q2_k, DType::q3_k, DType::q4_k, DType::q5_k, DType::q6_k};
  const bool native = loom::active_isa() >= loom::Isa::avx2;
  for (const DType d : types) {
    INFO(loom::dtype_name(d));
    const Packing want = loom::packing_from_name(std::string(loom::dtype_name(d)) + "_x16").value();
    CHECK(loom::kernels::preferred_packing(d) == (native ? want : Packing::none));
  }
  {
    IsaScope cap(loom::Isa::avx2);
    const bool has_avx2 = loom::active_isa() == loom::Isa::avx2;
    for (const DType d : types) {
      INFO(loom::dtype_name(d) << " at AVX2");
      const Packing want = loom::packing_from_name(std::string(loom::dtype_name(d)) + "_x16").value();
      CHECK(loom::kernels::preferred_packing(d) == (has_avx2 ? want : Packing::none));
    }
    CHECK_FALSE(loom::kernels::packed_vnni_native());
  }
  IsaScope cap(loom::Isa::scalar);
  for (const DType d : types) CHECK(loom::kernels::preferred_packing(d) == Packing::none);
}
