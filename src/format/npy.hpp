// Internal: the .npy reader.
//
// Layout: "\x93NUMPY", u8 major, u8 minor, header length (u16 in v1, u32 in v2/v3),
// then a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// padded with spaces and a newline, then the array's bytes to the end of the file.
#pragma once

#include <cstdint>

#include "format/byte_source.hpp"
#include "format/parsed.hpp"

namespace loom::format {

inline constexpr uint64_t kNpyMaxHeader = 1u << 20;

struct NpyHeader {
  DType dtype = DType::f32;
  Shape shape;
  uint64_t data_offset = 0;
  uint64_t nbytes = 0;
};

// Parses the header of a whole .npy file and checks that its data fills the file.
NpyHeader parse_npy(const ByteSource& source);
// The numpy descr loom writes for a dtype ("<f4"), or nullopt when .npy cannot hold it.
std::optional<std::string_view> npy_descr(DType dtype) noexcept;

}  // namespace loom::format
