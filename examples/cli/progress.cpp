#include "progress.hpp"

#include <unistd.h>

#include <cstdio>

namespace loom::cli {

Progress::Progress(std::string label, uint64_t total_bytes)
    : label_(std::move(label)), total_(total_bytes), tty_(::isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()) {}

void Progress::update(double fraction, std::string_view item) {
  if (done_) return;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (!tty_) {
    const int decile = static_cast<int>(fraction * 10.0);
    if (decile == last_decile_) return;
    last_decile_ = decile;
    std::fprintf(stderr, "%s: %3.0f%%\n", label_.c_str(), fraction * 100.0);
    return;
  }
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(fraction * kWidth);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kWidth, '.');
  char rate[32] = "";
  if (total_ > 0 && elapsed > 0.0) {
    std::snprintf(rate, sizeof rate, " %6.1f MB/s", fraction * static_cast<double>(total_) / elapsed / 1e6);
  }
  const double eta = fraction > 0.0 ? elapsed * (1.0 - fraction) / fraction : 0.0;
  const std::string name(item.substr(0, 28));
  std::fprintf(stderr, "\r%s [%s] %3.0f%%%s ETA %4.1fs %-28s", label_.c_str(), bar.c_str(), fraction * 100.0,
               rate, eta, name.c_str());
  std::fflush(stderr);
}

void Progress::finish() {
  if (done_) return;
  update(1.0, "");
  done_ = true;
  if (tty_) std::fprintf(stderr, "\n");
}

}  // namespace loom::cli
