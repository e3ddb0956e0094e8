// common/sha256 (libcrypto underneath): FIPS 180-4 vectors, incremental updates split at
// awkward places, file ranges (offset, length, too short, missing) and many ranges
// hashed on a pool. Expected digests from Python's hashlib.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "common/sha256.hpp"
#include "loom/thread_pool.hpp"
#include "support/format_fixtures.hpp"
#include "support/test_support.hpp"

using loom::test::TempDir;

namespace {

// (i * 7 + 3) mod 256 for i < n: no period of a power of two, so a misplaced chunk shows.
std::vector<uint8_t> pattern(size_t n) {
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>((i * 7 + 3) % 256);
  return out;
}

constexpr const char* kPattern10M = "6638db666458b55b703d7d312a7965f7fef18dc518a28154050cd283c9e0d39d";
constexpr const char* kPattern123Plus5000001 = "0fc9b3c55d32ea6617c558b24d53b39a059f0ce8594f2e055fe4c3e521ab58cc";
constexpr const char* kPatternLast1000 = "13ff222cac7910bbc1484b4e8696f4c389fc32ebe0a72d818b8486ee81e8046c";

}  // namespace

TEST_CASE("sha256: the FIPS 180-4 example messages") {
  CHECK(loom::sha256_hex("", 0) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(loom::sha256_hex("abc", 3) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  CHECK(loom::sha256_hex(two_blocks.data(), two_blocks.size()) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string million(1000000, 'a');
  CHECK(loom::sha256_hex(million.data(), million.size()) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  const auto raw = [] {
    loom::Sha256 h;
    h.update("abc", 3);
    return h.finish();
  }();
  CHECK(raw[0] == 0xba);
  CHECK(raw[31] == 0xad);
}

TEST_CASE("sha256: updates of 1, 63, 64, 65 bytes and odd sizes give the one-shot digest") {
  const auto bytes = pattern(10'000'000);
  for (size_t piece : {size_t{1} << 20, size_t{63}, size_t{64}, size_t{65}, size_t{999'983}}) {
    loom::Sha256 h;
    size_t at = 0;
    // A one-byte update first, so every later piece starts off a block boundary.
    h.update(bytes.data(), 1);
    at = 1;
    while (at < bytes.size()) {
      const size_t n = std::min(piece, bytes.size() - at);
      h.update(bytes.data() + at, n);
      at += n;
    }
    CHECK(h.finish_hex() == kPattern10M);
  }
}

TEST_CASE("sha256_file_range: whole file, an inner range, the tail, and ranges it cannot read") {
  TempDir dir;
  loom::test::write_file_bytes(dir / "blob", pattern(10'000'000));
  CHECK(loom::sha256_file_range(dir / "blob", 0, std::nullopt) == kPattern10M);
  CHECK(loom::sha256_file_range(dir / "blob", 123, 5'000'001) == kPattern123Plus5000001);
  CHECK(loom::sha256_file_range(dir / "blob", 9'999'000, std::nullopt) == kPatternLast1000);
  CHECK(loom::sha256_file_range(dir / "blob", 9'999'000, 1000) == kPatternLast1000);
  CHECK_FALSE(loom::sha256_file_range(dir / "blob", 9'999'000, 1001).has_value());  // one byte short
  CHECK(loom::sha256_file_range(dir / "blob", 10'000'000, std::nullopt) ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");  // at the end: empty
  CHECK_FALSE(loom::sha256_file_range(dir / "missing", 0, std::nullopt).has_value());
}

TEST_CASE("sha256_file_ranges: results in the order asked, whatever the sizes and thread count") {
  TempDir dir;
  loom::test::write_file_bytes(dir / "blob", pattern(10'000'000));
  const std::vector<loom::FileRange> ranges = {
      {dir / "blob", 9'999'000, 1000},
      {dir / "missing", 0, std::nullopt},
      {dir / "blob", 0, std::nullopt},
      {dir / "blob", 123, 5'000'001},
      {dir / "blob", 9'999'000, 1001},
  };
  for (int threads : {1, 2, 3}) {
    loom::ThreadPool pool(threads);
    const auto got = loom::sha256_file_ranges(ranges, pool);
    REQUIRE(got.size() == ranges.size());
    CHECK(got[0] == kPatternLast1000);
    CHECK_FALSE(got[1].has_value());
    CHECK(got[2] == kPattern10M);
    CHECK(got[3] == kPattern123Plus5000001);
    CHECK_FALSE(got[4].has_value());
  }
  loom::ThreadPool pool(2);
  CHECK(loom::sha256_file_ranges({}, pool).empty());
}
