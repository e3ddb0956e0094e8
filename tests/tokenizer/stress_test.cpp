// Long inputs (no quadratic blow-up), concurrent use, and streaming on real vocabularies.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "loom/tokenizer.hpp"
#include "tokenizer/tok_test_util.hpp"

using loom::Tokenizer;
namespace fs = std::filesystem;

namespace {

// Deterministic mixed text: English words, Chinese, code, digits, emoji, whitespace runs.
std::string mixed_text(size_t bytes, uint32_t seed) {
  static const char* parts[] = {
      "the ", "quick ", "brown ", "fox ", "jumps ", "over ", "lazy ", "dogs. ", "It's ", "we'll ",
      "中国的首都是北京。", "我想在apple工作", "天～", "def add(a, b):\n    return a + b\n",
      "for (int i = 0; i < n; ++i) {\n\tsum += x[i];\n}\n", "3.14159 ", "1314151 ", "🦙🚀 ",
      "Führer ", "нещо ", "   ", "\n\n", "!!!??? ", "\"quoted\" ",
  };
  std::mt19937 rng(seed);
  std::string s;
  s.reserve(bytes + 64);
  while (s.size() < bytes) s += parts[rng() % std::size(parts)];
  // Cut at a character boundary.
  size_t n = bytes;
  while (n > 0 && (static_cast<uint8_t>(s[n]) & 0xC0) == 0x80) --n;
  s.resize(n);
  return s;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A quadratic pass over 1 MB would take minutes even unoptimized; these bounds leave
// ample room for sanitizer builds on a loaded machine.
constexpr double kOneMegabyteLimitSeconds = 60.0;

void check_long_inputs(const Tokenizer& tok, const std::string& label) {
  for (const auto& [what, text] : {std::pair<std::string, std::string>{"mixed", mixed_text(1 << 20, 7)},
                                   {"one long word", std::string(1 << 20, 'a')},
                                   {"spaces", std::string(1 << 20, ' ')},
                                   {"newlines and tabs", std::string(1 << 19, '\n') + std::string(1 << 19, '\t')},
                                   {"chinese", [] {
                                      std::string s;
                                      while (s.size() < (1 << 20)) s += "北京天安门广场";
                                      return s;
                                    }()}}) {
    INFO(label << ": " << what);
    const auto t0 = std::chrono::steady_clock::now();
    const auto ids = tok.encode(text);
    const double secs = seconds_since(t0);
    CHECK(secs < kOneMegabyteLimitSeconds);
    if (std::getenv("LOOM_TOKENIZER_TIMING")) std::printf("%s / %s: %.3f s\n", label.c_str(), what.c_str(), secs);
    CHECK_FALSE(ids.empty());
    CHECK(tok.decode(ids).size() >= text.size() - 1);  // SentencePiece may drop nothing but a prefix space
  }
}

}  // namespace

TEST_CASE("1 MB inputs encode in bounded time on every kind of vocabulary") {
  LOOM_REQUIRE_REFERENCE(ref);
  check_long_inputs(*loom::test::load_json_tokenizer(ref / "tokenizers/llama2/tokenizer.json"), "llama2 json");
  check_long_inputs(*loom::test::load_json_tokenizer(ref / "tokenizers/llama3/tokenizer.json"), "llama3 json");
  check_long_inputs(*Tokenizer::load(ref / "tokenizers/ggml-vocab-llama-spm.gguf"), "llama-spm gguf");
  check_long_inputs(*Tokenizer::load(ref / "tokenizers/ggml-vocab-gpt-neox.gguf"), "gpt-neox gguf");
}

TEST_CASE("mixed text round-trips through every lossless reference vocabulary") {
  LOOM_REQUIRE_REFERENCE(ref);
  const std::string text = mixed_text(64 << 10, 11);
  for (const char* gguf : {"llama-spm", "phi-3", "gpt-2", "falcon", "starcoder", "gpt-neox"}) {
    auto tok = Tokenizer::load(ref / "tokenizers" / (std::string("ggml-vocab-") + gguf + ".gguf"));
    INFO(gguf);
    CHECK(tok->decode(tok->encode(text)) == text);
  }
  for (const char* json : {"llama2", "llama3"}) {
    auto tok = loom::test::load_json_tokenizer(ref / "tokenizers" / json / "tokenizer.json");
    INFO(json);
    CHECK(tok->decode(tok->encode(text)) == text);
  }
}

TEST_CASE("streaming real vocabularies equals decoding the whole sequence") {
  LOOM_REQUIRE_REFERENCE(ref);
  const std::string text = mixed_text(16 << 10, 3) + "<s><|begin_of_text|><|endoftext|>";
  std::vector<std::shared_ptr<const Tokenizer>> toks = {
      loom::test::load_json_tokenizer(ref / "tokenizers/llama2/tokenizer.json"),
      loom::test::load_json_tokenizer(ref / "tokenizers/llama3/tokenizer.json"),
      Tokenizer::load(ref / "tokenizers/ggml-vocab-llama-spm.gguf"),
      Tokenizer::load(ref / "tokenizers/ggml-vocab-gpt-2.gguf"),
  };
  for (const auto& tok : toks) {
    INFO(tok->name());
    auto ids = tok->encode(text, true, true);
    for (bool skip : {false, true}) {
      Tokenizer::StreamDecoder stream(tok, skip);
      std::string streamed;
      for (int32_t id : ids) streamed += stream.feed(id);
      streamed += stream.finish();
      CHECK(streamed == tok->decode(ids, skip));
    }
  }
}

TEST_CASE("one tokenizer serves many threads at once") {
  LOOM_REQUIRE_REFERENCE(ref);
  auto tok = loom::test::load_json_tokenizer(ref / "tokenizers/llama3/tokenizer.json");
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> expected;
  for (uint32_t i = 0; i < 8; ++i) {
    texts.push_back(mixed_text(32 << 10, 100 + i));
    expected.push_back(tok->encode(texts.back()));
  }
  std::vector<int> ok(texts.size(), 0);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < texts.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 3; ++rep) {
        const auto ids = tok->encode(texts[t]);
        if (ids == expected[t] && tok->decode(ids) == texts[t]) ++ok[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int v : ok) CHECK(v == 3);
}

TEST_CASE("random bytes never break encode, and vocabularies with every byte give them back") {
  LOOM_REQUIRE_REFERENCE(ref);
  struct Case {
    std::shared_ptr<const Tokenizer> tok;
    bool every_byte;  // a token for each of the 256 bytes (byte-level alphabet or <0xNN>)
  };
  // Falcon and GPT-NeoX have no token for bytes that never occur in UTF-8 (C0, C1,
  // F5..FF): like HF and llama.cpp, encoding drops those bytes. Qwen2 normalizes to NFC.
  const std::vector<Case> cases = {
      {loom::test::load_json_tokenizer(ref / "tokenizers/llama2/tokenizer.json"), true},
      {loom::test::load_json_tokenizer(ref / "tokenizers/llama3/tokenizer.json"), true},
      {Tokenizer::load(ref / "tokenizers/ggml-vocab-llama-spm.gguf"), true},
      {Tokenizer::load(ref / "tokenizers/ggml-vocab-gpt-2.gguf"), true},
      {loom::test::load_json_tokenizer(ref / "models/qwen2-tiny/hf/tokenizer.json"), false},
      {Tokenizer::load(ref / "tokenizers/ggml-vocab-falcon.gguf"), false},
      {Tokenizer::load(ref / "tokenizers/ggml-vocab-gpt-neox.gguf"), false},
  };
  std::mt19937 rng(99);
  for (int round = 0; round < 40; ++round) {
    std::string text(1 + rng() % 200, '\0');
    for (auto& c : text) {
      // Mostly ASCII and UTF-8 lead/continuation bytes, so partial characters are common.
      const uint32_t r = rng() % 4;
      c = static_cast<char>(r == 0 ? rng() % 128 : r == 1 ? 0x80 + rng() % 64 : r == 2 ? 0xC0 + rng() % 64 : rng() % 256);
    }
    for (const auto& [tok, every_byte] : cases) {
      INFO(tok->name() << " round " << round);
      for (int32_t id : tok->encode(text, true, true)) REQUIRE((id >= 0 && id < tok->vocab_size()));
      const auto ids = tok->encode(text);
      const std::string back = tok->decode(ids);
      if (every_byte) CHECK(back == text);
      CHECK(back.size() <= text.size() + 3);
    }
  }
}
