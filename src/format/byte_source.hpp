// Internal: bounded, little-endian reading of untrusted bytes for the format parsers.
//
// A ByteSource is random-access bytes with a display name (the file path, or a label for
// an in-memory buffer): either a span in memory (fuzzing, mapped files) or a MappedFile
// opened in stream mode (read through pread). A Cursor reads it sequentially. Every read
// is checked against the bytes left before anything is allocated or copied, and every
// failure is a loom::Error(format) naming the source and the byte offset.
//
// Not thread-safe: a Cursor belongs to one parser on one thread. A ByteSource is
// immutable and may be shared.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "loom/error.hpp"
#include "loom/mapped_file.hpp"

namespace loom::format {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual uint64_t size() const noexcept = 0;
  const std::string& name() const noexcept { return name_; }
  // The whole source as contiguous memory, or nullptr when it must be read piecewise.
  virtual const std::byte* data() const noexcept { return nullptr; }
  // Copies [offset, offset + dst.size()). Throws Error(format) "unexpected end of file"
  // naming the source and offset when the range is not inside the source.
  void read(uint64_t offset, std::span<std::byte> dst) const;
  // True when [offset, offset + length) lies inside the source.
  bool contains(uint64_t offset, uint64_t length) const noexcept {
    return offset <= size() && length <= size() - offset;
  }
  [[noreturn]] void fail(std::string message, uint64_t offset, std::string tensor = {}) const;

 protected:
  explicit ByteSource(std::string name) : name_(std::move(name)) {}
  virtual void read_unchecked(uint64_t offset, std::span<std::byte> dst) const = 0;

 private:
  std::string name_;
};

// Bytes held by the caller (who keeps them alive).
class SpanSource final : public ByteSource {
 public:
  SpanSource(std::span<const std::byte> bytes, std::string name)
      : ByteSource(std::move(name)), bytes_(bytes) {}
  uint64_t size() const noexcept override { return bytes_.size(); }
  const std::byte* data() const noexcept override { return bytes_.data(); }

 private:
  void read_unchecked(uint64_t offset, std::span<std::byte> dst) const override;
  std::span<const std::byte> bytes_;
};

// A MappedFile: direct memory when mapped, pread otherwise.
class FileSource final : public ByteSource {
 public:
  explicit FileSource(std::shared_ptr<const MappedFile> file);
  uint64_t size() const noexcept override { return file_->size(); }
  const std::byte* data() const noexcept override { return base_; }
  const std::shared_ptr<const MappedFile>& file() const noexcept { return file_; }

 private:
  void read_unchecked(uint64_t offset, std::span<std::byte> dst) const override;
  std::shared_ptr<const MappedFile> file_;
  const std::byte* base_ = nullptr;
};

// Sequential little-endian reader over a ByteSource, with a small buffer when the
// source is not in memory.
class Cursor {
 public:
  explicit Cursor(const ByteSource& source, uint64_t position = 0);

  const ByteSource& source() const noexcept { return source_; }
  uint64_t position() const noexcept { return position_; }
  uint64_t remaining() const noexcept {
    return position_ <= source_.size() ? source_.size() - position_ : 0;
  }
  void seek(uint64_t position);
  void skip(uint64_t bytes);

  void read_bytes(std::span<std::byte> dst);

  template <typename T>
  T read() {
    static_assert(std::is_trivially_copyable_v<T> && (sizeof(T) <= 8));
    std::array<std::byte, sizeof(T)> raw{};
    read_bytes(raw);
    if constexpr (std::endian::native == std::endian::big && sizeof(T) > 1) {
      std::reverse(raw.begin(), raw.end());
    }
    T value;
    std::memcpy(&value, raw.data(), sizeof(T));
    return value;
  }

  // Reads `length` bytes as a string; refuses (before allocating) lengths over `limit`
  // or past the end of the source. `what` names the field in the error, which points
  // at `length_at` (where the length was read) when given.
  std::string read_string(uint64_t length, uint64_t limit, const char* what,
                          std::optional<uint64_t> length_at = std::nullopt);
  // The checks of read_string alone, for a caller that reads the bytes into its own buffer.
  void check_string_length(uint64_t length, uint64_t limit, const char* what,
                           std::optional<uint64_t> length_at = std::nullopt) const;

  [[noreturn]] void fail(std::string message, std::string tensor = {}) const {
    source_.fail(std::move(message), position_, std::move(tensor));
  }
  [[noreturn]] void fail_at(uint64_t offset, std::string message, std::string tensor = {}) const {
    source_.fail(std::move(message), offset, std::move(tensor));
  }

 private:
  void fill(uint64_t need);
  const ByteSource& source_;
  uint64_t position_ = 0;
  // Buffered window [buffer_start_, buffer_start_ + buffer_.size()) for piecewise sources.
  std::vector<std::byte> buffer_;
  uint64_t buffer_start_ = 0;
};

// Little-endian loads and stores of fixed-width integers from raw memory.
template <typename T>
T load_le(const std::byte* p) noexcept {
  static_assert(std::is_trivially_copyable_v<T>);
  std::array<std::byte, sizeof(T)> raw{};
  std::memcpy(raw.data(), p, sizeof(T));
  if constexpr (std::endian::native == std::endian::big && sizeof(T) > 1) {
    std::reverse(raw.begin(), raw.end());
  }
  T value;
  std::memcpy(&value, raw.data(), sizeof(T));
  return value;
}

// Appends n raw bytes. Out of line on purpose: GCC 12 at -O3 reports bogus
// -Wstringop-overflow / -Warray-bounds for vector growth it can see through.
void append_raw(std::vector<std::byte>& out, const void* data, size_t n);

template <typename T>
void append_le(std::vector<std::byte>& out, T value) {
  static_assert(std::is_trivially_copyable_v<T>);
  std::array<std::byte, sizeof(T)> raw{};
  std::memcpy(raw.data(), &value, sizeof(T));
  if constexpr (std::endian::native == std::endian::big && sizeof(T) > 1) {
    std::reverse(raw.begin(), raw.end());
  }
  append_raw(out, raw.data(), raw.size());
}

inline void append_bytes(std::vector<std::byte>& out, std::string_view text) {
  append_raw(out, text.data(), text.size());
}
inline void append_bytes(std::vector<std::byte>& out, std::span<const std::byte> bytes) {
  append_raw(out, bytes.data(), bytes.size());
}
void append_fill(std::vector<std::byte>& out, std::byte value, size_t n);

inline std::string_view as_chars(std::span<const std::byte> bytes) noexcept {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

inline uint64_t align_up(uint64_t value, uint64_t alignment) {
  const uint64_t rem = value % alignment;
  if (rem == 0) return value;
  if (value > UINT64_MAX - (alignment - rem)) {
    throw Error(ErrorCode::format, "offset overflow while aligning");
  }
  return value + (alignment - rem);
}

}  // namespace loom::format
