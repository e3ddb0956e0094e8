// Runs the loom command line for the CLI tests as a shell would (LOOM_CLI_PATH, set by
// tests/CMakeLists.txt): the exit code and what came back on the streams `redirect`
// names ("2>&1": stdout and stderr together; "2>/dev/null"; "2>&1 >/dev/null").
#pragma once

#include <catch2/catch.hpp>
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace loom::test {

struct CliRun {
  int code = -1;
  std::string output;
};

// `s` in single quotes for /bin/sh.
inline std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// `env` goes before the command (VAR=value ...).
inline CliRun loom_cli(const std::string& args, const std::string& env = "",
                       const std::string& redirect = "2>&1") {
  const std::string cmd = env + " " + quote(LOOM_CLI_PATH) + " " + args + " " + redirect;
  CliRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace loom::test
