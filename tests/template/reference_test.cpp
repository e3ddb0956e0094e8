// Every (template, conversation) pair of the reference set, rendered by loom and compared
// byte for byte with what Python's Jinja2 rendered (configured as transformers does; see
// ../shared/reference/chat/README.md).
#include <catch2/catch.hpp>

#include <simdjson.h>

#include <ctime>
#include <fstream>
#include <map>
#include <sstream>

#include "loom/chat_template.hpp"
#include "loom/error.hpp"
#include "support/test_support.hpp"

namespace {

// A time whose "%d %b %Y" is "26 Jul 2024" in any time zone: noon UTC that day.
std::chrono::system_clock::time_point pinned_now() {
  std::tm tm{};
  tm.tm_year = 2024 - 1900;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 12;
  return std::chrono::system_clock::from_time_t(timegm(&tm));
}

struct Conversation {
  std::string messages_json;
};

std::string first_difference(const std::string& got, const std::string& want) {
  size_t k = 0;
  while (k < got.size() && k < want.size() && got[k] == want[k]) ++k;
  const size_t from = k > 40 ? k - 40 : 0;
  return "first difference at byte " + std::to_string(k) + "\n  got:  ..." +
         got.substr(from, 120) + "\n  want: ..." + want.substr(from, 120);
}

}  // namespace

TEST_CASE("chat templates render as Jinja2 renders them") {
  LOOM_REQUIRE_REFERENCE(ref);
  const auto chat = ref / "chat";
  if (!std::filesystem::exists(chat / "expected.jsonl")) {
    WARN("SKIPPED: " << (chat / "expected.jsonl").string() << " is absent");
    return;
  }
  simdjson::dom::parser parser;
  std::map<std::string, Conversation> conversations;
  {
    simdjson::padded_string text(loom::test::read_file_text(chat / "conversations.json"));
    simdjson::dom::element root = parser.parse(text);
    for (simdjson::dom::element c : root.get_array()) {
      conversations[std::string(std::string_view(c["id"]))].messages_json =
          simdjson::minify(c["messages"]);
    }
  }
  std::ifstream lines(chat / "expected.jsonl");
  std::string line;
  int total = 0, passed = 0, errors_expected = 0;
  std::map<std::string, loom::ChatTemplate> compiled;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    ++total;
    simdjson::padded_string padded(line);
    simdjson::dom::parser p;
    simdjson::dom::element rec = p.parse(padded);
    const std::string name{std::string_view(rec["template"])};
    const std::string conv{std::string_view(rec["conversation"])};
    INFO("template " << name << ", conversation " << conv);
    loom::ChatTemplateInputs in;
    in.messages_json = conversations.at(conv).messages_json;
    in.add_generation_prompt = bool(rec["add_generation_prompt"]);
    in.bos_token = std::string(std::string_view(rec["bos_token"]));
    in.eos_token = std::string(std::string_view(rec["eos_token"]));
    in.now = pinned_now();
    std::string_view want_output, want_error;
    const bool expect_error = rec["error"].get(want_error) == simdjson::SUCCESS;
    if (!expect_error) want_output = std::string_view(rec["output"]);
    try {
      auto it = compiled.find(name);
      if (it == compiled.end()) {
        const std::string source = loom::test::read_file_text(chat / "templates" / name);
        it = compiled.emplace(name, loom::ChatTemplate::compile(source, name)).first;
      }
      const std::string got = it->second.render(in);
      if (expect_error) {
        FAIL_CHECK("expected an error (" << want_error << "), got a rendering");
      } else if (got == want_output) {
        ++passed;
      } else {
        FAIL_CHECK(first_difference(got, std::string(want_output)));
      }
    } catch (const loom::Error& e) {
      if (expect_error) {
        ++errors_expected;
        // "TemplateError: System role not supported": the template's own message must be in ours.
        const std::string message(want_error.substr(want_error.find(": ") + 2));
        CHECK(e.code() == loom::ErrorCode::template_error);
        CHECK_THAT(std::string(e.what()), Catch::Contains(message));
        if (std::string(e.what()).find(message) != std::string::npos) ++passed;
      } else {
        FAIL_CHECK("render failed: " << e.what());
      }
    }
  }
  std::printf("chat templates: %d/%d records match Jinja2 (%d of them expected errors)\n", passed,
              total, errors_expected);
  CHECK(total == 57);
  CHECK(passed == total);
}
