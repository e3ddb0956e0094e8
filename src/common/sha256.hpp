// Internal: SHA-256 (FIPS 180-4) through OpenSSL's libcrypto, which uses the CPU's SHA
// extensions (SHA-NI) where it has them: about 1.1 GB/s per core on the CI kind of
// machine (595 MB of pack data in 0.55 s with `openssl dgst`), against ~200 MB/s for the
// portable C loop loom used before. Used to verify weight files, to check a pack against
// its index and to record provenance in packs.
//
// A Sha256 is owned by one thread at a time; the free functions are reentrant.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX, kept out of every includer's headers

namespace loom {

class ThreadPool;

class Sha256 {
 public:
  // Throws Error(out_of_memory) when libcrypto cannot allocate its context.
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t size);
  // The digest of everything updated so far; the hasher is then spent (call once).
  std::array<uint8_t, 32> finish();
  std::string finish_hex();

 private:
  evp_md_ctx_st* ctx_;
};

std::string sha256_hex(const void* data, size_t size);

// The hex SHA-256 of `length` bytes of `file` at `offset` (all of it from `offset` when
// `length` is nullopt), read in 4 MiB pieces; nullopt when the file cannot be read or is
// too short.
std::optional<std::string> sha256_file_range(const std::filesystem::path& file, uint64_t offset,
                                             std::optional<uint64_t> length);

// Many ranges at once: sha256_file_range of each, results in the order given. The
// ranges are hashed on `pool`'s threads, each thread taking the next unhashed range
// (biggest first, so one large tensor does not end up last on a busy thread).
struct FileRange {
  std::filesystem::path file;
  uint64_t offset = 0;
  std::optional<uint64_t> length;  // nullopt: to the end of the file
};
std::vector<std::optional<std::string>> sha256_file_ranges(const std::vector<FileRange>& ranges,
                                                           ThreadPool& pool);

}  // namespace loom
