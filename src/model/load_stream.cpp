#include "model/load_stream.hpp"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "loom/convert.hpp"
#include "loom/error.hpp"

namespace loom::load {

namespace {

struct Chunk {
  Job* job = nullptr;
  int64_t first_row = 0;  // stored rows [first_row, first_row + n_rows)
  int64_t n_rows = 0;
  int64_t dest_row = 0;   // where they go in the destination (not transposed)
  std::byte* buffer = nullptr;
};

// Converts stored rows of a chunk into the destination tensor.
void convert_chunk(Chunk& c) {
  Job& j = *c.job;
  const ManifestEntry& e = *j.entry;
  ConvertStats stats;
  const auto target_row_bytes = dtype_bytes(j.target, e.shape.row_length(), e.shape.row_length());
  auto* dest = static_cast<std::byte*>(j.dest.mutable_raw_data());
  if (!e.transposed) {
    // Stored rows map 1:1 onto destination rows (a fused tensor's runs each have their
    // own destination offset).
    const int64_t dest_row = c.dest_row;
    if (e.is_vector || e.shape.rank() == 1) {
      // A 1-D tensor (or a slice of a fused bias) moves as one row of elements.
      const int64_t n = c.n_rows;
      stats += convert(j.record->dtype, c.buffer, j.target,
                       dest + dest_row * dtype_size(j.target), static_cast<size_t>(n));
      if (e.add_one) {
        // Vectors are f32 in memory: the stored w becomes the 1 + w the norm scales by.
        float* values = reinterpret_cast<float*>(dest) + dest_row;
        for (int64_t i = 0; i < n; ++i) values[i] += 1.0f;
      }
    } else {
      stats += convert(j.record->dtype, c.buffer, j.target, dest + dest_row * target_row_bytes,
                       static_cast<size_t>(c.n_rows * j.stored_cols));
    }
  } else {
    // Stored [in, out_total]: stored row i holds column i of every output row. Widen the
    // chunk, then write each destination row's segment [first_row, first_row + n_rows).
    const int64_t out_rows = e.shape[0];
    std::vector<float> widened(static_cast<size_t>(c.n_rows * j.stored_cols));
    convert(j.record->dtype, c.buffer, DType::f32, widened.data(), widened.size());
    std::vector<float> segment(static_cast<size_t>(c.n_rows));
    const auto elem = dtype_size(j.target);
    for (int64_t r = 0; r < out_rows; ++r) {
      for (int64_t i = 0; i < c.n_rows; ++i) {
        segment[static_cast<size_t>(i)] = widened[static_cast<size_t>(i * j.stored_cols + e.row_begin + r)];
      }
      stats += convert(DType::f32, segment.data(), j.target,
                       dest + r * target_row_bytes + c.first_row * elem, segment.size());
    }
  }
  std::lock_guard lock(j.stats_mutex);
  j.stats += stats;
}

// Staged chunks between the reading thread and the converters: at most `depth` staging
// buffers exist at once; a converter hands its buffer back when done. The first error
// (a converter's or the reader's) stops everyone; close() ends the converters' loops
// once the queue is empty.
class ChunkQueue {
 public:
  ChunkQueue(int depth, size_t chunk_bytes) : depth_(std::max(1, depth)), chunk_bytes_(chunk_bytes) {}

  size_t chunk_bytes() const { return chunk_bytes_; }

  // Blocks until a staging buffer of at least `bytes` is free; rethrows a converter's error.
  std::byte* acquire(size_t bytes) {
    std::unique_lock lock(mutex_);
    space_.wait(lock, [&] { return error_ || !free_.empty() || allocated_ < depth_; });
    if (error_) std::rethrow_exception(error_);
    if (!free_.empty()) {
      auto* b = free_.back();
      free_.pop_back();
      if (capacity_[b] >= bytes) return b;
      release_buffer_locked(b);
    }
    auto owned = Storage::allocate(std::max(bytes, chunk_bytes_));
    std::byte* p = owned->mutable_data();
    capacity_[p] = owned->size();
    storages_.push_back(std::move(owned));
    ++allocated_;
    staged_bytes_ += static_cast<int64_t>(capacity_[p]);
    peak_bytes_ = std::max(peak_bytes_, staged_bytes_);
    return p;
  }

  void push(Chunk c) {
    std::lock_guard lock(mutex_);
    queue_.push_back(c);
    ready_.notify_one();
  }

  // A converter's loop: converts chunks until the queue is closed and empty. After an
  // error it only hands buffers back (the load fails anyway).
  void convert_until_closed() {
    for (;;) {
      Chunk c;
      bool failed = false;
      {
        std::unique_lock lock(mutex_);
        ready_.wait(lock, [&] { return closed_ || !queue_.empty(); });
        if (queue_.empty()) return;
        c = queue_.front();
        queue_.pop_front();
        failed = static_cast<bool>(error_);
      }
      try {
        if (!failed) convert_chunk(c);
      } catch (...) {
        fail(std::current_exception());
      }
      std::lock_guard lock(mutex_);
      free_.push_back(c.buffer);
      space_.notify_one();
    }
  }

  // A buffer converted on the reading thread (a pool of one thread) goes back at once.
  void release(std::byte* buffer) {
    std::lock_guard lock(mutex_);
    free_.push_back(buffer);
    space_.notify_one();
  }

  void fail(std::exception_ptr e) {
    std::lock_guard lock(mutex_);
    if (!error_) error_ = std::move(e);
    space_.notify_all();
  }

  void close() {
    std::lock_guard lock(mutex_);
    closed_ = true;
    ready_.notify_all();
  }

  void rethrow() {
    std::lock_guard lock(mutex_);
    if (error_) std::rethrow_exception(error_);
  }

  int64_t peak_bytes() const { return peak_bytes_; }

 private:
  void release_buffer_locked(std::byte* b) {
    staged_bytes_ -= static_cast<int64_t>(capacity_[b]);
    capacity_.erase(b);
    --allocated_;
    std::erase_if(storages_, [&](const std::shared_ptr<Storage>& s) { return s->data() == b; });
  }

  const int depth_;
  const size_t chunk_bytes_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::condition_variable space_;
  std::deque<Chunk> queue_;
  std::vector<std::byte*> free_;
  std::vector<std::shared_ptr<Storage>> storages_;
  std::map<const std::byte*, size_t> capacity_;
  int allocated_ = 0;
  int64_t staged_bytes_ = 0;
  int64_t peak_bytes_ = 0;
  bool closed_ = false;
  std::exception_ptr error_;
};

}  // namespace

StreamResult stream_conversions(Plan& plan, const WeightSource& source, const LoadOptions& options, ThreadPool& pool,
                                const StreamProgress& progress) {
  StreamResult result;
  ChunkQueue queue(options.queue_depth, options.chunk_bytes);
  const int threads = pool.size();
  const bool inline_conversion = threads == 1;
  uint64_t submitted = plan.zero_copy_bytes;
  auto report = [&](std::string_view tensor) {
    if (progress && !progress(submitted, tensor)) result.cancelled = true;
  };

  // The reading thread's part: every job's row runs, chunk by chunk.
  auto read_all = [&] {
    report(plan.jobs.empty() ? "" : plan.jobs.front()->entry->internal_name);
    for (auto& job : plan.jobs) {
      if (result.cancelled) break;
      const ManifestEntry& e = *job->entry;
      const TensorRecord& r = *job->record;
      // The stored row runs this entry reads: one run (all rows of a transposed tensor,
      // or its own rows), or one per head / KV group of a fused q|k|v tensor.
      const int64_t runs = e.transposed ? 1 : e.runs;
      const int64_t run_rows = e.transposed || e.runs == 1 ? job->stored_rows : e.run_rows;
      std::optional<Tensor> gathered;
      if (!r.is_contiguous()) gathered = source.load(r);  // a strided PyTorch view: gather it whole
      for (int64_t run = 0; run < runs && !result.cancelled; ++run) {
        const int64_t first = e.transposed ? 0 : e.row_begin + run * e.run_stride;
        const int64_t dest_first = run * run_rows;
        if (gathered) {
          const auto* base = static_cast<const std::byte*>(gathered->raw_data());
          std::vector<std::byte> copy(base + first * job->stored_row_bytes,
                                      base + (first + run_rows) * job->stored_row_bytes);
          Chunk c{job.get(), first, run_rows, dest_first, copy.data()};
          convert_chunk(c);
          submitted += static_cast<uint64_t>(run_rows * job->stored_row_bytes);
          report(e.internal_name);
          continue;
        }
        const int64_t rows_per_chunk = std::max<int64_t>(
            1, static_cast<int64_t>(queue.chunk_bytes()) / std::max<int64_t>(1, job->stored_row_bytes));
        for (int64_t row = first; row < first + run_rows && !result.cancelled; row += rows_per_chunk) {
          const int64_t n = std::min(rows_per_chunk, first + run_rows - row);
          const auto bytes = static_cast<size_t>(n * job->stored_row_bytes);
          std::byte* buffer = queue.acquire(bytes);
          const auto offset = static_cast<uint64_t>(row * job->stored_row_bytes);
          source.read(r, offset, std::span<std::byte>(buffer, bytes));
          // The bytes are staged now: let go of the mapped pages, so that converting a
          // model never holds the source and the converted copy in memory at once (the
          // pages stay in the page cache; a later access simply faults them back in).
          const SourceFile& file = source.file_of(r);
          if (file.file->is_mapped()) file.file->advise(r.offset + offset, bytes, AccessHint::dont_need);
          const Chunk chunk{job.get(), row, n, dest_first + (row - first), buffer};
          if (inline_conversion) {
            Chunk c = chunk;
            convert_chunk(c);
            queue.release(buffer);
          } else {
            queue.push(chunk);
          }
          submitted += bytes;
          report(e.internal_name);
        }
      }
    }
  };

  // One share per pool thread: thread 0 (the caller) reads, then converts what is left
  // with the others, so no thread idles while a converter is still busy.
  pool.parallel_for(threads, 1, [&](int64_t begin, int64_t, int) {
    if (begin == 0) {
      try {
        read_all();
      } catch (...) {
        queue.fail(std::current_exception());
      }
      queue.close();
    }
    queue.convert_until_closed();
  });
  queue.rethrow();
  result.transient_peak_bytes = queue.peak_bytes();
  return result;
}

}  // namespace loom::load
