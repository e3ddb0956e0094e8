// Internal: does a float tensor look byte-swapped? The loader's "detect suspicious data
// and warn" check (src/model/loader.cpp), on a bounded sample of each tensor's bytes.
//
// Trained weights have exponents in a narrow band; with each value's bytes reversed, the
// low mantissa bits (noise) land in the exponent field, which then spreads over the whole
// range: many values become NaN, Inf, subnormal or absurdly large. So a sample in which a
// large share of the values is implausible, and which becomes plausible once each value's
// bytes are reversed, was most likely written in the other byte order (or swapped by a
// faulty converter). Pure functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "loom/dtype.hpp"

namespace loom {

inline constexpr uint64_t kByteOrderSampleValues = 1024;  // values read per tensor, at most
inline constexpr uint64_t kByteOrderSampleRuns = 4;       // runs they are read in, spread over the tensor
inline constexpr int64_t kByteOrderMinValues = 16;        // nonzero values needed for a verdict

struct ByteOrderCheck {
  int64_t values = 0;              // nonzero values looked at (zero reads the same swapped)
  int64_t implausible = 0;         // as stored
  int64_t implausible_swapped = 0; // with each value's bytes reversed
  bool suspicious = false;
  std::string_view band;           // what "implausible" means for the dtype, for messages
};

// Whether check_byte_order looks at this dtype (f32, f64, f16, bf16).
bool byte_order_checked(DType dtype) noexcept;

// `bytes` holds whole values of `dtype` in host byte order (a trailing partial value is
// ignored). f32, f64, f16 and bf16 are checked; any other dtype gives an empty result.
ByteOrderCheck check_byte_order(std::span<const std::byte> bytes, DType dtype) noexcept;

// Where to sample a tensor of `nbytes` bytes of `element_size`-byte values: up to
// kByteOrderSampleRuns runs of whole values, kByteOrderSampleValues values in all,
// starting at evenly spaced element boundaries. Offsets are within the tensor.
struct ByteRun {
  uint64_t offset = 0;
  uint64_t size = 0;
};
std::vector<ByteRun> byte_order_sample_runs(uint64_t nbytes, uint64_t element_size);

}  // namespace loom
