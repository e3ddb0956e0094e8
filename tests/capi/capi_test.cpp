// Every C entry point, its success path and its error paths.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "loom.h"
#include "loom.hpp"
#include "loom/cpu.hpp"
#include "loom/demo.hpp"
#include "loom/error.hpp"
#include "loom/exporter.hpp"
#include "support/test_support.hpp"
#include "support/tiny_model.hpp"

namespace fs = std::filesystem;
namespace t = loom::test;

namespace {

// A demo model (real byte-level tokenizer, random weights) written once per process.
const fs::path& demo_dir() {
  static t::TempDir dir;
  static const fs::path path = [] {
    const fs::path p = dir / "demo";
    loom::DemoOptions o;
    o.hidden_size = 64;
    o.n_layers = 2;
    loom::write_demo_model(p, o);
    return p;
  }();
  return path;
}

loom_model* load(const fs::path& path, loom_load_params* params = nullptr) {
  loom_load_params p;
  loom_load_params_init(&p);
  p.log_level = LOOM_LOG_WARN;
  loom_model* m = nullptr;
  loom_error* err = nullptr;
  const loom_status s = loom_model_load(path.c_str(), params ? params : &p, &m, &err);
  INFO((err ? loom_error_message(err) : ""));
  REQUIRE(s == LOOM_OK);
  REQUIRE(err == nullptr);
  return m;
}

}  // namespace

TEST_CASE("C API: versions and status names are stable") {
  CHECK(loom_version_number() == LOOM_VERSION_NUMBER);
  CHECK(std::string(loom_version_string()) ==
        std::to_string(LOOM_VERSION_MAJOR) + "." + std::to_string(LOOM_VERSION_MINOR) + "." +
            std::to_string(LOOM_VERSION_PATCH));
  CHECK(std::string(loom_status_str(LOOM_OK)) == "ok");
  CHECK(std::string(loom_status_str(LOOM_ERR_CONTEXT_FULL)) == "context_full");
  CHECK(std::string(loom_status_str(LOOM_ERR_BUFFER_TOO_SMALL)) == "buffer_too_small");
  CHECK(std::string(loom_status_str(-5)) == "unknown");
  CHECK(std::string(loom_status_str(999)) == "unknown");
  // loom_status mirrors loom::ErrorCode one for one.
  CHECK(LOOM_ERR_IO == static_cast<int>(loom::ErrorCode::io));
  CHECK(LOOM_ERR_MISSING_TENSOR == static_cast<int>(loom::ErrorCode::missing_tensor));
  CHECK(LOOM_ERR_NUMERIC == static_cast<int>(loom::ErrorCode::numeric));
  CHECK(LOOM_ERR_BUFFER_TOO_SMALL == static_cast<int>(loom::ErrorCode::buffer_too_small));
  CHECK(std::string(loom_status_str(LOOM_ERR_TEMPLATE)) == "template");
  CHECK(LOOM_ERR_TEMPLATE == static_cast<int>(loom::ErrorCode::template_error));
}

TEST_CASE("C API: load errors carry status, message and context, NULLs are refused") {
  loom_model* m = reinterpret_cast<loom_model*>(0x1);
  loom_error* err = nullptr;
  CHECK(loom_model_load(nullptr, nullptr, &m, &err) == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(m == nullptr);
  REQUIRE(err != nullptr);
  CHECK(std::string(loom_error_message(err)).find("path") != std::string::npos);
  loom_error_free(err);
  CHECK(loom_model_load("x", nullptr, nullptr, nullptr) == LOOM_ERR_INVALID_ARGUMENT);

  t::TempDir dir;
  CHECK(loom_model_load((dir / "nope").c_str(), nullptr, &m, &err) == LOOM_ERR_IO);
  REQUIRE(err != nullptr);
  CHECK(loom_error_status(err) == LOOM_ERR_IO);
  CHECK(std::string(loom_error_file(err)).find("nope") != std::string::npos);
  loom_error_free(err);

  // A GGUF v3 header cut off in the middle of its tensor count.
  t::write_file_bytes(dir / "bad.gguf", {'G', 'G', 'U', 'F', 3, 0, 0, 0, 1, 0});
  CHECK(loom_model_load((dir / "bad.gguf").c_str(), nullptr, &m, &err) == LOOM_ERR_FORMAT);
  CHECK(std::string(loom_error_message(err)).find("bad.gguf") != std::string::npos);
  loom_error_free(err);

  loom_error_free(nullptr);
  loom_model_free(nullptr);
  loom_tokenizer_free(nullptr);
  loom_session_free(nullptr);
  loom_sampler_free(nullptr);
  CHECK(std::string(loom_error_message(nullptr)).empty());
  CHECK(loom_error_problem_count(nullptr) == 0);
}

TEST_CASE("C API: a failed load lists every manifest problem by index") {
  t::TempDir dir;
  auto config = t::tiny_llama_config();
  loom::export_model(config, t::random_weights(config, 3), dir / "m", loom::ExportFormat::safetensors);
  auto wrong = config;
  wrong.n_kv_heads = 4;
  { std::ofstream(dir / "m" / "config.json") << loom::hf_config_json(wrong); }
  loom_model* m = nullptr;
  loom_error* err = nullptr;
  REQUIRE(loom_model_load((dir / "m").c_str(), nullptr, &m, &err) == LOOM_ERR_SHAPE_MISMATCH);
  REQUIRE(loom_error_problem_count(err) == 4);
  loom_problem p;
  loom_problem_init(&p);
  // Find blk.0.attn_v's problem among the four.
  size_t index = 4;
  for (size_t i = 0; i < 4; ++i) {
    REQUIRE(loom_error_problem(err, i, &p) == LOOM_OK);
    if (std::string(p.internal_name) == "blk.0.attn_v") index = i;
  }
  REQUIRE(index < 4);
  REQUIRE(loom_error_problem(err, index, &p) == LOOM_OK);
  CHECK(p.kind == LOOM_PROBLEM_SHAPE_MISMATCH);
  CHECK(std::string(p.internal_name) == "blk.0.attn_v");
  CHECK(p.expected_rank == 2);
  CHECK(p.expected_shape[0] == 64);
  CHECK(p.found_shape[0] == 32);
  CHECK(std::string(p.external_name) == "model.layers.0.self_attn.v_proj.weight");
  CHECK(loom_error_problem(err, 4, &p) == LOOM_ERR_INVALID_ARGUMENT);
  // An older caller's smaller struct gets only the fields it knows.
  struct old_problem {
    uint32_t struct_size;
    int32_t kind;
  } small{sizeof(old_problem), -1};
  REQUIRE(loom_error_problem(err, 0, reinterpret_cast<loom_problem*>(&small)) == LOOM_OK);
  CHECK(small.kind == LOOM_PROBLEM_SHAPE_MISMATCH);
  CHECK(small.struct_size == sizeof(old_problem));
  loom_error_free(err);
}

TEST_CASE("C API: progress callback cancels and reaches 1") {
  struct State {
    int calls = 0;
    float last = -1;
    int stop_after = 1000;
  } state;
  loom_load_params p;
  loom_load_params_init(&p);
  p.log_level = LOOM_LOG_OFF;
  p.target_dtype = LOOM_DTYPE_F16;
  p.progress = [](void* user, float fraction, const char*) {
    auto* s = static_cast<State*>(user);
    s->last = fraction;
    return ++s->calls < s->stop_after ? 1 : 0;
  };
  p.progress_user = &state;
  loom_model* m = load(demo_dir(), &p);
  CHECK(state.last == 1.0f);
  loom_model_free(m);

  state = State{};
  state.stop_after = 1;
  loom_error* err = nullptr;
  CHECK(loom_model_load(demo_dir().c_str(), &p, &m, &err) == LOOM_ERR_CANCELLED);
  CHECK(m == nullptr);
  loom_error_free(err);
}

TEST_CASE("C API: logs go to the host's callback") {
  std::vector<std::string> messages;
  loom_load_params p;
  loom_load_params_init(&p);
  p.log_level = LOOM_LOG_INFO;
  p.log = [](void* user, int32_t, const char* msg) { static_cast<std::vector<std::string>*>(user)->emplace_back(msg); };
  p.log_user = &messages;
  loom_model* m = load(demo_dir(), &p);
  REQUIRE_FALSE(messages.empty());
  CHECK(messages.back().find("loaded") != std::string::npos);
  loom_model_free(m);
  p.log_level = 42;
  loom_error* err = nullptr;
  CHECK(loom_model_load(demo_dir().c_str(), &p, &m, &err) == LOOM_ERR_INVALID_ARGUMENT);
  loom_error_free(err);
}

TEST_CASE("C API: model info, eos ids and the load report") {
  loom_model* m = load(demo_dir());
  loom_model_info info;
  loom_model_info_init(&info);
  REQUIRE(loom_model_get_info(m, &info) == LOOM_OK);
  CHECK(std::string(info.architecture) == "llama");
  CHECK(info.hidden_size == 64);
  CHECK(info.n_layers == 2);
  CHECK(info.has_tokenizer == 1);
  CHECK(info.bos_id >= 0);
  CHECK(info.weight_bytes > 0);
  CHECK(loom_model_get_info(nullptr, &info) == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(loom_model_get_info(m, nullptr) == LOOM_ERR_INVALID_ARGUMENT);

  size_t n = 0;
  REQUIRE(loom_model_eos_ids(m, nullptr, 0, &n) == LOOM_OK);
  REQUIRE(n >= 1);
  std::vector<int32_t> eos(n);
  REQUIRE(loom_model_eos_ids(m, eos.data(), eos.size(), &n) == LOOM_OK);
  CHECK(eos[0] == info.eos_id);

  size_t len = 0;
  REQUIRE(loom_model_load_report(m, 1, nullptr, 0, &len) == LOOM_OK);
  REQUIRE(len > 100);
  std::string json(len + 1, '\0');
  CHECK(loom_model_load_report(m, 1, json.data(), 10, &len) == LOOM_ERR_BUFFER_TOO_SMALL);
  REQUIRE(loom_model_load_report(m, 1, json.data(), json.size(), &len) == LOOM_OK);
  CHECK(json.find("\"architecture\": \"llama\"") != std::string::npos);
  CHECK(json.find("\"trace\"") != std::string::npos);
  CHECK(json[len] == '\0');
  loom_model_free(m);
}

TEST_CASE("C API: tokenizers, alone and from a model") {
  loom_tokenizer* alone = nullptr;
  loom_error* err = nullptr;
  REQUIRE(loom_tokenizer_load((demo_dir() / "tokenizer.json").c_str(), &alone, &err) == LOOM_OK);
  loom_model* m = load(demo_dir());
  loom_tokenizer* from_model = nullptr;
  REQUIRE(loom_model_tokenizer(m, &from_model, &err) == LOOM_OK);
  loom_model_free(m);  // the tokenizer handle outlives the model

  const std::string text = "Hello loom, hello world!";
  size_t n = 0;
  REQUIRE(loom_tokenize(alone, text.data(), text.size(), 0, nullptr, 0, &n, &err) == LOOM_OK);
  REQUIRE(n > 0);
  std::vector<int32_t> a(n), b(n + 1);
  REQUIRE(loom_tokenize(alone, text.data(), text.size(), 0, a.data(), a.size(), &n, &err) == LOOM_OK);
  size_t nb = 0;
  REQUIRE(loom_tokenize(from_model, text.data(), text.size(), LOOM_TOKENIZE_ADD_SPECIAL, b.data(), b.size(), &nb, &err) == LOOM_OK);
  CHECK(nb == n + 1);  // BOS added
  CHECK(std::equal(a.begin(), a.end(), b.begin() + 1));
  CHECK(loom_tokenize(alone, text.data(), text.size(), 0, a.data(), 1, &n, &err) == LOOM_ERR_BUFFER_TOO_SMALL);
  loom_error_free(err);

  size_t len = 0;
  REQUIRE(loom_detokenize(alone, a.data(), a.size(), 0, nullptr, 0, &len, nullptr) == LOOM_OK);
  std::string back(len + 1, '\0');
  REQUIRE(loom_detokenize(alone, a.data(), a.size(), 0, back.data(), back.size(), &len, nullptr) == LOOM_OK);
  back.resize(len);
  CHECK(back == text);
  REQUIRE(loom_token_piece(alone, a[0], back.data(), back.size(), &len, nullptr) == LOOM_OK);
  CHECK(len > 0);
  CHECK(loom_token_piece(alone, 1 << 30, back.data(), back.size(), &len, &err) == LOOM_ERR_INVALID_ARGUMENT);
  loom_error_free(err);
  CHECK(loom_tokenizer_vocab_size(alone) > 256);
  CHECK(loom_tokenizer_vocab_size(nullptr) == 0);
  CHECK(loom_tokenize(nullptr, "x", 1, 0, nullptr, 0, &n, nullptr) == LOOM_ERR_INVALID_ARGUMENT);
  loom_tokenizer* none = nullptr;
  CHECK(loom_tokenizer_load(nullptr, &none, nullptr) == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(none == nullptr);
  loom_tokenizer_free(alone);
  loom_tokenizer_free(from_model);
}

TEST_CASE("C API: sessions prefill, step, roll back, and report context full") {
  loom_model* m = load(demo_dir());
  loom_session_params sp;
  loom_session_params_init(&sp);
  sp.context_length = 8;
  sp.n_threads = 2;
  sp.all_logits = 1;
  loom_session* s = nullptr;
  loom_error* err = nullptr;
  REQUIRE(loom_session_create(m, &sp, &s, &err) == LOOM_OK);
  CHECK(loom_session_context_length(s) == 8);
  CHECK(loom_session_kv_cache_bytes(s) > 0);
  size_t vocab = 7;
  CHECK(loom_logits(s, &vocab) == nullptr);
  CHECK(vocab == 0);
  const int32_t prompt[] = {1, 40, 41, 42};
  REQUIRE(loom_prefill(s, prompt, 4, &err) == LOOM_OK);
  CHECK(loom_session_position(s) == 4);
  CHECK(loom_logit_rows(s) == 4);
  const float* last = loom_logits(s, &vocab);
  REQUIRE(last != nullptr);
  const float* third = loom_logits_at(s, 3, &vocab);
  CHECK(third == last);
  CHECK(loom_logits_at(s, 4, &vocab) == nullptr);
  std::vector<float> saved(last, last + vocab);

  REQUIRE(loom_step(s, 43, &err) == LOOM_OK);
  REQUIRE(loom_session_rollback(s, 4, &err) == LOOM_OK);
  CHECK(loom_session_position(s) == 4);
  CHECK(loom_step(s, 1 << 30, &err) == LOOM_ERR_INVALID_ARGUMENT);
  loom_error_free(err);
  const int32_t four[] = {5, 6, 7, 8};
  CHECK(loom_prefill(s, four, 4, &err) == LOOM_OK);
  CHECK(loom_step(s, 9, &err) == LOOM_ERR_CONTEXT_FULL);
  CHECK(std::string(loom_error_message(err)).find("context") != std::string::npos);
  loom_error_free(err);
  CHECK(loom_session_rollback(s, 99, &err) == LOOM_ERR_INVALID_ARGUMENT);
  loom_error_free(err);
  CHECK(loom_session_reset(s) == LOOM_OK);
  CHECK(loom_session_position(s) == 0);
  CHECK(loom_prefill(s, nullptr, 2, &err) == LOOM_ERR_INVALID_ARGUMENT);
  loom_error_free(err);
  CHECK(loom_prefill(s, prompt, 0, &err) == LOOM_ERR_INVALID_ARGUMENT);  // nothing to process
  loom_error_free(err);
  CHECK(loom_session_reset(nullptr) == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(loom_session_position(nullptr) == -1);
  CHECK(loom_step(nullptr, 1, nullptr) == LOOM_ERR_INVALID_ARGUMENT);

  sp.kv_dtype = 7;
  loom_session* bad = nullptr;
  CHECK(loom_session_create(m, &sp, &bad, &err) == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(bad == nullptr);
  loom_error_free(err);
  loom_session_free(s);
  loom_model_free(m);
}

TEST_CASE("C API: params structs from older (smaller) and newer (larger) callers") {
  loom_model* m = load(demo_dir());
  // An old caller that only knew struct_size and context_length.
  struct old_params {
    uint32_t struct_size;
    int32_t context_length;
  } old{sizeof(old_params), 16};
  loom_session* s = nullptr;
  REQUIRE(loom_session_create(m, reinterpret_cast<const loom_session_params*>(&old), &s, nullptr) == LOOM_OK);
  CHECK(loom_session_context_length(s) == 16);
  loom_session_free(s);
  // A newer caller with fields this library does not know: they are ignored.
  struct newer_params {
    loom_session_params known;
    int64_t future_field;
  } newer;
  loom_session_params_init(&newer.known);
  newer.known.struct_size = sizeof(newer_params);
  newer.known.context_length = 12;
  newer.future_field = 12345;
  REQUIRE(loom_session_create(m, &newer.known, &s, nullptr) == LOOM_OK);
  CHECK(loom_session_context_length(s) == 12);
  loom_session_free(s);
  // A garbage struct_size below 4 bytes falls back to defaults.
  loom_session_params tiny;
  loom_session_params_init(&tiny);
  tiny.struct_size = 2;
  tiny.context_length = 3;
  REQUIRE(loom_session_create(m, &tiny, &s, nullptr) == LOOM_OK);
  CHECK(loom_session_context_length(s) != 3);
  loom_session_free(s);
  loom_model_free(m);
}

TEST_CASE("C API: greedy generation equals the reference forward's greedy tokens over 32 steps") {
  t::TempDir dir;
  auto config = t::tiny_llama_config();
  const auto weights = t::random_weights(config, 77);
  loom::export_model(config, weights, dir / "m", loom::ExportFormat::safetensors);
  loom_load_params lp;
  loom_load_params_init(&lp);
  lp.log_level = LOOM_LOG_WARN;
  lp.load_tokenizer = 0;
  loom_model* m = load(dir / "m", &lp);
  loom_session* s = nullptr;
  REQUIRE(loom_session_create(m, nullptr, &s, nullptr) == LOOM_OK);
  loom_sampler_params sp;
  loom_sampler_params_init(&sp);
  sp.temperature = 0.0f;
  loom_sampler* smp = nullptr;
  REQUIRE(loom_sampler_create(&sp, &smp, nullptr) == LOOM_OK);

  std::vector<int32_t> tokens{1, 17, 42};
  REQUIRE(loom_prefill(s, tokens.data(), tokens.size(), nullptr) == LOOM_OK);
  std::vector<int32_t> generated;
  for (int i = 0; i < 32; ++i) {
    int32_t next = -1;
    REQUIRE(loom_sample(s, smp, &next, nullptr) == LOOM_OK);
    generated.push_back(next);
    REQUIRE(loom_step(s, next, nullptr) == LOOM_OK);
  }
  // The reference: recompute the whole sequence, argmax of the last position each time.
  std::vector<int32_t> seq = tokens;
  std::vector<int32_t> expected;
  for (int i = 0; i < 32; ++i) {
    const auto logits = t::reference_logits(config, weights, seq);
    const auto& last = logits.back();
    const auto best = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    expected.push_back(best);
    seq.push_back(best);
  }
  CHECK(generated == expected);
  loom_sampler_free(smp);
  loom_session_free(s);
  loom_model_free(m);
}

TEST_CASE("C API: custom sampler stages, NaN logits and sample errors") {
  t::TempDir dir;
  auto config = t::tiny_llama_config();
  auto weights = t::random_weights(config, 78);
  loom::export_model(config, weights, dir / "ok", loom::ExportFormat::safetensors);
  weights.output.mutable_data<float>()[5 * config.hidden_size] = NAN;  // token 5's logit becomes NaN
  loom::export_model(config, weights, dir / "nan", loom::ExportFormat::safetensors);
  loom_load_params lp;
  loom_load_params_init(&lp);
  lp.log_level = LOOM_LOG_OFF;

  loom_model* m = load(dir / "ok", &lp);
  loom_session* s = nullptr;
  REQUIRE(loom_session_create(m, nullptr, &s, nullptr) == LOOM_OK);
  loom_sampler* smp = nullptr;
  REQUIRE(loom_sampler_create(nullptr, &smp, nullptr) == LOOM_OK);
  int32_t token = -1;
  loom_error* err = nullptr;
  CHECK(loom_sample(s, smp, &token, &err) == LOOM_ERR_INVALID_ARGUMENT);  // no logits yet
  loom_error_free(err);
  const int32_t prompt[] = {1, 2, 3};
  REQUIRE(loom_prefill(s, prompt, 3, nullptr) == LOOM_OK);

  // A stage that keeps only token 99 (whatever the filters left, it is forced in).
  struct Seen {
    size_t n = 0;
    size_t history = 0;
  } seen;
  REQUIRE(loom_sampler_add_stage(smp, "force-99",
                                 [](void* user, loom_candidate* c, size_t* n, const int32_t*, size_t n_history) -> int32_t {
                                   auto* state = static_cast<Seen*>(user);
                                   state->n = *n;
                                   state->history = n_history;
                                   c[0].id = 99;
                                   c[0].logit = 0.0f;
                                   *n = 1;
                                   return 0;
                                 },
                                 &seen) == LOOM_OK);
  REQUIRE(loom_sample(s, smp, &token, &err) == LOOM_OK);
  CHECK(token == 99);
  CHECK(seen.n >= 1);
  CHECK(loom_sampler_accept(smp, 7) == LOOM_OK);
  REQUIRE(loom_sample(s, smp, &token, &err) == LOOM_OK);
  CHECK(seen.history == 2);  // 99 and 7
  CHECK(loom_sampler_reset(smp) == LOOM_OK);
  CHECK(loom_sampler_add_stage(smp, "null", nullptr, nullptr) == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(loom_sampler_add_stage(nullptr, "x", nullptr, nullptr) == LOOM_ERR_INVALID_ARGUMENT);

  loom_sampler* stopper = nullptr;
  REQUIRE(loom_sampler_create(nullptr, &stopper, nullptr) == LOOM_OK);
  REQUIRE(loom_sampler_add_stage(stopper, "stop", [](void*, loom_candidate*, size_t*, const int32_t*, size_t) -> int32_t { return 3; },
                                 nullptr) == LOOM_OK);
  CHECK(loom_sample(s, stopper, &token, &err) == LOOM_ERR_CANCELLED);
  CHECK(std::string(loom_error_message(err)).find("stop") != std::string::npos);
  loom_error_free(err);
  loom_sampler* emptier = nullptr;
  REQUIRE(loom_sampler_create(nullptr, &emptier, nullptr) == LOOM_OK);
  REQUIRE(loom_sampler_add_stage(emptier, "empty", [](void*, loom_candidate*, size_t* n, const int32_t*, size_t) -> int32_t {
    *n = 0;
    return 0;
  }, nullptr) == LOOM_OK);
  CHECK(loom_sample(s, emptier, &token, &err) == LOOM_ERR_INVALID_ARGUMENT);
  loom_error_free(err);
  loom_sampler_free(stopper);
  loom_sampler_free(emptier);

  loom_model* bad = load(dir / "nan", &lp);
  loom_session* bs = nullptr;
  REQUIRE(loom_session_create(bad, nullptr, &bs, nullptr) == LOOM_OK);
  REQUIRE(loom_prefill(bs, prompt, 3, nullptr) == LOOM_OK);
  loom_sampler* plain = nullptr;
  REQUIRE(loom_sampler_create(nullptr, &plain, nullptr) == LOOM_OK);
  CHECK(loom_sample(bs, plain, &token, &err) == LOOM_ERR_NUMERIC);
  CHECK(std::string(loom_error_message(err)).find("NaN") != std::string::npos);
  loom_error_free(err);

  loom_sampler_params sp;
  loom_sampler_params_init(&sp);
  sp.repeat_penalty = 0.0f;
  loom_sampler* invalid = nullptr;
  CHECK(loom_sampler_create(&sp, &invalid, &err) == LOOM_ERR_INVALID_ARGUMENT);
  loom_error_free(err);
  loom_sampler_free(plain);
  loom_session_free(bs);
  loom_model_free(bad);
  loom_sampler_free(smp);
  loom_session_free(s);
  loom_model_free(m);
}

TEST_CASE("C API: generate streams text, stops on stop strings and reports why") {
  loom_model* m = load(demo_dir());
  loom_session* s = nullptr;
  REQUIRE(loom_session_create(m, nullptr, &s, nullptr) == LOOM_OK);
  loom_sampler_params sp;
  loom_sampler_params_init(&sp);
  sp.seed = 42;
  loom_sampler* smp = nullptr;
  REQUIRE(loom_sampler_create(&sp, &smp, nullptr) == LOOM_OK);
  std::string streamed;
  loom_generate_params gp;
  loom_generate_params_init(&gp);
  gp.max_tokens = 12;
  gp.on_text = [](void* user, const char* text, size_t len, int32_t) -> int32_t {
    static_cast<std::string*>(user)->append(text, len);
    return 1;
  };
  gp.user = &streamed;
  loom_generate_result r;
  loom_generate_result_init(&r);
  const std::string prompt = "Once upon a time";
  REQUIRE(loom_generate(s, smp, prompt.data(), prompt.size(), &gp, &r, nullptr) == LOOM_OK);
  CHECK(r.prompt_tokens > 1);
  CHECK(r.generated_tokens <= 12);
  CHECK((r.stop_reason == LOOM_STOP_MAX_TOKENS || r.stop_reason == LOOM_STOP_EOS));
  CHECK(r.generate_seconds >= 0.0);

  // Same seed, same text; a stop string made of the first generated characters stops
  // right there and is not emitted.
  loom_sampler_reset(smp);
  std::string again;
  gp.user = &again;
  REQUIRE(loom_generate(s, smp, prompt.data(), prompt.size(), &gp, &r, nullptr) == LOOM_OK);
  CHECK(again == streamed);
  if (streamed.size() >= 3) {
    const std::string stop = streamed.substr(1, 2);
    const char* stops[] = {stop.c_str()};
    gp.stop_strings = stops;
    gp.n_stop_strings = 1;
    std::string cut;
    gp.user = &cut;
    loom_sampler_reset(smp);
    REQUIRE(loom_generate(s, smp, prompt.data(), prompt.size(), &gp, &r, nullptr) == LOOM_OK);
    CHECK(r.stop_reason == LOOM_STOP_STRING);
    CHECK(cut == streamed.substr(0, 1));
  }
  // The callback can cancel.
  gp.n_stop_strings = 0;
  gp.on_text = [](void*, const char*, size_t, int32_t) -> int32_t { return 0; };
  loom_sampler_reset(smp);
  REQUIRE(loom_generate(s, smp, prompt.data(), prompt.size(), &gp, &r, nullptr) == LOOM_OK);
  CHECK((r.stop_reason == LOOM_STOP_CANCELLED || r.stop_reason == LOOM_STOP_EOS));
  CHECK(loom_generate(nullptr, smp, "x", 1, nullptr, nullptr, nullptr) == LOOM_ERR_INVALID_ARGUMENT);
  loom_sampler_free(smp);
  loom_session_free(s);
  loom_model_free(m);
}

TEST_CASE("C API: embeddings") {
  loom_model* m = load(demo_dir());
  loom_session* s = nullptr;
  REQUIRE(loom_session_create(m, nullptr, &s, nullptr) == LOOM_OK);
  const int32_t tokens[] = {1, 50, 60, 70};
  size_t dim = 0;
  REQUIRE(loom_embed(s, tokens, 4, LOOM_POOL_MEAN, 1, nullptr, 0, &dim, nullptr) == LOOM_OK);
  REQUIRE(dim == 64);
  std::vector<float> e(dim);
  REQUIRE(loom_embed(s, tokens, 4, LOOM_POOL_MEAN, 1, e.data(), e.size(), &dim, nullptr) == LOOM_OK);
  double norm = 0;
  for (float v : e) norm += static_cast<double>(v) * v;
  CHECK(std::abs(norm - 1.0) < 1e-5);
  loom_error* err = nullptr;
  CHECK(loom_embed(s, tokens, 4, 7, 1, e.data(), e.size(), &dim, &err) == LOOM_ERR_INVALID_ARGUMENT);
  loom_error_free(err);
  CHECK(loom_embed(s, tokens, 4, LOOM_POOL_LAST, 0, e.data(), 3, &dim, &err) == LOOM_ERR_BUFFER_TOO_SMALL);
  loom_error_free(err);
  loom_session_free(s);
  loom_model_free(m);
}

TEST_CASE("C API: the C++ wrapper owns handles and throws with the message") {
  auto model = loom::c::load_model(demo_dir().c_str());
  auto session = loom::c::make_session(model.get());
  auto sampler = loom::c::make_sampler();
  auto tok = loom::c::model_tokenizer(model.get());
  CHECK(loom_tokenizer_vocab_size(tok.get()) > 0);
  try {
    loom::c::load_model("/definitely/not/here");
    FAIL("expected an exception");
  } catch (const loom::c::error& e) {
    CHECK(e.status() == LOOM_ERR_IO);
    CHECK(std::string(e.what()).find("/definitely/not/here") != std::string::npos);
  }
}

// ---- generation defaults (generation_config.json) ----

TEST_CASE("C API: loom_model_generation_defaults fills what generation_config.json sets, within struct_size") {
  t::TempDir dir;
  const fs::path model_dir = dir / "demo";
  fs::copy(demo_dir(), model_dir);
  {
    std::ofstream out(model_dir / "generation_config.json");
    out << "{\"temperature\": 0.25, \"top_k\": 9, \"repetition_penalty\": 1.3, \"max_new_tokens\": 6,"
           " \"eos_token_id\": [5, 6],}";
  }
  loom_model* m = load(model_dir);

  loom_sampler_params sp;
  loom_sampler_params_init(&sp);
  sp.top_p = 0.5f;  // the caller's value: the file does not set top_p
  loom_generate_params gp;
  loom_generate_params_init(&gp);
  REQUIRE(loom_model_generation_defaults(m, &sp, &gp) == LOOM_OK);
  CHECK(sp.temperature == 0.25f);
  CHECK(sp.top_k == 9);
  CHECK(sp.top_p == 0.5f);
  CHECK(sp.repeat_penalty == 1.3f);
  CHECK(sp.min_p == 0.05f);  // loom's default, untouched
  CHECK(gp.max_tokens == 6);
  CHECK(gp.tokenize_flags == LOOM_TOKENIZE_ADD_SPECIAL);
  REQUIRE(loom_model_generation_defaults(m, nullptr, &gp) == LOOM_OK);  // either may be NULL

  // The file's eos ids are among the model's.
  int32_t ids[16];
  size_t n = 0;
  REQUIRE(loom_model_eos_ids(m, ids, 16, &n) == LOOM_OK);
  CHECK(std::find(ids, ids + n, 5) != ids + n);
  CHECK(std::find(ids, ids + n, 6) != ids + n);

  // An older caller whose struct ends before top_k: temperature is written, nothing after it.
  loom_sampler_params old;
  loom_sampler_params_init(&old);
  old.struct_size = static_cast<uint32_t>(offsetof(loom_sampler_params, top_k));
  old.top_k = -77;
  REQUIRE(loom_model_generation_defaults(m, &old, nullptr) == LOOM_OK);
  CHECK(old.temperature == 0.25f);
  CHECK(old.top_k == -77);
  loom_generate_params tiny;
  loom_generate_params_init(&tiny);
  tiny.struct_size = sizeof(uint32_t);
  REQUIRE(loom_model_generation_defaults(m, nullptr, &tiny) == LOOM_OK);
  CHECK(tiny.max_tokens == 128);

  // The report names each value's source.
  size_t len = 0;
  REQUIRE(loom_model_load_report(m, 0, nullptr, 0, &len) == LOOM_OK);
  std::string report(len + 1, '\0');
  REQUIRE(loom_model_load_report(m, 0, report.data(), report.size(), &len) == LOOM_OK);
  CHECK(report.find("\"generation\"") != std::string::npos);
  CHECK(report.find("\"source\": \"generation_config.json\"") != std::string::npos);
  CHECK(report.find("1 trailing comma was ignored") != std::string::npos);
  loom_model_free(m);

  // A model without the file leaves every field as the caller had it; NULL model fails.
  loom_model* plain = load(demo_dir());
  loom_sampler_params_init(&sp);
  loom_generate_params_init(&gp);
  REQUIRE(loom_model_generation_defaults(plain, &sp, &gp) == LOOM_OK);
  CHECK(sp.temperature == 0.8f);
  CHECK(sp.top_k == 40);
  CHECK(gp.max_tokens == 128);
  loom_model_free(plain);
  CHECK(loom_model_generation_defaults(nullptr, &sp, &gp) == LOOM_ERR_INVALID_ARGUMENT);
}

TEST_CASE("C API: loom_load_params.repack packs q8_0 projections where the CPU has the kernel, and refuses unknown modes") {
  LOOM_REQUIRE_REFERENCE(ref);
  const fs::path path = ref / "models" / "small-quant" / "small-quant-q8_0.gguf";
  loom_load_params p;
  loom_load_params_init(&p);
  CHECK(p.repack == LOOM_REPACK_OFF);
  p.log_level = LOOM_LOG_WARN;
  p.repack = LOOM_REPACK_AUTO;
  loom_model* m = load(path, &p);
  size_t len = 0;
  REQUIRE(loom_model_load_report(m, 1, nullptr, 0, &len) == LOOM_OK);  // the size
  std::string report(len, '\0');
  REQUIRE(loom_model_load_report(m, 1, report.data(), report.size() + 1, &len) == LOOM_OK);
  // The packed q8_0 kernels run on AVX-512 VNNI and on AVX2.
  const bool packed = loom::active_isa() >= loom::Isa::avx2;
  CHECK((report.find("\"repacked\": 29") != std::string::npos) == packed);
  CHECK((report.find("\"packing\": \"q8_0_x16\"") != std::string::npos) == packed);
  loom_model_free(m);

  p.repack = 7;
  loom_model* bad = nullptr;
  loom_error* err = nullptr;
  CHECK(loom_model_load(path.c_str(), &p, &bad, &err) == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(bad == nullptr);
  REQUIRE(err != nullptr);
  CHECK(std::string(loom_error_message(err)).find("unknown repack mode 7") != std::string::npos);
  loom_error_free(err);
}
