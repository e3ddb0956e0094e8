// libFuzzer harness: a loom pack's index.json. A real pack (written once by loom's
// pack writer from a tiny model) lives in a temporary directory; each input replaces its
// index.json, the pack is opened and every record it lists is read, so an index that
// points outside its data files shows up as an error or an ASan report; packed records
// (layout "repacked") are also unpacked, touching every byte of their panels.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "format/pack_format.hpp"
#include "fuzz/fuzz_tokenizers.hpp"
#include "loom/error.hpp"
#include "loom/format.hpp"
#include "tensor/packing.hpp"

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const fs::path pack = loom::fuzz::scratch_pack();
  {
    std::ofstream out(pack / "index.json", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    const auto source = loom::format::pack::open(pack, {});
    volatile uint64_t sink = 0;
    for (const auto& r : source->tensors()) {
      const loom::Tensor t = source->load(r);
      if (t.nbytes() > 0) sink = sink + static_cast<const uint8_t*>(t.raw_data())[t.nbytes() - 1];
      // A packed record's panels, shuffled back to rows: every byte the index claims.
      const loom::Tensor rows = loom::unpack(t);
      if (rows.nbytes() > 0) sink = sink + static_cast<const uint8_t*>(rows.raw_data())[0];
    }
    (void)sink;
  } catch (const loom::Error&) {
  }
  return 0;
}
