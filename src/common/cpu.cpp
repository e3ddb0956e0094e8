#include "loom/cpu.hpp"

#include <cpuid.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace loom {

namespace {

uint64_t read_xcr0() {
  uint32_t eax = 0;
  uint32_t edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
  const bool amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;  // "Auth" "enti" "cAMD"
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  f.amd = amd;
  f.family = static_cast<int>(((a >> 8) & 0xFu) + ((a >> 20) & 0xFFu));
  const bool osxsave = (c >> 27) & 1;
  const bool avx = (c >> 28) & 1;
  // Without AVX enabled by the OS, no vector feature counts (only vendor and family).
  if (!osxsave || !avx) return f;
  const uint64_t xcr0 = read_xcr0();
  const bool os_avx = (xcr0 & 0x6) == 0x6;            // XMM and YMM state
  const bool os_avx512 = (xcr0 & 0xE6) == 0xE6;       // + opmask, ZMM_Hi256, Hi16_ZMM
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;    // XTILECFG and XTILEDATA
  if (!os_avx) return f;
  f.fma = (c >> 12) & 1;
  f.f16c = (c >> 29) & 1;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2 = (b >> 5) & 1;
  if (os_avx512) {
    f.avx512f = (b >> 16) & 1;
    f.avx512dq = (b >> 17) & 1;
    f.avx512bw = (b >> 30) & 1;
    f.avx512vl = (b >> 31) & 1;
    f.avx512_vnni = (c >> 11) & 1;
  }
  if (os_amx) {
    f.amx_bf16 = (d >> 22) & 1;
    f.amx_tile = (d >> 24) & 1;
    f.amx_int8 = (d >> 25) & 1;
  }
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) {
    f.avx_vnni = (a1 >> 4) & 1;
    if (os_avx512) f.avx512_bf16 = (a1 >> 5) & 1;
  }
  return f;
}

Isa detect_best(const CpuFeatures& f) {
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.f16c && f.fma && f.avx2) {
    return Isa::avx512;
  }
  if (f.avx2 && f.fma && f.f16c) return Isa::avx2;
  return Isa::scalar;
}

Isa cap_from_environment() {
  const char* env = std::getenv("LOOM_ISA");
  if (env == nullptr) return Isa::avx512;
  const std::string value(env);
  if (value == "scalar") return Isa::scalar;
  if (value == "avx2") return Isa::avx2;
  return Isa::avx512;
}

std::atomic<int>& isa_cap() {
  static std::atomic<int> cap{static_cast<int>(cap_from_environment())};
  return cap;
}

}  // namespace

const CpuFeatures& cpu_features() noexcept {
  static const CpuFeatures features = detect();
  return features;
}

std::string_view isa_name(Isa isa) noexcept {
  switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
  }
  return "unknown";
}

Isa best_supported_isa() noexcept {
  static const Isa best = detect_best(cpu_features());
  return best;
}

Isa active_isa() noexcept {
  const int cap = isa_cap().load(std::memory_order_relaxed);
  const int best = static_cast<int>(best_supported_isa());
  return static_cast<Isa>(cap < best ? cap : best);
}

std::string isa_description() {
  const Isa isa = active_isa();
  const CpuFeatures& f = cpu_features();
  std::string out(isa_name(isa));
  if (isa == Isa::avx512) {
    if (f.avx512_vnni) out += "+vnni";
    if (f.avx512_bf16) out += "+bf16";
  } else if (isa == Isa::avx2 && f.avx_vnni) {
    out += "+avxvnni";
  }
  return out;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (int i = 0; i <= static_cast<int>(best_supported_isa()); ++i) out.push_back(static_cast<Isa>(i));
  return out;
}

void set_isa_cap(Isa cap) noexcept { isa_cap().store(static_cast<int>(cap)); }

}  // namespace loom
