// `loom run --parallel N`: many prompts answered together on one loom::Batch, at most N
// sequences at a time (continuous batching: when one finishes, the next waiting prompt
// joins the following pass).
//
// Output: each sequence's text — its prompt, then what it generated, exactly what
// `loom run --prompt` prints for that prompt alone — goes to `out` one line at a time,
// each line prefixed with "[i] " (i: the prompt's 0-based index). A line is printed when
// its newline is generated, and a sequence's last (possibly empty) line when it stops,
// so lines of different sequences interleave but never mix, and joining sequence i's
// lines with '\n' gives its text back. Per-sequence and total stats go to `err`.
//
// Each sequence has its own Sampler, seeded with params.seed + i (sequence i samples as
// `loom run --seed S+i` would), its own stop strings matcher and UTF-8 stream decoder;
// with greedy sampling each text equals the single-prompt run's (batch invariance).
//
// Runs on the calling thread; the model may be shared with other threads.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "loom/generate.hpp"
#include "loom/model.hpp"
#include "loom/sampler.hpp"

namespace loom::cli {

struct ParallelRunOptions {
  int64_t parallel = 1;        // sequences decoded together at most
  int64_t context_length = 0;  // per sequence; 0: the Batch's default
  int n_threads = 0;
  DType kv_dtype = DType::f32;  // the KV cache's entries
  SamplerParams sampler;       // seed + i for sequence i
  GenerateOptions generate;    // max_tokens, stop_strings, add_special, parse_special, stop_at_eos
  bool stats = true;           // per-sequence lines on `err`
};

// Answers every prompt; returns the process exit code (0). Throws loom::Error for a
// prompt that encodes to no tokens or does not fit the context.
int parallel_run(std::shared_ptr<const Model> model, const std::vector<std::string>& prompts,
                 const ParallelRunOptions& options, std::FILE* out, std::FILE* err);

}  // namespace loom::cli
