// Internal: include this (not <immintrin.h>) in files with hand-written x86 kernels.
// Each kernel function carries its own target attribute, so files build for any
// -march and the run-time dispatcher (loom/cpu.hpp) picks what the CPU supports.
#pragma once

#include <immintrin.h>

// (GCC 12's false -Wmaybe-uninitialized in its AVX-512 headers is switched off for the
// whole build in cmake/LoomCompilerFlags.cmake.)

#define LOOM_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define LOOM_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define LOOM_TARGET_AVX512_BF16 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c")))
#define LOOM_TARGET_AVX512_VNNI \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
