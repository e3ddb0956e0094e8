// Shared by the libFuzzer harnesses: every parser is run on the raw input as an
// in-memory file. A loom::Error is the expected outcome for bad input; anything else
// escaping (another exception type, a crash, a sanitizer report, a hang) is a bug.
// After a successful parse, every record's bytes are read so that a record pointing
// outside the input shows up as an AddressSanitizer report.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "format/parsed.hpp"
#include "loom/error.hpp"

namespace loom::fuzz {

inline std::span<const std::byte> as_span(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const std::byte*>(data), size};
}

// Touches every byte each record claims; traps when a record lies outside the input.
inline uint64_t touch_records(const format::ParsedWeights& parsed, std::span<const std::byte> input) {
  uint64_t sum = 0;
  for (const auto& r : parsed.tensors) {
    const uint64_t span = r.strides ? r.span_bytes : r.nbytes;
    if (r.offset > input.size() || span > input.size() - r.offset) __builtin_trap();
    for (uint64_t i = 0; i < span; i += 61) sum += static_cast<uint8_t>(input[r.offset + i]);
    if (span) sum += static_cast<uint8_t>(input[r.offset + span - 1]);
  }
  return sum;
}

}  // namespace loom::fuzz
