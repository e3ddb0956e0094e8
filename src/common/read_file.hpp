// Internal: a whole (small) file read into memory — the side files a model comes with
// (config.json, tokenizer.json, tokenizer.model, generation_config.json, a pack's
// index.json, a git ref). Weight files are never read this way: they are mapped
// (loom/mapped_file.hpp).
//
// The one such reader in the library, so every caller fails the same way: a
// loom::Error(io) naming the file and saying why ("cannot open file: No such file or
// directory", "is a directory", "read failed: ..."), never an empty string. May be
// called from any thread.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>

namespace loom {

// The returned string's capacity holds at least this many bytes past its end, so a JSON
// parser that reads ahead (simdjson needs 64 readable bytes) can parse it where it is
// instead of copying it (format::LenientJsonOptions::padded_input).
inline constexpr size_t kReadFilePadding = 64;

std::string read_file(const std::filesystem::path& path);

}  // namespace loom
