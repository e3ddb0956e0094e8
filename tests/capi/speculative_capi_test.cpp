// The C API's speculative decoding: loom_generate_speculative with each drafter (a draft
// model — the quantized copy of the target —, prompt lookup, a host callback) gives
// stories260K's greedy text exactly (llama2.c's 200 tokens), with its statistics; bad
// input (another vocabulary, k = 0, invalid ids from a callback, NULLs, older structs)
// gets a clear status.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "loom.h"
#include "support/reference_data.hpp"
#include "capi/capi_support.hpp"
#include "support/test_support.hpp"

namespace t = loom::test;

namespace {

using loom::test::load_quiet;

std::string message_of(loom_error* err) {
  std::string m = err != nullptr ? loom_error_message(err) : "";
  loom_error_free(err);
  return m;
}

int32_t append_text(void* user, const char* piece, size_t len, int32_t) {
  static_cast<std::string*>(user)->append(piece, len);
  return 1;
}

struct Run {
  loom_status status = LOOM_OK;
  std::string text;
  std::string error;
  loom_generate_result result{};
  loom_speculative_stats stats{};
};

Run generate(loom_session* s, loom_sampler* sampler, loom_drafter* d, const loom_speculative_params* sp,
             const char* prompt = "", int32_t max_tokens = 200) {
  Run r;
  loom_generate_params gp;
  loom_generate_params_init(&gp);
  gp.max_tokens = max_tokens;
  gp.on_text = append_text;
  gp.user = &r.text;
  loom_generate_result_init(&r.result);
  loom_speculative_stats_init(&r.stats);
  loom_sampler_reset(sampler);
  loom_error* err = nullptr;
  r.status = loom_generate_speculative(s, sampler, prompt, std::strlen(prompt), &gp, d, sp, &r.result, &r.stats, &err);
  r.error = message_of(err);
  return r;
}

std::string trimmed(std::string s) {
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// A host drafter proposing the known greedy continuation with every fourth token wrong.
struct Oracle {
  std::vector<int32_t> truth;
  size_t accepted_calls = 0;
  size_t accepted_total = 0;
};

int32_t oracle_draft(void* user, const int32_t* /*context*/, size_t n_context, int32_t* draft, size_t max_draft,
                     size_t* n_draft) {
  auto* o = static_cast<Oracle*>(user);
  const size_t at = n_context - 1;  // the context starts with BOS
  size_t n = 0;
  for (; n < max_draft && at + n < o->truth.size(); ++n) {
    const size_t j = at + n;
    draft[n] = j % 4 == 3 ? (o->truth[j] + 1) % 512 : o->truth[j];
  }
  *n_draft = n;
  return 0;
}

void oracle_accepted(void* user, size_t accepted, size_t drafted) {
  auto* o = static_cast<Oracle*>(user);
  ++o->accepted_calls;
  o->accepted_total += accepted;
  CHECK(accepted <= drafted);
}

}  // namespace

TEST_CASE("C API speculative: every drafter reproduces stories260K's greedy 200 tokens (llama2.c)") {
  LOOM_REQUIRE_REFERENCE(ref);
  const auto dir = ref / "models" / "stories260K";
  const std::string want = trimmed(t::read_file_text(dir / "expected" / "greedy200.txt"));
  loom_model* target = load_quiet((dir / "hf").string());
  loom_model* copy = nullptr;
  REQUIRE(loom_model_draft_copy(target, "q8_0", &copy, nullptr) == LOOM_OK);
  loom_session_params sp;
  loom_session_params_init(&sp);
  sp.n_threads = 1;
  loom_session* s = nullptr;
  REQUIRE(loom_session_create(target, &sp, &s, nullptr) == LOOM_OK);
  loom_sampler_params smp;
  loom_sampler_params_init(&smp);
  smp.temperature = 0.0f;
  loom_sampler* greedy = nullptr;
  REQUIRE(loom_sampler_create(&smp, &greedy, nullptr) == LOOM_OK);

  Oracle oracle;
  oracle.truth = t::read_ids(dir / "expected" / "greedy200.ids.txt");
  loom_drafter* model_drafter = nullptr;
  REQUIRE(loom_drafter_create_model(copy, target, nullptr, &model_drafter, nullptr) == LOOM_OK);
  loom_model_free(copy);  // the drafter keeps its model alive
  loom_drafter* lookup = nullptr;
  REQUIRE(loom_drafter_create_lookup(0, 0, &lookup, nullptr) == LOOM_OK);
  loom_drafter* host = nullptr;
  REQUIRE(loom_drafter_create_callback("oracle", oracle_draft, oracle_accepted, &oracle, &host, nullptr) == LOOM_OK);

  for (int32_t k : {1, 4, 8}) {
    loom_speculative_params knobs;
    loom_speculative_params_init(&knobs);
    CHECK(knobs.max_draft == 8);
    CHECK(knobs.adaptive == 1);
    knobs.max_draft = k;
    knobs.adaptive = 0;
    for (auto [name, d] : {std::pair<const char*, loom_drafter*>{"draft model", model_drafter}, {"lookup", lookup},
                           {"callback", host}, {"none", nullptr}}) {
      INFO(name << ", k " << k);
      const Run r = generate(s, greedy, d, &knobs);
      REQUIRE(r.status == LOOM_OK);
      CHECK(r.result.generated_tokens == 200);
      CHECK(r.result.stop_reason == LOOM_STOP_MAX_TOKENS);
      CHECK(trimmed(r.text) == want);
      CHECK(r.stats.accepted <= r.stats.drafted);
      CHECK(r.stats.target_passes <= 200);
      CHECK(r.stats.tokens_per_target_pass == Approx(200.0 / static_cast<double>(r.stats.target_passes)));
      if (d == nullptr) {
        CHECK(r.stats.drafted == 0);
        CHECK(r.stats.target_passes == 200);
      }
      if (d == model_drafter) {
        CHECK(r.stats.acceptance > 0.8);
        if (k > 1) CHECK(r.stats.tokens_per_target_pass > 1.5);
      }
    }
  }
  CHECK(oracle.accepted_calls > 0);
  CHECK(oracle.accepted_total > 0);
  size_t len = 99;
  REQUIRE(loom_drafter_warnings(lookup, nullptr, 0, &len) == LOOM_OK);
  CHECK(len == 0);

  // Defaults (params NULL: k 8, adaptive), result and stats NULL.
  loom_generate_params gp;
  loom_generate_params_init(&gp);
  gp.max_tokens = 50;
  loom_sampler_reset(greedy);
  CHECK(loom_generate_speculative(s, greedy, "Once", 4, &gp, lookup, nullptr, nullptr, nullptr, nullptr) == LOOM_OK);

  loom_drafter_free(model_drafter);
  loom_drafter_free(lookup);
  loom_drafter_free(host);
  loom_sampler_free(greedy);
  loom_session_free(s);
  loom_model_free(target);
}

TEST_CASE("C API speculative: a draft copy is the same whatever the target's conversion workers") {
  LOOM_REQUIRE_REFERENCE(ref);
  const std::string path = (ref / "models" / "tiny-llama" / "tiny-llama-f32.gguf").string();
  auto logits_of_copy = [&](int32_t workers) {
    loom_load_params p;
    loom_load_params_init(&p);
    p.log_level = LOOM_LOG_OFF;
    p.n_threads = workers;
    loom_model* target = nullptr;
    REQUIRE(loom_model_load(path.c_str(), &p, &target, nullptr) == LOOM_OK);
    loom_model* copy = nullptr;
    REQUIRE(loom_model_draft_copy(target, "q4_k", &copy, nullptr) == LOOM_OK);
    loom_model_free(target);  // the copy keeps what it shares alive
    loom_session_params sp;
    loom_session_params_init(&sp);
    sp.n_threads = 1;
    loom_session* s = nullptr;
    REQUIRE(loom_session_create(copy, &sp, &s, nullptr) == LOOM_OK);
    const int32_t prompt[] = {1, 450, 4996, 17354, 1701, 432, 17204};
    REQUIRE(loom_prefill(s, prompt, 7, nullptr) == LOOM_OK);
    size_t n = 0;
    const float* l = loom_logits(s, &n);
    std::vector<float> out(l, l + n);
    loom_session_free(s);
    loom_model_free(copy);
    return out;
  };
  const auto one = logits_of_copy(1);
  const auto three = logits_of_copy(3);
  REQUIRE(one.size() == 32000);
  CHECK(std::memcmp(one.data(), three.data(), one.size() * sizeof(float)) == 0);
}

TEST_CASE("C API speculative: bad input gets a clear status") {
  LOOM_REQUIRE_REFERENCE(ref);
  loom_model* target = load_quiet((ref / "models" / "stories260K" / "hf").string());
  loom_model* other = load_quiet((ref / "models" / "tiny-llama" / "tiny-llama-f32.gguf").string());
  loom_drafter* d = nullptr;
  loom_error* err = nullptr;
  CHECK(loom_drafter_create_model(other, target, nullptr, &d, &err) == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(d == nullptr);
  const std::string m = message_of(err);
  CHECK_THAT(m, Catch::Contains("32000") && Catch::Contains("512"));
  CHECK(loom_drafter_create_model(nullptr, target, nullptr, &d, nullptr) == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(loom_drafter_create_callback("x", nullptr, nullptr, nullptr, &d, nullptr) == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(loom_drafter_create_lookup(1, 2, &d, nullptr) == LOOM_ERR_INVALID_ARGUMENT);
  loom_model* copy = nullptr;
  CHECK(loom_model_draft_copy(target, "q9_z", &copy, &err) == LOOM_ERR_INVALID_ARGUMENT);
  CHECK_THAT(message_of(err), Catch::Contains("unknown dtype 'q9_z'"));
  CHECK(copy == nullptr);

  loom_session* s = nullptr;
  REQUIRE(loom_session_create(target, nullptr, &s, nullptr) == LOOM_OK);
  loom_sampler_params smp;
  loom_sampler_params_init(&smp);
  smp.temperature = 0.0f;
  loom_sampler* greedy = nullptr;
  REQUIRE(loom_sampler_create(&smp, &greedy, nullptr) == LOOM_OK);
  loom_drafter* lookup = nullptr;
  REQUIRE(loom_drafter_create_lookup(3, 1, &lookup, nullptr) == LOOM_OK);

  for (int32_t k : {0, 65, -3}) {
    loom_speculative_params knobs;
    loom_speculative_params_init(&knobs);
    knobs.max_draft = k;
    const Run r = generate(s, greedy, lookup, &knobs, "Once", 10);
    CHECK(r.status == LOOM_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.error, Catch::Contains("max_draft (k) must be 1..64"));
  }

  // A callback with an invalid id, one returning too many, one that cancels.
  struct Bad {
    int mode;
  };
  auto bad_fn = [](void* user, const int32_t*, size_t, int32_t* draft, size_t max_draft, size_t* n) -> int32_t {
    const int mode = static_cast<Bad*>(user)->mode;
    if (mode == 2) return 7;
    draft[0] = mode == 0 ? 512 : 1;
    *n = mode == 0 ? 1 : max_draft + 1;
    return 0;
  };
  const std::vector<std::pair<loom_status, std::string>> expect{
      {LOOM_ERR_INVALID_ARGUMENT, "proposed token id 512 at draft position 0, outside the vocabulary [0, 512)"},
      {LOOM_ERR_INVALID_ARGUMENT, "returned 9 tokens, allowed 0..8"},
      {LOOM_ERR_CANCELLED, "stopped the generation (returned 7)"}};
  for (int mode = 0; mode < 3; ++mode) {
    INFO("mode " << mode);
    Bad bad{mode};
    loom_drafter* host = nullptr;
    REQUIRE(loom_drafter_create_callback("host", bad_fn, nullptr, &bad, &host, nullptr) == LOOM_OK);
    loom_speculative_params knobs;
    loom_speculative_params_init(&knobs);
    knobs.adaptive = 0;
    const Run r = generate(s, greedy, host, &knobs, "Once", 20);
    CHECK(r.status == expect[static_cast<size_t>(mode)].first);
    CHECK_THAT(r.error, Catch::Contains(expect[static_cast<size_t>(mode)].second));
    // Nothing was fed but the prompt (all of it but its last token, pending in the round).
    CHECK(loom_session_position(s) >= 1);
    // The session and sampler go on working.
    const Run ok = generate(s, greedy, lookup, nullptr, "Once", 20);
    CHECK(ok.status == LOOM_OK);
    CHECK(ok.result.generated_tokens == 20);
    loom_drafter_free(host);
  }

  // NULLs.
  CHECK(loom_generate_speculative(nullptr, greedy, "a", 1, nullptr, lookup, nullptr, nullptr, nullptr, nullptr) ==
        LOOM_ERR_INVALID_ARGUMENT);
  CHECK(loom_generate_speculative(s, nullptr, "a", 1, nullptr, lookup, nullptr, nullptr, nullptr, nullptr) ==
        LOOM_ERR_INVALID_ARGUMENT);
  CHECK(loom_drafter_warnings(nullptr, nullptr, 0, nullptr) == LOOM_ERR_INVALID_ARGUMENT);
  loom_drafter_free(nullptr);

  // Older, smaller structs: params of just struct_size + max_draft, a stats struct that
  // ends after `accepted`.
  loom_speculative_params old_knobs;
  loom_speculative_params_init(&old_knobs);
  old_knobs.struct_size = offsetof(loom_speculative_params, adaptive);
  old_knobs.max_draft = 2;
  old_knobs.adaptive = 12345;  // beyond its struct_size: not read
  loom_speculative_stats old_stats;
  std::memset(&old_stats, 0xAB, sizeof old_stats);
  old_stats.struct_size = offsetof(loom_speculative_stats, target_passes);
  loom_generate_params gp;
  loom_generate_params_init(&gp);
  gp.max_tokens = 30;
  REQUIRE(loom_generate_speculative(s, greedy, "Once", 4, &gp, lookup, &old_knobs, nullptr, &old_stats, nullptr) ==
          LOOM_OK);
  CHECK(old_stats.struct_size == offsetof(loom_speculative_stats, target_passes));
  CHECK(old_stats.accepted <= old_stats.drafted);
  int64_t untouched = 0;
  std::memset(&untouched, 0xAB, sizeof untouched);
  CHECK(old_stats.target_passes == untouched);

  loom_drafter_free(lookup);
  loom_sampler_free(greedy);
  loom_session_free(s);
  loom_model_free(other);
  loom_model_free(target);
}
