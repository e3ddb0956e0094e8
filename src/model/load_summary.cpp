#include "model/load_summary.hpp"

#include <algorithm>
#include <cstring>

#include "common/log_format.hpp"
#include "loom/error.hpp"
#include "loom/model.hpp"
#include "model/weight_slots.hpp"
#include "tensor/kernel_registry.hpp"
#include "tensor/packing.hpp"

namespace loom::load {

namespace {

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.nbytes() == b.nbytes() &&
         std::memcmp(a.raw_data(), b.raw_data(), static_cast<size_t>(a.nbytes())) == 0;
}

}  // namespace

void alias_tied(const Manifest& manifest, ModelConfig& config, ModelWeights& weights,
                std::vector<TensorLoadRecord>& records, LoadReport& report, const Logger& log) {
  // A tied slot (the output projection) aliases the storage of the slot it ties to (the
  // embedding): no copy, no second read. Walked from the slot table.
  for (size_t i = 0; i < manifest.entries().size(); ++i) {
    const ManifestEntry& e = manifest.entries()[i];
    const slots::WeightSlot& slot = *slots::find_slot(e.slot);
    if (slot.ties_to == slots::Slot::none || slot.per_layer) continue;
    const slots::WeightSlot& to = slots::slot(slot.ties_to);
    const std::string to_name(to.name);
    Tensor& mine = slots::tensor_of(weights, slot, 0);
    const Tensor& theirs = slots::tensor_of(weights, to, 0);
    TensorLoadRecord& rec = records[i];
    const bool tied_by_config = slots::tied_in(config, slot);
    const bool alias = e.tied || (tied_by_config && mine.defined() && same_bytes(mine, theirs));
    if (e.record != nullptr && tied_by_config && !alias) {
      ManifestProblem p{ProblemKind::tied_differs, e.internal_name, e.record->name, e.shape, e.shape,
                        "config ties " + e.internal_name + " to " + to_name + ", but '" + e.record->name +
                            "' differs from the embedding; using it as stored",
                        false};
      detail::log(log, LogLevel::warn, "{}", p.detail);
      report.warnings.push_back(std::move(p));
    }
    if (!alias) continue;
    if (!has_matrix_kernel(theirs.dtype())) {
      throw Error(ErrorCode::unsupported,
                  "the tied output projection needs a matrix kernel for " + std::string(dtype_name(theirs.dtype())),
                  {.tensor = to_name});
    }
    mine = theirs;
    const TensorLoadRecord& source = *std::find_if(
        records.begin(), records.end(), [&](const TensorLoadRecord& t) { return t.internal_name == to_name; });
    rec.external_name = source.external_name;
    rec.file = source.file;
    rec.offset = source.offset;
    rec.stored_dtype = source.stored_dtype;
    rec.dtype = theirs.dtype();
    rec.zero_copy = source.zero_copy;
    rec.stored_bytes = 0;
    rec.tied = true;
    report.tied.push_back(e.internal_name + " -> " + to_name);
  }
  if (config.tie_word_embeddings && report.tied.empty()) config.tie_word_embeddings = false;
}

void summarize(Plan& plan, const Manifest& manifest, const ModelConfig& config, const LoadOptions& options,
               int64_t transient_peak_bytes, LoadReport& report) {
  auto& jobs = plan.jobs;
  auto& records = plan.records;
  // records[i] belongs to manifest entry i, and each job points at its entry.
  for (auto& job : jobs) {
    records[static_cast<size_t>(job->entry - manifest.entries().data())].conversion = job->stats;
    report.conversion_totals += job->stats;
  }

  // Memory by category; tied storage counted once.
  for (const auto& rec : records) {
    if (rec.external_name.empty() && rec.file.empty()) continue;
    ++report.loaded_tensors;
    if (rec.tied) continue;
    const int64_t bytes = rec.packing != Packing::none ? packed_nbytes(rec.packing, rec.shape)
                                                       : dtype_bytes(rec.dtype, rec.shape.numel(), rec.shape.row_length());
    if (rec.packing != Packing::none) ++(rec.zero_copy ? report.stored_packed_tensors : report.repacked_tensors);
    if (rec.zero_copy) {
      report.memory.mapped_weight_bytes += bytes;
      ++report.zero_copy_tensors;
    } else {
      report.memory.owned_weight_bytes += bytes;
      ++report.converted_tensors;
    }
  }
  report.expected_tensors = static_cast<int64_t>(manifest.entries().size());
  report.tensors = std::move(records);
  report.memory.transient_peak_bytes = transient_peak_bytes;
  report.memory.kv_context = options.kv_context > 0 ? options.kv_context : std::min<int64_t>(config.max_positions, 4096);
  report.memory.kv_batch = options.kv_batch;
  report.memory.kv_dtype = options.kv_dtype;
  report.memory.kv_cache_bytes =
      kv_cache_bytes_for(config, report.memory.kv_context, options.kv_dtype) * options.kv_batch;
}

}  // namespace loom::load
