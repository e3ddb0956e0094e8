// loom::load_model: plan -> stream -> report. The steps live beside this file, each
// with one job: load_inputs (the source, file checks, config, generation defaults,
// tokenizer), load_plan (dtypes, zero-copy views, conversion jobs), load_stream (the
// conversions on a thread pool, bounded memory), load_summary (tied aliases, totals).
#include "loom/loader.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <new>

#include "common/log_format.hpp"
#include "loom/error.hpp"
#include "loom/thread_pool.hpp"
#include "loom/tokenizer.hpp"
#include "model/load_inputs.hpp"
#include "model/load_plan.hpp"
#include "model/load_repack.hpp"
#include "model/load_stream.hpp"
#include "model/load_summary.hpp"

namespace loom {

namespace {

using Clock = std::chrono::steady_clock;

int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
}

std::shared_ptr<const Model> load_model_unguarded(const std::filesystem::path& path, const LoadOptions& options) {
  const auto start = Clock::now();
  auto report = std::make_shared<LoadReport>();
  report->memory.rss_before_bytes = resident_bytes();
  int64_t rss_peak = report->memory.rss_before_bytes;
  auto sample_rss = [&] { rss_peak = std::max(rss_peak, resident_bytes()); };
  const Logger& log = options.logger;

  auto source = load::open_source(path, options);
  // The host's pool, or one of `threads` workers for this load: it hashes the files the
  // options ask to verify, then converts.
  const std::shared_ptr<ThreadPool> pool =
      options.pool ? options.pool : std::make_shared<ThreadPool>(std::max(0, options.threads) + 1);
  load::verify_files(*source, options, *pool);
  std::vector<std::string> file_warnings = source->warnings();
  ModelConfig config = load::config_for(path, *source, &file_warnings);
  GenerationDefaults generation = load::generation_for(path, *source, file_warnings);
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
  load::warn_suspicious_byte_order(*source, manifest, *report, log);
  report->ignored = manifest.ignored();
  load::add_file_warnings(*report, file_warnings, log);
  for (int32_t id : generation.eos_token_ids) {
    if (id >= config.vocab_size) {
      load::add_file_warnings(*report,
                        {(load::model_dir(path) / "generation_config.json").string() + ": eos_token_id " +
                         std::to_string(id) + " is outside the vocabulary (" + std::to_string(config.vocab_size) +
                         " tokens) and was ignored"},
                        log);
    }
  }
  // End-of-generation ids: config.json's, then generation_config.json's, then the tokenizer's.
  load::merge_eos(config.eos_token_ids, generation.eos_token_ids, config.vocab_size);
  if (manifest.rope_interleaved()) {
    report->notes.push_back("q/k rows kept in " + std::string(load::rope_order_source(source->format())) +
                            " interleaved-RoPE order; RoPE rotates adjacent pairs (no copy)");
  }

  const auto opened = Clock::now();
  report->phases.open_seconds = std::chrono::duration<double>(opened - start).count();

  // Plan: zero-copy views now, conversion jobs for the rest (destinations preallocated).
  ModelWeights weights;
  weights.layers.resize(static_cast<size_t>(config.n_layers));
  weights.rope_interleaved = manifest.rope_interleaved();
  load::Plan plan = load::plan_load(manifest, *source, options, weights, report->notes);

  // Stream: this thread reads chunks, the pool's other threads convert them.
  const auto streamed = load::stream_conversions(
      plan, *source, options, *pool, [&](uint64_t submitted, std::string_view tensor) {
        sample_rss();
        if (!options.progress) return true;
        const double fraction =
            plan.total_bytes == 0 ? 1.0 : static_cast<double>(submitted) / static_cast<double>(plan.total_bytes);
        return options.progress(std::min(fraction, 1.0), tensor);
      });
  if (streamed.cancelled) {
    throw Error(ErrorCode::cancelled, "load cancelled by the progress callback", {.file = path.string()});
  }

  // Report: tied aliases, statistics, memory, the tokenizer.
  load::alias_tied(manifest, config, weights, plan.records, *report, log);
  const MetaValue* packed_for = source->metadata().find("loom.pack.repacked_for");
  load::settle_layouts(options, packed_for ? packed_for->as_string() : std::string(), weights, plan.records,
                       report->notes, *pool);
  load::summarize(plan, manifest, config, options, streamed.transient_peak_bytes, *report);
  const auto weighed = Clock::now();
  report->phases.weights_seconds = std::chrono::duration<double>(weighed - opened).count();

  std::shared_ptr<const Tokenizer> tokenizer;
  if (options.load_tokenizer) {
    tokenizer = load::tokenizer_for(path, *source, *report);
    if (tokenizer) report->tokenizer = tokenizer->name();
  }
  report->phases.tokenizer_seconds = std::chrono::duration<double>(Clock::now() - weighed).count();
  if (tokenizer) {
    load::add_file_warnings(*report, tokenizer->load_warnings(), log);
    // End-of-generation ids the tokenizer knows (e.g. <|eot_id|>) join the config's.
    load::merge_eos(config.eos_token_ids, tokenizer->eos_ids(), config.vocab_size);
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

ModelConfig load_config(const std::filesystem::path& path, const LoadOptions& options) {
  return load::config_for(path, *load::open_source(path, options));
}

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
