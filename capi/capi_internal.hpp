// Internal to the C API: the structs behind the opaque handles, and the guard that turns
// every C++ exception into a loom_status (+ loom_error) at the boundary.
#pragma once

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "loom.h"
#include "loom/error.hpp"
#include "loom/generate.hpp"
#include "loom/manifest.hpp"
#include "loom/model.hpp"
#include "loom/sampler.hpp"
#include "loom/session.hpp"
#include "loom/tokenizer.hpp"

struct loom_model {
  std::shared_ptr<const loom::Model> model;
  // Conversion workers it was loaded with (loom_load_params.n_threads): its draft copies
  // quantize on as many.
  int32_t conversion_threads = 2;
};

struct loom_tokenizer {
  std::shared_ptr<const loom::Tokenizer> tokenizer;
};

struct loom_session {
  std::unique_ptr<loom::Session> session;
};

struct loom_sampler {
  std::unique_ptr<loom::Sampler> sampler;
};

struct loom_error {
  loom_status status = LOOM_ERR_INTERNAL;
  std::string message;
  std::string file;
  std::string tensor;
  int64_t offset = -1;
  std::vector<loom::ManifestProblem> problems;
};

namespace loom::capi {

// The two exported initializers of a params or result struct T, from `fill` (which
// writes a whole T of defaults):
//   NAME_sized(p, size): the caller's struct is `size` bytes (the header's NAME(p) macro
//     passes sizeof *p): those bytes are zeroed, the first min(size, sizeof(T)) get the
//     defaults, and struct_size says how many the library knows of;
//   NAME(p): the symbol of loom 0.1, for binaries built before the sized form. It may
//     assume only the size T had in 0.1, which is all of today's T. FROZEN: when a field
//     is appended to T, replace sizeof(T) below by offsetof(T, first appended field) in
//     that struct's definition site (never more than an old caller's struct holds).
// An initializer that wrote sizeof(T) bytes for every caller overran the struct of a
// host compiled against an older, smaller header, the one case struct_size exists for.
template <typename T>
void init_sized(T* p, size_t size, void (*fill)(T*)) {
  if (p == nullptr || size < sizeof(uint32_t)) return;
  T full;
  fill(&full);
  const size_t n = std::min(size, sizeof(T));
  std::memset(static_cast<void*>(p), 0, size);
  std::memcpy(static_cast<void*>(p), static_cast<const void*>(&full), n);
  p->struct_size = static_cast<uint32_t>(n);
}

#define LOOM_CAPI_DEFINE_INIT(T, NAME, FILL)                                                   \
  LOOM_API void NAME##_sized(T* p, size_t size) { loom::capi::init_sized<T>(p, size, FILL); } \
  LOOM_API void(NAME)(T * p) { loom::capi::init_sized<T>(p, sizeof(T), FILL); }

// Reads a caller's params struct: defaults from `init` (a NAME_sized initializer), then
// at most struct_size bytes of the caller's (older callers pass smaller structs, newer
// ones larger).
template <typename T>
T read_params(const T* p, void (*init)(T*, size_t)) {
  T out;
  init(&out, sizeof(T));
  if (p != nullptr && p->struct_size >= sizeof(uint32_t)) {
    const size_t n = std::min<size_t>(p->struct_size, sizeof(T));
    std::memcpy(static_cast<void*>(&out), static_cast<const void*>(p), n);
  }
  out.struct_size = sizeof(T);
  return out;
}

// Writes a filled result into a caller's struct, at most its struct_size bytes, keeping
// the caller's struct_size.
template <typename T>
void write_result(T* dst, const T& src) {
  const uint32_t caller_size = dst->struct_size;
  // A struct_size too small to hold struct_size itself gets nothing: a partial copy
  // would overwrite the low bytes of the caller's own size field.
  if (caller_size < sizeof(uint32_t)) return;
  const size_t n = std::min<size_t>(caller_size, sizeof(T));
  std::memcpy(static_cast<void*>(dst), static_cast<const void*>(&src), n);
  dst->struct_size = caller_size;
}

loom_status status_of(ErrorCode code) noexcept;

// The C generate params as the C++ loop's options (stop strings copied, the callback
// wrapped); throws Error(invalid_argument) for a negative max_tokens or NULL strings.
GenerateOptions generate_options(const loom_generate_params& p);
int32_t stop_to_c(StopReason reason);
loom_status store_error(loom_error** err, loom_status status, std::string message,
                        const ErrorContext* context = nullptr,
                        const std::vector<ManifestProblem>* problems = nullptr) noexcept;

// Runs f(); maps every exception to a status and, when err != NULL, an error object.
template <typename F>
loom_status guard(loom_error** err, F&& f) noexcept {
  if (err != nullptr) *err = nullptr;
  try {
    f();
    return LOOM_OK;
  } catch (const ManifestError& e) {
    return store_error(err, status_of(e.code()), e.what(), &e.context(), &e.problems());
  } catch (const Error& e) {
    return store_error(err, status_of(e.code()), e.what(), &e.context());
  } catch (const std::bad_alloc&) {
    return store_error(err, LOOM_ERR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return store_error(err, LOOM_ERR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return store_error(err, LOOM_ERR_INTERNAL, "internal error: unknown exception");
  }
}

// Throws Error(invalid_argument) naming the argument when p is NULL.
inline void require(const void* p, const char* what) {
  if (p == nullptr) throw Error(ErrorCode::invalid_argument, std::string(what) + " is NULL");
}

// The KV cache entry type a params struct names (LOOM_DTYPE_F32 or LOOM_DTYPE_F16);
// anything else is Error(invalid_argument).
inline DType kv_dtype_from_c(int32_t kv_dtype) {
  if (kv_dtype == LOOM_DTYPE_F32) return DType::f32;
  if (kv_dtype == LOOM_DTYPE_F16) return DType::f16;
  throw Error(ErrorCode::invalid_argument, "kv_dtype must be LOOM_DTYPE_F32 or LOOM_DTYPE_F16");
}

// Copies `data` into a caller buffer; `needed` gets the full size. Returns
// LOOM_ERR_BUFFER_TOO_SMALL (through an Error) when it does not fit.
void copy_out_string(const std::string& data, char* buf, size_t cap, size_t* len);
template <typename T>
void copy_out_array(const std::vector<T>& data, T* buf, size_t cap, size_t* n) {
  require(n, "size output");
  *n = data.size();
  if (buf == nullptr) return;
  if (cap < data.size()) {
    throw Error(ErrorCode::buffer_too_small,
                "buffer of " + std::to_string(cap) + " elements is too small for " +
                    std::to_string(data.size()));
  }
  std::copy(data.begin(), data.end(), buf);
}

}  // namespace loom::capi
