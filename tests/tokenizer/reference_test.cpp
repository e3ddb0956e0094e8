// Real vocabularies against the ids their own tokenizers produced (shared/reference):
// llama.cpp's test-tokenizer-0 vectors and the model prompts' ids.
#include <catch2/catch.hpp>

#include <algorithm>
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

// A model prompt and the ids llama.cpp fed the model (models/<model>/logits/<file>.ids.txt).
struct PromptCase {
  const char* model;
  const char* prompt_file;
  const char* text;
};

// Encodes each prompt with BOS (parse_special=false) through the tokenizer `load` gives
// for the model's hf/ directory, checks the ids and that decoding (BOS dropped) gives the
// prompt back, and prints how many matched under `label`.
template <size_t N, typename Load>
void check_prompts(const fs::path& ref, const PromptCase (&cases)[N], const char* label, Load load) {
  size_t matched = 0;
  for (const auto& c : cases) {
    const auto tok = load(ref / "models" / c.model / "hf");
    const auto expected = read_ids_file(ref / "models" / c.model / "logits" / (std::string(c.prompt_file) + ".ids.txt"));
    const auto ids = tok->encode(c.text, true, false);
    INFO(c.model << " / " << c.prompt_file);
    CHECK(loom::test::ids_to_string(ids) == loom::test::ids_to_string(expected));
    if (ids == expected) ++matched;
    CHECK(tok->decode(ids, true) == c.text);
  }
  std::printf("tokenizer reference %-34s %zu/%zu prompts match exactly\n", label, matched, N);
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
  const PromptCase cases[] = {
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
  check_prompts(ref, cases, "models/*/hf/tokenizer.json", [](const fs::path& hf) {
    return loom::test::load_json_tokenizer(hf / "tokenizer.json", hf / "tokenizer_config.json");
  });
}

TEST_CASE("model tokenizer.model files (SentencePiece) reproduce the prompt ids llama.cpp fed the models") {
  LOOM_REQUIRE_REFERENCE(ref);
  // Gemma's tokenizer.model says add_dummy_prefix: false, so "The" is not "▁The".
  const PromptCase cases[] = {
      {"mistral-tiny", "capital", "The capital of France is Paris, and the capital of Germany is"},
      {"mistral-tiny", "code-add", "def add(a, b):\n    return a + b"},
      {"phi3-tiny", "capital", "The capital of France is Paris, and the capital of Germany is"},
      {"gemma-tiny", "capital", "The capital of France is Paris, and the capital of Germany is"},
      {"gemma2-tiny", "capital", "The capital of France is Paris, and the capital of Germany is"},
      {"gemma2-tiny-27b", "capital", "The capital of France is Paris, and the capital of Germany is"},
  };
  check_prompts(ref, cases, "models/*/hf/tokenizer.model", [](const fs::path& hf) {
    auto tok = Tokenizer::load(hf);
    REQUIRE(tok->name().find("tokenizer.model") != std::string::npos);
    return tok;
  });
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

TEST_CASE("falcon, gptneox and gemma tokenizers reproduce HF tokenizers / sentencepiece on inputs aimed at their pieces") {
  LOOM_REQUIRE_REFERENCE(ref);
  // Expected ids: HF `tokenizers` 0.23.2 (its Node binding) on hf/tokenizer.json for Falcon
  // and GPT-NeoX, the `sentencepiece` 0.1.97 library on hf/tokenizer.model for Gemma
  // (add_special=false, so no BOS). Each model is checked from its HF files and its GGUF.
  struct Case {
    std::string text;
    std::vector<int32_t> ids;
    bool gguf_agrees;  // llama.cpp's GGUF tokenizer gives the same ids
    // What decode gives back: nullptr for the text itself, else this (NFC's composed
    // form), or kNotText where the tiny vocabulary spells "▁" with its three byte tokens,
    // which decode to that character (sentencepiece's decode does the same).
    const char* decoded;
  };
  struct Model {
    const char* dir;
    const char* gguf;
    std::vector<Case> cases;
  };
  static constexpr const char* kNotText = "";
  const std::string sp24(24, ' ');
  const std::vector<Model> models = {
      // Falcon: Punctuation (Contiguous), ByteLevel, Digits (runs), Split [0-9]{3} (Isolated).
      {"falcon-tiny", "falcon-tiny-f32.gguf",
       {
           {"Hello!!! What?? ... --- ___", {51, 4028, 4682, 1634, 4247, 204, 951, 204, 563, 24, 204, 999, 74}, true, nullptr},
           {"$100,000.00 and 1234567 items", {15, 1425, 23, 1321, 25, 527, 273, 204, 928, 30, 2617, 33, 34, 3139}, true, nullptr},
           {"a+b=c; x<y>z|w~v^u `tick`",
            {76, 22, 77, 40, 78, 38, 1859, 39, 100, 41, 101, 103, 98, 105, 97, 73, 96, 204, 75, 95, 588, 75}, true, nullptr},
           {"«guillemets» „low“ — – … ¿Qué? ¡Sí!",
            {2577, 3493, 2473, 88, 1203, 2118, 204, 4668, 87, 307, 488, 204, 791, 204, 600, 204, 898, 204, 7741, 3630,
             465, 42, 204, 136, 106, 62, 859, 12},
            true, nullptr},
           {"12345 678 9 ٣٤٥ ①② ½",
            {928, 30, 2617, 204, 33, 5070, 204, 36, 204, 159, 108, 159, 109, 159, 110, 2723, 223, 238, 168, 223, 106,
             3068, 133},
            true, nullptr},
           {"don't we'll I'm", {79, 245, 18, 95, 360, 18, 567, 295, 18, 88}, true, nullptr},
           {"  many   spaces\n\n\ttabs", {204, 860, 258, 7729, 1001, 192, 95, 366, 94}, true, nullptr},
           {"中文，标点。！？", {4344, 3103, 213, 181, 132, 218, 4972, 213, 173, 208, 129, 1258, 181, 132, 207, 181, 132, 237}, true, nullptr},
           {"emoji 😀👍🏽 ok", {357, 90, 5439, 3346, 230, 206, 2571, 223, 219, 2571, 221, 133, 4469}, true, nullptr},
           // HF's punctuation table is Unicode 8.0's: U+2E43 is not punctuation there (it
           // stays with the space before it), U+166D is (llama.cpp's \p{P} says otherwise).
           {"x\u2014 \u2E43\u166D+ ok", {99, 791, 2723, 129, 209, 167, 231, 239, 22, 4469}, false, nullptr},
           {"snake_case_name and kebab-case path/to/file.txt",
            {94, 89, 497, 74, 5858, 74, 2827, 273, 816, 77, 366, 24, 5858, 2895, 26, 534, 26, 4462, 25, 95, 689}, true, nullptr},
       }},
      // GPT-NeoX: NFC, then the whitespace-run added tokens (8128 = 24 spaces ... 8150 = 2),
      // matched in the normalized text before the ByteLevel pre-tokenizer.
      {"gptneox-tiny", "gptneox-tiny-f32.gguf",
       {
           {"a    b", {66, 8148, 67}, true, nullptr},
           {"x" + sp24 + "  y", {89, 8128, 8150, 90}, true, nullptr},
           {"def f():\n        return 1\n", {1545, 269, 1082, 27, 187, 8144, 2309, 337, 187}, true, nullptr},
           {sp24 + sp24 + " z", {8128, 8128, 1182}, true, nullptr},
           {"Hello     World", {41, 6646, 8147, 56, 2875}, true, nullptr},
           {"\t  \n   \n", {186, 8150, 187, 8149, 187}, true, nullptr},
           {"   leading", {8149, 282, 6748}, true, nullptr},
           {"trailing   ", {7604, 4837, 8149}, true, nullptr},
           // e + U+0301, A + U+030A: NFC composes them (llama.cpp's GGUF path has no NFC).
           {"cafe\xCC\x81 A\xCC\x8A", {68, 2320, 860, 1325, 216}, false, "caf\xC3\xA9 \xC3\x85"},
       }},
      // Gemma: SentencePiece BPE, add_dummy_prefix false (no "▁" before the text).
      {"gemma-tiny", "gemma-tiny-f32.gguf",
       {
           {"Hello world", {75, 3156, 3186}, true, nullptr},
           {" Hello", {379, 3156}, true, nullptr},
           {"  two spaces", {229, 153, 132, 1023, 805, 3302}, true, kNotText},
           {"x  \n  y", {123, 259, 13, 229, 153, 132, 343}, true, kNotText},
           {"12345 678", {52, 53, 54, 55, 56, 229, 153, 132, 57, 58, 59}, true, kNotText},
           {"don't", {103, 265, 42, 119}, true, nullptr},
           {"¿Qué? ¡Sí! 中文",
            {197, 194, 2182, 198, 172, 66, 229, 153, 132, 197, 164, 86, 198, 176, 36, 229, 153, 132, 231, 187, 176, 233,
             153, 138},
            true, kNotText},
           {"emoji 😀", {331, 114, 2397, 229, 153, 132, 243, 162, 155, 131}, true, kNotText},
           {"tabs\tand\r\nlines", {3891, 118, 12, 392, 16, 13, 111, 1475}, true, nullptr},
       }},
  };
  size_t matched = 0, total = 0;
  for (const auto& m : models) {
    const fs::path dir = ref / "models" / m.dir;
    const auto hf = Tokenizer::load(dir / "hf");
    const auto gguf = Tokenizer::load(dir / m.gguf);
    for (const auto& c : m.cases) {
      INFO(m.dir << ": '" << c.text << "'");
      const auto ids = hf->encode(c.text, false, false);
      CHECK(loom::test::ids_to_string(ids) == loom::test::ids_to_string(c.ids));
      ++total;
      if (ids == c.ids) ++matched;
      if (c.gguf_agrees) CHECK(loom::test::ids_to_string(gguf->encode(c.text, false, false)) == loom::test::ids_to_string(c.ids));
      if (c.decoded != kNotText) CHECK(hf->decode(c.ids) == (c.decoded ? std::string(c.decoded) : c.text));
    }
  }
  std::printf("tokenizer reference %-34s %zu/%zu inputs match exactly\n", "falcon/gptneox/gemma vs HF, spm", matched, total);
}

TEST_CASE("falcon-tiny reproduces the ggml-vocab-falcon vectors that fall inside its vocabulary prefix") {
  LOOM_REQUIRE_REFERENCE(ref);
  // falcon-tiny's 8192 tokens are the first of Falcon's 65024, and each merge's result is
  // a later token than its parts, so an input whose real ids all lie below 8192 gets the
  // same merges, and ids, from the prefix. (ggml-vocab-gpt-neox's vectors are llama.cpp's
  // "default" pre-tokenizer, which splits " (" where HF's GPT-NeoX does not, so they
  // cannot stand for gptneox-tiny's tokenizer.json.)
  constexpr int32_t kPrefix = 8192;
  const fs::path vectors = ref / "tokenizers" / "ggml-vocab-falcon.gguf";
  const auto inputs = loom::test::read_vocab_inputs(fs::path(vectors.string() + ".inp"));
  const auto outputs = loom::test::read_vocab_outputs(fs::path(vectors.string() + ".out"));
  REQUIRE(inputs.size() == outputs.size());
  for (const char* source : {"hf/tokenizer.json", "falcon-tiny-f32.gguf"}) {
    auto tok = Tokenizer::load(ref / "models" / "falcon-tiny" / source);
    size_t checked = 0, matched = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const auto& expected = outputs[i];
      if (std::any_of(expected.begin(), expected.end(), [](int32_t id) { return id >= kPrefix; })) continue;
      ++checked;
      INFO(source << " input #" << i << ": '" << inputs[i] << "'");
      const auto ids = tok->encode(inputs[i], false, false);
      CHECK(loom::test::ids_to_string(ids) == loom::test::ids_to_string(expected));
      if (ids == expected) ++matched;
      CHECK(tok->decode(ids) == inputs[i]);
    }
    CHECK(checked >= 12);  // 13 of the 46 vectors fit: the case does test something
    std::printf("tokenizer reference %-34s %zu/%zu in-prefix vectors match exactly\n",
                (std::string("falcon-tiny/") + source).c_str(), matched, checked);
  }
}

TEST_CASE("the full vocab-only Falcon and GPT-NeoX GGUFs give the ids the tiny models were fed") {
  LOOM_REQUIRE_REFERENCE(ref);
  // falcon-tiny and gptneox-tiny keep a prefix of the real vocabularies with the real ids,
  // so the full vocabularies must tokenize their prompt the same way.
  const std::string capital = "The capital of France is Paris, and the capital of Germany is";
  struct Case {
    const char* vocab;
    const char* ids;
  };
  const Case cases[] = {{"ggml-vocab-falcon.gguf", "falcon-tiny/logits/capital.ids.txt"},
                        {"ggml-vocab-gpt-neox.gguf", "gptneox-tiny/logits/capital.ids.txt"}};
  for (const auto& c : cases) {
    INFO(c.vocab);
    auto tok = Tokenizer::load(ref / "tokenizers" / c.vocab);
    const auto expected = read_ids_file(ref / "models" / c.ids);
    CHECK(loom::test::ids_to_string(tok->encode(capital, true, false)) == loom::test::ids_to_string(expected));
    CHECK(tok->decode(expected, true) == capital);
  }
}
