#include "args.hpp"

#include <cstdlib>

namespace loom::cli {

namespace {

std::string kind_word(const FlagSpec& s) {
  switch (s.kind) {
    case Kind::flag: return "";
    case Kind::integer: return "an integer";
    case Kind::number: return "a number";
    case Kind::choice: {
      std::string out = "one of ";
      for (size_t i = 0; i < s.choices.size(); ++i) out += (i ? "|" : "") + s.choices[i];
      return out;
    }
    case Kind::text:
    case Kind::list: return "a value";
  }
  return "a value";
}

void check_value(const FlagSpec& s, const std::string& v) {
  char* end = nullptr;
  switch (s.kind) {
    case Kind::integer:
      std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0') throw UsageError(s.name + " expects " + kind_word(s) + ", got '" + v + "'");
      return;
    case Kind::number:
      std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0') throw UsageError(s.name + " expects " + kind_word(s) + ", got '" + v + "'");
      return;
    case Kind::choice:
      for (const auto& c : s.choices) {
        if (c == v) return;
      }
      throw UsageError(s.name + " expects " + kind_word(s) + ", got '" + v + "'");
    default: return;
  }
}

}  // namespace

std::string Args::text(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() || it->second.empty() ? fallback : it->second.back();
}

int64_t Args::integer(const std::string& name, int64_t fallback) const {
  return has(name) ? std::strtoll(text(name).c_str(), nullptr, 10) : fallback;
}

double Args::number(const std::string& name, double fallback) const {
  return has(name) ? std::strtod(text(name).c_str(), nullptr) : fallback;
}

std::vector<std::string> Args::list(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

Args parse(const std::vector<FlagSpec>& specs, const std::vector<std::string>& argv, size_t first) {
  Args out;
  for (size_t i = first; i < argv.size(); ++i) {
    std::string arg = argv[i];
    if (arg.size() < 2 || arg.rfind("--", 0) != 0) {
      out.positional_.push_back(arg);
      continue;
    }
    std::string value;
    bool inline_value = false;
    if (auto eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      inline_value = true;
    }
    const FlagSpec* spec = nullptr;
    for (const auto& s : specs) {
      if (s.name == arg) spec = &s;
    }
    if (spec == nullptr) throw UsageError("unknown flag " + arg + " (see --help)");
    if (spec->kind == Kind::flag) {
      if (inline_value) throw UsageError(arg + " takes no value");
      out.values_[arg].push_back("1");
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argv.size()) throw UsageError(arg + " expects " + kind_word(*spec));
      value = argv[++i];
    }
    check_value(*spec, value);
    out.values_[arg].push_back(value);
  }
  return out;
}

std::string usage(const std::string& command, const std::string& synopsis, const std::string& about,
                  const std::vector<FlagSpec>& specs) {
  std::string out = "usage: loom " + command + " " + synopsis + "\n\n" + about + "\n\nflags:\n";
  for (const auto& s : specs) {
    std::string left = "  " + s.name;
    if (s.kind != Kind::flag) left += " " + (s.kind == Kind::choice ? std::string("{") + [&] {
      std::string c;
      for (size_t i = 0; i < s.choices.size(); ++i) c += (i ? "|" : "") + s.choices[i];
      return c;
    }() + "}" : s.placeholder);
    if (left.size() < 30) left.resize(30, ' ');
    out += left + " " + s.help + "\n";
  }
  return out;
}

}  // namespace loom::cli
