// `loom bench --batch 1,2,4,8,16`: aggregate prefill and decode tokens/s of one
// loom::Batch holding B sequences, for each batch size B. Each repetition prefills B
// deterministic prompts (chunked within the batch's token budget), then runs
// `gen_tokens` greedy passes: one decode() over the B pending tokens, then the argmax of
// each sequence's logits fed back. The figures are medians over the repetitions.
//
// Output: a header and one text line per B, or with `json` one compact JSON object per
// line per B and nothing else on `out` (the load progress goes to stderr).
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "loom/model.hpp"

namespace loom::cli {

struct BatchBenchOptions {
  std::vector<int64_t> batch_sizes;
  int prompt_tokens = 128;
  int gen_tokens = 64;
  int reps = 5;
  int n_threads = 0;
  DType kv_dtype = DType::f32;  // the KV cache's entries (--kv-type)
  bool json = false;
  std::string model_name;  // for the report
};

// "1,2,4,8,16" -> {1, 2, 4, 8, 16}; throws std::invalid_argument naming the bad item
// (each must be an integer from 1 to 4096).
std::vector<int64_t> parse_batch_sizes(const std::string& text);

void batch_bench(const std::shared_ptr<const Model>& model, const BatchBenchOptions& options, std::FILE* out);

}  // namespace loom::cli
