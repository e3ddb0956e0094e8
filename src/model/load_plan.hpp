// Internal: the plan of a load. For each manifest entry: the dtype it gets in memory
// (the stored one when a kernel reads it, else f32), its record in the load report, and
// either a zero-copy view of the mapped file (contiguous, one row run, no transform, the
// dtype kept) or a conversion job with its destination tensor allocated. Nothing is read
// yet but the views' mappings; load_stream.hpp executes the jobs.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "loom/convert.hpp"
#include "loom/format.hpp"
#include "loom/load_report.hpp"
#include "loom/loader.hpp"
#include "loom/manifest.hpp"
#include "loom/weights.hpp"

namespace loom::load {

// One slot whose tensor is produced by conversion (not a zero-copy view).
struct Job {
  const ManifestEntry* entry = nullptr;
  const TensorRecord* record = nullptr;
  Tensor dest;
  DType target = DType::f32;
  ConvertStats stats;
  std::mutex stats_mutex;        // workers add their chunks' stats
  int64_t stored_row_bytes = 0;  // bytes of one stored row
  int64_t stored_cols = 0;       // elements of one stored row
  int64_t stored_rows = 0;
};

struct Plan {
  std::vector<std::unique_ptr<Job>> jobs;
  std::vector<TensorLoadRecord> records;  // one per manifest entry, in its order
  uint64_t total_bytes = 0;               // stored bytes of every entry with a record
  uint64_t zero_copy_bytes = 0;
};

// Fills `weights` with the zero-copy views and the jobs' (not yet written) destinations.
// Notes (dtypes widened for want of a kernel) go to `notes`.
Plan plan_load(const Manifest& manifest, const WeightSource& source, const LoadOptions& options,
               ModelWeights& weights, std::vector<std::string>& notes);

// Whose row order interleaved q/k rows are in, for the load report.
std::string_view rope_order_source(FormatKind format) noexcept;

}  // namespace loom::load
