// Files written by other tools (llama.cpp, gguf-py, safetensors, torch 1.13) in the
// reference folder: they open, list the expected tensors, and hold the expected bytes.
//
// Expected checksums are FNV-1a 64 of a tensor's raw bytes, computed independently of
// loom with python3's struct/json/zipfile modules: the script parsed each GGUF header
// (and safetensors header) itself, took the tensor's offset and size, and hashed
// f[data_start + offset : data_start + offset + nbytes]; for the torch file it hashed
// the zip entry pytorch_model/data/0 (read with zipfile). Shapes below are row-major
// (GGUF stores them reversed).
#include <catch2/catch.hpp>

#include <map>

#include "loom/format.hpp"
#include "support/format_fixtures.hpp"
#include "support/test_support.hpp"

using loom::DType;
using loom::FormatKind;
using loom::Shape;

namespace {

struct Expected {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t fnv;
};

void check_tensors(const loom::WeightSource& src, const std::vector<Expected>& expected) {
  for (const auto& e : expected) {
    INFO(src.root() << ": " << e.name);
    const auto* r = src.find(e.name);
    REQUIRE(r != nullptr);
    CHECK(r->dtype == e.dtype);
    CHECK(r->shape == e.shape);
    CHECK(loom::test::fnv1a64(src.load(*r)) == e.fnv);
  }
}

}  // namespace

TEST_CASE("reference: stories260K in GGUF, safetensors and torch .bin") {
  LOOM_REQUIRE_REFERENCE(ref);
  const auto dir = ref / "models" / "stories260K";

  auto gguf = loom::open_weights(dir / "gguf" / "stories260K-f32.gguf");
  CHECK(gguf->format() == FormatKind::gguf);
  CHECK(gguf->tensors().size() == 48);
  CHECK(gguf->metadata().size() == 19);
  CHECK(gguf->metadata().find("general.architecture")->as_string() == "llama");
  CHECK(gguf->metadata().find("tokenizer.ggml.tokens")->array_size() == 512);
  check_tensors(*gguf, {
                           {"token_embd.weight", DType::f32, {512, 64}, 0x92105060e9e7c6f6ull},
                           {"blk.0.ffn_down.weight", DType::f32, {64, 172}, 0x7961d2c17193b0c3ull},
                           {"blk.0.attn_q.weight", DType::f32, {64, 64}, 0xef13cb418d7ff76bull},
                           {"output_norm.weight", DType::f32, {64}, 0x411bf9c8787bfab5ull},
                       });

  auto st = loom::open_weights(dir / "hf");
  CHECK(st->format() == FormatKind::safetensors);
  CHECK(st->tensors().size() == 47);
  CHECK(st->metadata().find("format")->as_string() == "pt");
  check_tensors(*st, {
                         {"model.embed_tokens.weight", DType::f32, {512, 64}, 0x92105060e9e7c6f6ull},
                         {"model.layers.0.self_attn.q_proj.weight", DType::f32, {64, 64}, 0x105892af2cae6c77ull},
                         {"model.norm.weight", DType::f32, {64}, 0x411bf9c8787bfab5ull},
                     });

  // torch.save (torch 1.13): the archive folder is "pytorch_model", storages are views.
  for (auto mode : {loom::IoMode::mmap, loom::IoMode::stream}) {
    auto bin = loom::open_weights(dir / "pytorch", {.io_mode = mode});
    CHECK(bin->format() == FormatKind::torch);
    REQUIRE(bin->tensors().size() == 47);
    check_tensors(*bin, {{"model.embed_tokens.weight", DType::f32, {512, 64}, 0x92105060e9e7c6f6ull}});
    // The .bin and the safetensors hold identical bytes for every tensor.
    for (const auto& r : st->tensors()) {
      INFO(r.name);
      const auto* b = bin->find(r.name);
      REQUIRE(b != nullptr);
      CHECK(b->dtype == r.dtype);
      CHECK(b->shape == r.shape);
      const auto bt = bin->load(*b);
      if (mode == loom::IoMode::mmap) CHECK(bin->files()[0].file->contains(bt.raw_data(), b->nbytes));
      CHECK(loom::test::same_bytes(bt, st->load(r)));
    }
  }
}

TEST_CASE("reference: small-quant GGUFs in every quantized and float type") {
  LOOM_REQUIRE_REFERENCE(ref);
  const auto dir = ref / "models" / "small-quant";
  struct File {
    std::string name;
    DType dtype;
    uint64_t ffn_down_fnv;
    uint64_t embd_fnv;
  };
  const std::vector<File> files{
      {"small-quant-q4_k.gguf", DType::q4_k, 0xf6a12e509c0626aeull, 0x886bef4545756590ull},
      {"small-quant-q4_0.gguf", DType::q4_0, 0xd58dc4798b4b54efull, 0x0affbc8e101c7105ull},
      {"small-quant-q6_k.gguf", DType::q6_k, 0xf46b8de18dc0cda4ull, 0x84745c00d7aff8a0ull},
      {"small-quant-q8_0.gguf", DType::q8_0, 0x3bbe5de9cef5c4baull, 0xde1a7d9747508f37ull},
      {"small-quant-f16.gguf", DType::f16, 0x2825fe4c4c42408aull, 0x0c359c7052524943ull},
      {"small-quant-bf16.gguf", DType::bf16, 0x3e172314e5c85b8cull, 0x3e63dfb1f2d0205dull},
  };
  for (const auto& f : files) {
    auto src = loom::open_weights(dir / f.name);
    CHECK(src->tensors().size() == 39);
    int of_type = 0;
    for (const auto& r : src->tensors()) of_type += r.dtype == f.dtype;
    CHECK(of_type == 30);  // every matrix; the 9 norms stay f32
    check_tensors(*src, {
                            {"blk.0.ffn_down.weight", f.dtype, {256, 768}, f.ffn_down_fnv},
                            {"token_embd.weight", f.dtype, {512, 256}, f.embd_fnv},
                            {"output_norm.weight", DType::f32, {256}, 0xf98bf1f1b7007819ull},
                        });
  }
}

TEST_CASE("reference: tiny-llama GGUF and safetensors agree on the embedding") {
  LOOM_REQUIRE_REFERENCE(ref);
  const auto dir = ref / "models" / "tiny-llama";
  auto gguf = loom::open_weights(dir / "tiny-llama-f32.gguf");
  CHECK(gguf->tensors().size() == 21);
  check_tensors(*gguf, {{"token_embd.weight", DType::f32, {32000, 64}, 0x986cdfae874827deull},
                        {"blk.0.attn_q.weight", DType::f32, {64, 64}, 0xa310fef60f809258ull}});
  auto st = loom::open_weights(dir / "hf");
  CHECK(st->tensors().size() == 21);
  check_tensors(*st, {{"model.embed_tokens.weight", DType::f32, {32000, 64}, 0x986cdfae874827deull},
                      {"model.layers.0.self_attn.q_proj.weight", DType::f32, {64, 64}, 0x3f30641883063008ull}});
}

TEST_CASE("reference: vocab-only GGUFs open with their tokenizer metadata") {
  LOOM_REQUIRE_REFERENCE(ref);
  struct Vocab {
    std::string file;
    std::string model;
    size_t tokens;
    size_t merges;
  };
  const std::vector<Vocab> vocabs{
      {"ggml-vocab-falcon.gguf", "gpt2", 65024, 64784},   {"ggml-vocab-gpt-2.gguf", "gpt2", 50257, 50000},
      {"ggml-vocab-gpt-neox.gguf", "gpt2", 50432, 50009}, {"ggml-vocab-llama-spm.gguf", "llama", 32000, 0},
      {"ggml-vocab-phi-3.gguf", "llama", 32064, 0},       {"ggml-vocab-starcoder.gguf", "gpt2", 49152, 48872},
  };
  for (const auto& v : vocabs) {
    INFO(v.file);
    for (auto mode : {loom::IoMode::mmap, loom::IoMode::stream}) {
      auto src = loom::open_weights(ref / "tokenizers" / v.file, {.io_mode = mode});
      CHECK(src->format() == FormatKind::gguf);
      CHECK(src->tensors().empty());
      CHECK(src->metadata().find("tokenizer.ggml.model")->as_string() == v.model);
      CHECK(src->metadata().find("tokenizer.ggml.tokens")->array_size() == v.tokens);
      const auto* merges = src->metadata().find("tokenizer.ggml.merges");
      CHECK((merges ? merges->array_size() : 0) == v.merges);
    }
  }
}

TEST_CASE("reference: every weight file in the folder opens and loads") {
  LOOM_REQUIRE_REFERENCE(ref);
  size_t files = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(ref)) {
    const auto ext = e.path().extension().string();
    if (!e.is_regular_file() || (ext != ".gguf" && ext != ".safetensors" && ext != ".bin")) continue;
    if (e.path().parent_path().filename() == "llama2c") continue;  // llama2.c's own formats
    INFO(e.path().string());
    auto src = loom::open_weights(e.path());
    for (const auto& r : src->tensors()) CHECK(src->load(r).nbytes() == static_cast<int64_t>(r.nbytes));
    ++files;
  }
  CHECK(files >= 20);
}
