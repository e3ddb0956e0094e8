// Internal: string concatenation by appending (GCC 12's -Wrestrict misfires on chains of
// `"literal" + std::string(...)` at -O3).
#pragma once

#include <string>
#include <string_view>

namespace loom::tok {

template <typename... Parts>
std::string str_cat(const Parts&... parts) {
  std::string s;
  (s.append(std::string_view(parts)), ...);
  return s;
}

}  // namespace loom::tok
