// Internal: fmt-style logging helpers over loom::Logger (fmt stays out of public headers).
#pragma once

#include <fmt/format.h>

#include "loom/log.hpp"

namespace loom::detail {

template <typename... Args>
void log(const Logger& logger, LogLevel level, fmt::format_string<Args...> format,
         Args&&... args) {
  if (logger.enabled(level)) logger.log(level, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace loom::detail
