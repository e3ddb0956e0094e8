// Internal: the forgiving JSON reader for the Hugging Face side files people edit by hand
// (config.json, generation_config.json, tokenizer_config.json, tokenizer.json, shard
// indexes). It forgives a UTF-8 byte-order mark, `//` and `/* */` comments and trailing
// commas before `]` or `}` — each reported back as a warning naming the file — by copying
// the text with them blanked to spaces, so every byte offset, line and column stays where
// it was in the file. String contents are never touched. Anything else that is not JSON
// is refused with the file, line and column of the first problem (simdjson does not say
// where; a small validating scanner finds it, run only after simdjson has failed).
//
// Specs stay strict: the safetensors header (format/json.hpp) and loom's own pack index.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <simdjson.h>

namespace loom::format {

// What was forgiven in one document.
struct JsonForgiven {
  bool bom = false;
  int64_t comments = 0;  // `//` and `/* */` together
  int64_t trailing_commas = 0;

  bool any() const noexcept { return bom || comments > 0 || trailing_commas > 0; }
  // "a UTF-8 byte-order mark, 2 comments and 1 trailing comma were ignored"
  std::string describe() const;
};

struct BlankedJson {
  std::string text;      // the blanked copy; empty when nothing needed blanking
  JsonForgiven forgiven;
  bool changed() const noexcept { return forgiven.any(); }
};

// The preprocessor alone: blanks the BOM, comments (newlines inside them are kept) and
// trailing commas to spaces. Throws Error(format) naming `file`, the line and column of
// an unterminated block comment.
BlankedJson blank_json_extras(std::string_view text, const std::string& file);

// 1-based line and column of byte `offset` of `text`. Columns count UTF-8 characters
// (what an editor shows); a leading byte-order mark is not a column.
struct LineColumn {
  int64_t line = 1;
  int64_t column = 1;
};
LineColumn line_column(std::string_view text, size_t offset) noexcept;

// The first syntax error of strict JSON `text` (byte offset and what is wrong), or
// nullopt when the scanner finds none (simdjson may still refuse, e.g. for nesting too
// deep or a number out of range).
struct JsonSyntaxError {
  size_t offset = 0;
  std::string what;
};
std::optional<JsonSyntaxError> find_json_syntax_error(std::string_view text);

// simdjson rejects integers beyond 64 bits, and transformers writes model_max_length as
// int(1e30). Such literals (outside strings) get a ".0" so they parse as doubles.
// Returns an empty string when the text needs no change.
std::string widen_huge_integers(std::string_view text);

struct LenientJsonOptions {
  bool widen_huge_integers = false;  // see widen_huge_integers()
  // The caller promises simdjson::SIMDJSON_PADDING readable bytes past the text's end
  // (read_file's strings have them): when nothing needs blanking or widening the text is
  // parsed where it is, and `storage` stays empty, instead of being copied into it.
  bool padded_input = false;
};

// Parses a side file leniently. `storage` keeps the (padded) copy of the text, when one
// was made (see padded_input), alive as long as the returned element. When something was
// forgiven and `warnings` is not null, appends "<file>: <what was ignored>". Throws
// Error(format) naming `file`, with the line and column (and byte offset) of the first
// problem.
simdjson::dom::element parse_lenient_json(simdjson::dom::parser& parser, simdjson::padded_string& storage,
                                          std::string_view text, const std::string& file,
                                          std::vector<std::string>* warnings,
                                          const LenientJsonOptions& options = {});

}  // namespace loom::format
