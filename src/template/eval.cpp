// The evaluator: walks the parsed template with Jinja2's semantics (scoping of for loops and
// macros, Undefined, Python operators) and appends the rendering to a string.
#include <cmath>
#include <limits>

#include "template/interp.hpp"

namespace loom::tmpl {

namespace {

// True when `v` holds (at any depth) the dictionary `target`: storing it there would make
// a reference cycle, which shared ownership never frees. Very deep values count as holding
// it (refused rather than walked without end).
bool holds(const Value& v, const Dict* target, int depth = 0) {
  if (depth > 256) return true;
  if (v.dict) {
    if (v.dict.get() == target) return true;
    for (const auto& [key, item] : *v.dict) {
      if (holds(item, target, depth + 1)) return true;
    }
  }
  if (v.list) {
    for (const auto& item : *v.list) {
      if (holds(item, target, depth + 1)) return true;
    }
  }
  return false;
}

enum class Flow : uint8_t { normal, break_, continue_ };

[[noreturn]] void type_error(const std::string& op, const Value& a, const Value& b) {
  throw EvalError("unsupported operand type(s) for " + op + ": '" + std::string(type_name(a)) +
                  "' and '" + std::string(type_name(b)) + "'");
}

bool is_int(const Value& v) { return v.kind == Kind::integer || v.kind == Kind::boolean; }
int64_t int_of(const Value& v) { return v.kind == Kind::boolean ? v.b : v.i; }

Value int_result(bool overflow, int64_t r) {
  if (overflow) throw EvalError("integer overflow");
  return Value::integer(r);
}

Value repeat(Interp& in, const Value& seq, int64_t n) {
  if (n <= 0) return seq.is_string() ? Value::string({}) : seq.kind == Kind::tuple ? Value::make_tuple({}) : Value::make_list({});
  if (seq.is_string()) {
    const size_t each = seq.str().size();
    if (each != 0 && static_cast<uint64_t>(n) > in.limits.max_string / each) in.note_built(in.limits.max_string + 1);
    std::string out;
    out.reserve(each * static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) out += seq.str();
    return in.str(std::move(out));
  }
  const size_t each = seq.list->size();
  if (each != 0 && static_cast<uint64_t>(n) > kMaxListItems / each) throw EvalError("list repetition too large (limit)");
  List out;
  for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq.list->begin(), seq.list->end());
  return seq.kind == Kind::tuple ? Value::make_tuple(std::move(out)) : Value::make_list(std::move(out));
}

double py_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

Value binop(Interp& in, const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    if (a.is_undefined() && a.s && false) fail_undefined(a);
    std::string s = to_str(a);
    s += to_str(b);
    return in.str(std::move(s));
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  const bool nums = a.is_number() && b.is_number();
  const bool ints = is_int(a) && is_int(b);
  int64_t r = 0;
  if (op == "+") {
    if (ints) {
      const bool overflow = __builtin_add_overflow(int_of(a), int_of(b), &r);
      return int_result(overflow, r);
    }
    if (nums) return Value::floating(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) return in.str(a.str() + b.str());
    if (a.is_sequence() && a.kind == b.kind) {
      if (a.list->size() + b.list->size() > kMaxListItems) throw EvalError("list too large (limit)");
      List out = *a.list;
      out.insert(out.end(), b.list->begin(), b.list->end());
      return a.kind == Kind::tuple ? Value::make_tuple(std::move(out)) : Value::make_list(std::move(out));
    }
    if (a.is_string()) {
      throw EvalError("can only concatenate str (not \"" +
                      std::string(type_name(b)) + "\") to str");
    }
    type_error(op, a, b);
  }
  if (op == "-") {
    if (ints) {
      const bool overflow = __builtin_sub_overflow(int_of(a), int_of(b), &r);
      return int_result(overflow, r);
    }
    if (nums) return Value::floating(a.as_double() - b.as_double());
    type_error(op, a, b);
  }
  if (op == "*") {
    if (ints) {
      const bool overflow = __builtin_mul_overflow(int_of(a), int_of(b), &r);
      return int_result(overflow, r);
    }
    if (nums) return Value::floating(a.as_double() * b.as_double());
    if ((a.is_string() || a.is_sequence()) && is_int(b)) return repeat(in, a, int_of(b));
    if ((b.is_string() || b.is_sequence()) && is_int(a)) return repeat(in, b, int_of(a));
    type_error(op, a, b);
  }
  if (!nums) type_error(op, a, b);
  if (op == "/") {
    if (b.as_double() == 0) throw EvalError("division by zero");
    return Value::floating(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (ints) {
      const int64_t x = int_of(a), y = int_of(b);
      if (y == 0) throw EvalError(op == "%" ? "integer modulo by zero" : "integer division or modulo by zero");
      if (x == std::numeric_limits<int64_t>::min() && y == -1) {
        if (op == "%") return Value::integer(0);
        throw EvalError("integer overflow");
      }
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return Value::integer(op == "//" ? q : m);
    }
    const double x = a.as_double(), y = b.as_double();
    if (y == 0) throw EvalError("float division by zero");
    const double m = py_fmod(x, y);
    return Value::floating(op == "%" ? m : std::round((x - m) / y));
  }
  if (op == "**") {
    if (ints && int_of(b) >= 0) {
      int64_t base = int_of(a), e = int_of(b), acc = 1;
      while (e > 0) {
        if (e & 1) {
          if (__builtin_mul_overflow(acc, base, &acc)) throw EvalError("integer overflow");
        }
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) throw EvalError("integer overflow");
      }
      return Value::integer(acc);
    }
    if (a.as_double() == 0 && b.as_double() < 0) throw EvalError("0.0 cannot be raised to a negative power");
    return Value::floating(std::pow(a.as_double(), b.as_double()));
  }
  throw EvalError("unknown operator " + op);
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case Kind::undefined: return false;
    case Kind::string:
      if (!item.is_string()) {
        throw EvalError("'in <string>' requires string as left operand, not " + std::string(type_name(item)));
      }
      return container.str().find(item.str()) != std::string::npos;
    case Kind::list:
    case Kind::tuple:
      for (const Value& v : *container.list) {
        if (equal(v, item)) return true;
      }
      return false;
    case Kind::dict: return dict_find(*container.dict, item) != nullptr;
    default:
      throw EvalError("argument of type '" + std::string(type_name(container)) + "' is not iterable");
  }
}

bool compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equal(a, b);
  if (op == "!=") return !equal(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  try {
    if (op == "<") return less(a, b);
    if (op == ">") return less(b, a);
    if (op == "<=") return !less(b, a);
    if (op == ">=") return !less(a, b);
  } catch (const std::invalid_argument& e) {
    std::string msg = e.what();
    const size_t at = msg.find("'<'");
    if (at != std::string::npos) msg.replace(at, 3, "'" + op + "'");
    throw EvalError(msg);
  }
  throw EvalError("unknown comparison " + op);
}

Args eval_args(Interp& in, const Expr& e, Frame& frame, size_t first) {
  Args args;
  for (size_t k = first; k < e.args.size(); ++k) args.pos.push_back(eval(in, *e.args[k], frame));
  for (const auto& [key, value] : e.kwargs) args.kw.emplace_back(key, eval(in, *value, frame));
  return args;
}

int64_t slice_index(const Value* v, int64_t fallback) {
  if (v == nullptr || v->is_none()) return fallback;
  if (!is_int(*v)) throw EvalError("slice indices must be integers or None");
  return int_of(*v);
}

Value do_slice(const Value& obj, const Value* start_v, const Value* stop_v, const Value* step_v) {
  const int64_t step = slice_index(step_v, 1);
  if (step == 0) throw EvalError("slice step cannot be zero");
  std::vector<std::string_view> chars;
  int64_t n = 0;
  if (obj.is_string()) {
    chars = code_points(obj.str());
    n = static_cast<int64_t>(chars.size());
  } else if (obj.is_sequence()) {
    n = static_cast<int64_t>(obj.list->size());
  } else if (obj.is_undefined()) {
    fail_undefined(obj);
  } else {
    throw EvalError("'" + std::string(type_name(obj)) + "' object is not subscriptable");
  }
  // Python's slice.indices()
  auto clamp = [&](int64_t i, bool is_start) {
    if (i < 0) {
      i += n;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= n) {
      i = step < 0 ? n - 1 : n;
    }
    (void)is_start;
    return i;
  };
  int64_t start = start_v && !start_v->is_none() ? clamp(slice_index(start_v, 0), true) : (step < 0 ? n - 1 : 0);
  int64_t stop = stop_v && !stop_v->is_none() ? clamp(slice_index(stop_v, 0), false) : (step < 0 ? -1 : n);
  std::string s;
  List items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (obj.is_string()) s += chars[static_cast<size_t>(i)];
    else items.push_back((*obj.list)[static_cast<size_t>(i)]);
  }
  if (obj.is_string()) return Value::string(std::move(s));
  return obj.kind == Kind::tuple ? Value::make_tuple(std::move(items)) : Value::make_list(std::move(items));
}

Value loop_object(const List& items, size_t k, const Value& cycle_fn) {
  const auto n = static_cast<int64_t>(items.size());
  const auto i = static_cast<int64_t>(k);
  // The keys are built once: a loop object is made for every iteration.
  static const std::vector<Value> kKeys = [] {
    std::vector<Value> keys;
    for (const char* key : {"index", "index0", "revindex", "revindex0", "first", "last", "length",
                          "depth", "depth0", "previtem", "nextitem", "cycle"}) {
      keys.push_back(Value::string(key));
    }
    return keys;
  }();
  Dict d;
  d.reserve(kKeys.size());
  auto put = [&](const char*, Value v) { d.emplace_back(kKeys[d.size()], std::move(v)); };
  put("index", Value::integer(i + 1));
  put("index0", Value::integer(i));
  put("revindex", Value::integer(n - i));
  put("revindex0", Value::integer(n - i - 1));
  put("first", Value::boolean(i == 0));
  put("last", Value::boolean(i == n - 1));
  put("length", Value::integer(n));
  put("depth", Value::integer(1));
  put("depth0", Value::integer(0));
  put("previtem", k > 0 ? items[k - 1] : Value::undefined("there is no previous item"));
  put("nextitem", k + 1 < items.size() ? items[k + 1] : Value::undefined("there is no next item"));
  put("cycle", cycle_fn);
  return Value::make_namespace(std::move(d));
}

void assign_targets(Interp& in, const std::vector<std::string>& targets, const Value& v, Frame& frame) {
  if (targets.size() == 1) {
    frame.set(targets[0], v);
    return;
  }
  List parts = iterate(in, v);
  if (parts.size() != targets.size()) {
    throw EvalError(parts.size() < targets.size()
                        ? "not enough values to unpack (expected " + std::to_string(targets.size()) +
                              ", got " + std::to_string(parts.size()) + ")"
                        : "too many values to unpack (expected " + std::to_string(targets.size()) + ")");
  }
  for (size_t k = 0; k < targets.size(); ++k) frame.set(targets[k], parts[k]);
}

Flow exec(Interp& in, const Body& body, Frame& frame, std::string& out);

void append_out(Interp& in, std::string& out, std::string_view text) {
  if (out.size() + text.size() > in.limits.max_string) {
    throw EvalError("the rendering exceeds " + std::to_string(in.limits.max_string) + " bytes (limit)");
  }
  out.append(text);
}

Value make_macro(Interp& in, const Stmt& s, const Frame* scope) {
  (void)in;
  const Stmt* def = &s;
  return Value::callable(s.text, [def, scope](Interp& it, Args& args) -> Value {
    it.step();
    if (it.call_depth >= it.limits.max_call_depth) {
      throw EvalError("macro calls nested deeper than " + std::to_string(it.limits.max_call_depth) + " (limit)");
    }
    Frame frame;
    frame.parent = scope;
    const auto& params = def->params;
    List varargs;
    for (size_t k = 0; k < args.pos.size(); ++k) {
      if (k < params.size()) frame.set(params[k].name, args.pos[k]);
      else varargs.push_back(args.pos[k]);
    }
    Dict kwargs;
    for (auto& [key, value] : args.kw) {
      bool known = key == "caller";
      for (const Param& p : params) known = known || p.name == key;
      if (known) frame.set(key, value);
      else kwargs.emplace_back(Value::string(key), value);
    }
    for (const Param& p : params) {
      bool bound = false;
      for (const auto& [k, v] : frame.vars) bound = bound || k == p.name;
      if (bound) continue;
      frame.set(p.name, p.default_value ? eval(it, *p.default_value, frame)
                                        : Value::undefined("parameter '" + p.name + "' was not provided"));
    }
    frame.set("varargs", Value::make_tuple(std::move(varargs)));
    frame.set("kwargs", Value::make_dict(std::move(kwargs)));
    std::string out;
    ++it.call_depth;
    try {
      render_body(it, def->bodies[0], frame, out);
    } catch (...) {
      --it.call_depth;
      throw;
    }
    --it.call_depth;
    return it.str(std::move(out));
  });
}

Flow exec_for(Interp& in, const Stmt& s, Frame& frame, std::string& out) {
  if (s.recursive) throw EvalError("recursive for loops are not supported");
  in.pos = s.pos;
  const Value seq = eval(in, *s.expr, frame);
  List items = iterate(in, seq);
  if (s.filter_cond) {
    List kept;
    for (Value& item : items) {
      Frame f;
      f.parent = &frame;
      in.step();
      assign_targets(in, s.targets, item, f);
      if (truthy(eval(in, *s.filter_cond, f))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    Frame f;
    f.parent = &frame;
    return exec(in, s.else_body, f, out) == Flow::break_ ? Flow::normal : Flow::normal;
  }
  auto counter = std::make_shared<size_t>(0);
  const Value cycle = Value::callable("cycle", [counter](Interp&, Args& args) -> Value {
    if (args.pos.empty()) throw EvalError("no items for cycling given");
    return args.pos[*counter % args.pos.size()];
  });
  for (size_t k = 0; k < items.size(); ++k) {
    in.step();
    *counter = k;
    Frame f;
    f.parent = &frame;
    f.vars.reserve(4);
    f.set("loop", loop_object(items, k, cycle));
    assign_targets(in, s.targets, items[k], f);
    if (exec(in, s.bodies[0], f, out) == Flow::break_) break;
  }
  return Flow::normal;
}

Value apply_block_filters(Interp& in, const Stmt& s, Frame& frame, std::string text) {
  Value v = in.str(std::move(text));
  for (const ExprPtr& chain : s.filters) {
    Frame f;
    f.parent = &frame;
    f.set(kBlockValue, v);
    v = eval(in, *chain, f);
  }
  return v;
}

Flow exec(Interp& in, const Body& body, Frame& frame, std::string& out) {
  for (const auto& sp : body) {
    const Stmt& s = *sp;
    in.pos = s.pos;
    switch (s.kind) {
      case StmtKind::text: append_out(in, out, s.text); break;
      case StmtKind::output: {
        const Value v = eval(in, *s.expr, frame);
        append_out(in, out, to_str(v));
        break;
      }
      case StmtKind::if_: {
        bool done = false;
        for (size_t k = 0; k < s.conds.size() && !done; ++k) {
          if (truthy(eval(in, *s.conds[k], frame))) {
            done = true;
            const Flow f = exec(in, s.bodies[k], frame, out);
            if (f != Flow::normal) return f;
          }
        }
        if (!done) {
          const Flow f = exec(in, s.else_body, frame, out);
          if (f != Flow::normal) return f;
        }
        break;
      }
      case StmtKind::for_: exec_for(in, s, frame, out); break;
      case StmtKind::set: {
        Value v = eval(in, *s.expr, frame);
        if (!s.attr.empty()) {
          const Value* ns = frame.find(s.targets[0]);
          if (ns == nullptr || ns->kind != Kind::ns) {
            throw EvalError("cannot assign attribute on non-namespace object");
          }
          Dict& d = *ns->dict;
          if (holds(v, &d)) throw EvalError("a namespace cannot hold itself ('" + s.attr + "')");
          bool found = false;
          for (auto& [k, old] : d) {
            if (k.is_string() && k.str() == s.attr) {
              old = std::move(v);
              found = true;
              break;
            }
          }
          if (!found) d.emplace_back(Value::string(s.attr), std::move(v));
        } else {
          assign_targets(in, s.targets, v, frame);
        }
        break;
      }
      case StmtKind::set_block: {
        std::string text;
        Frame f;
        f.parent = &frame;
        exec(in, s.bodies[0], f, text);
        frame.set(s.targets[0], apply_block_filters(in, s, frame, std::move(text)));
        break;
      }
      case StmtKind::macro: frame.set(s.text, make_macro(in, s, &in.root)); break;
      case StmtKind::call_block: {
        const Expr& call = *s.expr;
        Value fn = eval(in, *call.args[0], frame);
        Args args = eval_args(in, call, frame, 1);
        Stmt caller_def;
        const Stmt* def = &s;
        const Frame* scope = &frame;
        args.kw.emplace_back("caller", Value::callable("caller", [def, scope](Interp& it, Args& a) -> Value {
          Frame f;
          f.parent = scope;
          for (size_t k = 0; k < def->params.size(); ++k) {
            const Value* v = arg(a, k, def->params[k].name);
            f.set(def->params[k].name, v ? *v : def->params[k].default_value ? eval(it, *def->params[k].default_value, f) : Value::undefined());
          }
          std::string text;
          render_body(it, def->bodies[0], f, text);
          return it.str(std::move(text));
        }));
        in.pos = s.pos;
        append_out(in, out, to_str(call_value(in, fn, args)));
        break;
      }
      case StmtKind::filter_block: {
        std::string text;
        Frame f;
        f.parent = &frame;
        exec(in, s.bodies[0], f, text);
        append_out(in, out, to_str(apply_block_filters(in, s, frame, std::move(text))));
        break;
      }
      case StmtKind::break_: return Flow::break_;
      case StmtKind::continue_: return Flow::continue_;
    }
  }
  return Flow::normal;
}

}  // namespace

[[noreturn]] void fail_undefined(const Value& v) {
  throw EvalError(v.s ? *v.s : std::string("value is undefined"));
}

List iterate(Interp& in, const Value& v) {
  switch (v.kind) {
    case Kind::undefined: return {};
    case Kind::list:
    case Kind::tuple: return *v.list;
    case Kind::dict: {
      List keys;
      keys.reserve(v.dict->size());
      for (const auto& [k, value] : *v.dict) keys.push_back(k);
      return keys;
    }
    case Kind::string: {
      in.step(code_point_count(v.str()));  // before anything is built
      List chars;
      for (std::string_view c : code_points(v.str())) chars.push_back(Value::string(std::string(c)));
      return chars;
    }
    default:
      throw EvalError("'" + std::string(type_name(v)) + "' object is not iterable");
  }
}

namespace {
std::string object_name(const Value& obj) {
  if (obj.is_none()) return "'None'";
  return "'" + std::string(type_name(obj)) + " object'";
}
}  // namespace

Value get_attr(Interp& in, const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.kind == Kind::ns) {
    const Value* v = dict_find(*obj.dict, name);
    return v ? *v : Value::undefined("'Namespace object' has no attribute '" + name + "'");
  }
  Value m = find_method(in, obj, name);
  if (!m.is_undefined()) return m;
  if (obj.kind == Kind::dict) {
    const Value* v = dict_find(*obj.dict, name);
    if (v) return *v;
  }
  return Value::undefined(object_name(obj) + " has no attribute '" + name + "'");
}

Value get_item(Interp& in, const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  switch (obj.kind) {
    case Kind::dict: {
      const Value* v = dict_find(*obj.dict, key);
      if (v) return *v;
      break;
    }
    case Kind::list:
    case Kind::tuple:
      if (is_int(key)) {
        int64_t i = int_of(key);
        const auto n = static_cast<int64_t>(obj.list->size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return (*obj.list)[static_cast<size_t>(i)];
        return Value::undefined(object_name(obj) + " has no element " + std::to_string(int_of(key)));
      }
      break;
    case Kind::string:
      if (is_int(key)) {
        const auto chars = code_points(obj.str());
        int64_t i = int_of(key);
        const auto n = static_cast<int64_t>(chars.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return Value::string(std::string(chars[static_cast<size_t>(i)]));
        return Value::undefined("'str object' has no element " + std::to_string(int_of(key)));
      }
      break;
    default: break;
  }
  if (key.is_string()) return get_attr(in, obj, key.str());
  std::string k;
  append_repr(k, key);
  return Value::undefined(object_name(obj) + " has no attribute " + k);
}

Value call_value(Interp& in, const Value& fn, Args& args) {
  if (fn.is_undefined()) fail_undefined(fn);
  if (fn.kind != Kind::callable) throw EvalError("'" + std::string(type_name(fn)) + "' object is not callable");
  return fn.fn->fn(in, args);
}

Value eval(Interp& in, const Expr& e, Frame& frame) {
  switch (e.kind) {
    case ExprKind::literal: return e.value;
    case ExprKind::name: {
      const Value* v = frame.find(e.name);
      return v ? *v : Value::undefined("'" + e.name + "' is undefined");
    }
    case ExprKind::attr: {
      const Value obj = eval(in, *e.args[0], frame);
      in.pos = e.pos;
      return get_attr(in, obj, e.name);
    }
    case ExprKind::item: {
      const Value obj = eval(in, *e.args[0], frame);
      const Value key = eval(in, *e.args[1], frame);
      in.pos = e.pos;
      return get_item(in, obj, key);
    }
    case ExprKind::slice: {
      const Value obj = eval(in, *e.args[0], frame);
      Value parts[3];
      for (int k = 0; k < 3; ++k) {
        if (e.args[k + 1]) parts[k] = eval(in, *e.args[k + 1], frame);
      }
      in.pos = e.pos;
      return do_slice(obj, e.args[1] ? &parts[0] : nullptr, e.args[2] ? &parts[1] : nullptr,
                      e.args[3] ? &parts[2] : nullptr);
    }
    case ExprKind::neg:
    case ExprKind::pos: {
      const Value v = eval(in, *e.args[0], frame);
      in.pos = e.pos;
      if (v.is_undefined()) fail_undefined(v);
      if (!v.is_number()) {
        throw EvalError(std::string("bad operand type for unary ") + (e.kind == ExprKind::neg ? "-" : "+") +
                        ": '" + std::string(type_name(v)) + "'");
      }
      if (e.kind == ExprKind::pos) return is_int(v) ? Value::integer(int_of(v)) : v;
      if (is_int(v)) {
        if (int_of(v) == std::numeric_limits<int64_t>::min()) throw EvalError("integer overflow");
        return Value::integer(-int_of(v));
      }
      return Value::floating(-v.f);
    }
    case ExprKind::not_: return Value::boolean(!truthy(eval(in, *e.args[0], frame)));
    case ExprKind::binop: {
      const Value a = eval(in, *e.args[0], frame);
      const Value b = eval(in, *e.args[1], frame);
      in.pos = e.pos;
      return binop(in, e.name, a, b);
    }
    case ExprKind::compare: {
      Value left = eval(in, *e.args[0], frame);
      for (size_t k = 0; k < e.ops.size(); ++k) {
        Value right = eval(in, *e.args[k + 1], frame);
        in.pos = e.pos;
        if (!compare(e.ops[k], left, right)) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case ExprKind::and_: {
      Value a = eval(in, *e.args[0], frame);
      return truthy(a) ? eval(in, *e.args[1], frame) : a;
    }
    case ExprKind::or_: {
      Value a = eval(in, *e.args[0], frame);
      return truthy(a) ? a : eval(in, *e.args[1], frame);
    }
    case ExprKind::cond:
      if (truthy(eval(in, *e.args[0], frame))) return eval(in, *e.args[1], frame);
      return e.args[2] ? eval(in, *e.args[2], frame) : Value::undefined("the condition was false and there is no else");
    case ExprKind::list:
    case ExprKind::tuple: {
      List items;
      items.reserve(e.args.size());
      for (const ExprPtr& a : e.args) items.push_back(eval(in, *a, frame));
      return e.kind == ExprKind::list ? Value::make_list(std::move(items)) : Value::make_tuple(std::move(items));
    }
    case ExprKind::dict: {
      Dict d;
      for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
        Value key = eval(in, *e.args[k], frame);
        Value value = eval(in, *e.args[k + 1], frame);
        bool replaced = false;
        for (auto& [old_key, old_value] : d) {
          if (equal(old_key, key)) {
            old_value = value;
            replaced = true;
          }
        }
        if (!replaced) d.emplace_back(std::move(key), std::move(value));
      }
      return Value::make_dict(std::move(d));
    }
    case ExprKind::call: {
      const Value fn = eval(in, *e.args[0], frame);
      Args args = eval_args(in, e, frame, 1);
      in.pos = e.pos;
      return call_value(in, fn, args);
    }
    case ExprKind::filter: {
      const Value v = eval(in, *e.args[0], frame);
      Args args = eval_args(in, e, frame, 1);
      in.pos = e.pos;
      const FilterFn f = find_filter(e.name);
      if (f == nullptr) throw EvalError("no filter named '" + e.name + "'");
      return f(in, v, args);
    }
    case ExprKind::test: {
      const Value v = eval(in, *e.args[0], frame);
      Args args = eval_args(in, e, frame, 1);
      in.pos = e.pos;
      const TestFn t = find_test(e.name);
      if (t == nullptr) throw EvalError("no test named '" + e.name + "'");
      return Value::boolean(t(in, v, args) != e.negated);
    }
  }
  return Value::undefined();
}

void render_body(Interp& in, const Body& body, Frame& frame, std::string& out) {
  exec(in, body, frame, out);
}

}  // namespace loom::tmpl
