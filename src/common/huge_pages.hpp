// Internal: asking for transparent huge pages on a large buffer about to be filled.
#pragma once

#include <cstddef>
#include <cstdint>

namespace loom {

// The range advise_huge_pages asks about: the whole 2 MiB pages inside [p, p + bytes),
// as [first, last) addresses; first == last (nothing) for buffers under 4 MiB.
struct HugePageRange {
  uintptr_t first = 0;
  uintptr_t last = 0;
};
HugePageRange huge_page_range(const void* p, size_t bytes) noexcept;

// Asks the kernel for 2 MiB pages on the 2 MiB-aligned interior of [p, p + bytes), where
// transparent huge pages are enabled for madvise'd ranges (Debian's default); a no-op
// elsewhere and for buffers under 4 MiB. Call it before the buffer's pages are first
// written: a 4 KiB page costs a fault when first touched (on the VMs of this project's
// kind several microseconds each, so a fresh 8 MiB table costs 2048 of them, against
// four with huge pages), and a buffer read at random (a hash table) or streamed (weights:
// the hardware prefetchers stop at every 4 KiB boundary) runs faster on 2 MiB pages.
// Harmless when it cannot: the buffer simply stays on 4 KiB pages.
void advise_huge_pages(void* p, size_t bytes) noexcept;

}  // namespace loom
