// `loom serve` as a person starts it: help, bad flag values (exit 2), and a real run on a
// free port that answers, then stops on SIGTERM with exit 0.
#ifdef LOOM_HAVE_SERVER
#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "tools/cli_run.hpp"

namespace {

using Run = loom::test::CliRun;
using loom::test::loom_cli;

}  // namespace

TEST_CASE("cli: serve --help, and bad flag values are usage errors") {
  Run r = loom_cli("serve --help");
  CHECK(r.code == 0);
  for (const char* flag : {"--host", "--port", "--parallel", "--ctx", "--kv-pool", "--kv-type", "--api-key", "--queue"}) {
    CHECK(r.output.find(flag) != std::string::npos);
  }
  CHECK(loom_cli("--help").output.find("serve") != std::string::npos);
  struct Case {
    const char* args;
    const char* message;
  };
  const Case cases[] = {{"serve --port 70000", "--port expects 0 to 65535"},
                        {"serve --parallel 0", "--parallel expects 1 to 1024"},
                        {"serve --kv-pool 12X", "unknown unit"},
                        {"serve --kv-pool abc", "--kv-pool expects tokens"},
                        {"serve --queue 0", "--queue must be at least 1"},
                        {"serve --max-body 10", "--max-body must be at least 1024"}};
  for (const Case& c : cases) {
    INFO(c.args);
    r = loom_cli(c.args);
    CHECK(r.code == 2);
    CHECK(r.output.find(c.message) != std::string::npos);
  }
}

TEST_CASE("cli: serve on port 0 prints its address, answers /health, exits 0 on SIGTERM") {
  int out[2];
  REQUIRE(::pipe(out) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    ::close(out[0]);
    ::close(out[1]);
    ::execl(LOOM_CLI_PATH, LOOM_CLI_PATH, "serve", "--port", "0", "--no-report", "--quiet", "--threads", "1",
            "--kv-type", "f16", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);
  std::string line;
  char c = 0;
  while (line.find('\n') == std::string::npos && ::read(out[0], &c, 1) == 1) line += c;
  ::close(out[0]);
  INFO(line);
  const size_t at = line.find("listening on http://127.0.0.1:");
  REQUIRE(at != std::string::npos);
  const int port = std::stoi(line.substr(at + 30));
  CHECK(port > 0);
  CHECK(line.find("KV blocks in f16") != std::string::npos);
  const std::string health = "curl -s -m 5 http://127.0.0.1:" + std::to_string(port) + "/health";
  if (FILE* p = ::popen(health.c_str(), "r")) {
    char buf[256] = {};
    const size_t n = std::fread(buf, 1, sizeof buf - 1, p);
    // (no curl: the read is empty and only the exit is checked)
    if (::pclose(p) == 0) CHECK(std::string(buf, n) == R"({"status":"ok"})");
  }
  REQUIRE(::kill(pid, SIGTERM) == 0);
  int status = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(15)) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      FAIL("loom serve did not stop within 15 s of SIGTERM");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
#endif
