// safetensors: writer/reader round trips and every validation rule.
#include <catch2/catch.hpp>

#include "format/byte_source.hpp"
#include "format/safetensors.hpp"
#include "loom/format.hpp"
#include "support/format_fixtures.hpp"
#include "support/test_support.hpp"

using loom::DType;
using loom::ErrorCode;
using loom::Shape;
using loom::test::expect_error;
using loom::test::TempDir;

namespace {

loom::format::ParsedWeights parse_bytes(const std::vector<uint8_t>& bytes, const std::string& name = "mem.safetensors") {
  loom::format::SpanSource src(std::as_bytes(std::span<const uint8_t>(bytes)), name);
  return loom::format::parse_safetensors(src);
}

std::string write_bad(const TempDir& dir, const std::vector<uint8_t>& bytes) {
  const auto path = (dir / "bad.safetensors").string();
  loom::test::write_file_bytes(path, bytes);
  return path;
}

}  // namespace

TEST_CASE("safetensors round-trips every dtype bit-exactly") {
  TempDir dir;
  std::vector<loom::NamedTensor> tensors;
  uint32_t seed = 10;
  for (DType d : {DType::f64, DType::f32, DType::f16, DType::bf16, DType::i64, DType::i32, DType::i16,
                  DType::i8, DType::u8, DType::boolean, DType::f8_e4m3, DType::f8_e5m2}) {
    tensors.push_back({"t." + std::string(loom::dtype_name(d)), loom::test::patterned_tensor({3, 5}, d, seed++)});
  }
  tensors.push_back({"empty", loom::test::patterned_tensor({0, 4}, DType::f32, 1)});
  tensors.push_back({"scalar", loom::test::patterned_tensor({}, DType::f64, 2)});
  const auto path = dir / "all.safetensors";
  loom::write_safetensors(path, tensors, {{"format", "pt"}, {"note", "quote \" and \\ and \n"}});

  for (auto mode : {loom::IoMode::mmap, loom::IoMode::stream}) {
    auto src = loom::open_weights(path, {.io_mode = mode});
    CHECK(src->format() == loom::FormatKind::safetensors);
    REQUIRE(src->tensors().size() == tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& r = src->tensors()[i];
      CHECK(r.name == tensors[i].name);  // the writer's order is kept
      CHECK(r.dtype == tensors[i].tensor.dtype());
      CHECK(r.shape == tensors[i].tensor.shape());
      CHECK(loom::test::same_bytes(src->load(r), tensors[i].tensor));
    }
    REQUIRE(src->metadata().find("note") != nullptr);
    CHECK(src->metadata().find("note")->as_string() == "quote \" and \\ and \n");
    CHECK(src->metadata().find("format")->as_string() == "pt");
  }
}

TEST_CASE("safetensors data section starts 8-byte aligned") {
  TempDir dir;
  auto model = loom::test::tiny_format_model();
  loom::write_safetensors(dir / "m.safetensors", model);
  auto src = loom::open_weights(dir / "m.safetensors");
  CHECK(src->tensors()[0].offset % 8 == 0);
}

TEST_CASE("safetensors tolerates a UTF-8 BOM and trailing spaces in the header") {
  const std::string json = "\xEF\xBB\xBF{\"a\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]}}   ";
  auto parsed = parse_bytes(loom::test::safetensors_file(json, 3));
  REQUIRE(parsed.tensors.size() == 1);
  CHECK(parsed.tensors[0].offset == 8 + json.size());
  CHECK(parsed.tensors[0].nbytes == 3);
}

TEST_CASE("safetensors header length checks") {
  TempDir dir;
  SECTION("truncated before the length") {
    const auto p = write_bad(dir, {1, 2, 3});
    expect_error([&] { loom::open_weights(p); }, ErrorCode::unsupported, "unrecognised", p);
    expect_error([&] { parse_bytes({1, 2, 3}, "x"); }, ErrorCode::format, "too short", "x", {}, 0);
  }
  SECTION("length larger than the file") {
    loom::test::Bytes b;
    b.u64(1000).str("{}");
    const auto p = write_bad(dir, b.data);
    expect_error([&] { loom::open_weights(p); }, ErrorCode::format, "runs past the end of the file", p, {}, 0);
  }
  SECTION("length over the 100 MB limit") {
    loom::test::Bytes b;
    b.u64(100'000'001).str("{}");
    expect_error([&] { parse_bytes(b.data, "big"); }, ErrorCode::format, "exceeds the limit", "big", {}, 0);
  }
}

TEST_CASE("safetensors refuses malformed JSON and wrong types") {
  TempDir dir;
  struct Case {
    std::string json;
    size_t data;
    ErrorCode code;
    std::string needle;
    std::string tensor;
  };
  const std::vector<Case> cases{
      {"{\"a\":{\"dtype\":\"F32\"", 0, ErrorCode::format, "malformed JSON", ""},
      {"{\"a\":1,}", 0, ErrorCode::format, "malformed JSON", ""},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}\xff", 4, ErrorCode::format,
       "malformed JSON", ""},
      {"[1,2]", 0, ErrorCode::format, "must be a JSON object, found array", ""},
      {"{\"a\":[]}", 0, ErrorCode::format, "tensor entry must be an object", "a"},
      {"{\"a\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, ErrorCode::format,
       "\"dtype\" must be a string", "a"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":\"1\",\"data_offsets\":[0,4]}}", 4, ErrorCode::format,
       "\"shape\" must be an array", "a"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, ErrorCode::format,
       "non-negative integers", "a"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, ErrorCode::format,
       "non-negative integers", "a"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, ErrorCode::format,
       "array of two integers", "a"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,\"4\"]}}", 4, ErrorCode::format,
       "non-negative integers", "a"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, ErrorCode::format, "missing \"data_offsets\"", "a"},
      {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, ErrorCode::format, "missing \"dtype\"", "a"},
      {"{\"__metadata__\":{\"k\":1}}", 0, ErrorCode::format, "maps strings to strings", ""},
      {"{\"__metadata__\":[\"k\"]}", 0, ErrorCode::format, "__metadata__ must be an object", ""},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
       ErrorCode::format, "dimensions", "a"},
  };
  for (const auto& c : cases) {
    INFO("header: " << c.json);
    const auto p = write_bad(dir, loom::test::safetensors_file(c.json, c.data));
    expect_error([&] { loom::format::FileSource s(loom::MappedFile::open(p)); loom::format::parse_safetensors(s); },
                 c.code, c.needle, p, c.tensor);
  }
}

TEST_CASE("safetensors dtype checks") {
  expect_error([&] { parse_bytes(loom::test::safetensors_file(
                         "{\"w\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4), "f"); },
               ErrorCode::format, "unknown dtype \"F33\"", "f", "w");
  expect_error([&] { parse_bytes(loom::test::safetensors_file(
                         "{\"w\":{\"dtype\":\"U16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4), "f"); },
               ErrorCode::unsupported, "dtype U16 is not supported", "f", "w");
}

TEST_CASE("safetensors offset validation follows the reference implementation") {
  const std::string f32_2 = "\"dtype\":\"F32\",\"shape\":[2]";
  auto header = [&](const std::string& a, const std::string& b) {
    return "{\"a\":{" + f32_2 + ",\"data_offsets\":" + a + "},\"b\":{" + f32_2 + ",\"data_offsets\":" + b + "}}";
  };
  SECTION("valid, in any order") {
    auto parsed = parse_bytes(loom::test::safetensors_file(header("[8,16]", "[0,8]"), 16));
    REQUIRE(parsed.tensors.size() == 2);
    CHECK(parsed.tensors[0].name == "a");
    CHECK(parsed.tensors[1].offset + 8 == parsed.tensors[0].offset);
  }
  SECTION("overlap") {
    const auto h = header("[0,8]", "[4,12]");
    const auto e = expect_error([&] { parse_bytes(loom::test::safetensors_file(h, 12), "f"); }, ErrorCode::format,
                                "overlaps the previous tensor", "f", "b");
    CHECK(e.context().offset == 8 + h.size() + 4);
  }
  SECTION("hole") {
    expect_error([&] { parse_bytes(loom::test::safetensors_file(header("[0,8]", "[12,20]"), 20), "f"); },
                 ErrorCode::format, "leaves a hole", "f", "b");
  }
  SECTION("first tensor not at offset 0") {
    expect_error([&] { parse_bytes(loom::test::safetensors_file(header("[4,12]", "[12,20]"), 20), "f"); },
                 ErrorCode::format, "leaves a hole", "f", "a");
  }
  SECTION("end before begin") {
    expect_error([&] { parse_bytes(loom::test::safetensors_file(header("[0,8]", "[8,0]"), 16), "f"); },
                 ErrorCode::format, "end before they begin", "f", "b");
  }
  SECTION("shape x dtype != byte length") {
    expect_error([&] { parse_bytes(loom::test::safetensors_file(header("[0,8]", "[8,20]"), 20), "f"); },
                 ErrorCode::format, "cover 12 bytes but f32[2] needs 8", "f", "b");
  }
  SECTION("data out of bounds (past the end of the file)") {
    expect_error([&] { parse_bytes(loom::test::safetensors_file(header("[0,8]", "[8,16]"), 12), "f"); },
                 ErrorCode::format, "runs past the end of the file", "f");
  }
  SECTION("trailing bytes after the data") {
    expect_error([&] { parse_bytes(loom::test::safetensors_file(header("[0,8]", "[8,16]"), 17), "f"); },
                 ErrorCode::format, "trailing bytes", "f");
  }
  SECTION("offsets that overflow") {
    const std::string h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,16]}}";
    expect_error([&] { parse_bytes(loom::test::safetensors_file(h, 16), "f"); }, ErrorCode::format, "overflow", "f",
                 "a");
    const std::string h2 = "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[18446744073709551615,0]}}";
    expect_error([&] { parse_bytes(loom::test::safetensors_file(h2, 1), "f"); }, ErrorCode::format, "", "f", "a");
  }
  SECTION("duplicate names") {
    const std::string h = "{\"a\":{" + f32_2 + ",\"data_offsets\":[0,8]},\"a\":{" + f32_2 + ",\"data_offsets\":[8,16]}}";
    expect_error([&] { parse_bytes(loom::test::safetensors_file(h, 16), "f"); }, ErrorCode::format,
                 "duplicate tensor name", "f", "a");
  }
  SECTION("no tensors: the data section must be empty") {
    CHECK(parse_bytes(loom::test::safetensors_file("{}", 0)).tensors.empty());
    expect_error([&] { parse_bytes(loom::test::safetensors_file("{}", 3), "f"); }, ErrorCode::format,
                 "trailing bytes", "f");
  }
}

TEST_CASE("safetensors writer refuses what the format cannot hold") {
  TempDir dir;
  std::vector<loom::NamedTensor> q{{"q", loom::test::patterned_tensor({1, 32}, DType::q8_0, 1)}};
  expect_error([&] { loom::write_safetensors(dir / "q.safetensors", q); }, ErrorCode::unsupported,
               "cannot hold dtype q8_0", {}, "q");
  std::vector<loom::NamedTensor> dup{{"a", loom::test::patterned_tensor({1}, DType::f32, 1)},
                                     {"a", loom::test::patterned_tensor({1}, DType::f32, 2)}};
  expect_error([&] { loom::write_safetensors(dir / "d.safetensors", dup); }, ErrorCode::invalid_argument,
               "duplicate tensor name", {}, "a");
  // A failed write leaves nothing behind, not even the temporary.
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()) == 0);
}
