// `loom run --draft PATH | --draft-quantize TYPE | --lookup N` and `loom bench
// --speculative`: the drafter the flags ask for, the statistics line after a run, and
// the benchmark of speculative against plain decoding of the same target in one run.
//
// The bench: for each drafter given (a draft model, a quantized copy, prompt lookup), a
// greedy generation of gen_tokens from the same prompt, plain (no drafter) and
// speculative, alternating, `reps` times; the medians are reported. Output: one text
// line per drafter, or with `json` one compact JSON object per line (mode, tokens_per_s,
// plain_tokens_per_s, speedup, acceptance, tokens_per_target_pass, ...) and nothing else.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "loom/model.hpp"
#include "loom/speculative.hpp"
#include "loom/thread_pool.hpp"

namespace loom::cli {

// What the speculative flags say (shared by run and bench).
struct DraftFlags {
  std::string draft_path;      // --draft
  std::string draft_quantize;  // --draft-quantize (a dtype name: q4_k, q8_0, gq4_32, f16, ...)
  int64_t lookup = 0;          // --lookup N: prompt lookup of n-grams up to N (0: off)
  SpeculativeParams params;    // --draft-max, --draft-fixed
  float min_confidence = 0.0f; // --draft-min-p
  bool any() const { return !draft_path.empty() || !draft_quantize.empty() || lookup > 0; }
};

// One drafter of the flags, by mode: "draft-model", "draft-quantize", "lookup".
struct CliDrafter {
  std::string mode;
  std::string detail;  // the draft's path, dtype or n-gram size
  std::unique_ptr<Drafter> drafter;
};

// Every drafter the flags ask for, built against `target`: `draft` is the model
// --draft loaded (null without it); a quantized copy is made in memory, on `pool`'s
// threads. Throws loom::Error (a draft of another vocabulary, an unknown dtype).
std::vector<CliDrafter> make_drafters(const DraftFlags& flags, const std::shared_ptr<const Model>& target,
                                      const std::shared_ptr<const Model>& draft, ThreadPool& pool);

// "loom: speculative (lookup 3): drafted 120, accepted 96 (80.0%), 60 target passes, 2.13 tokens per pass"
void print_speculative_stats(const std::string& mode, const SpeculativeResult& r, std::FILE* err);

struct SpeculativeBenchOptions {
  DraftFlags flags;
  std::vector<int32_t> prompt;  // token ids
  int gen_tokens = 64;
  int reps = 3;
  int n_threads = 0;
  DType kv_dtype = DType::f32;  // the target's KV cache entries (--kv-type)
  bool json = false;
  std::string model_name;
};

void speculative_bench(const std::shared_ptr<const Model>& target, const std::shared_ptr<const Model>& draft,
                       const SpeculativeBenchOptions& options, std::FILE* out);

}  // namespace loom::cli
