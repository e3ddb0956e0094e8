#include "format/parsed.hpp"

namespace loom::format {

uint64_t tensor_bytes_or_fail(DType dtype, const Shape& shape, const std::string& file,
                              const std::string& tensor) {
  const int64_t numel = numel_or_fail(shape, file, tensor);
  try {
    return static_cast<uint64_t>(dtype_bytes(dtype, numel, shape.row_length()));
  } catch (const Error& e) {
    throw Error(ErrorCode::format, std::string(dtype_name(dtype)) + " tensor of shape " +
                                       shape.to_string() + ": " + e.detail(),
                {.file = file, .tensor = tensor});
  }
}

}  // namespace loom::format
