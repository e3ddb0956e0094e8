// Resource limits: a load under an address-space limit too small for the model fails
// with out_of_memory (never a crash, never std::bad_alloc), and files that claim absurd
// sizes are refused quickly without the memory they claim.
//
// The parsers' own checks of each claim are unit-tested in tests/format (safetensors
// "header length checks" and "offset validation", GGUF "bad input: absurd counts",
// "unpickler limits stop pickle bombs", "npy refusals"); here the same claims go
// through the public entry points, timed, and — outside sanitizer builds, whose shadow
// memory needs terabytes of address space — in a child process whose address space is
// only a few tens of MB larger than it was at the fork.
#include <catch2/catch.hpp>

#include <sys/resource.h>

#include <malloc.h>

#include <unistd.h>

#include <chrono>
#include <limits>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>

#include "loom.h"
#include "loom/error.hpp"
#include "loom/exporter.hpp"
#include "loom/format.hpp"
#include "loom/loader.hpp"
#include "loom/session.hpp"
#include "loom/tensor.hpp"
#include "loom/thread_pool.hpp"
#include "loom/tokenizer.hpp"
#include "model/config_parse.hpp"
#include "reliability/reliability_support.hpp"
#include "support/format_fixtures.hpp"
#include "support/test_support.hpp"
#include "support/tiny_model.hpp"

namespace fs = std::filesystem;
namespace r = loom::reliability;
namespace t = loom::test;

namespace {

// Limits the child's address space to what it uses now plus `headroom`.
bool limit_address_space(uint64_t headroom) {
  ::malloc_trim(0);  // hand freed heap back first: the child must ask the kernel for more
  const rlimit lim{r::virtual_size_bytes() + headroom, r::virtual_size_bytes() + headroom};
  return ::setrlimit(RLIMIT_AS, &lim) == 0;
}


// Runs `fn` expecting loom::Error(`code`): in this process, within `seconds`, and —
// where the build allows it — in a child under a 64 MB address-space headroom.
void refused_quickly_in_bounded_memory(const std::function<void()>& fn, loom::ErrorCode code,
                                       const std::string& needle) {
  const auto start = std::chrono::steady_clock::now();
  t::expect_error(fn, code, needle);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(seconds < 2.0);
  if (r::sanitized_build()) {
    WARN("address-space limit part skipped: sanitizer build");
    return;
  }
  const auto child = r::run_in_child([&](int out) {
    if (!limit_address_space(64u << 20)) return 10;
    try {
      fn();
    } catch (const loom::Error& e) {
      r::child_say(out, e.what());
      return e.code() == code ? 0 : 11;
    }
    return 12;
  });
  INFO(child.output);
  CHECK(child.exited);
  CHECK(child.exit_code == 0);
}

// A model of about 56 MB of f32 weights: well over the headroom the child gets.
fs::path write_large_model(const fs::path& dir) {
  loom::ModelConfig c = t::tiny_llama_config();
  c.vocab_size = 16384;
  c.hidden_size = 256;
  c.intermediate_size = 1024;
  c.n_layers = 6;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 64;
  c.rope_dims = 64;
  const fs::path path = dir / "large";
  loom::export_model(c, t::random_weights(c, 5), path, loom::ExportFormat::safetensors);
  return path;
}

}  // namespace

namespace {

// The child's half of the next test, in a freshly exec'd copy of this executable: a
// forked child would inherit the parent's heap, whose freed memory it could reuse
// without asking the kernel, and the limit would prove nothing.
int load_under_limit(int out, const fs::path& large, const fs::path& tiny) {
  if (!limit_address_space(40u << 20)) return 10;
  const int64_t owned_at_start = loom::Storage::owned_bytes_live();
  // Threads whose stacks do not all fit (the first few do): a pool, and a load's
  // conversion workers, fail with out_of_memory after stopping the threads they started
  // (a joinable std::thread destroyed would terminate the process instead).
  try {
    loom::ThreadPool pool(256);
    r::child_say(out, "a pool of 256 threads started");
    return 42;
  } catch (const loom::Error& e) {
    r::child_say(out, std::string("pool: ") + e.what() + "\n");
    if (e.code() != loom::ErrorCode::out_of_memory) return 43;
  }
  try {
    auto options = loom::test::quiet_load_options();
    options.threads = 256;
    (void)loom::load_model(tiny, options);
    r::child_say(out, "a load with 256 conversion workers succeeded");
    return 44;
  } catch (const loom::Error& e) {
    r::child_say(out, std::string("workers: ") + e.what() + "\n");
    if (e.code() != loom::ErrorCode::out_of_memory) return 45;
  }
  int step = 20;
  for (const auto mode : {loom::IoMode::stream, loom::IoMode::mmap}) {
    ++step;
    auto options = loom::test::quiet_load_options();
    options.io_mode = mode;
    try {
      const auto model = loom::load_model(large, options);
      r::child_say(out, std::string(loom::io_mode_name(mode)) + ": the load succeeded, VmSize " +
                            std::to_string(r::virtual_size_bytes()));
      return step;
    } catch (const loom::Error& e) {
      r::child_say(out, std::string(loom::io_mode_name(mode)) + ": " + e.what() + "\n");
      if (e.code() != loom::ErrorCode::out_of_memory) return step;
      if (e.context().file.empty()) return step + 10;  // names the model or the file
    }
  }
  // The same through the C API: a status, and no handle.
  loom_load_params p;
  loom_load_params_init(&p);
  p.io_mode = LOOM_IO_STREAM;
  p.log_level = LOOM_LOG_OFF;
  loom_model* m = reinterpret_cast<loom_model*>(&p);  // must be overwritten with NULL
  loom_error* err = nullptr;
  const loom_status s = loom_model_load(large.c_str(), &p, &m, &err);
  r::child_say(out, std::string("C API: ") + loom_status_str(s) + ": " + loom_error_message(err) + "\n");
  loom_error_free(err);
  if (s != LOOM_ERR_OUT_OF_MEMORY || m != nullptr) return 40;
  // Everything the failed loads allocated was given back. (The process's VmSize stays
  // higher: glibc keeps exited threads' stacks and trimmed arenas for reuse.)
  if (loom::Storage::owned_bytes_live() != owned_at_start) {
    r::child_say(out, "owned bytes leaked: " + std::to_string(loom::Storage::owned_bytes_live() - owned_at_start));
    return 41;
  }
  return 0;
}

}  // namespace

// Hidden (not listed, not run by ctest): the entry point of the exec'd child.
TEST_CASE("limits child: load under an address-space limit", "[.]") {
  const char* args = std::getenv("LOOM_RELIABILITY_LIMIT_CHILD");
  if (args == nullptr) return;
  const std::string a(args);
  const auto bar1 = a.find('|');
  const auto bar2 = a.find('|', bar1 + 1);
  ::_exit(load_under_limit(std::stoi(a.substr(0, bar1)), a.substr(bar1 + 1, bar2 - bar1 - 1), a.substr(bar2 + 1)));
}

TEST_CASE("limits: a load under an address-space limit too small for the model fails with out_of_memory") {
  if (r::sanitized_build()) {
    WARN("SKIPPED: sanitizer shadow memory needs an unlimited address space");
    return;
  }
  const t::TempDir dir;
  const fs::path large = dir / "large";
  const auto writer = r::run_in_child([&](int) {
    write_large_model(dir.path());
    return 0;
  });
  REQUIRE(writer.exit_code == 0);
  REQUIRE(fs::file_size(large / "model.safetensors") > (50u << 20));
  const fs::path tiny = dir / "tiny";
  const loom::ModelConfig tc = t::tiny_llama_config();
  loom::export_model(tc, t::random_weights(tc, 6), tiny, loom::ExportFormat::safetensors);

  const auto child = r::run_in_child([&](int out) {
    const std::string args = std::to_string(out) + "|" + large.string() + "|" + tiny.string();
    ::setenv("LOOM_RELIABILITY_LIMIT_CHILD", args.c_str(), 1);
    ::execl("/proc/self/exe", "loom_tests_reliability", "limits child: load under an address-space limit",
            static_cast<char*>(nullptr));
    return 50;  // exec failed
  });
  INFO(child.output);
  CHECK(child.exited);
  CHECK(child.exit_code == 0);
}

TEST_CASE("limits: a safetensors header claiming a 1 TB tensor is refused quickly in bounded memory") {
  const t::TempDir dir;
  const fs::path path = dir / "claim.safetensors";
  t::write_file_bytes(path, t::safetensors_file(
                                R"({"w":{"dtype":"F32","shape":[262144,1048576],"data_offsets":[0,1099511627776]}})", 64));
  refused_quickly_in_bounded_memory([&] { (void)loom::open_weights(path); }, loom::ErrorCode::format, "");
}

TEST_CASE("limits: a GGUF claiming 10^12 tensors or metadata entries is refused quickly in bounded memory") {
  const t::TempDir dir;
  const fs::path tensors = dir / "tensors.gguf";
  t::write_file_bytes(tensors, t::Bytes{}.str("GGUF").u32(3).u64(1'000'000'000'000ull).u64(0).zeros(64).data);
  refused_quickly_in_bounded_memory([&] { (void)loom::open_weights(tensors); }, loom::ErrorCode::format,
                                    "absurd tensor count");
  const fs::path kvs = dir / "kvs.gguf";
  t::write_file_bytes(kvs, t::Bytes{}.str("GGUF").u32(3).u64(0).u64(1'000'000'000'000ull).zeros(64).data);
  refused_quickly_in_bounded_memory([&] { (void)loom::open_weights(kvs); }, loom::ErrorCode::format,
                                    "absurd metadata key/value count");
  // An array inside the metadata claiming 10^12 elements (say, tokenizer.ggml.merges).
  const fs::path array = dir / "array.gguf";
  t::write_file_bytes(array, t::Bytes{}
                                 .str("GGUF").u32(3).u64(0).u64(1)
                                 .gguf_str("tokenizer.ggml.merges").u32(9).u32(8).u64(1'000'000'000'000ull)
                                 .zeros(64).data);
  refused_quickly_in_bounded_memory([&] { (void)loom::open_weights(array); }, loom::ErrorCode::format, "array of");
}

TEST_CASE("limits: an npy header claiming 10^12 elements is refused quickly in bounded memory") {
  const t::TempDir dir;
  const fs::path path = dir / "claim.npy";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  t::write_file_bytes(path, t::Bytes{}.str("\x93NUMPY").u8(1).u8(0).u16(static_cast<uint16_t>(header.size()))
                                .str(header).zeros(16).data);
  refused_quickly_in_bounded_memory([&] { (void)loom::open_weights(path); }, loom::ErrorCode::format, "");
}

TEST_CASE("limits: a tokenizer.json claiming a vast id space or 10^5 merges of unknown tokens is refused quickly") {
  // One entry at id 16 million would make a table of 16 million token texts (over 500 MB)
  // out of a 60-byte document.
  refused_quickly_in_bounded_memory(
      [] {
        (void)loom::Tokenizer::from_tokenizer_json(
            R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 16000000}, "merges": []}})", "sparse.json");
      },
      loom::ErrorCode::format, "sparse.json");
  std::string merges;
  for (int i = 0; i < 100000; ++i) merges += (i ? ",\"x" : "\"x") + std::to_string(i) + " y\"";
  const std::string many = R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [)" + merges + "]}}";
  refused_quickly_in_bounded_memory([&] { (void)loom::Tokenizer::from_tokenizer_json(many, "merges.json"); },
                                    loom::ErrorCode::format, "merges.json");
}

// Found by fuzz_config_json: a hidden_size near 2^63 passed the config checks, and the
// KV cache size computed from it wrapped around (signed overflow).
TEST_CASE("limits: config.json sizes beyond loom's limits are refused and KV cache sizes never wrap") {
  const std::string base = R"({"architectures":["LlamaForCausalLM"],"model_type":"llama","intermediate_size":128,)"
                           R"("num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":300,)"
                           R"("max_position_embeddings":1024,"hidden_size":)";
  CHECK_NOTHROW(loom::config_parse::from_hf_json(base + "64}", "config.json"));
  for (const char* hidden : {"9223370001409399096", "1048580", "4611686018427387904"}) {
    INFO(hidden);
    t::expect_error([&] { (void)loom::config_parse::from_hf_json(base + hidden + "}", "config.json"); },
                    loom::ErrorCode::invalid_argument, "hidden_size", "config.json");
  }
  // GPT-2 derives the FFN width as 4 x hidden: the product must not wrap either.
  t::expect_error([&] {
    (void)loom::config_parse::from_hf_json(
        R"({"architectures":["GPT2LMHeadModel"],"model_type":"gpt2","n_embd":4611686018427387904,"n_layer":1,)"
        R"("n_head":1,"vocab_size":10,"n_positions":16})", "config.json");
  }, loom::ErrorCode::format, "hidden_size", "config.json");
  loom::ModelConfig c = t::tiny_llama_config();
  CHECK(loom::kv_cache_bytes_for(c, 256, loom::DType::f32) == 2 * 2 * 2 * 256 * 16 * 4);
  // Whole 16-position blocks: 257 positions take 272, one takes 16.
  CHECK(loom::kv_cache_bytes_for(c, 257, loom::DType::f32) == 2 * 2 * 2 * 272 * 16 * 4);
  CHECK(loom::kv_cache_bytes_for(c, 1, loom::DType::f16) == 2 * 2 * 2 * 16 * 16 * 2);
  t::expect_error([&] { (void)loom::kv_cache_bytes_for(c, std::numeric_limits<int64_t>::max(), loom::DType::f32); },
                  loom::ErrorCode::out_of_memory, "positions");
  t::expect_error([&] { (void)loom::kv_cache_bytes_for(c, int64_t{1} << 58, loom::DType::f32); },
                  loom::ErrorCode::out_of_memory, "exceeds");
}
