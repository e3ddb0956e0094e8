// Measures the two ceilings a CPU inference engine runs into: streaming-read memory
// bandwidth (decode reads every weight once per token) and fp32 FMA throughput
// (prefill is matrix-matrix work). Used by the benchmarks to report achieved figures
// as fractions of what this machine can do, measured in the same run.
#pragma once

namespace loom::bench {

// GB/s (1e9 bytes) of reading a 2 GiB array with `threads` threads: the best of a
// single-stream sum and a four-stream prefetched sum, five runs each.
double measure_read_bandwidth_gbs(int threads);
// GFLOP/s of independent fp32 FMA chains on `threads` threads (AVX-512 when present).
double measure_fma_peak_gflops(int threads);

}  // namespace loom::bench
