// Internal: what a per-format parser hands back, and helpers they share.
#pragma once

#include <string>
#include <vector>

#include "loom/error.hpp"
#include "loom/format.hpp"

namespace loom::format {

// Tensors of one file (file_index 0) and the file's metadata.
struct ParsedWeights {
  std::vector<TensorRecord> tensors;
  Metadata metadata;
};

// a * b for sizes read from a file; overflow is a format error naming the tensor.
inline uint64_t mul_or_fail(uint64_t a, uint64_t b, const std::string& file,
                            const std::string& tensor) {
  uint64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) {
    throw Error(ErrorCode::format,
                "size overflow: " + std::to_string(a) + " * " + std::to_string(b), {.file = file, .tensor = tensor});
  }
  return out;
}

inline uint64_t add_or_fail(uint64_t a, uint64_t b, const std::string& file,
                            const std::string& tensor) {
  uint64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) {
    throw Error(ErrorCode::format,
                "size overflow: " + std::to_string(a) + " + " + std::to_string(b), {.file = file, .tensor = tensor});
  }
  return out;
}

// Product of extents (all >= 0), overflow-checked into int64.
inline int64_t numel_or_fail(const Shape& shape, const std::string& file, const std::string& tensor) {
  int64_t n = 1;
  for (int64_t d : shape.dims()) {
    if (__builtin_mul_overflow(n, d, &n)) {
      throw Error(ErrorCode::format, "element count of shape " + shape.to_string() + " overflows",
                  {.file = file, .tensor = tensor});
    }
  }
  return n;
}

// Bytes a contiguous tensor of `dtype` and `shape` occupies; quantized rows must hold
// whole blocks. Errors are format errors naming the tensor.
uint64_t tensor_bytes_or_fail(DType dtype, const Shape& shape, const std::string& file,
                              const std::string& tensor);

}  // namespace loom::format
