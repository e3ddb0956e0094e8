// The C API under abuse: every function in capi/loom.h with NULL for each pointer, zero
// sizes, out-of-range ids and enums, params structs whose struct_size is 0, tiny or far
// larger than the library's, and calls after a failed load. Each call must return a
// status (with an error object that agrees with it when one is asked for), never crash,
// and — under the ASan CI step — never read or write out of bounds or leak.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "loom.h"
#include "reliability/reliability_support.hpp"
#include "support/test_support.hpp"

namespace r = loom::reliability;

namespace {

constexpr loom_status kAnyStatus = -1;  // anything but a crash (the outcome depends on the host)

struct Case {
  const char* name;
  loom_status expected;
  std::function<loom_status(loom_error** err)> call;
  bool has_error_object = true;  // false: the function takes no loom_error**
};

// Handles on the demo model, created once per test case.
struct Handles {
  loom_model* model = nullptr;
  loom_tokenizer* tok = nullptr;
  loom_session* session = nullptr;
  loom_sampler* sampler = nullptr;
  Handles() {
    loom_load_params p;
    loom_load_params_init(&p);
    p.log_level = LOOM_LOG_OFF;
    REQUIRE(loom_model_load(r::demo_model_dir().c_str(), &p, &model, nullptr) == LOOM_OK);
    REQUIRE(loom_model_tokenizer(model, &tok, nullptr) == LOOM_OK);
    loom_session_params sp;
    loom_session_params_init(&sp);
    sp.context_length = 64;
    sp.n_threads = 1;
    REQUIRE(loom_session_create(model, &sp, &session, nullptr) == LOOM_OK);
    REQUIRE(loom_sampler_create(nullptr, &sampler, nullptr) == LOOM_OK);
  }
  ~Handles() {
    loom_sampler_free(sampler);
    loom_session_free(session);
    loom_tokenizer_free(tok);
    loom_model_free(model);
  }
};

// Runs each case twice: once asking for an error object, once with err == NULL.
void run_cases(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    INFO(c.name);
    loom_error* err = reinterpret_cast<loom_error*>(0x1);  // must be overwritten
    const loom_status s = c.call(&err);
    if (c.expected != kAnyStatus) CHECK(loom_status_str(s) == std::string(loom_status_str(c.expected)));
    CHECK(std::string(loom_status_str(s)) != "unknown");
    if (!c.has_error_object) {
      CHECK(err == reinterpret_cast<loom_error*>(0x1));
    } else if (s == LOOM_OK) {
      CHECK(err == nullptr);
    } else {
      REQUIRE(err != nullptr);
      REQUIRE(err != reinterpret_cast<loom_error*>(0x1));
      CHECK(loom_error_status(err) == s);
      CHECK(std::strlen(loom_error_message(err)) > 0);
      loom_error_free(err);
    }
    CHECK(c.call(nullptr) == s);
  }
}

int32_t stop_after_one(void*, const char*, size_t, int32_t) { return 0; }
int32_t shrink_to_zero(void*, loom_candidate*, size_t* n, const int32_t*, size_t) {
  *n = 0;  // documented as not allowed: must be refused, not obeyed
  return 0;
}
int32_t grow(void*, loom_candidate*, size_t* n, const int32_t*, size_t) {
  *n += 1000;  // documented as not allowed either
  return 0;
}

}  // namespace

TEST_CASE("C API abuse: NULL for every pointer of every function is a status, never a crash") {
  Handles h;
  const int32_t ids[] = {1, 2, 3};
  int32_t out_ids[8] = {};
  char buf[64] = {};
  size_t n = 0;
  float vec[256] = {};
  loom_model* m = nullptr;
  loom_tokenizer* tk = nullptr;
  loom_session* ss = nullptr;
  loom_sampler* sm = nullptr;
  int32_t token = 0;
  const auto demo = r::demo_model_dir().string();
  constexpr loom_status kBad = LOOM_ERR_INVALID_ARGUMENT;

  run_cases({
      // errors
      {"loom_error_problem(NULL error)", kBad, [&](loom_error**) { loom_problem p; loom_problem_init(&p); return loom_error_problem(nullptr, 0, &p); }, false},
      // models
      {"loom_model_load(NULL path)", kBad, [&](loom_error** e) { return loom_model_load(nullptr, nullptr, &m, e); }},
      {"loom_model_load(NULL out)", kBad, [&](loom_error** e) { return loom_model_load(demo.c_str(), nullptr, nullptr, e); }},
      {"loom_model_load(empty path)", LOOM_ERR_IO, [&](loom_error** e) { return loom_model_load("", nullptr, &m, e); }},
      {"loom_model_get_info(NULL model)", kBad, [&](loom_error**) { loom_model_info i; loom_model_info_init(&i); return loom_model_get_info(nullptr, &i); }, false},
      {"loom_model_get_info(NULL info)", kBad, [&](loom_error**) { return loom_model_get_info(h.model, nullptr); }, false},
      {"loom_model_eos_ids(NULL model)", kBad, [&](loom_error**) { return loom_model_eos_ids(nullptr, out_ids, 8, &n); }, false},
      {"loom_model_eos_ids(NULL count)", kBad, [&](loom_error**) { return loom_model_eos_ids(h.model, out_ids, 8, nullptr); }, false},
      {"loom_model_eos_ids(NULL ids: size query)", LOOM_OK, [&](loom_error**) { return loom_model_eos_ids(h.model, nullptr, 0, &n); }, false},
      {"loom_model_eos_ids(zero capacity)", kAnyStatus, [&](loom_error**) { return loom_model_eos_ids(h.model, out_ids, 0, &n); }, false},
      {"loom_model_load_report(NULL model)", kBad, [&](loom_error**) { return loom_model_load_report(nullptr, 0, buf, sizeof buf, &n); }, false},
      {"loom_model_load_report(NULL length)", kBad, [&](loom_error**) { return loom_model_load_report(h.model, 0, buf, sizeof buf, nullptr); }, false},
      {"loom_model_load_report(1-byte buffer)", LOOM_ERR_BUFFER_TOO_SMALL, [&](loom_error**) { return loom_model_load_report(h.model, 1, buf, 1, &n); }, false},
      {"loom_model_load_report(NULL buffer: size query)", LOOM_OK, [&](loom_error**) { return loom_model_load_report(h.model, 1, nullptr, 0, &n); }, false},
      // generation defaults
      {"loom_model_generation_defaults(NULL model)", kBad, [&](loom_error**) { loom_sampler_params sp; loom_sampler_params_init(&sp); return loom_model_generation_defaults(nullptr, &sp, nullptr); }, false},
      {"loom_model_generation_defaults(NULL structs)", LOOM_OK, [&](loom_error**) { return loom_model_generation_defaults(h.model, nullptr, nullptr); }, false},
      {"loom_model_generation_defaults(struct_size 0)", LOOM_OK, [&](loom_error**) { loom_sampler_params sp{}; loom_generate_params gp{}; return loom_model_generation_defaults(h.model, &sp, &gp); }, false},
      // tokenizers
      {"loom_tokenizer_load(NULL path)", kBad, [&](loom_error** e) { return loom_tokenizer_load(nullptr, &tk, e); }},
      {"loom_tokenizer_load(NULL out)", kBad, [&](loom_error** e) { return loom_tokenizer_load(demo.c_str(), nullptr, e); }},
      {"loom_tokenizer_load(missing file)", LOOM_ERR_IO, [&](loom_error** e) { return loom_tokenizer_load("/nonexistent/tokenizer.json", &tk, e); }},
      {"loom_model_tokenizer(NULL model)", kBad, [&](loom_error** e) { return loom_model_tokenizer(nullptr, &tk, e); }},
      {"loom_model_tokenizer(NULL out)", kBad, [&](loom_error** e) { return loom_model_tokenizer(h.model, nullptr, e); }},
      {"loom_tokenize(NULL tokenizer)", kBad, [&](loom_error** e) { return loom_tokenize(nullptr, "ab", 2, 0, out_ids, 8, &n, e); }},
      {"loom_tokenize(NULL text, length 5)", kBad, [&](loom_error** e) { return loom_tokenize(h.tok, nullptr, 5, 0, out_ids, 8, &n, e); }},
      {"loom_tokenize(NULL text, length 0)", LOOM_OK, [&](loom_error** e) { return loom_tokenize(h.tok, nullptr, 0, 0, out_ids, 8, &n, e); }},
      {"loom_tokenize(NULL count)", kBad, [&](loom_error** e) { return loom_tokenize(h.tok, "ab", 2, 0, out_ids, 8, nullptr, e); }},
      {"loom_tokenize(zero capacity)", LOOM_ERR_BUFFER_TOO_SMALL, [&](loom_error** e) { return loom_tokenize(h.tok, "hello world", 11, 0, out_ids, 0, &n, e); }},
      {"loom_tokenize(every flag bit)", LOOM_OK, [&](loom_error** e) { return loom_tokenize(h.tok, "ab", 2, 0xFFFFFFFFu, nullptr, 0, &n, e); }},
      {"loom_detokenize(NULL tokenizer)", kBad, [&](loom_error** e) { return loom_detokenize(nullptr, ids, 3, 0, buf, sizeof buf, &n, e); }},
      {"loom_detokenize(NULL ids, 3 of them)", kBad, [&](loom_error** e) { return loom_detokenize(h.tok, nullptr, 3, 0, buf, sizeof buf, &n, e); }},
      {"loom_detokenize(NULL ids, none)", LOOM_OK, [&](loom_error** e) { return loom_detokenize(h.tok, nullptr, 0, 0, buf, sizeof buf, &n, e); }},
      {"loom_detokenize(NULL length)", kBad, [&](loom_error** e) { return loom_detokenize(h.tok, ids, 3, 0, buf, sizeof buf, nullptr, e); }},
      {"loom_detokenize(zero capacity)", LOOM_ERR_BUFFER_TOO_SMALL, [&](loom_error** e) { return loom_detokenize(h.tok, ids, 3, 0, buf, 0, &n, e); }},
      {"loom_detokenize(id -1)", kBad, [&](loom_error** e) { const int32_t bad[] = {-1}; return loom_detokenize(h.tok, bad, 1, 0, buf, sizeof buf, &n, e); }},
      {"loom_detokenize(id INT32_MAX)", kBad, [&](loom_error** e) { const int32_t bad[] = {std::numeric_limits<int32_t>::max()}; return loom_detokenize(h.tok, bad, 1, 0, buf, sizeof buf, &n, e); }},
      {"loom_token_piece(NULL tokenizer)", kBad, [&](loom_error** e) { return loom_token_piece(nullptr, 1, buf, sizeof buf, &n, e); }},
      {"loom_token_piece(NULL length)", kBad, [&](loom_error** e) { return loom_token_piece(h.tok, 1, buf, sizeof buf, nullptr, e); }},
      {"loom_token_piece(id -5)", kBad, [&](loom_error** e) { return loom_token_piece(h.tok, -5, buf, sizeof buf, &n, e); }},
      {"loom_token_piece(id past the vocabulary)", kBad, [&](loom_error** e) { return loom_token_piece(h.tok, 1 << 30, buf, sizeof buf, &n, e); }},
      // sessions
      {"loom_session_create(NULL model)", kBad, [&](loom_error** e) { return loom_session_create(nullptr, nullptr, &ss, e); }},
      {"loom_session_create(NULL out)", kBad, [&](loom_error** e) { return loom_session_create(h.model, nullptr, nullptr, e); }},
      {"loom_session_rollback(NULL session)", kBad, [&](loom_error** e) { return loom_session_rollback(nullptr, 0, e); }},
      {"loom_session_rollback(-1)", kBad, [&](loom_error** e) { return loom_session_rollback(h.session, -1, e); }},
      {"loom_session_rollback(past the position)", kAnyStatus, [&](loom_error** e) { return loom_session_rollback(h.session, 1 << 30, e); }},
      {"loom_session_reset(NULL)", kBad, [&](loom_error**) { return loom_session_reset(nullptr); }, false},
      {"loom_prefill(NULL session)", kBad, [&](loom_error** e) { return loom_prefill(nullptr, ids, 3, e); }},
      {"loom_prefill(NULL tokens, 3 of them)", kBad, [&](loom_error** e) { return loom_prefill(h.session, nullptr, 3, e); }},
      {"loom_prefill(id -1)", kBad, [&](loom_error** e) { const int32_t bad[] = {1, -1}; return loom_prefill(h.session, bad, 2, e); }},
      {"loom_prefill(id past the vocabulary)", kBad, [&](loom_error** e) { const int32_t bad[] = {1 << 30}; return loom_prefill(h.session, bad, 1, e); }},
      {"loom_prefill(more than the context)", LOOM_ERR_CONTEXT_FULL, [&](loom_error** e) { std::vector<int32_t> many(65, 1); return loom_prefill(h.session, many.data(), many.size(), e); }},
      {"loom_step(NULL session)", kBad, [&](loom_error** e) { return loom_step(nullptr, 1, e); }},
      {"loom_step(id -1)", kBad, [&](loom_error** e) { return loom_step(h.session, -1, e); }},
      // sampling (the session above has no logits: every bad prefill left it untouched)
      {"loom_sampler_create(NULL out)", kBad, [&](loom_error** e) { return loom_sampler_create(nullptr, nullptr, e); }},
      {"loom_sampler_create(3 biases, NULL arrays)", kBad, [&](loom_error** e) { loom_sampler_params p; loom_sampler_params_init(&p); p.n_logit_bias = 3; return loom_sampler_create(&p, &sm, e); }},
      {"loom_sampler_add_stage(NULL sampler)", kBad, [&](loom_error**) { return loom_sampler_add_stage(nullptr, "x", shrink_to_zero, nullptr); }, false},
      {"loom_sampler_add_stage(NULL function)", kBad, [&](loom_error**) { return loom_sampler_add_stage(h.sampler, "x", nullptr, nullptr); }, false},
      {"loom_sample(NULL session)", kBad, [&](loom_error** e) { return loom_sample(nullptr, h.sampler, &token, e); }},
      {"loom_sample(NULL sampler)", kBad, [&](loom_error** e) { return loom_sample(h.session, nullptr, &token, e); }},
      {"loom_sample(NULL token)", kBad, [&](loom_error** e) { return loom_sample(h.session, h.sampler, nullptr, e); }},
      {"loom_sample(before any logits)", kAnyStatus, [&](loom_error** e) { return loom_sample(h.session, h.sampler, &token, e); }},
      {"loom_sampler_accept(NULL)", kBad, [&](loom_error**) { return loom_sampler_accept(nullptr, 1); }, false},
      {"loom_sampler_reset(NULL)", kBad, [&](loom_error**) { return loom_sampler_reset(nullptr); }, false},
      // generation and embeddings
      {"loom_generate(NULL session)", kBad, [&](loom_error** e) { return loom_generate(nullptr, h.sampler, "a", 1, nullptr, nullptr, e); }},
      {"loom_generate(NULL sampler)", kBad, [&](loom_error** e) { return loom_generate(h.session, nullptr, "a", 1, nullptr, nullptr, e); }},
      {"loom_generate(NULL prompt, length 4)", kBad, [&](loom_error** e) { return loom_generate(h.session, h.sampler, nullptr, 4, nullptr, nullptr, e); }},
      {"loom_generate(2 stop strings, NULL array)", kBad, [&](loom_error** e) { loom_generate_params p; loom_generate_params_init(&p); p.n_stop_strings = 2; return loom_generate(h.session, h.sampler, "a", 1, &p, nullptr, e); }},
      {"loom_generate(a NULL stop string)", kBad, [&](loom_error** e) { const char* stops[] = {"x", nullptr}; loom_generate_params p; loom_generate_params_init(&p); p.stop_strings = stops; p.n_stop_strings = 2; return loom_generate(h.session, h.sampler, "a", 1, &p, nullptr, e); }},
      {"loom_generate(negative max_tokens)", kBad, [&](loom_error** e) { loom_generate_params p; loom_generate_params_init(&p); p.max_tokens = -1; return loom_generate(h.session, h.sampler, "a", 1, &p, nullptr, e); }},
      {"loom_generate(empty prompt, no special tokens)", kAnyStatus, [&](loom_error** e) { loom_generate_params p; loom_generate_params_init(&p); p.tokenize_flags = 0; p.max_tokens = 2; return loom_generate(h.session, h.sampler, "", 0, &p, nullptr, e); }},
      {"loom_generate(callback stops at once)", LOOM_OK, [&](loom_error** e) { loom_generate_params p; loom_generate_params_init(&p); p.on_text = stop_after_one; p.max_tokens = 4; return loom_generate(h.session, h.sampler, "a b c", 5, &p, nullptr, e); }},
      {"loom_embed(NULL session)", kBad, [&](loom_error** e) { return loom_embed(nullptr, ids, 3, LOOM_POOL_MEAN, 1, vec, 256, &n, e); }},
      {"loom_embed(NULL tokens, 3 of them)", kBad, [&](loom_error** e) { return loom_embed(h.session, nullptr, 3, LOOM_POOL_MEAN, 1, vec, 256, &n, e); }},
      {"loom_embed(NULL dimension)", kBad, [&](loom_error** e) { return loom_embed(h.session, ids, 3, LOOM_POOL_MEAN, 1, vec, 256, nullptr, e); }},
      {"loom_embed(pooling 99)", kBad, [&](loom_error** e) { return loom_embed(h.session, ids, 3, 99, 1, vec, 256, &n, e); }},
      {"loom_embed(no tokens)", kAnyStatus, [&](loom_error** e) { return loom_embed(h.session, ids, 0, LOOM_POOL_MEAN, 1, vec, 256, &n, e); }},
      {"loom_embed(zero capacity)", LOOM_ERR_BUFFER_TOO_SMALL, [&](loom_error** e) { return loom_embed(h.session, ids, 3, LOOM_POOL_LAST, 0, vec, 0, &n, e); }},
      // custom stages that break their contract (run last: they stay on the sampler)
      {"a stage that empties the candidates", kAnyStatus, [&](loom_error** e) {
         loom_sampler* s = nullptr;
         loom_sampler_create(nullptr, &s, nullptr);
         loom_sampler_add_stage(s, "empty", shrink_to_zero, nullptr);
         loom_status st = loom_prefill(h.session, ids, 3, nullptr);
         if (st == LOOM_OK) st = loom_sample(h.session, s, &token, e);
         loom_sampler_free(s);
         loom_session_reset(h.session);
         return st;
       }},
      {"a stage that grows the candidates", kAnyStatus, [&](loom_error** e) {
         loom_sampler* s = nullptr;
         loom_sampler_create(nullptr, &s, nullptr);
         loom_sampler_add_stage(s, "grow", grow, nullptr);
         loom_status st = loom_prefill(h.session, ids, 3, nullptr);
         if (st == LOOM_OK) st = loom_sample(h.session, s, &token, e);
         loom_sampler_free(s);
         loom_session_reset(h.session);
         return st;
       }},
  });
  CHECK(m == nullptr);
  CHECK(tk == nullptr);
  CHECK(ss == nullptr);
  CHECK(sm == nullptr);
}

TEST_CASE("C API abuse: functions without a status answer NULL handles with neutral values") {
  CHECK(std::string(loom_error_message(nullptr)).empty());
  CHECK(loom_error_status(nullptr) == LOOM_OK);
  CHECK(std::string(loom_error_file(nullptr)).empty());
  CHECK(std::string(loom_error_tensor(nullptr)).empty());
  CHECK(loom_error_offset(nullptr) == -1);
  CHECK(loom_error_problem_count(nullptr) == 0);
  CHECK(std::string(loom_status_str(-1)) == "unknown");
  CHECK(std::string(loom_status_str(1 << 30)) == "unknown");
  CHECK(loom_tokenizer_vocab_size(nullptr) <= 0);
  CHECK(loom_session_position(nullptr) == -1);
  CHECK(loom_session_context_length(nullptr) == -1);
  CHECK(loom_session_kv_cache_bytes(nullptr) == 0);
  size_t n = 123;
  CHECK(loom_logits(nullptr, &n) == nullptr);
  CHECK(n == 0);
  CHECK(loom_logits(nullptr, nullptr) == nullptr);
  CHECK(loom_logits_at(nullptr, 0, &n) == nullptr);
  CHECK(loom_logit_rows(nullptr) == 0);
  // Every init and free accepts NULL: the 0.1 symbols (named in parentheses, past the
  // header's sizeof-passing macros) and the sized forms, whatever the size.
  (loom_problem_init)(nullptr);
  (loom_load_params_init)(nullptr);
  (loom_model_info_init)(nullptr);
  (loom_session_params_init)(nullptr);
  (loom_sampler_params_init)(nullptr);
  (loom_generate_params_init)(nullptr);
  (loom_generate_result_init)(nullptr);
  loom_load_params_init_sized(nullptr, sizeof(loom_load_params));
  loom_session_params_init_sized(nullptr, 0);
  loom_error_free(nullptr);
  loom_model_free(nullptr);
  loom_tokenizer_free(nullptr);
  loom_session_free(nullptr);
  loom_sampler_free(nullptr);
  loom_sampler_free(nullptr);  // twice: freeing NULL is always fine

  Handles h;
  CHECK(loom_logits(h.session, &n) == nullptr);  // before any token
  CHECK(n == 0);
  CHECK(loom_logits_at(h.session, 1000, &n) == nullptr);
}

TEST_CASE("C API abuse: params structs of size 0, 1, 3, one field and far larger than the library's") {
  Handles h;
  for (const uint32_t size : {0u, 1u, 3u, 4u, 8u, 4096u, 0xFFFFFFFFu}) {
    INFO("struct_size " << size);
    // Larger callers: the struct lives in a big zeroed buffer, so reading past the
    // library's own size would be a bug the ASan build catches (it reads only its size).
    std::vector<unsigned char> storage(8192, 0);
    auto* load = reinterpret_cast<loom_load_params*>(storage.data());
    loom_load_params_init(load);
    load->log_level = LOOM_LOG_OFF;
    load->struct_size = size;
    loom_model* m = nullptr;
    // A tiny struct_size falls back to the defaults (including the INFO log level).
    const loom_status s = loom_model_load(r::demo_model_dir().c_str(), load, &m, nullptr);
    CHECK(s == LOOM_OK);
    loom_model_free(m);

    auto* info = reinterpret_cast<loom_model_info*>(storage.data());
    std::memset(info, 0xAB, 4096);
    info->struct_size = size;
    CHECK(loom_model_get_info(h.model, info) == LOOM_OK);
    CHECK(info->struct_size == size);  // the caller's size is kept
    if (size >= 8) {
      CHECK(info->vocab_size > 0);
    }
    // Bytes past the library's struct are never written, whatever the caller claims.
    CHECK(storage[sizeof(loom_model_info)] == 0xAB);

    auto* sp = reinterpret_cast<loom_session_params*>(storage.data());
    std::memset(storage.data(), 0, storage.size());
    loom_session_params_init(sp);
    sp->context_length = 32;
    sp->n_threads = 1;
    sp->struct_size = size;
    loom_session* ss = nullptr;
    CHECK(loom_session_create(h.model, sp, &ss, nullptr) == LOOM_OK);
    loom_session_free(ss);

    auto* smp = reinterpret_cast<loom_sampler_params*>(storage.data());
    std::memset(storage.data(), 0, storage.size());
    loom_sampler_params_init(smp);
    smp->struct_size = size;
    loom_sampler* sm = nullptr;
    CHECK(loom_sampler_create(smp, &sm, nullptr) == LOOM_OK);
    loom_sampler_free(sm);

    auto* gp = reinterpret_cast<loom_generate_params*>(storage.data());
    std::memset(storage.data(), 0, storage.size());
    loom_generate_params_init(gp);
    gp->max_tokens = 2;
    gp->struct_size = size;
    std::vector<unsigned char> result_storage(8192, 0xCD);
    auto* res = reinterpret_cast<loom_generate_result*>(result_storage.data());
    res->struct_size = size;
    CHECK(loom_generate(h.session, h.sampler, "abc", 3, gp, res, nullptr) == LOOM_OK);
    CHECK(res->struct_size == size);
    CHECK(result_storage[sizeof(loom_generate_result)] == 0xCD);

    loom_problem p;
    loom_problem_init(&p);
    p.struct_size = size;
    CHECK(loom_error_problem(nullptr, 0, &p) == LOOM_ERR_INVALID_ARGUMENT);
  }
}

TEST_CASE("C API abuse: odd but legal parameter values are a status, not a crash") {
  Handles h;
  const std::vector<std::pair<const char*, std::function<void(loom_session_params&)>>> sessions{
      {"context -5", [](loom_session_params& p) { p.context_length = -5; }},
      {"context INT32_MAX", [](loom_session_params& p) { p.context_length = std::numeric_limits<int32_t>::max(); }},
      {"threads -3", [](loom_session_params& p) { p.n_threads = -3; }},
      {"kv dtype 99", [](loom_session_params& p) { p.kv_dtype = 99; }},
      {"kv dtype bf16", [](loom_session_params& p) { p.kv_dtype = LOOM_DTYPE_BF16; }},
  };
  for (const auto& [name, set] : sessions) {
    INFO(name);
    loom_session_params p;
    loom_session_params_init(&p);
    p.n_threads = 1;
    set(p);
    loom_session* s = nullptr;
    loom_error* err = nullptr;
    const loom_status st = loom_session_create(h.model, &p, &s, &err);
    CHECK((st == LOOM_OK) == (s != nullptr));
    CHECK((st == LOOM_OK) == (err == nullptr));
    loom_error_free(err);
    loom_session_free(s);
  }
  const std::vector<std::pair<const char*, std::function<void(loom_sampler_params&)>>> samplers{
      {"temperature NaN", [](loom_sampler_params& p) { p.temperature = std::nanf(""); }},
      {"temperature inf", [](loom_sampler_params& p) { p.temperature = INFINITY; }},
      {"top_p NaN", [](loom_sampler_params& p) { p.top_p = std::nanf(""); }},
      {"min_p 2", [](loom_sampler_params& p) { p.min_p = 2.0f; }},
      {"top_k huge", [](loom_sampler_params& p) { p.top_k = std::numeric_limits<int32_t>::max(); }},
      {"penalty_last_n -7", [](loom_sampler_params& p) { p.penalty_last_n = -7; p.repeat_penalty = 1.3f; }},
      {"repeat_penalty 0", [](loom_sampler_params& p) { p.repeat_penalty = 0.0f; }},
  };
  const int32_t ids[] = {1, 2, 3};
  for (const auto& [name, set] : samplers) {
    INFO(name);
    loom_sampler_params p;
    loom_sampler_params_init(&p);
    set(p);
    loom_sampler* s = nullptr;
    loom_error* err = nullptr;
    loom_status st = loom_sampler_create(&p, &s, &err);
    CHECK((st == LOOM_OK) == (s != nullptr));
    loom_error_free(err);
    err = nullptr;
    if (s != nullptr) {
      loom_session_reset(h.session);
      REQUIRE(loom_prefill(h.session, ids, 3, nullptr) == LOOM_OK);
      for (int i = 0; i < 3; ++i) loom_sampler_accept(s, 1);
      int32_t token = -1;
      st = loom_sample(h.session, s, &token, &err);
      if (st == LOOM_OK) {
        CHECK(token >= 0);
        CHECK(token < loom_tokenizer_vocab_size(h.tok));
      } else {
        CHECK(err != nullptr);
      }
      loom_error_free(err);
    }
    loom_sampler_free(s);
  }
}

TEST_CASE("C API abuse: after a failed load the handle is NULL and every use of it is refused") {
  const loom::test::TempDir dir;
  const auto bad = dir / "bad.safetensors";
  loom::test::write_file_bytes(bad, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  loom_model* m = reinterpret_cast<loom_model*>(0x1);
  loom_error* err = nullptr;
  CHECK(loom_model_load(bad.c_str(), nullptr, &m, &err) != LOOM_OK);
  CHECK(m == nullptr);
  REQUIRE(err != nullptr);
  CHECK(std::string(loom_error_file(err)).find("bad.safetensors") != std::string::npos);
  loom_error_free(err);
  loom_session* s = reinterpret_cast<loom_session*>(0x1);
  CHECK(loom_session_create(m, nullptr, &s, nullptr) == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(s == nullptr);
  loom_tokenizer* t = reinterpret_cast<loom_tokenizer*>(0x1);
  CHECK(loom_model_tokenizer(m, &t, nullptr) == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(t == nullptr);
  loom_model_info info;
  loom_model_info_init(&info);
  CHECK(loom_model_get_info(m, &info) == LOOM_ERR_INVALID_ARGUMENT);
  loom_model_free(m);
}

// ---- batches ----

TEST_CASE("C API abuse: the batch functions answer NULLs, unknown ids and odd sizes with a status") {
  Handles h;
  loom_batch_params bp;
  loom_batch_params_init(&bp);
  bp.context_length = 32;
  bp.max_sequences = 4;
  bp.n_threads = 1;
  loom_batch* b = nullptr;
  REQUIRE(loom_batch_create(h.model, &bp, &b, nullptr) == LOOM_OK);
  loom_seq_id seq = -1;
  REQUIRE(loom_batch_add(b, &seq, nullptr) == LOOM_OK);
  const int32_t ids[] = {1, 2, 3};
  const int32_t negative[] = {-1};
  loom_seq_id out = -1;
  loom_seq_id out_ids[4] = {};
  size_t n = 0;
  int32_t token = 0, dropped = 0;
  loom_batch* bb = nullptr;
  constexpr loom_status kBad = LOOM_ERR_INVALID_ARGUMENT;
  constexpr loom_seq_id kUnknown = 1 << 20;

  run_cases({
      {"loom_batch_create(NULL model)", kBad, [&](loom_error** e) { return loom_batch_create(nullptr, &bp, &bb, e); }},
      {"loom_batch_create(NULL out)", kBad, [&](loom_error** e) { return loom_batch_create(h.model, &bp, nullptr, e); }},
      {"loom_batch_create(kv dtype 99)", kBad, [&](loom_error** e) { loom_batch_params p = bp; p.kv_dtype = 99; return loom_batch_create(h.model, &p, &bb, e); }},
      {"loom_batch_create(block_tokens 0)", kBad, [&](loom_error** e) { loom_batch_params p = bp; p.block_tokens = 0; return loom_batch_create(h.model, &p, &bb, e); }},
      {"loom_batch_create(token_budget -1)", kBad, [&](loom_error** e) { loom_batch_params p = bp; p.token_budget = -1; return loom_batch_create(h.model, &p, &bb, e); }},
      {"loom_batch_create(pool_tokens -1)", kBad, [&](loom_error** e) { loom_batch_params p = bp; p.pool_tokens = -1; return loom_batch_create(h.model, &p, &bb, e); }},
      {"loom_batch_create(context -5)", kBad, [&](loom_error** e) { loom_batch_params p = bp; p.context_length = -5; return loom_batch_create(h.model, &p, &bb, e); }},
      {"loom_batch_add(NULL batch)", kBad, [&](loom_error** e) { return loom_batch_add(nullptr, &out, e); }},
      {"loom_batch_add(NULL out)", kBad, [&](loom_error** e) { return loom_batch_add(b, nullptr, e); }},
      {"loom_batch_feed(NULL batch)", kBad, [&](loom_error** e) { return loom_batch_feed(nullptr, seq, ids, 3, 0, e); }},
      {"loom_batch_feed(NULL tokens, 3 of them)", kBad, [&](loom_error** e) { return loom_batch_feed(b, seq, nullptr, 3, 0, e); }},
      {"loom_batch_feed(no tokens)", kBad, [&](loom_error** e) { return loom_batch_feed(b, seq, ids, 0, 0, e); }},
      {"loom_batch_feed(NULL tokens, none)", kBad, [&](loom_error** e) { return loom_batch_feed(b, seq, nullptr, 0, 0, e); }},
      {"loom_batch_feed(unknown id)", kBad, [&](loom_error** e) { return loom_batch_feed(b, kUnknown, ids, 3, 0, e); }},
      {"loom_batch_feed(negative id)", kBad, [&](loom_error** e) { return loom_batch_feed(b, -1, ids, 3, 0, e); }},
      {"loom_batch_feed(token -1)", kBad, [&](loom_error** e) { return loom_batch_feed(b, seq, negative, 1, 0, e); }},
      {"loom_batch_fork(NULL batch)", kBad, [&](loom_error** e) { return loom_batch_fork(nullptr, seq, &out, e); }},
      {"loom_batch_fork(NULL out)", kBad, [&](loom_error** e) { return loom_batch_fork(b, seq, nullptr, e); }},
      {"loom_batch_fork(unknown id)", kBad, [&](loom_error** e) { return loom_batch_fork(b, kUnknown, &out, e); }},
      {"loom_batch_rollback(NULL batch)", kBad, [&](loom_error** e) { return loom_batch_rollback(nullptr, seq, 0, e); }},
      {"loom_batch_rollback(-1)", kBad, [&](loom_error** e) { return loom_batch_rollback(b, seq, -1, e); }},
      {"loom_batch_rollback(INT32_MAX)", kBad, [&](loom_error** e) { return loom_batch_rollback(b, seq, std::numeric_limits<int32_t>::max(), e); }},
      {"loom_batch_rollback(unknown id)", kBad, [&](loom_error** e) { return loom_batch_rollback(b, kUnknown, 0, e); }},
      {"loom_batch_trim(NULL batch)", kBad, [&](loom_error** e) { return loom_batch_trim(nullptr, seq, 0, 1, e); }},
      {"loom_batch_trim(end before begin)", kBad, [&](loom_error** e) { return loom_batch_trim(b, seq, 2, 1, e); }},
      {"loom_batch_trim(INT32_MIN begin)", kBad, [&](loom_error** e) { return loom_batch_trim(b, seq, std::numeric_limits<int32_t>::min(), 0, e); }},
      {"loom_batch_trim(past the end)", kBad, [&](loom_error** e) { return loom_batch_trim(b, seq, 0, 1000, e); }},
      {"loom_batch_trim(empty range)", LOOM_OK, [&](loom_error** e) { return loom_batch_trim(b, seq, 0, 0, e); }},
      {"loom_batch_remove(NULL batch)", kBad, [&](loom_error** e) { return loom_batch_remove(nullptr, seq, e); }},
      {"loom_batch_remove(unknown id)", kBad, [&](loom_error** e) { return loom_batch_remove(b, kUnknown, e); }},
      {"loom_batch_context_shift(NULL batch)", kBad, [&](loom_error** e) { return loom_batch_context_shift(nullptr, seq, 1, 0, &dropped, e); }},
      {"loom_batch_context_shift(negative needed)", kBad, [&](loom_error** e) { return loom_batch_context_shift(b, seq, -1, 0, &dropped, e); }},
      {"loom_batch_context_shift(more than the context)", LOOM_ERR_CONTEXT_FULL, [&](loom_error** e) { return loom_batch_context_shift(b, seq, 1000, 0, &dropped, e); }},
      {"loom_batch_context_shift(NULL dropped)", LOOM_OK, [&](loom_error** e) { return loom_batch_context_shift(b, seq, 1, 0, nullptr, e); }},
      {"loom_batch_decode(NULL batch)", kBad, [&](loom_error** e) { return loom_batch_decode(nullptr, nullptr, e); }},
      {"loom_batch_decode(nothing pending, NULL result)", LOOM_OK, [&](loom_error** e) { return loom_batch_decode(b, nullptr, e); }},
      {"loom_batch_decode(result struct_size 0)", LOOM_OK, [&](loom_error** e) { loom_batch_pass r; loom_batch_pass_init(&r); r.struct_size = 0; return loom_batch_decode(b, &r, e); }},
      {"loom_batch_sample(NULL batch)", kBad, [&](loom_error** e) { return loom_batch_sample(nullptr, seq, h.sampler, &token, e); }},
      {"loom_batch_sample(NULL sampler)", kBad, [&](loom_error** e) { return loom_batch_sample(b, seq, nullptr, &token, e); }},
      {"loom_batch_sample(NULL token)", kBad, [&](loom_error** e) { return loom_batch_sample(b, seq, h.sampler, nullptr, e); }},
      {"loom_batch_sample(unknown id)", kBad, [&](loom_error** e) { return loom_batch_sample(b, kUnknown, h.sampler, &token, e); }},
      {"loom_batch_sample(no logits yet)", kBad, [&](loom_error** e) { return loom_batch_sample(b, seq, h.sampler, &token, e); }},
      {"loom_batch_ready(NULL batch)", kBad, [&](loom_error**) { return loom_batch_ready(nullptr, out_ids, 4, &n); }, false},
      {"loom_batch_ready(NULL count)", kBad, [&](loom_error**) { return loom_batch_ready(b, out_ids, 4, nullptr); }, false},
      {"loom_batch_ready(size query)", LOOM_OK, [&](loom_error**) { return loom_batch_ready(b, nullptr, 0, &n); }, false},
      {"loom_batch_get_stats(NULL batch)", kBad, [&](loom_error**) { loom_batch_stats s; loom_batch_stats_init(&s); return loom_batch_get_stats(nullptr, &s); }, false},
      {"loom_batch_get_stats(NULL stats)", kBad, [&](loom_error**) { return loom_batch_get_stats(b, nullptr); }, false},
      {"loom_batch_get_stats(struct_size 0)", LOOM_OK, [&](loom_error**) { loom_batch_stats s; loom_batch_stats_init(&s); s.struct_size = 0; return loom_batch_get_stats(b, &s); }, false},
  });
  CHECK(bb == nullptr);

  // Functions without a status: neutral values for NULL handles and unknown ids.
  size_t nv = 123;
  CHECK(loom_batch_logits(nullptr, seq, &nv) == nullptr);
  CHECK(nv == 0);
  CHECK(loom_batch_logits(b, kUnknown, nullptr) == nullptr);
  CHECK(loom_batch_logits(b, seq, &nv) == nullptr);  // nothing decoded
  CHECK(loom_batch_logits_at(nullptr, seq, 0, &nv) == nullptr);
  CHECK(loom_batch_logits_at(b, seq, SIZE_MAX, &nv) == nullptr);
  CHECK(loom_batch_logit_rows(nullptr, seq) == 0);
  CHECK(loom_batch_position(nullptr, seq) == -1);
  CHECK(loom_batch_position(b, kUnknown) == -1);
  CHECK(loom_batch_pending(nullptr, seq) == -1);
  CHECK(loom_batch_pending(b, -7) == -1);
  CHECK(loom_batch_contains(nullptr, seq) == 0);
  CHECK(loom_batch_contains(b, seq) == 1);
  CHECK(loom_batch_context_length(nullptr) == -1);
  (loom_batch_params_init)(nullptr);
  (loom_batch_pass_init)(nullptr);
  (loom_batch_stats_init)(nullptr);
  loom_batch_free(nullptr);
  loom_batch_free(b);

  // Params structs of any struct_size: small ones get the defaults (a context of the
  // model's length), larger ones are read only up to the library's size.
  for (const uint32_t size : {0u, 1u, 3u, 4u, 8u, 4096u, 0xFFFFFFFFu}) {
    INFO("struct_size " << size);
    std::vector<unsigned char> storage(8192, 0);
    auto* p = reinterpret_cast<loom_batch_params*>(storage.data());
    loom_batch_params_init(p);
    p->max_sequences = 2;
    p->context_length = 32;
    p->n_threads = 1;
    p->struct_size = size;
    loom_batch* sized = nullptr;
    CHECK(loom_batch_create(h.model, p, &sized, nullptr) == LOOM_OK);
    CHECK(sized != nullptr);
    loom_batch_free(sized);
  }
}

// ---- speculative decoding ----

namespace {
int32_t draft_bad_id(void*, const int32_t*, size_t, int32_t* draft, size_t max_draft, size_t* n) {
  for (size_t i = 0; i < max_draft; ++i) draft[i] = std::numeric_limits<int32_t>::max();
  *n = max_draft;
  return 0;
}
int32_t draft_too_many(void*, const int32_t*, size_t, int32_t*, size_t, size_t* n) {
  *n = std::numeric_limits<size_t>::max();  // never allowed, never written past the buffer
  return 0;
}
int32_t draft_leave_unset(void*, const int32_t*, size_t, int32_t*, size_t max_draft, size_t* n) {
  *n = max_draft;  // claims tokens it did not write
  return 0;
}
}  // namespace

TEST_CASE("C API abuse: the speculative functions answer NULLs, bad drafts and odd params with a status") {
  Handles h;
  constexpr loom_status kBad = LOOM_ERR_INVALID_ARGUMENT;
  loom_drafter* lookup = nullptr;
  REQUIRE(loom_drafter_create_lookup(0, 0, &lookup, nullptr) == LOOM_OK);
  loom_drafter* bad_id = nullptr;
  loom_drafter* too_many = nullptr;
  loom_drafter* unset = nullptr;
  REQUIRE(loom_drafter_create_callback("bad-id", draft_bad_id, nullptr, nullptr, &bad_id, nullptr) == LOOM_OK);
  REQUIRE(loom_drafter_create_callback(nullptr, draft_too_many, nullptr, nullptr, &too_many, nullptr) == LOOM_OK);
  REQUIRE(loom_drafter_create_callback("unset", draft_leave_unset, nullptr, nullptr, &unset, nullptr) == LOOM_OK);
  loom_drafter* d = nullptr;
  loom_model* copy = nullptr;
  loom_generate_params gp;
  loom_generate_params_init(&gp);
  gp.max_tokens = 6;
  loom_speculative_params fixed;
  loom_speculative_params_init(&fixed);
  fixed.adaptive = 0;
  char buf[8];
  size_t len = 0;

  run_cases({
      {"loom_drafter_create_model(NULL draft)", kBad, [&](loom_error** e) { return loom_drafter_create_model(nullptr, h.model, nullptr, &d, e); }},
      {"loom_drafter_create_model(NULL target)", kBad, [&](loom_error** e) { return loom_drafter_create_model(h.model, nullptr, nullptr, &d, e); }},
      {"loom_drafter_create_model(NULL out)", kBad, [&](loom_error** e) { return loom_drafter_create_model(h.model, h.model, nullptr, nullptr, e); }},
      {"loom_drafter_create_model(kv dtype 99)", kBad, [&](loom_error** e) { loom_draft_model_params p; loom_draft_model_params_init(&p); p.kv_dtype = 99; return loom_drafter_create_model(h.model, h.model, &p, &d, e); }},
      {"loom_drafter_create_model(context -1)", kBad, [&](loom_error** e) { loom_draft_model_params p; loom_draft_model_params_init(&p); p.context_length = -1; return loom_drafter_create_model(h.model, h.model, &p, &d, e); }},
      {"loom_drafter_create_model(min_confidence NaN)", kBad, [&](loom_error** e) { loom_draft_model_params p; loom_draft_model_params_init(&p); p.min_confidence = std::numeric_limits<float>::quiet_NaN(); return loom_drafter_create_model(h.model, h.model, &p, &d, e); }},
      {"loom_model_draft_copy(NULL target)", kBad, [&](loom_error** e) { return loom_model_draft_copy(nullptr, "q8_0", &copy, e); }},
      {"loom_model_draft_copy(NULL dtype)", kBad, [&](loom_error** e) { return loom_model_draft_copy(h.model, nullptr, &copy, e); }},
      {"loom_model_draft_copy(NULL out)", kBad, [&](loom_error** e) { return loom_model_draft_copy(h.model, "q8_0", nullptr, e); }},
      {"loom_model_draft_copy(\"\")", kBad, [&](loom_error** e) { return loom_model_draft_copy(h.model, "", &copy, e); }},
      {"loom_drafter_create_lookup(NULL out)", kBad, [&](loom_error** e) { return loom_drafter_create_lookup(3, 1, nullptr, e); }},
      {"loom_drafter_create_lookup(-1, -1)", kBad, [&](loom_error** e) { return loom_drafter_create_lookup(-1, -1, &d, e); }},
      {"loom_drafter_create_lookup(INT32_MAX, 1)", kBad, [&](loom_error** e) { return loom_drafter_create_lookup(std::numeric_limits<int32_t>::max(), 1, &d, e); }},
      {"loom_drafter_create_callback(NULL fn)", kBad, [&](loom_error** e) { return loom_drafter_create_callback("x", nullptr, nullptr, nullptr, &d, e); }},
      {"loom_drafter_create_callback(NULL out)", kBad, [&](loom_error** e) { return loom_drafter_create_callback("x", draft_bad_id, nullptr, nullptr, nullptr, e); }},
      {"loom_drafter_warnings(NULL drafter)", kBad, [&](loom_error**) { return loom_drafter_warnings(nullptr, buf, sizeof buf, &len); }, false},
      {"loom_drafter_warnings(NULL len)", kBad, [&](loom_error**) { return loom_drafter_warnings(lookup, buf, sizeof buf, nullptr); }, false},
      {"loom_generate_speculative(NULL session)", kBad, [&](loom_error** e) { return loom_generate_speculative(nullptr, h.sampler, "ab", 2, &gp, lookup, nullptr, nullptr, nullptr, e); }},
      {"loom_generate_speculative(NULL sampler)", kBad, [&](loom_error** e) { return loom_generate_speculative(h.session, nullptr, "ab", 2, &gp, lookup, nullptr, nullptr, nullptr, e); }},
      {"loom_generate_speculative(NULL prompt, 2 bytes)", kBad, [&](loom_error** e) { return loom_generate_speculative(h.session, h.sampler, nullptr, 2, &gp, lookup, nullptr, nullptr, nullptr, e); }},
      {"loom_generate_speculative(k 0)", kBad, [&](loom_error** e) { loom_speculative_params p = fixed; p.max_draft = 0; return loom_generate_speculative(h.session, h.sampler, "ab", 2, &gp, lookup, &p, nullptr, nullptr, e); }},
      {"loom_generate_speculative(k INT32_MAX)", kBad, [&](loom_error** e) { loom_speculative_params p = fixed; p.max_draft = std::numeric_limits<int32_t>::max(); return loom_generate_speculative(h.session, h.sampler, "ab", 2, &gp, lookup, &p, nullptr, nullptr, e); }},
      {"loom_generate_speculative(smoothing NaN)", kBad, [&](loom_error** e) { loom_speculative_params p = fixed; p.smoothing = std::numeric_limits<float>::quiet_NaN(); return loom_generate_speculative(h.session, h.sampler, "ab", 2, &gp, lookup, &p, nullptr, nullptr, e); }},
      {"loom_generate_speculative(probe_interval 0)", kBad, [&](loom_error** e) { loom_speculative_params p; loom_speculative_params_init(&p); p.probe_interval = 0; return loom_generate_speculative(h.session, h.sampler, "ab", 2, &gp, lookup, &p, nullptr, nullptr, e); }},
      {"loom_generate_speculative(max_tokens -1)", kBad, [&](loom_error** e) { loom_generate_params g = gp; g.max_tokens = -1; return loom_generate_speculative(h.session, h.sampler, "ab", 2, &g, lookup, nullptr, nullptr, nullptr, e); }},
      {"loom_generate_speculative(drafter: INT32_MAX ids)", kBad, [&](loom_error** e) { return loom_generate_speculative(h.session, h.sampler, "ab", 2, &gp, bad_id, &fixed, nullptr, nullptr, e); }},
      {"loom_generate_speculative(drafter: SIZE_MAX tokens)", kBad, [&](loom_error** e) { return loom_generate_speculative(h.session, h.sampler, "ab", 2, &gp, too_many, &fixed, nullptr, nullptr, e); }},
      {"loom_generate_speculative(drafter: tokens not written)", kBad, [&](loom_error** e) { return loom_generate_speculative(h.session, h.sampler, "ab", 2, &gp, unset, &fixed, nullptr, nullptr, e); }},
      {"loom_generate_speculative(NULL drafter: plain)", LOOM_OK, [&](loom_error** e) { return loom_generate_speculative(h.session, h.sampler, "ab", 2, &gp, nullptr, nullptr, nullptr, nullptr, e); }},
  });
  CHECK(d == nullptr);
  CHECK(copy == nullptr);
  loom_drafter_free(nullptr);

  // Params and result structs of any size: the library reads and writes only what the
  // caller's struct_size covers.
  for (const uint32_t size : {0u, 1u, 3u, 4u, 8u, 4096u, 0xFFFFFFFFu}) {
    INFO("struct_size " << size);
    std::vector<unsigned char> storage(8192, 0);
    auto* dp = reinterpret_cast<loom_draft_model_params*>(storage.data());
    loom_draft_model_params_init(dp);
    dp->struct_size = size;
    loom_drafter* md = nullptr;
    CHECK(loom_drafter_create_model(h.model, h.model, dp, &md, nullptr) == LOOM_OK);
    auto* sp = reinterpret_cast<loom_speculative_params*>(storage.data());
    std::memset(storage.data(), 0, storage.size());
    loom_speculative_params_init(sp);
    sp->struct_size = size;
    std::vector<unsigned char> stats_storage(8192, 0xCD);
    auto* st = reinterpret_cast<loom_speculative_stats*>(stats_storage.data());
    st->struct_size = size;
    CHECK(loom_generate_speculative(h.session, h.sampler, "abc", 3, &gp, md, sp, nullptr, st, nullptr) == LOOM_OK);
    CHECK(st->struct_size == size);
    CHECK(stats_storage[sizeof(loom_speculative_stats)] == 0xCD);
    loom_drafter_free(md);
  }
  loom_drafter_free(lookup);
  loom_drafter_free(bad_id);
  loom_drafter_free(too_many);
  loom_drafter_free(unset);
}

namespace {

// One sized initializer under test: its struct's size and both entry points.
struct SizedInit {
  const char* name;
  size_t size;
  std::function<void(void*, size_t)> sized;  // NAME_sized
  std::function<void(void*)> frozen;         // the 0.1 symbol NAME
};

#define LOOM_SIZED_INIT(T, NAME)                                                      \
  SizedInit {                                                                         \
    #NAME, sizeof(T), [](void* p, size_t n) { NAME##_sized(static_cast<T*>(p), n); }, \
        [](void* p) { (NAME)(static_cast<T*>(p)); }                                   \
  }

std::vector<SizedInit> sized_inits() {
  return {LOOM_SIZED_INIT(loom_problem, loom_problem_init),
          LOOM_SIZED_INIT(loom_load_params, loom_load_params_init),
          LOOM_SIZED_INIT(loom_model_info, loom_model_info_init),
          LOOM_SIZED_INIT(loom_session_params, loom_session_params_init),
          LOOM_SIZED_INIT(loom_sampler_params, loom_sampler_params_init),
          LOOM_SIZED_INIT(loom_generate_params, loom_generate_params_init),
          LOOM_SIZED_INIT(loom_generate_result, loom_generate_result_init),
          LOOM_SIZED_INIT(loom_chat_template_params, loom_chat_template_params_init),
          LOOM_SIZED_INIT(loom_chat_params, loom_chat_params_init),
          LOOM_SIZED_INIT(loom_chat_result, loom_chat_result_init),
          LOOM_SIZED_INIT(loom_batch_params, loom_batch_params_init),
          LOOM_SIZED_INIT(loom_batch_pass, loom_batch_pass_init),
          LOOM_SIZED_INIT(loom_batch_stats, loom_batch_stats_init),
          LOOM_SIZED_INIT(loom_draft_model_params, loom_draft_model_params_init),
          LOOM_SIZED_INIT(loom_speculative_params, loom_speculative_params_init),
          LOOM_SIZED_INIT(loom_speculative_stats, loom_speculative_stats_init)};
}

}  // namespace

TEST_CASE("C API abuse: every initializer writes only the caller's struct, whatever its size") {
  const auto inits = sized_inits();
  CHECK(inits.size() == 16);
  for (const auto& init : inits) {
    INFO(init.name << " (the library's struct: " << init.size << " bytes)");
    // The library's own defaults, for comparison.
    std::vector<unsigned char> full(init.size + 64, 0xAB);
    init.sized(full.data(), init.size);
    uint32_t full_size = 0;
    std::memcpy(&full_size, full.data(), sizeof full_size);
    CHECK(full_size == init.size);
    CHECK(full[init.size] == 0xAB);  // not one byte past

    // Older (smaller) hosts, a newer (larger) one, and sizes too small for struct_size.
    for (const size_t size : {size_t{0}, size_t{3}, size_t{4}, size_t{8}, init.size / 2, init.size - 1,
                              init.size, init.size + 40}) {
      INFO("caller's size " << size);
      std::vector<unsigned char> buf(init.size + 64, 0xAB);
      init.sized(buf.data(), size);
      // Nothing past the caller's bytes (nothing at all below the size field's 4).
      for (size_t i = size < sizeof(uint32_t) ? 0 : size; i < buf.size(); ++i) REQUIRE(buf[i] == 0xAB);
      if (size < sizeof(uint32_t)) continue;
      uint32_t got = 0;
      std::memcpy(&got, buf.data(), sizeof got);
      const size_t known = std::min(size, init.size);
      CHECK(got == known);
      // The defaults the caller's bytes can hold, then zeros up to its size.
      CHECK(std::memcmp(buf.data() + 4, full.data() + 4, known - 4) == 0);
      for (size_t i = known; i < size; ++i) REQUIRE(buf[i] == 0);
    }

    // The 0.1 symbol writes exactly the library's struct (all of it existed in 0.1).
    std::vector<unsigned char> old(init.size + 64, 0xAB);
    init.frozen(old.data());
    CHECK(std::memcmp(old.data(), full.data(), init.size) == 0);
    CHECK(old[init.size] == 0xAB);
  }
}

TEST_CASE("C API abuse: a host built against an older, smaller session params struct loads and runs") {
  // The layout before the trace fields were appended.
  const size_t old_size = offsetof(loom_session_params, trace);
  std::vector<unsigned char> storage(sizeof(loom_session_params) + 16, 0xAB);
  auto* sp = reinterpret_cast<loom_session_params*>(storage.data());
  loom_session_params_init_sized(sp, old_size);
  CHECK(sp->struct_size == old_size);
  for (size_t i = old_size; i < storage.size(); ++i) REQUIRE(storage[i] == 0xAB);
  sp->context_length = 64;
  Handles h;
  loom_session* s = nullptr;
  REQUIRE(loom_session_create(h.model, sp, &s, nullptr) == LOOM_OK);
  CHECK(loom_session_context_length(s) == 64);
  const int32_t ids[] = {1, 2, 3};
  CHECK(loom_prefill(s, ids, 3, nullptr) == LOOM_OK);
  loom_session_free(s);
}

TEST_CASE("C API: the header's init macros pass the caller's own sizeof") {
  loom_generate_params gp;
  std::memset(&gp, 0xCD, sizeof gp);
  loom_generate_params_init(&gp);
  CHECK(gp.struct_size == sizeof gp);
  CHECK(gp.max_tokens == 128);
  loom_batch_params bp;
  loom_batch_params_init(&bp);
  CHECK(bp.struct_size == sizeof bp);
  CHECK(bp.block_tokens == 16);
}
