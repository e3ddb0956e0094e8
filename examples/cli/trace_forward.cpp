// `loom run --trace-forward`: statistics lines and .npy dumps of every stage.
#include "trace_forward.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "args.hpp"
#include "loom/format.hpp"
#include "loom/tensor.hpp"
#include "loom/trace.hpp"

namespace loom::cli {

std::set<int32_t> parse_layer_list(const std::vector<std::string>& values) {
  std::set<int32_t> out;
  for (const auto& value : values) {
    size_t begin = 0;
    while (begin <= value.size()) {
      const size_t comma = std::min(value.find(',', begin), value.size());
      const std::string item = value.substr(begin, comma - begin);
      char* end = nullptr;
      errno = 0;
      const long long layer = std::strtoll(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || errno != 0 || layer < 0 || layer > INT32_MAX) {
        throw UsageError("--trace-layers expects layer numbers like 0,5, got '" + value + "'");
      }
      out.insert(static_cast<int32_t>(layer));
      begin = comma + 1;
    }
  }
  return out;
}

std::string trace_line(int64_t pass, const TraceEvent& event) {
  const TraceStage split = split_trace_name(event.name);
  const ActivationStats s = activation_stats(
      std::span<const float>(event.values, static_cast<size_t>(event.n_tokens * event.dim)));
  char buf[384];
  std::snprintf(buf, sizeof buf, "trace pass=%lld stage=%.*s layer=%d shape=[%lld,%lld] min=%.6g max=%.6g mean=%.6g nan=%lld inf=%lld",
                static_cast<long long>(pass), static_cast<int>(split.stage.size()), split.stage.data(), split.layer,
                static_cast<long long>(event.n_tokens), static_cast<long long>(event.dim), s.min, s.max, s.mean,
                static_cast<long long>(s.nan), static_cast<long long>(s.inf));
  return buf;
}

std::function<void(const TraceEvent&)> forward_tracer(TraceForwardOptions options) {
  if (!options.dump_dir.empty()) std::filesystem::create_directories(options.dump_dir);
  // std::function copies its target: the pass counter lives behind a shared pointer.
  auto pass = std::make_shared<int64_t>(-1);
  return [options = std::move(options), pass](const TraceEvent& e) {
    const TraceStage split = split_trace_name(e.name);
    if (split.layer < 0 && split.stage == "embd") ++*pass;
    if (split.layer >= 0 && !options.layers.empty() && options.layers.count(split.layer) == 0) return;
    std::fprintf(options.out, "loom: %s\n", trace_line(*pass, e).c_str());
    if (options.dump_dir.empty()) return;
    Tensor t = Tensor::empty(Shape{e.n_tokens, e.dim}, DType::f32);
    std::memcpy(t.mutable_raw_data(), e.values, static_cast<size_t>(e.n_tokens * e.dim) * sizeof(float));
    write_npy(options.dump_dir / trace_dump_name(*pass, split.stage, split.layer), t);
  };
}

}  // namespace loom::cli
