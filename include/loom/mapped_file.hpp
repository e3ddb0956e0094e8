// loom::MappedFile — read-only access to one weight file, by mmap or by pread.
//
// mmap mode maps the whole file once (PROT_READ, MAP_PRIVATE) so tensors can be
// zero-copy views into it. Stream mode never maps: every access copies bytes with
// pread into a buffer the caller owns. Automatic mode picks stream on filesystems where
// page faults stall (NFS, SMB/CIFS, FUSE, 9p, Ceph, Lustre, ...) and mmap elsewhere.
// Both modes return identical bytes.
//
// Ownership: always held through std::shared_ptr; every Storage that views the mapping
// keeps it alive. The file descriptor stays open for the object's lifetime and the size
// is taken once at open: a file truncated while mapped is the host's responsibility
// (access past the new end raises SIGBUS), which is why stream mode exists.
// Thread-safety: all const methods may be called from any thread at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

namespace loom {

enum class IoMode : uint8_t { automatic, mmap, stream };

std::string_view io_mode_name(IoMode mode) noexcept;

// True for filesystem magic numbers (statfs f_type) of network and FUSE filesystems.
bool is_remote_filesystem(uint64_t fs_magic) noexcept;
// The mode a request resolves to on a filesystem with the given magic number.
IoMode resolve_io_mode(IoMode requested, uint64_t fs_magic) noexcept;

enum class AccessHint : uint8_t { normal, sequential, random, will_need, dont_need };

class MappedFile {
 public:
  // Opens `path`; throws loom::Error(io) naming the file when it cannot.
  // `fs_magic_override`, when nonzero, replaces the statfs result (tests use it to
  // exercise the automatic choice).
  static std::shared_ptr<MappedFile> open(const std::string& path,
                                          IoMode mode = IoMode::automatic,
                                          uint64_t fs_magic_override = 0);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const noexcept { return path_; }
  uint64_t size() const noexcept { return size_; }
  IoMode mode() const noexcept { return mode_; }  // mmap or stream, never automatic
  bool is_mapped() const noexcept { return mode_ == IoMode::mmap; }
  uint64_t filesystem_magic() const noexcept { return fs_magic_; }

  // mmap mode only: the bytes [offset, offset + length). Throws loom::Error(format)
  // naming the file and offset when the range is outside the file, and
  // loom::Error(invalid_argument) in stream mode.
  std::span<const std::byte> bytes(uint64_t offset, uint64_t length) const;
  // Both modes: copies [offset, offset + dst.size()) into dst. Throws loom::Error(io)
  // naming the file and offset on a short or failed read or an out-of-range request.
  void read(uint64_t offset, std::span<std::byte> dst) const;
  // madvise on the mapped range (no-op in stream mode).
  void advise(uint64_t offset, uint64_t length, AccessHint hint) const noexcept;
  // True when [p, p + n) lies inside this file's mapping.
  bool contains(const void* p, size_t n) const noexcept;

 private:
  MappedFile() = default;
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  IoMode mode_ = IoMode::stream;
  uint64_t fs_magic_ = 0;
  const std::byte* base_ = nullptr;
};

// Test hook for fault injection in stream mode: when set, it is called before each
// pread with the file path and offset and may return false to make that read fail
// with EIO. Not for production use; pass an empty function to clear.
void set_read_fault_injector(std::function<bool(const std::string& path, uint64_t offset)> hook);

}  // namespace loom
