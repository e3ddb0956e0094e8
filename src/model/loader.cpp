#include "loom/loader.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <new>
#include <system_error>
#include <thread>

#include "common/log_format.hpp"
#include "common/read_file.hpp"
#include "common/sha256.hpp"
#include "loom/convert.hpp"
#include "loom/error.hpp"
#include "loom/tokenizer.hpp"
#include "loom/pack.hpp"
#include "model/config_parse.hpp"
#include "model/generation_config.hpp"
#include "model/pack_internal.hpp"
#include "model/weight_slots.hpp"
#include "tensor/byte_order.hpp"
#include "tensor/kernel_registry.hpp"
#include "tokenizer/llama2c_vocab.hpp"

namespace loom {

namespace {

using Clock = std::chrono::steady_clock;

int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
}

std::filesystem::path model_dir(const std::filesystem::path& path) {
  return std::filesystem::is_directory(path) ? path : path.parent_path();
}

ModelConfig config_for(const std::filesystem::path& path, const WeightSource& source,
                       std::vector<std::string>* warnings = nullptr) {
  if (source.format() == FormatKind::gguf) return config_parse::from_gguf(source);
  if (source.format() == FormatKind::llama2c) return config_parse::from_llama2c(source);
  const auto config_path = model_dir(path) / "config.json";
  if (!std::filesystem::exists(config_path)) {
    throw Error(ErrorCode::format,
                "no config.json beside the weights: loom reads the architecture and shapes of " +
                    std::string(format_kind_name(source.format())) + " models from it",
                {.file = config_path.string()});
  }
  return config_parse::from_hf_json(read_file(config_path), config_path.string(), warnings);
}

// generation_config.json beside the weights (Hugging Face layouts and packs; a GGUF
// carries no such file), else loom's defaults.
GenerationDefaults generation_for(const std::filesystem::path& path, const WeightSource& source,
                                  std::vector<std::string>& warnings) {
  if (source.format() == FormatKind::gguf) return {};
  const auto file = model_dir(path) / "generation_config.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) return {};
  return generation_config::parse(read_file(file), file.string(), &warnings);
}

// Appends the ids in `extra` that are in the vocabulary and not yet in `ids`.
void merge_eos(std::vector<int32_t>& ids, const std::vector<int32_t>& extra, int64_t vocab_size) {
  for (int32_t id : extra) {
    if (id >= 0 && id < vocab_size && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
}

void add_file_warnings(LoadReport& report, const std::vector<std::string>& warnings, const Logger& log) {
  for (const auto& w : warnings) {
    // The SentencePiece reader reads config.json again: one line per file is enough.
    if (std::find(report.file_warnings.begin(), report.file_warnings.end(), w) != report.file_warnings.end()) continue;
    report.file_warnings.push_back(w);
    detail::log(log, LogLevel::warn, "{}", w);
  }
}

// ---- file verification ----

void verify_files(const WeightSource& source, const LoadOptions& options) {
  for (const auto& f : source.files()) {
    FileExpectation want;
    if (auto it = options.expected_files.find(f.path); it != options.expected_files.end()) want = it->second;
    if (want.sha256.empty() && options.verify_hf_cache_blobs) {
      // A Hugging Face cache snapshot links each file to blobs/<sha256 of its content>
      // (for files stored with git LFS, which weight files are).
      std::error_code ec;
      if (std::filesystem::is_symlink(f.path, ec)) {
        const auto target = std::filesystem::canonical(f.path, ec);
        const std::string blob = target.filename().string();
        if (!ec && target.parent_path().filename() == "blobs" && blob.size() == 64 &&
            blob.find_first_not_of("0123456789abcdef") == std::string::npos) {
          want.sha256 = blob;
        }
      }
    }
    if (want.size && *want.size != f.size) {
      throw Error(ErrorCode::format,
                  "file is " + std::to_string(f.size) + " bytes, expected " + std::to_string(*want.size),
                  {.file = f.path});
    }
    if (!want.sha256.empty()) {
      const std::string got = sha256_file(f.path);
      if (got != want.sha256) {
        throw Error(ErrorCode::format, "sha256 is " + got + ", expected " + want.sha256, {.file = f.path});
      }
    }
  }
}

// ---- the conversion pipeline ----

// One slot whose tensor is produced by conversion (not a zero-copy view).
struct Job {
  const ManifestEntry* entry = nullptr;
  const TensorRecord* record = nullptr;
  Tensor dest;
  DType target = DType::f32;
  ConvertStats stats;
  std::mutex stats_mutex;
  int64_t stored_row_bytes = 0;  // bytes of one stored row
  int64_t stored_cols = 0;       // elements of one stored row
  int64_t stored_rows = 0;
};

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

class Pipeline {
 public:
  Pipeline(int workers, int depth, size_t chunk_bytes) : depth_(std::max(1, depth)), chunk_bytes_(chunk_bytes) {
    // A thread that cannot start (no memory for its stack under an address-space limit)
    // must not leave the ones already started joinable: the destructor does not run for
    // a half-built object, and a joinable std::thread destroyed would terminate.
    try {
      for (int i = 0; i < std::max(1, workers); ++i) threads_.emplace_back([this] { work(); });
    } catch (const std::system_error& e) {
      finish_noexcept();
      throw Error(ErrorCode::out_of_memory, std::string("cannot start a conversion worker thread: ") + e.what());
    }
  }
  ~Pipeline() { finish_noexcept(); }

  size_t chunk_bytes() const { return chunk_bytes_; }

  // Blocks until a staging buffer of at least `bytes` is free.
  std::byte* acquire(size_t bytes) {
    std::unique_lock lock(mutex_);
    space_.wait(lock, [&] { return error_ || !free_.empty() || allocated_ < depth_; });
    rethrow_locked();
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

  // Waits for every queued chunk, stops the workers, rethrows a worker's error.
  void finish() {
    finish_noexcept();
    std::lock_guard lock(mutex_);
    rethrow_locked();
  }

  int64_t peak_bytes() const { return peak_bytes_; }
  int64_t done_rows_bytes() const { return done_bytes_.load(); }

 private:
  void work() {
    for (;;) {
      Chunk c;
      {
        std::unique_lock lock(mutex_);
        ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        c = queue_.front();
        queue_.pop_front();
      }
      bool failed = false;
      {
        std::lock_guard lock(mutex_);
        failed = static_cast<bool>(error_);
      }
      try {
        if (!failed) convert_chunk(c);
      } catch (...) {
        std::lock_guard lock(mutex_);
        if (!error_) error_ = std::current_exception();
      }
      std::lock_guard lock(mutex_);
      done_bytes_ += c.n_rows * c.job->stored_row_bytes;
      free_.push_back(c.buffer);
      space_.notify_one();
    }
  }

  void finish_noexcept() {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      stopping_ = true;
    }
    ready_.notify_all();
    for (auto& t : threads_) t.join();
  }

  void rethrow_locked() {
    if (error_) std::rethrow_exception(error_);
  }

  void release_buffer_locked(std::byte* b) {
    staged_bytes_ -= static_cast<int64_t>(capacity_[b]);
    capacity_.erase(b);
    --allocated_;
    std::erase_if(storages_, [&](const std::shared_ptr<Storage>& s) { return s->data() == b; });
  }

  const int depth_;
  const size_t chunk_bytes_;
  std::vector<std::thread> threads_;
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
  std::atomic<int64_t> done_bytes_{0};
  bool stopping_ = false;
  std::exception_ptr error_;
};

DType target_dtype_for(const ManifestEntry& e, const TensorRecord& r, const LoadOptions& options,
                       std::vector<std::string>& notes) {
  if (e.is_vector) return DType::f32;
  DType target = options.target_dtype.value_or(r.dtype);
  if (e.transposed && is_quantized(target)) target = DType::f32;
  const bool usable = e.slot == "token_embd" || e.slot == "position_embd"
                          ? can_convert(target, DType::f32)
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

// Whose row order interleaved q/k rows are in, for the load report.
std::string_view rope_order_source(FormatKind format) noexcept {
  return format == FormatKind::llama2c ? "Meta's (llama2.c)" : "GGUF";
}

// The model's tokenizer: GGUF metadata, a llama2.c tokenizer.bin, or tokenizer.json (a pack may carry a
// tokenizer.gguf) beside the weights; null when there is none.
std::shared_ptr<const Tokenizer> tokenizer_for(const std::filesystem::path& path, const WeightSource& source,
                                               LoadReport& report) {
  if (source.format() == FormatKind::gguf) {
    if (!source.metadata().contains("tokenizer.ggml.model")) return nullptr;
    return Tokenizer::from_gguf_metadata(source.metadata(), source.root());
  }
  if (source.format() == FormatKind::llama2c) {
    std::string note;
    const auto tok = tok::find_llama2c_tokenizer(path, note);
    if (tok.empty()) report.notes.push_back(note);
    return tok.empty() ? nullptr : Tokenizer::from_llama2c(tok);
  }
  const auto dir = model_dir(path);
  if (std::filesystem::exists(dir / "tokenizer.json") ||
      (source.format() == FormatKind::pack && std::filesystem::exists(dir / "tokenizer.gguf"))) {
    return Tokenizer::load(dir);
  }
  if (std::filesystem::exists(dir / "tokenizer.model")) return Tokenizer::from_sentencepiece_model(dir);
  report.notes.push_back("no tokenizer beside the weights");
  return nullptr;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.nbytes() == b.nbytes() &&
         std::memcmp(a.raw_data(), b.raw_data(), static_cast<size_t>(a.nbytes())) == 0;
}

}  // namespace

std::string sha256_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::io, "cannot read", {.file = path.string()});
  Sha256 h;
  std::vector<char> buffer(size_t{1} << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    h.update(buffer.data(), static_cast<size_t>(in.gcount()));
  }
  return h.finish_hex();
}

namespace {
std::unique_ptr<WeightSource> open_source(const std::filesystem::path& path, const LoadOptions& options) {
  const OpenOptions open{.io_mode = options.io_mode, .fs_magic_override = options.fs_magic_override};
  if (is_pack(path)) return pack_detail::open_pack(path, open);
  return open_weights(path, open);
}
}  // namespace

ModelConfig load_config(const std::filesystem::path& path, const LoadOptions& options) {
  return config_for(path, *open_source(path, options));
}

namespace {

// "Detect suspicious data and warn": each float tensor the manifest uses, read in a
// bounded sample (at most kByteOrderSampleValues values, so a zero-copy load touches
// only a few pages of each), is checked for byte-swapped values. A warning, not an
// error: the values are used as stored. Strided records (rare PyTorch views) are skipped.
void warn_suspicious_byte_order(const WeightSource& source, const Manifest& manifest, LoadReport& report,
                                const Logger& log) {
  std::map<const TensorRecord*, std::string> users;  // record -> internal names, in manifest order
  std::vector<const TensorRecord*> order;
  for (const ManifestEntry& e : manifest.entries()) {
    if (e.record == nullptr) continue;
    auto [it, fresh] = users.try_emplace(e.record, e.internal_name);
    if (fresh) {
      order.push_back(e.record);
    } else {
      it->second += "+" + e.internal_name;
    }
  }
  std::vector<std::byte> sample;
  for (const TensorRecord* r : order) {
    if (!r->is_contiguous() || !byte_order_checked(r->dtype)) continue;
    const auto esize = static_cast<uint64_t>(dtype_size(r->dtype));
    sample.clear();
    for (const ByteRun& run : byte_order_sample_runs(r->nbytes, esize)) {
      const size_t at = sample.size();
      sample.resize(at + run.size);
      source.read(*r, run.offset, std::span<std::byte>(sample.data() + at, run.size));
    }
    const ByteOrderCheck c = check_byte_order(sample, r->dtype);
    if (!c.suspicious) continue;
    const auto pct = [&](int64_t k) { return 100 * k / c.values; };
    ManifestProblem p{ProblemKind::suspicious_data, users[r], r->name, {}, r->shape,
                      "tensor '" + r->name + "' (" + std::string(dtype_name(r->dtype)) + ", " +
                          source.file_of(*r).path + ") looks byte-swapped: " + std::to_string(pct(c.implausible)) +
                          "% of " + std::to_string(c.values) + " sampled nonzero values are " + std::string(c.band) +
                          ", " + std::to_string(pct(c.implausible_swapped)) +
                          "% with each value's bytes reversed (written in the other byte order, or swapped by a "
                          "converter?); its values are used as stored",
                      false};
    detail::log(log, LogLevel::warn, "{}", p.detail);
    report.warnings.push_back(std::move(p));
  }
}

std::shared_ptr<const Model> load_model_unguarded(const std::filesystem::path& path, const LoadOptions& options) {
  const auto start = Clock::now();
  auto report = std::make_shared<LoadReport>();
  report->memory.rss_before_bytes = resident_bytes();
  int64_t rss_peak = report->memory.rss_before_bytes;
  auto sample_rss = [&] { rss_peak = std::max(rss_peak, resident_bytes()); };
  const Logger& log = options.logger;

  auto source = open_source(path, options);
  verify_files(*source, options);
  std::vector<std::string> file_warnings = source->warnings();
  ModelConfig config = config_for(path, *source, &file_warnings);
  GenerationDefaults generation = generation_for(path, *source, file_warnings);
  const Manifest manifest = Manifest::build(config, *source);
  if (auto blocking = manifest.blocking_problems(options.strict); !blocking.empty()) {
    throw ManifestError(path.string(), std::move(blocking));
  }

  report->source_path = path.string();
  report->format = std::string(format_kind_name(source->format()));
  report->architecture = config.architecture;
  for (const auto& f : source->files()) report->files.push_back(f.path);
  for (const auto& p : manifest.problems()) {
    report->warnings.push_back(p);
    detail::log(log, LogLevel::warn, "{}: {}", problem_kind_name(p.kind), p.detail);
  }
  warn_suspicious_byte_order(*source, manifest, *report, log);
  report->ignored = manifest.ignored();
  add_file_warnings(*report, file_warnings, log);
  for (int32_t id : generation.eos_token_ids) {
    if (id >= config.vocab_size) {
      add_file_warnings(*report,
                        {(model_dir(path) / "generation_config.json").string() + ": eos_token_id " +
                         std::to_string(id) + " is outside the vocabulary (" + std::to_string(config.vocab_size) +
                         " tokens) and was ignored"},
                        log);
    }
  }
  // End-of-generation ids: config.json's, then generation_config.json's, then the tokenizer's.
  merge_eos(config.eos_token_ids, generation.eos_token_ids, config.vocab_size);
  if (manifest.rope_interleaved()) {
    report->notes.push_back("q/k rows kept in " + std::string(rope_order_source(source->format())) +
                            " interleaved-RoPE order; RoPE rotates adjacent pairs (no copy)");
  }

  ModelWeights weights;
  weights.layers.resize(static_cast<size_t>(config.n_layers));
  weights.rope_interleaved = manifest.rope_interleaved();
  std::vector<std::unique_ptr<Job>> jobs;
  std::vector<TensorLoadRecord> records(manifest.entries().size());
  uint64_t total_bytes = 0;
  uint64_t zero_copy_bytes = 0;
  const bool little_endian = host_is_little_endian();

  // Plan: zero-copy views now, conversion jobs for the rest (destinations preallocated).
  for (size_t i = 0; i < manifest.entries().size(); ++i) {
    const ManifestEntry& e = manifest.entries()[i];
    TensorLoadRecord& rec = records[i];
    rec.internal_name = e.internal_name;
    rec.shape = e.shape;
    if (e.record == nullptr) continue;  // tied (filled below) or not required
    const TensorRecord& r = *e.record;
    const SourceFile& file = source->file_of(r);
    rec.external_name = r.name;
    rec.file = file.path;
    rec.offset = r.offset;
    rec.stored_dtype = r.dtype;
    rec.layout_change = layout_change(e, r, rope_order_source(source->format()));
    const DType target = target_dtype_for(e, r, options, report->notes);
    rec.dtype = target;
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
      Tensor t = source->load(r);
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

  // Execute the conversions: this thread reads chunks, workers convert them.
  std::atomic<bool> cancelled{false};
  uint64_t submitted = zero_copy_bytes;
  auto report_progress = [&](std::string_view tensor) {
    sample_rss();
    if (!options.progress) return;
    const double fraction = total_bytes == 0 ? 1.0 : static_cast<double>(submitted) / static_cast<double>(total_bytes);
    if (!options.progress(std::min(fraction, 1.0), tensor)) cancelled = true;
  };
  int64_t transient_peak = 0;
  {
    Pipeline pipeline(options.threads, options.queue_depth, options.chunk_bytes);
    report_progress(jobs.empty() ? "" : jobs.front()->entry->internal_name);
    for (auto& job : jobs) {
      if (cancelled) break;
      const ManifestEntry& e = *job->entry;
      const TensorRecord& r = *job->record;
      // The stored row runs this entry reads: one run (all rows of a transposed tensor,
      // or its own rows), or one per head / KV group of a fused q|k|v tensor.
      const int64_t runs = e.transposed ? 1 : e.runs;
      const int64_t run_rows = e.transposed || e.runs == 1 ? job->stored_rows : e.run_rows;
      std::optional<Tensor> gathered;
      if (!r.is_contiguous()) gathered = source->load(r);  // a strided PyTorch view: gather it whole
      for (int64_t run = 0; run < runs && !cancelled; ++run) {
        const int64_t first = e.transposed ? 0 : e.row_begin + run * e.run_stride;
        const int64_t dest_first = run * run_rows;
        if (gathered) {
          const auto* base = static_cast<const std::byte*>(gathered->raw_data());
          std::vector<std::byte> copy(base + first * job->stored_row_bytes,
                                      base + (first + run_rows) * job->stored_row_bytes);
          Chunk c{job.get(), first, run_rows, dest_first, copy.data()};
          convert_chunk(c);
          submitted += static_cast<uint64_t>(run_rows * job->stored_row_bytes);
          report_progress(e.internal_name);
          continue;
        }
        const int64_t rows_per_chunk = std::max<int64_t>(1, static_cast<int64_t>(pipeline.chunk_bytes()) / std::max<int64_t>(1, job->stored_row_bytes));
        for (int64_t row = first; row < first + run_rows && !cancelled; row += rows_per_chunk) {
          const int64_t n = std::min(rows_per_chunk, first + run_rows - row);
          const auto bytes = static_cast<size_t>(n * job->stored_row_bytes);
          std::byte* buffer = pipeline.acquire(bytes);
          const auto offset = static_cast<uint64_t>(row * job->stored_row_bytes);
          source->read(r, offset, std::span<std::byte>(buffer, bytes));
          // The bytes are staged now: let go of the mapped pages, so that converting a model
          // never holds the source and the converted copy in memory at once (the pages stay
          // in the page cache; a later access simply faults them back in).
          const SourceFile& file = source->file_of(r);
          if (file.file->is_mapped()) file.file->advise(r.offset + offset, bytes, AccessHint::dont_need);
          pipeline.push(Chunk{job.get(), row, n, dest_first + (row - first), buffer});
          submitted += bytes;
          report_progress(e.internal_name);
        }
      }
    }
    pipeline.finish();
    transient_peak = pipeline.peak_bytes();
  }
  if (cancelled) throw Error(ErrorCode::cancelled, "load cancelled by the progress callback", {.file = path.string()});

  // Tied output: alias the embedding's storage (no copy, no second read).
  for (size_t i = 0; i < manifest.entries().size(); ++i) {
    const ManifestEntry& e = manifest.entries()[i];
    const slots::WeightSlot& slot = *slots::find_slot(e.slot);
    if (slot.ties_to != slots::Slot::token_embd) continue;
    TensorLoadRecord& rec = records[i];
    const bool alias = e.tied || (config.tie_word_embeddings && weights.output.defined() &&
                                  same_bytes(weights.output, weights.token_embd));
    if (e.record != nullptr && config.tie_word_embeddings && !alias) {
      ManifestProblem p{ProblemKind::tied_differs, "output", e.record->name, e.shape, e.shape,
                        "config ties output to token_embd, but '" + e.record->name +
                            "' differs from the embedding; using it as stored",
                        false};
      detail::log(log, LogLevel::warn, "{}", p.detail);
      report->warnings.push_back(std::move(p));
    }
    if (!alias) continue;
    if (!has_matrix_kernel(weights.token_embd.dtype())) {
      throw Error(ErrorCode::unsupported,
                  "the tied output projection needs a matrix kernel for " +
                      std::string(dtype_name(weights.token_embd.dtype())),
                  {.tensor = "token_embd"});
    }
    weights.output = weights.token_embd;
    const TensorLoadRecord& embd =
        *std::find_if(records.begin(), records.end(), [](const TensorLoadRecord& t) { return t.internal_name == "token_embd"; });
    rec.external_name = embd.external_name;
    rec.file = embd.file;
    rec.offset = embd.offset;
    rec.stored_dtype = embd.stored_dtype;
    rec.dtype = weights.token_embd.dtype();
    rec.zero_copy = embd.zero_copy;
    rec.stored_bytes = 0;
    rec.tied = true;
    report->tied.push_back("output -> token_embd");
  }
  if (config.tie_word_embeddings && report->tied.empty()) config.tie_word_embeddings = false;

  for (auto& job : jobs) {
    for (auto& rec : records) {
      if (rec.internal_name == job->entry->internal_name) rec.conversion = job->stats;
    }
    report->conversion_totals += job->stats;
  }

  // Memory by category; tied storage counted once.
  for (const auto& rec : records) {
    if (rec.external_name.empty() && rec.file.empty()) continue;
    ++report->loaded_tensors;
    if (rec.tied) continue;
    const int64_t bytes = dtype_bytes(rec.dtype, rec.shape.numel(), rec.shape.row_length());
    if (rec.zero_copy) {
      report->memory.mapped_weight_bytes += bytes;
      ++report->zero_copy_tensors;
    } else {
      report->memory.owned_weight_bytes += bytes;
      ++report->converted_tensors;
    }
  }
  report->expected_tensors = static_cast<int64_t>(manifest.entries().size());
  report->tensors = std::move(records);
  report->memory.transient_peak_bytes = transient_peak;
  report->memory.kv_context = options.kv_context > 0 ? options.kv_context : std::min<int64_t>(config.max_positions, 4096);
  report->memory.kv_batch = options.kv_batch;
  report->memory.kv_dtype = options.kv_dtype;
  report->memory.kv_cache_bytes =
      kv_cache_bytes_for(config, report->memory.kv_context, options.kv_dtype) * options.kv_batch;

  std::shared_ptr<const Tokenizer> tokenizer;
  if (options.load_tokenizer) {
    tokenizer = tokenizer_for(path, *source, *report);
    if (tokenizer) report->tokenizer = tokenizer->name();
  }
  if (tokenizer) {
    add_file_warnings(*report, tokenizer->load_warnings(), log);
    // End-of-generation ids the tokenizer knows (e.g. <|eot_id|>) join the config's.
    merge_eos(config.eos_token_ids, tokenizer->eos_ids(), config.vocab_size);
  }
  report->generation = generation;

  sample_rss();
  report->memory.rss_peak_bytes = rss_peak;
  report->load_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (options.progress) options.progress(1.0, "");
  detail::log(log, LogLevel::info, "loaded {} ({}, {}): {}/{} tensors, {} zero-copy, {} converted, {:.3f} s",
              path.string(), report->architecture, report->format, report->loaded_tensors,
              report->expected_tensors, report->zero_copy_tensors, report->converted_tensors,
              report->load_seconds);
  if (log.enabled(LogLevel::trace)) log.log(LogLevel::trace, report->to_text(true));
  return std::make_shared<const Model>(std::move(config), std::move(weights), std::move(tokenizer),
                                       std::move(report), std::move(generation));
}
}  // namespace

std::shared_ptr<const Model> load_model(const std::filesystem::path& path, const LoadOptions& options) {
  // Allocation failures anywhere in the pipeline (parsers, manifests, staging) become the
  // one documented error, naming the model, so a host under a memory limit sees
  // Error(out_of_memory) rather than a std::bad_alloc it did not expect from loom.
  try {
    return load_model_unguarded(path, options);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::out_of_memory || !e.context().file.empty()) throw;
    throw e.with_context({.file = path.string()});
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::out_of_memory, "out of memory while loading the model", {.file = path.string()});
  }
}

}  // namespace loom
