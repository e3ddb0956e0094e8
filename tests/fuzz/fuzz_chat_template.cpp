// libFuzzer harness: a chat template's source compiled and rendered over a fixed small
// conversation (with a tool call and tools). Syntax errors, raised exceptions and sandbox
// limits are expected; crashes, over-reads and hangs are not.
#include <chrono>
#include <string_view>

#include "loom/chat_template.hpp"
#include "loom/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  try {
    const loom::ChatTemplate tpl = loom::ChatTemplate::compile(source, "fuzz");
    loom::ChatTemplateInputs in;
    in.messages_json =
        R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi \u00e9"},)"
        R"( {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",)"
        R"( "function": {"name": "get", "arguments": {"x": 1.5, "y": [true, null]}}}]},)"
        R"( {"role": "tool", "tool_call_id": "c1", "content": "42"}])";
    in.tools_json = R"([{"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}])";
    in.bos_token = "<s>";
    in.eos_token = "</s>";
    in.now = std::chrono::system_clock::time_point(std::chrono::seconds(1721995200));
    volatile size_t sink = tpl.render(in).size();
    (void)sink;
  } catch (const loom::Error&) {
  }
  return 0;
}
