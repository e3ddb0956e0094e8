// Internal: overflow-checked integer arithmetic for sizes read from untrusted files.
#pragma once

#include <cstdint>
#include <string>

#include "loom/error.hpp"

namespace loom {

inline int64_t checked_mul(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) {
    throw Error(ErrorCode::invalid_argument,
                "size overflow: " + std::to_string(a) + " * " + std::to_string(b));
  }
  return out;
}

inline int64_t checked_add(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) {
    throw Error(ErrorCode::invalid_argument,
                "size overflow: " + std::to_string(a) + " + " + std::to_string(b));
  }
  return out;
}

inline uint64_t checked_mul_u64(uint64_t a, uint64_t b) {
  uint64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) {
    throw Error(ErrorCode::invalid_argument,
                "size overflow: " + std::to_string(a) + " * " + std::to_string(b));
  }
  return out;
}

inline uint64_t checked_add_u64(uint64_t a, uint64_t b) {
  uint64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) {
    throw Error(ErrorCode::invalid_argument,
                "size overflow: " + std::to_string(a) + " + " + std::to_string(b));
  }
  return out;
}

}  // namespace loom
