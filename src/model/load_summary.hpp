// Internal: the report half of a load, after the tensors are in place. Tied slots are
// aliased to what they tie to (one storage, no copy), with a warning when the config
// ties two tensors the file stores differently; then each record gets its conversion
// statistics and the report its totals and memory by category (tied storage once).
#pragma once

#include <cstdint>
#include <vector>

#include "loom/config.hpp"
#include "loom/load_report.hpp"
#include "loom/loader.hpp"
#include "loom/log.hpp"
#include "loom/manifest.hpp"
#include "loom/weights.hpp"
#include "model/load_plan.hpp"

namespace loom::load {

// Aliases tied outputs; clears config.tie_word_embeddings when nothing was tied. Throws
// Error(unsupported) when the shared storage has no matrix kernel.
void alias_tied(const Manifest& manifest, ModelConfig& config, ModelWeights& weights,
                std::vector<TensorLoadRecord>& records, LoadReport& report, const Logger& log);

// Moves the records into the report with their statistics, counts, memory and the KV
// cache the load options describe.
void summarize(Plan& plan, const Manifest& manifest, const ModelConfig& config, const LoadOptions& options,
               int64_t transient_peak_bytes, LoadReport& report);

}  // namespace loom::load
