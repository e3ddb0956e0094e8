#include "common/sha256.hpp"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <numeric>

#include "loom/error.hpp"
#include "loom/thread_pool.hpp"

namespace loom {

namespace {

void check(int ok, const char* what) {
  // libcrypto's SHA-256 fails only when it cannot allocate; say so instead of hashing on.
  if (ok != 1) throw Error(ErrorCode::out_of_memory, std::string("libcrypto SHA-256: ") + what + " failed");
}

// Closes a file descriptor when the hash of its range is done (or throws).
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr) throw Error(ErrorCode::out_of_memory, "libcrypto: cannot allocate a SHA-256 context");
  if (EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(ctx_);
    throw Error(ErrorCode::out_of_memory, "libcrypto: SHA-256 initialisation failed");
  }
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

void Sha256::update(const void* data, size_t size) {
  if (size > 0) check(EVP_DigestUpdate(ctx_, data, size), "update");
}

std::array<uint8_t, 32> Sha256::finish() {
  std::array<uint8_t, 32> out{};
  unsigned int n = 0;
  check(EVP_DigestFinal_ex(ctx_, out.data(), &n), "final");
  return out;
}

std::string Sha256::finish_hex() {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (uint8_t b : finish()) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

std::string sha256_hex(const void* data, size_t size) {
  Sha256 h;
  h.update(data, size);
  return h.finish_hex();
}

std::optional<std::string> sha256_file_range(const std::filesystem::path& file, uint64_t offset,
                                             std::optional<uint64_t> length) {
  const Fd in{::open(file.c_str(), O_RDONLY | O_CLOEXEC)};
  if (in.fd < 0) return std::nullopt;
  // The kernel reads ahead more eagerly for a file said to be read once, front to back.
  ::posix_fadvise(in.fd, static_cast<off_t>(offset), static_cast<off_t>(length.value_or(0)),
                  POSIX_FADV_SEQUENTIAL);
  Sha256 h;
  std::vector<char> buffer(size_t{4} << 20);
  uint64_t at = offset;
  uint64_t left = length.value_or(UINT64_MAX);
  while (left > 0) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(left, buffer.size()));
    const ssize_t got = ::pread(in.fd, buffer.data(), want, static_cast<off_t>(at));
    if (got < 0) {
      if (errno == EINTR) continue;
      return std::nullopt;
    }
    if (got == 0) {
      if (length) return std::nullopt;  // shorter than asked
      break;                            // the end of the file
    }
    h.update(buffer.data(), static_cast<size_t>(got));
    at += static_cast<uint64_t>(got);
    left -= static_cast<uint64_t>(got);
  }
  return h.finish_hex();
}

std::vector<std::optional<std::string>> sha256_file_ranges(const std::vector<FileRange>& ranges,
                                                           ThreadPool& pool) {
  std::vector<std::optional<std::string>> out(ranges.size());
  auto size_of = [](const FileRange& r) {
    std::error_code ec;
    return r.length.value_or(std::filesystem::file_size(r.file, ec));
  };
  std::vector<size_t> order(ranges.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::vector<uint64_t> sizes(ranges.size());
  for (size_t i = 0; i < ranges.size(); ++i) sizes[i] = size_of(ranges[i]);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sizes[a] > sizes[b]; });
  // parallel_for splits statically; a shared cursor balances ranges of very different sizes.
  std::atomic<size_t> next{0};
  pool.parallel_for(pool.size(), 1, [&](int64_t, int64_t, int) {
    for (size_t k = next++; k < order.size(); k = next++) {
      const FileRange& r = ranges[order[k]];
      out[order[k]] = sha256_file_range(r.file, r.offset, r.length);
    }
  });
  return out;
}

}  // namespace loom
