// Internal: the AVX2 transposes of the plain panels' packing (packing_x86.cpp). Each
// packs rows r0..r0 + 7 of one group (16 columns) of an f32_x64 / f16_x64 / bf16_x64
// panel: row r0 + i's 16 elements at row0 + i * row_stride, into `group` (64 rows x 16
// columns, column-major). The caller checks the CPU has AVX2.
#pragma once

#include <cstdint>

namespace loom::kernels {

void pack_plain_rows16_avx2(const uint8_t* row0, int64_t row_stride, int64_t r0, uint8_t* group);
void pack_plain_rows32_avx2(const uint8_t* row0, int64_t row_stride, int64_t r0, uint8_t* group);

}  // namespace loom::kernels
