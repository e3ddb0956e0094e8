// `loom run --trace-forward`: a SessionOptions::trace hook that prints one line of
// statistics per stage and layer on stderr (generated text on stdout stays clean) and,
// with a dump folder, writes each stage's values as .npy files named by
// loom::trace_dump_name, so that another engine's dump can be compared file by file.
//
// The hook belongs to one session and runs on the thread running its passes.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "loom/session.hpp"

namespace loom::cli {

struct TraceForwardOptions {
  std::set<int32_t> layers;        // block layers to show; empty: all. Stages outside the blocks always show
  std::filesystem::path dump_dir;  // empty: no dump
  FILE* out = stderr;
};

// "0,5" and repeated flags ("--trace-layers 0 --trace-layers 5") -> {0, 5}; throws
// UsageError for anything that is not a non-negative integer.
std::set<int32_t> parse_layer_list(const std::vector<std::string>& values);

// The hook. Passes are counted from 0 at each "embd" stage (the first of every pass).
std::function<void(const TraceEvent&)> forward_tracer(TraceForwardOptions options);

// One statistics line (no trailing newline), e.g.
// "trace pass=0 stage=attn_out layer=3 shape=[5,64] min=-1.2 max=3.4 mean=0.01 nan=0 inf=0".
std::string trace_line(int64_t pass, const TraceEvent& event);

}  // namespace loom::cli
