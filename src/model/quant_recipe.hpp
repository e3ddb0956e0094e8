// Internal: quantization recipes for packs — which dtype each weight matrix gets for a
// `loom convert --quantize NAME [--group N]`.
//
// NAME (case-insensitive) is one of
//   - a block type with kernels and a quantizer: q8_0, q4_0, q4_1, q5_0, q5_1, q2_k ..
//     q6_k — every matrix in that type ("pure");
//   - a group type: gq8 or gq4 with the group size from --group (32, 64 or 128; 32 when
//     not given), or spelled out: gq8_64, gq4_128, ...;
//   - a named preset from the table in quant_recipe.cpp: a base type plus per-tensor
//     overrides by name pattern, e.g. q4_k_m = q4_k, but q6_k for output, blk.*.ffn_down
//     and blk.*.attn_v.
// Unknown names and bad group sizes throw loom::Error(invalid_argument) listing the valid
// choices.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "loom/dtype.hpp"

namespace loom::quant_recipe {

struct Override {
  std::string pattern;  // internal tensor name; '*' matches any run of characters
  DType dtype;
};

struct Recipe {
  std::string name;   // as resolved, lower case ("q4_k_m", "gq4_64", ...)
  DType base;         // every matrix no override names
  std::vector<Override> overrides;
  int group_size = 0; // of the group types used; 0 when none

  // The dtype for the weight matrix `tensor` (an internal name like "blk.3.ffn_down"):
  // the first override whose pattern matches, else the base. A tied output shares
  // token_embd's storage, so the writer asks for "output" when choosing that storage.
  DType dtype_for(std::string_view tensor) const;
};

// Resolves a --quantize name and --group size (0 = default). Throws loom::Error.
Recipe resolve(std::string_view name, int group_size);

// Every accepted name, for help texts and error messages: plain types, gq8 / gq4, presets.
std::vector<std::string> valid_names();

// True when `name` matches `pattern` ('*' matches any run of characters, even empty).
bool matches(std::string_view pattern, std::string_view name) noexcept;

}  // namespace loom::quant_recipe
