// The library's shared file helpers: common/read_file (every whole-file read of a side
// file), common/huge_pages (the range a large buffer asks 2 MiB pages for) and
// format/atomic_file (every temp-file-then-rename write).
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "common/huge_pages.hpp"
#include "common/read_file.hpp"
#include "format/atomic_file.hpp"
#include "support/format_fixtures.hpp"
#include "support/test_support.hpp"

using loom::ErrorCode;
using loom::test::expect_error;
using loom::test::TempDir;

namespace fs = std::filesystem;

namespace {

// Every name in `dir`, so a test can see that no temporary was left behind.
std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("read_file: the exact bytes, NULs and more than one read's worth included") {
  TempDir dir;
  std::string bytes;
  for (int i = 0; i < 200000; ++i) bytes.push_back(static_cast<char>(i * 7 % 256));
  loom::test::write_file_bytes(dir / "blob", std::vector<uint8_t>(bytes.begin(), bytes.end()));
  const std::string read = loom::read_file(dir / "blob");
  CHECK(read == bytes);
  CHECK(read.capacity() - read.size() >= loom::kReadFilePadding);  // a JSON parser reads it in place

  loom::test::write_file_bytes(dir / "empty", {});
  CHECK(loom::read_file(dir / "empty").empty());
}

TEST_CASE("read_file: a missing file or a directory is an io error naming it") {
  TempDir dir;
  const fs::path missing = dir / "config.json";
  expect_error([&] { (void)loom::read_file(missing); }, ErrorCode::io,
               "cannot open file: No such file or directory", missing.string());
  expect_error([&] { (void)loom::read_file(dir.path()); }, ErrorCode::io, "is a directory",
               dir.path().string());
}

TEST_CASE("huge_page_range: the whole 2 MiB pages inside a buffer of 4 MiB or more, nothing outside it") {
  constexpr uintptr_t kMiB = uintptr_t{1} << 20;
  auto at = [](uintptr_t a) { return reinterpret_cast<const void*>(a); };
  // Aligned start: every whole page of the buffer.
  auto r = loom::huge_page_range(at(64 * kMiB), 5 * kMiB);
  CHECK(r.first == 64 * kMiB);
  CHECK(r.last == 68 * kMiB);
  // Unaligned start and end: only the pages wholly inside.
  r = loom::huge_page_range(at(64 * kMiB + 4096), 6 * kMiB);
  CHECK(r.first == 66 * kMiB);
  CHECK(r.last == 70 * kMiB);
  // Under 4 MiB, or no buffer: nothing.
  r = loom::huge_page_range(at(64 * kMiB), 4 * kMiB - 1);
  CHECK(r.first == r.last);
  r = loom::huge_page_range(nullptr, 16 * kMiB);
  CHECK(r.first == r.last);
  // A real buffer: advised, still whole.
  std::vector<uint8_t> big(9 * kMiB + 123, 7);
  loom::advise_huge_pages(big.data(), big.size());
  CHECK(std::count(big.begin(), big.end(), uint8_t{7}) == static_cast<std::ptrdiff_t>(big.size()));
}

TEST_CASE("AtomicFile: commit puts exactly the written bytes in place and leaves no temporary") {
  TempDir dir;
  const fs::path target = dir / "index.json";
  {
    loom::format::AtomicFile out(target);
    CHECK(out.temp_path().parent_path() == target.parent_path());
    out.write(std::string_view("{\"a\": 1}"));
    out.pad_to(16);
    out.write(std::string_view("\n"));
    CHECK_FALSE(fs::exists(target));  // nothing at the target before commit()
    out.commit();
  }
  CHECK(loom::read_file(target) == std::string("{\"a\": 1}") + std::string(8, '\0') + "\n");
  CHECK(names_in(dir.path()) == std::vector<std::string>{"index.json"});

  // Replacing an existing file: the old bytes until commit(), the new ones after.
  {
    loom::format::AtomicFile out(target);
    out.write(std::string_view("new"));
    CHECK(loom::read_file(target).size() == 17);
    out.commit();
  }
  CHECK(loom::read_file(target) == "new");
  CHECK(names_in(dir.path()) == std::vector<std::string>{"index.json"});
}

TEST_CASE("AtomicFile: destroyed without commit, it leaves neither the target nor a temporary") {
  TempDir dir;
  {
    loom::format::AtomicFile out(dir / "model.safetensors");
    out.write(std::string_view("partial"));
  }
  CHECK(names_in(dir.path()).empty());
}

TEST_CASE("AtomicFile: a target in a directory that does not exist is an io error naming the file") {
  TempDir dir;
  const fs::path target = dir / "no" / "such" / "out.gguf";
  try {
    loom::format::AtomicFile out(target);
    FAIL("expected an error");
  } catch (const loom::Error& e) {
    CHECK(e.code() == ErrorCode::io);
    CHECK_THAT(e.context().file, Catch::Matchers::StartsWith(target.string() + ".tmp-"));
  }
}
