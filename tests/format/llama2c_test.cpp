// llama2.c checkpoints: the legacy layout (no magic, recognised by its exact size) and
// export.py's version 1, one zero-copy record per tensor and layer, and every kind of
// bad header or size as an error naming the file and byte offset.
#include <catch2/catch.hpp>

#include <cstring>
#include <limits>

#include "format/byte_source.hpp"
#include "format/llama2c.hpp"
#include "loom/format.hpp"
#include "support/format_fixtures.hpp"
#include "support/llama2c_writer.hpp"
#include "support/test_support.hpp"

using loom::DType;
using loom::ErrorCode;
using loom::FormatKind;
using loom::test::expect_error;
using loom::test::Llama2cSpec;
using loom::test::TempDir;

namespace {

std::span<const std::byte> as_bytes(const std::vector<uint8_t>& v) {
  return std::as_bytes(std::span<const uint8_t>(v.data(), v.size()));
}

loom::format::ParsedWeights parse(const std::vector<uint8_t>& bytes) {
  const loom::format::SpanSource src(as_bytes(bytes), "m.bin");
  return loom::format::parse_llama2c(src);
}

void set_i32(std::vector<uint8_t>& bytes, size_t at, int32_t v) { std::memcpy(bytes.data() + at, &v, 4); }

}  // namespace

TEST_CASE("llama2c: a legacy checkpoint is one f32 record per tensor and layer, in run.c's order") {
  const Llama2cSpec spec;  // dim 8, hidden 12, 2 layers, 2 heads / 1 kv head, vocab 16, seq 8
  const auto bytes = loom::test::llama2c_checkpoint(spec);
  const auto parsed = parse(bytes);
  const auto expected = loom::test::llama2c_tensors(spec);
  REQUIRE(parsed.tensors.size() == expected.size());
  REQUIRE(parsed.tensors.size() == 1 + 9 * 2 + 3);  // no output.weight: tied
  uint64_t at = 28;
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto& r = parsed.tensors[i];
    INFO(r.name);
    CHECK(r.name == expected[i].first);
    CHECK(r.dtype == DType::f32);
    CHECK(r.offset == at);
    CHECK(r.nbytes == expected[i].second.size() * 4);
    CHECK(r.is_contiguous());
    CHECK(std::memcmp(bytes.data() + r.offset, expected[i].second.data(), r.nbytes) == 0);
    at += r.nbytes;
  }
  CHECK(at == bytes.size());
  // Hand-computed: the embedding is 16 x 8 floats after the 28-byte header, then 2 x 8
  // attention norms, then layer 0's 8 x 8 wq.
  CHECK(parsed.tensors[0].name == "tok_embeddings.weight");
  CHECK(parsed.tensors[0].shape == loom::Shape{16, 8});
  CHECK(parsed.tensors[4].name == "layers.1.attention.wq.weight");
  CHECK(parsed.tensors[4].offset == 28 + 4 * (128 + 16 + 64));
  CHECK(parsed.tensors[5].shape == loom::Shape{4, 8});  // wk: kv_dim x dim
  CHECK(parsed.tensors[15].name == "layers.0.feed_forward.w2.weight");
  CHECK(parsed.tensors[15].shape == loom::Shape{8, 12});
  CHECK(parsed.tensors[20].name == "freq_cis_real");
  CHECK(parsed.tensors[20].shape == loom::Shape{8, 2});
  const auto& md = parsed.metadata;
  CHECK(md.find("llama2c.version")->as_int() == 0);
  CHECK(md.find("llama2c.dim")->as_int() == 8);
  CHECK(md.find("llama2c.n_kv_heads")->as_int() == 1);
  CHECK(md.find("llama2c.vocab_size")->as_int() == 16);
  CHECK(md.find("llama2c.shared_classifier")->as_bool());
}

TEST_CASE("llama2c: a negative vocab_size means a separate classifier at the end") {
  Llama2cSpec spec;
  spec.shared_classifier = false;
  const auto bytes = loom::test::llama2c_checkpoint(spec);
  int32_t vocab = 0;
  std::memcpy(&vocab, bytes.data() + 20, 4);
  CHECK(vocab == -16);
  const auto parsed = parse(bytes);
  REQUIRE(parsed.tensors.back().name == "output.weight");
  CHECK(parsed.tensors.back().shape == loom::Shape{16, 8});
  CHECK(parsed.tensors.back().offset + parsed.tensors.back().nbytes == bytes.size());
  CHECK(parsed.metadata.find("llama2c.vocab_size")->as_int() == 16);
  CHECK_FALSE(parsed.metadata.find("llama2c.shared_classifier")->as_bool());
}

TEST_CASE("llama2c: export.py version 1 has a 256-byte header, the norms first and no RoPE tables") {
  for (const bool shared : {true, false}) {
    Llama2cSpec spec;
    spec.version = 1;
    spec.shared_classifier = shared;
    const auto bytes = loom::test::llama2c_checkpoint(spec);
    const auto parsed = parse(bytes);
    const auto expected = loom::test::llama2c_tensors(spec);
    REQUIRE(parsed.tensors.size() == expected.size());
    CHECK(parsed.tensors[0].name == "layers.0.attention_norm.weight");
    CHECK(parsed.tensors[0].offset == 256);
    CHECK(parsed.tensors[4].name == "norm.weight");
    CHECK(parsed.tensors[5].name == "tok_embeddings.weight");
    for (size_t i = 0; i < expected.size(); ++i) {
      CHECK(parsed.tensors[i].name == expected[i].first);
      CHECK(std::memcmp(bytes.data() + parsed.tensors[i].offset, expected[i].second.data(), parsed.tensors[i].nbytes) == 0);
    }
    CHECK(parsed.tensors.back().name == (shared ? "layers.1.feed_forward.w3.weight" : "output.weight"));
    CHECK(parsed.metadata.find("llama2c.version")->as_int() == 1);
    CHECK(parsed.metadata.find("llama2c.shared_classifier")->as_bool() == shared);
  }
}

TEST_CASE("llama2c: sniffing needs the exact size for legacy files, the magic for versioned ones") {
  const auto legacy = loom::test::llama2c_checkpoint({});
  const auto head = as_bytes(legacy).first(32);
  CHECK(loom::sniff_format(head, legacy.size()) == FormatKind::llama2c);
  CHECK_FALSE(loom::sniff_format(head).has_value());  // no size, no guess
  CHECK_FALSE(loom::sniff_format(head, legacy.size() - 1).has_value());
  CHECK_FALSE(loom::sniff_format(head, legacy.size() + 4).has_value());
  Llama2cSpec v1;
  v1.version = 1;
  const auto versioned = loom::test::llama2c_checkpoint(v1);
  CHECK(loom::sniff_format(as_bytes(versioned).first(32)) == FormatKind::llama2c);
  // A dim of 640 begins with the bytes of a protocol-2 pickle (0x80 0x02); the exact size wins.
  Llama2cSpec wide;
  wide.dim = 640;
  wide.n_heads = 10;
  wide.n_kv_heads = 10;
  wide.hidden_dim = 4;
  wide.vocab_size = 2;
  wide.n_layers = 1;
  wide.seq_len = 1;
  const auto w = loom::test::llama2c_checkpoint(wide);
  REQUIRE(w[0] == 0x80);
  REQUIRE(w[1] == 0x02);
  CHECK(loom::sniff_format(as_bytes(w).first(32), w.size()) == FormatKind::llama2c);
}

TEST_CASE("llama2c: open_weights reads a checkpoint zero-copy, a torch zip named .bin stays torch") {
  TempDir dir;
  loom::test::write_file_bytes(dir / "model.bin", loom::test::llama2c_checkpoint({}));
  auto src = loom::open_weights(dir / "model.bin", {.io_mode = loom::IoMode::mmap});
  CHECK(src->format() == FormatKind::llama2c);
  const auto* wq = src->find("layers.1.attention.wq.weight");
  REQUIRE(wq != nullptr);
  const loom::Tensor t = src->load(*wq);
  CHECK(t.is_mapped());
  CHECK(static_cast<const std::byte*>(t.raw_data()) == src->files()[0].file->bytes(wq->offset, wq->nbytes).data());

  const auto model = loom::test::tiny_format_model();
  loom::write_torch(dir / "pytorch_model.bin", model);
  CHECK(loom::open_weights(dir / "pytorch_model.bin")->format() == FormatKind::torch);
}

TEST_CASE("llama2c: truncated, padded and absurd headers are errors naming the file and offset") {
  const auto good = loom::test::llama2c_checkpoint({});
  auto cut = good;
  cut.pop_back();
  expect_error([&] { parse(cut); }, ErrorCode::format, "truncated", "m.bin", {}, cut.size());
  auto padded = good;
  padded.push_back(0);
  expect_error([&] { parse(padded); }, ErrorCode::format, "trailing bytes", "m.bin", {}, good.size());
  expect_error([&] { parse({1, 2, 3}); }, ErrorCode::format, "unexpected end of file", "m.bin");

  struct Bad {
    size_t field;
    int32_t value;
    const char* needle;
  };
  const Bad cases[] = {
      {0, 0, "dim must be between"},
      {0, -8, "dim must be between"},
      {0, std::numeric_limits<int32_t>::max(), "dim must be between"},
      {1, -1, "hidden_dim"},
      {2, 0, "n_layers"},
      {2, 1 << 30, "n_layers"},
      {3, 3, "not a multiple of n_heads"},
      {3, 8, "head size"},  // head size 1
      {4, 0, "n_kv_heads"},
      {4, 4, "n_kv_heads must be between"},
      {5, std::numeric_limits<int32_t>::min(), "vocab_size"},
      {5, 0, "vocab_size"},
      {6, -5, "seq_len"},
  };
  for (const Bad& b : cases) {
    auto bytes = good;
    set_i32(bytes, 4 * b.field, b.value);
    INFO("field " << b.field << " = " << b.value);
    expect_error([&] { parse(bytes); }, ErrorCode::format, b.needle, "m.bin", {}, 0);
  }
  // Fields that are each in range but imply a different size: the size check names both.
  auto bigger = good;
  set_i32(bigger, 4 * 5, 1 << 24);
  expect_error([&] { parse(bigger); }, ErrorCode::format, "implies", "m.bin");

  // Versioned files.
  Llama2cSpec v1;
  v1.version = 1;
  const auto versioned = loom::test::llama2c_checkpoint(v1);
  auto v2 = versioned;
  set_i32(v2, 4, 2);
  expect_error([&] { parse(v2); }, ErrorCode::unsupported, "version 2 (Q8_0", "m.bin", {}, 4);
  auto v9 = versioned;
  set_i32(v9, 4, 9);
  expect_error([&] { parse(v9); }, ErrorCode::unsupported, "version 9", "m.bin", {}, 4);
  auto flag = versioned;
  flag[36] = 7;
  expect_error([&] { parse(flag); }, ErrorCode::format, "shared_classifier flag is 7", "m.bin", {}, 36);
  const std::vector<uint8_t> short_header(versioned.begin(), versioned.begin() + 100);
  expect_error([&] { parse(short_header); }, ErrorCode::format, "256 bytes", "m.bin");
  auto bad_dim = versioned;
  set_i32(bad_dim, 8, -1);
  expect_error([&] { parse(bad_dim); }, ErrorCode::format, "dim must be between", "m.bin", {}, 8);
}

TEST_CASE("llama2c: a truncated checkpoint opened by path says so, naming the file") {
  TempDir dir;
  auto bytes = loom::test::llama2c_checkpoint({});
  bytes.erase(bytes.begin() + static_cast<std::ptrdiff_t>(bytes.size() / 2), bytes.end());
  const auto path = (dir / "stories.bin").string();
  loom::test::write_file_bytes(path, bytes);
  expect_error([&] { loom::open_weights(path); }, ErrorCode::format, "truncated", path, {}, bytes.size());
}
