// A C++ host of the C++ API (libloom.a): load, generate with streaming, and a custom
// sampler stage that never lets the same token appear twice in a row.
//   generate_cpp MODEL_PATH [PROMPT] [MAX_TOKENS]
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "loom/generate.hpp"
#include "loom/loader.hpp"
#include "loom/sampler.hpp"
#include "loom/session.hpp"
#include "loom/tokenizer.hpp"

// Sees the candidates after the built-in filters; drops the previous token unless it is
// the only candidate left (a sampler must never end up empty).
class NoImmediateRepeat final : public loom::SamplerStage {
 public:
  std::string name() const override { return "no-immediate-repeat"; }
  void apply(loom::CandidateList& list, loom::SamplerContext& ctx) override {
    if (ctx.history.empty() || list.items.size() < 2) return;
    const int32_t last = ctx.history.back();
    std::erase_if(list.items, [&](const loom::Candidate& c) { return c.id == last; });
    list.normalized = false;
    ++applied;
  }
  int applied = 0;
};

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL_PATH [PROMPT] [MAX_TOKENS]\n", argv[0]);
    return 2;
  }
  const std::string prompt = argc > 2 ? argv[2] : "Once upon a time";
  const int max_tokens = argc > 3 ? std::atoi(argv[3]) : 32;
  try {
    loom::LoadOptions options;
    options.logger = loom::Logger::silent();
    auto model = loom::load_model(argv[1], options);
    loom::Session session(model);
    loom::SamplerParams params;
    params.seed = 11;
    loom::Sampler sampler(params);
    auto stage = std::make_unique<NoImmediateRepeat>();
    NoImmediateRepeat* stage_view = stage.get();
    sampler.add_stage(std::move(stage));

    loom::GenerateOptions go;
    go.max_tokens = max_tokens;
    go.on_text = [](std::string_view text, int32_t) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
      return true;
    };
    std::fputs(prompt.c_str(), stdout);
    const auto r = loom::generate(session, sampler, *model->tokenizer(), prompt, go);
    for (size_t i = 1; i < r.tokens.size(); ++i) {
      if (r.tokens[i] == r.tokens[i - 1]) {
        std::fprintf(stderr, "\ncustom stage failed: token %d repeated\n", r.tokens[i]);
        return 1;
      }
    }
    std::printf("\n[cpp] %zu tokens at %.1f tok/s; custom stage ran %d times\n", r.tokens.size(),
                r.generate_seconds > 0 ? static_cast<double>(r.tokens.size()) / r.generate_seconds : 0.0,
                stage_view->applied);
    return r.tokens.empty() ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
