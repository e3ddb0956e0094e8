// Whole tokenizers built from small hand-written tokenizer.json documents: the BPE model's
// options, added tokens, post-processor, decode and streaming, and the edge cases.
#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include "loom/error.hpp"
#include "loom/tokenizer.hpp"
#include "tokenizer/unicode.hpp"

using loom::Tokenizer;
using Ids = std::vector<int32_t>;

namespace {

// A SentencePiece-style BPE in the LlamaConverter layout: ▁ words, byte fallback,
// <unk>/<s>/</s> special tokens, BOS template, Llama 2 decoder.
const char* kSpmJson = R"({
  "added_tokens": [
    {"id": 0, "content": "<unk>", "special": true, "normalized": false},
    {"id": 1, "content": "<s>", "special": true, "normalized": false},
    {"id": 2, "content": "</s>", "special": true, "normalized": false}
  ],
  "normalizer": {"type": "Sequence", "normalizers": [
    {"type": "Prepend", "prepend": "▁"},
    {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
  "pre_tokenizer": null,
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
  "decoder": {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
    {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
  "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true,
    "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x0A>": 3, "<0xE4>": 4, "<0xB8>": 5, "<0xAD>": 6,
              "<0xFF>": 7, "▁": 8, "h": 9, "e": 10, "l": 11, "o": 12, "w": 13, "r": 14, "d": 15,
              "▁h": 16, "ll": 17, "▁he": 18, "▁hell": 19, "▁hello": 20, "▁w": 21, "or": 22,
              "▁wor": 23, "▁worl": 24, "▁world": 25},
    "merges": ["▁ h", "l l", "▁h e", ["▁he", "ll"], "▁hell o", "▁ w", "o r", "▁w or", "▁wor l", "▁worl d"]}
})";

// A byte-level BPE in the GPT-2 layout: the 256 byte characters as ids 0..255 (so any
// byte sequence is encodable), a few merges, one special and one user-defined added token.
constexpr int32_t kAB = 256, kABC = 257, kGa = 258, kGab = 259, kBC = 260, kEacute = 261;

std::string json_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

std::string byte_level_json(const char* extra_model_fields = "", bool pair_merges = false) {
  std::string vocab;
  for (int b = 0; b < 256; ++b) {
    vocab += '"';
    vocab += json_escape(loom::tok::byte_level_table().byte_to_utf8[static_cast<size_t>(b)]);
    vocab += "\": " + std::to_string(b) + ", ";
  }
  vocab += R"("ab": 256, "abc": 257, "Ġa": 258, "Ġab": 259, "bc": 260, "Ã©": 261)";
  const std::string merges = pair_merges ? R"(["Ġ", "a"], ["a", "b"], ["Ġa", "b"], ["ab", "c"], ["Ã", "©"])"
                                         : R"("Ġ a", "a b", "Ġa b", "ab c", "Ã ©")";
  return std::string(R"({
  "added_tokens": [
    {"id": 300, "content": "<|endoftext|>", "special": true, "normalized": false},
    {"id": 301, "content": "<tool>", "special": false, "normalized": false}
  ],
  "normalizer": null,
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
  "post_processor": {"type": "ByteLevel"},
  "decoder": {"type": "ByteLevel"},
  "model": {"type": "BPE", )") + extra_model_fields + R"("vocab": {)" + vocab + R"(}, "merges": [)" + merges + "]}}";
}

std::shared_ptr<const Tokenizer> spm() { return Tokenizer::from_tokenizer_json(kSpmJson, "spm-test.json"); }
std::shared_ptr<const Tokenizer> bytes(const char* extra = "") {
  return Tokenizer::from_tokenizer_json(byte_level_json(extra), "bytes-test.json");
}

}  // namespace

TEST_CASE("a Llama-style BPE encodes words with ▁, merges by rank and falls back to bytes") {
  auto tok = spm();
  CHECK(tok->vocab_size() == 26);
  CHECK(tok->encode("hello world") == Ids{20, 25});
  CHECK(tok->encode("hello world", true) == Ids{1, 20, 25});
  CHECK(tok->encode("hell") == Ids{19});
  CHECK(tok->encode("\n") == Ids{8, 3});       // ▁ then <0x0A>
  CHECK(tok->encode("中") == Ids{8, 4, 5, 6});  // not in the vocabulary: its UTF-8 bytes
  CHECK(tok->encode("zq") == Ids{8, 0});        // no byte tokens for z, q: one fused <unk>
  CHECK(tok->decode(Ids{1, 20, 25}, true) == "hello world");
  CHECK(tok->decode(Ids{1, 20, 25}, false) == "<s> hello world");
  CHECK(tok->decode(Ids{8, 4, 5, 6}) == "中");
  CHECK(tok->token_to_piece(20) == " hello");
  CHECK(tok->token_to_piece(3) == "\n");
  CHECK(tok->token_text(20) == "▁hello");
  CHECK(tok->token_id("▁world") == 25);
  CHECK(tok->token_id("</s>") == 2);
  CHECK_FALSE(tok->token_id("nope"));
}

TEST_CASE("special ids come from the template and the conventional names") {
  auto tok = spm();
  CHECK(tok->bos_id() == 1);
  CHECK(tok->eos_id() == 2);
  CHECK(tok->unk_id() == 0);
  CHECK_FALSE(tok->pad_id());
  CHECK(tok->add_bos());
  CHECK_FALSE(tok->add_eos());
  CHECK(tok->is_special(1));
  CHECK_FALSE(tok->is_special(20));
  CHECK_FALSE(tok->is_special(-1));
  CHECK(tok->eos_ids() == Ids{2});
  CHECK(tok->chat_template().empty());
  CHECK(tok->name() == "spm-test.json");
}

TEST_CASE("tokenizer_config.json supplies eos/pad, add_bos/add_eos flags and the chat template") {
  const char* config = R"({"tokenizer_class": "LlamaTokenizer", "add_bos_token": false, "add_eos_token": true,
    "bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>", "pad_token": "<unk>",
    "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "{{ x }}"}],
    "model_max_length": 1000000000000000019884624838656})";
  auto tok = Tokenizer::from_tokenizer_json(kSpmJson, config, "cfg");
  CHECK_FALSE(tok->add_bos());
  CHECK(tok->add_eos());
  CHECK(tok->encode("hello", true) == Ids{20, 2});
  CHECK(tok->pad_id() == 0);
  CHECK(tok->chat_template() == "{{ x }}");
}

TEST_CASE("parse_special decides whether special-token text is a token") {
  auto tok = spm();
  CHECK(tok->encode("<s>hello", false, true) == Ids{1, 20});
  const auto as_text = tok->encode("<s>hello", false, false);
  CHECK(as_text.size() > 2);
  CHECK(std::find(as_text.begin(), as_text.end(), 1) == as_text.end());
  CHECK(tok->encode("<s>", false, true) == Ids{1});  // a lone special token
  CHECK(tok->encode("</s></s>", false, true) == Ids{2, 2});
  // Text after a special token is its own segment and gets its own ▁ (Prepend).
  CHECK(tok->encode("hello<s>world", false, true) == Ids{20, 1, 25});
}

TEST_CASE("empty input gives no ids, or only the template's") {
  auto tok = spm();
  CHECK(tok->encode("").empty());
  CHECK(tok->encode("", true) == Ids{1});
  CHECK(tok->decode(Ids{}).empty());
  auto bl = bytes();
  CHECK(bl->encode("", true, true).empty());
}

TEST_CASE("byte-level BPE: ranked merges, special and user-defined added tokens") {
  auto tok = bytes();
  CHECK(tok->vocab_size() == 302);
  CHECK(tok->encode("abc") == Ids{kABC});
  CHECK(tok->encode("ab ab") == Ids{kAB, kGab});
  CHECK(tok->encode("a<|endoftext|>", false, true) == Ids{'a', 300});
  CHECK(tok->encode("a<tool>b") == Ids{'a', 301, 'b'});  // user-defined: matched without parse_special
  CHECK(tok->is_special(300));
  CHECK_FALSE(tok->is_special(301));
  CHECK(tok->eos_id() == 300);
  CHECK(tok->is_eos(300));
  CHECK(tok->decode(Ids{kAB, kGab, 300}) == "ab ab<|endoftext|>");
  CHECK(tok->decode(Ids{kAB, kGab, 300}, true) == "ab ab");
  CHECK(tok->encode("\xC3\xA9") == Ids{kEacute});  // é = Ã© in byte-level characters
  CHECK(tok->token_to_piece(kGab) == " ab");
}

TEST_CASE("merges in the [\"a\", \"b\"] pair form equal the \"a b\" string form") {
  auto tok = Tokenizer::from_tokenizer_json(byte_level_json("", true), "pairs");
  CHECK(tok->encode("abc ab") == bytes()->encode("abc ab"));
  CHECK(tok->encode("abc ab") == Ids{kABC, kGab});
}

TEST_CASE("ignore_merges takes a whole word from the vocabulary as it is") {
  // "bc" is a token that the merges never build from "b c".
  CHECK(bytes()->encode("bc") == Ids{'b', 'c'});
  CHECK(bytes(R"("ignore_merges": true,)")->encode("bc") == Ids{kBC});
}

TEST_CASE("unk without fuse_unk gives one unknown per character, and no unk drops it") {
  const std::string base = R"({"model": {"type": "BPE", "unk_token": "<unk>", FUSE
    "vocab": {"<unk>": 0, "a": 1}, "merges": []}})";
  auto with = [&](const std::string& fuse) {
    std::string j = base;
    j.replace(j.find("FUSE"), 4, fuse);
    return Tokenizer::from_tokenizer_json(j, "unk");
  };
  CHECK(with(R"("fuse_unk": false,)")->encode("axyz") == Ids{1, 0, 0, 0});
  CHECK(with(R"("fuse_unk": true,)")->encode("axya") == Ids{1, 0, 1});
  auto none = Tokenizer::from_tokenizer_json(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})", "x");
  CHECK(none->encode("xa") == Ids{0});
}

TEST_CASE("continuing_subword_prefix and end_of_word_suffix take part in the lookups") {
  auto tok = Tokenizer::from_tokenizer_json(R"({"model": {"type": "BPE",
      "continuing_subword_prefix": "##", "end_of_word_suffix": "</w>",
      "vocab": {"a": 0, "##b": 1, "##c</w>": 2, "a##b": 3, "a##b##c</w>": 4},
      "merges": ["a ##b", "a##b ##c</w>"]}})", "affix");
  CHECK(tok->encode("abc") == Ids{4});
  CHECK(tok->encode("ab") == Ids{0});  // "##b</w>" is not a token: dropped
}

TEST_CASE("normalized added tokens are matched in the normalized text") {
  auto tok = Tokenizer::from_tokenizer_json(R"({
    "added_tokens": [{"id": 10, "content": "yesterday", "special": false, "normalized": true}],
    "normalizer": {"type": "Lowercase"},
    "pre_tokenizer": {"type": "WhitespaceSplit"},
    "model": {"type": "BPE", "vocab": {"i": 0, "r": 1, "e": 2, "a": 3, "d": 4}, "merges": []}})", "norm");
  CHECK(tok->encode("I read Yesterday") == Ids{0, 1, 2, 3, 4, 10});
}

TEST_CASE("Metaspace with prepend_scheme first prepends only at the start of the input") {
  auto tok = Tokenizer::from_tokenizer_json(R"({
    "added_tokens": [{"id": 0, "content": "<s>", "special": true, "normalized": false}],
    "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false},
    "decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false},
    "model": {"type": "BPE", "vocab": {"<s>": 0, "▁hi": 1, "hi": 2, "▁": 3, "h": 4, "i": 5},
              "merges": ["h i"]}})", "meta");
  CHECK(tok->encode("hi") == Ids{3, 2});  // "▁hi" splits as ▁ + hi: no merge makes ▁hi
  CHECK(tok->encode("hi<s>hi", false, true) == Ids{3, 2, 0, 2});
  CHECK(tok->decode(Ids{3, 2, 0, 2}) == "hi<s>hi");
}

TEST_CASE("Roberta-style post-processors add cls and sep") {
  auto tok = Tokenizer::from_tokenizer_json(R"({
    "post_processor": {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0]},
    "model": {"type": "BPE", "vocab": {"<s>": 0, "a": 1, "</s>": 2}, "merges": []}})", "roberta");
  CHECK(tok->encode("a", true) == Ids{0, 1, 2});
  CHECK(tok->add_bos());
  CHECK(tok->add_eos());
}

TEST_CASE("invalid UTF-8 never throws and round-trips through byte-level and byte-fallback vocabularies") {
  const std::string bad = "a\xFF\xFE" "b\xE4\xB8";  // stray bytes and a truncated character
  auto bl = bytes();
  const auto ids = bl->encode(bad);
  CHECK_FALSE(ids.empty());
  CHECK(bl->decode(ids) == bad);
  auto sp = spm();
  const auto sids = sp->encode("\xFF");
  CHECK(sids == Ids{8, 7});  // ▁ then <0xFF>
  CHECK(sp->decode(sids) == "\xFF");
}

TEST_CASE("ids out of range are errors naming the id") {
  auto tok = spm();
  for (int32_t bad : {-1, 26, 1 << 30}) {
    try {
      (void)tok->decode(Ids{20, bad});
      FAIL("decode accepted id " << bad);
    } catch (const loom::Error& e) {
      CHECK(e.code() == loom::ErrorCode::invalid_argument);
      CHECK(std::string(e.what()).find(std::to_string(bad)) != std::string::npos);
    }
    CHECK_THROWS_AS(tok->token_to_piece(bad), loom::Error);
    CHECK_THROWS_AS(tok->token_text(bad), loom::Error);
  }
  Tokenizer::StreamDecoder stream(tok);
  CHECK(stream.feed(20) == "hello");
  CHECK_THROWS_AS(stream.feed(99), loom::Error);
  CHECK(stream.feed(25) == " world");  // the failed feed changed nothing
}

TEST_CASE("streaming equals whole decoding, strips only the first space and never splits a character") {
  auto tok = spm();
  Tokenizer::StreamDecoder stream(tok, true);
  CHECK(stream.feed(1).empty());  // BOS skipped
  CHECK(stream.feed(20) == "hello");
  CHECK(stream.feed(25) == " world");
  CHECK(stream.feed(4).empty());
  CHECK(stream.feed(5).empty());
  CHECK(stream.feed(6) == "中");
  CHECK(stream.finish().empty());
  // After finish() the stream starts over: the first space is stripped again.
  CHECK(stream.feed(25) == "world");
  CHECK(stream.feed(4).empty());
  CHECK(stream.finish() == "\xE4");
}

TEST_CASE("StreamDecoder pieces concatenate to decode() for random id sequences") {
  std::mt19937 rng(1234);
  for (auto tok : {spm(), bytes()}) {
    std::uniform_int_distribution<int32_t> pick(0, tok->vocab_size() - 1);
    for (int round = 0; round < 200; ++round) {
      Ids ids(static_cast<size_t>(rng() % 12));
      for (auto& id : ids) id = pick(rng);
      for (bool skip : {false, true}) {
        Tokenizer::StreamDecoder stream(tok, skip);
        std::string streamed;
        std::vector<size_t> cuts;  // where one piece ends and the next begins
        for (int32_t id : ids) {
          streamed += stream.feed(id);
          cuts.push_back(streamed.size());
        }
        streamed += stream.finish();
        // No cut falls inside a (valid) multi-byte character.
        for (size_t i = 0; i < streamed.size();) {
          const auto c = loom::tok::utf8_next(streamed, i);
          for (size_t cut : cuts) CHECK_FALSE((cut > i && cut < i + c.len));
          i += c.len;
        }
        CHECK(streamed == tok->decode(ids, skip));
      }
    }
  }
}

TEST_CASE("malformed and unsupported tokenizer.json documents are clear errors") {
  auto code_of = [](const std::string& json) {
    try {
      (void)Tokenizer::from_tokenizer_json(json, "bad.json");
    } catch (const loom::Error& e) {
      CHECK(std::string(e.what()).find("bad.json") != std::string::npos);
      return e.code();
    }
    FAIL("no error for " << json);
    return loom::ErrorCode::internal;
  };
  CHECK(code_of("{") == loom::ErrorCode::format);
  CHECK(code_of("[]") == loom::ErrorCode::format);
  CHECK(code_of(R"({"model": {"type": "Unigram", "vocab": []}})") == loom::ErrorCode::unsupported);
  CHECK(code_of(R"({"model": {"type": "WordPiece", "vocab": {}}})") == loom::ErrorCode::unsupported);
  CHECK(code_of(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})") == loom::ErrorCode::format);
  CHECK(code_of(R"({"model": {"type": "BPE", "vocab": {"a": -3}, "merges": []}})") == loom::ErrorCode::format);
  CHECK(code_of(R"({"model": {"type": "BPE", "vocab": {"a": 2000000000}, "merges": []}})") == loom::ErrorCode::format);
  CHECK(code_of(R"({"added_tokens": [{"id": 99999999999, "content": "x"}],
                   "model": {"type": "BPE", "vocab": {}, "merges": []}})") == loom::ErrorCode::format);
  CHECK(code_of(R"({"normalizer": {"type": "Precompiled"}, "model": {"type": "BPE", "vocab": {}, "merges": []}})") ==
        loom::ErrorCode::unsupported);
  CHECK(code_of(R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(("}, "behavior": "Isolated"},
                   "model": {"type": "BPE", "vocab": {}, "merges": []}})") == loom::ErrorCode::format);
  CHECK(code_of(R"({"decoder": {"type": "WordPiece"}, "model": {"type": "BPE", "vocab": {}, "merges": []}})") ==
        loom::ErrorCode::unsupported);
  CHECK(code_of(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                   "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "X"}}],
                   "special_tokens": {}}})") == loom::ErrorCode::format);
}

TEST_CASE("a normalizer whose steps multiply the text is refused at load, real ones are not") {
  // Found by fuzz_tokenizer_json: five Replace steps of " " -> 90 spaces would turn a
  // normalized added token into gigabytes (the fuzzer timed out after 10 s at 1.9 GB).
  const std::string spaces(90, ' ');
  std::string steps;
  for (int i = 0; i < 5; ++i) {
    if (i) steps += ", ";
    steps += R"({"type": "Replace", "pattern": {"String": " "}, "content": ")" + spaces + R"("})";
  }
  const std::string bomb = R"({"added_tokens": [{"id": 0, "content": " x ", "special": false, "normalized": true}],
    "normalizer": {"type": "Sequence", "normalizers": [)" + steps + R"(]},
    "model": {"type": "BPE", "vocab": {"x": 0}, "merges": []}})";
  try {
    (void)Tokenizer::from_tokenizer_json(bomb, "bomb.json");
    FAIL("a normalizer bomb loaded");
  } catch (const loom::Error& e) {
    CHECK(e.code() == loom::ErrorCode::format);
    const std::string what = e.what();
    CHECK(what.find("bomb.json") != std::string::npos);
    CHECK(what.find("normalizer") != std::string::npos);
  }
  // The heaviest real layouts load: NFKC, lowercasing, a prepended and a replaced "▁"
  // (bound 18 x 3 x 4 x 3 = 648), and a single step that writes 90 bytes per space.
  const std::string heavy = R"({"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"},
    {"type": "Lowercase"}, {"type": "Prepend", "prepend": "▁"},
    {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
    "model": {"type": "BPE", "vocab": {"x": 0}, "merges": []}})";
  CHECK_NOTHROW(Tokenizer::from_tokenizer_json(heavy, "heavy.json"));
  const std::string one = R"({"normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": ")" +
                          spaces + R"("}, "model": {"type": "BPE", "vocab": {"x": 0}, "merges": []}})";
  CHECK_NOTHROW(Tokenizer::from_tokenizer_json(one, "one.json"));
  // The Llama 2 layout (Prepend ▁, Replace " " -> ▁) loads, as the suite's other tests show.
  CHECK_NOTHROW(spm());
}
