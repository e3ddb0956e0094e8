// GGUF: writer/reader round trips (every dtype, every metadata type) and bad input.
#include <catch2/catch.hpp>

#include <cstring>

#include "format/byte_source.hpp"
#include "format/ggml_types.hpp"
#include "format/gguf.hpp"
#include "loom/format.hpp"
#include "support/format_fixtures.hpp"
#include "support/test_support.hpp"

using loom::DType;
using loom::ErrorCode;
using loom::MetaValue;
using loom::Shape;
using loom::test::Bytes;
using loom::test::expect_error;
using loom::test::TempDir;
using MT = loom::MetaValue::Type;

namespace {

loom::format::ParsedWeights parse_bytes(const std::vector<uint8_t>& bytes, const std::string& name = "mem.gguf") {
  loom::format::SpanSource src(std::as_bytes(std::span<const uint8_t>(bytes)), name);
  return loom::format::parse_gguf(src);
}

loom::Metadata every_metadata_type() {
  loom::Metadata m;
  m.set("general.architecture", MetaValue::of_string("llama"));
  m.set("t.u8", MetaValue::of_uint(200, MT::u8));
  m.set("t.i8", MetaValue::of_int(-100, MT::i8));
  m.set("t.u16", MetaValue::of_uint(65000, MT::u16));
  m.set("t.i16", MetaValue::of_int(-32000, MT::i16));
  m.set("t.u32", MetaValue::of_uint(4000000000u, MT::u32));
  m.set("t.i32", MetaValue::of_int(-2000000000, MT::i32));
  m.set("t.u64", MetaValue::of_uint(UINT64_MAX, MT::u64));
  m.set("t.i64", MetaValue::of_int(INT64_MIN, MT::i64));
  m.set("t.f32", MetaValue::of_float(1e-5, MT::f32));
  m.set("t.f64", MetaValue::of_float(3.141592653589793, MT::f64));
  m.set("t.bool", MetaValue::of_bool(true));
  m.set("t.string", MetaValue::of_string(std::string("UTF-8 \xE2\x96\x81 and a NUL \0 inside", 28)));
  m.set("t.empty_string", MetaValue::of_string(""));
  m.set("t.strings", MetaValue::of_array({MetaValue::of_string("<s>"), MetaValue::of_string("</s>")}, MT::string));
  m.set("t.floats", MetaValue::of_array({MetaValue::of_float(-1.5, MT::f32), MetaValue::of_float(0.25, MT::f32)}, MT::f32));
  m.set("t.ints", MetaValue::of_array({MetaValue::of_int(1, MT::i32), MetaValue::of_int(-3, MT::i32)}, MT::i32));
  m.set("t.bools", MetaValue::of_array({MetaValue::of_bool(false), MetaValue::of_bool(true)}, MT::boolean));
  m.set("t.empty_array", MetaValue::of_array({}, MT::u64));
  m.set("t.nested", MetaValue::of_array({MetaValue::of_array({MetaValue::of_uint(1, MT::u8)}, MT::u8),
                                         MetaValue::of_array({MetaValue::of_string("x")}, MT::string)},
                                        MT::array));
  return m;
}

// A minimal hand-built GGUF: header, one string KV, one f32 [4] tensor.
Bytes minimal_gguf(uint32_t version = 3, uint64_t tensor_offset = 0) {
  Bytes b;
  b.str("GGUF").u32(version).u64(1).u64(1);
  b.gguf_str("general.name").u32(8).gguf_str("tiny");
  b.gguf_str("w").u32(1).u64(4).u32(0).u64(tensor_offset);
  b.pad_to(32);
  for (int i = 0; i < 4; ++i) b.f32(static_cast<float>(i));
  b.pad_to(32);
  return b;
}

}  // namespace

TEST_CASE("ggml type table maps ids to dtypes both ways") {
  struct Expect {
    uint32_t id;
    DType dtype;
  };
  const std::vector<Expect> table{
      {0, DType::f32},   {1, DType::f16},   {2, DType::q4_0},  {3, DType::q4_1},  {6, DType::q5_0},
      {7, DType::q5_1},  {8, DType::q8_0},  {9, DType::q8_1},  {10, DType::q2_k}, {11, DType::q3_k},
      {12, DType::q4_k}, {13, DType::q5_k}, {14, DType::q6_k}, {15, DType::q8_k}, {24, DType::i8},
      {25, DType::i16},  {26, DType::i32},  {27, DType::i64},  {28, DType::f64},  {30, DType::bf16},
  };
  for (const auto& e : table) {
    const auto* t = loom::format::ggml_type_by_id(e.id);
    REQUIRE(t != nullptr);
    CHECK(t->dtype == e.dtype);
    CHECK(loom::format::ggml_id_for(e.dtype) == e.id);
  }
  CHECK(loom::format::ggml_type_by_id(4) == nullptr);
  CHECK_FALSE(loom::format::ggml_type_by_id(16)->dtype.has_value());
  CHECK_FALSE(loom::format::ggml_id_for(DType::u8).has_value());
  CHECK_FALSE(loom::format::ggml_id_for(DType::boolean).has_value());
}

TEST_CASE("GGUF round-trips every dtype (quantized as raw blocks) and every metadata type") {
  TempDir dir;
  std::vector<loom::NamedTensor> tensors;
  uint32_t seed = 100;
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::f64, DType::i8, DType::i16, DType::i32,
                  DType::i64}) {
    tensors.push_back({"plain." + std::string(loom::dtype_name(d)), loom::test::patterned_tensor({3, 7}, d, seed++)});
  }
  for (DType d : {DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1, DType::q8_0, DType::q8_1, DType::q2_k,
                  DType::q3_k, DType::q4_k, DType::q5_k, DType::q6_k, DType::q8_k}) {
    tensors.push_back({"quant." + std::string(loom::dtype_name(d)), loom::test::patterned_tensor({2, 512}, d, seed++)});
  }
  tensors.push_back({"rank4", loom::test::patterned_tensor({2, 3, 4, 5}, DType::f32, seed++)});
  tensors.push_back({"scalar", loom::test::patterned_tensor({}, DType::f32, seed++)});
  tensors.push_back({"empty", loom::test::patterned_tensor({0, 8}, DType::f16, seed++)});
  const auto metadata = every_metadata_type();

  for (uint32_t alignment : {32u, 64u, 1u}) {
    INFO("alignment " << alignment);
    const auto path = dir / ("all-" + std::to_string(alignment) + ".gguf");
    loom::write_gguf(path, metadata, tensors, alignment);
    for (auto mode : {loom::IoMode::mmap, loom::IoMode::stream}) {
      auto src = loom::open_weights(path, {.io_mode = mode});
      CHECK(src->format() == loom::FormatKind::gguf);
      REQUIRE(src->tensors().size() == tensors.size());
      for (size_t i = 0; i < tensors.size(); ++i) {
        const auto& r = src->tensors()[i];
        INFO(r.name);
        CHECK(r.name == tensors[i].name);
        CHECK(r.dtype == tensors[i].tensor.dtype());
        CHECK(r.shape == tensors[i].tensor.shape());
        CHECK(r.offset % alignment == 0);
        CHECK(loom::test::same_bytes(src->load(r), tensors[i].tensor));
      }
      // Every key comes back with its type and value; general.alignment is added
      // after them when it is not the default.
      const auto& entries = src->metadata().entries();
      REQUIRE(entries.size() == metadata.size() + (alignment == 32 ? 0 : 1));
      for (size_t i = 0; i < metadata.size(); ++i) {
        CHECK(entries[i].first == metadata.entries()[i].first);
        CHECK(entries[i].second == metadata.entries()[i].second);
      }
      if (alignment != 32) {
        CHECK(src->metadata().find("general.alignment")->type() == MT::u32);
        CHECK(src->metadata().find("general.alignment")->as_uint() == alignment);
      }
    }
  }
}

TEST_CASE("GGUF shapes: ggml dims are reversed into row-major") {
  TempDir dir;
  std::vector<loom::NamedTensor> t{{"w", loom::test::patterned_tensor({3, 5}, DType::f32, 1)}};
  loom::write_gguf(dir / "s.gguf", {}, t);
  const auto bytes = loom::test::read_file_bytes(dir / "s.gguf");
  // Tensor info after the 24-byte header (no KVs): name, rank 2, ne0 = 5, ne1 = 3.
  Bytes expect;
  expect.gguf_str("w").u32(2).u64(5).u64(3).u32(0).u64(0);
  REQUIRE(bytes.size() >= 24 + expect.size());
  CHECK(std::equal(expect.data.begin(), expect.data.end(), bytes.begin() + 24));
  CHECK(parse_bytes(bytes).tensors[0].shape == Shape{3, 5});
}

TEST_CASE("GGUF v2 and vocab-only files open") {
  auto v2 = minimal_gguf(2);
  auto parsed = parse_bytes(v2.data);
  REQUIRE(parsed.tensors.size() == 1);
  CHECK(parsed.tensors[0].shape == Shape{4});
  CHECK(parsed.metadata.find("general.name")->as_string() == "tiny");
  float values[4];
  std::memcpy(values, v2.data.data() + parsed.tensors[0].offset, 16);
  CHECK(values[3] == 3.0f);

  Bytes vocab;  // no tensors, and no padding after the KVs
  vocab.str("GGUF").u32(3).u64(0).u64(1);
  vocab.gguf_str("tokenizer.ggml.tokens").u32(9).u32(8).u64(2).gguf_str("a").gguf_str("b");
  auto v = parse_bytes(vocab.data);
  CHECK(v.tensors.empty());
  CHECK(v.metadata.find("tokenizer.ggml.tokens")->array_size() == 2);
}

TEST_CASE("GGUF bad input") {
  SECTION("bad magic") {
    auto b = minimal_gguf();
    b.data[0] = 'X';
    expect_error([&] { parse_bytes(b.data, "f"); }, ErrorCode::format, "bad magic", "f", {}, 0);
  }
  SECTION("versions") {
    expect_error([&] { parse_bytes(minimal_gguf(1).data, "f"); }, ErrorCode::unsupported, "GGUF v1", "f", {}, 4);
    expect_error([&] { parse_bytes(minimal_gguf(4).data, "f"); }, ErrorCode::unsupported, "unknown GGUF version 4",
                 "f", {}, 4);
    expect_error([&] { parse_bytes(minimal_gguf(0x03000000).data, "f"); }, ErrorCode::unsupported, "big-endian", "f");
  }
  SECTION("absurd counts") {
    auto b = minimal_gguf();
    for (int i = 0; i < 8; ++i) b.data[8 + i] = 0xFF;
    expect_error([&] { parse_bytes(b.data, "f"); }, ErrorCode::format, "absurd tensor count", "f", {}, 8);
    b = minimal_gguf();
    b.data[16 + 4] = 0x01;  // 2^32 + 1 key/values
    expect_error([&] { parse_bytes(b.data, "f"); }, ErrorCode::format, "absurd metadata key/value count", "f", {}, 16);
    Bytes arr;
    arr.str("GGUF").u32(3).u64(0).u64(1).gguf_str("k").u32(9).u32(4).u64(1ull << 40);
    expect_error([&] { parse_bytes(arr.data, "f"); }, ErrorCode::format, "cannot fit", "f");
  }
  SECTION("truncated string") {
    auto b = minimal_gguf();
    // The value "tiny" claims 1000 bytes.
    const size_t at = 24 + 8 + std::string("general.name").size() + 4;
    b.data[at] = 0xE8;
    b.data[at + 1] = 0x03;
    expect_error([&] { parse_bytes(b.data, "f"); }, ErrorCode::format, "string value of 1000 bytes runs past", "f");
    Bytes cut;
    cut.str("GGUF").u32(3).u64(0).u64(1).gguf_str("k").u32(8).u64(10).str("abc");
    expect_error([&] { parse_bytes(cut.data, "f"); }, ErrorCode::format, "string value of 10 bytes runs past", "f",
                 {}, 24 + 9 + 4);
    // The second string of an array claims 50 bytes; the error points at its length.
    Bytes items;
    items.str("GGUF").u32(3).u64(0).u64(1).gguf_str("k").u32(9).u32(8).u64(2).u64(2).str("ab").u64(50).str("xyz");
    expect_error([&] { parse_bytes(items.data, "f"); }, ErrorCode::format, "string value of 50 bytes runs past", "f",
                 {}, 24 + 9 + 4 + 4 + 8 + 10);
    Bytes key;
    key.str("GGUF").u32(3).u64(0).u64(1).u64(1ull << 20).str("abc").zeros(16);
    expect_error([&] { parse_bytes(key.data, "f"); }, ErrorCode::format, "metadata key of 1048576 bytes exceeds", "f", {}, 24);
  }
  SECTION("unaligned data") {
    expect_error([&] { parse_bytes(minimal_gguf(3, 4).data, "f"); }, ErrorCode::format,
                 "not a multiple of the alignment 32", "f", "w");
  }
  SECTION("data past the end of the file") {
    expect_error([&] { parse_bytes(minimal_gguf(3, 32).data, "f"); }, ErrorCode::format,
                 "runs past the end of the file", "f", "w");
    auto b = minimal_gguf();
    b.data.resize(b.data.size() - 20);
    expect_error([&] { parse_bytes(b.data, "f"); }, ErrorCode::format, "runs past the end of the file", "f", "w");
  }
  SECTION("unknown and unsupported tensor types name the tensor and the id") {
    Bytes b;
    b.str("GGUF").u32(3).u64(1).u64(0).gguf_str("w").u32(1).u64(32).u32(99).u64(0).pad_to(32).zeros(64);
    const auto e = expect_error([&] { parse_bytes(b.data, "f"); }, ErrorCode::unsupported, "unknown ggml type id 99",
                                "f", "w");
    Bytes iq;
    iq.str("GGUF").u32(3).u64(1).u64(0).gguf_str("w").u32(1).u64(256).u32(16).u64(0).pad_to(32).zeros(256);
    expect_error([&] { parse_bytes(iq.data, "f"); }, ErrorCode::unsupported, "iq2_xxs (id 16)", "f", "w");
  }
  SECTION("quantized row not a whole number of blocks") {
    Bytes b;
    b.str("GGUF").u32(3).u64(1).u64(0).gguf_str("w").u32(1).u64(33).u32(8).u64(0).pad_to(32).zeros(64);
    expect_error([&] { parse_bytes(b.data, "f"); }, ErrorCode::format, "not a multiple", "f", "w");
  }
  SECTION("overlapping tensors") {
    Bytes b;
    b.str("GGUF").u32(3).u64(2).u64(0);
    b.gguf_str("a").u32(1).u64(16).u32(0).u64(0);  // 64 bytes
    b.gguf_str("b").u32(1).u64(16).u32(0).u64(64);
    b.pad_to(32).zeros(128);
    CHECK(parse_bytes(b.data).tensors.size() == 2);
    Bytes o;
    o.str("GGUF").u32(3).u64(2).u64(0);
    o.gguf_str("a").u32(1).u64(16).u32(0).u64(0);
    o.gguf_str("b").u32(1).u64(16).u32(0).u64(32);  // inside a
    o.pad_to(32).zeros(128);
    expect_error([&] { parse_bytes(o.data, "f"); }, ErrorCode::format, "overlaps", "f");
  }
  SECTION("duplicates, bad bools, bad alignment, unknown value type") {
    Bytes dup;
    dup.str("GGUF").u32(3).u64(0).u64(2).gguf_str("k").u32(0).u8(1).gguf_str("k").u32(0).u8(2);
    expect_error([&] { parse_bytes(dup.data, "f"); }, ErrorCode::format, "duplicate metadata key 'k'", "f");
    Bytes dupt;
    dupt.str("GGUF").u32(3).u64(2).u64(0).gguf_str("w").u32(1).u64(8).u32(0).u64(0);
    dupt.gguf_str("w").u32(1).u64(8).u32(0).u64(32).pad_to(32).zeros(64);
    expect_error([&] { parse_bytes(dupt.data, "f"); }, ErrorCode::format, "duplicate tensor name", "f", "w");
    Bytes bb;
    bb.str("GGUF").u32(3).u64(0).u64(1).gguf_str("k").u32(7).u8(2);
    expect_error([&] { parse_bytes(bb.data, "f"); }, ErrorCode::format, "neither 0 nor 1", "f");
    Bytes al;
    al.str("GGUF").u32(3).u64(0).u64(1).gguf_str("general.alignment").u32(4).u32(48);
    expect_error([&] { parse_bytes(al.data, "f"); }, ErrorCode::format, "not a power of two", "f");
    Bytes alt;
    alt.str("GGUF").u32(3).u64(0).u64(1).gguf_str("general.alignment").u32(10).u64(32);
    expect_error([&] { parse_bytes(alt.data, "f"); }, ErrorCode::format, "must be a u32", "f");
    Bytes vt;
    vt.str("GGUF").u32(3).u64(0).u64(1).gguf_str("k").u32(13).u64(0);
    expect_error([&] { parse_bytes(vt.data, "f"); }, ErrorCode::format, "unknown GGUF value type 13", "f", {}, 24 + 9);
  }
  SECTION("nesting deeper than the limit") {
    Bytes deep;
    deep.str("GGUF").u32(3).u64(0).u64(1).gguf_str("k").u32(9);
    for (int i = 0; i < 20; ++i) deep.u32(9).u64(1);
    deep.u32(0).u64(0);
    expect_error([&] { parse_bytes(deep.data, "f"); }, ErrorCode::format, "nested deeper", "f");
  }
  SECTION("a file on disk names its path") {
    TempDir dir;
    auto b = minimal_gguf();
    b.data[0] = 'X';
    const auto p = (dir / "x.gguf").string();
    loom::test::write_file_bytes(p, b.data);
    expect_error([&] { loom::open_weights(p); }, ErrorCode::unsupported, "unrecognised", p);
    loom::format::FileSource src(loom::MappedFile::open(p, loom::IoMode::stream));
    expect_error([&] { loom::format::parse_gguf(src); }, ErrorCode::format, "bad magic", p, {}, 0);
  }
}

TEST_CASE("GGUF writer refuses what GGUF cannot hold") {
  TempDir dir;
  const auto p = dir / "w.gguf";
  std::vector<loom::NamedTensor> u8{{"u", loom::test::patterned_tensor({4}, DType::u8, 1)}};
  expect_error([&] { loom::write_gguf(p, {}, u8); }, ErrorCode::unsupported, "cannot hold dtype u8", {}, "u");
  std::vector<loom::NamedTensor> longname{{std::string(64, 'n'), loom::test::patterned_tensor({4}, DType::f32, 1)}};
  expect_error([&] { loom::write_gguf(p, {}, longname); }, ErrorCode::invalid_argument, "ggml's limit");
  std::vector<loom::NamedTensor> rank5{{"r", loom::test::patterned_tensor({1, 1, 1, 1, 2}, DType::f32, 1)}};
  expect_error([&] { loom::write_gguf(p, {}, rank5); }, ErrorCode::invalid_argument, "at most 4 dimensions");
  expect_error([&] { loom::write_gguf(p, {}, {}, 24); }, ErrorCode::invalid_argument, "not a power of two");
  loom::Metadata m;
  m.set("general.alignment", MetaValue::of_uint(64, MT::u32));
  expect_error([&] { loom::write_gguf(p, m, {}, 32); }, ErrorCode::invalid_argument, "disagrees");
  CHECK_FALSE(std::filesystem::exists(p));
}
