// Measures the ceilings a CPU inference engine runs into: streaming-read memory
// bandwidth (decode reads every weight once per token), fp32 FMA throughput (prefill of
// plain weights is matrix-matrix work) and int8 dot-product throughput (the quantized
// kernels' inner loop). Used by the benchmarks to report achieved figures as fractions
// of what this machine can do, measured in the same run.
//
// The bandwidth ceiling must be an upper bound for every kernel: a decode row above
// 100% of it means the probe is wrong, not that the kernel beat the bus. So it is the
// best of several access patterns (1, 4 and 8 streams per thread, with and without
// software prefetch, the widest loads the CPU has) over both kinds of memory weights
// live in: an owned buffer (converted weights) and mapped file pages (zero-copy loads).
#pragma once

#include <string>
#include <vector>

namespace loom::bench {

struct BandwidthVariant {
  std::string name;  // e.g. "owned 4 streams prefetch"
  double gbs = 0.0;  // best of its runs, 1e9 bytes per second
};
struct BandwidthProbe {
  double best_gbs = 0.0;
  std::string best;  // the variant that reached it
  std::vector<BandwidthVariant> variants;
};

// Every variant on `threads` threads (a 2 GiB owned buffer, a 1 GiB mapped file).
BandwidthProbe probe_read_bandwidth(int threads);
// probe_read_bandwidth(threads).best_gbs.
double measure_read_bandwidth_gbs(int threads);
// The name of the probe's best variant over one kind of memory ("owned" or "mapped"),
// empty when it has none.
std::string best_variant_over(const BandwidthProbe& probe, const std::string& memory);
// The best of `passes` passes of one variant (a name from BandwidthProbe::variants, e.g.
// the best one of a full probe; 0 for an unknown name), after untimed passes until the
// rate settles: a probe quick enough (about a second) to take beside each timed run, on
// a machine whose bandwidth drifts from minute to minute. With `window_bytes` (0: the
// whole buffer) the passes read only the buffer's first window_bytes, again and again, as
// a decode step reads a model's weights: a working set not far past the last-level cache
// keeps part of itself there between passes (on the Zen 5 kind, 2 threads: a 69 MB
// window 80-86 GB/s, 130 MB 51-61, 2 GiB 45-51), and a kernel reading weights of that
// size reaches that rate, not the rate over the whole buffer. Small windows take more
// passes, at least 512 MiB read in all.
double measure_read_variant_gbs(int threads, const std::string& variant, int passes, size_t window_bytes = 0);
// GFLOP/s of independent fp32 FMA chains on `threads` threads (AVX-512 when present).
double measure_fma_peak_gflops(int threads);
// Giga int8 operations per second (a multiply and an add per int8 product) on `threads`
// threads, in the instruction that makes the quantized kernels' products: VPDPBUSD with
// AVX512-VNNI, else VPMADDUBSW (AVX2), whose 16-bit pair sums the nibble formats add up
// before widening; the byte formats (q8_0, gq8) take two a product on AVX2, so half of
// this peak is their ceiling there.
double measure_int8_dot_peak_gops(int threads);

// Time the threads did not run although they had work: each of `threads` threads spins
// on the clock for `seconds` and counts every step of more than 10 us as a gap (on the
// VMs of this project's kind, the host taking the vCPU: about 1300 gaps a second of
// 20-50 us each, and a few of a millisecond or more, on either vCPU; none of them seen
// by the guest's scheduler). A decode step is dozens of short parallel sections, each
// done only when its last thread is: a gap on any thread delays the section, so such a
// pass loses about `any_thread` of its time, where a single stream of work (the
// bandwidth probe: a thread in a gap leaves the bus to the others) loses about
// `per_thread` or less.
struct SchedulingGaps {
  double per_thread = 0.0;  // mean over the threads of the fraction of time in gaps
  double any_thread = 0.0;  // fraction of time at least one thread was in a gap
  double gaps_per_second = 0.0;  // per thread
};
SchedulingGaps measure_scheduling_gaps(int threads, double seconds = 1.0);
// Measures them for a second and prints a "machine:" line: what a decode's share of the
// bandwidth ceiling cannot win back on this machine.
void print_scheduling_gaps(int threads);

}  // namespace loom::bench
