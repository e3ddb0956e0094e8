// The byte-order suspicion check: classify each sampled value's exponent as stored and
// with its bytes reversed.
#include "tensor/byte_order.hpp"

#include <algorithm>
#include <array>
#include <cstring>

namespace loom {

namespace {

// The IEEE-style layout of each checked dtype and the band of unbiased exponents a
// weight plausibly has. f32/f64/bf16: 2^-40 (~1e-12) up to below 2^20 (~1e6); f16, whose
// whole range is 2^-24..65504, only its normal values below 256 (a swapped f16 value's
// exponent field is close to uniform over 0..31, so about a third land outside).
struct FloatLayout {
  DType dtype;
  int bytes;
  int mantissa_bits;
  int exponent_bits;
  int bias;
  int min_exp;
  int max_exp;
  std::string_view band;
};

constexpr std::array<FloatLayout, 4> kLayouts{{
    {DType::f32, 4, 23, 8, 127, -40, 19, "NaN, Inf, subnormal, below 1e-12 or above 1e6 in magnitude"},
    {DType::f64, 8, 52, 11, 1023, -40, 19, "NaN, Inf, subnormal, below 1e-12 or above 1e6 in magnitude"},
    {DType::bf16, 2, 7, 8, 127, -40, 19, "NaN, Inf, subnormal, below 1e-12 or above 1e6 in magnitude"},
    {DType::f16, 2, 10, 5, 15, -14, 7, "NaN, Inf, subnormal or 256 and above in magnitude"},
}};

const FloatLayout* layout_of(DType dtype) noexcept {
  for (const auto& l : kLayouts) {
    if (l.dtype == dtype) return &l;
  }
  return nullptr;
}

// The value's bits as an unsigned integer (host order in, host order out).
uint64_t bits_of(const std::byte* p, int bytes, bool swapped) noexcept {
  std::array<std::byte, 8> b{};
  std::memcpy(b.data(), p, static_cast<size_t>(bytes));
  if (swapped) std::reverse(b.begin(), b.begin() + bytes);
  switch (bytes) {
    case 2: {
      uint16_t v;
      std::memcpy(&v, b.data(), 2);
      return v;
    }
    case 4: {
      uint32_t v;
      std::memcpy(&v, b.data(), 4);
      return v;
    }
    default: {
      uint64_t v;
      std::memcpy(&v, b.data(), 8);
      return v;
    }
  }
}

bool is_zero(uint64_t bits, const FloatLayout& l) noexcept {
  const int magnitude_bits = l.mantissa_bits + l.exponent_bits;
  return (bits & ((uint64_t{1} << magnitude_bits) - 1)) == 0;
}

bool plausible(uint64_t bits, const FloatLayout& l) noexcept {
  if (is_zero(bits, l)) return true;
  const uint64_t all_ones = (uint64_t{1} << l.exponent_bits) - 1;
  const uint64_t field = (bits >> l.mantissa_bits) & all_ones;
  if (field == 0 || field == all_ones) return false;  // subnormal; NaN or Inf
  const int e = static_cast<int>(field) - l.bias;
  return e >= l.min_exp && e <= l.max_exp;
}

}  // namespace

bool byte_order_checked(DType dtype) noexcept { return layout_of(dtype) != nullptr; }

ByteOrderCheck check_byte_order(std::span<const std::byte> bytes, DType dtype) noexcept {
  ByteOrderCheck out;
  const FloatLayout* l = layout_of(dtype);
  if (l == nullptr) return out;
  out.band = l->band;
  const size_t n = bytes.size() / static_cast<size_t>(l->bytes);
  for (size_t i = 0; i < n; ++i) {
    const std::byte* p = bytes.data() + i * static_cast<size_t>(l->bytes);
    const uint64_t stored = bits_of(p, l->bytes, false);
    if (is_zero(stored, *l)) continue;
    ++out.values;
    if (!plausible(stored, *l)) ++out.implausible;
    if (!plausible(bits_of(p, l->bytes, true), *l)) ++out.implausible_swapped;
  }
  // At least an eighth implausible as stored, and reversing the bytes makes it at
  // least eight times better: real weights score ~0 as stored, swapped ones 30-80%.
  out.suspicious = out.values >= kByteOrderMinValues && out.implausible * 8 >= out.values &&
                   out.implausible_swapped * 8 <= out.implausible;
  return out;
}

std::vector<ByteRun> byte_order_sample_runs(uint64_t nbytes, uint64_t element_size) {
  std::vector<ByteRun> runs;
  if (element_size == 0) return runs;
  const uint64_t elements = nbytes / element_size;
  if (elements == 0) return runs;
  if (elements <= kByteOrderSampleValues) {
    runs.push_back({0, elements * element_size});
    return runs;
  }
  const uint64_t per_run = kByteOrderSampleValues / kByteOrderSampleRuns;
  // Evenly spaced starts, the first at 0, the last run ending at most at the tensor's end.
  const uint64_t step = (elements - per_run) / (kByteOrderSampleRuns - 1);
  for (uint64_t i = 0; i < kByteOrderSampleRuns; ++i) {
    runs.push_back({i * step * element_size, per_run * element_size});
  }
  return runs;
}

}  // namespace loom
