// Internal: the evaluator's state during one render, and the builtin tables (filters,
// tests, globals, methods of str/dict/list) it dispatches to.
//
// One Interp per render() call: renders on different threads never share one. The limits
// keep a hostile template from exhausting the host: loop iterations, macro calls and the
// characters of strings it iterates share one budget, strings are capped in size and in
// total bytes built, lists in items, macros in call depth.
#pragma once

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "template/ast.hpp"
#include "template/value.hpp"

namespace loom::tmpl {

// Items of any one list a template builds (range, list repetition and concatenation).
inline constexpr size_t kMaxListItems = 1'000'000;

struct Limits {
  uint64_t max_steps = 1'000'000;          // loop iterations + macro calls + iterated characters
  size_t max_string = 16u << 20;           // any one string, the output included
  uint64_t max_built = 128ull << 20;       // bytes of strings built over the whole render
  int max_call_depth = 64;                 // nested macro calls
};

// A failure during rendering; the renderer adds the template name and position.
struct EvalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Frame {
  std::vector<std::pair<std::string, Value>> vars;
  const Frame* parent = nullptr;

  const Value* find(std::string_view name) const {
    for (const Frame* f = this; f != nullptr; f = f->parent) {
      for (const auto& [k, v] : f->vars) {
        if (k == name) return &v;
      }
    }
    return nullptr;
  }
  void set(std::string name, Value v) {
    for (auto& [k, old] : vars) {
      if (k == name) {
        old = std::move(v);
        return;
      }
    }
    vars.emplace_back(std::move(name), std::move(v));
  }
};

struct Interp {
  const Program* program = nullptr;
  Limits limits;
  Frame root;  // globals and the template's top-level variables
  std::chrono::system_clock::time_point now;
  Pos pos;     // where evaluation is, for error messages
  uint64_t steps = 0;
  uint64_t built = 0;
  int call_depth = 0;

  // Counts `n` units of work against max_steps: one per loop iteration and macro call,
  // one per character of a string the template iterates (iterate()). The characters count
  // because the byte limits alone did not bound the work: a hostile template that joined
  // its own output character by character built a few megabytes but made millions of
  // one-character strings (a fuzzing timeout: 24 s and 1.8 GB under the sanitizers).
  void step(uint64_t n = 1) {
    steps += n;
    if (steps > limits.max_steps) {
      throw EvalError("the template ran more than " + std::to_string(limits.max_steps) +
                      " loop iterations, macro calls and iterated characters (limit)");
    }
  }
  // Accounts for a string the template builds; throws past the limits.
  Value str(std::string s) {
    note_built(s.size());
    return Value::string(std::move(s));
  }
  void note_built(size_t n) {
    built += n;
    if (n > limits.max_string) {
      throw EvalError("the template built a string of more than " +
                      std::to_string(limits.max_string) + " bytes (limit)");
    }
    if (built > limits.max_built) {
      throw EvalError("the template built more than " + std::to_string(limits.max_built) +
                      " bytes of strings (limit)");
    }
  }
};

// ---- evaluation (eval.cpp) ----
Value eval(Interp& in, const Expr& e, Frame& frame);
void render_body(Interp& in, const Body& body, Frame& frame, std::string& out);
// Attribute and item access with Jinja2's fallbacks (obj.x tries the attribute, then the
// item; obj['x'] the other way round); missing ones are undefined.
Value get_attr(Interp& in, const Value& obj, const std::string& name);
Value get_item(Interp& in, const Value& obj, const Value& key);
Value call_value(Interp& in, const Value& fn, Args& args);
// Python iteration: a list's items, a dict's keys, a string's characters, nothing for undefined.
// A string's characters count against the render's steps (Interp::step).
List iterate(Interp& in, const Value& v);
[[noreturn]] void fail_undefined(const Value& v);

// ---- builtins (builtins.cpp) ----
using FilterFn = Value (*)(Interp&, const Value&, Args&);
using TestFn = bool (*)(Interp&, const Value&, Args&);
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);
void install_globals(Frame& root);
// A method of a str, dict or list value bound to it; undefined when there is none.
Value find_method(Interp& in, const Value& obj, const std::string& name);

// Argument helpers: positional index `k` or keyword `name`, else `fallback`.
const Value* arg(const Args& args, size_t k, std::string_view name);
Value arg_or(const Args& args, size_t k, std::string_view name, Value fallback);

}  // namespace loom::tmpl
