// The forgiving JSON reader of Hugging Face side files: what it forgives (BOM, comments,
// trailing commas), what it never touches (string contents), and where it says broken
// JSON is broken (file, line, column).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "format/lenient_json.hpp"
#include "format/shard_index.hpp"
#include "loom/error.hpp"
#include "support/format_fixtures.hpp"

namespace f = loom::format;
using loom::ErrorCode;

namespace {

struct Parsed {
  simdjson::dom::parser parser;
  simdjson::padded_string storage;
  simdjson::dom::element root;
  std::vector<std::string> warnings;
};

void parse(Parsed& p, std::string_view text, const f::LenientJsonOptions& options = {}) {
  p.root = f::parse_lenient_json(p.parser, p.storage, text, "cfg.json", &p.warnings, options);
}

std::string str(simdjson::dom::element e, std::string_view key) {
  std::string_view s;
  REQUIRE(e[key].get(s) == simdjson::SUCCESS);
  return std::string(s);
}

int64_t num(simdjson::dom::element e, std::string_view key) {
  int64_t v = 0;
  REQUIRE(e[key].get(v) == simdjson::SUCCESS);
  return v;
}

}  // namespace

TEST_CASE("lenient JSON: strict documents pass unchanged and warn about nothing") {
  const std::string text = R"({"a": [1, 2, {"b": "c"}], "d": null})";
  const auto blanked = f::blank_json_extras(text, "x.json");
  CHECK_FALSE(blanked.changed());
  CHECK(blanked.text.empty());
  Parsed p;
  parse(p, text);
  CHECK(p.warnings.empty());
  CHECK(p.root["a"].get_array().size() == 3);
}

TEST_CASE("lenient JSON: a UTF-8 byte-order mark is forgiven and reported") {
  Parsed p;
  parse(p, "\xEF\xBB\xBF{\"vocab_size\": 32}");
  CHECK(num(p.root, "vocab_size") == 32);
  REQUIRE(p.warnings.size() == 1);
  CHECK(p.warnings[0] == "cfg.json: a UTF-8 byte-order mark was ignored");
}

TEST_CASE("lenient JSON: line and block comments are blanked, offsets and lines kept") {
  const std::string text =
      "{ // the model\n"
      "  \"a\": 1, /* several\n"
      "  lines */ \"b\": 2 // last\n"
      "}";
  const auto blanked = f::blank_json_extras(text, "x.json");
  CHECK(blanked.forgiven.comments == 3);
  CHECK(blanked.forgiven.trailing_commas == 0);
  REQUIRE(blanked.text.size() == text.size());
  // Newlines stay where they were; the comments became spaces.
  for (size_t i = 0; i < text.size(); ++i) {
    INFO(i);
    if (text[i] == '\n') CHECK(blanked.text[i] == '\n');
  }
  CHECK(blanked.text.find("//") == std::string::npos);
  CHECK(blanked.text.find("/*") == std::string::npos);
  CHECK(blanked.text.find("several") == std::string::npos);
  CHECK(blanked.text.substr(text.find("\"b\""), 3) == "\"b\"");
  Parsed p;
  parse(p, text);
  CHECK(num(p.root, "a") == 1);
  CHECK(num(p.root, "b") == 2);
  REQUIRE(p.warnings.size() == 1);
  CHECK(p.warnings[0] == "cfg.json: 3 comments were ignored");
}

TEST_CASE("lenient JSON: trailing commas before a closing bracket or brace are forgiven, other stray commas are not") {
  Parsed p;
  parse(p, "{\"a\": [1, 2, ], \"b\": {\"c\": 3,} , \"d\": [[],{},] /* x */ ,\n}");
  CHECK(p.root["a"].get_array().size() == 2);
  CHECK(num(p.root["b"], "c") == 3);
  CHECK(p.root["d"].get_array().size() == 2);
  REQUIRE(p.warnings.size() == 1);
  CHECK(p.warnings[0] == "cfg.json: 1 comment and 4 trailing commas were ignored");

  // Not trailing commas: an empty element, a doubled comma, a missing value.
  for (const std::string bad : {"[,]", "[1,,]", "{\"a\":,}", "{,}"}) {
    INFO(bad);
    Parsed q;
    loom::test::expect_error([&] { parse(q, bad); }, ErrorCode::format, "malformed JSON at line 1", "cfg.json");
  }
}

TEST_CASE("lenient JSON: all three forgiven together, in the report's words") {
  Parsed p;
  parse(p, "\xEF\xBB\xBF// c\n{\"a\": [1,], /* d */ \"b\": 2,}");
  REQUIRE(p.warnings.size() == 1);
  CHECK(p.warnings[0] == "cfg.json: a UTF-8 byte-order mark, 2 comments and 2 trailing commas were ignored");
  f::JsonForgiven one;
  one.trailing_commas = 1;
  CHECK(one.describe() == "1 trailing comma was ignored");
  CHECK(f::JsonForgiven{}.describe().empty());
}

TEST_CASE("lenient JSON: comment markers and commas inside strings are never touched") {
  const std::string text =
      R"({"url": "https://example.com/a//b", "c": "/* not a comment */", "q": "say \"//hi\", ]",)"
      R"( "bs": "ends in a backslash \\", "after": "x" // real comment
, "t": "a,]"})";
  Parsed p;
  parse(p, text);
  CHECK(str(p.root, "url") == "https://example.com/a//b");
  CHECK(str(p.root, "c") == "/* not a comment */");
  CHECK(str(p.root, "q") == "say \"//hi\", ]");
  CHECK(str(p.root, "bs") == "ends in a backslash \\");
  CHECK(str(p.root, "after") == "x");
  CHECK(str(p.root, "t") == "a,]");
  REQUIRE(p.warnings.size() == 1);
  CHECK(p.warnings[0] == "cfg.json: 1 comment was ignored");
}

TEST_CASE("lenient JSON: a quote ends a string after an even run of backslashes, never after an odd one") {
  // Strings ending in runs of 1 to 4 backslashes before their quotes, then forgiven
  // trailing commas, and huge integers after them (widened) and inside a string behind
  // escaped quotes (untouched).
  const std::string text =
      R"({"one": "a\"],", "two": "b\\", "three": "c\\\"}", "four": "d\\\\", "n": [1000000000000000000000,],)"
      R"( "s": "\"1000000000000000000000\"", "m": 2000000000000000000000,})";
  Parsed p;
  parse(p, text, {.widen_huge_integers = true});
  CHECK(str(p.root, "one") == "a\"],");
  CHECK(str(p.root, "two") == "b\\");
  CHECK(str(p.root, "three") == "c\\\"}");
  CHECK(str(p.root, "four") == "d\\\\");
  CHECK(str(p.root, "s") == "\"1000000000000000000000\"");
  double n = 0, m = 0;
  REQUIRE(p.root["n"].at(0).get(n) == simdjson::SUCCESS);
  REQUIRE(p.root["m"].get(m) == simdjson::SUCCESS);
  CHECK(n == Approx(1e21));
  CHECK(m == Approx(2e21));
  REQUIRE(p.warnings.size() == 1);
  CHECK(p.warnings[0] == "cfg.json: 2 trailing commas were ignored");
  // An unterminated string runs to the end: nothing after its quote is blanked or widened.
  CHECK(f::blank_json_extras(R"({"a": "x\\\", "b": 1,})", "cfg.json").forgiven.trailing_commas == 0);
  CHECK(f::widen_huge_integers(R"(["x\", 1000000000000000000000])").empty());
  CHECK(f::widen_huge_integers(R"(["abc\\", 1000000000000000000000])") == R"(["abc\\", 1000000000000000000000.0])");
}

TEST_CASE("lenient JSON: padded input is parsed where it lies unless something had to be forgiven") {
  std::string text = R"({"vocab": {"a": 1, "b": 2}, "s": "x"})";
  text.reserve(text.size() + simdjson::SIMDJSON_PADDING);
  Parsed p;
  parse(p, text, {.widen_huge_integers = true, .padded_input = true});
  CHECK(p.storage.size() == 0);  // no copy
  CHECK(str(p.root, "s") == "x");
  CHECK(num(p.root["vocab"], "b") == 2);
  CHECK(p.warnings.empty());

  std::string commented = R"({"s": "y", // a comment
})";
  commented.reserve(commented.size() + simdjson::SIMDJSON_PADDING);
  Parsed q;
  parse(q, commented, {.padded_input = true});
  CHECK(q.storage.size() > 0);  // the blanked copy
  CHECK(str(q.root, "s") == "y");
  CHECK(q.warnings.size() == 1);

  std::string broken = "{\"s\": [1, 2}";
  broken.reserve(broken.size() + simdjson::SIMDJSON_PADDING);
  Parsed r;
  try {
    parse(r, broken, {.padded_input = true});
    FAIL("broken JSON parsed");
  } catch (const loom::Error& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find("line 1, column 12") != std::string::npos);
  }
}

TEST_CASE("lenient JSON: broken JSON names the file, line and column") {
  struct Case {
    std::string text;
    std::string needle;
    uint64_t offset;
  };
  const std::vector<Case> cases = {
      {"{\n  \"a\": 1,\n  \"b\": [1 2]\n}", "line 3, column 11: expected ',' or ']', found '2'", 22},
      {"{\"a\": 1", "line 1, column 8: the document ends inside an object", 7},
      {"{\"a\": tru}", "line 1, column 7: expected 'true'", 6},
      {"{\"a\": \"unterminated}", "line 1, column 7: unterminated string", 6},
      {"{\"a\" 1}", "line 1, column 6: expected ':' after the key", 5},
      {"{a: 1}", "line 1, column 2: expected a quoted key, found 'a'", 1},
      {"{\"a\": 1} x", "line 1, column 10: unexpected 'x' after the end of the document", 9},
      {"{\"a\": 01}", "line 1, column 8: expected ',' or '}', found '1'", 7},
      {"{\"a\": \"\\q\"}", "line 1, column 8: unknown escape \\q", 7},
      {"", "line 1, column 1: the document is empty", 0},
      // Columns count characters, not bytes; a BOM is not a column, but it is a byte.
      {"{\"é\": \"ü\" \"x\"}", "line 1, column 11: expected ',' or '}'", 12},
      {"\xEF\xBB\xBF[1 2]", "line 1, column 4: expected ',' or ']'", 6},
      // Comments and trailing commas blanked before the error keep its position.
      {"// c\n[1, /* x */ , 2]", "line 2, column 13: expected a value, found ','", 17},
  };
  for (const auto& c : cases) {
    INFO(c.text);
    Parsed p;
    loom::test::expect_error([&] { parse(p, c.text); }, ErrorCode::format, "malformed JSON at " + c.needle,
                             "cfg.json", "", c.offset);
  }
}

TEST_CASE("lenient JSON: an unterminated block comment is an error at its opening") {
  Parsed p;
  loom::test::expect_error([&] { parse(p, "{\"a\": 1\n  /* never closed"); }, ErrorCode::format,
                           "malformed JSON at line 2, column 3: a /* comment is never closed with */", "cfg.json",
                           "", 10);
  // A "/*" inside a string opens nothing.
  parse(p, "{\"a\": \"/*\"}");
  CHECK(str(p.root, "a") == "/*");
}

TEST_CASE("lenient JSON: the scanner and line_column on their own") {
  CHECK_FALSE(f::find_json_syntax_error(R"({"a":[1,-2.5e+3,true,false,null,"\u00e9\n"],"b":{}})"));
  CHECK_FALSE(f::find_json_syntax_error(std::string(5000, '[') + std::string(5000, ']')));
  const auto e = f::find_json_syntax_error("[1, \"\xFF\"]");
  REQUIRE(e);
  CHECK(e->offset == 5);
  CHECK(e->what == "invalid UTF-8 in a string");
  CHECK(f::line_column("ab\ncd\n\xC3\xA9x", 8).line == 3);
  CHECK(f::line_column("ab\ncd\n\xC3\xA9x", 8).column == 2);  // after the two-byte é
  CHECK(f::line_column("abc", 100).column == 4);  // clamped to the end
}

TEST_CASE("lenient JSON: huge integers widen to doubles only when asked") {
  const std::string text = "{\"model_max_length\": 1000000000000000019884624838656, \"s\": \"12345678901234567890123\"}";
  Parsed p;
  parse(p, text, {.widen_huge_integers = true});
  double d = 0;
  REQUIRE(p.root["model_max_length"].get(d) == simdjson::SUCCESS);
  CHECK(d == Approx(1e30));
  CHECK(str(p.root, "s") == "12345678901234567890123");
  Parsed q;
  CHECK_THROWS_AS(parse(q, text), loom::Error);
}

TEST_CASE("lenient JSON: a hand-edited shard index loads and says what was forgiven") {
  const auto idx = f::parse_shard_index(
      "\xEF\xBB\xBF{\n  // shards\n  \"weight_map\": {\"a\": \"one.safetensors\", \"b\": \"two.safetensors\",},\n}",
      "model.safetensors.index.json");
  CHECK(idx.shards.size() == 2);
  REQUIRE(idx.warnings.size() == 1);
  CHECK(idx.warnings[0] ==
        "model.safetensors.index.json: a UTF-8 byte-order mark, 1 comment and 2 trailing commas were ignored");
  loom::test::expect_error([&] { f::parse_shard_index("{\"weight_map\": {\"a\" \"b\"}}", "i.json"); },
                           ErrorCode::format, "malformed JSON at line 1, column 21: expected ':'", "i.json");
}
