// SentencePiece tokenizer.model files written by hand (tests/fuzz/fuzz_tokenizers.hpp's
// ModelProto writer): the same ids as the GGUF vocabulary they mirror, Gemma's
// add_dummy_prefix false, and the settings loom refuses instead of mis-tokenizing.
#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <vector>

#include "fuzz/fuzz_tokenizers.hpp"
#include "loom/error.hpp"
#include "loom/tokenizer.hpp"
#include "support/test_support.hpp"

using loom::Tokenizer;
using loom::fuzz::SpmProtoSettings;
using Ids = std::vector<int32_t>;

namespace {

// Piece ids of spm_gguf_metadata(): 0 <unk>, 1 <s>, 2 </s>, 3..258 <0xNN>, then these.
constexpr int32_t kSp = 259, kThe = 268, kSpThe = 269, kSpA = 264, kB = 261;

void write_model(const loom::test::TempDir& dir, const SpmProtoSettings& settings) {
  const std::string proto = loom::fuzz::spm_model_proto(settings);
  loom::test::write_file_bytes(dir / "tokenizer.model", std::vector<uint8_t>(proto.begin(), proto.end()));
}

SpmProtoSettings settings_with(const std::function<void(SpmProtoSettings&)>& set) {
  SpmProtoSettings s;
  set(s);
  return s;
}

}  // namespace

TEST_CASE("tokenizer.model gives the ids of the GGUF vocabulary it mirrors") {
  loom::test::TempDir dir;
  write_model(dir, {});
  const auto spm = Tokenizer::load(dir.path());
  CHECK(spm->name() == (dir / "tokenizer.model").string());
  const auto gguf = Tokenizer::from_gguf_metadata(loom::fuzz::spm_gguf_metadata(), "spm.gguf");
  for (const std::string text : {"the ab", "the", " the  a b", "xyz \xC3\xA9", ""}) {
    INFO(text);
    CHECK(spm->encode(text, true) == gguf->encode(text, true));
    CHECK(spm->decode(spm->encode(text, true), true) == text);
  }
  CHECK(spm->encode("the", true) == Ids{1, kSpThe});
  CHECK(spm->encode("a b") == Ids{kSpA, kSp, kB});
}

TEST_CASE("tokenizer.model with add_dummy_prefix false (Gemma) prepends no U+2581 and strips no space") {
  loom::test::TempDir dir;
  write_model(dir, settings_with([](SpmProtoSettings& s) { s.add_dummy_prefix = false; }));
  const auto tok = Tokenizer::load(dir.path());
  CHECK(tok->encode("the", true) == Ids{1, kThe});
  CHECK(tok->encode(" the", true) == Ids{1, kSpThe});
  CHECK(tok->decode(Ids{1, kThe}, true) == "the");
  CHECK(tok->decode(Ids{1, kSpThe}, true) == " the");  // the space is text, not a dummy prefix
  CHECK(tok->to_gguf_metadata().find("tokenizer.ggml.add_space_prefix")->as_bool() == false);
}

TEST_CASE("tokenizer.model settings loom does not implement are refused, naming the file and the setting") {
  struct Case {
    const char* name;
    std::function<void(SpmProtoSettings&)> set;
    const char* names;  // what the message must say
  };
  const Case cases[] = {
      {"unigram", [](SpmProtoSettings& s) { s.model_type = 1; }, "model_type 1"},
      {"nfkc charsmap",
       [](SpmProtoSettings& s) {
         s.normalizer_name = "nmt_nfkc";
         s.charsmap = std::string("\x04\x00\x00\x00" "abcd", 8);
       },
       "precompiled_charsmap (normalizer 'nmt_nfkc')"},
      {"remove_extra_whitespaces", [](SpmProtoSettings& s) { s.remove_extra_whitespaces = true; },
       "remove_extra_whitespaces"},
      {"escape_whitespaces false", [](SpmProtoSettings& s) { s.escape_whitespaces = false; }, "escape_whitespaces"},
      {"treat_whitespace_as_suffix", [](SpmProtoSettings& s) { s.treat_whitespace_as_suffix = true; },
       "treat_whitespace_as_suffix"},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    loom::test::TempDir dir;
    write_model(dir, settings_with(c.set));
    try {
      (void)Tokenizer::load(dir.path());
      FAIL("loaded a tokenizer.model with " << c.name);
    } catch (const loom::Error& e) {
      CHECK(e.code() == loom::ErrorCode::unsupported);
      CHECK(e.context().file == (dir / "tokenizer.model").string());
      CHECK_THAT(e.detail(), Catch::Contains(c.names));
    }
  }
}

TEST_CASE("a truncated or absent-normalizer tokenizer.model is an error, not a guess") {
  loom::test::TempDir dir;
  const std::string whole = loom::fuzz::spm_model_proto();
  const std::string half = whole.substr(0, whole.size() / 2);
  loom::test::write_file_bytes(dir / "tokenizer.model", std::vector<uint8_t>(half.begin(), half.end()));
  try {
    (void)Tokenizer::load(dir.path());
    FAIL("loaded a truncated tokenizer.model");
  } catch (const loom::Error& e) {
    CHECK(e.code() == loom::ErrorCode::format);
    CHECK(e.context().file == (dir / "tokenizer.model").string());
    CHECK(e.context().offset.has_value());
  }
  // Without a NormalizerSpec the proto defaults apply: remove_extra_whitespaces is true.
  const size_t normalizer = whole.rfind(std::string("\x1A", 1));  // field 3, length-delimited
  REQUIRE(normalizer != std::string::npos);
  const std::string bare = whole.substr(0, normalizer);
  loom::test::write_file_bytes(dir / "tokenizer.model", std::vector<uint8_t>(bare.begin(), bare.end()));
  CHECK_THROWS_WITH(Tokenizer::load(dir.path()), Catch::Contains("remove_extra_whitespaces"));
}
