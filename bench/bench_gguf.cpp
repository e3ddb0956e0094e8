// Writes the benchmark shapes as GGUF files, so loom and llama.cpp (llama-bench,
// llama-batched-bench, llama-speculative) can be measured on the very same bytes:
//   build/bench/loom_bench_gguf --out DIR [--shape small|1b] [--dtype f16,q8_0,q4_k]
// gives DIR/<shape>-<dtype>.gguf. The weights are bench/synthetic_model's (the same
// bytes loom_batched_decode runs on); the vocabulary is synthetic SentencePiece-style
// metadata (unk, BOS, EOS, the 256 byte tokens, then "▁t<i>" pieces) because llama.cpp
// refuses a GGUF without one. Matrices are stored "pure" in the named type (the output
// and embedding too), like `llama-quantize --pure`.
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "loom/error.hpp"
#include "loom/exporter.hpp"
#include "loom/format.hpp"
#include "loom/tokenizer.hpp"
#include "synthetic_model.hpp"
#include "tokenizer/tokenizer_impl.hpp"

namespace {

std::shared_ptr<const loom::Tokenizer> synthetic_vocab(int64_t vocab_size) {
  using MV = loom::MetaValue;
  std::vector<MV> tokens, scores, types;
  auto add = [&](std::string text, double score, int64_t type) {
    tokens.push_back(MV::of_string(std::move(text)));
    scores.push_back(MV::of_float(score, MV::Type::f32));
    types.push_back(MV::of_int(type, MV::Type::i32));
  };
  add("<unk>", 0.0, loom::tok::type_unknown);
  add("<s>", 0.0, loom::tok::type_control);
  add("</s>", 0.0, loom::tok::type_control);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    add(name, 0.0, loom::tok::type_byte);
  }
  for (int64_t i = static_cast<int64_t>(tokens.size()); i < vocab_size; ++i) {
    add("\xE2\x96\x81t" + std::to_string(i), -static_cast<double>(i), loom::tok::type_normal);
  }
  loom::Metadata md;
  md.set("tokenizer.ggml.model", MV::of_string("llama"));
  md.set("tokenizer.ggml.tokens", MV::of_array(std::move(tokens), MV::Type::string));
  md.set("tokenizer.ggml.scores", MV::of_array(std::move(scores), MV::Type::f32));
  md.set("tokenizer.ggml.token_type", MV::of_array(std::move(types), MV::Type::i32));
  md.set("tokenizer.ggml.unknown_token_id", MV::of_uint(0, MV::Type::u32));
  md.set("tokenizer.ggml.bos_token_id", MV::of_uint(1, MV::Type::u32));
  md.set("tokenizer.ggml.eos_token_id", MV::of_uint(2, MV::Type::u32));
  return loom::Tokenizer::from_gguf_metadata(md, "synthetic benchmark vocabulary");
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> args{{"--out", ""}, {"--shape", "small"}, {"--dtype", "f16,q8_0,q4_k"}};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!args.count(argv[i])) {
      std::fprintf(stderr, "unknown flag %s (expected --out --shape --dtype)\n", argv[i]);
      return 2;
    }
    args[argv[i]] = argv[i + 1];
  }
  if (args["--out"].empty() || argc % 2 == 0) {
    std::fprintf(stderr, "usage: loom_bench_gguf --out DIR [--shape small|1b] [--dtype f16,q8_0,q4_k]\n");
    return 2;
  }
  try {
    const auto config = loom::bench::shape_config(args["--shape"]);
    const auto vocab = synthetic_vocab(config.vocab_size);
    std::filesystem::create_directories(args["--out"]);
    for (const auto& name : loom::bench::split(args["--dtype"])) {
      const auto dtype = loom::dtype_from_name(name);
      if (!dtype) {
        std::fprintf(stderr, "unknown dtype %s\n", name.c_str());
        return 2;
      }
      const auto model = loom::bench::synthetic_model(config, *dtype);
      const auto path = std::filesystem::path(args["--out"]) / (args["--shape"] + "-" + name + ".gguf");
      loom::ExportOptions options;
      options.tokenizer = vocab;
      loom::export_model(model->config(), model->weights(), path, loom::ExportFormat::gguf, options);
      std::printf("%s\n", path.c_str());
    }
  } catch (const loom::Error& e) {
    std::fprintf(stderr, "loom_bench_gguf: %s\n", e.what());
    return 1;
  }
  return 0;
}
