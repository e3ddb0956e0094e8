// Internal: the pages of a mapped file that a tensor views, and handing them back to the
// kernel once the tensor's bytes are no longer read (a conversion wrote them out, a
// repacking load copied them). MADV_DONTNEED on a read-only private mapping only drops
// this process's page-table entries: the page cache keeps the pages, and a page something
// still reads (a neighbour's first or last page shares it) faults back in. Without it a
// process that read a whole mapped source once kept it all resident.
#pragma once

#include <cstdint>
#include <memory>

#include "loom/mapped_file.hpp"
#include "loom/tensor.hpp"

namespace loom {

struct MappedPages {
  std::shared_ptr<const MappedFile> file;  // null: the tensor owns its bytes
  uint64_t offset = 0;
  uint64_t bytes = 0;

  static MappedPages of(const Tensor& t) {
    const std::shared_ptr<Storage>& s = t.storage();
    if (s == nullptr || !s->is_mapped()) return {};
    return {s->file(), s->file_offset() + t.byte_offset(), static_cast<uint64_t>(t.nbytes())};
  }
  void release() const {
    if (file != nullptr) file->advise(offset, bytes, AccessHint::dont_need);
  }
};

}  // namespace loom
