// Tokenizers from GGUF metadata built by hand (and written with loom's own GGUF writer):
// the llama (SentencePiece) and gpt2 (byte-level BPE) models, token types, special ids,
// flags, pre-tokenizer names and the errors.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "loom/error.hpp"
#include "loom/format.hpp"
#include "loom/tokenizer.hpp"
#include "support/test_support.hpp"
#include "tokenizer/unicode.hpp"

using loom::Metadata;
using loom::MetaValue;
using loom::Tokenizer;
using Ids = std::vector<int32_t>;
using T = MetaValue::Type;

namespace {

MetaValue strings(const std::vector<std::string>& v) {
  std::vector<MetaValue> out;
  for (const auto& s : v) out.push_back(MetaValue::of_string(s));
  return MetaValue::of_array(std::move(out), T::string);
}

MetaValue floats(const std::vector<double>& v) {
  std::vector<MetaValue> out;
  for (double d : v) out.push_back(MetaValue::of_float(d, T::f32));
  return MetaValue::of_array(std::move(out), T::f32);
}

MetaValue ints(const std::vector<int64_t>& v) {
  std::vector<MetaValue> out;
  for (int64_t i : v) out.push_back(MetaValue::of_int(i, T::i32));
  return MetaValue::of_array(std::move(out), T::i32);
}

const std::string S = "\xE2\x96\x81";  // ▁

// A tiny SentencePiece vocabulary: scores decide the merges (higher first).
Metadata spm_metadata() {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<double> scores = {0, 0, 0};
  std::vector<int64_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    tokens.push_back(name);
    scores.push_back(0);
    types.push_back(6);
  }
  // id 259..
  const std::vector<std::pair<std::string, double>> pieces = {
      {S, -1}, {"a", -2}, {"b", -2}, {"c", -2}, {S + "a", -3}, {"ab", -4}, {"bc", -1.5},
      {S + "ab", -5}, {"<tool>", 0}, {"<|im_end|>", 0}};
  for (const auto& [p, sc] : pieces) {
    tokens.push_back(p);
    scores.push_back(sc);
    types.push_back(p == "<tool>" ? 4 : p == "<|im_end|>" ? 3 : 1);
  }
  Metadata md;
  md.set("general.architecture", MetaValue::of_string("llama"));
  md.set("tokenizer.ggml.model", MetaValue::of_string("llama"));
  md.set("tokenizer.ggml.tokens", strings(tokens));
  md.set("tokenizer.ggml.scores", floats(scores));
  md.set("tokenizer.ggml.token_type", ints(types));
  md.set("tokenizer.ggml.bos_token_id", MetaValue::of_uint(1, T::u32));
  md.set("tokenizer.ggml.eos_token_id", MetaValue::of_uint(2, T::u32));
  md.set("tokenizer.ggml.unknown_token_id", MetaValue::of_uint(0, T::u32));
  md.set("tokenizer.chat_template", MetaValue::of_string("{{ messages }}"));
  return md;
}

constexpr int32_t kSp = 259, kA = 260, kB = 261, kC = 262, kSpA = 263, kAB = 264, kBC = 265, kSpAB = 266,
                  kTool = 267, kImEnd = 268;

// A tiny byte-level BPE: the 256 byte characters, then merges.
Metadata bpe_metadata(const char* pre) {
  std::vector<std::string> tokens;
  std::vector<int64_t> types;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(loom::tok::byte_level_table().byte_to_utf8[static_cast<size_t>(b)]);
    types.push_back(1);
  }
  for (std::string t : {"ab", "Ġa", "Ġab", "12", "123", "<|endoftext|>"}) {
    tokens.push_back(t);
    types.push_back(t == "<|endoftext|>" ? 3 : 1);
  }
  Metadata md;
  md.set("tokenizer.ggml.model", MetaValue::of_string("gpt2"));
  if (pre) md.set("tokenizer.ggml.pre", MetaValue::of_string(pre));
  md.set("tokenizer.ggml.tokens", strings(tokens));
  md.set("tokenizer.ggml.token_type", ints(types));
  md.set("tokenizer.ggml.merges", strings({"Ġ a", "a b", "Ġa b", "1 2", "12 3"}));
  md.set("tokenizer.ggml.eos_token_id", MetaValue::of_uint(261, T::u32));
  return md;
}

}  // namespace

TEST_CASE("GGUF llama vocab: whole-text SentencePiece merges by score, ▁ prefix, byte fallback") {
  auto tok = Tokenizer::from_gguf_metadata(spm_metadata(), "spm.gguf");
  CHECK(tok->vocab_size() == 269);
  // "▁abc": bc (-1.5) beats ▁a (-3) and ab (-4); then ▁a + bc is not a token.
  CHECK(tok->encode("abc") == Ids{kSpA, kBC});
  CHECK(tok->encode("ab") == Ids{kSpAB});
  CHECK(tok->encode("a b") == Ids{kSpA, kSp, kB});
  CHECK(tok->encode("x") == Ids{kSp, 3 + 'x'});  // <0x78>
  CHECK(tok->encode("ab", true) == Ids{1, kSpAB});
  CHECK(tok->add_bos());
  CHECK_FALSE(tok->add_eos());
  CHECK(tok->decode(Ids{1, kSpA, kBC}, true) == "abc");
  CHECK(tok->decode(Ids{kSpA, kSp, kB}) == "a b");
  CHECK(tok->token_to_piece(kSpA) == " a");
  CHECK(tok->token_to_piece(3 + '\n') == "\n");
  CHECK(tok->chat_template() == "{{ messages }}");
}

TEST_CASE("GGUF token types: control tokens need parse_special, user-defined ones do not") {
  auto tok = Tokenizer::from_gguf_metadata(spm_metadata(), "spm.gguf");
  CHECK(tok->encode("a<tool>b") == Ids{kSpA, kTool, kSp, kB});  // llama.cpp prefixes ▁ after a token
  CHECK(tok->encode("<s>a", false, true) == Ids{1, kSpA});
  CHECK(tok->encode("<|im_end|>", false, true) == Ids{kImEnd});
  CHECK(tok->is_special(1));
  CHECK(tok->is_special(kImEnd));
  CHECK_FALSE(tok->is_special(kTool));
  CHECK_FALSE(tok->is_special(3));  // byte token
  CHECK(tok->eos_ids() == Ids{2, kImEnd});
  CHECK(tok->bos_id() == 1);
  CHECK(tok->unk_id() == 0);
}

TEST_CASE("GGUF flags: add_bos/add_eos, add_space_prefix") {
  Metadata md = spm_metadata();
  md.set("tokenizer.ggml.add_bos_token", MetaValue::of_bool(false));
  md.set("tokenizer.ggml.add_eos_token", MetaValue::of_bool(true));
  md.set("tokenizer.ggml.add_space_prefix", MetaValue::of_bool(false));
  auto tok = Tokenizer::from_gguf_metadata(md, "flags.gguf");
  CHECK(tok->encode("ab", true) == Ids{kAB, 2});
  CHECK(tok->decode(Ids{kSpA}) == " a");  // no prefix was added, so none is stripped
}

TEST_CASE("GGUF gpt2 vocab: pre-tokenizer by name, byte-level merges") {
  auto tok = Tokenizer::from_gguf_metadata(bpe_metadata("gpt-2"), "bpe.gguf");
  CHECK(tok->encode("ab ab") == Ids{256, 258});
  CHECK(tok->encode("1234") == Ids{260, '4'});  // ids 0..255 are the bytes in order
  CHECK(tok->decode(tok->encode("ab ab")) == "ab ab");
  CHECK(tok->eos_id() == 261);
  CHECK_FALSE(tok->add_bos());
  // llama3 splits numbers in groups of up to three and ignores merges for whole tokens.
  auto l3 = Tokenizer::from_gguf_metadata(bpe_metadata("llama-bpe"), "l3.gguf");
  CHECK(l3->add_bos() == false);  // no BOS id in this vocabulary
  // starcoder isolates every digit.
  auto sc = Tokenizer::from_gguf_metadata(bpe_metadata("starcoder"), "sc.gguf");
  CHECK(sc->encode("12") == Ids{'1', '2'});
  // No tokenizer.ggml.pre: llama.cpp's "default" lists.
  auto def = Tokenizer::from_gguf_metadata(bpe_metadata(nullptr), "def.gguf");
  CHECK(def->encode("ab ab") == Ids{256, 258});
}

TEST_CASE("GGUF tokenizer errors name the problem") {
  auto code_of = [](const Metadata& md) {
    try {
      (void)Tokenizer::from_gguf_metadata(md, "bad.gguf");
    } catch (const loom::Error& e) {
      CHECK(std::string(e.what()).find("bad.gguf") != std::string::npos);
      return e.code();
    }
    FAIL("no error");
    return loom::ErrorCode::internal;
  };
  CHECK(code_of(Metadata{}) == loom::ErrorCode::format);
  Metadata t5 = spm_metadata();
  t5.set("tokenizer.ggml.model", MetaValue::of_string("t5"));
  CHECK(code_of(t5) == loom::ErrorCode::unsupported);
  CHECK(code_of(bpe_metadata("no-such-pre")) == loom::ErrorCode::unsupported);
  Metadata dup = spm_metadata();
  dup.set("tokenizer.ggml.tokens", strings({"a", "a"}));
  dup.set("tokenizer.ggml.scores", floats({0, 0}));
  dup.set("tokenizer.ggml.token_type", ints({1, 1}));
  CHECK(code_of(dup) == loom::ErrorCode::format);
  Metadata short_scores = spm_metadata();
  short_scores.set("tokenizer.ggml.scores", floats({0}));
  CHECK(code_of(short_scores) == loom::ErrorCode::format);
  Metadata wrong_type = spm_metadata();
  wrong_type.set("tokenizer.ggml.tokens", MetaValue::of_string("not an array"));
  CHECK(code_of(wrong_type) == loom::ErrorCode::format);
  // Arrays of the wrong items are refused by key, whatever their length.
  auto message_of = [](const Metadata& md) -> std::string {
    try {
      (void)Tokenizer::from_gguf_metadata(md, "bad.gguf");
    } catch (const loom::Error& e) {
      return e.what();
    }
    return "no error";
  };
  Metadata string_scores = spm_metadata();
  string_scores.set("tokenizer.ggml.scores", strings({"0", "0", "0"}));
  CHECK_THAT(message_of(string_scores), Catch::Matchers::Contains("tokenizer.ggml.scores must be an array of numbers, not of string"));
  Metadata float_types = spm_metadata();
  float_types.set("tokenizer.ggml.token_type", floats({1, 1, 1}));
  CHECK_THAT(message_of(float_types), Catch::Matchers::Contains("tokenizer.ggml.token_type must be an array of integers, not of f32"));
  Metadata int_tokens = spm_metadata();
  int_tokens.set("tokenizer.ggml.tokens", ints({1, 2}));
  CHECK_THAT(message_of(int_tokens), Catch::Matchers::Contains("tokenizer.ggml.tokens must be an array of strings, not of i32"));
  Metadata bare;
  bare.set("tokenizer.ggml.model", MetaValue::of_string("gpt2"));
  bare.set("tokenizer.ggml.tokens", strings({"a"}));
  CHECK(code_of(bare) == loom::ErrorCode::format);
}

TEST_CASE("Tokenizer::load reads a vocab-only GGUF, a tokenizer.json and a model directory") {
  loom::test::TempDir dir;
  loom::write_gguf(dir / "vocab.gguf", spm_metadata(), {});
  auto from_file = Tokenizer::load(dir / "vocab.gguf");
  CHECK(from_file->encode("abc") == Ids{kSpA, kBC});
  CHECK(from_file->name() == (dir / "vocab.gguf").string());
  auto from_dir = Tokenizer::load(dir.path());  // the directory's single .gguf
  CHECK(from_dir->encode("abc") == Ids{kSpA, kBC});

  loom::test::TempDir hf;
  const std::string json = R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}})";
  loom::test::write_file_bytes(hf / "tokenizer.json", std::vector<uint8_t>(json.begin(), json.end()));
  const std::string tpl = "{% for m in messages %}{{ m }}{% endfor %}";
  loom::test::write_file_bytes(hf / "chat_template.jinja", std::vector<uint8_t>(tpl.begin(), tpl.end()));
  auto from_hf = Tokenizer::load(hf.path());
  CHECK(from_hf->encode("ab") == Ids{2});
  CHECK(from_hf->chat_template() == tpl);
  CHECK(Tokenizer::load(hf / "tokenizer.json")->encode("abab") == Ids{2, 2});

  loom::test::TempDir empty;
  CHECK_THROWS_AS(Tokenizer::load(empty.path()), loom::Error);
  CHECK_THROWS_AS(Tokenizer::load(empty / "missing.json"), loom::Error);
}
