// WeightSource and open_weights: zero-copy vs streaming, chunked reads, format
// sniffing, directory resolution, and the same model through every format.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <fstream>
#include <thread>

#include "loom/format.hpp"
#include "support/format_fixtures.hpp"
#include "support/test_support.hpp"

using loom::DType;
using loom::ErrorCode;
using loom::FormatKind;
using loom::IoMode;
using loom::test::expect_error;
using loom::test::TempDir;

namespace {

std::span<const std::byte> bytes_of(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

}  // namespace

TEST_CASE("mapped loads are zero-copy views into the mapping") {
  TempDir dir;
  const auto model = loom::test::tiny_format_model();
  loom::write_safetensors(dir / "m.safetensors", model);
  auto src = loom::open_weights(dir / "m.safetensors", {.io_mode = IoMode::mmap});
  const auto& file = src->files()[0].file;
  REQUIRE(file->is_mapped());
  const int64_t owned_before = loom::Storage::owned_bytes_live();
  for (const auto& r : src->tensors()) {
    const loom::Tensor t = src->load(r);
    CHECK(t.is_mapped());
    CHECK(file->contains(t.raw_data(), static_cast<size_t>(t.nbytes())));
    CHECK(static_cast<const std::byte*>(t.raw_data()) == file->bytes(r.offset, r.nbytes).data());
  }
  CHECK(loom::Storage::owned_bytes_live() == owned_before);
  // Tensors keep their file mapped after the source is gone.
  const loom::Tensor kept = src->load(*src->find("embed.weight"));
  src.reset();
  CHECK(loom::test::same_bytes(kept, model[0].tensor));
}

TEST_CASE("stream mode hands out owned copies with identical bytes") {
  TempDir dir;
  const auto model = loom::test::tiny_format_model();
  loom::write_gguf(dir / "m.gguf", {}, model);
  auto streamed = loom::open_weights(dir / "m.gguf", {.io_mode = IoMode::stream});
  CHECK_FALSE(streamed->files()[0].file->is_mapped());
  for (size_t i = 0; i < model.size(); ++i) {
    const loom::Tensor t = streamed->load(streamed->tensors()[i]);
    CHECK_FALSE(t.is_mapped());
    CHECK(loom::test::same_bytes(t, model[i].tensor));
  }
  // Automatic mode streams on network filesystems (NFS's statfs magic).
  auto nfs = loom::open_weights(dir / "m.gguf", {.io_mode = IoMode::automatic, .fs_magic_override = 0x6969});
  CHECK(nfs->files()[0].file->mode() == IoMode::stream);
  auto local = loom::open_weights(dir / "m.gguf", {.io_mode = IoMode::automatic, .fs_magic_override = 0xEF53});
  CHECK(local->files()[0].file->mode() == IoMode::mmap);
}

TEST_CASE("read() copies bounded chunks of a record") {
  TempDir dir;
  const auto t = loom::test::patterned_tensor({100, 33}, DType::f32, 9);
  loom::write_safetensors(dir / "c.safetensors", std::vector<loom::NamedTensor>{{"w", t}});
  for (auto mode : {IoMode::mmap, IoMode::stream}) {
    auto src = loom::open_weights(dir / "c.safetensors", {.io_mode = mode});
    const auto& r = src->tensors()[0];
    std::vector<std::byte> all(static_cast<size_t>(r.nbytes));
    for (uint64_t at = 0; at < r.nbytes; at += 1000) {
      const auto n = static_cast<size_t>(std::min<uint64_t>(1000, r.nbytes - at));
      src->read(r, at, std::span(all).subspan(static_cast<size_t>(at), n));
    }
    CHECK(std::memcmp(all.data(), t.raw_data(), all.size()) == 0);
    std::vector<std::byte> over(8);
    expect_error([&] { src->read(r, r.nbytes - 4, over); }, ErrorCode::invalid_argument, "outside the tensor",
                 (dir / "c.safetensors").string(), "w");
  }
}

TEST_CASE("loads from many threads at once") {
  TempDir dir;
  const auto model = loom::test::tiny_format_model();
  loom::write_safetensors(dir / "m.safetensors", model);
  for (auto mode : {IoMode::mmap, IoMode::stream}) {
    auto src = loom::open_weights(dir / "m.safetensors", {.io_mode = mode});
    std::atomic<int> good{0};
    std::vector<std::thread> threads;
    for (int k = 0; k < 4; ++k) {
      threads.emplace_back([&] {
        for (int rep = 0; rep < 50; ++rep) {
          for (size_t i = 0; i < model.size(); ++i) {
            good += loom::test::same_bytes(src->load(src->tensors()[i]), model[i].tensor);
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    CHECK(good == static_cast<int>(4 * 50 * model.size()));
  }
}

TEST_CASE("the same tiny model through every format lists the same tensors with the same bytes") {
  TempDir dir;
  const auto model = loom::test::tiny_format_model();
  std::filesystem::create_directories(dir / "st");
  std::filesystem::create_directories(dir / "sharded");
  std::filesystem::create_directories(dir / "gguf");
  std::filesystem::create_directories(dir / "bin");
  std::filesystem::create_directories(dir / "npy");
  loom::write_safetensors(dir / "st" / "model.safetensors", model);
  loom::write_safetensors_sharded(dir / "sharded", "model", model, 3);
  loom::write_gguf(dir / "gguf" / "model.gguf", {}, model);
  loom::write_torch(dir / "bin" / "pytorch_model.bin", model);
  for (const auto& t : model) loom::write_npy(dir / "npy" / (t.name + ".npy"), t.tensor);

  const std::vector<std::pair<std::string, FormatKind>> dirs{
      {"st", FormatKind::safetensors}, {"sharded", FormatKind::safetensors}, {"gguf", FormatKind::gguf},
      {"bin", FormatKind::torch},      {"npy", FormatKind::npy}};
  for (const auto& [name, kind] : dirs) {
    for (auto mode : {IoMode::mmap, IoMode::stream}) {
      INFO(name << " " << loom::io_mode_name(mode));
      auto src = loom::open_weights(dir / name, {.io_mode = mode});
      CHECK(src->format() == kind);
      CHECK(src->tensors().size() == model.size());
      for (const auto& t : model) {
        const auto* r = src->find(t.name);
        REQUIRE(r != nullptr);
        CHECK(r->dtype == t.tensor.dtype());
        CHECK(r->shape == t.tensor.shape());
        CHECK(r->nbytes == static_cast<uint64_t>(t.tensor.nbytes()));
        CHECK(loom::test::fnv1a64(src->load(*r)) == loom::test::fnv1a64(t.tensor));
      }
    }
  }
}

TEST_CASE("sniff_format reads magic bytes, not names") {
  using loom::sniff_format;
  CHECK(sniff_format(bytes_of("GGUF\x03\0\0\0")) == FormatKind::gguf);
  CHECK(sniff_format(bytes_of("\x93NUMPY\x01\0")) == FormatKind::npy);
  CHECK(sniff_format(bytes_of("PK\x03\x04....")) == FormatKind::torch);
  CHECK(sniff_format(bytes_of(std::string_view("\x80\x02\x8a\x0a", 4))) == FormatKind::torch);
  CHECK(sniff_format(bytes_of(std::string_view("\x10\0\0\0\0\0\0\0{\"a\"", 12))) == FormatKind::safetensors);
  CHECK(sniff_format(bytes_of(std::string_view("\x10\0\0\0\0\0\0\0  {", 11))) == FormatKind::safetensors);
  CHECK_FALSE(sniff_format(bytes_of(std::string_view("\x10\0\0\0\0\0\0\0[1]", 11))).has_value());
  CHECK_FALSE(sniff_format(bytes_of(std::string_view("\xff\xff\xff\xff\xff\xff\xff\x7f{", 9))).has_value());
  CHECK_FALSE(sniff_format(bytes_of("hello world")).has_value());
  CHECK_FALSE(sniff_format({}).has_value());

  TempDir dir;  // a GGUF named .safetensors is still a GGUF
  loom::write_gguf(dir / "misnamed.safetensors", {}, loom::test::tiny_format_model());
  CHECK(loom::open_weights(dir / "misnamed.safetensors")->format() == FormatKind::gguf);
}

TEST_CASE("model directories resolve the way people lay them out") {
  TempDir dir;
  const auto model = loom::test::tiny_format_model();
  SECTION("model.safetensors wins over pytorch_model.bin and a .gguf") {
    loom::write_safetensors(dir / "model.safetensors", model);
    loom::write_torch(dir / "pytorch_model.bin", model);
    loom::write_gguf(dir / "model.gguf", {}, model);
    auto src = loom::open_weights(dir.path());
    CHECK(src->format() == FormatKind::safetensors);
    CHECK(src->files()[0].path == (dir / "model.safetensors").string());
  }
  SECTION("the index wins over a stray model.safetensors") {
    loom::write_safetensors_sharded(dir.path(), "model", model, 2);
    loom::write_safetensors(dir / "model.safetensors", std::span(model).first(1));
    CHECK(loom::open_weights(dir.path())->files().size() == 2);
  }
  SECTION("pytorch_model.bin, then a single .gguf") {
    loom::write_torch(dir / "pytorch_model.bin", model);
    loom::write_gguf(dir / "model.gguf", {}, model);
    CHECK(loom::open_weights(dir.path())->format() == FormatKind::torch);
    std::filesystem::remove(dir / "pytorch_model.bin");
    CHECK(loom::open_weights(dir.path())->format() == FormatKind::gguf);
  }
  SECTION("a single file of another name") {
    loom::write_safetensors(dir / "weights.safetensors", model);
    CHECK(loom::open_weights(dir.path())->format() == FormatKind::safetensors);
  }
  SECTION("several candidates are ambiguous") {
    loom::write_gguf(dir / "a-q4.gguf", {}, model);
    loom::write_gguf(dir / "a-q8.gguf", {}, model);
    expect_error([&] { loom::open_weights(dir.path()); }, ErrorCode::invalid_argument,
                 "2 files match '*.gguf' (a-q4.gguf, a-q8.gguf)", dir.path().string());
  }
  SECTION("nothing to open") {
    loom::test::write_file_bytes(dir / "config.json", {'{', '}'});
    expect_error([&] { loom::open_weights(dir.path()); }, ErrorCode::io, "no weights found", dir.path().string());
    expect_error([&] { loom::open_weights(dir / "nope"); }, ErrorCode::io, "no such file", (dir / "nope").string());
    loom::test::write_file_bytes(dir / "junk.bin", {'j', 'u', 'n', 'k', 0, 0, 0, 0, 0, 0});
    expect_error([&] { loom::open_weights(dir / "junk.bin"); }, ErrorCode::unsupported, "unrecognised file format",
                 (dir / "junk.bin").string());
  }
}

TEST_CASE("writers leave no partial file behind") {
  TempDir dir;
  const auto model = loom::test::tiny_format_model();
  // The target is a directory, so the final rename fails after everything was written.
  std::filesystem::create_directories(dir / "taken.safetensors" / "x");
  expect_error([&] { loom::write_safetensors(dir / "taken.safetensors", model); }, ErrorCode::io, "cannot rename",
               (dir / "taken.safetensors").string());
  std::filesystem::create_directories(dir / "taken.gguf" / "x");
  expect_error([&] { loom::write_gguf(dir / "taken.gguf", {}, model); }, ErrorCode::io, "cannot rename");
  size_t entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    ++entries;
    CHECK(e.is_directory());  // no *.tmp-* left over
  }
  CHECK(entries == 2);
  // A writer that fails half-way (an unsupported dtype after good tensors) leaves nothing.
  auto mixed = model;
  mixed.push_back({"u8", loom::test::patterned_tensor({3}, DType::u8, 1)});
  expect_error([&] { loom::write_gguf(dir / "mixed.gguf", {}, mixed); }, ErrorCode::unsupported, "u8");
  CHECK_FALSE(std::filesystem::exists(dir / "mixed.gguf"));
}

TEST_CASE("WeightSource refuses records outside their files") {
  TempDir dir;
  loom::test::write_file_bytes(dir / "raw", std::vector<uint8_t>(16, 0));
  auto file = loom::MappedFile::open((dir / "raw").string());
  loom::TensorRecord r;
  r.name = "w";
  r.dtype = DType::f32;
  r.shape = loom::Shape{8};
  r.offset = 0;
  r.nbytes = 32;
  expect_error([&] { loom::WeightSource(FormatKind::safetensors, "x", {{(dir / "raw").string(), 16, file}}, {r}, {}); },
               ErrorCode::format, "past the end", (dir / "raw").string(), "w");
  r.nbytes = 16;
  r.shape = loom::Shape{4};
  loom::WeightSource ok(FormatKind::safetensors, "x", {{(dir / "raw").string(), 16, file}}, {r}, {});
  CHECK(ok.tensors()[0].span_bytes == 16);
  CHECK(ok.find("w") == &ok.tensors()[0]);
  CHECK(ok.find("v") == nullptr);
}

// A cut file either fails with an error naming it or — when the cut removed only
// trailing padding (GGUF pads after its last tensor) — still yields every tensor intact.
TEST_CASE("every truncation of every format is a loom::Error naming the file") {
  TempDir dir;
  const auto model = loom::test::tiny_format_model();
  loom::write_safetensors(dir / "m.safetensors", model);
  loom::write_gguf(dir / "m.gguf", {}, model);
  loom::write_torch(dir / "m.bin", model);
  loom::write_npy(dir / "m.npy", model[0].tensor);
  for (const char* name : {"m.safetensors", "m.gguf", "m.bin", "m.npy"}) {
    const auto full = loom::test::read_file_bytes(dir / name);
    const auto cut_path = (dir / (std::string("cut-") + name)).string();
    size_t checked = 0, padding_only = 0;
    for (size_t len = 0; len < full.size(); len += len < 300 ? 1 : 13) {
      INFO(name << " cut to " << len << " of " << full.size() << " bytes");
      loom::test::write_file_bytes(cut_path, std::vector<uint8_t>(full.begin(), full.begin() + static_cast<long>(len)));
      for (auto mode : {IoMode::mmap, IoMode::stream}) {
        try {
          auto src = loom::open_weights(cut_path, {.io_mode = mode});
          CHECK(std::string(name) == "m.gguf");
          REQUIRE(src->tensors().size() == model.size());
          for (size_t i = 0; i < model.size(); ++i) {
            CHECK(loom::test::same_bytes(src->load(src->tensors()[i]), model[i].tensor));
          }
          ++padding_only;
        } catch (const loom::Error& e) {
          CHECK(e.context().file == cut_path);
        }
      }
      ++checked;
    }
    CHECK(checked > 100);
    CHECK(padding_only < 64);
  }
}
