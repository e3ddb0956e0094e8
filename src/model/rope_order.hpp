// Internal: the two row orders of q/k projections. Hugging Face keeps each head's rows
// in rotate-half order (pairs i and i + d/2); llama.cpp's GGUF conversion permutes them
// so pairs are adjacent (2i, 2i+1). Exporting to GGUF applies the permutation; loading a
// GGUF keeps its order and marks the weights (ModelWeights::rope_interleaved).
#pragma once

#include <cstdint>

#include "loom/tensor.hpp"

namespace loom::rope_order {

// Rows of each of `n_heads` heads reordered: GGUF row 2j <- HF row j, 2j+1 <- j + d/2.
// Works on matrices [n_heads*head_dim, cols] of any dtype and on bias vectors.
Tensor half_to_interleaved(const Tensor& t, int64_t n_heads, int64_t head_dim);
Tensor interleaved_to_half(const Tensor& t, int64_t n_heads, int64_t head_dim);

}  // namespace loom::rope_order
