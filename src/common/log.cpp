#include "loom/log.hpp"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>

namespace loom {

namespace {

constexpr std::array<std::string_view, 6> kLevelNames{"trace", "debug", "info",
                                                      "warn",  "error", "off"};
constexpr std::array<spdlog::level::level_enum, 6> kSpdLevels{
    spdlog::level::trace, spdlog::level::debug, spdlog::level::info,
    spdlog::level::warn,  spdlog::level::err,   spdlog::level::off};

spdlog::level::level_enum to_spd(LogLevel level) {
  return kSpdLevels[static_cast<size_t>(level)];
}

LogLevel from_spd(spdlog::level::level_enum level) {
  for (size_t i = 0; i < kSpdLevels.size(); ++i) {
    if (kSpdLevels[i] == level) return static_cast<LogLevel>(i);
  }
  return LogLevel::info;  // spdlog's "critical" maps onto error's neighbour
}

// spdlog 1.10 has no callback sink; this forwards formatted payloads to a host function.
class CallbackSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit CallbackSink(LogSink sink) : sink_(std::move(sink)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    sink_(from_spd(msg.level), std::string_view(msg.payload.data(), msg.payload.size()));
  }
  void flush_() override {}

 private:
  LogSink sink_;
};

LogLevel level_from_environment() {
  const char* env = std::getenv("LOOM_LOG_LEVEL");
  if (env == nullptr) return LogLevel::info;
  for (size_t i = 0; i < kLevelNames.size(); ++i) {
    if (kLevelNames[i] == env) return static_cast<LogLevel>(i);
  }
  return LogLevel::info;
}

}  // namespace

// The spdlog logger is swapped atomically so a host may reroute the global logger
// while loom threads are logging.
struct Logger::Impl {
  explicit Impl(std::shared_ptr<spdlog::logger> initial) : logger(std::move(initial)) {}
  std::atomic<std::shared_ptr<spdlog::logger>> logger;
};

std::string_view log_level_name(LogLevel level) noexcept {
  const auto index = static_cast<size_t>(level);
  return index < kLevelNames.size() ? kLevelNames[index] : "unknown";
}

namespace {
std::shared_ptr<Logger::Impl> make_stderr_impl() {
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>("loom", sink);
  logger->set_pattern("[loom %^%l%$] %v");
  logger->set_level(to_spd(level_from_environment()));
  return std::make_shared<Logger::Impl>(std::move(logger));
}

std::mutex& global_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::shared_ptr<Logger::Impl>& global_impl() {
  static std::shared_ptr<Logger::Impl> impl = make_stderr_impl();
  return impl;
}
}  // namespace

Logger Logger::global() {
  std::lock_guard lock(global_mutex());
  return Logger(global_impl());
}

Logger Logger::to_sink(LogSink sink, LogLevel level) {
  auto logger = std::make_shared<spdlog::logger>(
      "loom", std::make_shared<CallbackSink>(std::move(sink)));
  logger->set_pattern("%v");
  logger->set_level(to_spd(level));
  return Logger(std::make_shared<Impl>(std::move(logger)));
}

Logger Logger::silent() {
  auto logger =
      std::make_shared<spdlog::logger>("loom", std::make_shared<spdlog::sinks::null_sink_mt>());
  logger->set_level(spdlog::level::off);
  return Logger(std::make_shared<Impl>(std::move(logger)));
}

bool Logger::enabled(LogLevel level) const noexcept {
  return impl_->logger.load()->should_log(to_spd(level));
}

void Logger::log(LogLevel level, std::string_view message) const {
  auto logger = impl_->logger.load();
  if (logger->should_log(to_spd(level))) logger->log(to_spd(level), "{}", message);
}

LogLevel Logger::level() const noexcept { return from_spd(impl_->logger.load()->level()); }

void Logger::set_level(LogLevel level) const { impl_->logger.load()->set_level(to_spd(level)); }

void set_global_log_sink(LogSink sink, LogLevel level) {
  std::lock_guard lock(global_mutex());
  if (sink) {
    auto logger = std::make_shared<spdlog::logger>(
        "loom", std::make_shared<CallbackSink>(std::move(sink)));
    logger->set_pattern("%v");
    logger->set_level(to_spd(level));
    global_impl()->logger.store(std::move(logger));
  } else {
    auto fresh = make_stderr_impl()->logger.load();
    fresh->set_level(to_spd(level));
    global_impl()->logger.store(std::move(fresh));
  }
}

void set_global_log_level(LogLevel level) {
  std::lock_guard lock(global_mutex());
  global_impl()->logger.load()->set_level(to_spd(level));
}

}  // namespace loom
