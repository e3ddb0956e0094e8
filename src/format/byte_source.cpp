#include "format/byte_source.hpp"

#include <algorithm>

namespace loom::format {

namespace {
// Stream-mode cursors read ahead this much; big enough to amortise pread calls over a
// GGUF vocabulary, small enough not to matter.
constexpr uint64_t kCursorWindow = 64 * 1024;
}  // namespace

void append_raw(std::vector<std::byte>& out, const void* data, size_t n) {
  if (n == 0) return;
  const size_t at = out.size();
  out.resize(at + n);
  std::memcpy(out.data() + at, data, n);
}

void append_fill(std::vector<std::byte>& out, std::byte value, size_t n) {
  out.resize(out.size() + n, value);
}

void ByteSource::fail(std::string message, uint64_t offset, std::string tensor) const {
  throw Error(ErrorCode::format, std::move(message),
              {.file = name_, .tensor = std::move(tensor), .offset = offset});
}

void ByteSource::read(uint64_t offset, std::span<std::byte> dst) const {
  if (!contains(offset, dst.size())) {
    fail("unexpected end of file: need " + std::to_string(dst.size()) + " bytes, the file has " +
             std::to_string(size()),
         offset);
  }
  if (!dst.empty()) read_unchecked(offset, dst);
}

void SpanSource::read_unchecked(uint64_t offset, std::span<std::byte> dst) const {
  std::memcpy(dst.data(), bytes_.data() + offset, dst.size());
}

FileSource::FileSource(std::shared_ptr<const MappedFile> file)
    : ByteSource(file->path()), file_(std::move(file)) {
  if (file_->is_mapped() && file_->size() > 0) base_ = file_->bytes(0, file_->size()).data();
}

void FileSource::read_unchecked(uint64_t offset, std::span<std::byte> dst) const {
  if (base_ != nullptr) {
    std::memcpy(dst.data(), base_ + offset, dst.size());
  } else {
    file_->read(offset, dst);
  }
}

Cursor::Cursor(const ByteSource& source, uint64_t position)
    : source_(source), position_(position) {}

void Cursor::seek(uint64_t position) {
  if (position > source_.size()) {
    fail_at(position, "offset is past the end of the file (" + std::to_string(source_.size()) +
                          " bytes)");
  }
  position_ = position;
}

void Cursor::skip(uint64_t bytes) {
  if (bytes > remaining()) {
    fail("unexpected end of file: need " + std::to_string(bytes) + " more bytes, " +
         std::to_string(remaining()) + " left");
  }
  position_ += bytes;
}

void Cursor::fill(uint64_t need) {
  // Called only for piecewise sources, with need <= remaining().
  const uint64_t end = buffer_start_ + buffer_.size();
  if (position_ >= buffer_start_ && position_ + need <= end) return;
  const uint64_t want = std::min(std::max(need, kCursorWindow), remaining());
  buffer_.resize(static_cast<size_t>(want));
  buffer_start_ = position_;
  source_.read(position_, buffer_);
}

void Cursor::read_bytes(std::span<std::byte> dst) {
  if (dst.size() > remaining()) {
    fail("unexpected end of file: need " + std::to_string(dst.size()) + " bytes, " +
         std::to_string(remaining()) + " left");
  }
  if (dst.empty()) return;
  if (const std::byte* base = source_.data()) {
    std::memcpy(dst.data(), base + position_, dst.size());
  } else if (dst.size() > kCursorWindow) {
    source_.read(position_, dst);  // large reads bypass the window
  } else {
    fill(dst.size());
    std::memcpy(dst.data(), buffer_.data() + (position_ - buffer_start_), dst.size());
  }
  position_ += dst.size();
}

void Cursor::check_string_length(uint64_t length, uint64_t limit, const char* what,
                                 std::optional<uint64_t> length_at) const {
  const uint64_t at = length_at.value_or(position_);
  if (length > limit) {
    fail_at(at, std::string(what) + " of " + std::to_string(length) + " bytes exceeds the limit of " +
                    std::to_string(limit));
  }
  if (length > remaining()) {
    fail_at(at, std::string(what) + " of " + std::to_string(length) +
                    " bytes runs past the end of the file (" + std::to_string(remaining()) + " bytes left)");
  }
}

std::string Cursor::read_string(uint64_t length, uint64_t limit, const char* what,
                                std::optional<uint64_t> length_at) {
  check_string_length(length, limit, what, length_at);
  std::string out(static_cast<size_t>(length), '\0');
  read_bytes(std::as_writable_bytes(std::span<char>(out.data(), out.size())));
  return out;
}

}  // namespace loom::format
