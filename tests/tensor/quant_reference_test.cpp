// Block formats against llama.cpp's own files (../shared/reference/models/small-quant):
// our dequantization of llama-quantize's blocks reproduces gguf-py's dequantized values
// bit for bit, and our quantizers, fed the same f32 weights, land within 5% of
// llama-quantize's RMSE — in fact they write the very same bytes.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "loom/dtype.hpp"
#include "loom/format.hpp"
#include "support/test_support.hpp"
#include "tensor/quant/quant.hpp"
#include "tensor/quant_test_support.hpp"

using loom::DType;

namespace {

// blk.0.ffn_down.weight (ggml ne = [768, 256], i.e. 256 rows of 768) of each small-quant
// GGUF, located by loom's GGUF reader (open_weights) and read from the real file.
struct TensorInFile {
  const char* type;
  DType dtype;
  const char* file;
};
constexpr const char* kTensor = "blk.0.ffn_down.weight";
constexpr int64_t kRows = 256;
constexpr int64_t kCols = 768;
constexpr int64_t kElems = kRows * kCols;
constexpr TensorInFile kF32 = {"f32", DType::f32, "small-quant-f32.gguf"};
constexpr TensorInFile kQuantized[] = {
    {"q8_0", DType::q8_0, "small-quant-q8_0.gguf"},
    {"q4_0", DType::q4_0, "small-quant-q4_0.gguf"},
    {"q4_k", DType::q4_k, "small-quant-q4_k.gguf"},
    {"q6_k", DType::q6_k, "small-quant-q6_k.gguf"},
};

// The tensor's raw bytes (blocks, for the quantized files), after checking its dtype and
// shape.
std::vector<uint8_t> tensor_bytes(const std::filesystem::path& path, DType dtype) {
  const auto source = loom::open_weights(path);
  const loom::TensorRecord* record = source->find(kTensor);
  REQUIRE(record != nullptr);
  REQUIRE(record->dtype == dtype);
  REQUIRE(record->shape == loom::Shape{kRows, kCols});
  REQUIRE(record->nbytes == static_cast<uint64_t>(loom::dtype_bytes(dtype, kElems, kCols)));
  std::vector<uint8_t> out(record->nbytes);
  source->read(*record, 0, std::as_writable_bytes(std::span(out)));
  return out;
}

// One float per line after '#' header lines (%.9g, so f32 values round-trip).
std::vector<float> read_values(const std::filesystem::path& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::vector<float> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    out.push_back(std::strtof(line.c_str(), nullptr));
  }
  return out;
}

std::vector<float> floats_of(const std::vector<uint8_t>& bytes) {
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

double rmse(const float* a, const float* b, size_t n) {
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += (static_cast<double>(a[i]) - b[i]) * (a[i] - b[i]);
  return std::sqrt(sum / static_cast<double>(n));
}

size_t bit_mismatches(const std::vector<float>& a, const float* b, size_t n) {
  size_t count = 0;
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) ++count;
  }
  return count;
}

}  // namespace

TEST_CASE("dequantizing llama.cpp's blocks reproduces gguf-py's values bit for bit") {
  LOOM_REQUIRE_REFERENCE(ref);
  const auto dir = ref / "models" / "small-quant";
  for (const auto& t : kQuantized) {
    INFO(t.type);
    const auto blocks = tensor_bytes(dir / t.file, t.dtype);
    const auto expected =
        read_values(dir / "dequant" / (std::string("blk.0.ffn_down.weight.") + t.type + ".txt"));
    REQUIRE(expected.size() == 4096);
    std::vector<float> ours(kElems);
    REQUIRE(loom::quant::dequantize(t.dtype, blocks.data(), ours.data(), ours.size()));
    CHECK(bit_mismatches(expected, ours.data(), expected.size()) == 0);
  }
}

TEST_CASE("our quantizers match llama-quantize's error on the same weights") {
  LOOM_REQUIRE_REFERENCE(ref);
  const auto dir = ref / "models" / "small-quant";
  const auto original = floats_of(tensor_bytes(dir / kF32.file, DType::f32));
  const auto original_txt = read_values(dir / "dequant" / "blk.0.ffn_down.weight.f32.txt");
  REQUIRE(original_txt.size() == 4096);
  REQUIRE(bit_mismatches(original_txt, original.data(), 4096) == 0);

  std::printf(
      "\nRMSE on blk.0.ffn_down.weight of small-quant (%lld values; first 4096 in brackets)\n",
      static_cast<long long>(kElems));
  std::printf("%-5s %12s %12s %8s %22s\n", "type", "llama.cpp", "loom", "ratio",
              "identical blocks");
  for (const auto& t : kQuantized) {
    INFO(t.type);
    const auto theirs_blocks = tensor_bytes(dir / t.file, t.dtype);
    std::vector<uint8_t> ours_blocks(theirs_blocks.size());
    loom::quant::quantize(t.dtype, original.data(), ours_blocks.data(), original.size());

    std::vector<float> theirs(kElems);
    std::vector<float> ours(kElems);
    REQUIRE(loom::quant::dequantize(t.dtype, theirs_blocks.data(), theirs.data(), theirs.size()));
    REQUIRE(loom::quant::dequantize(t.dtype, ours_blocks.data(), ours.data(), ours.size()));
    const double rmse_theirs = rmse(theirs.data(), original.data(), theirs.size());
    const double rmse_ours = rmse(ours.data(), original.data(), ours.size());
    const double rmse_theirs_4096 = rmse(theirs.data(), original.data(), 4096);
    const double rmse_ours_4096 = rmse(ours.data(), original.data(), 4096);

    const auto& traits = loom::dtype_traits(t.dtype);
    const size_t nblocks = theirs_blocks.size() / static_cast<size_t>(traits.block_bytes);
    size_t same = 0;
    for (size_t b = 0; b < nblocks; ++b) {
      const size_t at = b * static_cast<size_t>(traits.block_bytes);
      same += std::memcmp(theirs_blocks.data() + at, ours_blocks.data() + at,
                          static_cast<size_t>(traits.block_bytes)) == 0;
    }
    std::printf("%-5s %12.6g %12.6g %8.4f %12zu / %-7zu  [%.6g vs %.6g]\n", t.type, rmse_theirs,
                rmse_ours, rmse_ours / rmse_theirs, same, nblocks, rmse_theirs_4096,
                rmse_ours_4096);
    CHECK(rmse_ours <= 1.05 * rmse_theirs);
    CHECK(rmse_ours_4096 <= 1.05 * rmse_theirs_4096);
    // Same algorithm, same unfused f32 operations: every block comes out byte-identical.
    CHECK(same == nblocks);
  }
}

TEST_CASE("RMSE of our quantizers on a Gaussian matrix vs llama-quantize's on the reference one") {
  // small-quant's weights are N(0, 0.05) draws (numpy, seed 777). The same figure —
  // RMSE relative to the data's standard deviation — computed on our own N(0, 0.05)
  // matrix of the same shape must land within 5% of llama.cpp's.
  LOOM_REQUIRE_REFERENCE(ref);
  const auto dir = ref / "models" / "small-quant";
  const auto original = floats_of(tensor_bytes(dir / kF32.file, DType::f32));
  double sum2 = 0;
  for (float v : original) sum2 += static_cast<double>(v) * v;
  const double ref_std = std::sqrt(sum2 / static_cast<double>(original.size()));
  REQUIRE(ref_std == Approx(0.05).epsilon(0.01));
  const auto gaussian = loom::test::quant::gaussian(static_cast<size_t>(kElems), 777, 0.05f);
  double gsum2 = 0;
  for (float v : gaussian) gsum2 += static_cast<double>(v) * v;
  const double our_std = std::sqrt(gsum2 / static_cast<double>(gaussian.size()));

  std::printf(
      "\nRMSE / stddev, Gaussian 256x768: llama.cpp (reference file) vs loom (own matrix)\n");
  for (const auto& t : kQuantized) {
    INFO(t.type);
    const auto theirs_blocks = tensor_bytes(dir / t.file, t.dtype);
    std::vector<float> theirs(kElems);
    REQUIRE(loom::quant::dequantize(t.dtype, theirs_blocks.data(), theirs.data(), theirs.size()));
    const double theirs_rel = rmse(theirs.data(), original.data(), theirs.size()) / ref_std;

    std::vector<uint8_t> ours_blocks(theirs_blocks.size());
    loom::quant::quantize(t.dtype, gaussian.data(), ours_blocks.data(), gaussian.size());
    std::vector<float> ours(kElems);
    REQUIRE(loom::quant::dequantize(t.dtype, ours_blocks.data(), ours.data(), ours.size()));
    const double ours_rel = rmse(ours.data(), gaussian.data(), ours.size()) / our_std;
    std::printf("%-5s %.6f %.6f  ratio %.4f\n", t.type, theirs_rel, ours_rel,
                ours_rel / theirs_rel);
    CHECK(ours_rel == Approx(theirs_rel).epsilon(0.05));
  }
}
