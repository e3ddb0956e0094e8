#include "common/huge_pages.hpp"

#include <sys/mman.h>

namespace loom {

namespace {
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kHugePageMinBuffer = size_t{4} << 20;
}  // namespace

HugePageRange huge_page_range(const void* p, size_t bytes) noexcept {
  if (p == nullptr || bytes < kHugePageMinBuffer) return {};
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = (begin + kHugePage - 1) / kHugePage * kHugePage;
  const uintptr_t last = (begin + bytes) / kHugePage * kHugePage;
  return last > first ? HugePageRange{first, last} : HugePageRange{};
}

void advise_huge_pages(void* p, size_t bytes) noexcept {
#ifdef MADV_HUGEPAGE
  const HugePageRange r = huge_page_range(p, bytes);
  if (r.last > r.first) ::madvise(reinterpret_cast<void*>(r.first), r.last - r.first, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

}  // namespace loom
