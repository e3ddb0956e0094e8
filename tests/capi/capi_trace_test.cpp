// The forward-pass trace through the C API: the events, their order and shapes, their
// values against the C++ hook's, cancellation, and older callers without the fields.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "loom.h"
#include "loom/demo.hpp"
#include "loom/loader.hpp"
#include "loom/session.hpp"
#include "loom/trace.hpp"
#include "support/test_support.hpp"

namespace fs = std::filesystem;
namespace t = loom::test;

namespace {

constexpr int64_t kHidden = 64;
constexpr int64_t kLayers = 2;

// A tiny demo model (byte-level tokenizer, random weights), written once per process.
const fs::path& trace_model_dir() {
  static t::TempDir dir;
  static const fs::path path = [] {
    const fs::path p = dir / "demo";
    loom::DemoOptions o;
    o.hidden_size = kHidden;
    o.n_layers = kLayers;
    o.n_heads = 4;
    o.n_kv_heads = 2;
    o.intermediate_size = 96;
    loom::write_demo_model(p, o);
    return p;
  }();
  return path;
}

struct Event {
  std::string stage;
  int32_t layer = -1;
  int64_t n_tokens = 0;
  int64_t dim = 0;
  std::vector<float> values;
  bool operator==(const Event&) const = default;
};

struct Recorder {
  std::vector<Event> events;
  // Cancel (return `rc`) at this stage and layer while armed.
  bool armed = false;
  std::string cancel_stage;
  int32_t cancel_layer = -1;
  int32_t rc = 1;
};

int32_t record(void* user, const char* stage, int32_t layer, int64_t n_tokens, int64_t dim, const float* values) {
  auto* r = static_cast<Recorder*>(user);
  r->events.push_back({stage, layer, n_tokens, dim, std::vector<float>(values, values + n_tokens * dim)});
  return r->armed && r->cancel_stage == stage && r->cancel_layer == layer ? r->rc : 0;
}

loom_model* load_c() {
  loom_load_params p;
  loom_load_params_init(&p);
  p.log_level = LOOM_LOG_WARN;
  loom_model* m = nullptr;
  REQUIRE(loom_model_load(trace_model_dir().c_str(), &p, &m, nullptr) == LOOM_OK);
  return m;
}

loom_session* traced_session(loom_model* m, Recorder* r, int32_t all_logits = 0) {
  loom_session_params sp;
  loom_session_params_init(&sp);
  sp.context_length = 16;
  sp.n_threads = 1;
  sp.all_logits = all_logits;
  sp.trace = record;
  sp.trace_user = r;
  loom_session* s = nullptr;
  REQUIRE(loom_session_create(m, &sp, &s, nullptr) == LOOM_OK);
  return s;
}

int32_t vocab_of(loom_model* m) {
  loom_model_info info;
  loom_model_info_init(&info);
  REQUIRE(loom_model_get_info(m, &info) == LOOM_OK);
  return info.vocab_size;
}

}  // namespace

TEST_CASE("C API: the trace sees every stage in order, with the shapes and the C++ hook's values") {
  loom_model* m = load_c();
  const int32_t vocab = vocab_of(m);
  Recorder r;
  loom_session* s = traced_session(m, &r);
  const int32_t prompt[] = {1, 40, 41, 42};
  REQUIRE(loom_prefill(s, prompt, 4, nullptr) == LOOM_OK);
  REQUIRE(loom_step(s, 43, nullptr) == LOOM_OK);

  struct Want {
    const char* stage;
    int32_t layer;
    int64_t n_tokens;
    int64_t dim;
  };
  const std::vector<Want> want{
      {"embd", -1, 4, kHidden},     {"attn_out", 0, 4, kHidden}, {"ffn_out", 0, 4, kHidden},
      {"attn_out", 1, 4, kHidden},  {"ffn_out", 1, 4, kHidden},  {"output_norm", -1, 1, kHidden},
      {"logits", -1, 1, vocab},     {"embd", -1, 1, kHidden},    {"attn_out", 0, 1, kHidden},
      {"ffn_out", 0, 1, kHidden},   {"attn_out", 1, 1, kHidden}, {"ffn_out", 1, 1, kHidden},
      {"output_norm", -1, 1, kHidden}, {"logits", -1, 1, vocab}};
  REQUIRE(r.events.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("event " << i);
    CHECK(r.events[i].stage == want[i].stage);
    CHECK(r.events[i].layer == want[i].layer);
    CHECK(r.events[i].n_tokens == want[i].n_tokens);
    CHECK(r.events[i].dim == want[i].dim);
  }
  // The last event is the logits the session then exposes.
  size_t n = 0;
  const float* logits = loom_logits(s, &n);
  REQUIRE(n == static_cast<size_t>(vocab));
  CHECK(std::vector<float>(logits, logits + n) == r.events.back().values);

  // The same passes through the C++ hook: the same names split the same way, the same
  // values bit for bit.
  auto model = loom::load_model(trace_model_dir(), t::quiet_load_options());
  std::vector<Event> cpp;
  loom::SessionOptions o;
  o.context_length = 16;
  o.n_threads = 1;
  o.trace = [&](const loom::TraceEvent& e) {
    const auto split = loom::split_trace_name(e.name);
    cpp.push_back({std::string(split.stage), split.layer, e.n_tokens, e.dim,
                   std::vector<float>(e.values, e.values + e.n_tokens * e.dim)});
  };
  loom::Session session(model, o);
  session.prefill(prompt);
  session.step(43);
  REQUIRE(cpp.size() == r.events.size());
  for (size_t i = 0; i < cpp.size(); ++i) {
    INFO("event " << i << " " << cpp[i].stage);
    CHECK(cpp[i] == r.events[i]);
  }
  loom_session_free(s);

  // all_logits: the final stages see every prefilled row.
  Recorder all;
  s = traced_session(m, &all, 1);
  REQUIRE(loom_prefill(s, prompt, 4, nullptr) == LOOM_OK);
  REQUIRE(all.events.size() == 7);
  CHECK(all.events[5].stage == "output_norm");
  CHECK(all.events[5].n_tokens == 4);
  CHECK(all.events[6].n_tokens == 4);
  CHECK(all.events[6].dim == vocab);
  loom_session_free(s);
  loom_model_free(m);
}

TEST_CASE("C API: a nonzero trace return cancels the pass and leaves the session as it was") {
  loom_model* m = load_c();
  Recorder r;
  loom_session* s = traced_session(m, &r);
  const int32_t prompt[] = {1, 40, 41, 42};
  REQUIRE(loom_prefill(s, prompt, 4, nullptr) == LOOM_OK);
  size_t n = 0;
  const float* p = loom_logits(s, &n);
  const std::vector<float> before(p, p + n);

  // Cancel in the middle of a block, and at the very last stage (after the new logits
  // exist): neither may change the position or the logits.
  for (const auto& [stage, layer] : std::vector<std::pair<std::string, int32_t>>{{"ffn_out", 1}, {"logits", -1}, {"embd", -1}}) {
    INFO(stage);
    r.armed = true;
    r.cancel_stage = stage;
    r.cancel_layer = layer;
    r.rc = 7;
    loom_error* err = nullptr;
    CHECK(loom_step(s, 43, &err) == LOOM_ERR_CANCELLED);
    REQUIRE(err != nullptr);
    const std::string msg = loom_error_message(err);
    CHECK(msg.find("trace callback") != std::string::npos);
    CHECK(msg.find("returned 7") != std::string::npos);
    loom_error_free(err);
    CHECK(loom_session_position(s) == 4);
    CHECK(loom_logit_rows(s) == 1);
    p = loom_logits(s, &n);
    CHECK(std::vector<float>(p, p + n) == before);
    CHECK(r.events.back().stage == stage);
  }

  // Disarmed, the step gives what a session that was never cancelled gives.
  r.armed = false;
  REQUIRE(loom_step(s, 43, nullptr) == LOOM_OK);
  p = loom_logits(s, &n);
  const std::vector<float> after(p, p + n);
  Recorder clean;
  loom_session* c = traced_session(m, &clean);
  REQUIRE(loom_prefill(c, prompt, 4, nullptr) == LOOM_OK);
  REQUIRE(loom_step(c, 43, nullptr) == LOOM_OK);
  p = loom_logits(c, &n);
  CHECK(std::vector<float>(p, p + n) == after);
  loom_session_free(c);
  loom_session_free(s);
  loom_model_free(m);
}

TEST_CASE("C API: a session_params struct from before the trace fields gets no trace") {
  loom_model* m = load_c();
  Recorder r;
  loom_session_params sp;
  loom_session_params_init(&sp);
  CHECK(sp.trace == nullptr);
  CHECK(sp.trace_user == nullptr);
  sp.context_length = 16;
  sp.trace = record;
  sp.trace_user = &r;
  // An older caller's struct ends where the trace fields begin; the bytes after it are
  // not the library's to read.
  sp.struct_size = static_cast<uint32_t>(offsetof(loom_session_params, trace));
  loom_session* s = nullptr;
  REQUIRE(loom_session_create(m, &sp, &s, nullptr) == LOOM_OK);
  const int32_t prompt[] = {1, 40};
  REQUIRE(loom_prefill(s, prompt, 2, nullptr) == LOOM_OK);
  CHECK(r.events.empty());
  CHECK(loom_session_context_length(s) == 16);
  loom_session_free(s);
  sp.struct_size = sizeof sp;
  REQUIRE(loom_session_create(m, &sp, &s, nullptr) == LOOM_OK);
  REQUIRE(loom_prefill(s, prompt, 2, nullptr) == LOOM_OK);
  CHECK(r.events.size() == 3 + 2 * kLayers);  // embd, two per block, output_norm, logits
  loom_session_free(s);
  loom_model_free(m);
}
