// Helpers the C API tests share.
#pragma once

#include <catch2/catch.hpp>

#include <string>

#include "loom.h"

namespace loom::test {

// Loads a model through the C API with logging off; fails the test (with the error's
// message) when it does not load.
inline loom_model* load_quiet(const std::string& path) {
  loom_load_params p;
  loom_load_params_init(&p);
  p.log_level = LOOM_LOG_OFF;
  loom_model* m = nullptr;
  loom_error* err = nullptr;
  const loom_status s = loom_model_load(path.c_str(), &p, &m, &err);
  INFO(path << ": " << (err ? loom_error_message(err) : ""));
  loom_error_free(err);
  REQUIRE(s == LOOM_OK);
  return m;
}

}  // namespace loom::test
