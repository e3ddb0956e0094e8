// End-to-end tokens/s on generated Llama-shaped models, with the machine's ceilings
// measured in the same run.
//
//   build/bench/loom_tokens_per_second [--shape small|1b] [--dtype f32,f16,bf16,q8_0,q4_k,gq8_32,gq4_32,...]
//                                      [--threads 1,2] [--prompt 128] [--steps 64] [--repack off,auto]
//
// For each dtype and thread count it prints prefill tokens/s (one batched pass over a
// `prompt`-token prompt) and decode tokens/s (`steps` single-token steps after it), then
// achieved weight-read GB/s in decode over the measured streaming-read bandwidth (the
// best of several read patterns over owned and mapped memory: machine_ceilings.hpp;
// "of bw": over the best probe of the run, "paired": the median over the repetitions of
// each decode's GB/s over the best of the run's best pattern, its best pattern over
// owned memory (where these models' weights live) and that pattern over a window of the
// weights' size read again and again, each read right after it: the same minute's
// ceiling on a VM whose bandwidth drifts; the window also counts in "of bw"), and
// achieved GFLOP/s in prefill over the measured fp32 FMA peak (the int8 dot-product peak
// for quantized weights, marked "int8"). With --repack auto (default: off and auto) each
// dtype that has a kernel-native layout on this CPU gets a second row with its matrices
// packed (the "layout" column: rows or the packing), as LoadOptions::repack would load it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "loom/cpu.hpp"
#include "loom/session.hpp"
#include "machine_ceilings.hpp"
#include "synthetic_model.hpp"

namespace {

using loom::bench::matrix_bytes;
using loom::bench::matrix_params;
using loom::bench::output_params;
using loom::bench::shape_config;
using loom::bench::synthetic_model;
using Clock = std::chrono::steady_clock;
using loom::bench::median;
using loom::bench::split;

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> args{{"--shape", "small"}, {"--dtype", "f32,f16,bf16"},
                                          {"--threads", "1,2"},  {"--prompt", "128"},
                                          {"--steps", "64"},     {"--reps", "3"},
                                          {"--repack", "off,auto"}};
  const char* usage =
      "usage: loom_tokens_per_second [--shape small|1b] [--dtype f32,f16,...] [--threads 1,2] [--prompt N]\n"
      "                              [--steps N] [--reps N] [--repack off,auto]\n";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0) {
      std::fputs(usage, stdout);
      return 0;
    }
  }
  if (argc % 2 == 0) {  // a flag without its value
    std::fprintf(stderr, "%s expects a value\n%s", argv[argc - 1], usage);
    return 2;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!args.count(argv[i])) {
      std::fprintf(stderr, "unknown flag %s\n%s", argv[i], usage);
      return 2;
    }
    args[argv[i]] = argv[i + 1];
  }
  const auto config = shape_config(args["--shape"]);
  const int prompt = std::stoi(args["--prompt"]);
  const int steps = std::stoi(args["--steps"]);
  const int reps = std::stoi(args["--reps"]);
  std::vector<int> thread_counts;
  for (const auto& t : split(args["--threads"])) thread_counts.push_back(std::stoi(t));

  std::printf("machine: isa %s\n", std::string(loom::isa_name(loom::active_isa())).c_str());
  std::map<int, double> bandwidth, peak, int8_peak;
  // The patterns each decode is paired with: the run's best, and the best over owned
  // memory, the memory the generated models' weights (as built, or repacked) are read
  // from. The mapped file's alone would not do: on this VM its 4 KiB pages read at 1-5
  // GB/s for several passes after a row had touched other memory (the owned buffer's
  // huge pages at 20+ GB/s a thread in the same minutes; a scratch probe, passes over the
  // 1 GiB map after allocating and touching 2 GiB), which made the "paired" share read
  // 919-2361%.
  std::map<int, std::string> best_variant, paired_variant;
  for (int t : thread_counts) {
    const auto probe = loom::bench::probe_read_bandwidth(t);
    bandwidth[t] = probe.best_gbs;
    best_variant[t] = probe.best;
    paired_variant[t] = loom::bench::best_variant_over(probe, "owned");
    peak[t] = loom::bench::measure_fma_peak_gflops(t);
    int8_peak[t] = loom::bench::measure_int8_dot_peak_gops(t);
    std::printf("machine: %d thread(s): streaming read %.1f GB/s (%s), fp32 FMA peak %.1f GFLOP/s, int8 dot peak %.1f GOP/s\n",
                t, bandwidth[t], probe.best.c_str(), peak[t], int8_peak[t]);
    std::printf("machine: %d thread(s): read GB/s by pattern:", t);
    for (const auto& v : probe.variants) std::printf(" %s %.1f;", v.name.c_str(), v.gbs);
    std::printf("\n");
    loom::bench::print_scheduling_gaps(t);
  }
  std::printf("model: %s shape, hidden %lld, %lld layers, %lld/%lld heads, ffn %lld, vocab %lld, %.0fM matrix params\n",
              args["--shape"].c_str(), static_cast<long long>(config.hidden_size),
              static_cast<long long>(config.n_layers), static_cast<long long>(config.n_heads),
              static_cast<long long>(config.n_kv_heads), static_cast<long long>(config.intermediate_size),
              static_cast<long long>(config.vocab_size), matrix_params(config) / 1e6);
  std::printf("%-7s %-9s %3s %12s %12s %10s %8s %8s %8s %12s %8s\n", "dtype", "layout", "thr", "prefill t/s",
              "decode t/s", "dec GB/s", "bw GB/s", "of bw", "paired", "pre GFLOP/s", "of peak");

  std::vector<int32_t> tokens(static_cast<size_t>(prompt));
  for (int i = 0; i < prompt; ++i) tokens[static_cast<size_t>(i)] = (i * 7919 + 13) % static_cast<int>(config.vocab_size);
  // Prefill keeps only the last position's logits, so the output matrix runs for one
  // token; causal attention is prompt^2 / 2 scores and as many value rows, per layer.
  const double attention_flops = 2.0 * prompt * prompt * static_cast<double>(config.q_dim()) * config.n_layers;
  const double prefill_flops =
      2.0 * ((matrix_params(config) - output_params(config)) * prompt + output_params(config)) + attention_flops;

  for (const auto& dname : split(args["--dtype"])) {
    const auto dtype = loom::dtype_from_name(dname);
    if (!dtype) {
      std::fprintf(stderr, "unknown dtype %s\n", dname.c_str());
      return 2;
    }
    const auto rows = synthetic_model(config, *dtype);
    const double bytes = matrix_bytes(*rows);  // the packed copy reads the same bytes
    const auto models = loom::bench::models_for_repack(rows, args["--repack"]);
    if (!models) return 2;
    for (const auto& model : *models) {
      for (int t : thread_counts) {
        loom::SessionOptions o;
        o.n_threads = t;
        o.context_length = prompt + steps + 1;
        loom::Session s(model, o);
        std::vector<double> prefill_s, decode_s, paired;
        // The row's ceiling: the run's best probe, or a read of a window as large as the
        // weights where that is faster (machine_ceilings.hpp: part of a working set not
        // far past the last-level cache stays there from one step to the next).
        const auto weight_window = static_cast<size_t>(bytes);
        double row_bandwidth = 0.0;
        // Prefill's repetitions run back to back, after one untimed pass, before any
        // bandwidth probe: a one-thread prefill right after the probe (which reads a 1 GiB
        // mapped file and a 2 GiB buffer) ran at half speed on this VM, q8_0 93-148 ms
        // against 46-53 ms, and no engine meets that in service.
        s.prefill(tokens);
        for (int r = 0; r < reps; ++r) {
          s.reset();
          const auto t0 = Clock::now();
          s.prefill(tokens);
          prefill_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
        }
        for (int r = 0; r < reps; ++r) {
          s.reset();
          s.prefill(tokens);
          const auto t0 = Clock::now();
          for (int i = 0; i < steps; ++i) s.step((i * 31 + 7) % static_cast<int>(config.vocab_size));
          decode_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
          // The same minute's ceiling: the start-up probe's best pattern and its best owned
          // one, right after.
          double ceiling = loom::bench::measure_read_variant_gbs(t, paired_variant[t], 2);
          if (best_variant[t] != paired_variant[t]) {
            ceiling = std::max(ceiling, loom::bench::measure_read_variant_gbs(t, best_variant[t], 2));
          }
          // And over a window of the weights' size, read again and again as decode does.
          const double window = loom::bench::measure_read_variant_gbs(t, paired_variant[t], 2, weight_window);
          row_bandwidth = std::max(row_bandwidth, window);
          ceiling = std::max(ceiling, window);
          if (ceiling > 0.0) paired.push_back(bytes * steps / decode_s.back() / 1e9 / ceiling);
        }
        // This kind of machine is a VM whose memory bandwidth drifts (the probe read 32 to
        // 61 GB/s with 2 threads within minutes), so each row's ceiling is the better of the
        // start-up probe and one taken right after its own runs.
        bandwidth[t] = std::max(bandwidth[t], loom::bench::measure_read_bandwidth_gbs(t));
        row_bandwidth = std::max(row_bandwidth, bandwidth[t]);
        const double pre_tps = prompt / median(prefill_s);
        const double dec_tps = steps / median(decode_s);
        const double dec_gbs = bytes * dec_tps / 1e9;
        const double pre_gflops = prefill_flops / median(prefill_s) / 1e9;
        // Quantized prefill runs on int8 dot products: its share is of the int8 peak.
        const double row_peak = loom::is_quantized(*dtype) ? int8_peak[t] : peak[t];
        std::printf("%-7s %-9s %3d %12.1f %12.2f %10.2f %8.1f %7.0f%% %7.0f%% %12.1f %7.0f%%%s\n", dname.c_str(),
                    loom::bench::layout_of(*model).c_str(), t, pre_tps,
                    dec_tps, dec_gbs, row_bandwidth, 100.0 * dec_gbs / row_bandwidth,
                    paired.empty() ? 0.0 : 100.0 * median(paired), pre_gflops,
                    100.0 * pre_gflops / row_peak, loom::is_quantized(*dtype) ? " int8" : "");
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
