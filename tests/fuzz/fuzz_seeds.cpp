// Writes the fuzzers' seed corpora with loom's own writers, plus a few hand-made nasty
// cases: `loom_fuzz_seeds OUT_DIR` creates OUT_DIR/<harness>/<seed files>.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "format/byte_source.hpp"
#include "format/zip.hpp"
#include "loom/format.hpp"

namespace fs = std::filesystem;
using loom::DType;
using loom::MetaValue;
using MT = loom::MetaValue::Type;

namespace {

loom::Tensor filled(const loom::Shape& shape, DType dtype, uint8_t seed) {
  loom::Tensor t = loom::Tensor::empty(shape, dtype);
  auto* p = static_cast<uint8_t*>(t.mutable_raw_data());
  for (int64_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<uint8_t>(seed + i * 31);
  return t;
}

std::vector<loom::NamedTensor> model() {
  return {{"embed", filled({4, 8}, DType::f32, 1)},
          {"norm", filled({8}, DType::f16, 2)},
          {"proj", filled({2, 3}, DType::i32, 3)},
          {"s", filled({}, DType::f64, 4)}};
}

std::vector<char> read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write(const fs::path& p, const std::vector<char>& bytes) {
  std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void write(const fs::path& p, std::string_view text) { write(p, std::vector<char>(text.begin(), text.end())); }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const fs::path out = argv[1];
  for (const char* h : {"safetensors", "shard_index", "gguf", "zip", "unpickler", "npy"}) {
    fs::create_directories(out / h);
  }
  const fs::path tmp = out / "tmp";
  fs::create_directories(tmp);

  // safetensors
  loom::write_safetensors(out / "safetensors" / "model", model(), {{"format", "pt"}});
  loom::write_safetensors(out / "safetensors" / "empty", {});
  loom::write_safetensors(out / "safetensors" / "u8", std::vector<loom::NamedTensor>{{"b", filled({3}, DType::u8, 9)}});

  // shard index
  loom::write_safetensors_sharded(tmp, "model", model(), 2);
  write(out / "shard_index" / "index", read(tmp / "model.safetensors.index.json"));
  write(out / "shard_index" / "metadata", "{\"metadata\": {\"total_size\": 12, \"x\": [1], \"f\": 0.5}, "
                                          "\"weight_map\": {\"a\": \"s-1.safetensors\", \"b\": \"sub/s-2.safetensors\"}}");

  // GGUF: tensors of several types, metadata of every type, a vocab-only file.
  loom::Metadata md;
  md.set("general.architecture", MetaValue::of_string("llama"));
  md.set("u8", MetaValue::of_uint(1, MT::u8));
  md.set("i16", MetaValue::of_int(-2, MT::i16));
  md.set("u32", MetaValue::of_uint(3, MT::u32));
  md.set("f32", MetaValue::of_float(0.5, MT::f32));
  md.set("b", MetaValue::of_bool(true));
  md.set("i64", MetaValue::of_int(-5, MT::i64));
  md.set("f64", MetaValue::of_float(0.25));
  md.set("tokens", MetaValue::of_array({MetaValue::of_string("a"), MetaValue::of_string("b")}, MT::string));
  md.set("nested", MetaValue::of_array({MetaValue::of_array({MetaValue::of_uint(1, MT::u16)}, MT::u16)}, MT::array));
  auto gguf_tensors = model();
  gguf_tensors.push_back({"q", filled({1, 32}, DType::q8_0, 5)});
  gguf_tensors.push_back({"k", filled({1, 256}, DType::q4_k, 6)});
  loom::write_gguf(out / "gguf" / "model", md, gguf_tensors);
  loom::write_gguf(out / "gguf" / "vocab", md, {});
  loom::write_gguf(out / "gguf" / "aligned64", {}, model(), 64);

  // torch .bin: plain, ZIP64, views sharing a storage.
  loom::write_torch(out / "zip" / "model", model());
  loom::write_torch(out / "zip" / "zip64", model(), {.archive_name = "pytorch_model", .force_zip64 = true});
  const loom::Tensor base = filled({3, 4}, DType::f32, 7);
  loom::write_torch(out / "zip" / "views",
                    std::vector<loom::NamedTensor>{{"a", base}, {"t", base.transpose2d()}, {"r", base.slice(0, 1, 2)}});

  // The pickles inside those archives.
  for (const char* name : {"model", "views"}) {
    const auto archive = read(out / "zip" / name);
    loom::format::SpanSource src(std::as_bytes(std::span<const char>(archive)), name);
    for (const auto& e : loom::format::read_zip_directory(src).entries) {
      if (e.name.ends_with("/data.pkl")) {
        write(out / "unpickler" / name,
              std::vector<char>(archive.begin() + static_cast<std::ptrdiff_t>(e.data_offset),
                                archive.begin() + static_cast<std::ptrdiff_t>(e.data_offset + e.uncompressed_size)));
      }
    }
  }
  // Hand-made: a disallowed global with a REDUCE payload, and a deep nest.
  write(out / "unpickler" / "evil", std::string_view("\x80\x02\x63os\nsystem\n(X\x04\0\0\0truetR.", 24));
  write(out / "unpickler" / "nest", std::string("\x80\x02]") + std::string(40, '\x85') + ".");

  // .npy
  loom::write_npy(out / "npy" / "f32", filled({2, 3}, DType::f32, 1));
  loom::write_npy(out / "npy" / "scalar", filled({}, DType::i64, 2));
  loom::write_npy(out / "npy" / "bool", filled({5}, DType::boolean, 3));

  fs::remove_all(tmp);
  return 0;
}
