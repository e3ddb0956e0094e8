// Status names, error objects and the buffer helpers of the C API.
#include <array>

#include "capi_internal.hpp"

namespace loom::capi {

loom_status status_of(ErrorCode code) noexcept {
  // loom_status values mirror loom::ErrorCode one for one (both are append-only).
  return static_cast<loom_status>(code);
}

loom_status store_error(loom_error** err, loom_status status, std::string message,
                        const ErrorContext* context,
                        const std::vector<ManifestProblem>* problems) noexcept {
  if (err == nullptr) return status;
  try {
    auto e = std::make_unique<loom_error>();
    e->status = status;
    e->message = std::move(message);
    if (context != nullptr) {
      e->file = context->file;
      e->tensor = context->tensor;
      e->offset = context->offset ? static_cast<int64_t>(*context->offset) : -1;
    }
    if (problems != nullptr) e->problems = *problems;
    *err = e.release();
  } catch (...) {
    *err = nullptr;  // no memory for the error object: the status still tells
  }
  return status;
}

void copy_out_string(const std::string& data, char* buf, size_t cap, size_t* len) {
  require(len, "length output");
  *len = data.size();
  if (buf == nullptr) return;
  if (cap < data.size() + 1) {
    throw Error(ErrorCode::buffer_too_small,
                "buffer of " + std::to_string(cap) + " bytes is too small for " +
                    std::to_string(data.size() + 1) + " (text and NUL)");
  }
  std::memcpy(buf, data.data(), data.size());
  buf[data.size()] = '\0';
}

}  // namespace loom::capi

namespace {
constexpr std::array<const char*, 16> kStatusNames{
    "ok",           "io",       "format",           "missing_tensor", "shape_mismatch",
    "unsupported",  "out_of_memory", "cancelled",   "invalid_argument", "internal",
    "context_full", "dtype_mismatch", "numeric",    "buffer_too_small", "template",
    "kv_pool_full"};
}  // namespace

extern "C" {

LOOM_API const char* loom_status_str(loom_status status) {
  if (status < 0 || static_cast<size_t>(status) >= kStatusNames.size()) return "unknown";
  return kStatusNames[static_cast<size_t>(status)];
}

LOOM_API const char* loom_error_message(const loom_error* err) {
  return err ? err->message.c_str() : "";
}

LOOM_API loom_status loom_error_status(const loom_error* err) { return err ? err->status : LOOM_OK; }

LOOM_API const char* loom_error_file(const loom_error* err) { return err ? err->file.c_str() : ""; }

LOOM_API const char* loom_error_tensor(const loom_error* err) { return err ? err->tensor.c_str() : ""; }

LOOM_API int64_t loom_error_offset(const loom_error* err) { return err ? err->offset : -1; }

static void fill_problem(loom_problem* p) {
  if (p == nullptr) return;
  std::memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  p->internal_name = p->external_name = p->detail = "";
}
LOOM_CAPI_DEFINE_INIT(loom_problem, loom_problem_init, fill_problem)

LOOM_API size_t loom_error_problem_count(const loom_error* err) { return err ? err->problems.size() : 0; }

LOOM_API loom_status loom_error_problem(const loom_error* err, size_t index, loom_problem* out) {
  if (err == nullptr || out == nullptr || index >= err->problems.size()) return LOOM_ERR_INVALID_ARGUMENT;
  const auto& p = err->problems[index];
  loom_problem full;
  loom_problem_init(&full);
  full.kind = static_cast<int32_t>(p.kind);
  full.internal_name = p.internal_name.c_str();
  full.external_name = p.external_name.c_str();
  full.detail = p.detail.c_str();
  full.expected_rank = p.expected.rank();
  for (int i = 0; i < p.expected.rank(); ++i) full.expected_shape[i] = p.expected[i];
  full.found_rank = p.found.rank();
  for (int i = 0; i < p.found.rank(); ++i) full.found_shape[i] = p.found[i];
  loom::capi::write_result(out, full);
  return LOOM_OK;
}

LOOM_API void loom_error_free(loom_error* err) { delete err; }

}  // extern "C"
