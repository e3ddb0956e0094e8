// loom — the command line: run, inspect, convert, verify, tokenize, bench, template.
// Exit codes: 0 success, 1 error (the message names the file/tensor), 2 usage error,
// 3 `verify` found problems.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "args.hpp"
#include "batch_bench.hpp"
#include "common/median.hpp"
#include "loom.h"
#include "chat_loop.hpp"
#include "loom/chat.hpp"
#include "loom/chat_template.hpp"
#include "loom/error.hpp"
#include "loom/exporter.hpp"
#include "loom/generate.hpp"
#include "loom/generation_defaults.hpp"
#include "loom/load_report.hpp"
#include "loom/loader.hpp"
#include "loom/manifest.hpp"
#include "loom/pack.hpp"
#include "loom/sampler.hpp"
#include "loom/session.hpp"
#include "loom/tokenizer.hpp"
#include "parallel_run.hpp"
#include "speculative_cli.hpp"
#include "progress.hpp"
#ifdef LOOM_HAVE_SERVER
#include "serve_command.hpp"
#endif
#include "trace_forward.hpp"

namespace fs = std::filesystem;
using loom::cli::Args;
using loom::cli::FlagSpec;
using loom::cli::Kind;
using loom::cli::UsageError;

namespace {

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitVerifyFailed = 3;

const FlagSpec kModel{"--model", Kind::text, "model directory, .gguf file, llama2.c .bin or loom pack", {}, "PATH"};
const FlagSpec kThreads{"--threads", Kind::integer, "threads (default: all cores)", {}, "N"};
const FlagSpec kHelp{"--help", Kind::flag, "show this help"};
const FlagSpec kDtype{"--dtype", Kind::choice, "matrices' dtype in memory / in the output", {"keep", "f32", "f16", "bf16"}};

const FlagSpec kRepack{"--repack", Kind::choice,
                       "auto: copy matrices into their kernel's fastest layout where this CPU has one (quantized and f32/f16/bf16 types: AVX-512 or AVX2); off (default): as stored",
                       {"off", "auto"}};

// The KV cache's entries: f32 (loom's default: the attention reads keys and values as the
// forward pass computed them) or f16 (half the cache, and half the bytes each decode step's
// attention reads; llama.cpp's default cache type).
const FlagSpec kKvType{"--kv-type", Kind::choice,
                       "KV cache entries' dtype: f32 (default) or f16 (half the memory and the bytes attention reads)",
                       {"f32", "f16"}};

loom::DType kv_type_flag(const Args& a) { return a.text("--kv-type", "f32") == "f16" ? loom::DType::f16 : loom::DType::f32; }

loom::RepackMode repack_flag(const Args& a) {
  return a.text("--repack", "off") == "auto" ? loom::RepackMode::automatic : loom::RepackMode::off;
}

std::optional<loom::DType> dtype_flag(const Args& a) {
  const std::string d = a.text("--dtype", "keep");
  if (d == "keep") return std::nullopt;
  return loom::dtype_from_name(d);
}

uint64_t source_bytes(const fs::path& p) {
  std::error_code ec;
  if (fs::is_regular_file(p, ec)) return fs::file_size(p, ec);
  uint64_t total = 0;
  for (const auto& e : fs::directory_iterator(p, ec)) {
    if (e.is_regular_file(ec)) total += e.file_size(ec);
  }
  return total;
}

// The built-in demo model, stories260K (examples/models/stories260K). Looked for where an
// installed loom keeps it (<prefix>/share/loom/models/stories260K, found relative to this
// executable, so a relocated prefix works, then at the configured prefix), then in the
// source tree this binary was built from. LOOM_DEMO_MODEL overrides all three.
fs::path builtin_model() {
  if (const char* p = std::getenv("LOOM_DEMO_MODEL"); p && *p) return p;
  const std::string file = "stories260K.bin";
  std::vector<fs::path> candidates;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back(exe.parent_path() / LOOM_DEMO_BIN_TO_DATA / file);
  candidates.push_back(fs::path(LOOM_DEMO_INSTALL_DIR) / file);
  candidates.push_back(fs::path(LOOM_DEMO_SOURCE_DIR) / file);
  for (const auto& c : candidates) {
    if (fs::is_regular_file(c, ec)) return c.lexically_normal();
  }
  std::string looked;
  for (const auto& c : candidates) looked += "\n  " + c.lexically_normal().string();
  throw loom::Error(loom::ErrorCode::io,
                    "the built-in demo model (stories260K) is not installed; looked for:" + looked +
                        "\ngive a model with --model PATH");
}

std::shared_ptr<const loom::Model> load_with_progress(const fs::path& path, loom::LoadOptions options,
                                                      const char* label = "loading") {
  loom::cli::Progress bar(label, source_bytes(path));
  options.progress = [&](double fraction, std::string_view tensor) {
    bar.update(fraction, tensor);
    return true;
  };
  options.logger = loom::Logger::to_sink(
      [](loom::LogLevel, std::string_view m) { std::fprintf(stderr, "loom: %.*s\n", static_cast<int>(m.size()), m.data()); },
      loom::LogLevel::warn);
  auto model = loom::load_model(path, options);
  bar.finish();
  return model;
}

// "temperature 0.6 (generation_config.json), top_k 40 (loom default), ...,
// max_tokens 5 (--max-tokens)": each `loom run` setting and where its value came from.
std::string run_settings_line(const Args& a, const loom::GenerationDefaults& g, const loom::SamplerParams& sp,
                              const loom::GenerateOptions& go) {
  auto source = [&](const char* flag, const auto& from_model) {
    if (a.has(flag)) return std::string(flag);
    std::string s(loom::default_source_name(from_model.source));
    if (from_model.from_file()) s += ": " + from_model.key;
    return s;
  };
  auto item = [](const char* name, double value, const std::string& from) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", value);
    return std::string(name) + " " + buf + " (" + from + ")";
  };
  const loom::DefaultValue<float> loom_only;  // settings generation_config.json has no key for
  return item("temperature", sp.temperature, source("--temperature", g.temperature)) + ", " +
         item("top_k", sp.top_k, source("--top-k", g.top_k)) + ", " +
         item("top_p", sp.top_p, source("--top-p", g.top_p)) + ", " +
         item("min_p", sp.min_p, source("--min-p", loom_only)) + ", " +
         item("repeat_penalty", sp.repeat_penalty, source("--repeat-penalty", g.repetition_penalty)) + ", " +
         item("max_tokens", go.max_tokens, source("--max-tokens", g.max_new_tokens));
}

// ---- commands ----

struct Command {
  std::string name;
  std::string synopsis;
  std::string about;
  std::vector<FlagSpec> flags;
  std::function<int(const Args&)> run;
};

std::string read_whole_file(const fs::path& p) {
  std::FILE* f = std::fopen(p.c_str(), "rb");
  if (f == nullptr) throw loom::Error(loom::ErrorCode::io, "cannot open " + p.string());
  std::string data;
  char buf[65536];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) data.append(buf, n);
  std::fclose(f);
  return data;
}

// What `run` and `chat` share: the model (the built-in demo without --model), a session
// (traced on request), a sampler and the generation options, from loom's defaults, then
// the model's generation_config.json, then explicit flags.
struct RunSetup {
  std::shared_ptr<const loom::Model> model;
  std::unique_ptr<loom::Session> session;
  std::unique_ptr<loom::Sampler> sampler;
  loom::GenerateOptions go;
  loom::SamplerParams sampler_params;  // what `sampler` was made from
  bool demo = false;
};

// with_session = false: no Session (loom run --parallel decodes on a Batch of its own).
RunSetup prepare_run(const Args& a, bool with_session = true) {
  RunSetup r;
  // Flag values are checked before the (long) load.
  const bool trace_forward = a.has("--trace-forward") || a.has("--trace-layers") || a.has("--trace-dump");
  loom::cli::TraceForwardOptions trace_options;
  trace_options.layers = loom::cli::parse_layer_list(a.list("--trace-layers"));
  trace_options.dump_dir = a.text("--trace-dump");
  fs::path path = a.text("--model");
  r.demo = path.empty();
  if (r.demo) {
    path = builtin_model();
    std::fprintf(stderr,
                 "loom: no --model given: running the built-in demo model, stories260K (Karpathy's 260K-parameter\n"
                 "      Llama trained on TinyStories, MIT), from %s\n",
                 path.c_str());
  }
  loom::LoadOptions lo;
  lo.target_dtype = dtype_flag(a);
  lo.repack = repack_flag(a);
  lo.kv_dtype = kv_type_flag(a);
  lo.kv_context = a.integer("--ctx", 0);
  r.model = load_with_progress(path, lo);
  if (!a.has("--no-report")) std::fprintf(stderr, "%s", r.model->load_report()->to_text(a.has("--trace")).c_str());
  if (!r.model->tokenizer()) throw loom::Error(loom::ErrorCode::unsupported, "the model has no tokenizer to run with", {.file = path.string()});

  loom::SessionOptions so;
  so.n_threads = static_cast<int>(a.integer("--threads", 0));
  so.context_length = a.integer("--ctx", 0);
  so.kv_dtype = kv_type_flag(a);
  if (trace_forward) so.trace = loom::cli::forward_tracer(std::move(trace_options));
  if (with_session) r.session = std::make_unique<loom::Session>(r.model, so);
  // Sampling and length: loom's defaults, then the model's generation_config.json, then
  // explicit flags; the report says where each value came from.
  const loom::GenerationDefaults& defaults = r.model->generation_defaults();
  loom::SamplerParams sp;
  defaults.apply_to(sp);
  defaults.apply_to(r.go);
  sp.temperature = static_cast<float>(a.number("--temperature", sp.temperature));
  sp.top_k = static_cast<int32_t>(a.integer("--top-k", sp.top_k));
  sp.top_p = static_cast<float>(a.number("--top-p", sp.top_p));
  sp.min_p = static_cast<float>(a.number("--min-p", sp.min_p));
  sp.repeat_penalty = static_cast<float>(a.number("--repeat-penalty", sp.repeat_penalty));
  sp.seed = static_cast<uint64_t>(a.integer("--seed", static_cast<int64_t>(sp.seed)));
  r.go.max_tokens = static_cast<int32_t>(a.integer("--max-tokens", r.go.max_tokens));
  if (!a.has("--no-report")) {
    const std::string settings = run_settings_line(a, defaults, sp, r.go);
    std::fprintf(stderr, "sampling   %s\n", settings.c_str());
  }
  r.sampler = std::make_unique<loom::Sampler>(sp);
  r.sampler_params = sp;
  r.go.stop_strings = a.list("--stop");
  return r;
}

std::string template_flag(const Args& a) {
  return a.has("--template") ? read_whole_file(a.text("--template")) : std::string();
}

void print_generation_stats(const loom::GenerateResult& r) {
  const double pre = r.prompt_seconds > 0 ? static_cast<double>(r.prompt_tokens) / r.prompt_seconds : 0.0;
  const double gen = r.generate_seconds > 0 ? static_cast<double>(r.tokens.size()) / r.generate_seconds : 0.0;
  std::fprintf(stderr, "\nloom: prompt %lld tokens, %.1f tok/s; generation %zu tokens, %.1f tok/s; stop: %s\n",
               static_cast<long long>(r.prompt_tokens), pre, r.tokens.size(), gen,
               std::string(loom::stop_reason_name(r.stop)).c_str());
}

// ---- speculative decoding flags (examples/cli/speculative_cli.hpp) ----

loom::cli::DraftFlags draft_flags(const Args& a) {
  loom::cli::DraftFlags f;
  f.draft_path = a.text("--draft");
  f.draft_quantize = a.text("--draft-quantize");
  f.lookup = a.integer("--lookup", 0);
  if (a.has("--lookup") && (f.lookup < 1 || f.lookup > 64)) {
    throw UsageError("--lookup expects an n-gram size of 1 to 64, got " + a.text("--lookup"));
  }
  const int64_t k = a.integer("--draft-max", f.params.max_draft);
  if (k < 1 || k > loom::SpeculativeParams::kMaxDraft) {
    throw UsageError("--draft-max expects 1 to 64 drafted tokens per pass, got " + a.text("--draft-max"));
  }
  f.params.max_draft = static_cast<int32_t>(k);
  f.params.adaptive = !a.has("--draft-fixed");
  const double min_p = a.number("--draft-min-p", 0.0);
  if (min_p < 0.0 || min_p > 1.0) throw UsageError("--draft-min-p expects a probability from 0 to 1, got " + a.text("--draft-min-p"));
  f.min_confidence = static_cast<float>(min_p);
  for (const char* knob : {"--draft-max", "--draft-fixed", "--draft-min-p"}) {
    if (a.has(knob) && !f.any()) throw UsageError(std::string(knob) + " needs --draft, --draft-quantize or --lookup");
  }
  return f;
}

std::shared_ptr<const loom::Model> load_draft(const loom::cli::DraftFlags& f) {
  if (f.draft_path.empty()) return nullptr;
  return load_with_progress(f.draft_path, loom::LoadOptions{});
}

// ---- run --parallel: many prompts on one loom::Batch (examples/cli/parallel_run.hpp) ----

int cmd_run_parallel(const Args& a) {
  // Flags are checked, and the prompts read, before the (long) load.
  const int64_t parallel = a.integer("--parallel", 1);
  if (parallel < 1 || parallel > 4096) throw UsageError("--parallel expects 1 to 4096 sequences, got " + a.text("--parallel"));
  for (const char* f : {"--chat", "--interactive", "--trace-forward", "--trace-layers", "--trace-dump"}) {
    if (a.has(f)) throw UsageError(std::string(f) + " cannot be combined with --parallel");
  }
  std::vector<std::string> prompts = a.list("--prompt");
  if (prompts.empty()) {
    // One prompt per line of stdin; empty lines are skipped.
    if (::isatty(STDIN_FILENO)) std::fprintf(stderr, "loom: --parallel: reading prompts, one per line, until Ctrl-D\n");
    for (std::string line; std::getline(std::cin, line);) {
      if (!line.empty()) prompts.push_back(line);
    }
    if (prompts.empty()) throw UsageError("--parallel needs prompts: --prompt TEXT (repeatable) or one per line on stdin");
  }
  RunSetup setup = prepare_run(a, /*with_session=*/false);
  loom::cli::ParallelRunOptions o;
  o.parallel = parallel;
  o.context_length = a.integer("--ctx", 0);
  o.n_threads = static_cast<int>(a.integer("--threads", 0));
  o.kv_dtype = kv_type_flag(a);
  o.sampler = setup.sampler_params;
  o.generate = setup.go;
  return loom::cli::parallel_run(setup.model, prompts, o, stdout, stderr);
}

int cmd_run(const Args& a) {
  const loom::cli::DraftFlags df = draft_flags(a);
  if (df.any()) {
    if ((!df.draft_path.empty()) + (!df.draft_quantize.empty()) + (df.lookup > 0) > 1) {
      throw UsageError("give one drafter: --draft, --draft-quantize or --lookup");
    }
    for (const char* f : {"--parallel", "--chat"}) {
      if (a.has(f)) throw UsageError(std::string(f) + " cannot be combined with speculative decoding (--draft, --draft-quantize, --lookup)");
    }
  }
  if (a.has("--parallel")) return cmd_run_parallel(a);
  RunSetup setup = prepare_run(a);
  std::vector<loom::cli::CliDrafter> drafters = loom::cli::make_drafters(df, setup.model, load_draft(df), setup.session->pool());
  loom::Session& session = *setup.session;
  loom::Sampler& sampler = *setup.sampler;
  loom::GenerateOptions& go = setup.go;
  const loom::Tokenizer& tokenizer = *setup.model->tokenizer();
  go.on_text = [](std::string_view text, int32_t) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return true;
  };
  // Plain, or speculative with the one drafter asked for (same tokens when greedy).
  auto run_generate = [&](const std::string& text) {
    if (drafters.empty()) return loom::generate(session, sampler, tokenizer, text, go);
    const auto r = loom::speculative_generate(session, sampler, tokenizer, text, drafters[0].drafter.get(), df.params, go);
    loom::cli::print_speculative_stats(drafters[0].mode + " " + drafters[0].detail, r, stderr);
    return r.generation;
  };

  std::string prompt = a.text("--prompt");
  if (a.has("--chat")) {
    // One user turn through the chat template; a base model falls back to plain text.
    const std::string tmpl = template_flag(a);
    if (!tmpl.empty() || !tokenizer.chat_template().empty()) {
      if (!a.has("--prompt")) prompt.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
      loom::ChatOptions co;
      co.template_source = tmpl;
      if (a.has("--template")) co.template_name = a.text("--template");
      loom::Chat chat(session, tokenizer, co);
      if (a.has("--system")) chat.set_system(a.text("--system"));
      const auto r = chat.send(prompt, sampler, go);
      std::fputc('\n', stdout);
      print_generation_stats(r.generation);
      return 0;
    }
    std::fprintf(stderr, "loom: this model has no chat template (a base model?): --chat falls back to plain completion\n");
  }
  const bool interactive = a.has("--interactive") || (!a.has("--prompt") && !setup.demo && ::isatty(STDIN_FILENO));
  if (!interactive) {
    if (!a.has("--prompt")) {
      if (setup.demo) {
        prompt = "Once upon a time";
      } else {
        prompt.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
      }
    }
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    print_generation_stats(run_generate(prompt));
    return 0;
  }
  std::fprintf(stderr, "loom: interactive: type a prompt and press Enter; an empty line or Ctrl-D ends.\n");
  bool first = true;
  for (std::string line; std::fprintf(stderr, "> "), std::getline(std::cin, line) && !line.empty();) {
    go.continue_session = !first;
    go.add_special = first;
    first = false;
    try {
      print_generation_stats(run_generate(line));
    } catch (const loom::Error& e) {
      if (e.code() != loom::ErrorCode::context_full) throw;
      std::fprintf(stderr, "\nloom: the context is full; starting a new conversation\n");
      first = true;
    }
  }
  return 0;
}

int cmd_chat(const Args& a) {
  RunSetup setup = prepare_run(a);
  loom::cli::ChatLoopOptions o;
  o.template_source = template_flag(a);
  o.template_name = a.text("--template");
  o.system_prompt = a.text("--system");
  o.show_prompt = ::isatty(STDIN_FILENO) != 0;
  o.stats = !a.has("--quiet");
  return loom::cli::chat_loop(*setup.session, *setup.model->tokenizer(), *setup.sampler, setup.go, o, std::cin,
                              stdout, stderr);
}

int cmd_inspect(const Args& a) {
  if (!a.has("--model")) throw UsageError("inspect needs --model PATH");
  loom::LoadOptions lo;
  lo.repack = repack_flag(a);
  auto model = load_with_progress(a.text("--model"), lo);
  const auto& r = *model->load_report();
  if (a.has("--json")) {
    std::printf("%s\n", r.to_json(a.has("--trace")).c_str());
    return 0;
  }
  const auto& c = model->config();
  std::printf("%s", r.to_text(a.has("--trace")).c_str());
  std::printf("config     vocab %lld, hidden %lld, %lld layers, %lld/%lld heads (head_dim %lld), ffn %lld, context %lld\n",
              static_cast<long long>(c.vocab_size), static_cast<long long>(c.hidden_size),
              static_cast<long long>(c.n_layers), static_cast<long long>(c.n_heads),
              static_cast<long long>(c.n_kv_heads), static_cast<long long>(c.head_dim),
              static_cast<long long>(c.intermediate_size), static_cast<long long>(c.max_positions));
  return 0;
}

int cmd_convert(const Args& a) {
  if (!a.has("--model") || !a.has("--out")) throw UsageError("convert needs --model SRC and --out DST");
  const fs::path src = a.text("--model");
  const fs::path dst = a.text("--out");
  const std::string format = a.text("--format", "pack");
  if (format == "pack") {
    loom::PackOptions po;
    po.dtype = dtype_flag(a);
    po.quantize = a.text("--quantize");
    po.group_size = static_cast<int>(a.integer("--group", 0));
    po.repack = a.has("--repack") ? loom::RepackMode::automatic : loom::RepackMode::off;
    loom::cli::Progress bar("converting", source_bytes(src));
    po.progress = [&](double f, std::string_view t) {
      bar.update(f, t);
      return true;
    };
    po.load.logger = loom::Logger::silent();
    const auto r = loom::write_pack(src, dst, po);
    bar.finish();
    std::fprintf(stderr, "loom: wrote %s: %lld tensors, %.1f MB in %.2f s%s\n", dst.c_str(),
                 static_cast<long long>(r.tensors), static_cast<double>(r.bytes) / 1e6, r.seconds,
                 r.resumed_tensors ? (" (resumed after " + std::to_string(r.resumed_tensors) + " tensors)").c_str() : "");
    return 0;
  }
  if (a.has("--quantize")) throw UsageError("--quantize writes packs only (use --format pack)");
  if (a.has("--repack")) throw UsageError("--repack writes packs only (use --format pack)");
  if (fs::exists(dst)) throw loom::Error(loom::ErrorCode::invalid_argument, "destination already exists", {.file = dst.string()});
  loom::LoadOptions lo;
  auto model = load_with_progress(src, lo);
  loom::ExportOptions eo;
  eo.dtype = dtype_flag(a);
  eo.tokenizer = model->tokenizer();
  loom::export_model(model->config(), model->weights(), dst,
                     format == "gguf" ? loom::ExportFormat::gguf : loom::ExportFormat::safetensors, eo);
  if (format == "safetensors" && model->tokenizer()) {
    const fs::path src_dir = fs::is_directory(src) ? src : src.parent_path();
    for (const char* name : {"tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json", "added_tokens.json"}) {
      if (fs::exists(src_dir / name)) fs::copy_file(src_dir / name, dst / name);
    }
  }
  std::fprintf(stderr, "loom: wrote %s\n", dst.c_str());
  return 0;
}

int cmd_verify(const Args& a) {
  if (a.positional().size() != 1) throw UsageError("verify needs exactly one PATH (a loom pack)");
  const fs::path pack = a.positional()[0];
  const auto problems = loom::verify_pack(pack);
  for (const auto& p : problems) {
    std::printf("%s%s%s: %s\n", p.tensor.empty() ? "" : "tensor ", p.tensor.c_str(), p.tensor.empty() ? p.file.c_str() : (" in " + p.file).c_str(), p.detail.c_str());
  }
  if (!problems.empty()) {
    std::fprintf(stderr, "loom: %zu problem(s) in %s\n", problems.size(), pack.c_str());
    return kExitVerifyFailed;
  }
  std::printf("%s: every data file and tensor matches its index\n", pack.c_str());
  return 0;
}

int cmd_tokenize(const Args& a) {
  if (!a.has("--model")) throw UsageError("tokenize needs --model PATH");
  std::string text;
  for (const auto& p : a.positional()) text += (text.empty() ? "" : " ") + p;
  const auto tok = loom::Tokenizer::load(a.text("--model"));
  const auto ids = tok->encode(text, !a.has("--no-special"), a.has("--parse-special"));
  for (int32_t id : ids) {
    std::string piece = tok->token_to_piece(id);
    std::string shown;
    for (unsigned char ch : piece) {
      if (ch == '\n') {
        shown += "\\n";
      } else if (ch < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02x", ch);
        shown += buf;
      } else {
        shown += static_cast<char>(ch);
      }
    }
    std::printf("%d\t'%s'\n", id, shown.c_str());
  }
  std::printf("%zu tokens\n", ids.size());
  return 0;
}

// ---- template: render a chat template as transformers' apply_chat_template would ----


int cmd_template(const Args& a) {
  if (a.has("--template") == a.has("--model")) throw UsageError("template needs --template FILE or --model PATH");
  if (!a.has("--messages")) throw UsageError("template needs --messages FILE.json");
  loom::ChatTemplateInputs in;
  std::string source, name;
  if (a.has("--template")) {
    name = a.text("--template");
    source = read_whole_file(name);
  } else {
    const auto tok = loom::Tokenizer::load(a.text("--model"));
    if (tok->chat_template().empty()) throw loom::Error(loom::ErrorCode::unsupported, a.text("--model") + " has no chat template");
    source = tok->chat_template();
    name = a.text("--model") + " chat template";
    in.bos_token = tok->bos_token();
    in.eos_token = tok->eos_token();
  }
  if (a.has("--bos-token")) in.bos_token = a.text("--bos-token");
  if (a.has("--eos-token")) in.eos_token = a.text("--eos-token");
  in.add_generation_prompt = a.has("--add-generation-prompt");
  // --messages: a JSON array of messages, or {"messages": [...], "tools": [...]}.
  const std::string doc = read_whole_file(a.text("--messages"));
  const size_t first = doc.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && doc[first] == '{') {
    in.extra_context_json = doc;  // its "messages" and "tools" become variables like the rest
    in.messages_json = "[]";
  } else {
    in.messages_json = doc;
  }
  const auto tpl = loom::ChatTemplate::compile(source, name);
  const std::string out = tpl.render(in);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

int cmd_bench(const Args& a) {
  fs::path path = a.text("--model");
  if (path.empty()) path = builtin_model();
  const int prompt_tokens = static_cast<int>(a.integer("--prompt-tokens", 128));
  const int gen_tokens = static_cast<int>(a.integer("--gen-tokens", 64));
  const int reps = static_cast<int>(a.integer("--reps", 5));
  if (prompt_tokens < 1 || gen_tokens < 1 || reps < 1) throw UsageError("--prompt-tokens, --gen-tokens and --reps must be positive");
  if (prompt_tokens > 1000000 || gen_tokens > 1000000) throw UsageError("--prompt-tokens and --gen-tokens are at most 1000000");
  if (a.has("--json") && !a.has("--batch") && !a.has("--speculative")) throw UsageError("--json needs --batch or --speculative");
  if (a.has("--batch") && a.has("--speculative")) throw UsageError("--batch and --speculative are separate benchmarks: give one");
  const loom::cli::DraftFlags df = draft_flags(a);
  if (df.any() && !a.has("--speculative")) throw UsageError("--draft, --draft-quantize and --lookup need --speculative");
  if (a.has("--speculative") && !df.any()) throw UsageError("--speculative needs --draft PATH, --draft-quantize TYPE or --lookup N");
  if (a.has("--prompt") && !a.has("--speculative")) throw UsageError("--prompt needs --speculative");
  loom::cli::BatchBenchOptions bb;
  if (a.has("--batch")) {
    try {
      bb.batch_sizes = loom::cli::parse_batch_sizes(a.text("--batch"));
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
  }
  loom::LoadOptions lo;
  lo.target_dtype = dtype_flag(a);
  lo.repack = repack_flag(a);
  lo.load_tokenizer = a.has("--speculative");  // a text prompt, and the draft's vocabulary check
  auto model = load_with_progress(path, lo);
  if (a.has("--speculative")) {
    loom::cli::SpeculativeBenchOptions sb;
    sb.flags = df;
    sb.gen_tokens = gen_tokens;
    sb.reps = a.has("--reps") ? reps : 3;
    sb.n_threads = static_cast<int>(a.integer("--threads", 0));
    sb.kv_dtype = kv_type_flag(a);
    sb.json = a.has("--json");
    sb.model_name = path.string();
    const int64_t vocab = model->config().vocab_size;
    if (model->tokenizer()) {
      sb.prompt = model->tokenizer()->encode(a.text("--prompt", "Once upon a time"), true, false);
    } else {
      if (a.has("--prompt")) throw UsageError("--prompt needs a model with a tokenizer");
      for (int i = 0; i < prompt_tokens; ++i) sb.prompt.push_back(static_cast<int32_t>((i * 7919 + 13) % vocab));
    }
    if (sb.prompt.empty()) throw UsageError("--prompt encodes to no tokens");
    loom::cli::speculative_bench(model, load_draft(df), sb, stdout);
    return 0;
  }
  if (a.has("--batch")) {
    bb.prompt_tokens = prompt_tokens;
    bb.gen_tokens = gen_tokens;
    bb.reps = reps;
    bb.n_threads = static_cast<int>(a.integer("--threads", 0));
    bb.kv_dtype = kv_type_flag(a);
    bb.json = a.has("--json");
    bb.model_name = path.string();
    loom::cli::batch_bench(model, bb, stdout);
    return 0;
  }
  loom::SessionOptions so;
  so.n_threads = static_cast<int>(a.integer("--threads", 0));
  so.context_length = prompt_tokens + gen_tokens + 1;
  so.kv_dtype = kv_type_flag(a);
  loom::Session s(model, so);
  const int64_t vocab = model->config().vocab_size;
  std::vector<int32_t> prompt(static_cast<size_t>(prompt_tokens));
  for (int i = 0; i < prompt_tokens; ++i) prompt[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 13) % vocab);
  std::vector<double> pre, dec;
  using Clock = std::chrono::steady_clock;
  // One unmeasured prefill and step first (as llama-bench warms up): the first pass
  // touches every mapped weight page, which is load time, not prefill time.
  s.prefill(prompt);
  s.step(0);
  for (int r = 0; r < reps; ++r) {
    s.reset();
    auto t0 = Clock::now();
    s.prefill(prompt);
    pre.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    t0 = Clock::now();
    for (int i = 0; i < gen_tokens; ++i) s.step(static_cast<int32_t>((i * 31 + 7) % vocab));
    dec.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  const double pre_med = loom::median(pre);
  const double dec_med = loom::median(dec);
  std::printf("model    %s (%s, %.1f MB of weights)\n", path.c_str(), model->config().architecture.c_str(),
              static_cast<double>(model->weight_bytes()) / 1e6);
  std::printf("threads  %d; KV cache in %s\n", s.pool().size(), std::string(loom::dtype_name(so.kv_dtype)).c_str());
  std::printf("prefill  %d tokens: median %.4f s, %.1f tok/s (%d reps)\n", prompt_tokens, pre_med, prompt_tokens / pre_med, reps);
  // What a step reads: one row of an untied embedding table, every other weight whole.
  std::printf("decode   %d tokens: median %.4f s, %.1f tok/s, %.2f GB/s of weights read\n", gen_tokens, dec_med,
              gen_tokens / dec_med, static_cast<double>(model->decode_weight_bytes()) * gen_tokens / dec_med / 1e9);
  return 0;
}

// Speculative decoding (run and bench).
const FlagSpec kDraft{"--draft", Kind::text, "speculative decoding with this draft model (same vocabulary)", {}, "PATH"};
const FlagSpec kDraftQuantize{"--draft-quantize", Kind::text, "speculative decoding with a copy of the model quantized in memory as the draft (q4_k, q8_0, gq4_32, ...)", {}, "TYPE"};
const FlagSpec kLookup{"--lookup", Kind::integer, "speculative decoding by prompt lookup: draft what followed the last match of up to N tokens", {}, "N"};
const FlagSpec kDraftMax{"--draft-max", Kind::integer, "drafted tokens per target pass at most, 1..64 (default 8)", {}, "K"};
const FlagSpec kDraftFixed{"--draft-fixed", Kind::flag, "always draft --draft-max tokens (no adaptive length)"};
const FlagSpec kDraftMinP{"--draft-min-p", Kind::number, "stop drafting when the draft model's best candidate is less likely than P (default 0)", {}, "P"};

// ---- serve: the OpenAI-compatible HTTP server (examples/server, docs/server.md) ----

#ifdef LOOM_HAVE_SERVER
int cmd_serve(const Args& a) {
  // Flags are checked before the (long) load; signals are blocked before any thread starts.
  loom::cli::ServeCommandOptions o;
  o.host = a.text("--host", "127.0.0.1");
  const int64_t port = a.integer("--port", 8080);
  if (port < 0 || port > 65535) throw UsageError("--port expects 0 to 65535, got " + a.text("--port"));
  o.port = static_cast<int>(port);
  o.parallel = a.integer("--parallel", 4);
  if (o.parallel < 1 || o.parallel > 1024) throw UsageError("--parallel expects 1 to 1024 sequences, got " + a.text("--parallel"));
  o.context_length = a.integer("--ctx", 0);
  if (o.context_length < 0) throw UsageError("--ctx must not be negative");
  if (a.has("--kv-pool")) {
    try {
      loom::cli::parse_kv_pool(a.text("--kv-pool"), o.kv_pool_tokens, o.kv_pool_bytes);
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
  }
  o.queue = a.integer("--queue", 64);
  if (o.queue < 1) throw UsageError("--queue must be at least 1");
  o.n_threads = static_cast<int>(a.integer("--threads", 0));
  o.kv_dtype = kv_type_flag(a);
  o.api_key = a.text("--api-key");
  if (o.api_key.empty()) {
    if (const char* k = std::getenv("LOOM_API_KEY"); k) o.api_key = k;
  }
  o.max_body_bytes = a.integer("--max-body", 1 << 20);
  if (o.max_body_bytes < 1024) throw UsageError("--max-body must be at least 1024 bytes");
  o.drain_seconds = a.number("--drain-timeout", 10.0);
  o.access_log = !a.has("--quiet");
  if (a.has("--chat-template")) {
    o.chat_template = read_whole_file(a.text("--chat-template"));
    o.chat_template_name = a.text("--chat-template");
  }
  loom::cli::prepare_serve_signals();
  fs::path path = a.text("--model");
  if (path.empty()) {
    path = builtin_model();
    std::fprintf(stderr, "loom: no --model given: serving the built-in demo model, stories260K, from %s\n", path.c_str());
  }
  o.model_name = a.text("--alias", path.filename().string());
  loom::LoadOptions lo;
  lo.target_dtype = dtype_flag(a);
  lo.repack = repack_flag(a);
  lo.kv_dtype = o.kv_dtype;
  lo.kv_context = o.context_length;
  lo.kv_batch = o.parallel;
  auto model = load_with_progress(path, lo);
  if (!a.has("--no-report")) std::fprintf(stderr, "%s", model->load_report()->to_text(false).c_str());
  return loom::cli::serve(model, o);
}
#endif

const FlagSpec kSystem{"--system", Kind::text, "system prompt (chat)", {}, "TEXT"};
const FlagSpec kTemplate{"--template", Kind::text, "chat template file instead of the model's (chat)", {}, "FILE"};

// The flags of everything that generates: sampling, length, threads, report and trace.
std::vector<FlagSpec> with_generation_flags(std::vector<FlagSpec> flags) {
  const std::vector<FlagSpec> shared{
        {"--max-tokens", Kind::integer, "tokens to generate (default: the model's generation_config.json, else 128)", {}, "N"},
        {"--temperature", Kind::number, "0 = greedy (default: the model's, else 0.8)", {}, "T"},
        {"--top-k", Kind::integer, "0 = off (default: the model's, else 40)", {}, "K"},
        {"--top-p", Kind::number, "1 = off (default: the model's, else 0.95)", {}, "P"},
        {"--min-p", Kind::number, "0 = off (default 0.05)", {}, "P"},
        {"--repeat-penalty", Kind::number, "1 = off (default: the model's repetition_penalty, else 1)", {}, "R"},
        {"--seed", Kind::integer, "sampling seed", {}, "S"},
        {"--stop", Kind::list, "stop string (repeatable; not printed)", {}, "TEXT"},
        kThreads,
        {"--ctx", Kind::integer, "context length (default: the model's, at most 4096)", {}, "N"},
        kDtype,
        kRepack,
        kKvType,
        {"--no-report", Kind::flag, "do not print the load report"},
        {"--trace", Kind::flag, "print the per-tensor load trace"},
        {"--trace-forward", Kind::flag, "per forward pass, stage and layer: shape, min/max/mean, NaN/Inf counts (stderr)"},
        {"--trace-layers", Kind::list, "trace only these blocks, e.g. 0,5 (implies --trace-forward)", {}, "N,M"},
        {"--trace-dump", Kind::text, "also write each traced stage as DIR/<pass>-<stage>[-L<layer>].npy (implies --trace-forward)", {}, "DIR"},
        kHelp};
  flags.insert(flags.end(), shared.begin(), shared.end());
  return flags;
}

std::vector<Command> commands() {
  return {
      {"run", "[--model PATH] [--prompt TEXT | --interactive] [sampling flags]",
       "Loads a model (the built-in demo model, stories260K, when no --model is given: it tells a\n"
       "story from \"Once upon a time\"), streams generated text to stdout, then prints prompt and\n"
       "generation tokens/s. Without --prompt it reads stdin, or asks interactively on a terminal.",
       with_generation_flags({kModel,
        {"--prompt", Kind::text, "prompt text", {}, "TEXT"},
        {"--interactive", Kind::flag, "read prompts from the terminal, one conversation"},
        {"--chat", Kind::flag, "wrap the prompt in the model's chat template (one user turn)"},
        kSystem, kTemplate,
        {"--parallel", Kind::integer, "answer many prompts together, N at a time on one batch (each --prompt, or each stdin line); output lines are prefixed [i]", {}, "N"},
        kDraft, kDraftQuantize, kLookup, kDraftMax, kDraftFixed, kDraftMinP}),
       cmd_run},
      {"chat", "[--model PATH] [--system TEXT] [--template FILE] [sampling flags]",
       "An interactive conversation through the model's chat template: each line is a user message,\n"
       "the reply streams to stdout; /reset forgets the conversation, /system TEXT sets the system\n"
       "prompt, Ctrl-D quits. Each turn prefills only what the KV cache does not hold. A model\n"
       "without a template (a base model) is answered by plain completion, and loom says so.",
       with_generation_flags({kModel, kSystem, kTemplate, {"--quiet", Kind::flag, "no per-turn token counts on stderr"}}),
       cmd_chat},
      {"inspect", "--model PATH [--json] [--trace]",
       "Loads a model and prints its load report: what was expected and found, where each tensor came\n"
       "from, conversions, tied weights, time and memory.",
       {kModel, {"--json", Kind::flag, "print JSON"}, {"--trace", Kind::flag, "every tensor: names, file, offset, dtypes, zero-copy or converted"}, kRepack, kHelp},
       cmd_inspect},
      {"convert", "--model SRC --out DST [--format pack|safetensors|gguf] [--dtype ...] [--quantize TYPE] [--repack]",
       "Converts any readable model. The default output is a loom pack (mmap-ready, with provenance);\n"
       "pack conversion is crash-safe: rerun the same command after an interruption to resume.\n"
       "With --repack the pack stores matrices in this CPU's kernel layouts: it then loads zero-copy\n"
       "and ready for the kernel on CPUs like this one (elsewhere they are unpacked at load).",
       {kModel,
        {"--out", Kind::text, "output directory (pack, safetensors) or .gguf file", {}, "PATH"},
        {"--format", Kind::choice, "output format (default pack)", {"pack", "safetensors", "gguf"}},
        kDtype,
        {"--quantize", Kind::text, "pack only: a block type (q8_0, q4_k, ...), gq8 / gq4 (with --group), or a preset (q4_k_m, q5_k_m, gq4_m, ...); any case", {}, "TYPE"},
        {"--group", Kind::integer, "group size of gq8 / gq4: 32 (default), 64 or 128", {}, "N"},
        {"--repack", Kind::flag, "pack only: store matrices in the layout this CPU's kernels read fastest (quantized and f32/f16/bf16 types: AVX-512 or AVX2)"},
        kHelp},
       cmd_convert},
      {"verify", "PACK", "Checks a pack's data files and every tensor's sha256 against its index (exit 3 on problems).", {kHelp}, cmd_verify},
      {"tokenize", "--model PATH TEXT...",
       "Prints the ids and pieces of TEXT (the tokenizer alone is loaded, not the weights).",
       {kModel, {"--no-special", Kind::flag, "do not add BOS/EOS"}, {"--parse-special", Kind::flag, "special-token text becomes those tokens"}, kHelp},
       cmd_tokenize},
      {"bench", "[--model PATH] [--prompt-tokens N] [--gen-tokens N] [--reps N] [--batch B,B,... [--json]]\n"
                "       [--speculative (--draft PATH | --draft-quantize TYPE | --lookup N)... [--json]]",
       "Measures prefill and decode tokens/s (median of repetitions). With --batch, for each batch size\n"
       "B: B prompts prefilled on one batch, then greedy decode passes over all B; tokens/s are\n"
       "aggregate over the batch. With --speculative, for each drafter given: greedy generation of\n"
       "--gen-tokens, speculative and plain in the same run (the same tokens), with the acceptance\n"
       "rate and tokens per target pass.",
       {kModel, kThreads, kDtype, kRepack, kKvType, {"--prompt-tokens", Kind::integer, "prompt length (default 128)", {}, "N"},
        {"--gen-tokens", Kind::integer, "decode steps (default 64)", {}, "N"}, {"--reps", Kind::integer, "repetitions (default 5)", {}, "N"},
        {"--batch", Kind::text, "batch sizes to measure, e.g. 1,2,4,8,16", {}, "B,B,..."},
        {"--json", Kind::flag, "with --batch or --speculative: one JSON object per line, nothing else on stdout"},
        {"--speculative", Kind::flag, "speculative against plain greedy decoding of the same model, per drafter given (--draft, --draft-quantize, --lookup)"},
        {"--prompt", Kind::text, "with --speculative: the prompt text (default \"Once upon a time\"; models without a tokenizer: --prompt-tokens generated ids)", {}, "TEXT"},
        kDraft, kDraftQuantize, kLookup, kDraftMax, kDraftFixed, kDraftMinP, kHelp},
       cmd_bench},
      {"template", "--template FILE | --model PATH --messages FILE.json [--add-generation-prompt]",
       "Renders a chat template (a file, or the model's own) over a conversation, exactly as transformers' apply_chat_template does; prints the text with nothing added.",
       {{"--template", Kind::text, "a Jinja chat template file", {}, "FILE"}, kModel,
        {"--messages", Kind::text, "JSON array of messages, or an object with \"messages\" (and \"tools\", ...)", {}, "FILE"},
        {"--add-generation-prompt", Kind::flag, "end with the assistant's turn header"},
        {"--bos-token", Kind::text, "bos_token text (default: the model's)", {}, "T"},
        {"--eos-token", Kind::text, "eos_token text (default: the model's)", {}, "T"}, kHelp},
       cmd_template},
#ifdef LOOM_HAVE_SERVER
      {"serve", "[--model PATH] [--host 127.0.0.1] [--port 8080] [--parallel N] [--ctx N] [--kv-pool SIZE] [--api-key KEY]",
       "An OpenAI-compatible HTTP server (docs/server.md): /v1/completions, /v1/chat/completions (streaming\n"
       "or not), /v1/embeddings, /v1/models, /health, /metrics. Requests share one batch, --parallel\n"
       "sequences at a time. Port 0 picks a free port; the address is printed on stdout. SIGINT or\n"
       "SIGTERM stop it gracefully (running requests may finish for --drain-timeout seconds).",
       {kModel,
        {"--host", Kind::text, "address to bind (default 127.0.0.1: this machine only)", {}, "ADDR"},
        {"--port", Kind::integer, "port (default 8080; 0: any free port)", {}, "N"},
        {"--parallel", Kind::integer, "sequences decoded together (default 4); also the most choices (n) a request may ask", {}, "N"},
        {"--ctx", Kind::integer, "context length per sequence (default: the model's, at most 4096)", {}, "N"},
        {"--kv-pool", Kind::text, "KV pool size: tokens (4096) or bytes (512M, 2G); default: parallel full contexts", {}, "SIZE"},
        {"--queue", Kind::integer, "requests waiting at most; more get 429 (default 64)", {}, "N"},
        {"--api-key", Kind::text, "require 'Authorization: Bearer KEY' (default: $LOOM_API_KEY, else none)", {}, "KEY"},
        {"--alias", Kind::text, "model name in /v1/models and responses (default: the file name)", {}, "NAME"},
        {"--chat-template", Kind::text, "chat template file instead of the model's", {}, "FILE"},
        {"--max-body", Kind::integer, "largest request body in bytes (default 1048576)", {}, "BYTES"},
        {"--drain-timeout", Kind::number, "seconds running requests may finish at shutdown (default 10)", {}, "S"},
        {"--quiet", Kind::flag, "no access log"},
        kThreads, kDtype, kRepack, kKvType, {"--no-report", Kind::flag, "do not print the load report"}, kHelp},
       cmd_serve},
#endif
  };
}

void top_usage(FILE* out) {
  std::fprintf(out, "usage: loom COMMAND [flags]   (loom %s)\n\ncommands:\n", loom_version_string());
  for (const auto& c : commands()) std::fprintf(out, "  %-9s %s\n", c.name.c_str(), c.synopsis.c_str());
  std::fprintf(out, "\n'loom COMMAND --help' describes each command.\nexit codes: 0 ok, 1 error, 2 usage error, 3 verify found problems\n");
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv, argv + argc);
  if (args.size() < 2 || args[1] == "--help" || args[1] == "-h" || args[1] == "help") {
    top_usage(args.size() < 2 ? stderr : stdout);
    return args.size() < 2 ? kExitUsage : 0;
  }
  if (args[1] == "--version") {
    std::printf("loom %s\n", loom_version_string());
    return 0;
  }
  for (const auto& c : commands()) {
    if (c.name != args[1]) continue;
    try {
      const Args parsed = loom::cli::parse(c.flags, args, 2);
      if (parsed.has("--help")) {
        std::printf("%s", loom::cli::usage(c.name, c.synopsis, c.about, c.flags).c_str());
        return 0;
      }
      if (c.name != "verify" && c.name != "tokenize" && !parsed.positional().empty()) {
        throw UsageError("unexpected argument '" + parsed.positional()[0] + "'");
      }
      return c.run(parsed);
    } catch (const UsageError& e) {
      std::fprintf(stderr, "loom %s: %s\n", c.name.c_str(), e.what());
      return kExitUsage;
    } catch (const loom::ManifestError& e) {
      std::fprintf(stderr, "\nloom: error: %s\n", e.what());
      return kExitError;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "\nloom: error: %s\n", e.what());
      return kExitError;
    }
  }
  std::fprintf(stderr, "loom: unknown command '%s'\n\n", args[1].c_str());
  top_usage(stderr);
  return kExitUsage;
}
