// llama2.c tokenizer.bin: read into the SentencePiece-style vocabulary, checked against
// the Hugging Face tokenizer.json of the same vocabulary (shared/reference), and every
// malformed record refused with the file and byte offset.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "loom/error.hpp"
#include "loom/tokenizer.hpp"
#include "support/format_fixtures.hpp"
#include "support/llama2c_writer.hpp"
#include "tokenizer/llama2c_vocab.hpp"
#include "tokenizer/tok_test_util.hpp"

using loom::ErrorCode;
using loom::Tokenizer;
using loom::test::expect_error;
namespace fs = std::filesystem;

namespace {

std::string as_text(const std::vector<uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

std::shared_ptr<const Tokenizer> from_bytes(const std::vector<uint8_t>& bytes) {
  return Tokenizer::from_gguf_metadata(loom::tok::llama2c_vocab_metadata(as_text(bytes), "tok.bin"), "tok.bin");
}

}  // namespace

TEST_CASE("llama2c tokenizer: specials, byte tokens and '▁' restored, BPE by scores") {
  const auto vocab = loom::test::llama2c_small_vocab();
  const auto md = loom::tok::llama2c_vocab_metadata(as_text(loom::test::llama2c_tokenizer_file(vocab)), "tok.bin");
  const loom::MetaValue& tokens = *md.find("tokenizer.ggml.tokens");
  const loom::MetaValue& types = *md.find("tokenizer.ggml.token_type");
  REQUIRE(tokens.array_size() == vocab.size());
  CHECK(tokens.string_item(0) == "<unk>");
  CHECK(types.array_item(0).as_int() == 2);
  CHECK(tokens.string_item(1) == "<s>");
  CHECK(types.array_item(1).as_int() == 3);
  CHECK(tokens.string_item(2) == "</s>");
  CHECK(types.array_item(2).as_int() == 3);
  CHECK(tokens.string_item(3 + 0x41) == "<0x41>");
  CHECK(types.array_item(3 + 0x41).as_int() == 6);
  CHECK(tokens.string_item(259) == "\xE2\x96\x81t");  // " t" stored, "▁t" meant
  CHECK(types.array_item(259).as_int() == 1);
  CHECK(md.find("tokenizer.ggml.bos_token_id")->as_int() == 1);
  CHECK(md.find("tokenizer.ggml.eos_token_id")->as_int() == 2);
  CHECK(md.find("tokenizer.ggml.unknown_token_id")->as_int() == 0);

  const auto tok = from_bytes(loom::test::llama2c_tokenizer_file(vocab));
  CHECK(tok->vocab_size() == static_cast<int32_t>(vocab.size()));
  CHECK(tok->bos_id() == 1);
  CHECK(tok->add_bos());
  // "the and": the dummy prefix, then the best-scored merges: "▁the", "▁and".
  const auto ids = tok->encode("the and", true);
  const std::vector<int32_t> expected{1, 262, 266};
  CHECK(ids == expected);
  CHECK(tok->decode(ids, true) == "the and");
  // A character outside the vocabulary falls back to its UTF-8 bytes.
  const auto bytes = tok->encode("\xC3\xA9", false);
  const std::vector<int32_t> fallback{274, 3 + 0xC3, 3 + 0xA9};  // "▁", then é's bytes
  CHECK(bytes == fallback);
}

TEST_CASE("llama2c tokenizer: malformed files are errors with the byte offset") {
  const auto good = loom::test::llama2c_tokenizer_file(loom::test::llama2c_small_vocab());
  auto parse = [](const std::vector<uint8_t>& b) { loom::tok::llama2c_vocab_metadata(as_text(b), "tok.bin"); };
  expect_error([&] { parse({}); }, ErrorCode::format, "truncated header", "tok.bin", {}, 0);
  expect_error([&] { parse({6, 0, 0, 0}); }, ErrorCode::format, "no tokens", "tok.bin");
  expect_error([&] { parse({0xff, 0xff, 0xff, 0xff}); }, ErrorCode::format, "max_token_length -1", "tok.bin", {}, 0);
  auto cut = good;
  cut.pop_back();
  expect_error([&] { parse(cut); }, ErrorCode::format, "runs past the end", "tok.bin");
  auto half_record = good;
  half_record.insert(half_record.end(), {0, 0, 0, 0, 1});
  expect_error([&] { parse(half_record); }, ErrorCode::format, "truncated token record (length)", "tok.bin",
               {}, good.size() + 4);
  auto negative = good;
  const int32_t minus = -3;
  std::memcpy(negative.data() + 8, &minus, 4);  // token 0's length
  expect_error([&] { parse(negative); }, ErrorCode::format, "token 0 has length -3", "tok.bin", {}, 8);
  auto too_long = good;
  const int32_t big = 1000;
  std::memcpy(too_long.data() + 8, &big, 4);
  expect_error([&] { parse(too_long); }, ErrorCode::format, "max_token_length is 6", "tok.bin", {}, 8);
  auto nan = good;
  const float q = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(nan.data() + 4, &q, 4);
  expect_error([&] { parse(nan); }, ErrorCode::format, "non-finite score", "tok.bin", {}, 4);
}

TEST_CASE("llama2c tokenizer: tok512.bin tokenizes like the HF tokenizer.json of the same vocabulary") {
  LOOM_REQUIRE_REFERENCE(ref);
  const fs::path dir = ref / "models" / "stories260K";
  const auto bin = Tokenizer::from_llama2c(dir / "llama2c" / "tok512.bin");
  const auto hf = loom::test::load_json_tokenizer(dir / "hf" / "tokenizer.json", dir / "hf" / "tokenizer_config.json");
  REQUIRE(bin->vocab_size() == 512);
  REQUIRE(hf->vocab_size() == 512);
  for (int32_t id = 0; id < 512; ++id) {
    INFO("id " << id);
    CHECK(bin->token_to_piece(id) == hf->token_to_piece(id));
  }
  std::vector<std::string> texts{"Once upon a time", "Zoo", "", " ", "  two  spaces", "Lily's mom said, \"Hi!\"\n",
                                 "caf\xC3\xA9 \xE2\x82\xAC 100%", "\xE4\xB8\xAD\xE6\x96\x87", "\t\ttabs\r\n", "<s> not special"};
  // llama.cpp's SentencePiece test strings too (another vocabulary's, but any text will do).
  for (auto& s : loom::test::read_vocab_inputs(ref / "tokenizers" / "llama2" / "ggml-vocab-llama-spm.gguf.inp")) {
    texts.push_back(std::move(s));
  }
  size_t same = 0;
  for (const auto& text : texts) {
    INFO("'" << text << "'");
    const auto a = bin->encode(text, true);
    CHECK(a == hf->encode(text, true));
    CHECK(bin->decode(a, true) == hf->decode(a, true));
    same += a == hf->encode(text, true);
  }
  std::printf("tok512.bin vs tokenizer.json: %zu/%zu texts tokenize identically\n", same, texts.size());
  CHECK(bin->encode("Once upon a time", true) ==
        loom::test::parse_ids(loom::test::read_file_text(dir / "logits" / "once_upon.ids.txt")));
  CHECK(bin->encode("Zoo", true) == loom::test::parse_ids(loom::test::read_file_text(dir / "logits" / "zoo.ids.txt")));
}
