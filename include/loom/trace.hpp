// Helpers for reading the forward pass's debug hook (SessionOptions::trace, see
// loom/session.hpp): a stage name split into the stage and its layer, summary statistics
// of one stage's activations, and the file name a dump of one stage gets, so that the
// dumps of two runs (or of loom and another engine) can be compared file by file.
//
// Plain functions over borrowed values, no state: any thread may call them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace loom {

// "blk.3.attn_out" -> {"attn_out", 3}; "embd", "output_norm", "logits" -> {name, -1}.
// `stage` points into the name it was split from.
struct TraceStage {
  std::string_view stage;
  int32_t layer = -1;
};
TraceStage split_trace_name(std::string_view name) noexcept;

// What a person looks at first when a pass goes wrong: the range and mean of the finite
// values, and how many are NaN or infinite (which min/max/mean leave out).
struct ActivationStats {
  int64_t count = 0;  // all values
  int64_t nan = 0;
  int64_t inf = 0;    // +Inf and -Inf
  double min = 0.0;   // over the finite values; 0 when there are none
  double max = 0.0;
  double mean = 0.0;
};
ActivationStats activation_stats(std::span<const float> values) noexcept;

// The file name of one stage's dump: "<pass>-<stage>-L<layer>.npy" for the stages of a
// block ("0-attn_out-L3.npy"), "<pass>-<stage>.npy" for the others ("0-logits.npy").
// `pass` counts the forward passes of a session from 0 (the prefill is pass 0 of a
// generation, each decoded token one more).
std::string trace_dump_name(int64_t pass, std::string_view stage, int32_t layer);

}  // namespace loom
