#include "model/load_plan.hpp"

#include <algorithm>

#include "loom/error.hpp"
#include "model/weight_slots.hpp"
#include "tensor/byte_order.hpp"
#include "tensor/kernel_registry.hpp"
#include "tensor/packing.hpp"

namespace loom::load {

namespace {

DType target_dtype_for(const ManifestEntry& e, const TensorRecord& r, const LoadOptions& options,
                       std::vector<std::string>& notes) {
  if (e.is_vector) return DType::f32;
  DType target = options.target_dtype.value_or(r.dtype);
  if (e.transposed && is_quantized(target)) target = DType::f32;
  // Embedding rows are widened one at a time (any convertible dtype); matrices need a
  // kernel that reads them.
  const bool usable = slots::find_slot(e.slot)->role == slots::Role::embedding ? can_convert(target, DType::f32)
                                                                               : has_matrix_kernel(target);
  if (!usable) {
    notes.push_back(e.internal_name + ": stored as " + std::string(dtype_name(r.dtype)) +
                    ", which has no kernel; widened to f32");
    target = DType::f32;
  }
  if (!can_convert(r.dtype, target)) {
    throw Error(ErrorCode::unsupported,
                "cannot convert " + std::string(dtype_name(r.dtype)) + " to " +
                    std::string(dtype_name(target)),
                {.tensor = r.name});
  }
  return target;
}

std::string layout_change(const ManifestEntry& e, const TensorRecord& r, std::string_view order_source) {
  std::string out;
  if (e.transposed) out = "transposed from " + r.shape.to_string();
  if (e.split && e.runs == 1) {
    if (!out.empty()) out += ", ";
    out += "rows " + std::to_string(e.row_begin) + ".." + std::to_string(e.row_begin + e.shape[0] - 1) +
           " of fused " + r.shape.to_string();
  } else if (e.split) {
    if (!out.empty()) out += ", ";
    out += std::to_string(e.runs) + " runs of " + std::to_string(e.run_rows) + " rows from row " +
           std::to_string(e.row_begin) + ", every " + std::to_string(e.run_stride) + ", of fused " +
           r.shape.to_string();
  }
  if (e.add_one) {
    if (!out.empty()) out += ", ";
    out += "stored w, loaded as 1 + w";
  }
  if (e.rope_interleaved) {
    if (!out.empty()) out += ", ";
    out += "rows in " + std::string(order_source) + " interleaved-RoPE order (kept; RoPE rotates adjacent pairs)";
  }
  return out;
}

}  // namespace

std::string_view rope_order_source(FormatKind format) noexcept {
  return format == FormatKind::llama2c ? "Meta's (llama2.c)" : "GGUF";
}

Plan plan_load(const Manifest& manifest, const WeightSource& source, const LoadOptions& options,
               ModelWeights& weights, std::vector<std::string>& notes) {
  Plan plan;
  auto& jobs = plan.jobs;
  auto& records = plan.records;
  records.resize(manifest.entries().size());
  uint64_t& total_bytes = plan.total_bytes;
  uint64_t& zero_copy_bytes = plan.zero_copy_bytes;
  const bool little_endian = host_is_little_endian();

  // Plan: zero-copy views now, conversion jobs for the rest (destinations preallocated).
  for (size_t i = 0; i < manifest.entries().size(); ++i) {
    const ManifestEntry& e = manifest.entries()[i];
    TensorLoadRecord& rec = records[i];
    rec.internal_name = e.internal_name;
    rec.shape = e.shape;
    if (e.record == nullptr) continue;  // tied (filled below) or not required
    const TensorRecord& r = *e.record;
    const SourceFile& file = source.file_of(r);
    rec.external_name = r.name;
    rec.file = file.path;
    rec.offset = r.offset;
    rec.stored_dtype = r.dtype;
    rec.layout_change = layout_change(e, r, rope_order_source(source.format()));
    const DType target = target_dtype_for(e, r, options, notes);
    rec.dtype = target;
    if (r.packing != Packing::none) {
      // A pack's kernel-native layout: taken as stored (a view where mapped, read whole
      // otherwise); the layout step after streaming (load_repack.hpp) keeps it where
      // this CPU's kernels read it and `target` is its dtype, else unpacks it to rows.
      // A tied output's table is a projection matrix too (the pack writer packs it).
      const slots::WeightSlot* slot = slots::find_slot(e.slot);
      const bool tied_table = std::any_of(manifest.entries().begin(), manifest.entries().end(), [&](const ManifestEntry& o) {
        const slots::WeightSlot* tying = slots::find_slot(o.slot);
        return o.tied && tying != nullptr && tying->ties_to == slot->id;
      });
      if ((slot->role != slots::Role::matrix && !tied_table) || e.transposed || e.split || e.add_one) {
        throw Error(ErrorCode::format, "a packed tensor (" + std::string(packing_name(r.packing)) +
                                           ") in a slot that does not read it as one whole projection matrix",
                    {.file = file.path, .tensor = r.name});
      }
      rec.stored_packing = rec.packing = r.packing;
      rec.stored_bytes = r.nbytes;
      total_bytes += rec.stored_bytes;
      slots::tensor_of(weights, *slot, e.layer < 0 ? 0 : e.layer) = source.load(r);
      rec.zero_copy = file.file->is_mapped();
      zero_copy_bytes += rec.zero_copy ? rec.stored_bytes : 0;
      continue;
    }
    const int64_t stored_cols = e.transposed ? r.shape[1] : e.shape.row_length();
    // Stored rows this entry reads: all rows of a transposed tensor (each holds one
    // column of the output), else its own rows (elements, for 1-D tensors).
    const int64_t entry_stored_rows = e.transposed ? r.shape[0] : e.shape[0];
    const int64_t row_bytes = e.shape.rank() == 1 && !e.transposed
                                  ? dtype_size(r.dtype)
                                  : dtype_bytes(r.dtype, stored_cols, stored_cols);
    rec.stored_bytes = static_cast<uint64_t>(row_bytes * entry_stored_rows);
    total_bytes += rec.stored_bytes;
    const bool zero_copy = !e.transposed && e.runs == 1 && !e.add_one && r.is_contiguous() &&
                           target == r.dtype && file.file->is_mapped() && little_endian;
    const slots::WeightSlot* slot = slots::find_slot(e.slot);
    Tensor& dest = slots::tensor_of(weights, *slot, e.layer < 0 ? 0 : e.layer);
    if (zero_copy) {
      Tensor t = source.load(r);
      if (e.split) t = t.slice(0, e.row_begin, e.shape[0]);
      dest = t.reshape(e.shape);
      rec.zero_copy = true;
      rec.offset = r.offset + static_cast<uint64_t>(e.row_begin * row_bytes);
      zero_copy_bytes += rec.stored_bytes;
      continue;
    }
    auto job = std::make_unique<Job>();
    job->entry = &e;
    job->record = &r;
    job->target = target;
    job->dest = Tensor::empty(e.shape, target);
    job->stored_cols = e.shape.rank() == 1 && !e.transposed ? 1 : stored_cols;
    job->stored_row_bytes = row_bytes;
    job->stored_rows = entry_stored_rows;
    dest = job->dest;
    jobs.push_back(std::move(job));
  }
  return plan;
}

}  // namespace loom::load
