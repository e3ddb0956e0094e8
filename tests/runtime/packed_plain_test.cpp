// The plain-dtype packings (f32_x64, f16_x64, bf16_x64; tensor/packing.hpp) and their
// broadcast products (runtime/kernels/packed_plain.hpp): where each element goes, byte-
// exact round trips with padded panels, the summation order the header promises (one
// std::fma chain per output over k from +0, checked against a loop written here), one set
// of bits whatever the kernel family, batch, thread count or bias, and when the runtime
// asks for these packings.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "loom/convert.hpp"
#include "loom/cpu.hpp"
#include "loom/tensor.hpp"
#include "loom/thread_pool.hpp"
#include "runtime/kernels/linear.hpp"
#include "runtime/kernels/packed_plain.hpp"
#include "support/packed_products.hpp"
#include "support/test_support.hpp"
#include "tensor/packing.hpp"

namespace t = loom::test;

namespace {

using loom::DType;
using loom::Packing;
using loom::Tensor;

struct Case {
  DType dtype;
  Packing packing;
  int64_t element_bytes;
};
constexpr Case kCases[] = {{DType::f32, Packing::f32_x64, 4},
                           {DType::f16, Packing::f16_x64, 2},
                           {DType::bf16, Packing::bf16_x64, 2}};

// A [rows, cols] matrix of `dtype` from normal(0, 1) values (converted: f16/bf16 round).
Tensor random_plain(DType dtype, int64_t rows, int64_t cols, std::mt19937& rng) {
  const std::vector<float> v = t::normal_floats(rows * cols, rng);
  Tensor out = Tensor::empty(loom::Shape{rows, cols}, dtype);
  loom::convert(DType::f32, v.data(), dtype, out.mutable_raw_data(), v.size());
  return out;
}

}  // namespace

// At every ISA level: AVX2 and up pack eight rows of a group at once (packing_x86.cpp),
// a panel's last rows short of eight and the scalar level one row at a time. Packed into
// a buffer of stale bytes, so a padding row's zeros are pack's own.
TEST_CASE("packing: f32_x64, f16_x64 and bf16_x64 put element (r, k) at 64k + r of its panel, pad with zeros, unpack byte for byte") {
  std::mt19937 rng(11);
  for (const loom::Isa isa : loom::supported_isas()) {
    t::IsaScope cap(isa);
    for (const Case& c : kCases) {
      for (const auto& [rows, cols] :
           {std::pair<int64_t, int64_t>{1, 16}, {7, 32}, {8, 16}, {64, 16}, {71, 48}, {100, 48}, {130, 1040}}) {
        INFO(loom::isa_name(isa) << " " << loom::dtype_name(c.dtype) << " " << rows << " x " << cols);
        const Tensor w = random_plain(c.dtype, rows, cols, rng);
        REQUIRE(loom::can_pack(w, c.packing));
        auto stale = loom::Storage::allocate(static_cast<size_t>(loom::packed_nbytes(c.packing, w.shape()) + 64));
        std::memset(stale->mutable_data(), 0xAB, stale->size());
        const Tensor p = loom::pack_into(w, c.packing, stale, 64, nullptr);
        CHECK(p.packing() == c.packing);
        CHECK(p.layout() == loom::Layout::repacked);
        const int64_t panels = (rows + 63) / 64;
        const int64_t panel_bytes = cols * 64 * c.element_bytes;
        REQUIRE(loom::packed_nbytes(c.packing, w.shape()) == panels * panel_bytes);
        const auto* src = static_cast<const uint8_t*>(w.raw_data());
        const auto* dst = static_cast<const uint8_t*>(p.raw_data());
        bool placed = true, padded = true;
        for (int64_t row = 0; row < panels * 64; ++row) {
          for (int64_t k = 0; k < cols; ++k) {
            const uint8_t* at = dst + (row / 64) * panel_bytes + (64 * k + row % 64) * c.element_bytes;
            if (row < rows) {
              placed = placed && std::memcmp(at, src + (row * cols + k) * c.element_bytes, c.element_bytes) == 0;
            } else {
              for (int64_t b = 0; b < c.element_bytes; ++b) padded = padded && at[b] == 0;
            }
          }
        }
        CHECK(placed);
        CHECK(padded);
        const Tensor back = loom::unpack(p);
        CHECK(back.packing() == Packing::none);
        REQUIRE(back.nbytes() == w.nbytes());
        CHECK(std::memcmp(back.raw_data(), w.raw_data(), w.nbytes()) == 0);
        t::check_unpack_rows(w, p);
      }
      // Rows of whole 16-column blocks only; and only its own dtype.
      CHECK_FALSE(loom::packing_fits(c.packing, c.dtype, loom::Shape{64, 40}));
      CHECK_FALSE(loom::packing_fits(c.packing, c.dtype == DType::f32 ? DType::f16 : DType::f32, loom::Shape{64, 64}));
    }
  }
  CHECK(loom::packing_from_name("f16_x64") == Packing::f16_x64);
  CHECK(loom::packing_name(Packing::bf16_x64) == "bf16_x64");
}

TEST_CASE("packed f32, f16, bf16: each output is one fma chain over k from +0, as written here, at every batch size") {
  std::mt19937 rng(12);
  loom::ThreadPool one(1), two(2);
  for (const Case& c : kCases) {
    // Two panels, the second with 6 rows; eight panels, the last with 24 rows (one
    // thread's AVX-512 decode takes them four at a time, panel i of each quarter: the
    // partial panel among them); nine panels (two rounds of four, then one alone); panels
    // of 4128 columns (f16 and bf16 516 KiB, f32 1 MiB: AVX-512 takes them by runs of
    // columns, the last run partial, each tile resuming its sums from the output); seven
    // panels (AVX-512 takes 1 to 3 tokens two to four panels at a time, and a share's last
    // panels as fewer streams or alone).
    for (const auto& [rows, cols] :
         {std::pair<int64_t, int64_t>{70, 48}, {472, 32}, {576, 32}, {70, 4128}, {430, 96}}) {
      const Tensor w = random_plain(c.dtype, rows, cols, rng);
      const Tensor p = loom::pack(w, c.packing);
      std::vector<float> wf(static_cast<size_t>(rows * cols));
      loom::convert(c.dtype, w.raw_data(), DType::f32, wf.data(), wf.size());
      // 7, 8 and 13 tokens: two and three tiles, which AVX2 runs quarter by quarter (for
      // f16 and bf16 the first tile widening the weights for the others), except over
      // 4128 columns, whose quarter would not stay in L2; 20 tokens: four tiles, a
      // prefill, which AVX-512 takes over 4128 columns by longer runs (f32 512 columns,
      // f16 and bf16 1024: eight and four whole runs, then a partial one).
      for (const int64_t n : {1, 2, 3, 4, 5, 6, 7, 8, 13, 20}) {
        INFO(loom::dtype_name(c.dtype) << " " << rows << " x " << cols << ", " << n << " tokens");
        const std::vector<float> x = t::normal_floats(n * cols, rng);
        // Sentinels after each token's outputs: the padded panel rows must not be written.
        const int64_t ys = rows + 8;
        std::vector<float> expected(static_cast<size_t>(n * ys), -7.0f);
        for (int64_t tk = 0; tk < n; ++tk) {
          for (int64_t r = 0; r < rows; ++r) {
            float acc = 0.0f;
            for (int64_t k = 0; k < cols; ++k) {
              acc = std::fma(wf[static_cast<size_t>(r * cols + k)], x[static_cast<size_t>(tk * cols + k)], acc);
            }
            expected[static_cast<size_t>(tk * ys + r)] = acc;
          }
        }
        // Every ISA level's kernel (AVX-512 and AVX2 where the CPU has them, the scalar
        // family), on one thread and two: the same bits.
        for (const loom::Isa isa : {loom::Isa::avx512, loom::Isa::avx2, loom::Isa::scalar}) {
          if (isa > loom::best_supported_isa()) continue;
          t::IsaScope cap(isa);
          for (loom::ThreadPool* pool : {&one, &two}) {
            INFO("ISA level " << static_cast<int>(isa) << ", " << pool->size() << " thread(s)");
            std::vector<float> y(static_cast<size_t>(n * ys), -7.0f);
            loom::kernels::linear(p, nullptr, x.data(), cols, n, y.data(), ys, *pool);
            CHECK(t::same_bits(y, expected));
          }
        }
      }
    }
  }
}

TEST_CASE("packed f32, f16, bf16: products match the row-major kernels and keep one set of bits") {
  std::mt19937 rng(13);
  for (const Case& c : kCases) {
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{64, 16}, {100, 48}, {130, 1040}, {3, 32}}) {
      const Tensor w = random_plain(c.dtype, rows, cols, rng);
      t::check_packed_products(w, loom::pack(w, c.packing), rng);
    }
  }
}

TEST_CASE("packed f32, f16, bf16: the kernels ask for the packing where an AVX-512 or AVX2 kernel runs") {
  for (const Case& c : kCases) {
    const bool native = loom::active_isa() >= loom::Isa::avx2;
    CHECK(loom::kernels::preferred_packing(c.dtype) == (native ? c.packing : Packing::none));
  }
  {
    t::IsaScope cap(loom::Isa::avx2);
    const bool native = loom::active_isa() >= loom::Isa::avx2;  // the cap, or a CPU without AVX2
    for (const Case& c : kCases) {
      CHECK(loom::kernels::preferred_packing(c.dtype) == (native ? c.packing : Packing::none));
    }
  }
  t::IsaScope cap(loom::Isa::scalar);
  for (const Case& c : kCases) CHECK(loom::kernels::preferred_packing(c.dtype) == Packing::none);
  CHECK_FALSE(loom::kernels::packed_plain_native());
}
