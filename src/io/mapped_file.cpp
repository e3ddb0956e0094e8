#include "loom/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "loom/error.hpp"

namespace loom {

namespace {

// statfs f_type values of filesystems on which page faults go over the network (or
// through a user-space daemon) and can stall a thread for a long time.
constexpr std::array<uint64_t, 13> kRemoteFilesystems{
    0x6969,      // NFS
    0x517B,      // SMB
    0xFF534D42,  // CIFS
    0xFE534D42,  // SMB2
    0x65735546,  // FUSE
    0x65735543,  // FUSE control
    0x01021997,  // 9p (v9fs)
    0x00C36400,  // Ceph
    0x0BD00BD0,  // Lustre
    0x5346414F,  // AFS
    0x6B414653,  // kAFS
    0x47504653,  // GPFS
    0x013111A8,  // IBRIX
};

std::mutex& injector_mutex() {
  static std::mutex m;
  return m;
}
std::function<bool(const std::string&, uint64_t)>& injector() {
  static std::function<bool(const std::string&, uint64_t)> hook;
  return hook;
}

bool injected_failure(const std::string& path, uint64_t offset) {
  std::lock_guard lock(injector_mutex());
  return injector() && !injector()(path, offset);
}

std::string errno_text(int err) { return std::strerror(err); }

}  // namespace

std::string_view io_mode_name(IoMode mode) noexcept {
  switch (mode) {
    case IoMode::automatic: return "automatic";
    case IoMode::mmap: return "mmap";
    case IoMode::stream: return "stream";
  }
  return "unknown";
}

bool is_remote_filesystem(uint64_t fs_magic) noexcept {
  for (uint64_t m : kRemoteFilesystems) {
    if (m == fs_magic) return true;
  }
  return false;
}

IoMode resolve_io_mode(IoMode requested, uint64_t fs_magic) noexcept {
  if (requested != IoMode::automatic) return requested;
  return is_remote_filesystem(fs_magic) ? IoMode::stream : IoMode::mmap;
}

void set_read_fault_injector(std::function<bool(const std::string&, uint64_t)> hook) {
  std::lock_guard lock(injector_mutex());
  injector() = std::move(hook);
}

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path, IoMode mode,
                                             uint64_t fs_magic_override) {
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file->fd_ < 0) {
    throw Error(ErrorCode::io, "cannot open: " + errno_text(errno), {.file = path});
  }
  struct stat st {};
  if (::fstat(file->fd_, &st) != 0) {
    throw Error(ErrorCode::io, "cannot stat: " + errno_text(errno), {.file = path});
  }
  if (!S_ISREG(st.st_mode)) {
    throw Error(ErrorCode::io, "not a regular file", {.file = path});
  }
  file->size_ = static_cast<uint64_t>(st.st_size);
  if (fs_magic_override != 0) {
    file->fs_magic_ = fs_magic_override;
  } else {
    struct statfs fs {};
    file->fs_magic_ = ::fstatfs(file->fd_, &fs) == 0 ? static_cast<uint64_t>(fs.f_type) : 0;
  }
  file->mode_ = resolve_io_mode(mode, file->fs_magic_);
  if (file->mode_ == IoMode::mmap && file->size_ > 0) {
    void* base = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, file->fd_, 0);
    if (base == MAP_FAILED) {
      const int err = errno;
      throw Error(err == ENOMEM ? ErrorCode::out_of_memory : ErrorCode::io,
                  "cannot mmap " + std::to_string(file->size_) + " bytes: " + errno_text(err),
                  {.file = path});
    }
    file->base_ = static_cast<const std::byte*>(base);
  }
  return file;
}

MappedFile::~MappedFile() {
  if (base_ != nullptr) ::munmap(const_cast<std::byte*>(base_), size_);
  if (fd_ >= 0) ::close(fd_);
}

std::span<const std::byte> MappedFile::bytes(uint64_t offset, uint64_t length) const {
  if (mode_ != IoMode::mmap) {
    throw Error(ErrorCode::invalid_argument, "file is open in stream mode, not mapped",
                {.file = path_});
  }
  if (offset > size_ || length > size_ - offset) {
    throw Error(ErrorCode::format,
                "range of " + std::to_string(length) + " bytes runs past the end of the file (" +
                    std::to_string(size_) + " bytes)",
                {.file = path_, .offset = offset});
  }
  if (length == 0) return {};
  return {base_ + offset, static_cast<size_t>(length)};
}

void MappedFile::read(uint64_t offset, std::span<std::byte> dst) const {
  const uint64_t length = dst.size();
  if (offset > size_ || length > size_ - offset) {
    throw Error(ErrorCode::io,
                "read of " + std::to_string(length) + " bytes runs past the end of the file (" +
                    std::to_string(size_) + " bytes)",
                {.file = path_, .offset = offset});
  }
  if (mode_ == IoMode::mmap) {
    if (length) std::memcpy(dst.data(), base_ + offset, length);
    return;
  }
  uint64_t done = 0;
  while (done < length) {
    const uint64_t at = offset + done;
    if (injected_failure(path_, at)) {
      throw Error(ErrorCode::io, "read failed: " + errno_text(EIO), {.file = path_, .offset = at});
    }
    const ssize_t got = ::pread(fd_, dst.data() + done, length - done, static_cast<off_t>(at));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw Error(ErrorCode::io, "read failed: " + errno_text(errno),
                  {.file = path_, .offset = at});
    }
    if (got == 0) {
      throw Error(ErrorCode::io, "file ended early (was it truncated while open?)",
                  {.file = path_, .offset = at});
    }
    done += static_cast<uint64_t>(got);
  }
}

void MappedFile::advise(uint64_t offset, uint64_t length, AccessHint hint) const noexcept {
  if (base_ == nullptr || offset >= size_) return;
  if (length > size_ - offset) length = size_ - offset;
  // madvise needs a page-aligned start.
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t start = offset / page * page;
  int advice = MADV_NORMAL;
  switch (hint) {
    case AccessHint::normal: advice = MADV_NORMAL; break;
    case AccessHint::sequential: advice = MADV_SEQUENTIAL; break;
    case AccessHint::random: advice = MADV_RANDOM; break;
    case AccessHint::will_need: advice = MADV_WILLNEED; break;
    case AccessHint::dont_need: advice = MADV_DONTNEED; break;
  }
  ::madvise(const_cast<std::byte*>(base_) + start, length + (offset - start), advice);
}

bool MappedFile::contains(const void* p, size_t n) const noexcept {
  if (base_ == nullptr) return false;
  const auto* b = static_cast<const std::byte*>(p);
  return b >= base_ && b <= base_ + size_ && n <= static_cast<size_t>(base_ + size_ - b);
}

}  // namespace loom
