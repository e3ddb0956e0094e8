#include "model/generation_config.hpp"

#include <simdjson.h>

#include <cmath>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "format/json.hpp"
#include "format/lenient_json.hpp"
#include "loom/error.hpp"

namespace loom::generation_config {

namespace {

using simdjson::dom::element;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();

// A number key: its accepted range (min_open: the minimum itself is not allowed).
struct NumberKey {
  std::string_view key;
  DefaultValue<float> GenerationDefaults::*field;
  double min;
  double max;
  bool min_open;
};

constexpr NumberKey kNumbers[] = {
    {"temperature", &GenerationDefaults::temperature, 0.0, kInf, false},
    {"top_p", &GenerationDefaults::top_p, 0.0, 1.0, false},
    {"repetition_penalty", &GenerationDefaults::repetition_penalty, 0.0, kInf, true},
};

struct IntegerKey {
  std::string_view key;
  DefaultValue<int32_t> GenerationDefaults::*field;
  int64_t min;
};

// max_length comes after max_new_tokens and only fills it when that is absent.
constexpr IntegerKey kIntegers[] = {
    {"top_k", &GenerationDefaults::top_k, 0},
    {"max_new_tokens", &GenerationDefaults::max_new_tokens, 1},
    {"max_length", &GenerationDefaults::max_new_tokens, 1},
};

class Reader {
 public:
  Reader(element root, const std::string& path) : root_(root), path_(path) {}

  [[noreturn]] void fail(std::string_view key, const std::string& what) const {
    throw Error(ErrorCode::format, fmt::format("generation_config.json field '{}' {}", key, what), {.file = path_});
  }
  std::string found(element e) const { return "found " + std::string(format::json_type_name(e.type())); }

  // The value of `key`; null counts as absent (transformers writes nulls for unset ids).
  std::optional<element> get(std::string_view key) const {
    element v;
    if (root_.get_object().at_key(key).get(v) != simdjson::SUCCESS || v.is_null()) return std::nullopt;
    return v;
  }

  std::optional<double> number(std::string_view key) const {
    const auto v = get(key);
    if (!v) return std::nullopt;
    double d = 0.0;
    if (v->is_bool() || v->get_double().get(d) != simdjson::SUCCESS) fail(key, "must be a number, " + found(*v));
    return d;
  }

  // An integer in [min, INT32_MAX]; integral doubles (50.0) are accepted.
  int64_t integer(std::string_view key, element v, int64_t min) const {
    int64_t i = 0;
    if (v.get_int64().get(i) != simdjson::SUCCESS) {
      double d = 0.0;
      if (v.get_double().get(d) != simdjson::SUCCESS || std::floor(d) != d) fail(key, "must be an integer, " + found(v));
      if (d < static_cast<double>(min) || d > static_cast<double>(kMaxInt)) {
        fail(key, fmt::format("is {}; it must be between {} and {}", d, min, kMaxInt));
      }
      i = static_cast<int64_t>(d);
    }
    if (i < min || i > kMaxInt) fail(key, fmt::format("is {}; it must be between {} and {}", i, min, kMaxInt));
    return i;
  }
  std::optional<int64_t> integer(std::string_view key, int64_t min) const {
    const auto v = get(key);
    if (!v) return std::nullopt;
    return integer(key, *v, min);
  }

  std::optional<bool> boolean(std::string_view key) const {
    const auto v = get(key);
    if (!v) return std::nullopt;
    bool b = false;
    if (v->get_bool().get(b) != simdjson::SUCCESS) fail(key, "must be true or false, " + found(*v));
    return b;
  }

  // A token id or a list of them.
  std::vector<int32_t> ids(std::string_view key) const {
    const auto v = get(key);
    if (!v) return {};
    std::vector<int32_t> out;
    simdjson::dom::array arr;
    if (v->get_array().get(arr) == simdjson::SUCCESS) {
      for (element e : arr) out.push_back(static_cast<int32_t>(id(key, e)));
    } else {
      out.push_back(static_cast<int32_t>(id(key, *v)));
    }
    return out;
  }

 private:
  int64_t id(std::string_view key, element e) const {
    if (!e.is_number()) fail(key, "must be a token id or a list of token ids, " + found(e));
    return integer(key, e, 0);
  }

  element root_;
  const std::string& path_;
};

template <typename T>
void set(DefaultValue<T>& field, T value, std::string_view key) {
  field.value = value;
  field.source = DefaultSource::generation_config;
  field.key = std::string(key);
}

}  // namespace

GenerationDefaults parse(std::string_view json, const std::string& path, std::vector<std::string>* warnings) {
  simdjson::dom::parser parser;
  simdjson::padded_string storage;
  const element root = format::parse_lenient_json(parser, storage, json, path, warnings);
  if (!root.is_object()) {
    throw Error(ErrorCode::format,
                "generation_config.json must hold a JSON object, found " + std::string(format::json_type_name(root.type())),
                {.file = path});
  }
  const Reader r(root, path);
  GenerationDefaults out;
  out.has_file = true;
  for (const auto& k : kNumbers) {
    const auto v = r.number(k.key);
    if (!v) continue;
    if (!std::isfinite(*v) || *v < k.min || (k.min_open && *v == k.min) || *v > k.max) {
      const std::string range = k.max == kInf ? fmt::format("{} {}", k.min_open ? "above" : "at least", k.min)
                                              : fmt::format("between {} and {}", k.min, k.max);
      r.fail(k.key, fmt::format("is {}; it must be {}", *v, range));
    }
    set(out.*k.field, static_cast<float>(*v), k.key);
  }
  for (const auto& k : kIntegers) {
    const auto v = r.integer(k.key, k.min);
    if (!v || (out.*k.field).from_file()) continue;
    set(out.*k.field, static_cast<int32_t>(*v), k.key);
  }
  // do_sample false is greedy decoding whatever the temperature says.
  if (r.boolean("do_sample") == false) set(out.temperature, 0.0f, "do_sample");
  out.eos_token_ids = r.ids("eos_token_id");
  return out;
}

}  // namespace loom::generation_config
