// Aggregate decode tokens/s of loom::Batch at several batch sizes on generated
// Llama-shaped models, with the machine's ceilings measured in the same run.
//
//   build/bench/loom_batched_decode [--shape small|1b] [--dtype f16,q8_0,q4_k] [--batch 1,2,4,8,16]
//                                   [--threads N] [--prompt 128] [--steps 64] [--reps 3] [--repack off,auto]
//                                   [--kv f32|f16] [--by-matrix no|yes]
//
// For each dtype and batch size B: B different `prompt`-token prompts are prefilled on
// one Batch (chunked within its token budget), then `steps` passes each decode one token
// of all B sequences (greedy: each sequence's argmax fed back). A pass reads every weight
// once for all B tokens, so decode GB/s is matrix bytes x passes / s (against the
// measured streaming-read bandwidth, or a read of a window of the weights' size where
// that is faster: machine_ceilings.hpp) and GFLOP/s is 2 x matrix params x tokens / s
// (against the measured fp32 FMA peak, or the int8 dot-product peak for quantized weights,
// marked "int8"): as B grows decode moves from the first ceiling towards the second.
// With --repack auto (default: off and auto) each dtype that has a kernel-native layout on
// this CPU is measured again with its matrices packed (the "layout" column). --kv f16
// stores the KV cache in f16 (llama.cpp's default) instead of loom's default f32: at
// B = 16 the pass reads about as many KV bytes as weight bytes.
//
// "GEMM GFLOP/s" is the pass's weight products alone: after a row's runs, every matrix
// of the model (each layer's in the pass's order, q, k and v, and gate and up, as one
// where the pass multiplies them so, then the output projection) is
// multiplied by B tokens of activations through the same kernels::linear, `steps` times
// over, timed without the attention, norms and the other work between them. The weights
// stream from memory as in the pass (the small shape's matrices are several times L3),
// so this is the GEMM rate inside a decode pass; its share ("of peak") is of the same
// peak as the pass's, and "paired" of the better of that and the same peak measured
// again right after the products (this VM's compute rate drifts as its bandwidth does).
// --by-matrix yes prints, under each row, every kind of matrix's part of those products:
// how many, their shape, microseconds a pass and rate (its activations' quantizing
// included), so a low share can be traced to the shapes that lose it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "loom/batch.hpp"
#include "loom/cpu.hpp"
#include "loom/thread_pool.hpp"
#include "machine_ceilings.hpp"
#include "model/joined_products.hpp"
#include "model/weight_slots.hpp"
#include "runtime/kernels/linear.hpp"
#include "synthetic_model.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using loom::bench::median;
using loom::bench::split;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Timing {
  double prefill = 0.0;
  double decode = 0.0;
};

// One repetition on fresh sequences; they are removed afterwards, so the batch (and its
// KV pool) is reused by the next.
Timing run_once(loom::Batch& batch, const std::vector<std::vector<int32_t>>& prompts, int steps) {
  std::vector<loom::SeqId> ids;
  for (const auto& p : prompts) {
    ids.push_back(batch.add());
    batch.feed(ids.back(), p);
  }
  Timing t;
  auto t0 = Clock::now();
  for (size_t ready = 0; ready < ids.size();) ready += batch.decode().ready.size();
  t.prefill = seconds_since(t0);
  t0 = Clock::now();
  for (int s = 0; s < steps; ++s) {
    for (loom::SeqId id : ids) {
      const auto logits = batch.logits(id);
      const auto token = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      batch.feed(id, std::span<const int32_t>(&token, 1));
    }
    batch.decode();
  }
  t.decode = seconds_since(t0);
  for (loom::SeqId id : ids) batch.remove(id);
  return t;
}

// One kind of matrix in the pass ("attn_output", "q, k and v", ...): its shape, how many
// the pass multiplies, and their seconds per pass.
struct MatrixKind {
  std::string name;
  int64_t rows = 0, cols = 0, count = 0;
  double seconds = 0.0;
};

// Seconds per pass of the model's weight products alone for B tokens (see the top); with
// `kinds`, each kind's share of it too (the clock read between products: tens of ns
// against products of tens of us).
double products_seconds(const loom::Model& model, int64_t b, loom::ThreadPool& pool, int steps,
                        std::vector<MatrixKind>* kinds = nullptr) {
  const auto& c = model.config();
  std::vector<const loom::Tensor*> matrices;
  std::vector<std::string> names;
  // The groups the pass multiplies as one matrix (model/joined_products.hpp), each in the
  // place of its first member.
  std::vector<loom::Tensor> joined;
  joined.reserve(static_cast<size_t>(c.n_layers) * loom::kJoinedProducts.size());
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const loom::LayerWeights& L = model.weights().layers[static_cast<size_t>(l)];
    for (const auto& slot : loom::slots::all_slots()) {
      if (slot.role != loom::slots::Role::matrix || !slot.needed(c) || !slot.per_layer) continue;
      size_t member = 0;
      if (const loom::JoinedProducts* group = loom::joined_group_of(slot.id, &member)) {
        if (loom::Tensor view = loom::joined_view(L, *group); view.defined()) {
          if (member == 0) {
            joined.push_back(std::move(view));
            matrices.push_back(&joined.back());
            names.emplace_back(group->what);
          }
          continue;
        }
      }
      matrices.push_back(&loom::slots::tensor_of(model.weights(), slot, l));
      names.emplace_back(slot.name);
    }
  }
  for (const auto& slot : loom::slots::all_slots()) {
    if (slot.role == loom::slots::Role::matrix && slot.needed(c) && !slot.per_layer) {
      matrices.push_back(&loom::slots::tensor_of(model.weights(), slot, 0));
      names.emplace_back(slot.name);
    }
  }
  std::vector<size_t> kind_of(matrices.size());
  if (kinds) {
    kinds->clear();
    for (size_t i = 0; i < matrices.size(); ++i) {
      auto it = std::find_if(kinds->begin(), kinds->end(), [&](const MatrixKind& k) { return k.name == names[i]; });
      if (it == kinds->end()) {
        kinds->push_back({names[i], matrices[i]->shape()[0], matrices[i]->shape()[1], 0, 0.0});
        it = kinds->end() - 1;
      }
      ++it->count;
      kind_of[i] = static_cast<size_t>(it - kinds->begin());
    }
  }
  int64_t widest_in = 0, widest_out = 0;
  for (const auto* w : matrices) {
    widest_out = std::max(widest_out, w->shape()[0]);
    widest_in = std::max(widest_in, w->shape()[1]);
  }
  std::vector<float> x(static_cast<size_t>(b * widest_in)), y(static_cast<size_t>(b * widest_out));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int64_t>(i * 2654435761u % 2001) - 1000) * 1e-3f;
  const auto t0 = Clock::now();
  for (int s = 0; s < steps; ++s) {
    for (size_t i = 0; i < matrices.size(); ++i) {
      const loom::Tensor& w = *matrices[i];
      const auto m0 = kinds ? Clock::now() : Clock::time_point{};
      loom::kernels::linear(w, nullptr, x.data(), w.shape()[1], b, y.data(), w.shape()[0], pool);
      if (kinds) (*kinds)[kind_of[i]].seconds += seconds_since(m0) / steps;
    }
  }
  return seconds_since(t0) / steps;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> args{{"--shape", "small"}, {"--dtype", "f16,q8_0,q4_k"},
                                          {"--batch", "1,2,4,8,16"}, {"--threads", "0"},
                                          {"--prompt", "128"},     {"--steps", "64"},
                                          {"--reps", "3"},         {"--repack", "off,auto"},
                                          {"--kv", "f32"},         {"--by-matrix", "no"}};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!args.count(argv[i])) {
      std::fprintf(stderr, "unknown flag %s (expected --shape --dtype --batch --threads --prompt --steps --reps --repack --kv "
                   "--by-matrix)\n",
                   argv[i]);
      return 2;
    }
    args[argv[i]] = argv[i + 1];
  }
  const auto config = loom::bench::shape_config(args["--shape"]);
  const int prompt = std::stoi(args["--prompt"]);
  const int steps = std::stoi(args["--steps"]);
  const int reps = std::stoi(args["--reps"]);
  const std::optional<loom::DType> kv = loom::dtype_from_name(args["--kv"]);
  if (!kv || (*kv != loom::DType::f32 && *kv != loom::DType::f16)) {
    std::fprintf(stderr, "--kv takes f32 or f16, got %s\n", args["--kv"].c_str());
    return 2;
  }
  const loom::DType kv_dtype = *kv;
  const bool by_matrix = args["--by-matrix"] == "yes";
  std::vector<int64_t> batch_sizes;
  for (const auto& b : split(args["--batch"])) batch_sizes.push_back(std::stoll(b));
  if (prompt < 1 || steps < 1 || reps < 1 || batch_sizes.empty() ||
      *std::min_element(batch_sizes.begin(), batch_sizes.end()) < 1) {
    std::fprintf(stderr, "--prompt, --steps, --reps and every --batch size must be positive\n");
    return 2;
  }
  auto pool = std::make_shared<loom::ThreadPool>(std::stoi(args["--threads"]));
  const int threads = pool->size();

  std::printf("machine: isa %s\n", std::string(loom::isa_name(loom::active_isa())).c_str());
  const auto probe = loom::bench::probe_read_bandwidth(threads);
  double bandwidth = probe.best_gbs;
  // The owned pattern read over a window of each model's weight bytes (machine_ceilings.hpp).
  const std::string owned_best = loom::bench::best_variant_over(probe, "owned");
  const double peak = loom::bench::measure_fma_peak_gflops(threads);
  const double int8_peak = loom::bench::measure_int8_dot_peak_gops(threads);
  std::printf("machine: %d thread(s): streaming read %.1f GB/s, fp32 FMA peak %.1f GFLOP/s, int8 dot peak %.1f GOP/s\n",
              threads, bandwidth, peak, int8_peak);
  loom::bench::print_scheduling_gaps(threads);
  const double params = loom::bench::matrix_params(config);
  std::printf("model: %s shape, hidden %lld, %lld layers, %lld/%lld heads, ffn %lld, vocab %lld, %.0fM matrix params\n",
              args["--shape"].c_str(), static_cast<long long>(config.hidden_size),
              static_cast<long long>(config.n_layers), static_cast<long long>(config.n_heads),
              static_cast<long long>(config.n_kv_heads), static_cast<long long>(config.intermediate_size),
              static_cast<long long>(config.vocab_size), params / 1e6);
  std::printf("batch: %d-token prompts, %d decode passes, median of %d reps, %s KV cache\n", prompt, steps, reps,
              std::string(loom::dtype_name(kv_dtype)).c_str());
  std::printf("%-7s %-9s %4s %12s %12s %10s %10s %8s %8s %11s %8s %12s %8s %8s\n", "dtype", "layout", "B",
              "prefill t/s", "decode t/s", "t/s/seq", "dec GB/s", "bw GB/s", "of bw", "dec GFLOP/s", "of peak",
              "GEMM GFLOP/s", "of peak", "paired");

  for (const auto& dname : split(args["--dtype"])) {
    const auto dtype = loom::dtype_from_name(dname);
    if (!dtype) {
      std::fprintf(stderr, "unknown dtype %s\n", dname.c_str());
      return 2;
    }
    const auto rows = loom::bench::synthetic_model(config, *dtype);
    const double bytes = loom::bench::matrix_bytes(*rows);  // the packed copy reads the same bytes
    const auto models = loom::bench::models_for_repack(rows, args["--repack"]);
    if (!models) return 2;
    // Quantized products run on int8 dot products: their share is of the int8 peak.
    const double row_peak = loom::is_quantized(*dtype) ? int8_peak : peak;
    for (const auto& model : *models) {
      for (const int64_t b : batch_sizes) {
        std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(b));
        for (int64_t s = 0; s < b; ++s) {
          auto& p = prompts[static_cast<size_t>(s)];
          for (int i = 0; i < prompt; ++i) {
            p.push_back(static_cast<int32_t>(((i + 1009 * s) * 7919 + 13) % config.vocab_size));
          }
        }
        loom::BatchOptions bo;
        bo.max_sequences = b;
        bo.context_length = prompt + steps + 1;
        bo.token_budget = std::max<int64_t>(bo.token_budget, b);  // every decode token in one pass
        bo.pool = pool;
        bo.kv_dtype = kv_dtype;
        loom::Batch batch(model, bo);
        std::vector<double> prefill_s, decode_s;
        for (int r = 0; r < reps; ++r) {
          const Timing t = run_once(batch, prompts, steps);
          prefill_s.push_back(t.prefill);
          decode_s.push_back(t.decode);
        }
        // This kind of machine is a VM whose memory bandwidth drifts: each row's ceiling is
        // the better of the start-up probe and one taken right after its own runs, or a
        // read of a window of the weights' size where that is faster (part of a model not
        // far past the L3's size stays there from one pass to the next).
        bandwidth = std::max(bandwidth, loom::bench::measure_read_bandwidth_gbs(threads));
        const double row_bandwidth = std::max(
            bandwidth, loom::bench::measure_read_variant_gbs(threads, owned_best, 2, static_cast<size_t>(bytes)));
        const double pre_tps = static_cast<double>(b) * prompt / median(prefill_s);
        const double dec_tps = static_cast<double>(b) * steps / median(decode_s);
        const double dec_gbs = bytes * steps / median(decode_s) / 1e9;
        const double dec_gflops = 2.0 * params * dec_tps / 1e9;
        std::vector<MatrixKind> kinds;
        const double gemm_gflops =
            2.0 * params * static_cast<double>(b) / products_seconds(*model, b, *pool, steps, by_matrix ? &kinds : nullptr) / 1e9;
        // The same peak again right after the products: this VM's compute rate drifts too
        // (the int8 probe read 1765 and 1062 GOP/s at start-up in runs 40 minutes apart), so
        // "paired" is the products' share of the better of the start-up probe and this one.
        const double paired_peak = std::max(row_peak, loom::is_quantized(*dtype)
                                                          ? loom::bench::measure_int8_dot_peak_gops(threads)
                                                          : loom::bench::measure_fma_peak_gflops(threads));
        std::printf("%-7s %-9s %4lld %12.1f %12.2f %10.2f %10.2f %8.1f %7.0f%% %11.1f %7.0f%% %12.1f %7.0f%% %7.0f%%%s\n",
                    dname.c_str(), loom::bench::layout_of(*model).c_str(), static_cast<long long>(b), pre_tps, dec_tps,
                    dec_tps / static_cast<double>(b), dec_gbs, row_bandwidth, 100.0 * dec_gbs / row_bandwidth, dec_gflops,
                    100.0 * dec_gflops / row_peak, gemm_gflops, 100.0 * gemm_gflops / row_peak,
                    100.0 * gemm_gflops / paired_peak, loom::is_quantized(*dtype) ? " int8" : "");
        for (const MatrixKind& k : kinds) {
          const double gops = 2.0 * static_cast<double>(k.rows * k.cols * k.count * b) / k.seconds / 1e9;
          std::printf("    %-12s %2lld x %5lld x %5lld  %9.1f us a pass  %8.1f %s/s  %4.0f%% of peak\n", k.name.c_str(),
                      static_cast<long long>(k.count), static_cast<long long>(k.rows), static_cast<long long>(k.cols),
                      k.seconds * 1e6, gops, loom::is_quantized(*dtype) ? "GOP" : "GFLOP", 100.0 * gops / row_peak);
        }
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
