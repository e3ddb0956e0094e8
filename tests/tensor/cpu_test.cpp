// loom::cpu_features()'s vendor and family against what the kernel reports in
// /proc/cpuinfo (the kernels that are tuned per microarchitecture ask these).
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include "loom/cpu.hpp"

TEST_CASE("cpu: vendor and family match /proc/cpuinfo") {
  std::ifstream in("/proc/cpuinfo");
  std::string line, vendor;
  int family = -1;
  while (std::getline(in, line) && (vendor.empty() || family < 0)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos || colon + 2 > line.size()) continue;
    const std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    const std::string value = line.substr(colon + 2);
    if (key == "vendor_id") vendor = value;
    if (key == "cpu family") family = std::stoi(value);
  }
  if (vendor.empty() || family < 0) {
    WARN("SKIPPED: /proc/cpuinfo names no vendor_id or cpu family here");
    return;
  }
  const loom::CpuFeatures& f = loom::cpu_features();
  CHECK(f.amd == (vendor == "AuthenticAMD"));
  CHECK(f.family == family);
}
