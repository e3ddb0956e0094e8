// The debug hook's helpers (loom/trace.hpp): stage names, statistics, dump names.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "loom/trace.hpp"

TEST_CASE("split_trace_name takes the block number off block stages only") {
  auto s = loom::split_trace_name("blk.3.attn_out");
  CHECK(s.stage == "attn_out");
  CHECK(s.layer == 3);
  s = loom::split_trace_name("blk.117.ffn_out");
  CHECK(s.stage == "ffn_out");
  CHECK(s.layer == 117);
  for (const char* whole : {"embd", "output_norm", "logits", "blk.", "blk.3", "blk.3.", "blk..x", "blk.x.y",
                            "blk.99999999999.attn_out"}) {
    INFO(whole);
    s = loom::split_trace_name(whole);
    CHECK(s.stage == whole);
    CHECK(s.layer == -1);
  }
}

TEST_CASE("activation_stats counts NaN and Inf apart and keeps them out of min, max and mean") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> v{1.0f, -2.0f, nan, inf, 4.0f, -inf, nan, 0.5f, -nan};
  const auto s = loom::activation_stats(v);
  CHECK(s.count == 9);
  CHECK(s.nan == 3);
  CHECK(s.inf == 2);
  CHECK(s.min == -2.0);
  CHECK(s.max == 4.0);
  CHECK(s.mean == Approx(3.5 / 4.0));

  const auto none = loom::activation_stats(std::vector<float>{nan, inf});
  CHECK(none.count == 2);
  CHECK(none.nan == 1);
  CHECK(none.inf == 1);
  CHECK(none.min == 0.0);
  CHECK(none.max == 0.0);
  CHECK(none.mean == 0.0);

  const auto empty = loom::activation_stats({});
  CHECK(empty.count == 0);
  CHECK(empty.nan == 0);

  const auto big = loom::activation_stats(std::vector<float>{3.0e38f, 3.0e38f});  // sums in double: no overflow
  CHECK(big.inf == 0);
  CHECK(big.mean == Approx(3.0e38));
}

TEST_CASE("trace_dump_name names block stages with their layer") {
  CHECK(loom::trace_dump_name(0, "attn_out", 3) == "0-attn_out-L3.npy");
  CHECK(loom::trace_dump_name(12, "logits", -1) == "12-logits.npy");
  CHECK(loom::trace_dump_name(1, "embd", -1) == "1-embd.npy");
}
