// Many owned tensors moved into one buffer.
//
// Converting or quantizing a model matrix by matrix (a draft copy, above all) leaves one
// allocation per tensor, most of them under the 4 MiB from which Storage asks for
// transparent huge pages. Streamed once per token from 4 KiB pages, such weights cost a
// page walk every 4 KiB, and where the host's paging is virtualized the first pass over
// them after a while ran at ~1 GB/s (docs/speculative.md). One buffer for all of them is
// one large allocation: huge pages, one stream of memory, one entry in the allocation
// accounting.
#pragma once

#include <span>

#include "loom/tensor.hpp"

namespace loom {

// Copies the bytes of every defined tensor in `tensors` into one new owned buffer (each
// at a 64-byte aligned offset) and repoints the tensor at its copy: same shape, dtype,
// layout and packing, same values. Tensors must be contiguous (row-major or packed).
// Tensors listed twice (or sharing storage and offset) share one copy. The old buffers
// are released when nothing else holds them. Not thread-safe on the same tensors.
void gather_into_one_buffer(std::span<Tensor* const> tensors);

}  // namespace loom
