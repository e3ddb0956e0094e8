// Fixtures shared by the reliability tests: a demo model written once per process, quiet
// load options, and running a function in a forked child (for address-space limits and
// signals that must not touch the test process).
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "loom/loader.hpp"
#include "loom/model.hpp"
#include "support/test_support.hpp"

namespace loom::reliability {

// A small demo model (hidden 64, 2 layers, a real byte-level BPE tokenizer) in a
// directory that lives until the process exits.
const std::filesystem::path& demo_model_dir();

std::shared_ptr<const Model> load_quiet(const std::filesystem::path& path, LoadOptions options = test::quiet_load_options());

// True in builds with AddressSanitizer or ThreadSanitizer, whose shadow memory makes an
// address-space limit meaningless.
bool sanitized_build();

// How a forked child ended: its exit status, or the signal that killed it.
struct ChildResult {
  bool exited = false;
  int exit_code = -1;
  int signal = 0;
  std::string output;  // what the child wrote to its pipe (diagnostics)
};

// Runs `body` in a forked child; `body` returns the exit code and may write diagnostics
// to the descriptor it is given. The child never returns into Catch2 (it _exits).
ChildResult run_in_child(const std::function<int(int out_fd)>& body);

// Writes `text` to a descriptor (for children's diagnostics).
void child_say(int fd, const std::string& text);

// The process's current virtual size (VmSize) in bytes.
uint64_t virtual_size_bytes();

}  // namespace loom::reliability
