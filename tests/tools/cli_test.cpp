// The loom command line, driven as a person would: flags, errors, exit codes, and the
// convert / verify / inspect / tokenize / bench / run commands on generated models.
#include <catch2/catch.hpp>
#include <simdjson.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "loom/demo.hpp"
#include "loom/exporter.hpp"
#include "support/test_support.hpp"
#include "tools/cli_run.hpp"
#include "support/tiny_model.hpp"

namespace fs = std::filesystem;
namespace t = loom::test;

namespace {

using Run = t::CliRun;
using t::loom_cli;
using t::quote;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The random-weight demo model (loom::write_demo_model: a tiny llama with a trained
// byte-level tokenizer), so every command has something real to chew on.
struct Fixture {
  t::TempDir dir;
  fs::path model;
  Fixture() {
    model = dir / "demo";
    loom::write_demo_model(model);
  }
};

}  // namespace

TEST_CASE("cli: help, unknown commands and flags, bad values, exit codes") {
  Run r = loom_cli("--help");
  CHECK(r.code == 0);
  CHECK(contains(r.output, "commands:"));
  CHECK(contains(r.output, "exit codes"));
  CHECK(loom_cli("").code == 2);
  r = loom_cli("frobnicate");
  CHECK(r.code == 2);
  CHECK(contains(r.output, "unknown command 'frobnicate'"));
  for (const std::string cmd : {"run", "inspect", "convert", "verify", "tokenize", "bench"}) {
    r = loom_cli(cmd + " --help");
    INFO(cmd);
    CHECK(r.code == 0);
    CHECK(contains(r.output, "usage: loom " + cmd));
  }
  r = loom_cli("run --bogus");
  CHECK(r.code == 2);
  CHECK(contains(r.output, "unknown flag --bogus"));
  r = loom_cli("run --max-tokens lots");
  CHECK(r.code == 2);
  CHECK(contains(r.output, "--max-tokens expects an integer, got 'lots'"));
  r = loom_cli("convert --model a --out b --format zip");
  CHECK(r.code == 2);
  CHECK(contains(r.output, "one of pack|safetensors|gguf"));
  r = loom_cli("run --temperature");
  CHECK(r.code == 2);
  CHECK(contains(r.output, "--temperature expects a number"));
  r = loom_cli("inspect");
  CHECK(r.code == 2);
  r = loom_cli("verify");
  CHECK(r.code == 2);
  r = loom_cli("--version");
  CHECK(r.code == 0);
  CHECK(contains(r.output, "loom 0."));
}

TEST_CASE("cli: errors name the file and exit 1") {
  Run r = loom_cli("run --model /no/such/model --prompt hi");
  CHECK(r.code == 1);
  CHECK(contains(r.output, "/no/such/model"));
  t::TempDir dir;
  t::write_file_bytes(dir / "broken.gguf", {'G', 'G', 'U', 'F', 3, 0, 0, 0, 1});
  r = loom_cli("inspect --model " + quote((dir / "broken.gguf").string()));
  CHECK(r.code == 1);
  CHECK(contains(r.output, "broken.gguf"));
}

TEST_CASE("cli: run the built-in stories260K demo, inspect, tokenize and bench") {
  // No --model: the vendored stories260K tells its story (greedy, so the text is known:
  // it is llama2.c's own output for this prompt).
  Run r = loom_cli("run --max-tokens 12 --temperature 0");
  CHECK(r.code == 0);
  CHECK(contains(r.output, "built-in demo model, stories260K"));
  CHECK(contains(r.output, "examples/models/stories260K/stories260K.bin"));
  CHECK(contains(r.output, "format     llama2c"));
  CHECK(contains(r.output, "47 zero-copy"));
  CHECK(contains(r.output, "Once upon a time, there was a little girl named Lily."));
  CHECK(contains(r.output, "tok/s"));
  // A sampled run with a seed streams the same text twice.
  const std::string sampled = "run --prompt 'Once upon a time' --max-tokens 16 --seed 3 --no-report";
  Run a = loom_cli(sampled);
  Run b = loom_cli(sampled);
  CHECK(a.code == 0);
  CHECK(a.output.substr(0, a.output.find("loom: prompt")) == b.output.substr(0, b.output.find("loom: prompt")));
  // A missing demo model says where it looked.
  r = loom_cli("run --max-tokens 2", "LOOM_DEMO_MODEL=/no/such/stories.bin");
  CHECK(r.code == 1);
  CHECK(contains(r.output, "/no/such/stories.bin"));
  // The tokenizer of a llama2.c checkpoint is the tok512.bin beside it.
  r = loom_cli("tokenize --model " + quote(std::string(LOOM_SOURCE_DIR) + "/examples/models/stories260K/stories260K.bin") +
               " Once upon a time");
  CHECK(r.code == 0);
  CHECK(contains(r.output, "403\t' Once'"));
  CHECK(contains(r.output, "5 tokens"));
  r = loom_cli("bench --reps 1 --prompt-tokens 8 --gen-tokens 4 --threads 1");
  CHECK(r.code == 0);
  CHECK(contains(r.output, "stories260K.bin (llama"));

  Fixture f;
  r = loom_cli("run --model " + quote(f.model.string()) + " --prompt 'Once upon a time' --max-tokens 5 --seed 3");
  CHECK(r.code == 0);
  CHECK(contains(r.output, "zero-copy"));
  CHECK(contains(r.output, "tok/s"));
  r = loom_cli("inspect --model " + quote(f.model.string()) + " --trace");
  CHECK(r.code == 0);
  CHECK(contains(r.output, "blk.0.attn_q"));
  CHECK(contains(r.output, "model.layers.0.self_attn.q_proj.weight"));
  r = loom_cli("inspect --model " + quote(f.model.string()) + " --json");
  CHECK(r.code == 0);
  CHECK(contains(r.output, "\"zero_copy\": 39"));
  r = loom_cli("tokenize --model " + quote(f.model.string()) + " the loom");
  CHECK(r.code == 0);
  CHECK(contains(r.output, "tokens"));
  CHECK(contains(r.output, "' loom'"));
  r = loom_cli("bench --model " + quote(f.model.string()) + " --reps 1 --prompt-tokens 8 --gen-tokens 4 --threads 1");
  CHECK(r.code == 0);
  CHECK(contains(r.output, "prefill  8 tokens"));
  CHECK(contains(r.output, "decode   4 tokens"));
  r = loom_cli("bench --model " + quote(f.model.string()) + " --reps 0");
  CHECK(r.code == 2);
}

TEST_CASE("cli: convert to a pack, verify it, detect corruption, convert to safetensors and GGUF") {
  Fixture f;
  t::TempDir out;
  const fs::path pack = out / "m.pack";
  Run r = loom_cli("convert --model " + quote(f.model.string()) + " --out " + quote(pack.string()) + " --dtype f16");
  REQUIRE(r.code == 0);
  CHECK(contains(r.output, "wrote"));
  r = loom_cli("verify " + quote(pack.string()));
  CHECK(r.code == 0);
  CHECK(contains(r.output, "matches its index"));
  r = loom_cli("run --model " + quote(pack.string()) + " --prompt hello --max-tokens 3 --no-report");
  CHECK(r.code == 0);
  r = loom_cli("convert --model " + quote(f.model.string()) + " --out " + quote(pack.string()));
  CHECK(r.code == 1);
  CHECK(contains(r.output, "already exists"));

  auto bytes = t::read_file_bytes(pack / "data-00000.bin");
  bytes[bytes.size() / 2] ^= 0x40;
  t::write_file_bytes(pack / "data-00000.bin", bytes);
  r = loom_cli("verify " + quote(pack.string()));
  CHECK(r.code == 3);
  CHECK(contains(r.output, "tensor blk."));
  CHECK(contains(r.output, "sha256"));

  r = loom_cli("convert --model " + quote(f.model.string()) + " --out " + quote((out / "st").string()) + " --format safetensors --dtype bf16");
  CHECK(r.code == 0);
  CHECK(fs::exists(out / "st" / "tokenizer.json"));
  r = loom_cli("convert --model " + quote(f.model.string()) + " --out " + quote((out / "m.gguf").string()) + " --format gguf");
  CHECK(r.code == 0);
  r = loom_cli("inspect --model " + quote((out / "st").string()) + " --json");
  CHECK(contains(r.output, "\"architecture\": \"llama\""));
}

TEST_CASE("cli: quantized packs with --quantize gq4 --group 64 and a preset, bad values named") {
  Fixture f;
  t::TempDir out;
  const std::string src = quote(f.model.string());
  const fs::path gq = out / "gq4.pack";
  Run r = loom_cli("convert --model " + src + " --out " + quote(gq.string()) + " --quantize gq4 --group 64");
  REQUIRE(r.code == 0);
  const std::string index = t::read_file_text(gq / "index.json");
  CHECK(contains(index, "\"dtype\": \"gq4_64\""));
  CHECK(contains(index, "\"recipe\": \"gq4_64\""));
  r = loom_cli("inspect --model " + quote(gq.string()) + " --trace");
  CHECK(r.code == 0);
  CHECK(contains(r.output, "gq4_64 x "));
  r = loom_cli("run --model " + quote(gq.string()) + " --prompt hello --max-tokens 3 --no-report");
  CHECK(r.code == 0);

  const fs::path km = out / "km.pack";
  r = loom_cli("convert --model " + src + " --out " + quote(km.string()) + " --quantize Q4_K_M");
  REQUIRE(r.code == 0);
  const std::string km_index = t::read_file_text(km / "index.json");
  CHECK(contains(km_index, "\"recipe\": \"q4_k_m\""));
  CHECK(contains(km_index, "\"blk.0.ffn_down\": \"q6_k\""));
  CHECK(contains(km_index, "\"blk.0.ffn_up\": \"q4_k\""));
  r = loom_cli("run --model " + quote(km.string()) + " --prompt hello --max-tokens 3 --no-report");
  CHECK(r.code == 0);

  r = loom_cli("convert --model " + src + " --out " + quote((out / "bad").string()) + " --quantize gq4 --group 48");
  CHECK(r.code != 0);
  CHECK(contains(r.output, "group size 48 is not one of 32, 64, 128"));
  CHECK_FALSE(fs::exists(out / "bad.partial"));
  r = loom_cli("convert --model " + src + " --out " + quote((out / "bad").string()) + " --quantize q4_k_xl");
  CHECK(r.code != 0);
  CHECK(contains(r.output, "unknown quantization 'q4_k_xl'; valid: q8_0"));
  CHECK(contains(r.output, "gq4_m"));
}

TEST_CASE("cli: a conversion killed mid-way resumes to a byte-identical pack") {
  Fixture f;
  t::TempDir out;
  const std::string src = quote(f.model.string());
  const std::string env = "SOURCE_DATE_EPOCH=1700000000";
  Run whole = loom_cli("convert --model " + src + " --out " + quote((out / "whole").string()), env);
  REQUIRE(whole.code == 0);
  // The test hook makes the process die (_Exit) after 9 tensors, as a kill would.
  Run killed = loom_cli("convert --model " + src + " --out " + quote((out / "again").string()),
                        env + " LOOM_TEST_CRASH_AFTER_TENSORS=9");
  CHECK(killed.code == 86);
  CHECK(fs::exists(out / "again.partial"));
  CHECK_FALSE(fs::exists(out / "again"));
  Run resumed = loom_cli("convert --model " + src + " --out " + quote((out / "again").string()), env);
  REQUIRE(resumed.code == 0);
  CHECK(contains(resumed.output, "resumed after"));
  for (const auto& e : fs::directory_iterator(out / "whole")) {
    INFO(e.path().filename());
    CHECK(t::read_file_bytes(e.path()) == t::read_file_bytes(out / "again" / e.path().filename()));
  }
}

// ---- generation defaults (generation_config.json) ----

TEST_CASE("cli: run takes max_new_tokens and do_sample from generation_config.json, flags win") {
  Fixture f;
  const fs::path model = f.dir / "with-gen";
  fs::copy(f.model, model);
  {
    std::ofstream out(model / "generation_config.json");
    out << "{\n  \"do_sample\": false, // greedy\n  \"max_new_tokens\": 3,\n}\n";
  }
  const std::string base = "run --model " + quote(model.string()) + " --prompt 'Once upon a time' --threads 1";
  Run r = loom_cli(base);
  CHECK(r.code == 0);
  CHECK(contains(r.output, "generation 3 tokens"));
  CHECK(contains(r.output, "stop: max_tokens"));
  CHECK(contains(r.output, "sampling   temperature 0 (generation_config.json: do_sample)"));
  CHECK(contains(r.output, "max_tokens 3 (generation_config.json: max_new_tokens)"));
  CHECK(contains(r.output, "top_k 40 (loom default)"));
  CHECK(contains(r.output, "generation_config.json: 1 comment and 1 trailing comma were ignored"));

  r = loom_cli(base + " --max-tokens 5 --temperature 0.7 --seed 1");
  CHECK(r.code == 0);
  CHECK(contains(r.output, "generation 5 tokens"));
  CHECK(contains(r.output, "temperature 0.7 (--temperature)"));
  CHECK(contains(r.output, "max_tokens 5 (--max-tokens)"));

  // Greedy from the file: two runs print the same text.
  const Run a = loom_cli(base + " --no-report");
  const Run b = loom_cli(base + " --no-report --seed 99");
  auto text = [](const Run& run) { return run.output.substr(0, run.output.find("\nloom: prompt")); };
  CHECK(a.code == 0);
  CHECK(text(a) == text(b));
  CHECK_FALSE(contains(a.output, "sampling "));

  // A broken file is an error naming it, its line and column.
  {
    std::ofstream out(model / "generation_config.json", std::ios::trunc);
    out << "{\n  \"max_new_tokens\": 3\n  \"top_k\": 2\n}\n";
  }
  r = loom_cli(base);
  CHECK(r.code == 1);
  CHECK(contains(r.output, "generation_config.json"));
  CHECK(contains(r.output, "malformed JSON at line 3, column 3: expected ',' or '}'"));
}

namespace {
// stdout alone, byte for byte (stderr dropped), and the exit code.
Run loom_stdout(const std::string& args) { return loom_cli(args, "", "2>/dev/null"); }

// The newline-terminated lines of `text` (a last line without a newline is dropped).
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  for (size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1) {
    lines.push_back(text.substr(at, nl - at));
  }
  return lines;
}

void write_text(const fs::path& p, const std::string& text) {
  FILE* f = std::fopen(p.c_str(), "wb");
  REQUIRE(f != nullptr);
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
}
}  // namespace

TEST_CASE("cli: template renders a file or the model's own template exactly") {
  Fixture fx;
  const fs::path tpl = fx.dir / "t.jinja";
  const fs::path msgs = fx.dir / "m.json";
  write_text(tpl, "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}\n{% endfor %}"
                  "{% if add_generation_prompt %}<assistant>{% endif %}{{ tools | length }}\n");
  write_text(msgs, R"([{"role": "user", "content": " Hi \u00e9 "}])");
  Run r = loom_stdout("template --template " + quote(tpl.string()) + " --messages " + quote(msgs.string()));
  CHECK(r.code == 0);
  CHECK(r.output == "<user>Hi \xC3\xA9\n0");  // nothing added, the template's last newline dropped as Jinja2 does
  r = loom_stdout("template --template " + quote(tpl.string()) + " --messages " + quote(msgs.string()) +
                  " --add-generation-prompt --bos-token '<s>'");
  CHECK(r.output == "<s><user>Hi \xC3\xA9\n<assistant>0");
  // an object with messages and tools
  write_text(msgs, R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"name": "f"}, {"name": "g"}]})");
  r = loom_stdout("template --template " + quote(tpl.string()) + " --messages " + quote(msgs.string()));
  CHECK(r.output == "<user>x\n2");

  // the model's own template and BOS/EOS text
  const fs::path tokdir = fx.dir / "tok";
  fs::create_directories(tokdir);
  fs::copy_file(fx.model / "tokenizer.json", tokdir / "tokenizer.json");
  write_text(tokdir / "tokenizer_config.json",
             R"({"bos_token": {"content": "<|begin_of_text|>"}, "eos_token": "<|end_of_text|>", )"
             R"("chat_template": "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"})");
  r = loom_stdout("template --model " + quote(tokdir.string()) + " --messages " + quote(msgs.string()));
  CHECK(r.code == 0);
  CHECK(r.output == "<|begin_of_text|>x<|end_of_text|>");

  // the template's error on stderr, exit 1; a model without a template; usage errors
  write_text(tpl, "{{ raise_exception('Conversation roles must alternate') }}");
  r = loom_cli("template --template " + quote(tpl.string()) + " --messages " + quote(msgs.string()));
  CHECK(r.code == 1);
  CHECK(contains(r.output, "Conversation roles must alternate"));
  write_text(tpl, "line one\n{% if %}");
  r = loom_cli("template --template " + quote(tpl.string()) + " --messages " + quote(msgs.string()));
  CHECK(r.code == 1);
  CHECK(contains(r.output, tpl.string() + ":2:"));
  r = loom_cli("template --model " + quote(fx.model.string()) + " --messages " + quote(msgs.string()));
  CHECK(r.code == 1);
  CHECK(contains(r.output, "no chat template"));
  CHECK(loom_cli("template --messages " + quote(msgs.string())).code == 2);
  CHECK(loom_cli("template --template " + quote(tpl.string())).code == 2);
}

// ---- chat ----

namespace {
// The demo model with a chat template in its tokenizer_config.json.
fs::path with_chat_template(const Fixture& f) {
  const fs::path model = f.dir / "chat-model";
  fs::copy(f.model, model);
  std::ofstream(model / "tokenizer_config.json", std::ios::trunc)
      << R"({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>", "chat_template": )"
      << R"("{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{{ eos_token }}\n{% endfor %})"
      << R"({% if add_generation_prompt %}<|assistant|>{% endif %}"})" << "\n";
  return model;
}
}  // namespace

TEST_CASE("cli: chat reads turns from stdin, reuses the KV cache between turns, and takes /system and /reset") {
  Fixture f;
  const fs::path model = with_chat_template(f);
  const fs::path input = f.dir / "turns.txt";
  std::ofstream(input) << "Hello there\n/system Be kind.\nAnd again\n/reset\nOnce more\n/nonsense\n";
  const Run r = loom_cli("chat --model " + quote(model.string()) +
                         " --no-report --max-tokens 3 --temperature 0 --threads 1 < " + quote(input.string()));
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(contains(r.output, "chat: type a message"));
  // Turn 1 computes everything; turn 2 changed the first message (a system prompt
  // appeared), so little is reused; after /reset the prompt starts again with BOS.
  CHECK(contains(r.output, " reused, "));
  CHECK(contains(r.output, "(0 reused, "));
  CHECK(contains(r.output, "conversation cleared"));
  CHECK(contains(r.output, "unknown command '/nonsense'"));
  size_t turns = 0;
  for (size_t at = r.output.find("[prompt "); at != std::string::npos; at = r.output.find("[prompt ", at + 1)) ++turns;
  CHECK(turns == 3);
}

TEST_CASE("cli: chat turns after the first prefill only the new message") {
  Fixture f;
  const fs::path model = with_chat_template(f);
  const fs::path input = f.dir / "turns.txt";
  std::ofstream(input) << "First question\nSecond question\n";
  // max-tokens 0: empty replies end on the EOS special token, so the boundary is exact.
  const Run r = loom_cli("chat --model " + quote(model.string()) +
                         " --no-report --max-tokens 0 --threads 1 < " + quote(input.string()));
  INFO(r.output);
  REQUIRE(r.code == 0);
  const size_t first = r.output.find("[prompt ");
  REQUIRE(first != std::string::npos);
  const size_t second = r.output.find("[prompt ", first + 1);
  REQUIRE(second != std::string::npos);
  long p1 = 0, reused1 = 0, new1 = 0, p2 = 0, reused2 = 0, new2 = 0;
  REQUIRE(std::sscanf(r.output.c_str() + first, "[prompt %ld tokens (%ld reused, %ld new)", &p1, &reused1, &new1) == 3);
  REQUIRE(std::sscanf(r.output.c_str() + second, "[prompt %ld tokens (%ld reused, %ld new)", &p2, &reused2, &new2) == 3);
  CHECK(reused1 == 0);
  CHECK(new1 == p1);
  CHECK(reused2 == p1);
  CHECK(new2 == p2 - p1);
}

TEST_CASE("cli: run --chat wraps the prompt in the template, and a base model falls back to plain completion") {
  Fixture f;
  const fs::path model = with_chat_template(f);
  Run r = loom_cli("run --chat --model " + quote(model.string()) +
                   " --prompt 'Hi' --system 'Be brief.' --max-tokens 2 --threads 1 --no-report");
  CHECK(r.code == 0);
  CHECK(contains(r.output, "generation "));
  r = loom_cli("run --chat --model " + quote(f.model.string()) + " --prompt 'Hi' --max-tokens 2 --threads 1 --no-report");
  CHECK(r.code == 0);
  CHECK(contains(r.output, "no chat template"));
  CHECK(contains(r.output, "generation 2 tokens"));
  const fs::path input = f.dir / "lines.txt";
  std::ofstream(input) << "Once upon a time\n";
  r = loom_cli("chat --model " + quote(f.model.string()) + " --no-report --max-tokens 2 --threads 1 < " +
               quote(input.string()));
  CHECK(r.code == 0);
  CHECK(contains(r.output, "no chat template"));
  CHECK(contains(r.output, "[reply 2 tokens"));
  // A template given on the command line that does not compile is an error.
  const fs::path bad = f.dir / "bad.jinja";
  std::ofstream(bad) << "{% for m in messages %}";
  r = loom_cli("chat --model " + quote(f.model.string()) + " --template " + quote(bad.string()) + " --no-report < /dev/null");
  CHECK(r.code == 1);
  CHECK(contains(r.output, "bad.jinja:1:"));  // the template's file, line and column
}

// ---- batching: loom run --parallel and loom bench --batch ----

namespace {
// `loom run --parallel` stdout back into each sequence's text: "[i] line" lines, a
// sequence's lines joined with '\n'.
std::map<int, std::string> parallel_texts(const std::string& out) {
  std::map<int, std::string> texts;
  std::map<int, bool> seen;
  size_t at = 0;
  while (at < out.size()) {
    const size_t nl = out.find('\n', at);
    REQUIRE(nl != std::string::npos);  // every line is whole
    const std::string line = out.substr(at, nl - at);
    at = nl + 1;
    INFO(line);
    REQUIRE(line.size() >= 4);
    REQUIRE(line[0] == '[');
    const size_t close = line.find("] ");
    REQUIRE(close != std::string::npos);
    const int i = std::stoi(line.substr(1, close - 1));
    if (seen[i]) texts[i] += '\n';
    seen[i] = true;
    texts[i] += line.substr(close + 2);
  }
  return texts;
}
}  // namespace

TEST_CASE("cli: run --parallel answers each prompt as a single greedy run does, in any batch") {
  Fixture f;
  const std::string model = "--model " + quote(f.model.string()) + " --no-report";
  const std::vector<std::string> prompts{"Once upon a time", "the loom weaves", "A B C"};
  const std::string common = " --temperature 0 --max-tokens 24";
  std::vector<std::string> alone;
  for (const auto& p : prompts) {
    const Run r = loom_stdout("run " + model + common + " --threads 1 --prompt " + quote(p));
    REQUIRE(r.code == 0);
    CHECK(r.output.rfind(p, 0) == 0);  // the prompt, then what was generated
    CHECK(r.output.size() > p.size());
    alone.push_back(r.output);
  }
  // All three in one batch (repeated --prompt), and two at a time from stdin lines (the
  // third joins when one finishes), at another thread count.
  std::string flags;
  for (const auto& p : prompts) flags += " --prompt " + quote(p);
  const Run together = loom_stdout("run " + model + common + " --parallel 3 --threads 2" + flags);
  REQUIRE(together.code == 0);
  auto texts = parallel_texts(together.output);
  REQUIRE(texts.size() == 3);
  for (int i = 0; i < 3; ++i) {
    INFO("prompt " << i);
    CHECK(texts[i] == alone[static_cast<size_t>(i)]);
  }
  t::TempDir dir;
  write_text(dir / "prompts.txt", prompts[0] + "\n\n" + prompts[1] + "\n" + prompts[2] + "\n");
  const Run queued =
      loom_stdout("run " + model + common + " --parallel 2 --threads 1 < " + quote((dir / "prompts.txt").string()));
  REQUIRE(queued.code == 0);
  texts = parallel_texts(queued.output);
  REQUIRE(texts.size() == 3);  // the empty line is skipped
  for (int i = 0; i < 3; ++i) {
    INFO("prompt " << i);
    CHECK(texts[i] == alone[static_cast<size_t>(i)]);
  }
  // Stats per sequence on stderr.
  const Run with_stats = loom_cli("run " + model + common + " --parallel 3" + flags);
  CHECK(with_stats.code == 0);
  CHECK(contains(with_stats.output, "loom: [2] prompt "));
  CHECK(contains(with_stats.output, "3 sequences, at most 3 at once"));
}

TEST_CASE("cli: run --parallel samples sequence i with seed + i and honours stop strings") {
  Fixture f;
  const std::string model = "--model " + quote(f.model.string()) + " --no-report --max-tokens 16";
  const Run alone = loom_stdout("run " + model + " --seed 8 --prompt 'the loom'");
  REQUIRE(alone.code == 0);
  const Run batch = loom_stdout("run " + model + " --seed 7 --parallel 2 --prompt 'Once upon' --prompt 'the loom'");
  REQUIRE(batch.code == 0);
  auto texts = parallel_texts(batch.output);
  CHECK(texts[1] == alone.output);
  // A stop string: the text ends before it, as a single run's does.
  const Run stories = loom_stdout("run --temperature 0 --max-tokens 40 --no-report --prompt 'Once upon a time'");
  REQUIRE(stories.code == 0);
  REQUIRE(contains(stories.output, "Lily"));
  const Run stopped = loom_cli("run --temperature 0 --max-tokens 40 --no-report --stop Lily --parallel 2 "
                               "--prompt 'Once upon a time' --prompt 'Once upon a time'");
  REQUIRE(stopped.code == 0);
  CHECK(contains(stopped.output, "[0] " + stories.output.substr(0, stories.output.find("Lily")) + "\n"));
  CHECK(contains(stopped.output, "[1] " + stories.output.substr(0, stories.output.find("Lily")) + "\n"));
  CHECK(contains(stopped.output, "stop: stop_string"));
}

TEST_CASE("cli: --kv-type f16 halves the KV cache and reaches run, run --parallel and bench --batch") {
  Fixture f;
  const std::string model = "--model " + quote(f.model.string()) + " --temperature 0 --max-tokens 12 --ctx 64";
  // The load report's KV line: the context, the dtype, and half the bytes in f16.
  auto kv_mib = [](const std::string& out) {
    const size_t at = out.find("KV cache ");
    REQUIRE(at != std::string::npos);
    return std::stod(out.substr(at + 9));
  };
  const Run f32 = loom_cli("run " + model + " --prompt 'the loom'");
  const Run f16 = loom_cli("run " + model + " --kv-type f16 --prompt 'the loom'");
  REQUIRE(f32.code == 0);
  REQUIRE(f16.code == 0);
  CHECK(contains(f32.output, "(64 ctx x 1 in f32)"));
  CHECK(contains(f16.output, "(64 ctx x 1 in f16)"));
  CHECK(kv_mib(f16.output) == Approx(kv_mib(f32.output) / 2).epsilon(0.02));
  // A batch with an f16 cache answers as single f16 runs do (batch invariance holds for
  // either cache type).
  const std::vector<std::string> prompts{"the loom", "Once upon a time"};
  std::vector<std::string> alone;
  for (const auto& p : prompts) {
    const Run r = loom_stdout("run " + model + " --no-report --kv-type f16 --threads 1 --prompt " + quote(p));
    REQUIRE(r.code == 0);
    CHECK(r.output.rfind(p, 0) == 0);
    alone.push_back(r.output);
  }
  const Run together = loom_stdout("run " + model + " --no-report --kv-type f16 --threads 2 --parallel 2 --prompt " +
                                   quote(prompts[0]) + " --prompt " + quote(prompts[1]));
  REQUIRE(together.code == 0);
  auto texts = parallel_texts(together.output);
  REQUIRE(texts.size() == 2);
  CHECK(texts[0] == alone[0]);
  CHECK(texts[1] == alone[1]);
  // bench says which cache it measured.
  const std::string bench = "bench --prompt-tokens 4 --gen-tokens 2 --reps 1 --threads 1";
  for (const auto& [flags, says] : {std::pair<std::string, std::string>{" --batch 2 --json --kv-type f16", "\"kv_type\":\"f16\""},
                                    {" --batch 2 --json", "\"kv_type\":\"f32\""},
                                    {" --kv-type f16", "KV cache in f16"}}) {
    INFO(flags);
    const Run r = loom_stdout(bench + flags);
    REQUIRE(r.code == 0);
    CHECK(contains(r.output, says));
  }
  // Only the cache types the kernels read.
  const Run bad = loom_cli("run --kv-type q8_0 --prompt hi");
  CHECK(bad.code == 2);
  CHECK(contains(bad.output, "f32|f16"));
}

TEST_CASE("cli: bench --batch prints one JSON object per batch size and nothing else") {
  const Run r = loom_stdout("bench --batch 1,2 --prompt-tokens 8 --gen-tokens 4 --reps 1 --threads 1 --json");
  REQUIRE(r.code == 0);
  const std::vector<std::string> lines = lines_of(r.output);
  REQUIRE(lines.size() == 2);
  CHECK(r.output.back() == '\n');
  simdjson::dom::parser parser;
  for (size_t i = 0; i < lines.size(); ++i) {
    INFO(lines[i]);
    simdjson::dom::element e;
    REQUIRE(parser.parse(lines[i]).get(e) == simdjson::SUCCESS);
    int64_t batch = 0, threads = 0, prompt = 0, gen = 0;
    REQUIRE(e["batch"].get(batch) == simdjson::SUCCESS);
    CHECK(batch == static_cast<int64_t>(i) + 1);
    REQUIRE(e["threads"].get(threads) == simdjson::SUCCESS);
    CHECK(threads == 1);
    REQUIRE(e["prompt_tokens"].get(prompt) == simdjson::SUCCESS);
    CHECK(prompt == 8);
    REQUIRE(e["gen_tokens"].get(gen) == simdjson::SUCCESS);
    CHECK(gen == 4);
    double pre = 0, dec = 0;
    REQUIRE(e["prefill_tokens_per_s"].get(pre) == simdjson::SUCCESS);
    REQUIRE(e["decode_tokens_per_s"].get(dec) == simdjson::SUCCESS);
    CHECK(pre > 0);
    CHECK(dec > 0);
    std::string_view model;
    REQUIRE(e["model"].get(model) == simdjson::SUCCESS);
    CHECK(contains(std::string(model), "stories260K.bin"));
  }
  // The text form: a line per batch size.
  const Run text = loom_stdout("bench --batch 3 --prompt-tokens 4 --gen-tokens 2 --reps 1 --threads 1");
  REQUIRE(text.code == 0);
  CHECK(contains(text.output, "batch   3  prefill     12 tokens"));
  CHECK(contains(text.output, "decode   3 x 2 tokens"));
}

TEST_CASE("cli: bad --parallel and --batch values are usage errors") {
  for (const std::string bad : {"run --parallel 0 --prompt hi", "run --parallel -2 --prompt hi",
                                "run --parallel many --prompt hi", "run --parallel 2 --interactive",
                                "run --parallel 2 --chat --prompt hi", "bench --batch 0", "bench --batch x",
                                "bench --batch 1,,2", "bench --batch 2,", "bench --batch 99999",
                                "bench --json"}) {
    INFO(bad);
    const Run r = loom_cli(bad + " < /dev/null");
    CHECK(r.code == 2);
  }
  CHECK(contains(loom_cli("run --parallel 0 --prompt hi").output, "--parallel expects 1 to 4096 sequences, got 0"));
  CHECK(contains(loom_cli("bench --batch 1,x").output, "--batch expects batch sizes from 1 to 4096 separated by commas, got 'x'"));
  // No prompts at all (empty stdin).
  const Run none = loom_cli("run --parallel 2 < /dev/null");
  CHECK(none.code == 2);
  CHECK(contains(none.output, "--parallel needs prompts"));
}

// ---- speculative decoding: loom run --draft / --draft-quantize / --lookup, loom bench --speculative ----

TEST_CASE("cli: run with --draft-quantize, --draft or --lookup prints exactly the plain greedy text") {
  const std::string demo = std::string(LOOM_SOURCE_DIR) + "/examples/models/stories260K/stories260K.bin";
  const std::string common = "run --no-report --threads 1 --temperature 0 --max-tokens 80 --prompt 'Once upon a time'";
  const Run plain = loom_stdout(common);
  REQUIRE(plain.code == 0);
  REQUIRE(plain.output.size() > 40);
  for (const std::string& flags : std::vector<std::string>{"--draft-quantize q8_0", "--lookup 3", "--draft " + quote(demo),
                                  "--lookup 2 --draft-max 3 --draft-fixed", "--draft-quantize f16 --draft-min-p 0.3"}) {
    INFO(flags);
    const Run spec = loom_stdout(common + " " + flags);
    REQUIRE(spec.code == 0);
    CHECK(spec.output == plain.output);
    const Run both = loom_cli(common + " " + flags);
    CHECK(contains(both.output, "loom: speculative ("));
    CHECK(contains(both.output, "tokens per pass"));
  }
}

TEST_CASE("cli: bench --speculative --json prints one object per drafter and nothing else") {
  const Run r = loom_stdout("bench --speculative --draft-quantize q8_0 --lookup 3 --gen-tokens 24 --reps 1 --threads 1 --json");
  REQUIRE(r.code == 0);
  const std::vector<std::string> lines = lines_of(r.output);
  REQUIRE(lines.size() == 2);
  CHECK(r.output.back() == '\n');
  simdjson::dom::parser parser;
  const std::vector<std::string> modes{"draft-quantize", "lookup"};
  for (size_t i = 0; i < lines.size(); ++i) {
    INFO(lines[i]);
    simdjson::dom::element e;
    REQUIRE(parser.parse(lines[i]).get(e) == simdjson::SUCCESS);
    std::string_view mode;
    REQUIRE(e["mode"].get(mode) == simdjson::SUCCESS);
    CHECK(mode == modes[i]);
    double tps = 0, plain = 0, acceptance = -1, per_pass = 0;
    REQUIRE(e["tokens_per_s"].get(tps) == simdjson::SUCCESS);
    REQUIRE(e["plain_tokens_per_s"].get(plain) == simdjson::SUCCESS);
    REQUIRE(e["acceptance"].get(acceptance) == simdjson::SUCCESS);
    REQUIRE(e["tokens_per_target_pass"].get(per_pass) == simdjson::SUCCESS);
    CHECK(tps > 0);
    CHECK(plain > 0);
    CHECK(acceptance >= 0.0);
    CHECK(acceptance <= 1.0);
    CHECK(per_pass >= 1.0);
    int64_t gen = 0;
    REQUIRE(e["gen_tokens"].get(gen) == simdjson::SUCCESS);
    CHECK(gen == 24);
  }
  // The text form: one line per drafter.
  const Run text = loom_stdout("bench --speculative --lookup 2 --gen-tokens 8 --reps 1 --threads 1");
  REQUIRE(text.code == 0);
  CHECK(contains(text.output, "lookup"));
  CHECK(contains(text.output, "tokens per target pass"));
}

TEST_CASE("cli: bad speculative flags are usage errors, a bad draft an error naming the problem") {
  for (const std::string bad :
       {"run --lookup 0 --prompt hi", "run --lookup 65 --prompt hi", "run --lookup 2 --draft-max 0 --prompt hi",
        "run --lookup 2 --draft-max 65 --prompt hi", "run --draft-max 4 --prompt hi", "run --draft-fixed --prompt hi",
        "run --lookup 2 --draft-min-p 2 --prompt hi", "run --lookup 2 --draft-quantize q8_0 --prompt hi",
        "run --lookup 2 --parallel 2 --prompt hi", "run --lookup 2 --chat --prompt hi", "bench --lookup 2",
        "bench --speculative", "bench --speculative --lookup 2 --batch 1", "bench --prompt hi"}) {
    INFO(bad);
    const Run r = loom_cli(bad + " < /dev/null");
    CHECK(r.code == 2);
  }
  CHECK(contains(loom_cli("run --lookup 0 --prompt hi").output, "--lookup expects an n-gram size of 1 to 64, got 0"));
  CHECK(contains(loom_cli("run --lookup 2 --draft-max 99 --prompt hi").output, "--draft-max expects 1 to 64"));
  Run r = loom_cli("run --no-report --prompt hi --draft-quantize q9_z");
  CHECK(r.code == 1);
  CHECK(contains(r.output, "unknown dtype 'q9_z'"));
  // The demo model of the fixture has another vocabulary than the built-in stories260K.
  Fixture f;
  r = loom_cli("run --no-report --prompt hi --draft " + quote(f.model.string()));
  CHECK(r.code == 1);
  CHECK(contains(r.output, "the draft model's vocabulary has"));
  CHECK(contains(r.output, "the target's 512"));
}
