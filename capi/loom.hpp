// loom.hpp — std::unique_ptr ownership for the C API's handles, for C++ hosts that link
// the shared library (libloom.so exports only the C ABI). Header-only; every deleter
// calls the matching loom_*_free, which accepts NULL.
//
//   loom::c::model_ptr model = loom::c::load_model("path/to/model");   // throws on error
//   loom::c::session_ptr session = loom::c::make_session(model.get());
#ifndef LOOM_HPP
#define LOOM_HPP

#include <memory>
#include <stdexcept>
#include <string>

#include "loom.h"

namespace loom::c {

struct model_deleter { void operator()(loom_model* p) const noexcept { loom_model_free(p); } };
struct tokenizer_deleter { void operator()(loom_tokenizer* p) const noexcept { loom_tokenizer_free(p); } };
struct session_deleter { void operator()(loom_session* p) const noexcept { loom_session_free(p); } };
struct sampler_deleter { void operator()(loom_sampler* p) const noexcept { loom_sampler_free(p); } };
struct error_deleter { void operator()(loom_error* p) const noexcept { loom_error_free(p); } };

using model_ptr = std::unique_ptr<loom_model, model_deleter>;
using tokenizer_ptr = std::unique_ptr<loom_tokenizer, tokenizer_deleter>;
using session_ptr = std::unique_ptr<loom_session, session_deleter>;
using sampler_ptr = std::unique_ptr<loom_sampler, sampler_deleter>;
using error_ptr = std::unique_ptr<loom_error, error_deleter>;

// Thrown by the helpers below: the status and the full message of the loom_error.
class error : public std::runtime_error {
 public:
  error(loom_status status, const std::string& message) : std::runtime_error(message), status_(status) {}
  loom_status status() const noexcept { return status_; }

 private:
  loom_status status_;
};

// Takes ownership of `raw`. (Call the C function first and pass its error afterwards:
// evaluating both in one argument list would read `err` before the call fills it.)
inline void check(loom_status status, loom_error* raw) {
  error_ptr err(raw);
  if (status != LOOM_OK) {
    throw error(status, err ? loom_error_message(err.get()) : loom_status_str(status));
  }
}

inline model_ptr load_model(const char* path, const loom_load_params* params = nullptr) {
  loom_model* m = nullptr;
  loom_error* err = nullptr;
  const loom_status status = loom_model_load(path, params, &m, &err);
  check(status, err);
  return model_ptr(m);
}

inline tokenizer_ptr model_tokenizer(const loom_model* model) {
  loom_tokenizer* t = nullptr;
  loom_error* err = nullptr;
  const loom_status status = loom_model_tokenizer(model, &t, &err);
  check(status, err);
  return tokenizer_ptr(t);
}

inline session_ptr make_session(const loom_model* model, const loom_session_params* params = nullptr) {
  loom_session* s = nullptr;
  loom_error* err = nullptr;
  const loom_status status = loom_session_create(model, params, &s, &err);
  check(status, err);
  return session_ptr(s);
}

inline sampler_ptr make_sampler(const loom_sampler_params* params = nullptr) {
  loom_sampler* s = nullptr;
  loom_error* err = nullptr;
  const loom_status status = loom_sampler_create(params, &s, &err);
  check(status, err);
  return sampler_ptr(s);
}

// ---- chat templates ----

// Renders a chat template (nullptr: the model's own) over `messages_json`, a JSON array
// of message objects; throws loom::c::error (LOOM_ERR_TEMPLATE for the template's errors).
inline std::string apply_chat_template(const loom_model* model, const char* template_source,
                                       const std::string& messages_json,
                                       const loom_chat_template_params* params = nullptr) {
  size_t len = 0;
  loom_error* err = nullptr;
  loom_status status = loom_chat_apply_template_json(model, template_source, messages_json.c_str(), params,
                                                     nullptr, 0, &len, &err);
  check(status, err);
  std::string out(len + 1, '\0');
  status = loom_chat_apply_template_json(model, template_source, messages_json.c_str(), params, out.data(),
                                         out.size(), &len, &err);
  check(status, err);
  out.resize(len);
  return out;
}

}  // namespace loom::c

#endif  // LOOM_HPP
