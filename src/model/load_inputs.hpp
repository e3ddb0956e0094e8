// Internal: what a load reads besides the tensors, and the checks before it: the source
// opened (a pack or any weight format), the expected files verified (size, sha256, a
// Hugging Face cache's blob names), config.json or GGUF metadata parsed into a
// ModelConfig, generation_config.json, the tokenizer beside the weights, the
// end-of-generation ids merged, and the byte-order check of the tensors the manifest
// uses. Used by the loader (model/loader.cpp); any thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "loom/config.hpp"
#include "loom/format.hpp"
#include "loom/generation_defaults.hpp"
#include "loom/load_report.hpp"
#include "loom/loader.hpp"
#include "loom/log.hpp"
#include "loom/manifest.hpp"
#include "loom/tokenizer.hpp"

namespace loom::load {

// The folder beside the weights: `path` itself, or the folder holding a single file.
std::filesystem::path model_dir(const std::filesystem::path& path);
std::unique_ptr<WeightSource> open_source(const std::filesystem::path& path, const LoadOptions& options);
// Throws Error(format) naming the file whose size or sha256 differs from what is expected;
// the files are hashed side by side on `pool`.
void verify_files(const WeightSource& source, const LoadOptions& options, ThreadPool& pool);
// GGUF metadata, a llama2.c header, or config.json beside the weights.
ModelConfig config_for(const std::filesystem::path& path, const WeightSource& source,
                       std::vector<std::string>* warnings = nullptr);
GenerationDefaults generation_for(const std::filesystem::path& path, const WeightSource& source,
                                  std::vector<std::string>& warnings);
// Appends the ids in `extra` that are in the vocabulary and not yet in `ids`.
void merge_eos(std::vector<int32_t>& ids, const std::vector<int32_t>& extra, int64_t vocab_size);
// Adds each warning once to the report and logs it.
void add_file_warnings(LoadReport& report, const std::vector<std::string>& warnings, const Logger& log);
// The model's tokenizer; null (with a note in the report) when there is none.
std::shared_ptr<const Tokenizer> tokenizer_for(const std::filesystem::path& path, const WeightSource& source,
                                               LoadReport& report);
// Samples each float tensor the manifest uses and warns about byte-swapped-looking data.
void warn_suspicious_byte_order(const WeightSource& source, const Manifest& manifest, LoadReport& report,
                                const Logger& log);

}  // namespace loom::load
