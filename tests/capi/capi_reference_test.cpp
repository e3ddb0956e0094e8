// The reference models of ../shared/reference through the C API: greedy generation of
// the real stories260K model reproduces llama2.c, and every model's first greedy token
// after its prompt is the argmax of the independent engine's logits.
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

}  // namespace

TEST_CASE("C API reference: stories260K greedy generation equals llama2.c's 200 tokens and text") {
  LOOM_REQUIRE_REFERENCE(ref);
  const auto dir = ref / "models" / "stories260K";
  // The HF copy, and llama2.c's own checkpoint (with tok512.bin beside it).
  for (const std::string source : {"hf", "llama2c/stories260K.bin"}) {
    INFO(source);
    const auto expected = t::read_ids(dir / "expected" / "greedy200.ids.txt");
    loom_model* m = load_quiet((dir / source).string());
    loom_session* s = nullptr;
    REQUIRE(loom_session_create(m, nullptr, &s, nullptr) == LOOM_OK);
    loom_sampler_params sp;
    loom_sampler_params_init(&sp);
    sp.temperature = 0.0f;
    loom_sampler* greedy = nullptr;
    REQUIRE(loom_sampler_create(&sp, &greedy, nullptr) == LOOM_OK);

    // Token by token: prefill BOS, then sample/step.
    const int32_t bos = 1;
    REQUIRE(loom_prefill(s, &bos, 1, nullptr) == LOOM_OK);
    std::vector<int32_t> got;
    for (size_t i = 0; i < expected.size(); ++i) {
      int32_t next = -1;
      REQUIRE(loom_sample(s, greedy, &next, nullptr) == LOOM_OK);
      got.push_back(next);
      REQUIRE(loom_step(s, next, nullptr) == LOOM_OK);
    }
    CHECK(got == expected);

    // And through loom_generate with an empty prompt (BOS only), streaming the text.
    std::string text;
    loom_generate_params gp;
    loom_generate_params_init(&gp);
    gp.max_tokens = 200;
    gp.on_text = [](void* user, const char* piece, size_t len, int32_t) -> int32_t {
      static_cast<std::string*>(user)->append(piece, len);
      return 1;
    };
    gp.user = &text;
    loom_sampler_reset(greedy);
    loom_generate_result r;
    loom_generate_result_init(&r);
    REQUIRE(loom_generate(s, greedy, "", 0, &gp, &r, nullptr) == LOOM_OK);
    CHECK(r.generated_tokens == 200);
    std::string want = t::read_file_text(dir / "expected" / "greedy200.txt");
    while (!want.empty() && want.back() == '\n') want.pop_back();
    while (!text.empty() && text.back() == '\n') text.pop_back();
    CHECK(text == want);
    loom_sampler_free(greedy);
    loom_session_free(s);
    loom_model_free(m);
  }
}

TEST_CASE("C API reference: each model's first greedy token is the independent engine's argmax") {
  LOOM_REQUIRE_REFERENCE(ref);
  struct Case {
    std::string source, prompt;
    std::string engine = "";  // "" llama.cpp's logits, ".np-f64" numpy's
  };
  const std::vector<Case> cases{
      {"stories260K/hf", "stories260K/logits/once_upon"},
      {"tiny-llama/tiny-llama-f32.gguf", "tiny-llama/logits/france"},
      {"qwen2-tiny/hf", "qwen2-tiny/logits/capital"},
      {"gpt2-tiny/hf", "gpt2-tiny/logits/code-add"},
      {"mistral-tiny-nosw/hf", "mistral-tiny-nosw/logits/capital"},
      {"phi3-tiny/phi3-tiny-f32.gguf", "phi3-tiny/logits/code-add"},
      {"small-quant/small-quant-q4_k.gguf", "small-quant/logits/story"},
      // The GELU families, against numpy's float64 forward (HF semantics).
      {"falcon-tiny/hf", "falcon-tiny/logits/capital", ".np-f64"},
      {"falcon-tiny-newdec/falcon-tiny-newdec-f32.gguf", "falcon-tiny-newdec/logits/capital", ".np-f64"},
      {"gptneox-tiny/gptneox-tiny-f32.gguf", "gptneox-tiny/logits/capital", ".np-f64"},
      {"gemma-tiny/hf", "gemma-tiny/logits/capital", ".np-f64"},
      {"gemma2-tiny/gemma2-tiny-f32.gguf", "gemma2-tiny/logits/capital", ".np-f64"},
      {"gemma2-tiny-27b/hf", "gemma2-tiny-27b/logits/capital", ".np-f64"},
  };
  for (const auto& c : cases) {
    INFO(c.source);
    const auto base = ref / "models";
    const auto ids = t::read_ids(base / (c.prompt + ".ids.txt"));
    std::string logits_file = c.prompt + c.engine + ".logits.txt";
    if (c.source.find("q4_k") != std::string::npos) logits_file = c.prompt + ".q4_k.logits.txt";
    const auto logits = t::read_logits(base / logits_file);
    loom_model* m = load_quiet((base / c.source).string());
    loom_session* s = nullptr;
    REQUIRE(loom_session_create(m, nullptr, &s, nullptr) == LOOM_OK);
    REQUIRE(loom_prefill(s, ids.data(), ids.size(), nullptr) == LOOM_OK);
    loom_sampler_params sp;
    loom_sampler_params_init(&sp);
    sp.temperature = 0.0f;
    loom_sampler* greedy = nullptr;
    REQUIRE(loom_sampler_create(&sp, &greedy, nullptr) == LOOM_OK);
    int32_t next = -1;
    REQUIRE(loom_sample(s, greedy, &next, nullptr) == LOOM_OK);
    CHECK(next == t::argmax(logits.back()));
    // A few more tokens stream through loom_generate without error.
    loom_generate_params gp;
    loom_generate_params_init(&gp);
    gp.max_tokens = 8;
    loom_generate_result r;
    loom_generate_result_init(&r);
    REQUIRE(loom_generate(s, greedy, "The", 3, &gp, &r, nullptr) == LOOM_OK);
    CHECK(r.generated_tokens >= 1);
    CHECK((r.generated_tokens == 8 || r.stop_reason == LOOM_STOP_EOS));
    loom_sampler_free(greedy);
    loom_session_free(s);
    loom_model_free(m);
  }
}
