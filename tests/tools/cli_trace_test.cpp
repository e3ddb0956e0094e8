// `loom run --trace-forward`: the statistics lines (on stderr only, for the layers asked
// for), the .npy dumps against the values the C++ hook sees, and bad layer lists.
#include <catch2/catch.hpp>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "loom/demo.hpp"
#include "loom/format.hpp"
#include "loom/loader.hpp"
#include "loom/session.hpp"
#include "loom/tokenizer.hpp"
#include "loom/trace.hpp"
#include "support/test_support.hpp"
#include "tools/cli_run.hpp"

namespace fs = std::filesystem;
namespace t = loom::test;

namespace {

using Run = t::CliRun;
using t::loom_cli;
using t::quote;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::vector<std::string> lines_with(const std::string& text, const std::string& part) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(begin, end - begin);
    if (contains(line, part)) out.push_back(line);
    begin = end + 1;
  }
  return out;
}

// The random-weight demo model (4 layers, hidden 256, a real tokenizer).
struct DemoModel {
  t::TempDir dir;
  fs::path model;
  DemoModel() {
    model = dir / "demo";
    loom::write_demo_model(model);
  }
};

}  // namespace

TEST_CASE("cli: run --trace-forward prints stage statistics on stderr for the requested layers only") {
  DemoModel d;
  const std::string args = "run --model " + quote(d.model.string()) +
                           " --prompt 'Once upon' --max-tokens 2 --temperature 0 --threads 1 --no-report"
                           " --trace-forward --trace-layers 1,3";
  const Run err = loom_cli(args, "", "2>&1 >/dev/null");
  REQUIRE(err.code == 0);
  const Run out = loom_cli(args, "", "2>/dev/null");
  REQUIRE(out.code == 0);
  // stdout holds the prompt and the generated text, nothing of the trace.
  CHECK(out.output.rfind("Once upon", 0) == 0);
  CHECK_FALSE(contains(out.output, "trace"));

  // Two passes (the prompt, then one decoded token); per pass embd, attn_out and ffn_out
  // of blocks 1 and 3, output_norm, logits.
  const auto lines = lines_with(err.output, "loom: trace pass=");
  CHECK(lines.size() == 2 * 7);
  for (int layer : {1, 3}) {
    for (int pass : {0, 1}) {
      for (const char* stage : {"attn_out", "ffn_out"}) {
        INFO(pass << " " << stage << " " << layer);
        CHECK(lines_with(err.output, "pass=" + std::to_string(pass) + " stage=" + stage + " layer=" +
                                         std::to_string(layer) + " ").size() == 1);
      }
    }
  }
  CHECK(lines_with(err.output, "layer=0 ").empty());
  CHECK(lines_with(err.output, "layer=2 ").empty());
  CHECK(lines_with(err.output, "pass=2 ").empty());
  CHECK(lines_with(err.output, "stage=embd layer=-1 shape=[1,256]").size() == 1);  // the decode pass
  CHECK(lines_with(err.output, "pass=1 stage=logits layer=-1 shape=[1,").size() == 1);
  CHECK(lines_with(err.output, "nan=0 inf=0").size() == lines.size());

  // The numbers are those of the values the C++ hook sees for the same prompt.
  auto model = loom::load_model(d.model, t::quiet_load_options());
  const auto ids = model->tokenizer()->encode("Once upon", true, false);
  std::vector<float> attn_out_1;
  loom::SessionOptions o;
  o.n_threads = 1;
  o.trace = [&](const loom::TraceEvent& e) {
    if (e.name == "blk.1.attn_out") attn_out_1.assign(e.values, e.values + e.n_tokens * e.dim);
  };
  loom::Session s(model, o);
  s.prefill(ids);
  const auto st = loom::activation_stats(attn_out_1);
  char want[256];
  std::snprintf(want, sizeof want, "pass=0 stage=attn_out layer=1 shape=[%zu,256] min=%.6g max=%.6g mean=%.6g nan=0 inf=0",
                ids.size(), st.min, st.max, st.mean);
  INFO(err.output);
  CHECK(lines_with(err.output, want).size() == 1);
}

TEST_CASE("cli: run --trace-dump writes every traced stage as .npy equal to the trace") {
  DemoModel d;
  const fs::path dump = d.dir / "dump";
  const Run r = loom_cli("run --model " + quote(d.model.string()) +
                             " --prompt 'Once upon' --max-tokens 2 --temperature 0 --threads 1 --no-report"
                             " --trace-layers 0 --trace-dump " + quote(dump.string()),
                         "", "2>&1");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(lines_with(r.output, "loom: trace pass=").size() == 2 * 5);  // --trace-dump implies the lines
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dump)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  const std::vector<std::string> want{"0-attn_out-L0.npy", "0-embd.npy", "0-ffn_out-L0.npy", "0-logits.npy",
                                      "0-output_norm.npy", "1-attn_out-L0.npy", "1-embd.npy", "1-ffn_out-L0.npy",
                                      "1-logits.npy", "1-output_norm.npy"};
  CHECK(names == want);

  // Read back with loom's .npy reader: the shapes and values of the C++ hook's events.
  auto model = loom::load_model(d.model, t::quiet_load_options());
  const auto ids = model->tokenizer()->encode("Once upon", true, false);
  struct Seen {
    std::string file;
    int64_t n_tokens, dim;
    std::vector<float> values;
  };
  std::vector<Seen> seen;
  loom::SessionOptions o;
  o.n_threads = 1;
  o.trace = [&](const loom::TraceEvent& e) {
    const auto split = loom::split_trace_name(e.name);
    if (split.layer > 0) return;
    seen.push_back({loom::trace_dump_name(0, split.stage, split.layer), e.n_tokens, e.dim,
                    std::vector<float>(e.values, e.values + e.n_tokens * e.dim)});
  };
  loom::Session s(model, o);
  s.prefill(ids);
  REQUIRE(seen.size() == 5);
  for (const auto& e : seen) {
    INFO(e.file);
    const auto source = loom::open_weights(dump / e.file);
    REQUIRE(source->tensors().size() == 1);
    const auto tensor = source->load(source->tensors()[0]);
    CHECK(tensor.dtype() == loom::DType::f32);
    CHECK(tensor.shape() == loom::Shape{e.n_tokens, e.dim});
    const float* v = tensor.data<float>();
    CHECK(std::vector<float>(v, v + tensor.shape().numel()) == e.values);
  }
  CHECK(seen[0].n_tokens == static_cast<int64_t>(ids.size()));
}

TEST_CASE("cli: --trace-layers refuses what is not a list of layer numbers") {
  for (const std::string bad : {"x", "1,,2", "-1", "3,", "99999999999"}) {
    INFO(bad);
    const Run r = loom_cli("run --model /nonexistent --trace-layers " + quote(bad), "", "2>&1");
    CHECK(r.code == 2);
    CHECK(contains(r.output, "--trace-layers expects layer numbers like 0,5, got '" + bad + "'"));
  }
}
