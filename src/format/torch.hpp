// Internal: PyTorch `torch.save` zip archives (torch >= 1.6) as weight files.
//
// The archive holds `<archive>/data.pkl` (the pickled state dict, read by the
// restricted unpickler), one stored entry `<archive>/data/<key>` per storage, and
// bookkeeping entries (`version`, `byteorder`, ...). A tensor record points straight
// into its storage's entry: offset = entry data + storage_offset x element size.
#pragma once

#include "format/byte_source.hpp"
#include "format/parsed.hpp"
#include "format/torch_pickle.hpp"

namespace loom::format {

inline constexpr uint64_t kTorchMaxPickleBytes = 1u << 30;

ParsedWeights parse_torch(const ByteSource& source, const UnpickleLimits& limits = {});

// True when `head` starts like a pre-1.6 torch.save file (a bare pickle stream).
bool looks_like_legacy_torch(std::span<const std::byte> head) noexcept;

}  // namespace loom::format
