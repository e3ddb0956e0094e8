// MetaValue and Metadata.
#include <catch2/catch.hpp>

#include <cmath>

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
  try {
    (void)MetaValue::of_string("x").as_array();
  } catch (const loom::Error& e) {
    CHECK(std::string(e.what()).find("metadata value is string, expected array") != std::string::npos);
  }
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
