// Real vocabularies against the ids their own tokenizers produced (shared/reference):
// llama.cpp's test-tokenizer-0 vectors and the model prompts' ids.
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "loom/error.hpp"
#include "loom/tokenizer.hpp"
#include "tokenizer/tok_test_util.hpp"

using loom::Tokenizer;
namespace fs = std::filesystem;

namespace {

struct MatchReport {
  size_t inputs = 0;
  size_t matched = 0;
  size_t roundtrips = 0;
};

// Encodes every .inp string with add_special=false, parse_special=false, compares with
// the .out ids, and checks decode(encode(x)) == x when `lossless`.
MatchReport check_vectors(const Tokenizer& tok, const fs::path& inp, const fs::path& out,
                          bool lossless, const std::string& label) {
  const auto inputs = loom::test::read_vocab_inputs(inp);
  const auto expected = loom::test::read_vocab_outputs(out);
  REQUIRE(inputs.size() == expected.size());
  REQUIRE(inputs.size() >= 40);
  MatchReport rep;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto ids = tok.encode(inputs[i], false, false);
    ++rep.inputs;
    INFO(label << " input #" << i << ": '" << inputs[i] << "'");
    CHECK(loom::test::ids_to_string(ids) == loom::test::ids_to_string(expected[i]));
    if (ids == expected[i]) ++rep.matched;
    if (lossless) {
      const std::string back = tok.decode(expected[i]);
      CHECK(back == inputs[i]);
      if (back == inputs[i]) ++rep.roundtrips;
    }
  }
  std::printf("tokenizer reference %-34s %zu/%zu inputs match exactly", label.c_str(), rep.matched, rep.inputs);
  if (lossless) std::printf(", decode round-trips %zu/%zu", rep.roundtrips, rep.inputs);
  std::printf("\n");
  return rep;
}

// "<ids>" line of a *.ids.txt file.
std::vector<int32_t> read_ids_file(const fs::path& p) {
  return loom::test::parse_ids(loom::test::read_file_text(p));
}

}  // namespace

TEST_CASE("llama2 tokenizer.json reproduces llama.cpp's llama-spm vectors") {
  LOOM_REQUIRE_REFERENCE(ref);
  const fs::path dir = ref / "tokenizers" / "llama2";
  auto tok = loom::test::load_json_tokenizer(dir / "tokenizer.json", dir / "tokenizer_config.json");
  CHECK(tok->vocab_size() == 32000);
  CHECK(tok->bos_id() == 1);
  CHECK(tok->eos_id() == 2);
  CHECK(tok->unk_id() == 0);
  CHECK(tok->add_bos());
  CHECK_FALSE(tok->add_eos());
  const auto rep = check_vectors(*tok, dir / "ggml-vocab-llama-spm.gguf.inp",
                                 dir / "ggml-vocab-llama-spm.gguf.out", true, "llama2/tokenizer.json");
  CHECK(rep.matched == rep.inputs);
}

TEST_CASE("llama3 tokenizer.json reproduces llama.cpp's llama-bpe vectors") {
  LOOM_REQUIRE_REFERENCE(ref);
  const fs::path dir = ref / "tokenizers" / "llama3";
  auto tok = loom::test::load_json_tokenizer(dir / "tokenizer.json", dir / "tokenizer_config.json");
  CHECK(tok->vocab_size() == 128256);
  CHECK(tok->bos_id() == 128000);
  CHECK(tok->eos_id() == 128001);
  CHECK(tok->is_eos(128009));  // <|eot_id|>
  CHECK(tok->is_special(128000));
  CHECK_FALSE(tok->chat_template().empty());
  const auto rep = check_vectors(*tok, dir / "ggml-vocab-llama-bpe.gguf.inp",
                                 dir / "ggml-vocab-llama-bpe.gguf.out", true, "llama3/tokenizer.json");
  CHECK(rep.matched == rep.inputs);
}

TEST_CASE("model tokenizer.json files reproduce the prompt ids llama.cpp fed the models") {
  LOOM_REQUIRE_REFERENCE(ref);
  struct Case {
    const char* model;
    const char* prompt_file;  // logits/<name>.ids.txt
    const char* text;
  };
  const Case cases[] = {
      {"stories260K", "once_upon", "Once upon a time"},
      {"stories260K", "zoo", "Zoo"},
      {"tiny-llama", "france", "The capital of France is Paris, and the capital of Germany is"},
      {"tiny-llama", "chinese", "中国的首都是北京。"},
      {"tiny-llama", "code", "def add(a, b):\n    return a + b"},
      {"qwen2-tiny", "capital", "The capital of France is Paris, and the capital of Germany is"},
      {"qwen2-tiny", "code-add", "def add(a, b):\n    return a + b"},
      {"gpt2-tiny", "capital", "The capital of France is Paris, and the capital of Germany is"},
      {"gpt2-tiny", "code-add", "def add(a, b):\n    return a + b"},
      {"small-quant", "story", "Once upon a time, there was a little girl named Lily."},
      // Falcon: Sequence[Punctuation, ByteLevel, Digits, Split [0-9]{3}]; GPT-NeoX: NFC +
      // ByteLevel with 23 normalized whitespace-run added tokens.
      {"falcon-tiny", "capital", "The capital of France is Paris, and the capital of Germany is"},
      {"falcon-tiny-newdec", "capital", "The capital of France is Paris, and the capital of Germany is"},
      {"gptneox-tiny", "capital", "The capital of France is Paris, and the capital of Germany is"},
  };
  size_t matched = 0;
  for (const auto& c : cases) {
    const fs::path hf = ref / "models" / c.model / "hf";
    auto tok = loom::test::load_json_tokenizer(hf / "tokenizer.json", hf / "tokenizer_config.json");
    const auto expected = read_ids_file(ref / "models" / c.model / "logits" / (std::string(c.prompt_file) + ".ids.txt"));
    const auto ids = tok->encode(c.text, true, false);
    INFO(c.model << " / " << c.prompt_file);
    CHECK(loom::test::ids_to_string(ids) == loom::test::ids_to_string(expected));
    if (ids == expected) ++matched;
    // Decoding drops the BOS the model adds and gives the prompt back.
    CHECK(tok->decode(ids, true) == c.text);
  }
  std::printf("tokenizer reference %-34s %zu/%zu prompts match exactly\n", "models/*/hf/tokenizer.json", matched,
              std::size(cases));
}

TEST_CASE("model tokenizer.model files (SentencePiece) reproduce the prompt ids llama.cpp fed the models") {
  LOOM_REQUIRE_REFERENCE(ref);
  struct Case {
    const char* model;
    const char* prompt_file;  // logits/<name>.ids.txt
    const char* text;
  };
  // Gemma's tokenizer.model says add_dummy_prefix: false, so "The" is not "▁The".
  const Case cases[] = {
      {"mistral-tiny", "capital", "The capital of France is Paris, and the capital of Germany is"},
      {"mistral-tiny", "code-add", "def add(a, b):\n    return a + b"},
      {"phi3-tiny", "capital", "The capital of France is Paris, and the capital of Germany is"},
      {"gemma-tiny", "capital", "The capital of France is Paris, and the capital of Germany is"},
      {"gemma2-tiny", "capital", "The capital of France is Paris, and the capital of Germany is"},
      {"gemma2-tiny-27b", "capital", "The capital of France is Paris, and the capital of Germany is"},
  };
  size_t matched = 0;
  for (const auto& c : cases) {
    const fs::path hf = ref / "models" / c.model / "hf";
    auto tok = Tokenizer::load(hf);
    REQUIRE(tok->name().find("tokenizer.model") != std::string::npos);
    const auto expected = read_ids_file(ref / "models" / c.model / "logits" / (std::string(c.prompt_file) + ".ids.txt"));
    const auto ids = tok->encode(c.text, true, false);
    INFO(c.model << " / " << c.prompt_file);
    CHECK(loom::test::ids_to_string(ids) == loom::test::ids_to_string(expected));
    if (ids == expected) ++matched;
    CHECK(tok->decode(ids, true) == c.text);
  }
  std::printf("tokenizer reference %-34s %zu/%zu prompts match exactly\n", "models/*/hf/tokenizer.model", matched,
              std::size(cases));
}

TEST_CASE("vocab-only GGUFs reproduce llama.cpp's test-tokenizer-0 vectors") {
  LOOM_REQUIRE_REFERENCE(ref);
  struct Case {
    const char* vocab;
    bool lossless;
  };
  // Every vocabulary here round-trips its inputs; Falcon's and GPT-NeoX's too.
  const Case cases[] = {{"llama-spm", true}, {"phi-3", true}, {"gpt-2", true},
                        {"falcon", true}, {"starcoder", true}, {"gpt-neox", true}};
  for (const auto& c : cases) {
    const fs::path gguf = ref / "tokenizers" / (std::string("ggml-vocab-") + c.vocab + ".gguf");
    auto tok = Tokenizer::load(gguf);
    const auto rep = check_vectors(*tok, fs::path(gguf.string() + ".inp"), fs::path(gguf.string() + ".out"),
                                   c.lossless, std::string("ggml-vocab-") + c.vocab + ".gguf");
    CHECK(rep.matched == rep.inputs);
  }
}

TEST_CASE("model GGUFs reproduce the prompt ids llama.cpp fed the models") {
  LOOM_REQUIRE_REFERENCE(ref);
  struct Case {
    const char* gguf;
    const char* ids;
    const char* text;
  };
  const std::string capital = "The capital of France is Paris, and the capital of Germany is";
  const std::string code = "def add(a, b):\n    return a + b";
  const Case cases[] = {
      {"stories260K/gguf/stories260K-f32.gguf", "stories260K/logits/once_upon.ids.txt", "Once upon a time"},
      {"stories260K/gguf/stories260K-f32.gguf", "stories260K/logits/zoo.ids.txt", "Zoo"},
      {"tiny-llama/tiny-llama-f32.gguf", "tiny-llama/logits/france.ids.txt", capital.c_str()},
      {"tiny-llama/tiny-llama-f32.gguf", "tiny-llama/logits/chinese.ids.txt", "中国的首都是北京。"},
      {"tiny-llama/tiny-llama-f32.gguf", "tiny-llama/logits/code.ids.txt", code.c_str()},
      {"mistral-tiny/mistral-tiny-f32.gguf", "mistral-tiny/logits/capital.ids.txt", capital.c_str()},
      {"mistral-tiny/mistral-tiny-f32.gguf", "mistral-tiny/logits/code-add.ids.txt", code.c_str()},
      {"phi3-tiny/phi3-tiny-f32.gguf", "phi3-tiny/logits/capital.ids.txt", capital.c_str()},
      {"phi3-tiny/phi3-tiny-f32.gguf", "phi3-tiny/logits/code-add.ids.txt", code.c_str()},
      {"qwen2-tiny/qwen2-tiny-f32.gguf", "qwen2-tiny/logits/capital.ids.txt", capital.c_str()},
      {"qwen2-tiny/qwen2-tiny-f32.gguf", "qwen2-tiny/logits/code-add.ids.txt", code.c_str()},
      {"gpt2-tiny/gpt2-tiny-f32.gguf", "gpt2-tiny/logits/capital.ids.txt", capital.c_str()},
      {"gpt2-tiny/gpt2-tiny-f32.gguf", "gpt2-tiny/logits/code-add.ids.txt", code.c_str()},
      {"small-quant/small-quant-q8_0.gguf", "small-quant/logits/story.ids.txt",
       "Once upon a time, there was a little girl named Lily."},
      {"falcon-tiny/falcon-tiny-f32.gguf", "falcon-tiny/logits/capital.ids.txt", capital.c_str()},
      {"falcon-tiny-newdec/falcon-tiny-newdec-f32.gguf", "falcon-tiny-newdec/logits/capital.ids.txt", capital.c_str()},
      {"gptneox-tiny/gptneox-tiny-f32.gguf", "gptneox-tiny/logits/capital.ids.txt", capital.c_str()},
      {"gemma-tiny/gemma-tiny-f32.gguf", "gemma-tiny/logits/capital.ids.txt", capital.c_str()},
      {"gemma2-tiny/gemma2-tiny-f32.gguf", "gemma2-tiny/logits/capital.ids.txt", capital.c_str()},
      {"gemma2-tiny-27b/gemma2-tiny-27b-f32.gguf", "gemma2-tiny-27b/logits/capital.ids.txt", capital.c_str()},
  };
  size_t matched = 0;
  for (const auto& c : cases) {
    auto tok = Tokenizer::load(ref / "models" / c.gguf);
    const auto expected = read_ids_file(ref / "models" / c.ids);
    const auto ids = tok->encode(c.text, true, false);
    INFO(c.gguf << " / " << c.ids);
    CHECK(loom::test::ids_to_string(ids) == loom::test::ids_to_string(expected));
    if (ids == expected) ++matched;
    CHECK(tok->decode(ids, true) == c.text);
  }
  std::printf("tokenizer reference %-34s %zu/%zu prompts match exactly\n", "models/*/*.gguf", matched,
              std::size(cases));
}

TEST_CASE("qwen2's NFC normalizer composes decomposed input before byte-level BPE") {
  LOOM_REQUIRE_REFERENCE(ref);
  const fs::path hf = ref / "models" / "qwen2-tiny" / "hf";
  auto tok = loom::test::load_json_tokenizer(hf / "tokenizer.json", hf / "tokenizer_config.json");
  const std::string composed = "caf\xC3\xA9 na\xC3\xAFve";      // café naïve
  const std::string decomposed = "cafe\xCC\x81 nai\xCC\x88ve";  // e + U+0301, i + U+0308
  CHECK(tok->encode(decomposed) == tok->encode(composed));
  CHECK(tok->decode(tok->encode(decomposed)) == composed);
  CHECK_FALSE(tok->add_bos());  // Qwen2 adds no BOS
  CHECK(tok->eos_id() == 7165);
  CHECK(tok->is_eos(7167));  // <|im_end|>
  CHECK(tok->encode("<|im_start|>user", false, true).front() == 7166);
}

TEST_CASE("load() finds a model directory's tokenizer: tokenizer.json first, else its GGUF") {
  LOOM_REQUIRE_REFERENCE(ref);
  // hf/ has tokenizer.json; mistral-tiny/ (the folder above hf/) resolves to its GGUF.
  auto qwen = Tokenizer::load(ref / "models" / "qwen2-tiny" / "hf");
  CHECK(qwen->name().find("tokenizer.json") != std::string::npos);
  CHECK(qwen->chat_template().empty());
  auto mistral = Tokenizer::load(ref / "models" / "mistral-tiny");
  CHECK(mistral->name().find("mistral-tiny-f32.gguf") != std::string::npos);
  CHECK(mistral->vocab_size() == 4096);
  CHECK(mistral->encode("The capital", true) == std::vector<int32_t>{1, 450, 2117, 2410});
  // hf/ itself holds only SentencePiece's tokenizer.model: read like llama.cpp's
  // converter reads it, it gives the same ids as the GGUF.
  auto mistral_spm = Tokenizer::load(ref / "models" / "mistral-tiny" / "hf");
  CHECK(mistral_spm->name().find("tokenizer.model") != std::string::npos);
  CHECK(mistral_spm->encode("The capital", true) == std::vector<int32_t>{1, 450, 2117, 2410});
  auto phi3_spm = Tokenizer::load(ref / "models" / "phi3-tiny" / "hf");
  CHECK(phi3_spm->vocab_size() == 4160);  // 4096 pieces, 11 added tokens, padding to config.json
  CHECK(phi3_spm->eos_id() == 4096);
  CHECK(phi3_spm->is_eos(4103));  // <|end|>, from added_tokens / tokenizer_config.json
  CHECK(phi3_spm->token_text(4107) == "[PAD4107]");  // padding to config.json: UNUSED, silent
  CHECK(phi3_spm->decode(std::vector<int32_t>{450, 4107, 2117, 2410}) == "The capital");
  auto phi3 = Tokenizer::load(ref / "models" / "phi3-tiny" / "phi3-tiny-f32.gguf");
  CHECK(phi3->eos_id() == 4096);
  CHECK(phi3->is_eos(4103));  // <|end|>
  CHECK(phi3->chat_template().empty());  // this converted GGUF carries none
}

TEST_CASE("gptneox-tiny: ids past the tokenizer, up to the embedding's rows, decode to nothing in both sources") {
  LOOM_REQUIRE_REFERENCE(ref);
  const fs::path dir = ref / "models" / "gptneox-tiny";
  // tokenizer.json defines ids 0..8150; config.json's vocab_size is 8192 (Pythia pads its
  // embedding the same way). The GGUF carries [PAD8151]..[PAD8191], type UNUSED.
  auto hf = Tokenizer::load(dir / "hf");
  auto gguf = Tokenizer::load(dir / "gptneox-tiny-f32.gguf");
  CHECK(hf->vocab_size() == 8192);
  CHECK(gguf->vocab_size() == 8192);
  const std::vector<int32_t> ids = {510, 5347, 8151, 273, 8191};  // "The capital", pads, " of"
  for (const auto& tok : {hf, gguf}) {
    INFO(tok->name());
    CHECK(tok->decode(ids) == "The capital of");
    CHECK(tok->decode(ids, true) == "The capital of");
    CHECK(tok->token_to_piece(8160).empty());
    CHECK_FALSE(tok->is_special(8160));
    Tokenizer::StreamDecoder stream(tok);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.feed(id);
    streamed += stream.finish();
    CHECK(streamed == "The capital of");
    CHECK_THROWS_AS(tok->decode(std::vector<int32_t>{8192}), loom::Error);
  }
  CHECK(gguf->token_text(8151) == "[PAD8151]");  // the stored text stays readable
  CHECK(hf->token_text(8151).empty());
  // The 23 whitespace-run tokens (24 down to 2 spaces) are added tokens, not special.
  CHECK(hf->token_id(std::string(24, ' ')) == 8128);
  CHECK(hf->token_id("  ") == 8150);
  CHECK_FALSE(hf->is_special(8128));
  CHECK(gguf->token_id(std::string(24, ' ')) == 8128);
}
