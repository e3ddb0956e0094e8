#include "reliability/reliability_support.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <stdexcept>
#include <fstream>
#include <sstream>

#include "loom/demo.hpp"
#include "support/test_support.hpp"

namespace loom::reliability {

const std::filesystem::path& demo_model_dir() {
  static test::TempDir dir;
  static const std::filesystem::path path = [] {
    const std::filesystem::path p = dir / "demo";
    DemoOptions o;
    o.hidden_size = 64;
    o.n_layers = 2;
    o.n_heads = 4;
    o.n_kv_heads = 2;
    o.intermediate_size = 128;
    o.context_length = 256;
    o.merges = 300;
    write_demo_model(p, o);
    return p;
  }();
  return path;
}

std::shared_ptr<const Model> load_quiet(const std::filesystem::path& path, LoadOptions options) {
  return load_model(path, options);
}

bool sanitized_build() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#else
  return false;
#endif
}

void child_say(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

ChildResult run_in_child(const std::function<int(int out_fd)>& body) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::close(fds[0]);
    int code = 120;
    try {
      code = body(fds[1]);
    } catch (const std::exception& e) {
      child_say(fds[1], std::string("uncaught exception: ") + e.what());
      code = 121;
    } catch (...) {
      code = 122;
    }
    ::close(fds[1]);
    ::_exit(code);
  }
  ::close(fds[1]);
  ChildResult result;
  char buf[512];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    result.output.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exited = WIFEXITED(status);
  result.exit_code = result.exited ? WEXITSTATUS(status) : -1;
  result.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  return result;
}

uint64_t virtual_size_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmSize:", 0) == 0) {
      std::istringstream fields(line.substr(7));
      uint64_t kib = 0;
      fields >> kib;
      return kib * 1024;
    }
  }
  return 0;
}

}  // namespace loom::reliability
