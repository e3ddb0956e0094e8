// loom::Error — the one exception type the C++ layer throws.
//
// Every failure carries a code (what kind of failure, stable across releases) and a
// context (which file, which tensor, which byte offset) so that the message a user
// sees names the thing that was wrong. The C API turns these into loom_status codes
// and loom_error objects; no exception ever crosses that boundary.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace loom {

// Values are part of the C ABI (loom_status mirrors them): never renumber.
enum class ErrorCode : int32_t {
  io = 1,
  format = 2,
  missing_tensor = 3,
  shape_mismatch = 4,
  unsupported = 5,
  out_of_memory = 6,
  cancelled = 7,
  invalid_argument = 8,
  internal = 9,
  context_full = 10,
  dtype_mismatch = 11,
  numeric = 12,  // NaN/Inf where a finite value is required
  buffer_too_small = 13,  // a caller's output buffer cannot hold the result
  template_error = 14,    // a chat template failed to parse or raised an error
};

std::string_view error_code_name(ErrorCode code) noexcept;

// Where a problem was found. Every field is optional; what is known is printed.
struct ErrorContext {
  std::string file;
  std::string tensor;
  std::optional<uint64_t> offset;  // byte offset in `file`
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, std::string message, ErrorContext context = {});

  ErrorCode code() const noexcept { return code_; }
  // The message without context, e.g. "header length exceeds file size".
  const std::string& detail() const noexcept { return detail_; }
  const ErrorContext& context() const noexcept { return context_; }

  // Returns a copy with context fields filled in where they were empty; used by
  // outer layers that know the file while inner parsers only know the offset.
  Error with_context(const ErrorContext& outer) const;

 private:
  ErrorCode code_;
  std::string detail_;
  ErrorContext context_;
};

// Formats "file 'a': tensor 'b': at byte 12: message" from the known parts.
std::string format_error_message(ErrorCode code, std::string_view detail,
                                 const ErrorContext& context);

}  // namespace loom
