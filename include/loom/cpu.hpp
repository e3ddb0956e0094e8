// loom::cpu — what the processor can do, detected once at run time, and which kernel
// family (ISA level) loom's hand-written kernels use. Every kernel has a portable
// scalar version; faster ones are chosen at run time, so one binary runs everywhere.
// The level can be capped with LOOM_ISA=scalar|avx2|avx512 (environment) or
// set_isa_cap() (tests use it to check each kernel family against the scalar one).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace loom {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512_bf16 = false;
  bool avx512_vnni = false;
  bool avx_vnni = false;
  bool amx_tile = false;
  bool amx_bf16 = false;
  bool amx_int8 = false;
  // Who made it: a kernel tuned on measurements of one microarchitecture asks these
  // (e.g. Zen 4 is AuthenticAMD family 0x19 with AVX-512: the matvec's prefetch distance).
  bool amd = false;  // vendor string "AuthenticAMD"
  int family = 0;    // display family: base family + extended family
};

enum class Isa : int { scalar = 0, avx2 = 1, avx512 = 2 };

const CpuFeatures& cpu_features() noexcept;
std::string_view isa_name(Isa isa) noexcept;
// The best level this CPU (and OS) supports.
Isa best_supported_isa() noexcept;
// The level kernels use now: min(best supported, cap).
Isa active_isa() noexcept;
// The active level with the extensions loom's kernels pick by (e.g. "avx512+vnni+bf16",
// "avx2+avxvnni", "scalar"): what a kernel-native layout was chosen for.
std::string isa_description();
// Every level this CPU supports, lowest first (for tests).
std::vector<Isa> supported_isas();
// Caps the level (clamped to what the CPU supports). Not thread-safe against running
// kernels: call before work starts.
void set_isa_cap(Isa cap) noexcept;

}  // namespace loom
