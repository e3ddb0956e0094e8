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

#include <cstdint>
#include <span>

#include "loom/tensor.hpp"

namespace loom {

// Copies the bytes of every defined tensor in `tensors` into one new owned buffer, in
// order (each at an `align`-byte aligned offset: 1 puts them back to back) and repoints
// the tensor at its copy: same shape, dtype, layout and packing, same values. Tensors
// must be contiguous (row-major or packed). Tensors listed twice (or sharing storage and
// offset) share one copy. The old buffers are released when nothing else holds them. Not
// thread-safe on the same tensors.
void gather_into_one_buffer(std::span<Tensor* const> tensors, uint64_t align = 64);

// The one matrix whose rows are the rows of `parts` in order, as a view of their buffer,
// when they lie back to back in one buffer (gather_into_one_buffer with align 1) with the
// same dtype, layout, packing and row length, and every part but the last fills whole
// panels of its packing (a panel's padding rows would otherwise sit between two parts);
// otherwise an undefined tensor. How the forward pass multiplies q, k and v in one
// product: each output row is computed as in its own part's product (a kernel's rows do
// not depend on the range they are computed in), so the bits are the same.
Tensor stacked_rows_view(std::span<const Tensor* const> parts);

}  // namespace loom
