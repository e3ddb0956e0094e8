// Concurrency: one model shared read-only by many sessions on many threads, loads running
// on several threads at once, and the thread pool under stress. Each test compares the
// concurrent results with the single-threaded ones bit for bit; the TSan CI step runs
// this file (label "threads") to prove the sharing is also free of data races.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "loom/demo.hpp"
#include "loom/error.hpp"
#include "loom/exporter.hpp"
#include "loom/generate.hpp"
#include "loom/loader.hpp"
#include "loom/pack.hpp"
#include "loom/sampler.hpp"
#include "loom/session.hpp"
#include "loom/thread_pool.hpp"
#include "reliability/reliability_support.hpp"
#include "runtime/kernels/linear.hpp"
#include "support/test_support.hpp"
#include "support/tiny_model.hpp"

namespace fs = std::filesystem;
namespace r = loom::reliability;
namespace t = loom::test;

namespace {

constexpr int kSessions = 4;

const std::vector<std::string>& prompts() {
  static const std::vector<std::string> p{
      "The quick brown fox", "Once upon a time there was", "In the beginning", "A library that opens files"};
  return p;
}

struct Run {
  std::vector<int32_t> tokens;
  std::vector<float> last_logits;
};

// Prefill + greedy decode of one prompt on its own session.
Run run_prompt(const std::shared_ptr<const loom::Model>& model, const std::string& prompt,
               std::shared_ptr<loom::ThreadPool> pool = nullptr) {
  loom::SessionOptions so;
  so.context_length = 128;
  so.n_threads = 2;
  so.pool = std::move(pool);
  loom::Session session(model, so);
  loom::SamplerParams sp;
  sp.temperature = 0.0f;
  loom::Sampler sampler(sp);
  loom::GenerateOptions go;
  go.max_tokens = 12;
  go.stop_at_eos = false;
  const auto result = loom::generate(session, sampler, *model->tokenizer(), prompt, go);
  const auto logits = session.logits();
  return {result.tokens, {logits.begin(), logits.end()}};
}

// Runs every prompt on its own thread at once; `make_pool` gives each run its pool.
std::vector<Run> run_concurrently(const std::shared_ptr<const loom::Model>& model,
                                  const std::function<std::shared_ptr<loom::ThreadPool>()>& make_pool) {
  std::vector<Run> runs(kSessions);
  std::vector<std::string> errors(kSessions);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kSessions; ++i) {
    threads.emplace_back([&, i] {
      ++ready;
      while (ready.load() < kSessions) std::this_thread::yield();  // start together
      try {
        runs[static_cast<size_t>(i)] = run_prompt(model, prompts()[static_cast<size_t>(i)], make_pool());
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(i)] = e.what();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& e : errors) CHECK(e.empty());
  return runs;
}

void check_same_runs(const std::vector<Run>& want, const std::vector<Run>& got) {
  REQUIRE(want.size() == got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("session " << i);
    CHECK(want[i].tokens.size() == 12);
    CHECK(got[i].tokens == want[i].tokens);
    REQUIRE(got[i].last_logits.size() == want[i].last_logits.size());
    CHECK(std::memcmp(got[i].last_logits.data(), want[i].last_logits.data(),
                      want[i].last_logits.size() * sizeof(float)) == 0);
  }
}

}  // namespace

TEST_CASE("threads: one model shared by sessions on several threads equals the single-threaded runs") {
  const auto model = r::load_quiet(r::demo_model_dir());
  REQUIRE(model->tokenizer() != nullptr);
  std::vector<Run> serial;
  for (int i = 0; i < kSessions; ++i) serial.push_back(run_prompt(model, prompts()[static_cast<size_t>(i)]));
  // Different prompts must give different continuations, or the comparison proves little.
  CHECK(serial[0].tokens != serial[1].tokens);

  SECTION("each session with its own pool") {
    for (int round = 0; round < 2; ++round) check_same_runs(serial, run_concurrently(model, [] { return nullptr; }));
  }
  SECTION("all sessions sharing one pool (callers take turns)") {
    auto shared = std::make_shared<loom::ThreadPool>(2);
    check_same_runs(serial, run_concurrently(model, [&] { return shared; }));
  }
}

TEST_CASE("threads: one tokenizer encodes and decodes on several threads at once") {
  const auto model = r::load_quiet(r::demo_model_dir());
  const loom::Tokenizer& tok = *model->tokenizer();
  std::vector<std::vector<int32_t>> serial;
  for (const auto& p : prompts()) serial.push_back(tok.encode(p, true));
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kSessions; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 200; ++k) {
        const size_t j = static_cast<size_t>((i + k) % kSessions);
        const auto ids = tok.encode(prompts()[j], true);
        if (ids != serial[j] || tok.decode(ids, true) != prompts()[j]) ++mismatches;
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(mismatches.load() == 0);
}

TEST_CASE("threads: loads on several threads at once, converting with worker threads, are identical") {
  const t::TempDir dir;
  const loom::ModelConfig config = t::tiny_llama_config();
  loom::export_model(config, t::random_weights(config, 7), dir / "m", loom::ExportFormat::safetensors_sharded);
  auto options = loom::test::quiet_load_options();
  options.target_dtype = loom::DType::f16;  // every matrix goes through the conversion pipeline
  options.threads = 3;
  options.chunk_bytes = 2048;
  options.load_tokenizer = false;
  const std::vector<int32_t> tokens{1, 5, 9, 17, 33, 65};
  auto logits_of = [&](const std::shared_ptr<const loom::Model>& m) {
    loom::SessionOptions so;
    so.n_threads = 1;
    loom::Session s(m, so);
    s.prefill(tokens);
    return std::vector<float>(s.logits().begin(), s.logits().end());
  };
  const auto want = logits_of(loom::load_model(dir / "m", options));
  for (const auto mode : {loom::IoMode::mmap, loom::IoMode::stream}) {
    INFO(loom::io_mode_name(mode));
    options.io_mode = mode;
    std::vector<std::vector<float>> got(kSessions);
    std::vector<std::thread> threads;
    for (int i = 0; i < kSessions; ++i) {
      threads.emplace_back([&, i] { got[static_cast<size_t>(i)] = logits_of(loom::load_model(dir / "m", options)); });
    }
    for (auto& th : threads) th.join();
    for (const auto& g : got) CHECK(g == want);
  }
}

TEST_CASE("threads: a pack's tensors hashed on 1, 2 and 3 threads give the same verdicts") {
  t::TempDir dir;
  const fs::path pack = dir / "demo.pack";
  loom::PackOptions options;
  options.load.logger = loom::Logger::silent();
  loom::write_pack(r::demo_model_dir(), pack, options);
  for (int threads : {1, 2, 3}) CHECK(loom::verify_pack(pack, threads).empty());
  // One flipped byte in the middle of the data: the same single problem on every pool.
  fs::path data;
  for (const auto& e : fs::directory_iterator(pack)) {
    if (e.path().filename().string().rfind("data-", 0) == 0) data = e.path();
  }
  REQUIRE(!data.empty());
  {
    std::fstream f(data, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(fs::file_size(data) / 2));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5A);
    f.seekp(static_cast<std::streamoff>(fs::file_size(data) / 2));
    f.write(&c, 1);
  }
  const auto one = loom::verify_pack(pack, 1);
  REQUIRE(one.size() == 1);
  CHECK(one[0].detail.find("sha256") != std::string::npos);
  for (int threads : {2, 3}) {
    const auto many = loom::verify_pack(pack, threads);
    REQUIRE(many.size() == 1);
    CHECK(many[0].tensor == one[0].tensor);
    CHECK(many[0].detail == one[0].detail);
  }
}

// A conversion quantizes each tensor on the pool (quant::quantize_from in chunks of
// whole blocks): the data files are the same bytes on 1, 2 and 3 threads.
TEST_CASE("threads: a conversion quantizing on 1, 2 and 3 threads writes the same pack") {
  t::TempDir dir;
  for (const char* quantize : {"q8_0", "q4_k"}) {
    INFO(quantize);
    std::vector<uint8_t> first;
    for (int threads : {1, 2, 3}) {
      loom::PackOptions options;
      options.load.logger = loom::Logger::silent();
      options.load.pool = std::make_shared<loom::ThreadPool>(threads);
      options.quantize = quantize;
      const fs::path pack = dir / (std::string(quantize) + "-" + std::to_string(threads) + ".pack");
      loom::write_pack(r::demo_model_dir(), pack, options);
      const auto data = t::read_file_bytes(pack / "data-00000.bin");
      if (threads == 1) {
        first = data;
        REQUIRE(!first.empty());
        CHECK(t::read_file_text(pack / "index.json").find("\"" + std::string(quantize) + "\"") != std::string::npos);
      } else {
        CHECK(data == first);
      }
      CHECK(loom::verify_pack(pack, threads).empty());
    }
  }
}

TEST_CASE("threads: parallel_for and split_rows cover every index exactly once, in whole grains, a piece a thread") {
  // Every index once, every piece but the last a whole number of grains, no piece empty,
  // and parallel_for's split: ceil(units / threads) grains a piece, so no more pieces than
  // threads. split_rows (each piece starts its weight streams cold) takes one piece a
  // thread too: sized by the threads' speeds where there are at least 8 grains a thread
  // (parallel_for_balanced), else parallel_for's split.
  for (int threads : {1, 2, 3, 5}) {
    loom::ThreadPool pool(threads);
    for (int64_t n : {1, 2, 7, 64, 1000, 4097}) {
      for (int64_t grain : {1, 3, 16, 5000}) {
        for (const bool via_split_rows : {false, true}) {
          std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
          std::atomic<int> bad_ranges{0}, pieces{0};
          auto record = [&](int64_t b, int64_t e, int thread) {
            if (b >= e || b % grain != 0 || thread < 0 || thread >= threads || (e != n && (e - b) % grain != 0)) {
              ++bad_ranges;
            }
            ++pieces;
            for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i)];
          };
          if (via_split_rows) {
            loom::kernels::split_rows(pool, n, grain, 1, [&](int64_t b, int64_t e) { record(b, e, 0); });
          } else {
            pool.parallel_for(n, grain, record);
          }
          int wrong = 0;
          for (auto& h : hits) wrong += h.load() != 1;
          INFO("threads " << threads << " n " << n << " grain " << grain << " split_rows " << via_split_rows);
          CHECK(wrong == 0);
          CHECK(bad_ranges.load() == 0);
          const int64_t units = (n + grain - 1) / grain;
          const int64_t per_piece = (units + threads - 1) / threads;
          if (via_split_rows && units >= 8 * threads) {
            CHECK(pieces.load() == threads);
          } else {
            CHECK(pieces.load() == (units + per_piece - 1) / per_piece);
          }
          CHECK(pieces.load() <= threads);
        }
      }
    }
  }
}

TEST_CASE("threads: parallel_for_balanced gives a slower thread a smaller share, per kind, and leaves parallel_for even") {
  // Thread 1 takes three times as long a unit as thread 0: its speed is a third, so the
  // shares move toward 3:1 (the weights' bound, 1.5 : 0.5 of an even share, is 48:16 of
  // 64 units) over the calls of that kind, while another kind and parallel_for still
  // split evenly. The threads sleep rather than spin, so that the tests running beside
  // this one (ctest -j) on the same cores hardly change the times.
  loom::ThreadPool pool(2);
  constexpr int64_t kUnits = 64;
  std::atomic<int64_t> first_share{0};
  auto job = [&](int64_t b, int64_t e, int thread) {
    if (thread == 0) first_share = e - b;
    std::this_thread::sleep_for(std::chrono::microseconds((e - b) * (thread == 0 ? 100 : 300)));
  };
  for (int call = 0; call < 40; ++call) pool.parallel_for_balanced(kUnits, 1, 0, job);
  INFO("thread 0's share of the last balanced call " << first_share.load());
  CHECK(first_share.load() >= 38);
  CHECK(first_share.load() <= 48);
  pool.parallel_for_balanced(kUnits, 1, 1, job);  // a kind not yet measured
  CHECK(first_share.load() == 32);
  pool.parallel_for(kUnits, 1, job);
  CHECK(first_share.load() == 32);
  pool.parallel_for_balanced(15, 1, 0, job);  // under 8 units a thread: even
  CHECK(first_share.load() == 8);
  try {
    pool.parallel_for_balanced(kUnits, 1, loom::ThreadPool::kBalanceKinds, job);
    FAIL("a kind past the last was accepted");
  } catch (const loom::Error& e) {
    CHECK(e.code() == loom::ErrorCode::invalid_argument);
    CHECK(std::string(e.what()).find("kind 4") != std::string::npos);
  }
}

TEST_CASE("threads: one pool called from several threads at once serialises the calls") {
  auto pool = std::make_shared<loom::ThreadPool>(3);
  constexpr int kCallers = 4;
  constexpr int kCalls = 300;
  std::atomic<int> wrong_sums{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int k = 0; k < kCalls; ++k) {
        const int64_t n = 50 + (c * 37 + k) % 200;
        std::vector<int64_t> partial(static_cast<size_t>(pool->size()), 0);
        pool->parallel_for(n, 4, [&](int64_t b, int64_t e, int thread) {
          for (int64_t i = b; i < e; ++i) partial[static_cast<size_t>(thread)] += i;
        });
        int64_t sum = 0;
        for (int64_t p : partial) sum += p;
        if (sum != n * (n - 1) / 2) ++wrong_sums;
      }
    });
  }
  for (auto& th : callers) th.join();
  CHECK(wrong_sums.load() == 0);
}

TEST_CASE("threads: an exception in one range is rethrown after all ranges finish and the pool stays usable") {
  loom::ThreadPool pool(4);
  for (int round = 0; round < 50; ++round) {
    std::atomic<int64_t> done{0};
    try {
      pool.parallel_for(400, 1, [&](int64_t b, int64_t e, int thread) {
        if (thread == round % 4) throw std::runtime_error("range " + std::to_string(b));
        done += e - b;
      });
      FAIL("expected the range's exception");
    } catch (const std::runtime_error& e) {
      CHECK(std::string(e.what()).rfind("range ", 0) == 0);
    }
    CHECK(done.load() == 300);  // the other three ranges ran to the end
    std::atomic<int64_t> sum{0};
    pool.parallel_for(100, 1, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) sum += i;
    });
    CHECK(sum.load() == 4950);
  }
}

TEST_CASE("threads: pools created and destroyed in a loop, idle or just after a job, shut down cleanly") {
  for (int i = 0; i < 100; ++i) {
    loom::ThreadPool pool(1 + i % 4);
    if (i % 2 == 0) {
      std::atomic<int> n{0};
      pool.parallel_for(64, 1, [&](int64_t b, int64_t e, int) { n += static_cast<int>(e - b); });
      CHECK(n.load() == 64);
    }
  }
}
