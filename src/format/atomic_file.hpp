// Internal: a file written under a temporary name and renamed into place on commit(),
// so that a failed or interrupted write never leaves a file that looks complete. The
// temporary is removed when the object is destroyed without commit().
//
// The library's one temp-file-then-rename writer: every writer of a whole file (the
// format writers, a pack's side files) goes through it, so every one is durable the
// same way — commit() fsyncs the file before the rename and the directory after it
// (without the second, a crash can forget the rename although the data reached disk).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>

#include "loom/tensor.hpp"

namespace loom::format {

class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path target);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(std::span<const std::byte> bytes);
  void write(std::string_view text) {
    write(std::as_bytes(std::span<const char>(text.data(), text.size())));
  }
  void write_zeros(uint64_t count);
  // Pads with zero bytes up to the next multiple of `alignment`.
  void pad_to(uint64_t alignment);
  // The tensor's bytes in file (little-endian) order; the tensor must be contiguous.
  void write_tensor(const Tensor& tensor, std::string_view name);
  uint64_t position() const noexcept { return position_; }
  // Flushes the file to disk, renames the temporary onto the target and flushes the
  // directory that holds it. Throws Error(io) naming the file when a step fails.
  void commit();

  const std::filesystem::path& target() const noexcept { return target_; }
  const std::filesystem::path& temp_path() const noexcept { return temp_; }

 private:
  std::filesystem::path target_;
  std::filesystem::path temp_;
  int fd_ = -1;
  uint64_t position_ = 0;
  bool committed_ = false;
};

// A whole text file written through AtomicFile (the config.json and tokenizer files
// beside a model, a pack's side files).
void write_file_atomically(const std::filesystem::path& path, std::string_view text);

}  // namespace loom::format
