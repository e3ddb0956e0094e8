// Progress display for long operations: a redrawn bar with percent, bytes/s and ETA on
// a terminal; plain lines (every 10%) when stderr is not a terminal.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace loom::cli {

class Progress {
 public:
  // `total_bytes` may be 0 when unknown (then no bytes/s is shown).
  Progress(std::string label, uint64_t total_bytes);
  void update(double fraction, std::string_view item);
  void finish();

 private:
  std::string label_;
  uint64_t total_;
  bool tty_;
  int last_decile_ = -1;
  bool done_ = false;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace loom::cli
