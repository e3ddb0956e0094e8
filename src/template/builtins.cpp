// The builtin filters, tests, globals and methods (of str, dict, list) that chat templates
// use, each behaving as Jinja2 3.1's (and Python's) does. Tables map names to functions.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <ctime>

#include "template/interp.hpp"

namespace loom::tmpl {

const Value* arg(const Args& args, size_t k, std::string_view name) {
  if (k < args.pos.size()) return &args.pos[k];
  for (const auto& [key, v] : args.kw) {
    if (key == name) return &v;
  }
  return nullptr;
}

Value arg_or(const Args& args, size_t k, std::string_view name, Value fallback) {
  const Value* v = arg(args, k, name);
  return v ? *v : std::move(fallback);
}

namespace {

bool is_int(const Value& v) { return v.kind == Kind::integer || v.kind == Kind::boolean; }
int64_t int_of(const Value& v) { return v.kind == Kind::boolean ? v.b : v.i; }

const std::string& need_str(const Value& v, const char* what) {
  if (!v.is_string()) {
    throw EvalError(std::string(what) + " expects a string, not " + std::string(type_name(v)));
  }
  return v.str();
}

int64_t need_int(const Value& v, const char* what) {
  if (!is_int(v)) throw EvalError(std::string(what) + " expects an integer, not " + std::string(type_name(v)));
  return int_of(v);
}

// ---- unicode-light string helpers (ASCII case mapping; Python's whitespace set) ----

bool ws_code_point(std::string_view c) {
  if (c.size() == 1) {
    const auto b = static_cast<unsigned char>(c[0]);
    return b == ' ' || (b >= 0x09 && b <= 0x0D) || (b >= 0x1C && b <= 0x1F);
  }
  static constexpr const char* kUnicodeSpaces[] = {
      "\xC2\x85", "\xC2\xA0", "\xE1\x9A\x80", "\xE2\x80\x80", "\xE2\x80\x81", "\xE2\x80\x82",
      "\xE2\x80\x83", "\xE2\x80\x84", "\xE2\x80\x85", "\xE2\x80\x86", "\xE2\x80\x87",
      "\xE2\x80\x88", "\xE2\x80\x89", "\xE2\x80\x8A", "\xE2\x80\xA8", "\xE2\x80\xA9",
      "\xE2\x80\xAF", "\xE2\x81\x9F", "\xE3\x80\x80"};
  for (const char* s : kUnicodeSpaces) {
    if (c == s) return true;
  }
  return false;
}

std::string strip_impl(const std::string& s, const Value* chars, bool left, bool right) {
  const auto cps = code_points(s);
  std::vector<std::string_view> set;
  const bool custom = chars != nullptr && !chars->is_none();
  std::vector<std::string_view> custom_cps;
  if (custom) custom_cps = code_points(need_str(*chars, "strip"));
  auto strip_me = [&](std::string_view c) {
    if (!custom) return ws_code_point(c);
    return std::find(custom_cps.begin(), custom_cps.end(), c) != custom_cps.end();
  };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip_me(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip_me(cps[e - 1])) --e;
  }
  if (b == e) return {};
  const char* first = cps[b].data();
  const char* last = cps[e - 1].data() + cps[e - 1].size();
  return std::string(first, last);
}

char lower_c(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; }
char upper_c(char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 32) : c; }
bool alpha_c(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

std::string lower(std::string s) {
  for (char& c : s) c = lower_c(c);
  return s;
}
std::string upper(std::string s) {
  for (char& c : s) c = upper_c(c);
  return s;
}
std::string capitalize(std::string s) {
  for (size_t k = 0; k < s.size(); ++k) s[k] = k == 0 ? upper_c(s[k]) : lower_c(s[k]);
  return s;
}
// str.title(): a letter after a letter is lowered, any other letter raised.
std::string py_title(std::string s) {
  bool prev = false;
  for (char& c : s) {
    const bool a = alpha_c(c);
    if (a) c = prev ? lower_c(c) : upper_c(c);
    prev = a || static_cast<unsigned char>(c) >= 0x80;
  }
  return s;
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` between every character and at both ends.
    const auto cps = code_points(s);
    int64_t done = 0;
    for (size_t k = 0; k <= cps.size(); ++k) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      if (k < cps.size()) out += cps[k];
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(from, pos);
    if (at == std::string::npos) break;
    out.append(s, pos, at - pos);
    out += to;
    pos = at + from.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

List split_impl(const std::string& s, const Value* sep_v, int64_t maxsplit, bool from_right) {
  List out;
  const bool by_ws = sep_v == nullptr || sep_v->is_none();
  if (by_ws) {
    const auto cps = code_points(s);
    std::vector<std::pair<size_t, size_t>> words;  // code point ranges
    size_t k = 0;
    while (k < cps.size()) {
      while (k < cps.size() && ws_code_point(cps[k])) ++k;
      if (k >= cps.size()) break;
      const size_t b = k;
      while (k < cps.size() && !ws_code_point(cps[k])) ++k;
      words.emplace_back(b, k);
    }
    auto text = [&](size_t b, size_t e) {
      return b >= e ? std::string() : std::string(cps[b].data(), cps[e - 1].data() + cps[e - 1].size());
    };
    if (maxsplit < 0 || static_cast<size_t>(maxsplit) + 1 >= words.size()) {
      for (auto [b, e] : words) out.push_back(Value::string(text(b, e)));
      return out;
    }
    const auto m = static_cast<size_t>(maxsplit);
    if (!from_right) {
      for (size_t w = 0; w < m; ++w) out.push_back(Value::string(text(words[w].first, words[w].second)));
      std::string rest = text(words[m].first, cps.size());
      out.push_back(Value::string(strip_impl(rest, nullptr, false, true)));
    } else {
      const size_t first_kept = words.size() - m;
      std::string rest = text(0, words[first_kept - 1].second);
      out.push_back(Value::string(strip_impl(rest, nullptr, true, false)));
      for (size_t w = first_kept; w < words.size(); ++w) out.push_back(Value::string(text(words[w].first, words[w].second)));
    }
    return out;
  }
  const std::string& sep = need_str(*sep_v, "split");
  if (sep.empty()) throw EvalError("empty separator");
  std::vector<std::string> parts;
  if (!from_right) {
    size_t pos = 0;
    int64_t done = 0;
    for (;;) {
      const size_t at = (maxsplit < 0 || done < maxsplit) ? s.find(sep, pos) : std::string::npos;
      if (at == std::string::npos) {
        parts.push_back(s.substr(pos));
        break;
      }
      parts.push_back(s.substr(pos, at - pos));
      pos = at + sep.size();
      ++done;
    }
  } else {
    size_t end = s.size();
    int64_t done = 0;
    for (;;) {
      size_t at = std::string::npos;
      if ((maxsplit < 0 || done < maxsplit) && end >= sep.size()) at = s.rfind(sep, end - sep.size());
      if (at == std::string::npos) {
        parts.insert(parts.begin(), s.substr(0, end));
        break;
      }
      parts.insert(parts.begin(), s.substr(at + sep.size(), end - at - sep.size()));
      end = at;
      ++done;
    }
  }
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return out;
}

bool starts_or_ends(const std::string& s, const Value& what, bool start) {
  auto one = [&](const std::string& p) {
    if (p.size() > s.size()) return false;
    return start ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0;
  };
  if (what.is_sequence()) {
    for (const Value& v : *what.list) {
      if (one(need_str(v, start ? "startswith" : "endswith"))) return true;
    }
    return false;
  }
  return one(need_str(what, start ? "startswith" : "endswith"));
}

// Byte offset -> code point index (Python's find returns code point positions).
int64_t cp_index(const std::string& s, size_t byte) {
  return static_cast<int64_t>(code_point_count(std::string_view(s).substr(0, byte)));
}

// Python's str.splitlines() line breaks.
std::vector<std::string> split_lines(const std::string& s, bool keepends) {
  std::vector<std::string> out;
  const auto cps = code_points(s);
  std::string line;
  for (size_t k = 0; k < cps.size(); ++k) {
    const std::string_view c = cps[k];
    const bool brk = c == "\n" || c == "\r" || c == "\v" || c == "\f" || c == "\x1c" || c == "\x1d" ||
                     c == "\x1e" || c == "\xC2\x85" || c == "\xE2\x80\xA8" || c == "\xE2\x80\xA9";
    if (!brk) {
      line += c;
      continue;
    }
    std::string end(c);
    if (c == "\r" && k + 1 < cps.size() && cps[k + 1] == "\n") {
      end += "\n";
      ++k;
    }
    if (keepends) line += end;
    out.push_back(std::move(line));
    line.clear();
  }
  if (!line.empty()) out.push_back(std::move(line));
  return out;
}

// str.format with {} / {0} / {name} fields and no format specs.
std::string py_format(const std::string& fmt, const Args& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t k = 0; k < fmt.size(); ++k) {
    const char c = fmt[k];
    if (c == '{' && k + 1 < fmt.size() && fmt[k + 1] == '{') {
      out += '{';
      ++k;
    } else if (c == '}' && k + 1 < fmt.size() && fmt[k + 1] == '}') {
      out += '}';
      ++k;
    } else if (c == '{') {
      const size_t close = fmt.find('}', k);
      if (close == std::string::npos) throw EvalError("Single '{' encountered in format string");
      const std::string field = fmt.substr(k + 1, close - k - 1);
      const Value* v = nullptr;
      if (field.empty()) {
        v = auto_index < args.pos.size() ? &args.pos[auto_index] : nullptr;
        ++auto_index;
      } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
        const size_t idx = std::stoul(field);
        v = idx < args.pos.size() ? &args.pos[idx] : nullptr;
      } else {
        for (const auto& [key, value] : args.kw) {
          if (key == field) v = &value;
        }
      }
      if (v == nullptr) throw EvalError("format field '" + field + "' has no argument");
      out += to_str(*v);
      k = close;
    } else {
      out += c;
    }
  }
  return out;
}

Value bound(std::string name, std::function<Value(Interp&, Args&)> fn) {
  return Value::callable(std::move(name), std::move(fn));
}

Value str_method(const Value& obj, const std::string& name) {
  const std::shared_ptr<const std::string> sp = obj.s;
  using F = Value (*)(Interp&, const std::string&, Args&);
  static const std::pair<const char*, F> kMethods[] = {
      {"strip", [](Interp& in, const std::string& s, Args& a) { return in.str(strip_impl(s, arg(a, 0, "chars"), true, true)); }},
      {"lstrip", [](Interp& in, const std::string& s, Args& a) { return in.str(strip_impl(s, arg(a, 0, "chars"), true, false)); }},
      {"rstrip", [](Interp& in, const std::string& s, Args& a) { return in.str(strip_impl(s, arg(a, 0, "chars"), false, true)); }},
      {"split", [](Interp&, const std::string& s, Args& a) {
         return Value::make_list(split_impl(s, arg(a, 0, "sep"), need_int(arg_or(a, 1, "maxsplit", Value::integer(-1)), "split"), false)); }},
      {"rsplit", [](Interp&, const std::string& s, Args& a) {
         return Value::make_list(split_impl(s, arg(a, 0, "sep"), need_int(arg_or(a, 1, "maxsplit", Value::integer(-1)), "rsplit"), true)); }},
      {"startswith", [](Interp&, const std::string& s, Args& a) {
         const Value* p = arg(a, 0, "prefix");
         if (!p) throw EvalError("startswith() takes at least 1 argument");
         return Value::boolean(starts_or_ends(s, *p, true)); }},
      {"endswith", [](Interp&, const std::string& s, Args& a) {
         const Value* p = arg(a, 0, "suffix");
         if (!p) throw EvalError("endswith() takes at least 1 argument");
         return Value::boolean(starts_or_ends(s, *p, false)); }},
      {"replace", [](Interp& in, const std::string& s, Args& a) {
         const Value* from = arg(a, 0, "old");
         const Value* to = arg(a, 1, "new");
         if (!from || !to) throw EvalError("replace() takes at least 2 arguments");
         return in.str(replace_all(s, need_str(*from, "replace"), need_str(*to, "replace"),
                                   need_int(arg_or(a, 2, "count", Value::integer(-1)), "replace"))); }},
      {"upper", [](Interp& in, const std::string& s, Args&) { return in.str(upper(s)); }},
      {"lower", [](Interp& in, const std::string& s, Args&) { return in.str(lower(s)); }},
      {"title", [](Interp& in, const std::string& s, Args&) { return in.str(py_title(s)); }},
      {"capitalize", [](Interp& in, const std::string& s, Args&) { return in.str(capitalize(s)); }},
      {"find", [](Interp&, const std::string& s, Args& a) {
         const size_t at = s.find(need_str(arg_or(a, 0, "sub", Value::string({})), "find"));
         return Value::integer(at == std::string::npos ? -1 : cp_index(s, at)); }},
      {"rfind", [](Interp&, const std::string& s, Args& a) {
         const size_t at = s.rfind(need_str(arg_or(a, 0, "sub", Value::string({})), "rfind"));
         return Value::integer(at == std::string::npos ? -1 : cp_index(s, at)); }},
      {"count", [](Interp&, const std::string& s, Args& a) {
         const std::string sub = need_str(arg_or(a, 0, "sub", Value::string({})), "count");
         if (sub.empty()) return Value::integer(static_cast<int64_t>(code_point_count(s)) + 1);
         int64_t n = 0;
         for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
         return Value::integer(n); }},
      {"join", [](Interp& in, const std::string& s, Args& a) {
         std::string out;
         const List items = iterate(in, arg_or(a, 0, "iterable", Value::make_list({})));
         for (size_t k = 0; k < items.size(); ++k) {
           if (k) out += s;
           out += need_str(items[k], "join");
         }
         return in.str(std::move(out)); }},
      {"splitlines", [](Interp&, const std::string& s, Args& a) {
         List out;
         for (auto& l : split_lines(s, truthy(arg_or(a, 0, "keepends", Value::boolean(false))))) out.push_back(Value::string(std::move(l)));
         return Value::make_list(std::move(out)); }},
      {"format", [](Interp& in, const std::string& s, Args& a) { return in.str(py_format(s, a)); }},
      {"removeprefix", [](Interp&, const std::string& s, Args& a) {
         const std::string& p = need_str(arg_or(a, 0, "prefix", Value::string({})), "removeprefix");
         return Value::string(s.compare(0, p.size(), p) == 0 ? s.substr(p.size()) : s); }},
      {"removesuffix", [](Interp&, const std::string& s, Args& a) {
         const std::string& p = need_str(arg_or(a, 0, "suffix", Value::string({})), "removesuffix");
         const bool has = !p.empty() && p.size() <= s.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
         return Value::string(has ? s.substr(0, s.size() - p.size()) : s); }},
      {"isdigit", [](Interp&, const std::string& s, Args&) {
         return Value::boolean(!s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })); }},
      {"isalpha", [](Interp&, const std::string& s, Args&) {
         return Value::boolean(!s.empty() && std::all_of(s.begin(), s.end(), alpha_c)); }},
      {"isalnum", [](Interp&, const std::string& s, Args&) {
         return Value::boolean(!s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return alpha_c(c) || (c >= '0' && c <= '9'); })); }},
      {"isspace", [](Interp&, const std::string& s, Args&) {
         const auto cps = code_points(s);
         return Value::boolean(!cps.empty() && std::all_of(cps.begin(), cps.end(), ws_code_point)); }},
      {"islower", [](Interp&, const std::string& s, Args&) {
         bool cased = false;
         for (char c : s) {
           if (c >= 'A' && c <= 'Z') return Value::boolean(false);
           cased = cased || (c >= 'a' && c <= 'z');
         }
         return Value::boolean(cased); }},
      {"isupper", [](Interp&, const std::string& s, Args&) {
         bool cased = false;
         for (char c : s) {
           if (c >= 'a' && c <= 'z') return Value::boolean(false);
           cased = cased || (c >= 'A' && c <= 'Z');
         }
         return Value::boolean(cased); }},
  };
  for (const auto& [n, f] : kMethods) {
    if (name == n) {
      return bound(name, [sp, f = f](Interp& in, Args& a) { return f(in, *sp, a); });
    }
  }
  return Value::undefined();
}

[[noreturn]] void unsafe(const Value& obj, const std::string& name) {
  throw EvalError("access to attribute '" + name + "' of '" + std::string(type_name(obj)) +
                  "' object is unsafe.");
}

bool is_mutator(const Value& obj, const std::string& name) {
  static constexpr const char* kList[] = {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"};
  static constexpr const char* kDict[] = {"clear", "pop", "popitem", "setdefault", "update"};
  if (obj.is_sequence()) {
    for (const char* m : kList) {
      if (name == m) return true;
    }
  }
  if (obj.is_mapping()) {
    for (const char* m : kDict) {
      if (name == m) return true;
    }
  }
  return false;
}

List dict_items(const Dict& d) {
  List items;
  items.reserve(d.size());
  for (const auto& [k, v] : d) items.push_back(Value::make_tuple({k, v}));
  return items;
}

}  // namespace

Value find_method(Interp& in, const Value& obj, const std::string& name) {
  (void)in;
  if (obj.is_string()) return str_method(obj, name);
  if (is_mutator(obj, name)) {
    const Value o = obj;
    return bound(name, [o, name](Interp&, Args&) -> Value { unsafe(o, name); });
  }
  if (obj.is_mapping()) {
    const auto d = obj.dict;
    if (name == "items") return bound(name, [d](Interp&, Args&) { return Value::make_list(dict_items(*d)); });
    if (name == "keys") {
      return bound(name, [d](Interp&, Args&) {
        List keys;
        for (const auto& kv : *d) keys.push_back(kv.first);
        return Value::make_list(std::move(keys));
      });
    }
    if (name == "values") {
      return bound(name, [d](Interp&, Args&) {
        List values;
        for (const auto& kv : *d) values.push_back(kv.second);
        return Value::make_list(std::move(values));
      });
    }
    if (name == "get") {
      return bound(name, [d](Interp&, Args& a) {
        const Value* key = arg(a, 0, "key");
        if (!key) throw EvalError("get expected at least 1 argument");
        const Value* v = dict_find(*d, *key);
        return v ? *v : arg_or(a, 1, "default", Value::none());
      });
    }
    if (name == "copy") return bound(name, [d](Interp&, Args&) { return Value::make_dict(*d); });
  }
  if (obj.is_sequence()) {
    const auto l = obj.list;
    if (name == "index") {
      return bound(name, [l](Interp&, Args& a) {
        const Value x = arg_or(a, 0, "value", Value::undefined());
        for (size_t k = 0; k < l->size(); ++k) {
          if (equal((*l)[k], x)) return Value::integer(static_cast<int64_t>(k));
        }
        throw EvalError(to_str(x) + " is not in list");
      });
    }
    if (name == "count") {
      return bound(name, [l](Interp&, Args& a) {
        const Value x = arg_or(a, 0, "value", Value::undefined());
        int64_t n = 0;
        for (const Value& v : *l) n += equal(v, x);
        return Value::integer(n);
      });
    }
  }
  return Value::undefined();
}

namespace {

// ---- filters ----

// Jinja's attribute lookup for filters: "a.b" walks dots, digits index.
Value attr_path(Interp& in, const Value& v, const std::string& path) {
  Value cur = v;
  size_t pos = 0;
  while (pos <= path.size()) {
    const size_t dot = path.find('.', pos);
    const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = digits ? get_item(in, cur, Value::integer(std::stoll(part))) : get_item(in, cur, Value::string(part));
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  return cur;
}

Value f_length(Interp&, const Value& v, Args&) {
  switch (v.kind) {
    case Kind::undefined: return Value::integer(0);
    case Kind::string: return Value::integer(static_cast<int64_t>(code_point_count(v.str())));
    case Kind::list:
    case Kind::tuple: return Value::integer(static_cast<int64_t>(v.list->size()));
    case Kind::dict: return Value::integer(static_cast<int64_t>(v.dict->size()));
    default: throw EvalError("object of type '" + std::string(type_name(v)) + "' has no len()");
  }
}

Value f_trim(Interp& in, const Value& v, Args& a) {
  return in.str(strip_impl(to_str(v), arg(a, 0, "chars"), true, true));
}

Value f_tojson(Interp& in, const Value& v, Args& a) {
  // transformers' signature: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
  JsonStyle style;
  const Value ensure_ascii = arg_or(a, 0, "ensure_ascii", Value::boolean(false));
  if (truthy(ensure_ascii)) throw EvalError("tojson(ensure_ascii=True) is not supported");
  const Value indent = arg_or(a, 1, "indent", Value::none());
  if (!indent.is_none()) {
    style.has_indent = true;
    style.item_sep = ",";
    if (indent.is_string()) style.indent = indent.str();
    else if (is_int(indent)) style.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(int_of(indent), 0, 64)), ' ');
    else throw EvalError("tojson indent must be an integer or a string");
  }
  const Value seps = arg_or(a, 2, "separators", Value::none());
  if (!seps.is_none()) {
    if (!seps.is_sequence() || seps.list->size() != 2) throw EvalError("tojson separators must be a pair of strings");
    style.item_sep = need_str((*seps.list)[0], "tojson separators");
    style.key_sep = need_str((*seps.list)[1], "tojson separators");
  }
  style.sort_keys = truthy(arg_or(a, 3, "sort_keys", Value::boolean(false)));
  std::string out;
  try {
    append_json(out, v, style);
  } catch (const std::invalid_argument& e) {
    throw EvalError(e.what());
  }
  return in.str(std::move(out));
}

Value f_string(Interp& in, const Value& v, Args&) { return v.is_string() ? v : in.str(to_str(v)); }
Value f_upper(Interp& in, const Value& v, Args&) { return in.str(upper(to_str(v))); }
Value f_lower(Interp& in, const Value& v, Args&) { return in.str(lower(to_str(v))); }
Value f_capitalize(Interp& in, const Value& v, Args&) { return in.str(capitalize(to_str(v))); }

// Jinja's title filter: each word (after -, whitespace, or an opening bracket) capitalized.
Value f_title(Interp& in, const Value& v, Args&) {
  const std::string s = to_str(v);
  std::string out;
  bool word_start = true;
  for (char c : s) {
    const bool sep = c == '-' || c == ' ' || (c >= '\t' && c <= '\r') || c == '(' || c == '{' || c == '[' || c == '<';
    if (sep) {
      out += c;
      word_start = true;
    } else {
      out += word_start ? upper_c(c) : lower_c(c);
      word_start = false;
    }
  }
  return in.str(std::move(out));
}

Value f_join(Interp& in, const Value& v, Args& a) {
  const std::string sep = to_str(arg_or(a, 0, "d", Value::string({})));
  const Value* attribute = arg(a, 1, "attribute");
  std::string out;
  const List items = iterate(in, v);
  for (size_t k = 0; k < items.size(); ++k) {
    if (k) out += sep;
    out += to_str(attribute && !attribute->is_none() ? attr_path(in, items[k], to_str(*attribute)) : items[k]);
    if (out.size() > in.limits.max_string) in.note_built(out.size());
  }
  return in.str(std::move(out));
}

Value f_default(Interp&, const Value& v, Args& a) {
  const Value fallback = arg_or(a, 0, "default_value", Value::string({}));
  const bool boolean = truthy(arg_or(a, 1, "boolean", Value::boolean(false)));
  if (v.is_undefined() || (boolean && !truthy(v))) return fallback;
  return v;
}

Value f_first(Interp& in, const Value& v, Args&) {
  if (v.is_undefined()) fail_undefined(v);
  const List items = iterate(in, v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(Interp& in, const Value& v, Args&) {
  if (v.is_undefined()) fail_undefined(v);
  const List items = iterate(in, v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_list(Interp& in, const Value& v, Args&) { return Value::make_list(iterate(in, v)); }

Value f_items(Interp&, const Value& v, Args&) {
  if (v.is_undefined()) return Value::make_list({});
  if (!v.is_mapping()) throw EvalError("can only get item pairs from a mapping.");
  return Value::make_list(dict_items(*v.dict));
}

Value f_replace(Interp& in, const Value& v, Args& a) {
  const Value* from = arg(a, 0, "old");
  const Value* to = arg(a, 1, "new");
  if (!from || !to) throw EvalError("replace needs 2 arguments");
  const Value count = arg_or(a, 2, "count", Value::none());
  return in.str(replace_all(to_str(v), to_str(*from), to_str(*to), count.is_none() ? -1 : need_int(count, "replace")));
}

Value f_indent(Interp& in, const Value& v, Args& a) {
  const Value width = arg_or(a, 0, "width", Value::integer(4));
  const bool first = truthy(arg_or(a, 1, "first", Value::boolean(false)));
  const bool blank = truthy(arg_or(a, 2, "blank", Value::boolean(false)));
  const std::string indention = width.is_string() ? width.str()
                                                  : std::string(static_cast<size_t>(std::clamp<int64_t>(need_int(width, "indent"), 0, 1024)), ' ');
  const std::vector<std::string> lines = split_lines(to_str(v) + "\n", false);
  std::string out;
  for (size_t k = 0; k < lines.size(); ++k) {
    if (k == 0) {
      out += lines[0];
      continue;
    }
    out += '\n';
    if (blank || !lines[k].empty()) out += indention;
    out += lines[k];
    if (out.size() > in.limits.max_string) in.note_built(out.size());
  }
  if (first) out = indention + out;
  return in.str(std::move(out));
}

Value f_safe(Interp&, const Value& v, Args&) { return v; }

Value f_escape(Interp& in, const Value& v, Args&) {
  const std::string s = to_str(v);
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return in.str(std::move(out));
}

Value f_int(Interp&, const Value& v, Args& a) {
  const Value fallback = arg_or(a, 0, "default", Value::integer(0));
  const int64_t base = need_int(arg_or(a, 1, "base", Value::integer(10)), "int");
  if (is_int(v)) return Value::integer(int_of(v));
  if (v.kind == Kind::floating) {
    if (!std::isfinite(v.f) || std::fabs(v.f) >= 9.2e18) return fallback;
    return Value::integer(static_cast<int64_t>(v.f));
  }
  if (v.is_string()) {
    const std::string t = strip_impl(v.str(), nullptr, true, true);
    if (!t.empty() && base >= 2 && base <= 36) {
      char* end = nullptr;
      errno = 0;
      const long long r = std::strtoll(t.c_str(), &end, static_cast<int>(base));
      if (end && *end == '\0' && errno == 0) return Value::integer(r);
      const double d = std::strtod(t.c_str(), &end);
      if (end && *end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18) return Value::integer(static_cast<int64_t>(d));
    }
  }
  return fallback;
}

Value f_float(Interp&, const Value& v, Args& a) {
  const Value fallback = arg_or(a, 0, "default", Value::floating(0.0));
  if (v.is_number()) return Value::floating(v.as_double());
  if (v.is_string()) {
    const std::string t = strip_impl(v.str(), nullptr, true, true);
    char* end = nullptr;
    const double d = std::strtod(t.c_str(), &end);
    if (!t.empty() && end && *end == '\0') return Value::floating(d);
  }
  return fallback;
}

Value f_abs(Interp&, const Value& v, Args&) {
  if (is_int(v)) {
    if (int_of(v) == INT64_MIN) throw EvalError("integer overflow");
    return Value::integer(std::llabs(int_of(v)));
  }
  if (v.kind == Kind::floating) return Value::floating(std::fabs(v.f));
  throw EvalError("bad operand type for abs(): '" + std::string(type_name(v)) + "'");
}

Value f_round(Interp&, const Value& v, Args& a) {
  if (!v.is_number()) throw EvalError("round expects a number");
  const int64_t precision = need_int(arg_or(a, 0, "precision", Value::integer(0)), "round");
  const std::string method = to_str(arg_or(a, 1, "method", Value::string("common")));
  const double scale = std::pow(10.0, static_cast<double>(std::clamp<int64_t>(precision, -300, 300)));
  const double x = v.as_double() * scale;
  double r = 0;
  if (method == "common") r = std::nearbyint(x);  // Python's round(): halves to even
  else if (method == "ceil") r = std::ceil(x);
  else if (method == "floor") r = std::floor(x);
  else throw EvalError("method must be common, ceil or floor");
  return Value::floating(r / scale);
}

// A value's sort key: an attribute of it, lowered when sorting case-insensitively.
Value sort_key(Interp& in, const Value& v, const Value* attribute, bool case_sensitive) {
  Value k = attribute && !attribute->is_none() ? attr_path(in, v, to_str(*attribute)) : v;
  if (!case_sensitive && k.is_string()) return Value::string(lower(k.str()));
  return k;
}

void sort_values(List& items, const std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  try {
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
      return reverse ? less(keys[y], keys[x]) : less(keys[x], keys[y]);
    });
  } catch (const std::invalid_argument& e) {
    throw EvalError(e.what());
  }
  List sorted;
  sorted.reserve(items.size());
  for (size_t k : order) sorted.push_back(items[k]);
  items = std::move(sorted);
}

Value f_sort(Interp& in, const Value& v, Args& a) {
  const bool reverse = truthy(arg_or(a, 0, "reverse", Value::boolean(false)));
  const bool case_sensitive = truthy(arg_or(a, 1, "case_sensitive", Value::boolean(false)));
  const Value* attribute = arg(a, 2, "attribute");
  List items = iterate(in, v);
  std::vector<Value> keys;
  for (const Value& item : items) keys.push_back(sort_key(in, item, attribute, case_sensitive));
  sort_values(items, keys, reverse);
  return Value::make_list(std::move(items));
}

Value f_dictsort(Interp&, const Value& v, Args& a) {
  if (!v.is_mapping()) throw EvalError("dictsort expects a mapping");
  const bool case_sensitive = truthy(arg_or(a, 0, "case_sensitive", Value::boolean(false)));
  const std::string by = to_str(arg_or(a, 1, "by", Value::string("key")));
  const bool reverse = truthy(arg_or(a, 2, "reverse", Value::boolean(false)));
  if (by != "key" && by != "value") throw EvalError("You can only sort by either \"key\" or \"value\"");
  List items = dict_items(*v.dict);
  std::vector<Value> keys;
  for (const Value& item : items) {
    Value k = (*item.list)[by == "key" ? 0 : 1];
    if (!case_sensitive && k.is_string()) k = Value::string(lower(k.str()));
    keys.push_back(std::move(k));
  }
  sort_values(items, keys, reverse);
  return Value::make_list(std::move(items));
}

Value f_unique(Interp& in, const Value& v, Args& a) {
  const bool case_sensitive = truthy(arg_or(a, 0, "case_sensitive", Value::boolean(false)));
  const Value* attribute = arg(a, 1, "attribute");
  List out;
  std::vector<Value> seen;
  for (const Value& item : iterate(in, v)) {
    const Value key = sort_key(in, item, attribute, case_sensitive);
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, key); })) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return Value::make_list(std::move(out));
}

Value f_reverse(Interp& in, const Value& v, Args&) {
  if (v.is_string()) {
    auto cps = code_points(v.str());
    std::string out;
    for (size_t k = cps.size(); k > 0; --k) out += cps[k - 1];
    return in.str(std::move(out));
  }
  List items = iterate(in, v);
  std::reverse(items.begin(), items.end());
  return Value::make_list(std::move(items));
}

Value f_minmax(Interp& in, const Value& v, Args& a, bool want_max) {
  const bool case_sensitive = truthy(arg_or(a, 0, "case_sensitive", Value::boolean(false)));
  const Value* attribute = arg(a, 1, "attribute");
  const List items = iterate(in, v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = sort_key(in, items[0], attribute, case_sensitive);
  try {
    for (size_t k = 1; k < items.size(); ++k) {
      Value key = sort_key(in, items[k], attribute, case_sensitive);
      if (want_max ? less(best_key, key) : less(key, best_key)) {
        best = k;
        best_key = std::move(key);
      }
    }
  } catch (const std::invalid_argument& e) {
    throw EvalError(e.what());
  }
  return items[best];
}
Value f_max(Interp& in, const Value& v, Args& a) { return f_minmax(in, v, a, true); }
Value f_min(Interp& in, const Value& v, Args& a) { return f_minmax(in, v, a, false); }

Value f_sum(Interp& in, const Value& v, Args& a) {
  const Value* attribute = arg(a, 0, "attribute");
  Value total = arg_or(a, 1, "start", Value::integer(0));
  for (const Value& item : iterate(in, v)) {
    const Value x = attribute && !attribute->is_none() ? attr_path(in, item, to_str(*attribute)) : item;
    if (!x.is_number() || !total.is_number()) throw EvalError("sum expects numbers");
    if (is_int(x) && is_int(total)) {
      int64_t r = 0;
      if (__builtin_add_overflow(int_of(total), int_of(x), &r)) throw EvalError("integer overflow");
      total = Value::integer(r);
    } else {
      total = Value::floating(total.as_double() + x.as_double());
    }
  }
  return total;
}

Value f_attr(Interp& in, const Value& v, Args& a) {
  return get_attr(in, v, to_str(arg_or(a, 0, "name", Value::string({}))));
}

Value f_wordcount(Interp&, const Value& v, Args&) {
  return Value::integer(static_cast<int64_t>(split_impl(to_str(v), nullptr, -1, false).size()));
}

Value f_center(Interp& in, const Value& v, Args& a) {
  const std::string s = to_str(v);
  const int64_t width = need_int(arg_or(a, 0, "width", Value::integer(80)), "center");
  const auto n = static_cast<int64_t>(code_point_count(s));
  if (width <= n) return Value::string(s);
  const int64_t pad = std::min<int64_t>(width - n, 1 << 20);
  const int64_t left = pad / 2 + (pad & width & 1);
  return in.str(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(pad - left), ' '));
}

// select / reject / selectattr / rejectattr share one engine: a test (or truthiness) on
// the item or on one of its attributes.
Value select_impl(Interp& in, const Value& v, Args& a, bool by_attr, bool keep_when) {
  size_t next = 0;
  std::string attribute;
  if (by_attr) {
    if (a.pos.empty()) throw EvalError("selectattr/rejectattr need an attribute name");
    attribute = to_str(a.pos[0]);
    next = 1;
  }
  TestFn test = nullptr;
  Args test_args;
  if (next < a.pos.size()) {
    const std::string name = to_str(a.pos[next]);
    test = find_test(name);
    if (test == nullptr) throw EvalError("no test named '" + name + "'");
    test_args.pos.assign(a.pos.begin() + static_cast<ptrdiff_t>(next + 1), a.pos.end());
  }
  List out;
  if (!truthy(v)) return Value::make_list({});  // Jinja: `if value:` before iterating (None selects nothing)
  for (const Value& item : iterate(in, v)) {
    const Value x = by_attr ? attr_path(in, item, attribute) : item;
    const bool ok = test ? test(in, x, test_args) : truthy(x);
    if (ok == keep_when) out.push_back(item);
  }
  return Value::make_list(std::move(out));
}
Value f_select(Interp& in, const Value& v, Args& a) { return select_impl(in, v, a, false, true); }
Value f_reject(Interp& in, const Value& v, Args& a) { return select_impl(in, v, a, false, false); }
Value f_selectattr(Interp& in, const Value& v, Args& a) { return select_impl(in, v, a, true, true); }
Value f_rejectattr(Interp& in, const Value& v, Args& a) { return select_impl(in, v, a, true, false); }

Value f_map(Interp& in, const Value& v, Args& a) {
  List out;
  if (!truthy(v)) return Value::make_list({});  // Jinja: `if value:` before iterating
  const Value* attribute = nullptr;
  for (const auto& [k, val] : a.kw) {
    if (k == "attribute") attribute = &val;
  }
  if (attribute) {
    const Value* fallback = nullptr;
    for (const auto& [k, val] : a.kw) {
      if (k == "default") fallback = &val;
    }
    for (const Value& item : iterate(in, v)) {
      Value x = attr_path(in, item, to_str(*attribute));
      out.push_back(x.is_undefined() && fallback ? *fallback : x);
    }
    return Value::make_list(std::move(out));
  }
  if (a.pos.empty()) throw EvalError("map needs a filter name or attribute=");
  const std::string name = to_str(a.pos[0]);
  const FilterFn f = find_filter(name);
  if (f == nullptr) throw EvalError("no filter named '" + name + "'");
  Args rest;
  rest.pos.assign(a.pos.begin() + 1, a.pos.end());
  rest.kw = a.kw;
  for (const Value& item : iterate(in, v)) out.push_back(f(in, item, rest));
  return Value::make_list(std::move(out));
}

Value f_batch(Interp& in, const Value& v, Args& a) {
  const int64_t n = need_int(arg_or(a, 0, "linecount", Value::integer(1)), "batch");
  if (n <= 0) throw EvalError("batch size must be positive");
  const Value* fill = arg(a, 1, "fill_with");
  List out, cur;
  for (const Value& item : iterate(in, v)) {
    cur.push_back(item);
    if (static_cast<int64_t>(cur.size()) == n) {
      out.push_back(Value::make_list(std::move(cur)));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    while (fill && !fill->is_none() && static_cast<int64_t>(cur.size()) < n) cur.push_back(*fill);
    out.push_back(Value::make_list(std::move(cur)));
  }
  return Value::make_list(std::move(out));
}

Value f_pprint(Interp& in, const Value& v, Args&) {
  std::string out;
  append_repr(out, v);
  return in.str(std::move(out));
}

const std::pair<const char*, FilterFn> kFilters[] = {
    {"abs", f_abs},           {"attr", f_attr},           {"batch", f_batch},
    {"capitalize", f_capitalize}, {"center", f_center},   {"count", f_length},
    {"d", f_default},         {"default", f_default},     {"dictsort", f_dictsort},
    {"e", f_escape},          {"escape", f_escape},       {"first", f_first},
    {"float", f_float},       {"forceescape", f_escape},  {"indent", f_indent},
    {"int", f_int},           {"items", f_items},         {"join", f_join},
    {"last", f_last},         {"length", f_length},       {"list", f_list},
    {"lower", f_lower},       {"map", f_map},             {"max", f_max},
    {"min", f_min},           {"pprint", f_pprint},       {"reject", f_reject},
    {"rejectattr", f_rejectattr}, {"replace", f_replace}, {"reverse", f_reverse},
    {"round", f_round},       {"safe", f_safe},           {"select", f_select},
    {"selectattr", f_selectattr}, {"sort", f_sort},       {"string", f_string},
    {"sum", f_sum},           {"title", f_title},         {"tojson", f_tojson},
    {"trim", f_trim},         {"unique", f_unique},       {"upper", f_upper},
    {"wordcount", f_wordcount},
};

// ---- tests ----

const Value& test_arg(const Args& a, const char* test) {
  const Value* v = arg(a, 0, "other");
  if (v == nullptr) throw EvalError(std::string("test '") + test + "' needs an argument");
  return *v;
}

bool t_defined(Interp&, const Value& v, Args&) { return !v.is_undefined(); }
bool t_undefined(Interp&, const Value& v, Args&) { return v.is_undefined(); }
bool t_none(Interp&, const Value& v, Args&) { return v.is_none(); }
bool t_string(Interp&, const Value& v, Args&) { return v.is_string(); }
bool t_number(Interp&, const Value& v, Args&) { return v.is_number(); }
bool t_integer(Interp&, const Value& v, Args&) { return v.kind == Kind::integer; }
bool t_float(Interp&, const Value& v, Args&) { return v.kind == Kind::floating; }
bool t_boolean(Interp&, const Value& v, Args&) { return v.kind == Kind::boolean; }
bool t_true(Interp&, const Value& v, Args&) { return v.kind == Kind::boolean && v.b; }
bool t_false(Interp&, const Value& v, Args&) { return v.kind == Kind::boolean && !v.b; }
bool t_mapping(Interp&, const Value& v, Args&) { return v.is_mapping(); }
bool t_iterable(Interp&, const Value& v, Args&) {
  return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_mapping();
}
bool t_sequence(Interp&, const Value& v, Args&) {
  return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_mapping();
}
bool t_callable(Interp&, const Value& v, Args&) { return v.kind == Kind::callable; }
bool t_eq(Interp&, const Value& v, Args& a) { return equal(v, test_arg(a, "eq")); }
bool t_ne(Interp&, const Value& v, Args& a) { return !equal(v, test_arg(a, "ne")); }
bool ordered(const Value& x, const Value& y) {
  if (x.is_undefined()) fail_undefined(x);
  if (y.is_undefined()) fail_undefined(y);
  try {
    return less(x, y);
  } catch (const std::invalid_argument& e) {
    throw EvalError(e.what());
  }
}
bool t_lt(Interp&, const Value& v, Args& a) { return ordered(v, test_arg(a, "lt")); }
bool t_gt(Interp&, const Value& v, Args& a) { return ordered(test_arg(a, "gt"), v); }
bool t_le(Interp&, const Value& v, Args& a) { return !ordered(test_arg(a, "le"), v); }
bool t_ge(Interp&, const Value& v, Args& a) { return !ordered(v, test_arg(a, "ge")); }
bool t_sameas(Interp&, const Value& v, Args& a) {
  const Value& o = test_arg(a, "sameas");
  if (v.kind != o.kind) return false;
  switch (v.kind) {
    case Kind::none:
    case Kind::undefined: return true;
    case Kind::boolean: return v.b == o.b;
    case Kind::integer: return v.i == o.i && v.i >= -5 && v.i <= 256;  // CPython's small-int cache
    case Kind::string: return v.s == o.s;
    case Kind::list:
    case Kind::tuple: return v.list == o.list;
    case Kind::dict:
    case Kind::ns: return v.dict == o.dict;
    case Kind::callable: return v.fn == o.fn;
    default: return false;
  }
}
bool t_odd(Interp&, const Value& v, Args&) { return (need_int(v, "odd") & 1) != 0; }
bool t_even(Interp&, const Value& v, Args&) { return (need_int(v, "even") & 1) == 0; }
bool t_divisibleby(Interp&, const Value& v, Args& a) {
  const int64_t n = need_int(test_arg(a, "divisibleby"), "divisibleby");
  if (n == 0) throw EvalError("integer modulo by zero");
  if (n == -1) return true;
  return need_int(v, "divisibleby") % n == 0;
}
bool t_in(Interp& in, const Value& v, Args& a) {
  const Value& seq = test_arg(a, "in");
  if (seq.is_string()) return v.is_string() && seq.str().find(v.str()) != std::string::npos;
  if (seq.is_mapping()) return dict_find(*seq.dict, v) != nullptr;
  for (const Value& x : iterate(in, seq)) {
    if (equal(x, v)) return true;
  }
  return false;
}
bool t_lower(Interp&, const Value& v, Args&) {
  const std::string s = to_str(v);
  return lower(s) == s && std::any_of(s.begin(), s.end(), alpha_c);
}
bool t_upper(Interp&, const Value& v, Args&) {
  const std::string s = to_str(v);
  return upper(s) == s && std::any_of(s.begin(), s.end(), alpha_c);
}
bool t_filter(Interp&, const Value& v, Args&) { return v.is_string() && find_filter(v.str()) != nullptr; }
bool t_test(Interp&, const Value& v, Args&) { return v.is_string() && find_test(v.str()) != nullptr; }

const std::pair<const char*, TestFn> kTests[] = {
    {"!=", t_ne},          {"<", t_lt},           {"<=", t_le},         {"==", t_eq},
    {">", t_gt},           {">=", t_ge},          {"boolean", t_boolean}, {"callable", t_callable},
    {"defined", t_defined}, {"divisibleby", t_divisibleby}, {"eq", t_eq}, {"equalto", t_eq},
    {"even", t_even},      {"false", t_false},    {"filter", t_filter}, {"float", t_float},
    {"ge", t_ge},          {"greaterthan", t_gt}, {"gt", t_gt},         {"in", t_in},
    {"integer", t_integer}, {"iterable", t_iterable}, {"le", t_le},     {"lessthan", t_lt},
    {"lower", t_lower},    {"lt", t_lt},          {"mapping", t_mapping}, {"ne", t_ne},
    {"none", t_none},      {"number", t_number},  {"odd", t_odd},       {"sameas", t_sameas},
    {"sequence", t_sequence}, {"string", t_string}, {"test", t_test},   {"true", t_true},
    {"undefined", t_undefined}, {"upper", t_upper},
};

// ---- globals ----

Value g_range(Interp&, Args& a) {
  if (a.pos.empty() || a.pos.size() > 3) throw EvalError("range expected 1 to 3 arguments");
  int64_t start = 0, stop = 0, step = 1;
  if (a.pos.size() == 1) {
    stop = need_int(a.pos[0], "range");
  } else {
    start = need_int(a.pos[0], "range");
    stop = need_int(a.pos[1], "range");
    if (a.pos.size() == 3) step = need_int(a.pos[2], "range");
  }
  if (step == 0) throw EvalError("range() arg 3 must not be zero");
  List out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    if (out.size() >= kMaxListItems) {
      throw EvalError("range too large (limit: " + std::to_string(kMaxListItems) + " items)");
    }
    out.push_back(Value::integer(i));
    if (__builtin_add_overflow(i, step, &i)) break;
  }
  return Value::make_list(std::move(out));
}

Value g_namespace(Interp&, Args& a) {
  Dict d;
  for (const Value& p : a.pos) {
    if (!p.is_mapping()) throw EvalError("namespace() takes mappings and keyword arguments");
    for (const auto& kv : *p.dict) d.push_back(kv);
  }
  for (const auto& [k, v] : a.kw) {
    bool replaced = false;
    for (auto& [dk, dv] : d) {
      if (dk.is_string() && dk.str() == k) {
        dv = v;
        replaced = true;
      }
    }
    if (!replaced) d.emplace_back(Value::string(k), v);
  }
  return Value::make_namespace(std::move(d));
}

Value g_dict(Interp&, Args& a) {
  Dict d;
  for (const Value& p : a.pos) {
    if (!p.is_mapping()) throw EvalError("dict() takes a mapping and keyword arguments");
    for (const auto& kv : *p.dict) d.push_back(kv);
  }
  for (const auto& [k, v] : a.kw) d.emplace_back(Value::string(k), v);
  return Value::make_dict(std::move(d));
}

Value g_raise_exception(Interp&, Args& a) {
  throw EvalError(a.pos.empty() ? std::string("raise_exception() called") : to_str(a.pos[0]));
}

Value g_strftime_now(Interp& in, Args& a) {
  const std::string fmt = to_str(arg_or(a, 0, "format", Value::string("%Y-%m-%d")));
  if (fmt.size() > 256) throw EvalError("strftime_now format too long");
  const std::time_t t = std::chrono::system_clock::to_time_t(in.now);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[1024];
  const size_t n = fmt.empty() ? 0 : std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
  return Value::string(std::string(buf, n));
}

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const auto& [n, f] : kFilters) {
    if (name == n) return f;
  }
  return nullptr;
}

TestFn find_test(std::string_view name) {
  for (const auto& [n, t] : kTests) {
    if (name == n) return t;
  }
  return nullptr;
}

void install_globals(Frame& root) {
  root.set("range", Value::callable("range", g_range));
  root.set("namespace", Value::callable("namespace", g_namespace));
  root.set("dict", Value::callable("dict", g_dict));
  root.set("raise_exception", Value::callable("raise_exception", g_raise_exception));
  root.set("strftime_now", Value::callable("strftime_now", g_strftime_now));
}

}  // namespace loom::tmpl
