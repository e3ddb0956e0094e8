#include "format/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "loom/convert.hpp"
#include "loom/error.hpp"

namespace loom::format {

namespace {
std::string errno_text() { return std::strerror(errno); }
}  // namespace

AtomicFile::AtomicFile(std::filesystem::path target) : target_(std::move(target)) {
  static std::atomic<uint64_t> counter{0};
  // Same directory as the target so the final rename never crosses filesystems; the
  // suffix keeps directory scans (*.safetensors, *.gguf) from mistaking it for a result.
  temp_ = target_;
  temp_ += ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw Error(ErrorCode::io, "cannot create: " + errno_text(), {.file = temp_.string()});
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) {
    std::error_code ec;
    std::filesystem::remove(temp_, ec);
  }
}

void AtomicFile::write(std::span<const std::byte> bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(ErrorCode::io, "write failed: " + errno_text(),
                  {.file = temp_.string(), .offset = position_ + done});
    }
    done += static_cast<size_t>(n);
  }
  position_ += bytes.size();
}

void AtomicFile::write_zeros(uint64_t count) {
  static constexpr std::array<std::byte, 4096> kZeros{};
  while (count > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(count, kZeros.size()));
    write(std::span<const std::byte>(kZeros.data(), n));
    count -= n;
  }
}

void AtomicFile::pad_to(uint64_t alignment) {
  const uint64_t rem = position_ % alignment;
  if (rem != 0) write_zeros(alignment - rem);
}

void AtomicFile::write_tensor(const Tensor& tensor, std::string_view name) {
  if (!tensor.is_contiguous()) {
    throw Error(ErrorCode::invalid_argument, "tensor to write is not contiguous",
                {.tensor = std::string(name)});
  }
  const auto bytes = static_cast<size_t>(tensor.nbytes());
  const auto* data = static_cast<const std::byte*>(tensor.raw_data());
  const auto& traits = dtype_traits(tensor.dtype());
  if (host_is_little_endian() || traits.block_bytes == 1) {
    write(std::span<const std::byte>(data, bytes));
    return;
  }
  if (traits.block_elems != 1) {
    throw Error(ErrorCode::unsupported,
                "writing block-quantized tensors on a big-endian host is not supported",
                {.tensor = std::string(name)});
  }
  // Files are little-endian: swap through a bounded buffer.
  const size_t elem = static_cast<size_t>(traits.block_bytes);
  std::vector<std::byte> chunk(64 * 1024 / elem * elem);
  for (size_t done = 0; done < bytes; done += chunk.size()) {
    const size_t n = std::min(chunk.size(), bytes - done);
    std::memcpy(chunk.data(), data + done, n);
    byteswap_inplace(chunk.data(), n / elem, elem);
    write(std::span<const std::byte>(chunk.data(), n));
  }
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) {
    throw Error(ErrorCode::io, "fsync failed: " + errno_text(), {.file = temp_.string()});
  }
  if (::close(fd_) != 0) {
    fd_ = -1;
    throw Error(ErrorCode::io, "close failed: " + errno_text(), {.file = temp_.string()});
  }
  fd_ = -1;
  if (::rename(temp_.c_str(), target_.c_str()) != 0) {
    throw Error(ErrorCode::io, "cannot rename onto the target: " + errno_text(),
                {.file = target_.string()});
  }
  committed_ = true;
  // The rename is an entry in the directory: flush it too, or a crash may lose it.
  const std::filesystem::path dir = target_.has_parent_path() ? target_.parent_path() : ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    throw Error(ErrorCode::io, "cannot open the directory to flush it: " + errno_text(),
                {.file = dir.string()});
  }
  const int rc = ::fsync(dfd);
  const int fsync_errno = errno;
  ::close(dfd);
  // EINVAL: a filesystem that cannot sync directories (it has nothing to flush).
  if (rc != 0 && fsync_errno != EINVAL) {
    throw Error(ErrorCode::io, std::string("fsync of the directory failed: ") + std::strerror(fsync_errno),
                {.file = dir.string()});
  }
}

void write_file_atomically(const std::filesystem::path& path, std::string_view text) {
  AtomicFile out(path);
  out.write(text);
  out.commit();
}

}  // namespace loom::format
