#include "model/quant_recipe.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <optional>

#include "loom/error.hpp"
#include "tensor/quant/quant.hpp"

namespace loom::quant_recipe {

namespace {

constexpr int kDefaultGroup = 32;
constexpr std::array<int, 3> kGroupSizes{32, 64, 128};

// Plain block types --quantize accepts: those with both a quantizer and dot kernels
// (q8_k and q8_1 are activation types).
constexpr std::array<DType, 10> kPlainTypes{DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0,
                                            DType::q5_1, DType::q2_k, DType::q3_k, DType::q4_k,
                                            DType::q5_k, DType::q6_k};

// Group type families; the group size comes from --group.
struct GroupFamily {
  std::string_view name;
  int bits;
};
constexpr std::array<GroupFamily, 2> kGroupFamilies{{{"gq8", 8}, {"gq4", 4}}};

struct PresetOverride {
  std::string_view pattern;
  std::string_view type;  // a plain type name or a group family ("gq8")
};

struct Preset {
  std::string_view name;
  std::string_view base;
  std::array<PresetOverride, 3> overrides;  // empty patterns end the list
};

// The named mixes. Like llama.cpp's _S / _M recipes in spirit (not in every detail:
// llama.cpp upgrades only some layers' ffn_down / attn_v): the output projection is the
// most sensitive matrix, ffn_down and attn_v come next.
constexpr std::array<Preset, 7> kPresets{{
    {"q3_k_m", "q3_k", {{{"output", "q6_k"}, {"blk.*.ffn_down", "q5_k"}, {"blk.*.attn_v", "q5_k"}}}},
    {"q4_k_s", "q4_k", {{{"output", "q6_k"}}}},
    {"q4_k_m", "q4_k", {{{"output", "q6_k"}, {"blk.*.ffn_down", "q6_k"}, {"blk.*.attn_v", "q6_k"}}}},
    {"q5_k_s", "q5_k", {{{"output", "q6_k"}}}},
    {"q5_k_m", "q5_k", {{{"output", "q6_k"}, {"blk.*.ffn_down", "q6_k"}, {"blk.*.attn_v", "q6_k"}}}},
    {"q4_0_m", "q4_0", {{{"output", "q8_0"}, {"blk.*.ffn_down", "q8_0"}, {"blk.*.attn_v", "q8_0"}}}},
    {"gq4_m", "gq4", {{{"output", "gq8"}, {"blk.*.ffn_down", "gq8"}, {"blk.*.attn_v", "gq8"}}}},
}};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

const GroupFamily* group_family(std::string_view name) {
  for (const auto& f : kGroupFamilies) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

// Elements per group of a group type; 0 for every other dtype.
int group_of(DType dtype) {
  for (const auto& g : quant::group_types()) {
    if (g.dtype == dtype) return g.group;
  }
  return 0;
}

// A type token of a recipe ("q6_k", "gq8", "gq4_64") with the group size chosen for it.
std::optional<DType> type_of(std::string_view token, int group) {
  if (const auto* f = group_family(token)) return quant::group_dtype(f->bits, group);
  const auto dtype = dtype_from_name(token);
  if (!dtype) return std::nullopt;
  if (group_of(*dtype) != 0) return dtype;
  if (std::find(kPlainTypes.begin(), kPlainTypes.end(), *dtype) != kPlainTypes.end()) return dtype;
  return std::nullopt;
}

[[noreturn]] void unknown(std::string_view name) {
  throw Error(ErrorCode::invalid_argument,
              "unknown quantization '" + std::string(name) + "'; valid: " + joined(valid_names()));
}

}  // namespace

bool matches(std::string_view pattern, std::string_view name) noexcept {
  // Iterative glob with backtracking to the last '*'.
  size_t p = 0;
  size_t n = 0;
  size_t star = std::string_view::npos;
  size_t resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (p < pattern.size() && pattern[p] == name[n]) {
      ++p;
      ++n;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

DType Recipe::dtype_for(std::string_view tensor) const {
  for (const auto& o : overrides) {
    if (matches(o.pattern, tensor)) return o.dtype;
  }
  return base;
}

std::vector<std::string> valid_names() {
  std::vector<std::string> out;
  for (DType d : kPlainTypes) out.emplace_back(dtype_name(d));
  for (const auto& f : kGroupFamilies) out.emplace_back(f.name);
  for (const auto& g : quant::group_types()) out.emplace_back(dtype_name(g.dtype));
  for (const auto& p : kPresets) out.emplace_back(p.name);
  return out;
}

Recipe resolve(std::string_view name, int group_size) {
  if (group_size != 0 &&
      std::find(kGroupSizes.begin(), kGroupSizes.end(), group_size) == kGroupSizes.end()) {
    throw Error(ErrorCode::invalid_argument,
                "group size " + std::to_string(group_size) + " is not one of 32, 64, 128");
  }
  const std::string key = lower(name);
  const int group = group_size != 0 ? group_size : kDefaultGroup;
  Recipe recipe;
  const auto preset = std::find_if(kPresets.begin(), kPresets.end(),
                                   [&](const Preset& p) { return p.name == key; });
  if (preset != kPresets.end()) {
    recipe.name = key;
    recipe.base = *type_of(preset->base, group);
    for (const auto& o : preset->overrides) {
      if (o.pattern.empty()) break;
      recipe.overrides.push_back({std::string(o.pattern), *type_of(o.type, group)});
    }
  } else {
    const auto dtype = type_of(key, group);
    if (!dtype) unknown(name);
    if (group_of(*dtype) != 0 && !group_family(key) && group_size != 0 && group_of(*dtype) != group_size) {
      throw Error(ErrorCode::invalid_argument, "--quantize " + key + " has groups of " +
                                                   std::to_string(group_of(*dtype)) + ", not " +
                                                   std::to_string(group_size));
    }
    recipe.base = *dtype;
    recipe.name = std::string(dtype_name(*dtype));
  }
  bool uses_groups = group_of(recipe.base) != 0;
  for (const auto& o : recipe.overrides) uses_groups = uses_groups || group_of(o.dtype) != 0;
  if (uses_groups) {
    recipe.group_size = group_of(recipe.base) != 0 ? group_of(recipe.base) : group;
  } else if (group_size != 0) {
    throw Error(ErrorCode::invalid_argument,
                "--group applies to the group types (gq8, gq4); '" + key + "' has none");
  }
  return recipe;
}

}  // namespace loom::quant_recipe
