#include "support/test_support.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <stdexcept>

namespace loom::test {

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  std::random_device rd;
  const auto base = std::filesystem::temp_directory_path();
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto candidate = base / ("loom-test-" + std::to_string(::getpid()) + "-" +
                             std::to_string(counter++) + "-" + std::to_string(rd() % 100000));
    if (std::filesystem::create_directory(candidate)) {
      path_ = candidate;
      return;
    }
  }
  throw std::runtime_error("cannot create a temporary directory");
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::optional<std::filesystem::path> reference_dir(std::string* why) {
  std::filesystem::path dir;
  if (const char* env = std::getenv("LOOM_REFERENCE_DIR"); env != nullptr && *env) {
    dir = env;
  } else {
    dir = std::filesystem::path(LOOM_SOURCE_DIR) / ".." / "shared" / "reference";
  }
  if (!std::filesystem::is_directory(dir)) {
    if (why) *why = "reference data folder not found: " + dir.string() +
                    " (set LOOM_REFERENCE_DIR)";
    return std::nullopt;
  }
  return std::filesystem::canonical(dir);
}

std::vector<uint8_t> read_file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file_bytes(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

std::string read_file_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

LoadOptions quiet_load_options() {
  LoadOptions o;
  o.logger = Logger::silent();
  return o;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

int32_t greedy_token(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

int64_t mapped_resident_bytes(const std::filesystem::path& path) {
  std::ifstream smaps("/proc/self/smaps");
  if (!smaps) return -1;
  const std::string name = std::filesystem::canonical(path).string();
  int64_t kib = 0;
  bool ours = false;
  for (std::string line; std::getline(smaps, line);) {
    // A mapping's header ("start-end perms offset dev inode path") or one of its fields
    // ("Rss:   123 kB").
    const size_t space = line.find(' ');
    const bool header = space != std::string::npos && line.find('-') < space && line.find(':') > space &&
                        std::isxdigit(static_cast<unsigned char>(line[0]));
    if (header) {
      ours = line.size() >= name.size() && line.compare(line.size() - name.size(), name.size(), name) == 0;
    } else if (ours && line.rfind("Rss:", 0) == 0) {
      kib += std::stoll(line.substr(4));
    }
  }
  return kib * 1024;
}

}  // namespace loom::test
