// Internal: the values a chat template computes with, and how Python prints them.
//
// Jinja2 templates run on Python objects; this is the subset real templates meet: None,
// bool, int, float, str, list, tuple, dict (insertion-ordered, any key), Jinja's
// namespace() and Undefined, and callables (macros, globals, bound methods). Containers are
// shared and never mutated after construction (the sandbox is immutable), except a
// namespace's attributes, which `set ns.x = ...` assigns.
//
// Printing follows Python exactly where templates can observe it: str() for `{{ x }}`,
// repr() inside containers (`[1, 'a']`, `{'k': None}`), float repr (shortest round trip,
// exponent from 1e16 and below 1e-4), and json.dumps for tojson.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace loom::tmpl {

struct Value;
struct Interp;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<Value, Value>>;  // insertion order, unique keys

struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

struct Callable {
  std::string name;
  std::function<Value(Interp&, Args&)> fn;
};

enum class Kind : uint8_t { undefined, none, boolean, integer, floating, string, list, tuple,
                            dict, ns, callable };

struct Value {
  Kind kind = Kind::undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::shared_ptr<const std::string> s;  // string; for undefined, why (the error to raise)
  std::shared_ptr<const List> list;      // list, tuple
  std::shared_ptr<Dict> dict;            // dict; namespace attributes (mutable)
  std::shared_ptr<const Callable> fn;

  static Value undefined(std::string why = {});
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value floating(double v);
  static Value string(std::string v);
  static Value make_list(List v);
  static Value make_tuple(List v);
  static Value make_dict(Dict v);
  static Value make_namespace(Dict v);
  static Value callable(std::string name, std::function<Value(Interp&, Args&)> fn);

  bool is_undefined() const { return kind == Kind::undefined; }
  bool is_none() const { return kind == Kind::none; }
  bool is_string() const { return kind == Kind::string; }
  bool is_number() const {
    return kind == Kind::integer || kind == Kind::floating || kind == Kind::boolean;
  }
  bool is_sequence() const { return kind == Kind::list || kind == Kind::tuple; }
  bool is_mapping() const { return kind == Kind::dict; }
  const std::string& str() const { return *s; }  // only when is_string()
  double as_double() const;                      // only when is_number()
};

// Python's type name, as error messages say it ("dict object", "str").
std::string_view type_name(const Value& v);
bool truthy(const Value& v);
// Python ==, with int/float/bool comparing numerically.
bool equal(const Value& a, const Value& b);
// Python <; throws std::invalid_argument with Python's message for unorderable types.
bool less(const Value& a, const Value& b);

// str(v): what `{{ v }}` prints (undefined prints nothing).
std::string to_str(const Value& v);
// repr(v).
void append_repr(std::string& out, const Value& v, int depth = 0);
std::string repr_float(double v);
std::string repr_string(std::string_view s);

struct JsonStyle {
  std::string indent;        // empty with has_indent: newlines, no indent (indent=0)
  bool has_indent = false;
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};
// json.dumps(v, ensure_ascii=False, ...); throws std::invalid_argument for what JSON cannot hold.
void append_json(std::string& out, const Value& v, const JsonStyle& style, int level = 0);

// Dictionary lookup by key (Python ==); nullptr when absent.
const Value* dict_find(const Dict& d, const Value& key);
const Value* dict_find(const Dict& d, std::string_view key);

// UTF-8 helpers: strings index and slice by code point, as Python's str does.
std::vector<std::string_view> code_points(std::string_view s);
size_t code_point_count(std::string_view s);

}  // namespace loom::tmpl
