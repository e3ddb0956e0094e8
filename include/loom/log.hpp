// loom::Logger — where the library's diagnostics go.
//
// By default loom logs a summary (info level and above) to stderr through spdlog.
// A host can route everything to its own sink, change the level, or silence it, either
// globally (set_default_log_sink) or per load (LoadOptions::logger). A Logger is a cheap,
// copyable handle; copies share one sink. Thread-safe: the sink may be called from any
// loom thread, one message at a time.
#pragma once

#include <functional>
#include <memory>
#include <string_view>

namespace loom {

enum class LogLevel : int { trace = 0, debug = 1, info = 2, warn = 3, error = 4, off = 5 };

std::string_view log_level_name(LogLevel level) noexcept;

using LogSink = std::function<void(LogLevel level, std::string_view message)>;

class Logger {
 public:
  // The process-wide logger (stderr unless a host replaced its sink).
  static Logger global();
  // A logger that sends messages at or above `level` to `sink`.
  static Logger to_sink(LogSink sink, LogLevel level = LogLevel::info);
  // A logger that drops everything.
  static Logger silent();

  bool enabled(LogLevel level) const noexcept;
  void log(LogLevel level, std::string_view message) const;
  LogLevel level() const noexcept;
  void set_level(LogLevel level) const;

  struct Impl;

 private:
  explicit Logger(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

// Replaces the sink of Logger::global(); pass an empty function to restore stderr.
void set_global_log_sink(LogSink sink, LogLevel level = LogLevel::info);
void set_global_log_level(LogLevel level);

}  // namespace loom
