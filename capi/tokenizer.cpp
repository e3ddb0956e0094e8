// C API: tokenizers.
#include "capi_internal.hpp"

using loom::capi::guard;
using loom::capi::require;

extern "C" {

LOOM_API loom_status loom_tokenizer_load(const char* path, loom_tokenizer** out, loom_error** err) {
  if (out != nullptr) *out = nullptr;
  return guard(err, [&] {
    require(path, "path");
    require(out, "output tokenizer pointer");
    auto handle = std::make_unique<loom_tokenizer>();
    handle->tokenizer = loom::Tokenizer::load(path);
    *out = handle.release();
  });
}

LOOM_API loom_status loom_model_tokenizer(const loom_model* model, loom_tokenizer** out, loom_error** err) {
  if (out != nullptr) *out = nullptr;
  return guard(err, [&] {
    require(model, "model");
    require(out, "output tokenizer pointer");
    if (!model->model->tokenizer()) {
      throw loom::Error(loom::ErrorCode::unsupported, "the model was loaded without a tokenizer");
    }
    auto handle = std::make_unique<loom_tokenizer>();
    handle->tokenizer = model->model->tokenizer();
    *out = handle.release();
  });
}

LOOM_API void loom_tokenizer_free(loom_tokenizer* tok) { delete tok; }

LOOM_API int32_t loom_tokenizer_vocab_size(const loom_tokenizer* tok) {
  return tok ? tok->tokenizer->vocab_size() : 0;
}

LOOM_API loom_status loom_tokenize(const loom_tokenizer* tok, const char* text, size_t len, uint32_t flags,
                                   int32_t* ids, size_t cap, size_t* n_ids, loom_error** err) {
  return guard(err, [&] {
    require(tok, "tokenizer");
    if (len > 0) require(text, "text");
    const auto out = tok->tokenizer->encode(std::string_view(text ? text : "", len),
                                            (flags & LOOM_TOKENIZE_ADD_SPECIAL) != 0,
                                            (flags & LOOM_TOKENIZE_PARSE_SPECIAL) != 0);
    loom::capi::copy_out_array(out, ids, cap, n_ids);
  });
}

LOOM_API loom_status loom_detokenize(const loom_tokenizer* tok, const int32_t* ids, size_t n_ids,
                                     uint32_t flags, char* buf, size_t cap, size_t* len, loom_error** err) {
  return guard(err, [&] {
    require(tok, "tokenizer");
    if (n_ids > 0) require(ids, "ids");
    const auto text = tok->tokenizer->decode(std::span<const int32_t>(ids, n_ids),
                                             (flags & LOOM_DETOKENIZE_SKIP_SPECIAL) != 0);
    loom::capi::copy_out_string(text, buf, cap, len);
  });
}

LOOM_API loom_status loom_token_piece(const loom_tokenizer* tok, int32_t id, char* buf, size_t cap,
                                      size_t* len, loom_error** err) {
  return guard(err, [&] {
    require(tok, "tokenizer");
    loom::capi::copy_out_string(tok->tokenizer->token_to_piece(id), buf, cap, len);
  });
}

}  // extern "C"
