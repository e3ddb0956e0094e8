// Test helper: what every packed-weight kernel must do, checked for one packed matrix
// against its rows — agree with the row-major kernel within f32 rounding, give the
// scalar family's bits (also with the whole product capped to AVX2 or to the scalar
// family), the
// same bits on one thread, for each token alone (batch invariance), and add a bias once.
// Header-only: it reports through Catch's assertions.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "loom/convert.hpp"
#include "loom/error.hpp"
#include "loom/tensor.hpp"
#include "loom/thread_pool.hpp"
#include "runtime/kernels/linear.hpp"
#include "runtime/kernels/packed_panels.hpp"
#include "tensor/packing.hpp"
#include "support/test_support.hpp"
#include "tensor/quant/quant.hpp"

namespace loom::test {

inline std::vector<float> normal_floats(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& f : x) f = dist(rng);
  return x;
}

// A [rows, cols] matrix of `dtype` quantized from normal(0, 1) values.
inline Tensor random_quantized(DType dtype, int64_t rows, int64_t cols, std::mt19937& rng) {
  const std::vector<float> v = normal_floats(rows * cols, rng);
  Tensor t = Tensor::empty(Shape{rows, cols}, dtype);
  quant::quantize(dtype, v.data(), t.mutable_raw_data(), v.size());
  return t;
}

// `w` row-major, `p` its packed copy: each row read alone (unpack_row, what an embedding
// lookup in a packed tied table does) is w's row byte for byte, also through the
// embedding lookup as f32; rows outside the matrix are refused.
inline void check_unpack_rows(const Tensor& w, const Tensor& p) {
  const int64_t rows = w.shape()[0];
  const int64_t cols = w.shape()[1];
  const auto row_bytes = static_cast<size_t>(dtype_bytes(w.dtype(), cols, cols));
  std::vector<uint8_t> got(row_bytes);
  std::vector<float> from_rows(static_cast<size_t>(cols)), from_panels(static_cast<size_t>(cols));
  bool same = true, same_embedding = true;
  for (int64_t r = 0; r < rows; ++r) {
    std::fill(got.begin(), got.end(), uint8_t{0xA5});
    unpack_row(p, r, got.data());
    same = same && std::memcmp(got.data(), static_cast<const uint8_t*>(w.raw_data()) + r * row_bytes, row_bytes) == 0;
    kernels::embedding_row(w, r, from_rows.data());
    kernels::embedding_row(p, r, from_panels.data());
    same_embedding = same_embedding && std::memcmp(from_rows.data(), from_panels.data(), cols * sizeof(float)) == 0;
  }
  CHECK(same);
  CHECK(same_embedding);
  CHECK_THROWS_AS(unpack_row(p, rows, got.data()), Error);
  CHECK_THROWS_AS(unpack_row(p, -1, got.data()), Error);
  CHECK_THROWS_AS(kernels::embedding_row(p, rows, from_panels.data()), Error);
}

// `w` row-major, `p` its packed copy; products over 1, 2, 3, 5, 8, 11, 13 and 16 random tokens.
inline void check_packed_products(const Tensor& w, const Tensor& p, std::mt19937& rng) {
  const kernels::PackedProducts* products = kernels::packed_products(p.packing());
  REQUIRE(products != nullptr);
  const auto scalar = products->run_scalar;  // the packed product on the scalar family
  ThreadPool one(1), two(2);
  const int64_t rows = w.shape()[0], cols = w.shape()[1];
  std::vector<float> wf(static_cast<size_t>(rows * cols));
  convert(w.dtype(), w.raw_data(), DType::f32, wf.data(), wf.size());
  const std::vector<float> bias = normal_floats(rows, rng);
  Tensor bias_t = Tensor::empty(Shape{rows}, DType::f32);
  std::memcpy(bias_t.mutable_raw_data(), bias.data(), bias.size() * 4);
  auto n_floats = [&](int64_t n) { return std::vector<float>(static_cast<size_t>(n * rows)); };
  for (const int64_t n : {1, 2, 3, 5, 8, 11, 13, 16}) {
    INFO(w.describe() << ", " << n << " tokens");
    const std::vector<float> x = normal_floats(n * cols, rng);
    std::vector<float> row_major = n_floats(n), packed = n_floats(n);
    kernels::linear(w, nullptr, x.data(), cols, n, row_major.data(), rows, two);
    kernels::linear(p, nullptr, x.data(), cols, n, packed.data(), rows, two);
    // The same quantized activations and exact per-block integers, summed in another
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
    std::vector<float> on_scalar = n_floats(n);
    scalar(p, x.data(), cols, n, on_scalar.data(), rows);
    CHECK(same_bits(on_scalar, packed));
    {
      // Capped to scalar, the packed product runs the scalar family end to end (the
      // activations quantized by the scalar quantizer too): the scalar kernel's bits.
      IsaScope cap(Isa::scalar);
      std::vector<float> capped = n_floats(n), capped_scalar = n_floats(n);
      kernels::linear(p, nullptr, x.data(), cols, n, capped.data(), rows, two);
      scalar(p, x.data(), cols, n, capped_scalar.data(), rows);
      CHECK(same_bits(capped, capped_scalar));
    }
    if (best_supported_isa() >= Isa::avx2) {
      // Capped to AVX2 (the AVX2 tiles where the packing has them, else the scalar
      // family): the scalar kernel's bits.
      IsaScope cap(Isa::avx2);
      std::vector<float> capped = n_floats(n), capped_scalar = n_floats(n);
      kernels::linear(p, nullptr, x.data(), cols, n, capped.data(), rows, two);
      scalar(p, x.data(), cols, n, capped_scalar.data(), rows);
      CHECK(same_bits(capped, capped_scalar));
      CHECK(same_bits(capped, packed));
    }
    // One thread: the same bits.
    std::vector<float> single = n_floats(n);
    kernels::linear(p, nullptr, x.data(), cols, n, single.data(), rows, one);
    CHECK(same_bits(single, packed));
    // Batch invariance: each token alone gives its row of the batch.
    for (int64_t t = 0; t < n; ++t) {
      std::vector<float> alone = n_floats(1);
      kernels::linear(p, nullptr, x.data() + t * cols, cols, 1, alone.data(), rows, two);
      CHECK(same_bits(alone, std::span<const float>(packed.data() + t * rows, static_cast<size_t>(rows))));
    }
    // With a bias: the sums plus the bias, each output once.
    std::vector<float> biased = n_floats(n);
    kernels::linear(p, &bias_t, x.data(), cols, n, biased.data(), rows, two);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        const size_t i = static_cast<size_t>(t * rows + r);
        CHECK(biased[i] == packed[i] + bias[static_cast<size_t>(r)]);
      }
    }
  }
}

// Products of 1 to 4 tokens with the packed `p` placed 0, 16, 32 and 48 bytes past a
// 64-byte boundary give the scalar family's bits each time, whatever alignment the
// allocator gave: the byte formats' tiles of up to 4 tokens build vectors that start half
// a line in from the two aligned lines they straddle (straddling_vector,
// runtime/kernels/packed_blocks32.cpp), so the placements take that path, plain loads,
// and panels that disagree (2 tokens on four panels side by side, the others on two).
inline void check_small_tiles_at_offsets(const Tensor& p, std::mt19937& rng) {
  const kernels::PackedProducts* products = kernels::packed_products(p.packing());
  REQUIRE(products != nullptr);
  ThreadPool two(2);
  const int64_t rows = p.shape()[0], cols = p.shape()[1];
  constexpr int64_t kMaxTokens = 4;
  // Token n's activations and the scalar family's outputs, computed once for every placement.
  std::vector<std::vector<float>> xs, references;
  for (int64_t n = 1; n <= kMaxTokens; ++n) {
    xs.push_back(normal_floats(n * cols, rng));
    references.emplace_back(static_cast<size_t>(n * rows));
    products->run_scalar(p, xs.back().data(), cols, n, references.back().data(), rows);
  }
  for (const uint64_t offset : {0, 16, 32, 48}) {
    auto storage = Storage::allocate(static_cast<size_t>(p.nbytes()) + 64);  // 64-byte aligned
    std::memcpy(storage->mutable_data() + offset, p.raw_data(), static_cast<size_t>(p.nbytes()));
    const Tensor moved = Tensor::packed(storage, offset, p.shape(), p.dtype(), p.packing());
    for (int64_t n = 1; n <= kMaxTokens; ++n) {
      INFO(p.describe() << ", " << n << " tokens, panels " << offset << " bytes past a line");
      std::vector<float> y(static_cast<size_t>(n * rows));
      kernels::linear(moved, nullptr, xs[static_cast<size_t>(n - 1)].data(), cols, n, y.data(), rows, two);
      CHECK(same_bits(y, references[static_cast<size_t>(n - 1)]));
    }
  }
}

}  // namespace loom::test
