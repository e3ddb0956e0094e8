// Python's semantics for template values: truth, equality, ordering, str, repr, json.dumps.
#include "template/value.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "common/json_writer.hpp"

namespace loom::tmpl {

namespace {
constexpr int kMaxPrintDepth = 200;  // a namespace may hold itself: refuse, never recurse forever

void check_depth(int depth) {
  if (depth > kMaxPrintDepth) throw std::invalid_argument("value nested too deeply to print");
}

// Decodes one UTF-8 sequence at s[i] (the input was validated; stray bytes count as one).
uint32_t decode_at(std::string_view s, size_t i, size_t& len) {
  const auto c = static_cast<unsigned char>(s[i]);
  len = 1;
  if (c < 0x80) return c;
  size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
  if (need == 1 || i + need > s.size()) return c;
  uint32_t cp = c & (0xFF >> (need + 1));
  for (size_t k = 1; k < need; ++k) {
    const auto cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xC0) != 0x80) return c;
    cp = (cp << 6) | (cc & 0x3F);
  }
  len = need;
  return cp;
}

// Python's str.isprintable() for the code points templates meet: controls, separators other
// than the ASCII space and the invisible format characters print as escapes in repr().
bool printable(uint32_t cp) {
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) return false;
  if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F)) return false;
  if ((cp >= 0x205F && cp <= 0x2064) || cp == 0x3000 || cp == 0xFEFF) return false;
  if (cp >= 0xD800 && cp <= 0xDFFF) return false;
  if ((cp >= 0xE000 && cp <= 0xF8FF) || cp >= 0xF0000) return false;  // private use
  return true;
}

void append_hex(std::string& out, uint32_t cp) {
  char buf[16];
  if (cp < 0x100) std::snprintf(buf, sizeof buf, "\\x%02x", cp);
  else if (cp < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04x", cp);
  else std::snprintf(buf, sizeof buf, "\\U%08x", cp);
  out += buf;
}

bool numeric(const Value& v) { return v.is_number(); }
}  // namespace

Value Value::undefined(std::string why) {
  Value v;
  if (!why.empty()) v.s = std::make_shared<const std::string>(std::move(why));
  return v;
}
Value Value::none() { Value v; v.kind = Kind::none; return v; }
Value Value::boolean(bool x) { Value v; v.kind = Kind::boolean; v.b = x; return v; }
Value Value::integer(int64_t x) { Value v; v.kind = Kind::integer; v.i = x; return v; }
Value Value::floating(double x) { Value v; v.kind = Kind::floating; v.f = x; return v; }
Value Value::string(std::string x) {
  Value v;
  v.kind = Kind::string;
  v.s = std::make_shared<const std::string>(std::move(x));
  return v;
}
Value Value::make_list(List x) {
  Value v;
  v.kind = Kind::list;
  v.list = std::make_shared<const List>(std::move(x));
  return v;
}
Value Value::make_tuple(List x) {
  Value v = make_list(std::move(x));
  v.kind = Kind::tuple;
  return v;
}
Value Value::make_dict(Dict x) {
  Value v;
  v.kind = Kind::dict;
  v.dict = std::make_shared<Dict>(std::move(x));
  return v;
}
Value Value::make_namespace(Dict x) {
  Value v = make_dict(std::move(x));
  v.kind = Kind::ns;
  return v;
}
Value Value::callable(std::string name, std::function<Value(Interp&, Args&)> fn) {
  Value v;
  v.kind = Kind::callable;
  v.fn = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

double Value::as_double() const {
  switch (kind) {
    case Kind::boolean: return b ? 1.0 : 0.0;
    case Kind::integer: return static_cast<double>(i);
    default: return f;
  }
}

std::string_view type_name(const Value& v) {
  switch (v.kind) {
    case Kind::undefined: return "Undefined";
    case Kind::none: return "NoneType";
    case Kind::boolean: return "bool";
    case Kind::integer: return "int";
    case Kind::floating: return "float";
    case Kind::string: return "str";
    case Kind::list: return "list";
    case Kind::tuple: return "tuple";
    case Kind::dict: return "dict";
    case Kind::ns: return "Namespace";
    case Kind::callable: return "function";
  }
  return "object";
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::undefined:
    case Kind::none: return false;
    case Kind::boolean: return v.b;
    case Kind::integer: return v.i != 0;
    case Kind::floating: return v.f != 0.0;
    case Kind::string: return !v.s->empty();
    case Kind::list:
    case Kind::tuple: return !v.list->empty();
    case Kind::dict: return !v.dict->empty();
    case Kind::ns:
    case Kind::callable: return true;
  }
  return false;
}

bool equal(const Value& a, const Value& b) {
  if (numeric(a) && numeric(b)) {
    if (a.kind != Kind::floating && b.kind != Kind::floating) {
      const int64_t x = a.kind == Kind::boolean ? a.b : a.i;
      const int64_t y = b.kind == Kind::boolean ? b.b : b.i;
      return x == y;
    }
    return a.as_double() == b.as_double();
  }
  if (a.kind != b.kind) {
    // list == tuple is False in Python, as is any other mix
    return false;
  }
  switch (a.kind) {
    case Kind::undefined:
    case Kind::none: return true;
    case Kind::string: return *a.s == *b.s;
    case Kind::list:
    case Kind::tuple: {
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k) {
        if (!equal((*a.list)[k], (*b.list)[k])) return false;
      }
      return true;
    }
    case Kind::dict: {
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto& [key, value] : *a.dict) {
        const Value* other = dict_find(*b.dict, key);
        if (other == nullptr || !equal(value, *other)) return false;
      }
      return true;
    }
    case Kind::ns: return a.dict == b.dict;
    case Kind::callable: return a.fn == b.fn;
    default: return false;
  }
}

bool less(const Value& a, const Value& b) {
  if (numeric(a) && numeric(b)) {
    if (a.kind != Kind::floating && b.kind != Kind::floating) {
      const int64_t x = a.kind == Kind::boolean ? a.b : a.i;
      const int64_t y = b.kind == Kind::boolean ? b.b : b.i;
      return x < y;
    }
    return a.as_double() < b.as_double();
  }
  if (a.is_string() && b.is_string()) return *a.s < *b.s;  // UTF-8 order is code point order
  if (a.is_sequence() && a.kind == b.kind) {
    const List& x = *a.list;
    const List& y = *b.list;
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (!equal(x[k], y[k])) return less(x[k], y[k]);
    }
    return x.size() < y.size();
  }
  throw std::invalid_argument("'<' not supported between instances of '" +
                              std::string(type_name(a)) + "' and '" +
                              std::string(type_name(b)) + "'");
}

std::string repr_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  // Shortest round-trip digits, then Python's layout: positional for exponents -4..15.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const size_t e_pos = sci.find('e');
  std::string mant = sci.substr(0, e_pos);
  const int exp = std::stoi(sci.substr(e_pos + 1));
  std::string sign;
  if (!mant.empty() && mant[0] == '-') {
    sign = "-";
    mant.erase(0, 1);
  }
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits += c;
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = sign;
  if (exp < -4 || exp >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += e;
  } else if (exp < 0) {
    out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  } else {
    const auto point = static_cast<size_t>(exp) + 1;
    if (digits.size() <= point) {
      out += digits + std::string(point - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, point) + "." + digits.substr(point);
    }
  }
  return out;
}

std::string repr_string(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    const uint32_t cp = decode_at(s, i, len);
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (!printable(cp)) {
      append_hex(out, cp);
    } else {
      out.append(s.substr(i, len));
    }
    i += len;
  }
  out += quote;
  return out;
}

void append_repr(std::string& out, const Value& v, int depth) {
  check_depth(depth);
  switch (v.kind) {
    case Kind::string: out += repr_string(*v.s); return;
    case Kind::list:
    case Kind::tuple: {
      const bool tuple = v.kind == Kind::tuple;
      out += tuple ? '(' : '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += ", ";
        append_repr(out, (*v.list)[k], depth + 1);
      }
      if (tuple && v.list->size() == 1) out += ',';
      out += tuple ? ')' : ']';
      return;
    }
    case Kind::dict:
    case Kind::ns: {
      if (v.kind == Kind::ns) out += "<Namespace ";
      out += '{';
      bool first = true;
      for (const auto& [key, value] : *v.dict) {
        if (!first) out += ", ";
        first = false;
        append_repr(out, key, depth + 1);
        out += ": ";
        append_repr(out, value, depth + 1);
      }
      out += '}';
      if (v.kind == Kind::ns) out += '>';
      return;
    }
    default: out += to_str(v); return;
  }
}

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Kind::undefined: return {};
    case Kind::none: return "None";
    case Kind::boolean: return v.b ? "True" : "False";
    case Kind::integer: return std::to_string(v.i);
    case Kind::floating: return repr_float(v.f);
    case Kind::string: return *v.s;
    case Kind::callable: return "<function " + v.fn->name + ">";
    default: {
      std::string out;
      append_repr(out, v);
      return out;
    }
  }
}

namespace {
// Strings: json.dumps(ensure_ascii=False) escapes exactly what RFC 8259 requires, as
// JsonWriter::escape_into does.

void newline_indent(std::string& out, const JsonStyle& style, int level) {
  out += '\n';
  for (int k = 0; k < level; ++k) out += style.indent;
}

// json.dumps turns keys into strings: str keys as is, numbers/bools/None by their JSON text.
std::string json_key(const Value& key) {
  switch (key.kind) {
    case Kind::string: return *key.s;
    case Kind::none: return "null";
    case Kind::boolean: return key.b ? "true" : "false";
    case Kind::integer: return std::to_string(key.i);
    case Kind::floating: return repr_float(key.f);
    default:
      throw std::invalid_argument("keys must be str, int, float, bool or None, not " +
                                  std::string(type_name(key)));
  }
}
}  // namespace

void append_json(std::string& out, const Value& v, const JsonStyle& style, int level) {
  check_depth(level);
  switch (v.kind) {
    case Kind::none: out += "null"; return;
    case Kind::boolean: out += v.b ? "true" : "false"; return;
    case Kind::integer: out += std::to_string(v.i); return;
    case Kind::floating:
      if (std::isnan(v.f)) out += "NaN";
      else if (std::isinf(v.f)) out += v.f < 0 ? "-Infinity" : "Infinity";
      else out += repr_float(v.f);
      return;
    case Kind::string: JsonWriter::escape_into(out, *v.s); return;
    case Kind::list:
    case Kind::tuple: {
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += style.item_sep;
        if (style.has_indent) newline_indent(out, style, level + 1);
        append_json(out, (*v.list)[k], style, level + 1);
      }
      if (style.has_indent) newline_indent(out, style, level);
      out += ']';
      return;
    }
    case Kind::dict: {
      if (v.dict->empty()) {
        out += "{}";
        return;
      }
      std::vector<std::pair<std::string, const Value*>> items;
      items.reserve(v.dict->size());
      for (const auto& [key, value] : *v.dict) items.emplace_back(json_key(key), &value);
      if (style.sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += style.item_sep;
        if (style.has_indent) newline_indent(out, style, level + 1);
        JsonWriter::escape_into(out, items[k].first);
        out += style.key_sep;
        append_json(out, *items[k].second, style, level + 1);
      }
      if (style.has_indent) newline_indent(out, style, level);
      out += '}';
      return;
    }
    default:
      throw std::invalid_argument("Object of type " + std::string(type_name(v)) +
                                  " is not JSON serializable");
  }
}

const Value* dict_find(const Dict& d, const Value& key) {
  for (const auto& [k, v] : d) {
    if (equal(k, key)) return &v;
  }
  return nullptr;
}

const Value* dict_find(const Dict& d, std::string_view key) {
  for (const auto& [k, v] : d) {
    if (k.is_string() && *k.s == key) return &v;
  }
  return nullptr;
}

std::vector<std::string_view> code_points(std::string_view s) {
  std::vector<std::string_view> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    decode_at(s, i, len);
    out.push_back(s.substr(i, len));
    i += len;
  }
  return out;
}

size_t code_point_count(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

}  // namespace loom::tmpl
