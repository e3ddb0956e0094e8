#include "loom/load_report.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <map>

#include "common/json_writer.hpp"

namespace loom {

namespace {

std::string mib(int64_t bytes) { return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / (1 << 20)); }

void write_stats(JsonWriter& w, const ConvertStats& s) {
  w.begin_object();
  w.field("nan", s.nan_count).field("inf", s.inf_count).field("clamped", s.clamped_count);
  w.end_object();
}

std::string shape_json(const Shape& s) {
  std::string out = "[";
  for (int i = 0; i < s.rank(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

// "q4_k x 12, q6_k x 5, f32 x 9": tensors by stored dtype, in DType table order, so a
// mixed quantization shows what each recipe chose without a full trace.
std::string dtype_summary(const std::vector<TensorLoadRecord>& tensors) {
  std::map<DType, int> counts;
  for (const auto& t : tensors) {
    if (!t.tied) ++counts[t.stored_dtype];
  }
  std::string out;
  for (const auto& [dtype, n] : counts) out += fmt::format("{}{} x {}", out.empty() ? "" : ", ", dtype_name(dtype), n);
  return out;
}

// A float as its shortest decimal (0.6f is written 0.6, not 0.6000000238418579).
double shortest(float f) { return std::strtod(fmt::format("{}", f).c_str(), nullptr); }
int64_t shortest(int32_t i) { return i; }

template <typename T>
void write_default(JsonWriter& w, std::string_view name, const DefaultValue<T>& v) {
  w.key(name).begin_object();
  w.field("value", shortest(v.value)).field("source", default_source_name(v.source)).field("key", v.key);
  w.end_object();
}

// "generation": {"temperature": {"value": 0.6, "source": "generation_config.json", "key":
// "temperature"}, ..., "eos_token_ids": [...], "has_file": true}
void write_generation(JsonWriter& w, const GenerationDefaults& g) {
  w.key("generation").begin_object();
  write_default(w, "temperature", g.temperature);
  write_default(w, "top_k", g.top_k);
  write_default(w, "top_p", g.top_p);
  write_default(w, "repetition_penalty", g.repetition_penalty);
  write_default(w, "max_new_tokens", g.max_new_tokens);
  w.key("eos_token_ids").begin_array();
  for (int32_t id : g.eos_token_ids) w.value(static_cast<int64_t>(id));
  w.end_array();
  w.field("has_file", g.has_file);
  w.end_object();
}

}  // namespace

std::string LoadReport::to_text(bool trace) const {
  std::string out;
  out += fmt::format("model      {}\n", source_path);
  out += fmt::format("format     {} ({} file{})\n", format, files.size(), files.size() == 1 ? "" : "s");
  out += fmt::format("arch       {}\n", architecture);
  out += fmt::format("tensors    {} expected, {} loaded: {} zero-copy{}, {} converted{}\n", expected_tensors,
                     loaded_tensors, zero_copy_tensors,
                     stored_packed_tensors > 0 ? fmt::format(" ({} packed as stored)", stored_packed_tensors) : std::string(),
                     converted_tensors,
                     repacked_tensors > 0 ? fmt::format(" ({} repacked)", repacked_tensors) : std::string());
  if (const std::string d = dtype_summary(tensors); !d.empty()) out += fmt::format("dtypes     {}\n", d);
  for (const auto& t : tied) out += fmt::format("tied       {}\n", t);
  if (conversion_totals.nan_count || conversion_totals.inf_count || conversion_totals.clamped_count) {
    out += fmt::format("conversion {} NaN, {} Inf, {} clamped\n", conversion_totals.nan_count,
                       conversion_totals.inf_count, conversion_totals.clamped_count);
  }
  out += fmt::format("memory     weights mapped {}, owned {}; buffers peak {}; KV cache {} ({} ctx x {} in {})\n",
                     mib(memory.mapped_weight_bytes), mib(memory.owned_weight_bytes),
                     mib(memory.transient_peak_bytes), mib(memory.kv_cache_bytes), memory.kv_context,
                     memory.kv_batch, dtype_name(memory.kv_dtype));
  out += fmt::format("rss        {} before, {} peak during load\n", mib(memory.rss_before_bytes),
                     mib(memory.rss_peak_bytes));
  out += fmt::format("time       {:.3f} s (open {:.3f}, weights {:.3f}, tokenizer {:.3f})\n", load_seconds,
                     phases.open_seconds, phases.weights_seconds, phases.tokenizer_seconds);
  if (!tokenizer.empty()) out += fmt::format("tokenizer  {}\n", tokenizer);
  for (const auto& n : notes) out += fmt::format("note       {}\n", n);
  for (const auto& w : warnings) out += fmt::format("warning    {}: {}\n", problem_kind_name(w.kind), w.detail);
  for (const auto& w : file_warnings) out += fmt::format("warning    {}\n", w);
  for (const auto& g : generation.describe()) out += fmt::format("generation {}\n", g);
  for (const auto& i : ignored) out += fmt::format("ignored    {}\n", i);
  if (!trace) return out;
  out += fmt::format("\n{:<24} {:<48} {:>10} {:<8} {:<8} {:<9} {}\n", "internal", "external", "offset",
                     "stored", "memory", "how", "layout");
  for (const auto& t : tensors) {
    if (t.external_name.empty()) continue;
    const std::string how = t.tied                                    ? "tied"
                            : t.packing != Packing::none && !t.zero_copy ? "repacked"
                            : t.zero_copy                                ? "zero-copy"
                                                                         : "converted";
    std::string layout = t.layout_change;
    if (t.packing != Packing::none && !t.zero_copy) layout += fmt::format(" ({:.1f} ms)", t.repack_seconds * 1e3);
    out += fmt::format("{:<24} {:<48} {:>10} {:<8} {:<8} {:<9} {}\n", t.internal_name, t.external_name,
                       t.offset, dtype_name(t.stored_dtype), dtype_name(t.dtype), how, layout);
  }
  return out;
}

std::string LoadReport::to_json(bool trace) const {
  JsonWriter w;
  w.begin_object();
  w.field("source", source_path).field("format", format).field("architecture", architecture);
  w.key("files").begin_array();
  for (const auto& f : files) w.value(f);
  w.end_array();
  w.key("tensors").begin_object();
  w.field("expected", expected_tensors).field("loaded", loaded_tensors);
  w.field("zero_copy", zero_copy_tensors).field("converted", converted_tensors);
  w.field("repacked", repacked_tensors).field("stored_packed", stored_packed_tensors);
  w.end_object();
  w.key("tied").begin_array();
  for (const auto& t : tied) w.value(t);
  w.end_array();
  w.key("conversion");
  write_stats(w, conversion_totals);
  w.key("memory").begin_object();
  w.field("mapped_weight_bytes", memory.mapped_weight_bytes);
  w.field("owned_weight_bytes", memory.owned_weight_bytes);
  w.field("transient_peak_bytes", memory.transient_peak_bytes);
  w.field("kv_cache_bytes", memory.kv_cache_bytes);
  w.field("kv_context", memory.kv_context).field("kv_batch", memory.kv_batch);
  w.field("kv_dtype", dtype_name(memory.kv_dtype));
  w.field("rss_before_bytes", memory.rss_before_bytes).field("rss_peak_bytes", memory.rss_peak_bytes);
  w.end_object();
  w.field("load_seconds", load_seconds);
  w.key("phases").begin_object();
  w.field("open_seconds", phases.open_seconds).field("weights_seconds", phases.weights_seconds);
  w.field("tokenizer_seconds", phases.tokenizer_seconds);
  w.end_object();
  w.field("tokenizer", tokenizer);
  w.key("notes").begin_array();
  for (const auto& n : notes) w.value(n);
  w.end_array();
  w.key("warnings").begin_array();
  for (const auto& p : warnings) {
    w.begin_object();
    w.field("kind", problem_kind_name(p.kind)).field("internal", p.internal_name);
    w.field("external", p.external_name).field("detail", p.detail);
    w.end_object();
  }
  w.end_array();
  w.key("ignored").begin_array();
  for (const auto& i : ignored) w.value(i);
  w.end_array();
  w.key("file_warnings").begin_array();
  for (const auto& fw : file_warnings) w.value(fw);
  w.end_array();
  write_generation(w, generation);
  if (trace) {
    w.key("trace").begin_array();
    for (const auto& t : tensors) {
      if (t.external_name.empty()) continue;
      w.begin_object();
      w.field("internal", t.internal_name).field("external", t.external_name).field("file", t.file);
      w.field("offset", t.offset).field("stored_bytes", t.stored_bytes);
      w.key("shape").raw(shape_json(t.shape));
      w.field("stored_dtype", dtype_name(t.stored_dtype)).field("dtype", dtype_name(t.dtype));
      w.field("layout_change", t.layout_change).field("zero_copy", t.zero_copy).field("tied", t.tied);
      w.field("packing", packing_name(t.packing)).field("repack_seconds", t.repack_seconds);
      w.field("stored_packing", packing_name(t.stored_packing));
      w.key("conversion");
      write_stats(w, t.conversion);
      w.end_object();
    }
    w.end_array();
  }
  w.end_object();
  return w.str();
}

}  // namespace loom
