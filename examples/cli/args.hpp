// A small, table-driven command-line parser for the loom tool: each command lists its
// flags (name, value kind, help); parsing checks names and values and produces an error
// that says what was expected.
#pragma once

#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace loom::cli {

enum class Kind { flag, text, integer, number, choice, list };

struct FlagSpec {
  std::string name;                  // "--model"
  Kind kind = Kind::text;
  std::string help;
  std::vector<std::string> choices;  // Kind::choice
  std::string placeholder = "VALUE";
};

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Args {
 public:
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string text(const std::string& name, const std::string& fallback = "") const;
  int64_t integer(const std::string& name, int64_t fallback) const;
  double number(const std::string& name, double fallback) const;
  std::vector<std::string> list(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  friend Args parse(const std::vector<FlagSpec>&, const std::vector<std::string>&, size_t);
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positional_;
};

// Parses argv[first..]; throws UsageError naming the flag and what was expected.
Args parse(const std::vector<FlagSpec>& specs, const std::vector<std::string>& argv, size_t first);
std::string usage(const std::string& command, const std::string& synopsis, const std::string& about,
                  const std::vector<FlagSpec>& specs);

}  // namespace loom::cli
