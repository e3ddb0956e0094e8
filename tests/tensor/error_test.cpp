#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "loom/error.hpp"
#include "loom/log.hpp"

TEST_CASE("errors carry file, tensor and offset in their message") {
  loom::Error e(loom::ErrorCode::format, "bad header",
                {.file = "/m/model.safetensors", .tensor = "blk.0.attn_q", .offset = 8});
  const std::string what = e.what();
  CHECK(what == "file '/m/model.safetensors': tensor 'blk.0.attn_q': at byte 8: bad header [format]");
  CHECK(e.detail() == "bad header");
  CHECK(e.code() == loom::ErrorCode::format);
  CHECK(e.context().offset == 8u);
}

TEST_CASE("with_context fills only the missing parts") {
  loom::Error inner(loom::ErrorCode::io, "short read", {.offset = 100});
  auto outer = inner.with_context({.file = "a.gguf", .tensor = "x", .offset = 5});
  CHECK(outer.context().file == "a.gguf");
  CHECK(outer.context().tensor == "x");
  CHECK(outer.context().offset == 100u);
  CHECK(std::string(outer.what()).find("a.gguf") != std::string::npos);
}

TEST_CASE("error code names are stable") {
  CHECK(loom::error_code_name(loom::ErrorCode::missing_tensor) == "missing_tensor");
  CHECK(loom::error_code_name(loom::ErrorCode::cancelled) == "cancelled");
  CHECK(static_cast<int>(loom::ErrorCode::io) == 1);
  CHECK(static_cast<int>(loom::ErrorCode::internal) == 9);
}

TEST_CASE("a logger routes messages at or above its level to the host's sink") {
  std::vector<std::pair<loom::LogLevel, std::string>> seen;
  auto logger = loom::Logger::to_sink(
      [&](loom::LogLevel level, std::string_view msg) { seen.emplace_back(level, std::string(msg)); },
      loom::LogLevel::info);
  logger.log(loom::LogLevel::debug, "hidden");
  logger.log(loom::LogLevel::warn, "shown");
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].first == loom::LogLevel::warn);
  CHECK(seen[0].second == "shown");
  logger.set_level(loom::LogLevel::trace);
  logger.log(loom::LogLevel::trace, "detail");
  CHECK(seen.size() == 2);
  auto quiet = loom::Logger::silent();
  CHECK_FALSE(quiet.enabled(loom::LogLevel::error));
}

TEST_CASE("the global logger can be rerouted and restored") {
  std::vector<std::string> seen;
  loom::set_global_log_sink([&](loom::LogLevel, std::string_view m) { seen.emplace_back(m); },
                            loom::LogLevel::info);
  loom::Logger::global().log(loom::LogLevel::info, "to host");
  loom::set_global_log_sink(nullptr, loom::LogLevel::warn);
  loom::Logger::global().log(loom::LogLevel::info, "dropped");
  REQUIRE(seen.size() == 1);
  CHECK(seen[0] == "to host");
  loom::set_global_log_level(loom::LogLevel::info);
}
