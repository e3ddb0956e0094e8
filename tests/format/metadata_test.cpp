// MetaValue and Metadata.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "loom/format.hpp"

using loom::MetaValue;
using MT = loom::MetaValue::Type;

TEST_CASE("MetaValue conversions check their types and ranges") {
  CHECK(MetaValue::of_uint(7, MT::u8).as_int() == 7);
  CHECK(MetaValue::of_int(-7, MT::i16).as_double() == -7.0);
  CHECK(MetaValue::of_uint(5, MT::u32).as_uint() == 5);
  CHECK(MetaValue::of_int(5, MT::i64).as_uint() == 5);
  CHECK_THROWS_AS(MetaValue::of_int(-5, MT::i64).as_uint(), loom::Error);
  CHECK_THROWS_AS(MetaValue::of_uint(UINT64_MAX).as_int(), loom::Error);
  CHECK_THROWS_AS(MetaValue::of_uint(256, MT::u8), loom::Error);
  CHECK_THROWS_AS(MetaValue::of_int(-129, MT::i8), loom::Error);
  CHECK_THROWS_AS(MetaValue::of_uint(1, MT::i32), loom::Error);
  CHECK_THROWS_AS(MetaValue::of_float(1, MT::u8), loom::Error);
  CHECK_THROWS_AS(MetaValue::of_string("x").as_int(), loom::Error);
  CHECK_THROWS_AS(MetaValue::of_bool(true).as_string(), loom::Error);
  CHECK_THROWS_AS(MetaValue::of_array({MetaValue::of_bool(true)}, MT::u8), loom::Error);
  CHECK(MetaValue::of_float(0.1, MT::f32).as_double() == static_cast<double>(0.1f));
  CHECK(MetaValue::of_uint(1, MT::u8).is_integer());
  CHECK(MetaValue::of_float(1).is_number());
  CHECK_FALSE(MetaValue::of_string("1").is_number());
  CHECK_THROWS_WITH(MetaValue::of_string("x").array_size(),
                    Catch::Matchers::Contains("metadata value is string, expected array"));
}

TEST_CASE("MetaValue arrays give back every item as it was put in") {
  const std::vector<MetaValue> scalars = {
      MetaValue::of_int(INT64_MIN, MT::i64), MetaValue::of_int(-1, MT::i64), MetaValue::of_int(INT64_MAX, MT::i64)};
  const MetaValue ints = MetaValue::of_array(scalars, MT::i64);
  REQUIRE(ints.array_size() == 3);
  for (size_t i = 0; i < 3; ++i) CHECK(ints.array_item(i) == scalars[i]);
  CHECK(ints.array_item(0).as_int() == INT64_MIN);
  CHECK(MetaValue::of_array({MetaValue::of_uint(UINT64_MAX)}, MT::u64).array_item(0).as_uint() == UINT64_MAX);
  const MetaValue floats = MetaValue::of_array({MetaValue::of_float(0.1, MT::f32), MetaValue::of_float(-0.0, MT::f32)}, MT::f32);
  CHECK(floats.array_item(0).as_double() == static_cast<double>(0.1f));
  CHECK(std::signbit(floats.array_item(1).as_double()));
  CHECK(floats.array_item(1).type() == MT::f32);
  CHECK_FALSE(floats == MetaValue::of_array({MetaValue::of_float(0.1, MT::f32), MetaValue::of_float(0.0, MT::f32)}, MT::f32));
  const MetaValue bools = MetaValue::of_array({MetaValue::of_bool(true), MetaValue::of_bool(false)}, MT::boolean);
  CHECK(bools.array_item(0).as_bool());
  CHECK_FALSE(bools.array_item(1).as_bool());

  // Strings are packed back to back: empty ones and embedded NULs keep their bounds.
  const std::string with_nul("a\0b", 3);
  MetaValue::ArrayBuilder b(MT::string);
  b.push(MetaValue::of_string("first"));
  b.push(MetaValue::of_string(""));
  std::memcpy(b.push_string(with_nul.size()), with_nul.data(), with_nul.size());
  b.push(MetaValue::of_string("last"));
  CHECK_THROWS_AS(b.push(MetaValue::of_uint(1)), loom::Error);
  const MetaValue strings = b.finish();
  REQUIRE(strings.array_size() == 4);
  CHECK(strings.string_item(0) == "first");
  CHECK(strings.string_item(1).empty());
  CHECK(strings.string_item(2) == with_nul);
  CHECK(strings.array_item(3).as_string() == "last");
  CHECK(strings == MetaValue::of_array({MetaValue::of_string("first"), MetaValue::of_string(""),
                                        MetaValue::of_string(with_nul), MetaValue::of_string("last")},
                                       MT::string));
  CHECK(b.finish().array_size() == 0);  // finish() left the builder empty

  const MetaValue nested = MetaValue::of_array({strings, MetaValue::of_array({}, MT::u8)}, MT::array);
  CHECK(nested.array_item(0) == strings);
  CHECK(nested.array_item(1).array_size() == 0);
  CHECK(nested.array_item(1).element_type() == MT::u8);

  CHECK_THROWS_WITH(strings.array_item(4), Catch::Matchers::Contains("array item 4 of 4 items"));
  CHECK_THROWS_WITH(ints.string_item(0), Catch::Matchers::Contains("an array of i64, expected strings"));
  CHECK_THROWS_AS(MetaValue::ArrayBuilder(MT::u8).push_string(1), loom::Error);
}

TEST_CASE("MetaValue equality is by type and bits") {
  CHECK(MetaValue::of_uint(1, MT::u8) == MetaValue::of_uint(1, MT::u8));
  CHECK_FALSE(MetaValue::of_uint(1, MT::u8) == MetaValue::of_uint(1, MT::u16));
  CHECK(MetaValue::of_float(std::nan(""), MT::f64) == MetaValue::of_float(std::nan(""), MT::f64));
  CHECK_FALSE(MetaValue::of_float(0.0) == MetaValue::of_float(-0.0));
  const auto a = MetaValue::of_array({MetaValue::of_string("a")}, MT::string);
  CHECK(a == MetaValue::of_array({MetaValue::of_string("a")}, MT::string));
  CHECK_FALSE(a == MetaValue::of_array({MetaValue::of_string("b")}, MT::string));
}

TEST_CASE("MetaValue display strings") {
  CHECK(MetaValue::of_int(-3, MT::i32).to_display_string() == "-3");
  CHECK(MetaValue::of_bool(false).to_display_string() == "false");
  CHECK(MetaValue::of_string("a\"b\n").to_display_string() == "\"a\\\"b\\x0a\"");
  std::vector<MetaValue> many;
  for (int i = 0; i < 10; ++i) many.push_back(MetaValue::of_uint(static_cast<uint64_t>(i), MT::u32));
  CHECK(MetaValue::of_array(many, MT::u32).to_display_string(3) == "[0, 1, 2, ... (10 u32 items)]");
  CHECK(loom::meta_type_name(MT::f64) == "f64");
}

TEST_CASE("Metadata keeps insertion order and replaces in place") {
  loom::Metadata m;
  m.set("b", MetaValue::of_uint(1));
  m.set("a", MetaValue::of_uint(2));
  m.set("b", MetaValue::of_uint(3));
  REQUIRE(m.size() == 2);
  CHECK(m.entries()[0].first == "b");
  CHECK(m.find("b")->as_uint() == 3);
  CHECK(m.find("zz") == nullptr);
  CHECK(m.erase("b"));
  CHECK_FALSE(m.erase("b"));
  CHECK(m.find("a")->as_uint() == 2);
  m.set("c", MetaValue::of_uint(4));
  CHECK(m.entries()[1].first == "c");
  CHECK(m.find("c")->as_uint() == 4);
  CHECK(loom::format_kind_name(loom::FormatKind::gguf) == "gguf");
}
