#include "loom/tensor.hpp"

#include <atomic>
#include <cstring>
#include <new>

#include "common/checked.hpp"
#include "common/huge_pages.hpp"
#include "loom/error.hpp"
#include "tensor/packing.hpp"

namespace loom {

namespace {
std::atomic<int64_t> g_owned_live{0};
std::atomic<int64_t> g_owned_peak{0};

void account_allocation(int64_t bytes) {
  const int64_t now = g_owned_live.fetch_add(bytes) + bytes;
  int64_t peak = g_owned_peak.load();
  while (now > peak && !g_owned_peak.compare_exchange_weak(peak, now)) {
  }
}
}  // namespace

std::string_view device_name(Device device) noexcept {
  switch (device) {
    case Device::cpu: return "cpu";
    case Device::cuda: return "cuda";
  }
  return "unknown";
}

std::string_view layout_name(Layout layout) noexcept {
  switch (layout) {
    case Layout::row_major: return "row_major";
    case Layout::transposed: return "transposed";
    case Layout::repacked: return "repacked";
  }
  return "unknown";
}

std::string_view packing_name(Packing packing) noexcept { return packing_info(packing).name; }

// ---- Storage ----

// Large owned buffers hold converted weights that decode streams once per token. On
// 4 KiB pages such a stream is physically scattered and the hardware prefetchers stop
// at every page boundary; measured on the small bench model, f16 decode ran at 50
// instead of 70 tokens/s when its buffer came from reused (fragmented) memory. So each
// asks for 2 MiB pages (advise_huge_pages, common/huge_pages.hpp).
std::shared_ptr<Storage> Storage::allocate(size_t bytes, Device device) {
  if (device != Device::cpu) {
    throw Error(ErrorCode::unsupported, "only the CPU device is implemented");
  }
  std::shared_ptr<Storage> s(new Storage());
  // Round up so that a zero-byte allocation still has a valid, unique pointer.
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = ::operator new(rounded == 0 ? kAlignment : rounded, std::align_val_t{kAlignment},
                           std::nothrow);
  if (p == nullptr) {
    throw Error(ErrorCode::out_of_memory, "cannot allocate " + std::to_string(bytes) + " bytes");
  }
  advise_huge_pages(p, rounded);
  s->data_ = static_cast<std::byte*>(p);
  s->size_ = bytes;
  s->owned_ = true;
  s->device_ = device;
  account_allocation(static_cast<int64_t>(bytes));
  return s;
}

std::shared_ptr<Storage> Storage::view(std::shared_ptr<const MappedFile> file, uint64_t offset,
                                       uint64_t bytes) {
  auto span = file->bytes(offset, bytes);  // bounds-checked, throws with file context
  std::shared_ptr<Storage> s(new Storage());
  // A zero-length view still needs a non-null pointer; any in-file address will do.
  s->data_ = const_cast<std::byte*>(span.empty() ? file->bytes(0, 0).data() : span.data());
  s->size_ = bytes;
  s->file_ = std::move(file);
  s->file_offset_ = offset;
  return s;
}

Storage::~Storage() {
  if (owned_) {
    ::operator delete(data_, std::align_val_t{kAlignment});
    g_owned_live.fetch_sub(static_cast<int64_t>(size_));
  }
}

std::byte* Storage::mutable_data() {
  if (!owned_) {
    throw Error(ErrorCode::invalid_argument, "storage is a read-only view of a mapped file",
                {.file = file_ ? file_->path() : std::string()});
  }
  return data_;
}

int64_t Storage::owned_bytes_live() noexcept { return g_owned_live.load(); }
int64_t Storage::owned_bytes_peak() noexcept { return g_owned_peak.load(); }
void Storage::reset_owned_bytes_peak() noexcept { g_owned_peak.store(g_owned_live.load()); }

// ---- Tensor ----

Tensor::Tensor(std::shared_ptr<Storage> storage, uint64_t byte_offset, Shape shape, DType dtype,
               Layout layout)
    : storage_(std::move(storage)),
      byte_offset_(byte_offset),
      shape_(shape),
      strides_(contiguous_strides(shape)),
      dtype_(dtype),
      layout_(layout) {
  check_storage();
}

void Tensor::check_storage() const {
  if (!storage_) throw Error(ErrorCode::invalid_argument, "tensor needs a storage");
  const auto need = static_cast<uint64_t>(nbytes());
  if (byte_offset_ > storage_->size() || need > storage_->size() - byte_offset_) {
    throw Error(ErrorCode::invalid_argument,
                std::string(packing_ != Packing::none ? "packed " : "") + "tensor of " + std::to_string(need) +
                    " bytes at offset " + std::to_string(byte_offset_) + " exceeds its storage of " +
                    std::to_string(storage_->size()) + " bytes");
  }
}

Tensor Tensor::packed(std::shared_ptr<Storage> storage, uint64_t byte_offset, Shape shape, DType dtype,
                      Packing packing) {
  const PackingInfo& info = packing_info(packing);
  if (!packing_fits(packing, dtype, shape)) {
    throw Error(ErrorCode::invalid_argument, "a " + std::string(dtype_name(dtype)) + shape.to_string() +
                                                 " tensor cannot have the packing " + std::string(info.name));
  }
  Tensor out;
  out.storage_ = std::move(storage);
  out.byte_offset_ = byte_offset;
  out.shape_ = shape;
  out.strides_ = contiguous_strides(shape);
  out.dtype_ = dtype;
  out.layout_ = Layout::repacked;
  out.packing_ = packing;
  out.check_storage();
  return out;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Layout layout) {
  const int64_t bytes = dtype_bytes(dtype, shape.numel(), shape.row_length());
  return Tensor(Storage::allocate(static_cast<size_t>(bytes)), 0, shape, dtype, layout);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Layout layout) {
  Tensor t = empty(shape, dtype, layout);
  std::memset(t.mutable_raw_data(), 0, static_cast<size_t>(t.nbytes()));
  return t;
}

int64_t Tensor::nbytes() const {
  if (packing_ != Packing::none) return packed_nbytes(packing_, shape_);
  return dtype_bytes(dtype_, shape_.numel(), shape_.row_length());
}

bool Tensor::is_contiguous() const noexcept { return strides_ == contiguous_strides(shape_); }

const void* Tensor::raw_data() const noexcept {
  return storage_ ? storage_->data() + byte_offset_ : nullptr;
}

void* Tensor::mutable_raw_data() {
  if (!storage_) throw Error(ErrorCode::invalid_argument, "tensor is undefined");
  return storage_->mutable_data() + byte_offset_;
}

namespace {
void refuse_packed(const Tensor& t, std::string_view what) {
  if (t.packing() == Packing::none) return;
  throw Error(ErrorCode::invalid_argument, "cannot " + std::string(what) + " a repacked tensor (" +
                                               std::string(packing_name(t.packing())) + "): unpack it first");
}
}  // namespace

Tensor Tensor::slice(int axis, int64_t start, int64_t length) const {
  refuse_packed(*this, "slice");
  if (axis < 0 || axis >= shape_.rank()) {
    throw Error(ErrorCode::invalid_argument, "slice axis " + std::to_string(axis) +
                                                 " out of range for " + shape_.to_string());
  }
  const int64_t extent = shape_[axis];
  if (start < 0 || length < 0 || start > extent || length > extent - start) {
    throw Error(ErrorCode::invalid_argument,
                "slice [" + std::to_string(start) + ", +" + std::to_string(length) +
                    ") out of range for axis " + std::to_string(axis) + " of " +
                    shape_.to_string());
  }
  Tensor out = *this;
  std::array<int64_t, Shape::kMaxRank> dims{};
  for (int i = 0; i < shape_.rank(); ++i) dims[static_cast<size_t>(i)] = shape_[i];
  dims[static_cast<size_t>(axis)] = length;
  out.shape_ = Shape(std::span<const int64_t>(dims.data(), static_cast<size_t>(shape_.rank())));
  if (is_quantized(dtype_)) {
    if (axis == shape_.rank() - 1) {
      throw Error(ErrorCode::invalid_argument,
                  "a block-quantized tensor can only be sliced by whole rows");
    }
    if (!is_contiguous()) {
      throw Error(ErrorCode::invalid_argument, "cannot slice a non-contiguous quantized tensor");
    }
    // Bytes of one step along `axis` = bytes of the sub-tensor below it.
    int64_t inner = 1;
    for (int i = axis + 1; i < shape_.rank(); ++i) inner = checked_mul(inner, shape_[i]);
    const int64_t step_bytes = dtype_bytes(dtype_, inner, shape_.row_length());
    out.byte_offset_ = byte_offset_ + static_cast<uint64_t>(checked_mul(start, step_bytes));
    out.strides_ = contiguous_strides(out.shape_);
    // Outer axes keep their original step so the view addresses the right rows.
    for (int i = 0; i < axis; ++i) out.strides_.values[static_cast<size_t>(i)] = strides_[i];
    return out;
  }
  const int64_t elem = dtype_size(dtype_);
  out.byte_offset_ =
      byte_offset_ + static_cast<uint64_t>(checked_mul(checked_mul(start, strides_[axis]), elem));
  return out;
}

Tensor Tensor::reshape(const Shape& shape) const {
  refuse_packed(*this, "reshape");
  if (!is_contiguous()) {
    throw Error(ErrorCode::invalid_argument, "reshape needs a contiguous tensor");
  }
  if (shape.numel() != shape_.numel()) {
    throw Error(ErrorCode::invalid_argument,
                "cannot reshape " + shape_.to_string() + " to " + shape.to_string());
  }
  if (is_quantized(dtype_) && shape.row_length() % dtype_traits(dtype_).block_elems != 0) {
    throw Error(ErrorCode::invalid_argument,
                "reshape " + shape.to_string() + " splits a " + std::string(dtype_name(dtype_)) +
                    " block");
  }
  Tensor out = *this;
  out.shape_ = shape;
  out.strides_ = contiguous_strides(shape);
  return out;
}

Tensor Tensor::transpose2d() const {
  refuse_packed(*this, "transpose");
  if (shape_.rank() != 2) throw Error(ErrorCode::invalid_argument, "transpose2d needs rank 2");
  if (is_quantized(dtype_)) {
    throw Error(ErrorCode::invalid_argument, "cannot transpose a block-quantized tensor");
  }
  Tensor out = *this;
  out.shape_ = Shape{shape_[1], shape_[0]};
  out.strides_.values[0] = strides_[1];
  out.strides_.values[1] = strides_[0];
  return out;
}

Tensor Tensor::with_layout(Layout layout) const {
  refuse_packed(*this, "relabel the layout of");
  Tensor out = *this;
  out.layout_ = layout;
  return out;
}

Tensor Tensor::copy() const {
  if (!defined()) return {};
  if (packing_ != Packing::none) {
    Tensor out = packed(Storage::allocate(static_cast<size_t>(nbytes())), 0, shape_, dtype_, packing_);
    std::memcpy(out.mutable_raw_data(), raw_data(), static_cast<size_t>(nbytes()));
    return out;
  }
  Tensor out = empty(shape_, dtype_, layout_);
  if (is_contiguous()) {
    std::memcpy(out.mutable_raw_data(), raw_data(), static_cast<size_t>(nbytes()));
    return out;
  }
  // Strided copy of a plain dtype: walk the index space in row-major order.
  const int64_t elem = dtype_size(dtype_);
  const int64_t n = numel();
  const int rank = shape_.rank();
  std::array<int64_t, Shape::kMaxRank> index{};
  const auto* src = static_cast<const std::byte*>(raw_data());
  auto* dst = static_cast<std::byte*>(out.mutable_raw_data());
  for (int64_t i = 0; i < n; ++i) {
    int64_t offset = 0;
    for (int a = 0; a < rank; ++a) offset += index[static_cast<size_t>(a)] * strides_[a];
    std::memcpy(dst + i * elem, src + offset * elem, static_cast<size_t>(elem));
    for (int a = rank - 1; a >= 0; --a) {
      if (++index[static_cast<size_t>(a)] < shape_[a]) break;
      index[static_cast<size_t>(a)] = 0;
    }
  }
  return out;
}

std::string Tensor::describe() const {
  std::string layout(layout_name(layout_));
  if (packing_ != Packing::none) layout += "(" + std::string(packing_name(packing_)) + ")";
  return std::string(dtype_name(dtype_)) + shape_.to_string() + " " + layout + " " + std::string(device_name(device()));
}

}  // namespace loom
