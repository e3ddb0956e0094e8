// Internal: the config-field table. One row per numeric ModelConfig field: its member,
// the config.json keys each family calls it (arch::ConfigKeys, aliases first match
// wins), its GGUF key under "<arch>.", what happens when a file leaves it out (required,
// a default, or derived from the other fields), and when the exporter writes it. The
// config.json and GGUF parsers and both exporters walk this table; the fields that are
// not plain numbers (RoPE scaling, biases, activation, tokens) stay beside it in
// config_parse.cpp and exporter.cpp.
#pragma once

#include <array>
#include <span>
#include <string_view>

#include "loom/config.hpp"
#include "model/architectures.hpp"

namespace loom::config_fields {

using HfKeys = std::array<std::string_view, 3> arch::ConfigKeys::*;

struct Field {
  std::string_view name;                  // in messages: "config field 'hidden_size' ..."
  int64_t ModelConfig::*integer = nullptr;  // exactly one of integer / number
  double ModelConfig::*number = nullptr;
  HfKeys hf_keys = nullptr;               // the family's config.json keys
  // GGUF keys after "<arch>.": read in order; written: the first, or for the norm's
  // epsilon the one of the config's norm kind (rms first, LayerNorm second).
  std::array<std::string_view, 2> gguf_keys{};
  bool gguf_key_by_norm = false;
  bool hf_required = false;
  bool gguf_required = false;
  double default_value = 0;  // when absent, not required and not derived
  // When absent: derives the value from fields read already (null: the default).
  void (*derive)(const arch::ArchitectureSpec&, ModelConfig&) = nullptr;
  // Whether the exporter writes it (null: always).
  bool (*hf_write)(const ModelConfig&) = nullptr;
  bool (*gguf_write)(const ModelConfig&) = nullptr;
};

// In the order config.json is written.
std::span<const Field> all() noexcept;

// Reads every field from a source that answers integer/number lookups by key: `hf`
// selects config.json keys (else GGUF keys); `lookup_int` / `lookup_number` return
// nullopt for an absent key and throw for a mistyped one. `fail` throws naming the key.
template <typename IntLookup, typename NumberLookup, typename Fail>
void read_all(const arch::ArchitectureSpec& spec, bool hf, ModelConfig& c, IntLookup&& lookup_int,
              NumberLookup&& lookup_number, Fail&& fail);

// ---- implementation of the template ----

template <typename IntLookup, typename NumberLookup, typename Fail>
void read_all(const arch::ArchitectureSpec& spec, bool hf, ModelConfig& c, IntLookup&& lookup_int,
              NumberLookup&& lookup_number, Fail&& fail) {
  std::array<bool, 32> found{};
  const auto fields = all();
  for (size_t i = 0; i < fields.size(); ++i) {
    const Field& f = fields[i];
    const auto keys = [&]() -> std::span<const std::string_view> {
      if (hf) return f.hf_keys != nullptr ? std::span<const std::string_view>(spec.hf_keys.*f.hf_keys)
                                          : std::span<const std::string_view>();
      return f.gguf_keys;
    }();
    for (auto key : keys) {
      if (key.empty()) continue;
      if (f.integer != nullptr) {
        if (auto v = lookup_int(key)) {
          c.*f.integer = *v;
          found[i] = true;
          break;
        }
      } else if (auto v = lookup_number(key)) {
        c.*f.number = *v;
        found[i] = true;
        break;
      }
    }
  }
  // Absent fields in table order: the first required one missing is the error.
  for (size_t i = 0; i < fields.size(); ++i) {
    const Field& f = fields[i];
    if (found[i]) continue;
    if (hf ? f.hf_required : f.gguf_required) {
      const auto keys = hf ? std::span<const std::string_view>(spec.hf_keys.*f.hf_keys)
                           : std::span<const std::string_view>(f.gguf_keys);
      fail(keys[0]);
    }
  }
  for (size_t i = 0; i < fields.size(); ++i) {
    const Field& f = fields[i];
    if (found[i]) continue;
    if (f.derive != nullptr) {
      f.derive(spec, c);
    } else if (f.integer != nullptr) {
      c.*f.integer = static_cast<int64_t>(f.default_value);
    } else {
      c.*f.number = f.default_value;
    }
  }
}

}  // namespace loom::config_fields
