// loom::Storage and loom::Tensor — the internal tensor representation.
//
// Storage is a block of bytes on a device: either an owned, 64-byte aligned buffer, or
// a read-only view into a MappedFile (which the Storage keeps alive). A Tensor is a
// Storage plus a byte offset, shape, element strides, dtype, layout tag and device.
// Views, slices and reshapes never copy and share the Storage (std::shared_ptr);
// Tensor::copy() is the only way to duplicate bytes. Tensors viewing a mapping are
// read-only: mutable_data() on them throws.
//
// Thread-safety: a Tensor is a value; reading the same Tensor from many threads is
// fine, writing its bytes needs the caller's synchronisation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "loom/dtype.hpp"
#include "loom/mapped_file.hpp"
#include "loom/shape.hpp"

namespace loom {

enum class Device : uint8_t { cpu = 0, cuda = 1 /* reserved: no CUDA backend yet */ };
std::string_view device_name(Device device) noexcept;

// How a 2-D weight's bytes are arranged relative to its logical [out, in] shape.
enum class Layout : uint8_t {
  row_major = 0,   // logical shape, row-major
  transposed = 1,  // bytes are the [in, out] transpose (e.g. GPT-2 Conv1D) of the shape
  repacked = 2,    // kernel-specific interleaving; only the owning kernel reads it
};
std::string_view layout_name(Layout layout) noexcept;

// The kernel tag of a Layout::repacked tensor: which interleaving its bytes follow (the
// table in src/tensor/packing.cpp says, per packing, its dtype, panel height and bytes).
// Tensors of any other layout have Packing::none. A load option (LoadOptions::repack)
// makes them; the exporter and the pack writer turn them back into rows.
enum class Packing : uint8_t {
  none = 0,
  q8_0_x16 = 1,  // q8_0 in panels of 16 rows: 4 columns of each row side by side
  q4_k_x16 = 2,  // q4_k in panels of 16 rows: 4 bytes of nibbles of each row side by side
  q4_0_x16 = 3,  // q4_0 in panels of 16 rows: 4 bytes of nibbles of each row side by side
  q6_k_x16 = 4,  // q6_k in panels of 16 rows: 4 low-nibble and 4 high-bit bytes of each row side by side
  q5_k_x16 = 5,  // q5_k in panels of 16 rows: q4_k_x16's nibbles, each vector's fifth bits as a 64-bit mask
  // loom's group types in panels of 16 rows: per group the 16 scales (and gq4's zero
  // points), then each 32-column run as q8_0_x16's / q4_0_x16's vectors.
  gq8_32_x16 = 6,
  gq8_64_x16 = 7,
  gq8_128_x16 = 8,
  gq4_32_x16 = 9,
  gq4_64_x16 = 10,
  gq4_128_x16 = 11,
  // q4_1, q5_0, q5_1 in panels of 16 rows: q4_0_x16's vectors, with the mins (q4_1, q5_1)
  // and the fifth bits as 64-bit masks (q5_0, q5_1).
  q4_1_x16 = 12,
  q5_0_x16 = 13,
  q5_1_x16 = 14,
  // q2_k, q3_k in panels of 16 rows: q6_k_x16's shape, 4 bytes of 2-bit quants (and q3_k's
  // high bits) of each row side by side, the scales as bytes.
  q2_k_x16 = 15,
  q3_k_x16 = 16,
  // f32, f16, bf16 in panels of 64 rows: column k's 64 values side by side, so one
  // vector load gives one column of 16 rows (a broadcast-GEMM's operand).
  f32_x64 = 17,
  f16_x64 = 18,
  bf16_x64 = 19,
};
std::string_view packing_name(Packing packing) noexcept;

class Storage {
 public:
  static constexpr size_t kAlignment = 64;

  // An owned, uninitialised, 64-byte aligned buffer. Throws Error(out_of_memory).
  static std::shared_ptr<Storage> allocate(size_t bytes, Device device = Device::cpu);
  // A read-only view of [offset, offset + bytes) of a mapped file.
  static std::shared_ptr<Storage> view(std::shared_ptr<const MappedFile> file, uint64_t offset,
                                       uint64_t bytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  const std::byte* data() const noexcept { return data_; }
  // Throws Error(invalid_argument) for a read-only (mapped) storage.
  std::byte* mutable_data();
  size_t size() const noexcept { return size_; }
  Device device() const noexcept { return device_; }
  bool is_mapped() const noexcept { return file_ != nullptr; }
  const std::shared_ptr<const MappedFile>& file() const noexcept { return file_; }
  uint64_t file_offset() const noexcept { return file_offset_; }

  // Process-wide accounting of owned bytes (mapped views are not counted).
  static int64_t owned_bytes_live() noexcept;
  static int64_t owned_bytes_peak() noexcept;
  static void reset_owned_bytes_peak() noexcept;

 private:
  Storage() = default;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  Device device_ = Device::cpu;
  bool owned_ = false;
  std::shared_ptr<const MappedFile> file_;
  uint64_t file_offset_ = 0;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false
  // A contiguous tensor over `storage` starting at `byte_offset`. Throws when the bytes
  // the shape needs run past the storage.
  Tensor(std::shared_ptr<Storage> storage, uint64_t byte_offset, Shape shape, DType dtype,
         Layout layout = Layout::row_major);
  // A Layout::repacked tensor of logical shape `shape` whose bytes follow `packing`
  // (which must match dtype; its nbytes() is the packing's, rows padded to whole panels).
  static Tensor packed(std::shared_ptr<Storage> storage, uint64_t byte_offset, Shape shape, DType dtype,
                       Packing packing);

  // A new owned, contiguous tensor (uninitialised / zero-filled).
  static Tensor empty(const Shape& shape, DType dtype, Layout layout = Layout::row_major);
  static Tensor zeros(const Shape& shape, DType dtype, Layout layout = Layout::row_major);

  bool defined() const noexcept { return storage_ != nullptr; }
  const Shape& shape() const noexcept { return shape_; }
  const Strides& strides() const noexcept { return strides_; }
  DType dtype() const noexcept { return dtype_; }
  Layout layout() const noexcept { return layout_; }
  Packing packing() const noexcept { return packing_; }
  Device device() const noexcept { return storage_ ? storage_->device() : Device::cpu; }
  int64_t numel() const { return shape_.numel(); }
  // Bytes of the elements (a contiguous tensor's footprint).
  int64_t nbytes() const;
  bool is_contiguous() const noexcept;
  bool is_mapped() const noexcept { return storage_ && storage_->is_mapped(); }

  const std::shared_ptr<Storage>& storage() const noexcept { return storage_; }
  uint64_t byte_offset() const noexcept { return byte_offset_; }
  const void* raw_data() const noexcept;
  void* mutable_raw_data();
  template <typename T>
  const T* data() const noexcept {
    return static_cast<const T*>(raw_data());
  }
  template <typename T>
  T* mutable_data() {
    return static_cast<T*>(mutable_raw_data());
  }

  // Views (no copy). slice() keeps `length` entries of `axis` from `start`; for
  // quantized dtypes only whole rows can be sliced (any axis but the last). A repacked
  // tensor is not sliced, reshaped or transposed (its rows are interleaved): they throw.
  Tensor slice(int axis, int64_t start, int64_t length) const;
  // Same elements, new shape; the tensor must be contiguous and numel must match.
  Tensor reshape(const Shape& shape) const;
  // A 2-D view with the two axes swapped (strides swapped; plain dtypes only).
  Tensor transpose2d() const;
  Tensor with_layout(Layout layout) const;
  // A deep, contiguous, owned copy.
  Tensor copy() const;
  bool shares_storage_with(const Tensor& other) const noexcept {
    return storage_ && storage_ == other.storage_;
  }
  std::string describe() const;  // "f32[4, 8] row_major cpu"

 private:
  // Throws Error(invalid_argument) unless nbytes() from byte_offset_ fit the storage.
  void check_storage() const;

  std::shared_ptr<Storage> storage_;
  uint64_t byte_offset_ = 0;
  Shape shape_;
  Strides strides_;
  DType dtype_ = DType::f32;
  Layout layout_ = Layout::row_major;
  Packing packing_ = Packing::none;
};

}  // namespace loom
