#include "loom/error.hpp"

#include <array>

namespace loom {

namespace {
struct CodeName {
  ErrorCode code;
  std::string_view name;
};
constexpr std::array kCodeNames{
    CodeName{ErrorCode::io, "io"},
    CodeName{ErrorCode::format, "format"},
    CodeName{ErrorCode::missing_tensor, "missing_tensor"},
    CodeName{ErrorCode::shape_mismatch, "shape_mismatch"},
    CodeName{ErrorCode::unsupported, "unsupported"},
    CodeName{ErrorCode::out_of_memory, "out_of_memory"},
    CodeName{ErrorCode::cancelled, "cancelled"},
    CodeName{ErrorCode::invalid_argument, "invalid_argument"},
    CodeName{ErrorCode::internal, "internal"},
    CodeName{ErrorCode::context_full, "context_full"},
    CodeName{ErrorCode::dtype_mismatch, "dtype_mismatch"},
    CodeName{ErrorCode::numeric, "numeric"},
    CodeName{ErrorCode::buffer_too_small, "buffer_too_small"},
    CodeName{ErrorCode::template_error, "template"},
};
}  // namespace

std::string_view error_code_name(ErrorCode code) noexcept {
  for (const auto& entry : kCodeNames) {
    if (entry.code == code) return entry.name;
  }
  return "unknown";
}

std::string format_error_message(ErrorCode code, std::string_view detail,
                                 const ErrorContext& context) {
  std::string out;
  if (!context.file.empty()) {
    out += "file '" + context.file + "': ";
  }
  if (!context.tensor.empty()) {
    out += "tensor '" + context.tensor + "': ";
  }
  if (context.offset) {
    out += "at byte " + std::to_string(*context.offset) + ": ";
  }
  out += detail;
  out += " [";
  out += error_code_name(code);
  out += "]";
  return out;
}

Error::Error(ErrorCode code, std::string message, ErrorContext context)
    : std::runtime_error(format_error_message(code, message, context)),
      code_(code),
      detail_(std::move(message)),
      context_(std::move(context)) {}

Error Error::with_context(const ErrorContext& outer) const {
  ErrorContext merged = context_;
  if (merged.file.empty()) merged.file = outer.file;
  if (merged.tensor.empty()) merged.tensor = outer.tensor;
  if (!merged.offset) merged.offset = outer.offset;
  return Error(code_, detail_, std::move(merged));
}

}  // namespace loom
