#include "common/read_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/huge_pages.hpp"
#include "loom/error.hpp"

namespace loom {

namespace {

// Closes the descriptor on every path out, throws included.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string read_file(const std::filesystem::path& path) {
  const Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) {
    throw Error(ErrorCode::io, std::string("cannot open file: ") + std::strerror(errno), {.file = path.string()});
  }
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) {
    throw Error(ErrorCode::io, std::string("cannot stat file: ") + std::strerror(errno), {.file = path.string()});
  }
  // A directory opens fine and then fails every read; say what it is instead.
  if (S_ISDIR(st.st_mode)) throw Error(ErrorCode::io, "is a directory, not a file", {.file = path.string()});

  std::string text;
  // The size is a hint (files in /proc say 0, a file may grow): read until end of file.
  if (S_ISREG(st.st_mode) && st.st_size > 0) {
    text.reserve(static_cast<size_t>(st.st_size) + kReadFilePadding);
    advise_huge_pages(text.data(), text.capacity());  // a tokenizer.json is megabytes
  }
  char buffer[64 * 1024];
  for (;;) {
    const ssize_t n = ::read(f.fd, buffer, sizeof buffer);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(ErrorCode::io, std::string("read failed: ") + std::strerror(errno),
                  {.file = path.string(), .offset = static_cast<uint64_t>(text.size())});
    }
    text.append(buffer, static_cast<size_t>(n));
  }
  if (text.capacity() - text.size() < kReadFilePadding) text.reserve(text.size() + kReadFilePadding);  // it grew
  return text;
}

}  // namespace loom
