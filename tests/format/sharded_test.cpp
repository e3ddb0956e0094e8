// Sharded checkpoints: safetensors and torch shards behind an index's weight_map.
#include <catch2/catch.hpp>

#include <fstream>

#include "format/shard_index.hpp"
#include "loom/format.hpp"
#include "support/format_fixtures.hpp"
#include "support/test_support.hpp"

using loom::DType;
using loom::ErrorCode;
using loom::test::expect_error;
using loom::test::TempDir;

namespace {

void write_text(const std::filesystem::path& p, std::string_view text) {
  std::ofstream(p, std::ios::binary) << text;
}

std::vector<loom::NamedTensor> six_tensors() {
  std::vector<loom::NamedTensor> t;
  for (int i = 0; i < 6; ++i) {
    t.push_back({"layer." + std::to_string(i), loom::test::patterned_tensor({4 + i, 8}, i % 2 ? DType::f16 : DType::f32,
                                                                             static_cast<uint32_t>(i + 1))});
  }
  return t;
}

}  // namespace

TEST_CASE("sharded safetensors: 3 shards + index round-trip") {
  TempDir dir;
  const auto tensors = six_tensors();
  loom::write_safetensors_sharded(dir.path(), "model", tensors, 3, {{"format", "pt"}});
  for (int i = 1; i <= 3; ++i) {
    CHECK(std::filesystem::exists(dir / ("model-0000" + std::to_string(i) + "-of-00003.safetensors")));
  }
  const auto index = dir / "model.safetensors.index.json";
  REQUIRE(std::filesystem::exists(index));
  for (const auto& path : {dir.path(), index}) {
    auto src = loom::open_weights(path);
    CHECK(src->format() == loom::FormatKind::safetensors);
    CHECK(src->files().size() == 3);
    REQUIRE(src->tensors().size() == tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto* r = src->find(tensors[i].name);
      REQUIRE(r != nullptr);
      CHECK(loom::test::same_bytes(src->load(*r), tensors[i].tensor));
    }
    uint64_t total = 0;
    for (const auto& t : tensors) total += static_cast<uint64_t>(t.tensor.nbytes());
    CHECK(src->metadata().find("total_size")->as_uint() == total);
    CHECK(src->metadata().find("format")->as_string() == "pt");
  }
  // Every shard holds at least one tensor.
  auto src = loom::open_weights(dir.path());
  std::vector<int> per_file(3);
  for (const auto& r : src->tensors()) per_file[r.file_index]++;
  for (int n : per_file) CHECK(n >= 1);
  expect_error([&] { loom::write_safetensors_sharded(dir.path(), "x", tensors, 7); }, ErrorCode::invalid_argument,
               "into 7 shards");
}

TEST_CASE("sharded .bin through pytorch_model.bin.index.json") {
  TempDir dir;
  const auto tensors = six_tensors();
  loom::write_torch(dir / "pytorch_model-00001-of-00002.bin", std::span(tensors).first(3));
  loom::write_torch(dir / "pytorch_model-00002-of-00002.bin", std::span(tensors).subspan(3));
  std::string map;
  for (size_t i = 0; i < tensors.size(); ++i) {
    map += (i ? ",\n" : "") + std::string("\"") + tensors[i].name + "\": \"pytorch_model-0000" +
           (i < 3 ? "1" : "2") + "-of-00002.bin\"";
  }
  write_text(dir / "pytorch_model.bin.index.json", "{\"metadata\": {\"total_size\": 1}, \"weight_map\": {" + map + "}}");
  auto src = loom::open_weights(dir.path());
  CHECK(src->format() == loom::FormatKind::torch);
  CHECK(src->files().size() == 2);
  for (const auto& t : tensors) CHECK(loom::test::same_bytes(src->load(*src->find(t.name)), t.tensor));
}

TEST_CASE("sharded checkpoints: every inconsistency names the shard and the tensor") {
  TempDir dir;
  const auto tensors = six_tensors();
  loom::write_safetensors(dir / "a.safetensors", std::span(tensors).first(3));
  loom::write_safetensors(dir / "b.safetensors", std::span(tensors).subspan(3));
  const auto index = dir / "model.safetensors.index.json";
  const std::string a = (dir / "a.safetensors").string(), b = (dir / "b.safetensors").string();
  auto write_index = [&](const std::string& map) { write_text(index, "{\"weight_map\": {" + map + "}}"); };
  const std::string good_b = "\"layer.3\": \"b.safetensors\", \"layer.4\": \"b.safetensors\", \"layer.5\": \"b.safetensors\"";
  SECTION("consistent") {
    write_index("\"layer.0\": \"a.safetensors\", \"layer.1\": \"a.safetensors\", \"layer.2\": \"a.safetensors\", " + good_b);
    CHECK(loom::open_weights(dir.path())->tensors().size() == 6);
  }
  SECTION("missing shard") {
    write_index("\"layer.0\": \"a.safetensors\", \"layer.1\": \"a.safetensors\", \"layer.2\": \"a.safetensors\", "
                "\"layer.9\": \"gone.safetensors\", " + good_b);
    expect_error([&] { loom::open_weights(dir.path()); }, ErrorCode::io, "shard 'gone.safetensors'", index.string(),
                 "layer.9");
  }
  SECTION("tensor mapped to the wrong shard") {
    write_index("\"layer.0\": \"a.safetensors\", \"layer.1\": \"b.safetensors\", \"layer.2\": \"a.safetensors\", " + good_b);
    expect_error([&] { loom::open_weights(dir.path()); }, ErrorCode::format,
                 "is in shard 'a.safetensors' but the index maps it to 'b.safetensors'", a, "layer.1");
  }
  SECTION("tensor missing from its shard") {
    write_index("\"layer.0\": \"a.safetensors\", \"layer.1\": \"a.safetensors\", \"layer.2\": \"a.safetensors\", "
                "\"layer.7\": \"b.safetensors\", " + good_b);
    expect_error([&] { loom::open_weights(dir.path()); }, ErrorCode::missing_tensor,
                 "missing from shard 'b.safetensors'", b, "layer.7");
  }
  SECTION("tensor in a shard but not in the index") {
    write_index("\"layer.0\": \"a.safetensors\", \"layer.2\": \"a.safetensors\", " + good_b);
    expect_error([&] { loom::open_weights(dir.path()); }, ErrorCode::format, "not listed in the index", a, "layer.1");
  }
  SECTION("tensor in two shards") {
    loom::write_safetensors(dir / "c.safetensors", std::span(tensors).subspan(2, 1));
    write_index("\"layer.0\": \"a.safetensors\", \"layer.1\": \"a.safetensors\", \"layer.2\": \"a.safetensors\", "
                "\"layer.x\": \"c.safetensors\", " + good_b);
    expect_error([&] { loom::open_weights(dir.path()); }, ErrorCode::format,
                 "tensor is in two shards: 'a.safetensors' and 'c.safetensors'", (dir / "c.safetensors").string(),
                 "layer.2");
  }
  SECTION("shard names may not leave the directory") {
    write_index("\"layer.0\": \"../a.safetensors\"");
    expect_error([&] { loom::open_weights(dir.path()); }, ErrorCode::format, "relative path", index.string(), "layer.0");
    write_index("\"layer.0\": \"/etc/passwd\"");
    expect_error([&] { loom::open_weights(dir.path()); }, ErrorCode::format, "relative path", index.string(), "layer.0");
  }
  SECTION("malformed indexes") {
    write_text(index, "{\"weight_map\": [1]}");
    expect_error([&] { loom::open_weights(dir.path()); }, ErrorCode::format, "\"weight_map\" must be an object",
                 index.string());
    write_text(index, "{\"weight_map\": {\"layer.0\": 3}}");
    expect_error([&] { loom::open_weights(dir.path()); }, ErrorCode::format, "shard name must be a string",
                 index.string(), "layer.0");
    write_text(index, "{\"metadata\": {}}");
    expect_error([&] { loom::open_weights(dir.path()); }, ErrorCode::format, "no \"weight_map\"", index.string());
    write_text(index, "{\"weight_map\": {}}");
    expect_error([&] { loom::open_weights(dir.path()); }, ErrorCode::format, "lists no tensors", index.string());
    write_text(index, "{\"weight_map\": {\"a\": \"a.safetensors\", \"a\": \"a.safetensors\"}}");
    expect_error([&] { loom::open_weights(dir.path()); }, ErrorCode::format, "listed twice", index.string(), "a");
    write_text(index, "{\"weight_map\": {");
    expect_error([&] { loom::open_weights(dir.path()); }, ErrorCode::format, "malformed JSON", index.string());
  }
}

TEST_CASE("shard index metadata keeps scalars") {
  const auto idx = loom::format::parse_shard_index(
      "\xEF\xBB\xBF{\"metadata\": {\"total_size\": 123, \"neg\": -4, \"ratio\": 0.5, \"name\": \"m\", \"ok\": true, "
      "\"nested\": {\"x\": 1}}, \"weight_map\": {\"w\": \"s.safetensors\", \"v\": \"s.safetensors\"}}",
      "i.json");
  CHECK(idx.shards.size() == 1);
  CHECK(idx.weight_map.size() == 2);
  CHECK(idx.metadata.find("total_size")->as_uint() == 123);
  CHECK(idx.metadata.find("neg")->as_int() == -4);
  CHECK(idx.metadata.find("ratio")->as_double() == 0.5);
  CHECK(idx.metadata.find("name")->as_string() == "m");
  CHECK(idx.metadata.find("ok")->as_bool());
  CHECK_FALSE(idx.metadata.contains("nested"));
}
