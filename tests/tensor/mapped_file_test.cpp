#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <vector>

#include "loom/error.hpp"
#include "loom/mapped_file.hpp"
#include "support/test_support.hpp"

using loom::IoMode;
using loom::MappedFile;

namespace {
std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}
}  // namespace

TEST_CASE("mmap and stream modes give identical bytes") {
  loom::test::TempDir dir;
  const auto data = random_bytes(3 * 4096 + 17, 7);
  const auto path = (dir / "blob.bin").string();
  loom::test::write_file_bytes(path, data);
  auto mapped = MappedFile::open(path, IoMode::mmap);
  auto streamed = MappedFile::open(path, IoMode::stream);
  CHECK(mapped->is_mapped());
  CHECK_FALSE(streamed->is_mapped());
  CHECK(mapped->size() == data.size());
  CHECK(streamed->size() == data.size());
  for (uint64_t offset : {0ull, 1ull, 4095ull, 8000ull, 12000ull}) {
    const uint64_t len = std::min<uint64_t>(700, data.size() - offset);
    std::vector<std::byte> a(len), b(len);
    mapped->read(offset, a);
    streamed->read(offset, b);
    CHECK(std::memcmp(a.data(), b.data(), len) == 0);
    CHECK(std::memcmp(a.data(), data.data() + offset, len) == 0);
    auto span = mapped->bytes(offset, len);
    CHECK(std::memcmp(span.data(), data.data() + offset, len) == 0);
  }
  CHECK_THROWS_AS(streamed->bytes(0, 4), loom::Error);
  mapped->advise(0, data.size(), loom::AccessHint::sequential);
}

TEST_CASE("out-of-range reads name the file and the offset") {
  loom::test::TempDir dir;
  const auto path = (dir / "small.bin").string();
  loom::test::write_file_bytes(path, random_bytes(100, 1));
  for (auto mode : {IoMode::mmap, IoMode::stream}) {
    auto f = MappedFile::open(path, mode);
    std::vector<std::byte> buf(50);
    try {
      f->read(80, buf);
      FAIL("expected an error");
    } catch (const loom::Error& e) {
      CHECK(e.context().file == path);
      CHECK(e.context().offset == 80u);
      CHECK(std::string(e.what()).find("small.bin") != std::string::npos);
    }
  }
}

TEST_CASE("opening a missing file or a directory is an io error naming it") {
  loom::test::TempDir dir;
  try {
    MappedFile::open((dir / "nope.gguf").string());
    FAIL("expected an error");
  } catch (const loom::Error& e) {
    CHECK(e.code() == loom::ErrorCode::io);
    CHECK(e.context().file.find("nope.gguf") != std::string::npos);
  }
  CHECK_THROWS_AS(MappedFile::open(dir.path().string()), loom::Error);
}

TEST_CASE("automatic mode streams on network and FUSE filesystems") {
  CHECK(loom::is_remote_filesystem(0x6969));      // NFS
  CHECK(loom::is_remote_filesystem(0xFF534D42));  // CIFS
  CHECK(loom::is_remote_filesystem(0x65735546));  // FUSE
  CHECK(loom::is_remote_filesystem(0x01021997));  // 9p
  CHECK_FALSE(loom::is_remote_filesystem(0xEF53));  // ext4
  CHECK(loom::resolve_io_mode(IoMode::automatic, 0x6969) == IoMode::stream);
  CHECK(loom::resolve_io_mode(IoMode::automatic, 0xEF53) == IoMode::mmap);
  CHECK(loom::resolve_io_mode(IoMode::mmap, 0x6969) == IoMode::mmap);

  loom::test::TempDir dir;
  const auto path = (dir / "x.bin").string();
  loom::test::write_file_bytes(path, random_bytes(64, 3));
  auto on_nfs = MappedFile::open(path, IoMode::automatic, 0x6969);
  CHECK(on_nfs->mode() == IoMode::stream);
  CHECK(on_nfs->filesystem_magic() == 0x6969);
  auto on_fuse = MappedFile::open(path, IoMode::automatic, 0x65735546);
  CHECK(on_fuse->mode() == IoMode::stream);
  auto local = MappedFile::open(path, IoMode::automatic, 0xEF53);
  CHECK(local->mode() == IoMode::mmap);
}

TEST_CASE("an injected read fault in stream mode reports file and offset") {
  loom::test::TempDir dir;
  const auto path = (dir / "faulty.bin").string();
  loom::test::write_file_bytes(path, random_bytes(4096, 9));
  auto f = MappedFile::open(path, IoMode::stream);
  loom::set_read_fault_injector([](const std::string&, uint64_t offset) { return offset < 1000; });
  std::vector<std::byte> buf(100);
  CHECK_NOTHROW(f->read(0, buf));
  try {
    f->read(2000, buf);
    FAIL("expected an injected failure");
  } catch (const loom::Error& e) {
    CHECK(e.code() == loom::ErrorCode::io);
    CHECK(e.context().offset == 2000u);
    CHECK(e.context().file == path);
  }
  loom::set_read_fault_injector(nullptr);
  CHECK_NOTHROW(f->read(2000, buf));
}

TEST_CASE("an empty file opens in both modes") {
  loom::test::TempDir dir;
  const auto path = (dir / "empty.bin").string();
  loom::test::write_file_bytes(path, {});
  auto m = MappedFile::open(path, IoMode::mmap);
  CHECK(m->size() == 0);
  CHECK(m->bytes(0, 0).empty());
}
