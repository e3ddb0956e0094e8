#include "loom/manifest.hpp"

#include <map>

#include "loom/error.hpp"
#include "model/architectures.hpp"
#include "model/weight_slots.hpp"

namespace loom {

std::string_view problem_kind_name(ProblemKind kind) noexcept {
  switch (kind) {
    case ProblemKind::missing: return "missing";
    case ProblemKind::unexpected: return "unexpected";
    case ProblemKind::shape_mismatch: return "shape_mismatch";
    case ProblemKind::dtype_mismatch: return "dtype_mismatch";
    case ProblemKind::tied_differs: return "tied_differs";
    case ProblemKind::duplicate: return "duplicate";
    case ProblemKind::suspicious_data: return "suspicious_data";
  }
  return "unknown";
}

namespace {

// GGUF tensors that carry configuration (read by config_parse), not weights.
constexpr std::string_view kConfigTensors[] = {"rope_freqs.weight", "rope_factors_long.weight",
                                               "rope_factors_short.weight"};

std::string substitute_layer(std::string_view pattern, int64_t layer) {
  std::string out(pattern);
  if (auto at = out.find("{N}"); at != std::string::npos) out.replace(at, 3, std::to_string(layer));
  return out;
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep;
    out += items[i];
  }
  return out;
}

}  // namespace

Manifest Manifest::build(const ModelConfig& config, const WeightSource& source) {
  const arch::ArchitectureSpec* spec = arch::find_by_name(config.architecture);
  if (spec == nullptr) {
    throw Error(ErrorCode::unsupported, "no architecture table for '" + config.architecture + "'");
  }
  const bool gguf = source.format() == FormatKind::gguf;
  const bool llama2c = source.format() == FormatKind::llama2c;
  const bool pack = source.format() == FormatKind::pack;
  // Rules that do not apply to this config (Falcon's two GGUF attn_norm meanings) are
  // left out before matching.
  std::vector<arch::NameRule> rules;
  for (const auto& r : arch::names_for(*spec, source.format())) {
    if (arch::applies(r, config)) rules.push_back(r);
  }

  Manifest m;
  std::map<std::string, size_t, std::less<>> by_name;
  for (const auto& slot : slots::all_slots()) {
    if (!slot.needed(config)) continue;
    const int64_t layers = slot.per_layer ? config.n_layers : 1;
    for (int64_t l = 0; l < layers; ++l) {
      ManifestEntry e;
      e.internal_name = slots::full_name(slot, slot.per_layer ? l : -1);
      e.slot = std::string(slot.name);
      e.layer = slot.per_layer ? l : -1;
      e.shape = slot.shape(config);
      e.shape_fields = std::string(slot.shape_fields);
      e.is_vector = slots::is_vector(slot.role);
      by_name[e.internal_name] = m.entries_.size();
      m.entries_.push_back(std::move(e));
    }
  }
  auto entry_for = [&](slots::Slot id, int64_t layer) -> ManifestEntry* {
    auto it = by_name.find(slots::full_name(slots::slot(id), layer));
    return it == by_name.end() ? nullptr : &m.entries_[it->second];
  };

  for (const TensorRecord& record : source.tensors()) {
    const std::string& name = record.name;
    // Strip a known prefix ("model.", "transformer.") or none, then try every rule.
    const arch::NameRule* rule = nullptr;
    int64_t layer = -1;
    std::vector<std::string_view> candidates{name};
    for (auto prefix : spec->prefixes) {
      if (!pack && !prefix.empty() && name.size() > prefix.size() &&
          std::string_view(name).substr(0, prefix.size()) == prefix) {
        candidates.push_back(std::string_view(name).substr(prefix.size()));
      }
    }
    for (auto candidate : candidates) {
      for (const auto& r : rules) {
        if (arch::match_pattern(r.pattern, candidate, layer)) {
          rule = &r;
          break;
        }
      }
      if (rule) break;
    }
    if (rule == nullptr) {
      bool ignored = false;
      for (auto candidate : candidates) {
        int64_t unused = 0;
        if (pack) break;
        for (auto pattern : spec->ignored) ignored = ignored || arch::match_pattern(pattern, candidate, unused);
        for (auto config_tensor : kConfigTensors) ignored = ignored || candidate == config_tensor;
      }
      if (ignored) {
        m.ignored_.push_back(name);
      } else {
        m.problems_.push_back({ProblemKind::unexpected, "", name, {}, record.shape,
                               "tensor '" + name + "' matches no weight of " + config.architecture, false});
      }
      continue;
    }
    if (layer >= config.n_layers) {
      m.problems_.push_back({ProblemKind::unexpected, "", name, {}, record.shape,
                             "tensor '" + name + "' belongs to layer " + std::to_string(layer) +
                                 " but num_hidden_layers is " + std::to_string(config.n_layers),
                             false});
      continue;
    }
    std::vector<ManifestEntry*> targets;
    std::vector<std::string> unused_targets;
    for (size_t i = 0; i < arch::slot_count(*rule); ++i) {
      ManifestEntry* e = entry_for(rule->slots[i], layer);
      if (e == nullptr) {
        unused_targets.emplace_back(slots::slot(rule->slots[i]).name);
      } else {
        targets.push_back(e);
      }
    }
    if (targets.empty()) {
      m.problems_.push_back({ProblemKind::unexpected, "", name, {}, record.shape,
                             "tensor '" + name + "' holds " + join(unused_targets, ", ") +
                                 ", which this " + config.architecture +
                                 " configuration does not use",
                             false});
      continue;
    }
    if (!unused_targets.empty()) {
      m.problems_.push_back({ProblemKind::shape_mismatch, targets[0]->internal_name, name, {}, record.shape,
                             "tensor '" + name + "' fuses " + join(unused_targets, ", ") +
                                 ", which the config does not use"});
      continue;
    }
    // The stored shape the config implies for this (possibly fused, transposed) tensor.
    int64_t rows = 0;
    for (auto* e : targets) rows += e->shape[0];
    const bool vector = targets[0]->is_vector;
    const bool transposed = rule->transform == arch::Transform::transpose && !vector;
    const Shape logical = vector ? Shape{rows} : Shape{rows, targets[0]->shape[1]};
    const Shape stored = transposed ? Shape{logical[1], logical[0]} : logical;
    std::vector<arch::RowRuns> runs;
    std::string split_error;
    try {
      for (size_t i = 0; i < targets.size(); ++i) runs.push_back(arch::row_runs(*rule, i, config));
    } catch (const Error& e) {
      split_error = e.what();
    }
    if (!(record.shape == stored) || !split_error.empty()) {
      std::vector<std::string> names;
      std::vector<std::string> fields;
      for (auto* e : targets) {
        names.push_back(e->internal_name);
        fields.push_back(e->shape_fields);
      }
      std::string detail = "tensor '" + name + "' has shape " + record.shape.to_string() + ", expected " +
                           stored.to_string() + " from the config (" + join(fields, "; ") + ")";
      if (!split_error.empty()) detail = "tensor '" + name + "': " + split_error;
      m.problems_.push_back({ProblemKind::shape_mismatch, join(names, "+"), name, stored, record.shape, detail});
      for (auto* e : targets) e->required = false;  // reported once, not again as missing
      continue;
    }
    for (size_t i = 0; i < targets.size(); ++i) {
      ManifestEntry* e = targets[i];
      if (e->record != nullptr) {
        m.problems_.push_back({ProblemKind::duplicate, e->internal_name, name, e->shape, record.shape,
                               "both '" + e->record->name + "' and '" + name + "' provide " + e->internal_name});
        continue;
      }
      e->record = &record;
      e->row_begin = runs[i].first_row;
      e->run_rows = runs[i].run_rows;
      e->run_stride = runs[i].stride;
      e->runs = runs[i].runs;
      e->split = targets.size() > 1;
      e->transposed = transposed;
      e->add_one = rule->transform == arch::Transform::add_one;
    }
  }

  // GGUF permutes llama's q/k rows for interleaved RoPE; llama2.c keeps Meta's
  // original rows, which are in that order already.
  m.rope_interleaved_ = (gguf && spec->gguf_rope_interleaved) || llama2c;
  if (pack) {
    // A pack keeps the row order of the source it was converted from.
    const MetaValue* order = source.metadata().find("loom.rope_interleaved");
    m.rope_interleaved_ = order != nullptr && order->as_bool();
  }
  for (auto& e : m.entries_) {
    const slots::WeightSlot& slot = *slots::find_slot(e.slot);
    if (slot.rope_rows != slots::RopeRows::none) e.rope_interleaved = m.rope_interleaved_;
    // GGUF has no tie flag: a missing output is the embedding (llama.cpp's rule).
    if (slot.ties_to != slots::Slot::none && e.record == nullptr && (slots::tied_in(config, slot) || gguf)) {
      e.tied = true;
    }
  }

  std::vector<std::string> files;
  for (const auto& f : source.files()) files.push_back(f.path);
  for (const auto& e : m.entries_) {
    if (e.record != nullptr || e.tied || !e.required) continue;
    const slots::WeightSlot& slot = *slots::find_slot(e.slot);
    std::vector<std::string> looked_for;
    for (const auto& r : rules) {
      for (size_t i = 0; i < arch::slot_count(r); ++i) {
        if (r.slots[i] != slot.id) continue;
        const std::string n = substitute_layer(r.pattern, e.layer);
        looked_for.push_back(gguf || llama2c || pack || spec->prefixes[0].empty() ? n
                                                                                  : std::string(spec->prefixes[0]) + n);
      }
    }
    std::string detail = e.internal_name + " is missing: looked for '" + join(looked_for, "', '") +
                         "' in " + join(files, ", ");
    if (slot.ties_to != slots::Slot::none) {
      detail += " (and the config does not tie it to " + std::string(slots::slot(slot.ties_to).name) + ")";
    }
    m.problems_.push_back({ProblemKind::missing, e.internal_name, "", e.shape, {}, std::move(detail)});
  }
  return m;
}

std::vector<ManifestProblem> Manifest::blocking_problems(bool strict) const {
  std::vector<ManifestProblem> out;
  for (const auto& p : problems_) {
    if (p.fatal || strict) out.push_back(p);
  }
  return out;
}

std::string Manifest::describe_problems() const {
  std::string out;
  for (const auto& p : problems_) {
    out += std::string(problem_kind_name(p.kind)) + ": " + p.detail + "\n";
  }
  return out;
}

namespace {
std::string problems_message(const std::vector<ManifestProblem>& problems) {
  std::string out = std::to_string(problems.size()) + " problem(s) matching the weights to the architecture:";
  for (const auto& p : problems) out += "\n  " + std::string(problem_kind_name(p.kind)) + ": " + p.detail;
  return out;
}
ErrorCode code_for(const std::vector<ManifestProblem>& problems) {
  for (const auto& p : problems) {
    if (p.kind == ProblemKind::missing) return ErrorCode::missing_tensor;
  }
  for (const auto& p : problems) {
    if (p.kind == ProblemKind::shape_mismatch) return ErrorCode::shape_mismatch;
  }
  for (const auto& p : problems) {
    if (p.kind == ProblemKind::dtype_mismatch) return ErrorCode::dtype_mismatch;
  }
  return ErrorCode::format;
}
}  // namespace

ManifestError::ManifestError(std::string file, std::vector<ManifestProblem> problems)
    : Error(code_for(problems), problems_message(problems), {.file = std::move(file)}),
      problems_(std::move(problems)) {}

}  // namespace loom
