// Helpers shared by the test suites: temporary directories, the reference-data folder,
// and small file utilities.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "loom/cpu.hpp"
#include "loom/loader.hpp"

namespace loom::test {

// A fresh directory under the system temp dir, removed (recursively) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// LOOM_REFERENCE_DIR, or <source>/../shared/reference; nullopt (with the reason in
// `why`) when the folder is absent.
std::optional<std::filesystem::path> reference_dir(std::string* why = nullptr);

std::vector<uint8_t> read_file_bytes(const std::filesystem::path& path);
void write_file_bytes(const std::filesystem::path& path, const std::vector<uint8_t>& bytes);
std::string read_file_text(const std::filesystem::path& path);

// The same floats, bit for bit (the batch-invariance tests compare logits this way).
bool same_bits(std::span<const float> a, std::span<const float> b);
// The greedy pick: the index of the largest logit (the first of equal ones).
int32_t greedy_token(std::span<const float> logits);

// Caps the kernel family (LOOM_ISA's effect) for one scope, then lifts the cap again.
struct IsaScope {
  explicit IsaScope(Isa isa) { set_isa_cap(isa); }
  ~IsaScope() { set_isa_cap(Isa::avx512); }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;
};

// Load options with the logger silenced: tests assert on results, not on log lines.
LoadOptions quiet_load_options();

// The bytes of `path` this process's mappings hold resident (the Rss lines of
// /proc/self/smaps under the mappings named `path`), or -1 where smaps cannot be read.
int64_t mapped_resident_bytes(const std::filesystem::path& path);

}  // namespace loom::test

// Returns from the current test with a printed reason when the reference folder (or a
// file in it) is missing: the tests that need independent data skip rather than fail.
#define LOOM_REQUIRE_REFERENCE(var)                                    \
  std::string loom_ref_why_##var;                                      \
  auto var##_opt = ::loom::test::reference_dir(&loom_ref_why_##var);   \
  if (!var##_opt) {                                                    \
    WARN("SKIPPED: " << loom_ref_why_##var);                           \
    return;                                                            \
  }                                                                    \
  const std::filesystem::path var = *var##_opt
