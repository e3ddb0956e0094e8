#include <catch2/catch.hpp>

#include <limits>

#include "loom/error.hpp"
#include "loom/shape.hpp"

using loom::Shape;

TEST_CASE("shape basics: rank, numel, rows, to_string") {
  Shape s{4, 8, 16};
  CHECK(s.rank() == 3);
  CHECK(s.numel() == 512);
  CHECK(s.row_length() == 16);
  CHECK(s.row_count() == 32);
  CHECK(s.to_string() == "[4, 8, 16]");
  Shape scalar;
  CHECK(scalar.rank() == 0);
  CHECK(scalar.numel() == 1);
  CHECK(scalar.to_string() == "[]");
  CHECK(Shape{0, 5}.numel() == 0);
  CHECK(Shape{2, 3} == Shape{2, 3});
  CHECK_FALSE(Shape{2, 3} == Shape{3, 2});
  CHECK_FALSE(Shape{2, 3} == Shape{2, 3, 1});
}

TEST_CASE("shape rejects bad extents and rank, and overflowing element counts") {
  CHECK_THROWS_AS((Shape{1, 2, 3, 4, 5, 6, 7, 8, 9}), loom::Error);
  CHECK_THROWS_AS((Shape{4, -1}), loom::Error);
  Shape huge{std::numeric_limits<int64_t>::max() / 2, 3};
  try {
    (void)huge.numel();
    FAIL("expected overflow");
  } catch (const loom::Error& e) {
    CHECK(e.code() == loom::ErrorCode::invalid_argument);
    CHECK(std::string(e.what()).find("overflow") != std::string::npos);
  }
  // Eight dims whose product overflows only at the end.
  Shape eight{1 << 8, 1 << 8, 1 << 8, 1 << 8, 1 << 8, 1 << 8, 1 << 8, 1 << 8};
  CHECK_THROWS_AS(eight.numel(), loom::Error);
}

TEST_CASE("contiguous strides are row-major element steps") {
  auto st = loom::contiguous_strides(Shape{2, 3, 4});
  REQUIRE(st.rank == 3);
  CHECK(st[0] == 12);
  CHECK(st[1] == 4);
  CHECK(st[2] == 1);
  auto st0 = loom::contiguous_strides(Shape{5, 0, 7});
  CHECK(st0[0] == 7);  // zero extents don't zero the strides above them
  CHECK(st0[2] == 1);
}
